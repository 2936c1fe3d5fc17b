"""A loop whose log counts steps from 0 (`global_step` is incremented after the log line, as in many
repositories), through the logging module with a progress fraction. On OOM it halves the batch and goes on
with the same samples.

    python logs_from_step_zero.py --steps 8 --batch-size 1024
"""
import argparse
import logging
import sys

import torch
from torch import nn

logger = logging.getLogger("trainer")


def setup_logging():
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def main():
    setup_logging()
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=1024)
    args = parser.parse_args()
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
    optim = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn((args.steps + 1) * args.batch_size, 16)
    target = torch.randint(0, 10, ((args.steps + 1) * args.batch_size,))
    global_step, seen, bs = 0, 0, args.batch_size
    logger.info("global_step=%d/%d starting, batch_size=%d", global_step, args.steps, bs)
    while global_step < args.steps:
        x, y = data[seen:seen + bs].to(device), target[seen:seen + bs].to(device)
        try:
            optim.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optim.step()
        except torch.cuda.OutOfMemoryError:
            optim.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            bs //= 2
            logger.warning("global_step=%d OOM, batch_size now %d", global_step, bs)
            continue
        logger.info("global_step=%d/%d loss=%.4f batch_size=%d", global_step, args.steps, loss.item(), bs)
        seen += bs
        global_step += 1


if __name__ == "__main__":
    main()
