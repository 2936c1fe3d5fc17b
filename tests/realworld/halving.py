"""Train an MLP classifier on synthetic data; if the GPU runs out of memory, halve the batch size and try again.

    python halving.py --batch-size 1024 --steps 8
"""
import argparse
import logging

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

logger = logging.getLogger(__name__)


def get_args():
    parser = argparse.ArgumentParser(description="MLP with automatic batch size reduction")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--min-batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def build_model(hidden):
    return nn.Sequential(nn.Linear(16, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def train(args, batch_size, device):
    torch.manual_seed(args.seed)
    n = args.steps * batch_size
    g = torch.Generator().manual_seed(args.seed)
    ds = TensorDataset(torch.randn(n, 16, generator=g), torch.randint(0, 10, (n,), generator=g))
    loader = DataLoader(ds, batch_size=batch_size, shuffle=False)
    model = build_model(args.hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step, (x, y) in enumerate(loader, start=1):
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        logger.info("step %d bs=%d loss=%.4f", step, batch_size, loss.item())
        if step >= args.steps:
            break


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch_size = args.batch_size
    while True:
        try:
            train(args, batch_size, device)
            break
        except torch.cuda.OutOfMemoryError:
            if batch_size // 2 < args.min_batch_size:
                raise
            logger.warning("CUDA OOM with batch size %d, retrying with %d", batch_size, batch_size // 2)
            batch_size //= 2
            torch.cuda.empty_cache()
    logger.info("done")


if __name__ == "__main__":
    main()
