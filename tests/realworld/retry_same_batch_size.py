"""Broken twin of halving.py: on an out-of-memory error it empties the cache and tries again with the
*same* batch size (a pattern seen in public issues: "just call empty_cache and retry"). Under a memory cap
the batch never fits, and after a few tries it gives up.

    python retry_same_batch_size.py --batch-size 1024 --steps 8
"""
import argparse
import logging
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("train")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--hidden", type=int, default=4096)
    return p.parse_args()


def run(args, device):
    torch.manual_seed(0)
    n = args.steps * args.batch_size
    data = TensorDataset(torch.randn(n, 16), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=args.batch_size)
    model = nn.Sequential(nn.Linear(16, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    criterion = nn.CrossEntropyLoss()
    for step, (inputs, targets) in enumerate(loader, 1):
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        log.info("step %d bs=%d loss=%.4f", step, args.batch_size, loss.item())


def main():
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    args = parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for attempt in range(1, args.max_retries + 1):
        try:
            run(args, device)
            return 0
        except RuntimeError as e:
            if "out of memory" not in str(e):
                raise
            log.warning("OOM on attempt %d/%d, clearing cache and retrying", attempt, args.max_retries)
            torch.cuda.empty_cache()
    log.error("giving up after %d attempts", args.max_retries)
    return 1


if __name__ == "__main__":
    sys.exit(main())
