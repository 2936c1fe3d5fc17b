"""Weights saved with safetensors (save_file / load_file, as Hugging Face checkpoints are), the optimizer and
the step beside them with torch.save; resumes from the folder when it exists.

    python safetensors_checkpoint.py --output-dir runs/st --steps 10 --save-every 2
"""
import argparse
import json
import os

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    ckpt_dir = os.path.join(args.output_dir, "last")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(args.steps * args.batch_size, 16, generator=g)
    ys = torch.randint(0, 4, (args.steps * args.batch_size,), generator=g)
    model = nn.Sequential(nn.Linear(16, 16384), nn.ReLU(), nn.Linear(16384, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = 0
    if os.path.exists(os.path.join(ckpt_dir, "trainer_state.json")):
        model.load_state_dict(load_file(os.path.join(ckpt_dir, "model.safetensors")))
        optimizer.load_state_dict(torch.load(os.path.join(ckpt_dir, "optimizer.pt"), map_location=device))
        with open(os.path.join(ckpt_dir, "trainer_state.json")) as f:
            start = json.load(f)["global_step"]
        print(f"resumed from {ckpt_dir} at step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        lo = (step - 1) * args.batch_size
        x, y = xs[lo:lo + args.batch_size].to(device), ys[lo:lo + args.batch_size].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.save_every == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(ckpt_dir, "model.safetensors"))
            torch.save(optimizer.state_dict(), os.path.join(ckpt_dir, "optimizer.pt"))
            with open(os.path.join(ckpt_dir, "trainer_state.json"), "w") as f:
                json.dump({"global_step": step}, f)


if __name__ == "__main__":
    main()
