"""A word-level language model in the style of PyTorch's word_language_model example: the data is batchified
into (sequence, batch) columns, and nn.LSTM runs without batch_first, so the batch is dimension 1. On an
out-of-memory error it halves the batch and redoes the failed one as pieces along dimension 1. --no-halve is
the bug: it retries at the same batch size.

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
VOCAB, BPTT, BATCH = 8192, 16, 32  # the decoder's (16, 32, 8192) logits: 16 MiB a step


class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(VOCAB, 64)
        self.rnn = nn.LSTM(64, 64, num_layers=2)  # batch_first=False: (seq, batch, feature)
        self.decoder = nn.Linear(64, VOCAB)

    def forward(self, tokens):
        output, _ = self.rnn(self.encoder(tokens))
        return self.decoder(output)


def batchify(data, batch):
    columns = data.size(0) // batch
    return data[:columns * batch].view(batch, -1).t().contiguous()  # (sequence, batch)


corpus = torch.randint(0, VOCAB, ((args.steps + 1) * BPTT * BATCH + 1,), generator=torch.Generator().manual_seed(1))
train_data = batchify(corpus, BATCH).to(device)
model = RNNModel().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = nn.CrossEntropyLoss()
micro = BATCH
step = 0
while step < args.steps:
    i = step * BPTT
    data, targets = train_data[i:i + BPTT], train_data[i + 1:i + 1 + BPTT]
    try:
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for d, t in zip(data.split(micro, dim=1), targets.split(micro, dim=1)):
            loss = criterion(model(d).view(-1, VOCAB), t.reshape(-1)) * (d.size(1) / BATCH)
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
