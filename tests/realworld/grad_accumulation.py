"""Gradient accumulation: an effective batch of --batch-size samples per optimizer step, made of micro-batches.
When a micro-batch runs out of memory, the micro-batch is halved and the number of accumulation steps doubled,
so each optimizer step still sees the same samples (the effective batch is kept).

    python grad_accumulation.py --batch-size 1024 --micro-batch 1024 --steps 8
"""
import argparse
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
logger = logging.getLogger(__name__)


def parse_args():
    parser = argparse.ArgumentParser(description="gradient accumulation with OOM backoff")
    parser.add_argument("--batch-size", type=int, default=1024, help="samples per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--keep-effective-batch", type=int, default=1,
                        help="0: after an OOM, step the optimizer after each (smaller) micro-batch")
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    n = (args.steps + 2) * args.batch_size
    dataset = TensorDataset(torch.randn(n, 16), torch.randint(0, 10, (n,)))
    model = nn.Sequential(nn.Linear(16, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    micro = args.micro_batch
    batch = args.batch_size
    loader = iter(DataLoader(dataset, batch_size=batch))
    global_step = 0
    x, y = next(loader)
    while global_step < args.steps:
        x, y = x.to(device), y.to(device)
        accumulation_steps = max(1, len(x) // micro)
        try:
            optimizer.zero_grad(set_to_none=True)
            for xs, ys in zip(x.chunk(accumulation_steps), y.chunk(accumulation_steps)):
                loss = nn.functional.cross_entropy(model(xs), ys) / accumulation_steps
                loss.backward()
            optimizer.step()
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            micro = max(1, micro // 2)
            if not args.keep_effective_batch:
                batch = micro
                loader = iter(DataLoader(dataset, batch_size=batch))
                for _ in range(global_step * args.batch_size // batch):
                    next(loader)
                x, y = next(loader)
            logger.warning("OOM: micro-batch %d, accumulation steps %d", micro, max(1, batch // micro))
            continue
        global_step += 1
        logger.info("step %d bs=%d micro=%d loss=%.4f", global_step, len(x), micro, loss.item() * accumulation_steps)
        x, y = next(loader)


if __name__ == "__main__":
    main()
