"""A token classifier with a Transformer encoder, fed synthetic token ids, that meets an OOM the way the usual
advice says to handle it, in two layouts (issue 42, class 4: which dimension is the batch):

    python seq_trainer.py --layout batch_first --recover halve-batch   # (batch, seq): redo the batch in halves
    python seq_trainer.py --layout seq_first --recover halve-batch     # (seq, batch), nn.TransformerEncoder
                                                                      #   without batch_first: halves along dim 1
    python seq_trainer.py --layout batch_first --recover halve-seq     # broken: halves the sequence length and
                                                                      #   keeps the batch of 32
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--layout", choices=("batch_first", "seq_first"), required=True)
parser.add_argument("--recover", choices=("halve-batch", "halve-seq"), required=True)
args = parser.parse_args()

VOCAB, SEQ, BATCH, WIDTH = 1000, 64, 32, 64
first = args.layout == "batch_first"
bdim = 0 if first else 1


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=first)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, 2)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(1 - bdim))


gen = torch.Generator().manual_seed(0)
data = torch.randint(0, VOCAB, ((args.steps + 2) * BATCH, SEQ), generator=gen)
labels_all = torch.randint(0, 2, (len(data),), generator=gen)
device = "cuda"
torch.manual_seed(0)
model = Classifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def train(tokens, labels, pieces, seq):
    optimizer.zero_grad()
    size = BATCH // pieces
    for k in range(pieces):
        piece = tokens[k * size:(k + 1) * size, :seq]
        logits = model(piece if first else piece.t().contiguous())
        loss = nn.functional.cross_entropy(logits, labels[k * size:(k + 1) * size]) / pieces
        loss.backward()
    optimizer.step()


step, pieces, seq = 0, 1, SEQ
while step < args.steps:
    tokens = data[step * BATCH:(step + 1) * BATCH].to(device)
    labels = labels_all[step * BATCH:(step + 1) * BATCH].to(device)
    while True:
        try:
            train(tokens, labels, pieces, seq)
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad()
            torch.cuda.empty_cache()
            print("CUDA out of memory at step %d" % (step + 1), flush=True)
            if args.recover == "halve-batch":
                pieces *= 2
            else:  # the bug: the sequence is cut in half, the batch stays
                seq //= 2
    step += 1
    print("step %d pieces %d seq %d" % (step, pieces, seq), flush=True)
