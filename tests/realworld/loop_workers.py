"""A plain training loop in the style of pytorch/examples: a Dataset, a DataLoader with worker processes,
SGD, a log line every step. On an out-of-memory error it frees the cache and runs the same batch again.

    python loop_workers.py --epochs 1 --batch-size 512 --workers 2
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class RandomImages(Dataset):
    """Synthetic 1x28x28 'images', deterministic per index."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        return torch.randn(1, 28, 28, generator=g), idx % 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1)
        self.conv2 = nn.Conv2d(16, 32, 3, 1)
        self.fc1 = nn.Linear(32 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def train_step(model, optimizer, data, target):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    return loss


def main():
    parser = argparse.ArgumentParser(description="plain loop with DataLoader workers")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--max-retries", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(RandomImages(args.steps * args.batch_size), batch_size=args.batch_size,
                        num_workers=args.workers, shuffle=False)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model.train()
    t0 = time.time()
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        for attempt in range(args.max_retries + 1):
            try:
                loss = train_step(model, optimizer, data, target)
                break
            except torch.cuda.OutOfMemoryError:
                print(f"OOM at batch {batch_idx}, attempt {attempt}: emptying the cache and retrying", flush=True)
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        else:
            raise RuntimeError("batch %d does not fit" % batch_idx)
        print(f"Train step {batch_idx + 1} [{(batch_idx + 1) * len(data)}/{len(loader.dataset)}]\tLoss: {loss.item():.6f}", flush=True)
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
