"""Broken twin of loop_workers.py: it keeps every step's loss tensor in a list "to plot later", so each
step's autograd graph (and the activations it saved) stays alive: a leak that grows every step.

    python loop_workers_leak.py --batch-size 256 --steps 12
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class RandomImages(Dataset):
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
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(RandomImages(args.steps * args.batch_size), batch_size=args.batch_size, num_workers=args.workers)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward(retain_graph=True)
        optimizer.step()
        losses.append(loss)  # the bug: the tensor, with its graph, not loss.item()
        print(f"Train step {batch_idx + 1}\tLoss: {loss.item():.6f}", flush=True)
    print("mean loss %.4f" % torch.stack(losses).mean().item())


if __name__ == "__main__":
    main()
