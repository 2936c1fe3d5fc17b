"""Issue 43: what PyTorch's fused attention kernels hold beyond their outputs, on this GPU.

For each configuration (dtype, batch, heads, sequence, head dimension, causal or not) and each backend a GPU
picks (FlashAttention, the memory-efficient kernel), the forward and the backward are run from a reset peak:
"kept" is allocated across the call, "scratch" the highest allocated inside it above what it kept (what the
kernel asked for and gave back). One JSON line per configuration, to stdout.

    python3 tests/gpu/attention_scratch.py > attention_scratch.jsonl
"""
import itertools
import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

OPS = {SDPBackend.FLASH_ATTENTION: "flash", SDPBackend.EFFICIENT_ATTENTION: "efficient"}


def measure(fn):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    kept = torch.cuda.memory_allocated() - before
    return out, kept, torch.cuda.max_memory_allocated() - before - kept


def one(backend, dtype, b, h, n, d, causal):
    if backend == SDPBackend.FLASH_ATTENTION and dtype == torch.float32:
        return None
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_()
               for _ in range(3))
    go = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    with sdpa_kernel([backend]):
        y, fk, fs = measure(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
        _, bk, bs = measure(lambda: torch.autograd.backward(y, go))
    row = {"backend": OPS[backend], "dtype": str(dtype).split(".")[1], "b": b, "h": h, "n": n, "d": d,
           "causal": causal, "forward_kept": fk, "forward_scratch": fs, "backward_kept": bk, "backward_scratch": bs}
    del q, k, v, go, y
    torch.cuda.empty_cache()
    return row


def main():
    for backend, dtype, b, h, n, d, causal in itertools.product(
            OPS, (torch.float32, torch.bfloat16, torch.float16), (1, 4, 16, 64), (6, 12), (128, 256, 1024),
            (64, 128), (False, True)):
        try:
            row = one(backend, dtype, b, h, n, d, causal)
        except Exception as e:  # noqa: BLE001 - a backend that refuses a configuration says so
            row = {"backend": OPS[backend], "dtype": str(dtype), "b": b, "h": h, "n": n, "d": d, "error": str(e)[:120]}
        if row:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
