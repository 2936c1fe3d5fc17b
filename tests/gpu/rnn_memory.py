#!/usr/bin/env python3
"""What cuDNN's RNNs hold on a GPU beside the tensors a CPU run makes (issue 41: an LSTM language model under
a 240 MiB cap completed batch 14 on the virtual device and not even batch 1 on an H100): the figures the
virtual device must model before it books nn.LSTM's cuDNN memory.

    python3 tests/gpu/rnn_memory.py [--quick]      # one JSON object per line, then a summary line

For each configuration (mode, input size, hidden size, layers, bidirectional, batch, sequence length, dtype)
it builds the module on the CPU, then measures on the GPU, each from an emptied cache and a reset peak:
  weights     memory_allocated after `.cuda()` against the parameters' own rounded bytes: what
              flatten_parameters' cuDNN weight buffer adds (PyTorch puts the weights in one buffer and makes
              the parameters views into it);
  forward     allocated after a training forward (output kept, graph kept) against the same forward with
              cuDNN off (torch.backends.cudnn.enabled = False: PyTorch's native kernels, which the virtual
              device runs): the extra is cuDNN's reserve space, kept for backward;
  peaks       the peak over forward and backward, with and without cuDNN: the workspaces;
  dropout     with dropout between layers, cuDNN keeps a dropout state buffer per device, made at the first
              such forward (the first configuration has it; the same without dropout follows);
  outside     the driver's used bytes (mem_get_info) not in PyTorch's reserved memory after the first cuDNN
              RNN call (cuDNN's own allocations, as library_ooms.py measures handles).
Every figure is in bytes; `rounded_params` is the sum of the parameters' sizes rounded to 512 B, as the
caching allocator takes them. The driver's and PyTorch's versions are printed first.
"""
import json
import sys

import torch

MIB = 1 << 20


def rounded(n):
    return max(512, (n + 511) // 512 * 512)


def driver_used():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def fresh():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def measure(mode, inp, hidden, layers, bidir, batch, seq, dtype, dropout=0.0):
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}[mode]
    torch.manual_seed(0)
    row = {"mode": mode, "input": inp, "hidden": hidden, "layers": layers, "bidirectional": bidir,
           "batch": batch, "seq": seq, "dtype": str(dtype).replace("torch.", ""), "dropout": dropout}
    results = {}
    for cudnn in (True, False):
        torch.backends.cudnn.enabled = cudnn
        base = fresh()
        m = cls(inp, hidden, num_layers=layers, bidirectional=bidir, dropout=dropout).to(dtype)  # (seq, batch, feature)
        params = sum(rounded(p.numel() * p.element_size()) for p in m.parameters())
        m = m.cuda()
        after_weights = torch.cuda.memory_allocated() - base
        x = torch.randn(seq, batch, inp, dtype=dtype).cuda().requires_grad_()
        before_fwd = torch.cuda.memory_allocated()
        used0, res0 = driver_used(), torch.cuda.memory_reserved()
        out, _ = m(x)
        torch.cuda.synchronize()
        after_fwd = torch.cuda.memory_allocated() - before_fwd
        used1, res1 = driver_used(), torch.cuda.memory_reserved()
        peak_fwd = torch.cuda.max_memory_allocated() - before_fwd
        out.float().pow(2).mean().backward()
        torch.cuda.synchronize()
        peak_all = torch.cuda.max_memory_allocated() - before_fwd
        results[cudnn] = {"weights": after_weights, "forward_kept": after_fwd, "forward_peak": peak_fwd,
                          "step_peak": peak_all, "outside": (used1 - used0) - (res1 - res0),
                          "rounded_params": params, "output": rounded(out.numel() * out.element_size())}
        del m, x, out
    torch.backends.cudnn.enabled = True
    row["cudnn"], row["native"] = results[True], results[False]
    row["weight_buffer_extra"] = results[True]["weights"] - results[True]["rounded_params"]
    row["reserve_extra"] = results[True]["forward_kept"] - results[False]["forward_kept"]
    row["step_peak_extra"] = results[True]["step_peak"] - results[False]["step_peak"]
    return row


def main():
    quick = "--quick" in sys.argv
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no GPU"}))
        return 125
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                      "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0)}))
    torch.ones(1, device="cuda")
    # cuDNN's handle and first-call allocations, before any measured configuration.
    warm = torch.nn.LSTM(8, 8).cuda()  # no dropout: its state buffer is measured in the first configuration
    warm(torch.randn(2, 1, 8, device="cuda"))[0].sum().backward()
    del warm
    configs = [("LSTM", 400, 400, 2, False, 20, 35, torch.float32, 0.2),   # the corpus's LSTM LM (tests/public)
               ("LSTM", 400, 400, 2, False, 1, 35, torch.float32, 0.2),
               ("LSTM", 400, 400, 2, False, 14, 35, torch.float32, 0.2),
               ("LSTM", 400, 400, 2, False, 64, 35, torch.float32, 0.2),
               ("LSTM", 400, 400, 2, False, 20, 35, torch.float32),
               ("LSTM", 256, 512, 2, False, 32, 64, torch.float32),
               ("LSTM", 256, 512, 2, False, 32, 256, torch.float32),
               ("LSTM", 512, 1024, 1, False, 32, 64, torch.float32),
               ("LSTM", 512, 1024, 3, False, 32, 64, torch.float32),
               ("LSTM", 256, 512, 2, True, 32, 64, torch.float32),
               ("LSTM", 256, 512, 2, False, 32, 64, torch.float16),
               ("GRU", 256, 512, 2, False, 32, 64, torch.float32),
               ("RNN", 256, 512, 2, False, 32, 64, torch.float32)]
    if quick:
        configs = configs[:3]
    rows = []
    for c in configs:
        row = measure(*c)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"summary": [{k: r[k] for k in ("mode", "hidden", "layers", "bidirectional", "batch", "seq",
                                                     "dtype", "dropout", "weight_buffer_extra", "reserve_extra",
                                                     "step_peak_extra")} for r in rows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
