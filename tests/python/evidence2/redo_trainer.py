"""Gradient accumulation kept after an OOM, with batches of dict samples from a DataLoader (the default collate
makes a dict of tensors). On an OOM the failed batch of 64 is redone as two micro-batches of 32 whose
gradients add up, so each optimizer step still takes 64 samples. --bug redoes it as two micro-batches that
are both its first half: 64 samples counted, 32 distinct (issue 42, class 3).

    python redo_trainer.py [--bug]
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--bug", action="store_true")
args = parser.parse_args()

BATCH = 64
device = "cuda"


class Points(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(3)
        self.x = torch.randn(n, 32, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"features": self.x[i], "target": self.y[i]}


loader = DataLoader(Points((args.steps + 2) * BATCH), batch_size=BATCH, shuffle=True,
                    generator=torch.Generator().manual_seed(4))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 8192), nn.GELU(), nn.Linear(8192, 4)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
micro = BATCH
step = 0
for batch in loader:
    if step == args.steps:
        break
    x, y = batch["features"].to(device), batch["target"].to(device)
    while True:
        try:
            optimizer.zero_grad()
            for start in range(0, BATCH, micro):
                a = 0 if args.bug else start  # the bug: every micro-batch is the first one
                out = model(x[a:a + micro])
                (nn.functional.cross_entropy(out, y[a:a + micro]) * micro / BATCH).backward()
            optimizer.step()
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            micro //= 2
            print("OOM: micro-batch %d, accumulating %d" % (micro, BATCH // micro), flush=True)
    step += 1
    print("step %d" % step, flush=True)
