"""Broken twin of atomic_checkpoint.py: it saves checkpoints faithfully, and has a --resume-from option, but the
launcher never passes it, and nothing looks for the latest checkpoint: a restart trains from step 1 again.

    python checkpoint_never_loaded.py --output-dir runs/exp1 --steps 10 --save-every 2
"""
import argparse
import os

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--resume-from", default=None)
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
    if args.resume_from:
        state = torch.load(args.resume_from, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step = state["step"]
    for step in range(start_step + 1, args.steps + 1):
        lo = (step - 1) * args.batch_size
        x, y = xs[lo:lo + args.batch_size].to(device), ys[lo:lo + args.batch_size].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.save_every == 0:
            path = os.path.join(args.output_dir, "last.pt")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
