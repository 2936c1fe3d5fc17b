"""A sequence classifier on nn.LSTM without batch_first: its input is (time, batch, features), as PyTorch's
RNN examples write it. On an out-of-memory error it halves the batch along dimension 1 and redoes the
failed batch in pieces. --no-halve is the bug: it retries at the same batch size.

    python lstm_trainer.py [--no-halve] [--steps 8]
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--no-halve", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
device = "cuda"
SEQ, BATCH, FEATURES = 12, 32, 16


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, 64, num_layers=2)  # batch_first=False: (seq, batch, feature)
        self.head = nn.Linear(64, 5)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[-1])


def batch(index):
    g = torch.Generator().manual_seed(1000 + index)
    return torch.randn(SEQ, BATCH, FEATURES, generator=g), torch.randint(0, 5, (BATCH,), generator=g)


model = Classifier().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
micro = BATCH
step = 0
while step < args.steps:
    x, y = batch(step)
    x, y = x.to(device), y.to(device)
    try:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for xs, ys in zip(x.split(micro, dim=1), y.split(micro)):
            loss = criterion(model(xs), ys) * (ys.shape[0] / BATCH)
            loss.backward()
            total += loss.item()
        optimizer.step()
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        if not args.no_halve:
            micro = max(1, micro // 2)
        print("out of memory: batch now %d" % micro, flush=True)
        continue
    step += 1
    print("step %d bs=%d loss %.4f" % (step, micro, total), flush=True)
