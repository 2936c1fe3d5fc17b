"""A text classifier fed BERT-style: token ids padded to a fixed length ([CLS] tokens [SEP] then padding),
with an attention mask, in a Mapping that is not a dict (as Hugging Face's BatchEncoding), passed as
`model(**batch)`. Every sample starts with [CLS] and is mostly padding, so a fingerprint of a few values
per sample cannot tell one batch from another (issue 42, class 1).

    python padded_trainer.py --recover retry [--bug]   # empty the cache and retry; --bug: go on with the next batch
    python padded_trainer.py --recover halve [--bug]   # redo the batch in halves; --bug: halve but skip the batch
"""
import argparse
import collections.abc

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--recover", choices=("retry", "halve"), required=True)
parser.add_argument("--bug", action="store_true")
args = parser.parse_args()

CLS, SEP, PAD, VOCAB, LENGTH, BATCH = 101, 102, 0, 2000, 128, 64


class Encoding(collections.abc.Mapping):
    """What a tokenizer hands back: named tensors, read like a dict, not a dict."""

    def __init__(self, **data):
        self.data = data

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)

    def to(self, device):
        return Encoding(**{k: v.to(device) for k, v in self.data.items()})

    def slice(self, a, b):
        return Encoding(**{k: v[a:b] for k, v in self.data.items()})


def tokenize(texts):
    ids = torch.full((len(texts), LENGTH), PAD, dtype=torch.long)
    mask = torch.zeros((len(texts), LENGTH), dtype=torch.long)
    for i, words in enumerate(texts):
        row = [CLS] + words + [SEP]
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return Encoding(input_ids=ids, attention_mask=mask)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 256)
        self.head = nn.Linear(256, 2)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        return self.head(h.sum(1) / attention_mask.sum(1, keepdim=True))


gen = torch.Generator().manual_seed(0)
corpus = [[int(w) for w in torch.randint(1000, VOCAB, (int(torch.randint(1, 4, (1,), generator=gen)),), generator=gen)]
          for _ in range((args.steps + 2) * BATCH)]
labels_all = torch.randint(0, 2, (len(corpus),), generator=gen)
device = "cuda"
torch.manual_seed(0)
model = Classifier().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


def batches():
    for start in range(0, len(corpus), BATCH):
        yield tokenize(corpus[start:start + BATCH]), labels_all[start:start + BATCH]


def train(batch, labels, pieces):
    optimizer.zero_grad()
    size = len(labels) // pieces
    for k in range(pieces):
        logits = model(**batch.slice(k * size, (k + 1) * size))
        loss = nn.functional.cross_entropy(logits, labels[k * size:(k + 1) * size]) / pieces
        loss.backward()
    optimizer.step()


step, pieces = 0, 1
for batch, labels in batches():
    if step == args.steps:
        break
    batch, labels = batch.to(device), labels.to(device)
    skipped = False
    while True:
        try:
            train(batch, labels, pieces)
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad()
            torch.cuda.empty_cache()
            print("CUDA out of memory at step %d" % (step + 1), flush=True)
            if args.recover == "halve":
                pieces *= 2
            if args.bug:  # the batch that failed is skipped: the next one is trained instead
                skipped = True
                break
    if skipped:
        continue
    step += 1
    print("step %d" % step, flush=True)
