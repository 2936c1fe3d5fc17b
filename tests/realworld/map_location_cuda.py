"""Resume with torch.load(..., map_location="cuda"), as many scripts hard-code it, from a checkpoint written
with torch.save every --save-every steps.

    python map_location_cuda.py --ckpt runs/last.pth --steps 10 --save-every 2
"""
import argparse
import os

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--save-every", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(args.ckpt) or ".", exist_ok=True)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(args.steps * args.batch_size, 16, generator=g)
    ys = torch.randint(0, 4, (args.steps * args.batch_size,), generator=g)
    model = nn.Sequential(nn.Linear(16, 16384), nn.ReLU(), nn.Linear(16384, 4)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    epoch_step = 0
    if os.path.isfile(args.ckpt):
        checkpoint = torch.load(args.ckpt, map_location="cuda")
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        epoch_step = checkpoint["step"]
        print("=> loaded checkpoint '{}' (step {})".format(args.ckpt, epoch_step), flush=True)
    for step in range(epoch_step + 1, args.steps + 1):
        lo = (step - 1) * args.batch_size
        x = xs[lo:lo + args.batch_size].cuda(non_blocking=True)
        y = ys[lo:lo + args.batch_size].cuda(non_blocking=True)
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("step {} loss {:.4f}".format(step, loss.item()), flush=True)
        if step % args.save_every == 0:
            torch.save({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, args.ckpt)


if __name__ == "__main__":
    main()
