"""A classifier that, on an out-of-memory error, halves its micro-batch and keeps the effective batch with
gradient accumulation. Correct: the batch that failed is trained on again, in smaller pieces. --drop is the
subtle mistake: it halves, but moves on to the next batch, so the failed batch is lost even though the
number of samples per step looks right.

    python halve_trainer.py [--drop] [--steps 8]
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--drop", action="store_true", help="after the OOM, go on with the next batch")
args = parser.parse_args()

BATCH = 1024  # 16 MiB of activations: a step asks the allocator for new memory
torch.manual_seed(0)
device = "cuda"
gen = torch.Generator().manual_seed(1)
n = (args.steps + 2) * BATCH
dataset = TensorDataset(torch.randn(n, 16, generator=gen), torch.randint(0, 10, (n,), generator=gen))
loader = DataLoader(dataset, batch_size=BATCH)
model = nn.Sequential(nn.Linear(16, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
criterion = nn.CrossEntropyLoss()
micro = BATCH
step = 0
batches = iter(loader)
x, y = next(batches)
while step < args.steps:
    x, y = x.to(device), y.to(device)
    try:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for xs, ys in zip(x.split(micro), y.split(micro)):
            loss = criterion(model(xs), ys) * (len(xs) / len(x))
            loss.backward()
            total += loss.item()
        optimizer.step()
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        micro = max(1, micro // 2)
        print("out of memory: micro-batch now %d" % micro, flush=True)
        if args.drop:
            x, y = next(batches)
        continue
    step += 1
    print("step %d bs=%d loss %.4f" % (step, micro, total), flush=True)
    x, y = next(batches)
