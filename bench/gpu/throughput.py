#!/usr/bin/env python3
"""Training throughput of a small transformer with and without the shim, per PyTorch allocator mode.

Each measurement is a fresh process (the shim is preloaded or not); runs of the two kinds alternate so
that drift of the GPU's clocks hits both alike, and the figure is the ratio of the medians, measured in
one invocation:

    python3 bench/gpu/throughput.py --inject build/injector/liboomharness_inject.so [--reps 3] [--steps 60]

"With the shim" means an active shim (a control block, an event log and a cap far above the model's
needs, so every allocation goes through the ledger and the cap check) but no fault. Prints one JSON
line per mode and a Markdown table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = r'''
import os, sys, time, torch
torch.manual_seed(0)
steps, warmup = int(sys.argv[1]), int(sys.argv[2])
d, layers, seq, batch, vocab = 512, 6, 256, 32, 8192
layer = torch.nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True, dropout=0.0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.TransformerEncoder(layer, layers), torch.nn.Linear(d, vocab)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loss_fn = torch.nn.CrossEntropyLoss()
def step():
    # Fresh tensors each step, of varying length, so the allocator keeps working.
    n = seq - (torch.randint(0, 64, (1,)).item())
    x = torch.randint(0, vocab, (batch, n), device="cuda")
    out = model(x)
    loss = loss_fn(out.reshape(-1, vocab), x.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for _ in range(warmup):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"STEPS_PER_S {steps / dt:.4f}")
'''

MODES = {"default": "", "expandable_segments": "expandable_segments:True", "cudaMallocAsync": "backend:cudaMallocAsync"}


def run_once(alloc_conf, inject, steps, warmup, tmp):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("OOMH_"):
            del env[k]
    if alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    if inject:
        env["LD_PRELOAD"] = inject
        env["OOMH_CAP"] = "1TiB"
        env["OOMH_EVENTS"] = os.path.join(tmp, "events.jsonl")
    out = subprocess.run([sys.executable, "-c", WORKER, str(steps), str(warmup)], env=env,
                         capture_output=True, text=True, timeout=300)
    for line in out.stdout.splitlines():
        if line.startswith("STEPS_PER_S "):
            return float(line.split()[1])
    raise RuntimeError(f"worker failed ({out.returncode}): {out.stderr[-2000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inject", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--modes", default=",".join(MODES))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            native, shim = [], []
            for _ in range(args.reps):
                native.append(run_once(MODES[mode], None, args.steps, args.warmup, tmp))
                shim.append(run_once(MODES[mode], args.inject, args.steps, args.warmup, tmp))
            row = {"mode": mode, "native_steps_per_s": statistics.median(native),
                   "shim_steps_per_s": statistics.median(shim), "native_all": native, "shim_all": shim}
            row["ratio"] = row["shim_steps_per_s"] / row["native_steps_per_s"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    print("\n| allocator | native steps/s | with shim steps/s | ratio |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['mode']} | {r['native_steps_per_s']:.2f} | {r['shim_steps_per_s']:.2f} | {100 * r['ratio']:.2f}% |")


if __name__ == "__main__":
    main()
