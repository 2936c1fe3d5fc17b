"""A token classifier that accumulates gradients over 4 micro-batches per optimizer step, grouped by length
(shortest first, as length-grouped samplers give them), and meets an OOM in the first long one (issue 42,
class 10: micro-batches of gradient accumulation are evidence of their own):

    python accum_trainer.py --recover keep   # keeps the gradients of the micro-batches done, empties the
                                             #   cache and redoes the one that failed: every sample trained
    python accum_trainer.py --recover zero   # broken: zeroes the gradients and goes on from the micro-batch
                                             #   that failed: the ones before it are lost from the step
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--recover", choices=("keep", "zero"), required=True)
args = parser.parse_args()

MICRO, SIZE, VOCAB, LENGTHS = 4, 16, 1000, (32, 32, 64, 64)
gen = torch.Generator().manual_seed(0)
# Each step's micro-batches: (tokens, labels), lengths 32, 32, 64, 64.
data = [[(torch.randint(0, VOCAB, (SIZE, n), generator=gen), torch.randint(0, 4, (SIZE,), generator=gen))
         for n in LENGTHS] for _ in range(args.steps)]


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 256)
        self.up = nn.Linear(256, 1024)
        self.head = nn.Linear(1024, 4)

    def forward(self, tokens):  # activations of (16, length, 1024): 2 MiB at length 32, 4 MiB at 64
        return self.head(torch.relu(self.up(self.embed(tokens))).mean(1))


device = "cuda"
torch.manual_seed(0)
model = Classifier().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

for step in range(args.steps):
    optimizer.zero_grad()
    k = 0
    while k < MICRO:
        x, y = (t.to(device) for t in data[step][k])
        try:
            loss = nn.functional.cross_entropy(model(x), y) / MICRO
            loss.backward()
        except torch.cuda.OutOfMemoryError:
            loss = None
            print("CUDA out of memory at step %d, micro-batch %d" % (step + 1, k + 1), flush=True)
            if args.recover == "zero":  # the bug: the micro-batches already done are thrown away
                optimizer.zero_grad()
            torch.cuda.empty_cache()
            continue  # micro-batch k again
        k += 1
    optimizer.step()
    print("step %d" % (step + 1), flush=True)
