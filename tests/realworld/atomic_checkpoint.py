"""Checkpoint every --save-every steps the crash-safe way (write a temporary file, then os.replace it over the
old one) and resume from the latest checkpoint when restarted, e.g. by a job scheduler after an OOM.

    python atomic_checkpoint.py --output-dir runs/exp1 --steps 10 --save-every 2
"""
import argparse
import glob
import os
import re

import torch
import torch.nn as nn


def latest_checkpoint(output_dir):
    paths = glob.glob(os.path.join(output_dir, "checkpoint-*.pt"))
    if not paths:
        return None
    return max(paths, key=lambda p: int(re.search(r"checkpoint-(\d+)\.pt$", p).group(1)))


def save_checkpoint(path, model, optimizer, step):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one, never half of one


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--no-resume", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(args.steps * args.batch_size, 16, generator=g)
    ys = torch.randint(0, 4, (args.steps * args.batch_size,), generator=g)
    model = nn.Sequential(nn.Linear(16, 16384), nn.ReLU(), nn.Linear(16384, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start_step = 0
    ckpt = None if args.no_resume else latest_checkpoint(args.output_dir)
    if ckpt:
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
        print(f"Resuming from {ckpt} (step {start_step})", flush=True)
    for step in range(start_step + 1, args.steps + 1):
        lo = (step - 1) * args.batch_size
        x, y = xs[lo:lo + args.batch_size].to(device), ys[lo:lo + args.batch_size].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.save_every == 0:
            save_checkpoint(os.path.join(args.output_dir, f"checkpoint-{step}.pt"), model, optimizer, step)


if __name__ == "__main__":
    main()
