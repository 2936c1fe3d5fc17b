"""How a run ends, written as scripts often are (issue 42, classes 7, 8 and 12). --mode:

  keep-graph   logs a running mean of a loss computed outside no_grad and kept as a tensor: the graph of
               every step stays alive (a leak); item keeps .item() instead (correct)
  log-exit     on an OOM it cannot handle, writes the error to train.log and exits 1 (a graceful exit that
               prints nothing about memory); exit0 writes it and exits 0 (broken: the scheduler sees success)
  stall        on an OOM, waits 6 s and then exits 0 at that step (broken: it neither recovered nor failed)
  quit-early   halves the batch on an OOM, trains one more step and quits, far from --steps (broken)

    python end_trainer.py --mode keep-graph --steps 12
"""
import argparse
import os
import sys
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--mode", required=True, choices=("keep-graph", "item", "log-exit", "exit0", "stall", "quit-early"))
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--log", default="train.log")
args = parser.parse_args()

device = "cuda"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 4096), nn.ReLU(), nn.Linear(4096, 8)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
gen = torch.Generator().manual_seed(5)
batch = 256
history = []
step = 0
while step < args.steps:
    x = torch.randn(batch, 64, generator=gen).to(device)
    y = torch.randint(0, 8, (batch,), generator=gen).to(device)
    try:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    except torch.cuda.OutOfMemoryError as e:
        if args.mode in ("log-exit", "exit0"):
            with open(args.log, "a") as f:
                f.write("step %d: %s\n" % (step + 1, e))
            sys.exit(1 if args.mode == "log-exit" else 0)
        if args.mode == "stall":
            time.sleep(6)
            sys.exit(0)
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        batch //= 2
        continue
    step += 1
    metric = nn.functional.cross_entropy(model(x[:16]), y[:16])  # a loss for the log, outside no_grad
    history.append(metric if args.mode == "keep-graph" else metric.item())
    print("step %d loss %.4f" % (step, float(sum(history) / len(history))), flush=True)
    if args.mode == "quit-early" and batch < 256:
        break  # one step at the smaller batch, then it stops
