"""A DataLoader with pin_memory=True (the usual advice for fast host-to-GPU copies). Pinned (page-locked) host
memory is limited; when pinning fails, PyTorch raises a CUDA error from the pin-memory thread. This loop
catches it and rebuilds the DataLoader with pin_memory=False, going on from the batch it had reached.

    python pinned_loader.py --steps 8 --batch-size 256
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_loader(dataset, batch_size, start_batch, pin):
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, pin_memory=pin)
    it = iter(loader)
    for _ in range(start_batch):
        next(it)
    return it


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    n = args.steps * args.batch_size
    dataset = TensorDataset(torch.randn(n, 512), torch.randint(0, 10, (n,)))
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pin = True
    batches = make_loader(dataset, args.batch_size, 0, pin)
    step = 0
    while step < args.steps:
        try:
            x, y = next(batches)
        except RuntimeError as e:
            if not pin or "out of memory" not in str(e):
                raise
            print(f"pinning failed at step {step + 1} ({type(e).__name__}); falling back to pin_memory=False", flush=True)
            pin = False
            batches = make_loader(dataset, args.batch_size, step, pin)
            continue
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} loss {loss.item():.4f} pinned={pin}", flush=True)


if __name__ == "__main__":
    main()
