"""A classifier trained from a DataLoader that survives an out-of-memory error by emptying the cache and
trying again, the way forum answers and blog posts show it. --skip is the common mistake: emptying the
cache and going on with the next batch, which silently drops the batch that failed.

    python retry_trainer.py [--skip] [--steps 8]
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--skip", action="store_true", help="drop the batch that ran out of memory")
args = parser.parse_args()

BATCH = 1024  # 16 MiB of activations: a step asks the allocator for new memory
torch.manual_seed(0)
device = "cuda"
gen = torch.Generator().manual_seed(1)
dataset = TensorDataset(torch.randn(args.steps * BATCH, 16, generator=gen), torch.randint(0, 10, (args.steps * BATCH,), generator=gen))
loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(2))
model = nn.Sequential(nn.Linear(16, 4096), nn.ReLU(), nn.Linear(4096, 10)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()


def train_step(x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


step = 0
for x, y in loader:
    x, y = x.to(device), y.to(device)
    for attempt in range(3):
        try:
            loss = train_step(x, y)
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
            print("out of memory, emptied the cache", flush=True)
            if args.skip:
                loss = None
                break
    if loss is None:
        continue  # the failed batch is never seen again
    step += 1
    print("step %d loss %.4f" % (step, loss), flush=True)
