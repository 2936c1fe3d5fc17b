"""A detector-style trainer whose batches are lists of per-sample dicts (Detectron2's `batched_inputs`: one
dict per image, images of different sizes, `model(batched_inputs)`), or, with --dataclass, a @dataclass of
tensors (`model(batch)`). Neither is a tensor: a probe that looks for tensors one level into the arguments
finds none (issue 42, class 2).

    python items_trainer.py [--dataclass] [--bug]
On an OOM the code splits the batch in two and trains on both halves, accumulating the gradients (correct);
--bug splits it and trains on the next batch instead (the failed images are never seen).
"""
import argparse
import dataclasses

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--dataclass", action="store_true")
parser.add_argument("--bug", action="store_true")
args = parser.parse_args()

BATCH, SIDE = 32, 48
device = "cuda"


@dataclasses.dataclass
class Batch:
    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self):
        return len(self.labels)

    def split(self, parts):
        n = len(self) // parts
        return [Batch(self.images[k * n:(k + 1) * n], self.labels[k * n:(k + 1) * n]) for k in range(parts)]


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 48, 3, padding=1)
        self.head = nn.Linear(48, 5)

    def forward(self, batched):
        if isinstance(batched, Batch):
            images, labels = batched.images, batched.labels
        else:  # a list of dicts: pad every image to the largest, as a detector's preprocessing does
            h = max(d["image"].shape[1] for d in batched)
            w = max(d["image"].shape[2] for d in batched)
            images = torch.zeros(len(batched), 3, h, w, device=device)
            for i, d in enumerate(batched):
                images[i, :, :d["image"].shape[1], :d["image"].shape[2]] = d["image"].to(device)
            labels = torch.tensor([d["label"] for d in batched], device=device)
        features = torch.relu(self.conv(images)).mean((2, 3))
        return nn.functional.cross_entropy(self.head(features), labels)


gen = torch.Generator().manual_seed(0)


def make_sample():
    side = SIDE - int(torch.randint(0, 8, (1,), generator=gen))
    return {"image": torch.rand(3, side, SIDE, generator=gen), "label": int(torch.randint(0, 5, (1,), generator=gen))}


def batches():
    while True:
        samples = [make_sample() for _ in range(BATCH)]
        if args.dataclass:
            yield Batch(torch.stack([s["image"][:, :SIDE - 8] for s in samples]).to(device),
                        torch.tensor([s["label"] for s in samples], device=device))
        else:
            yield samples


def split(batch, parts):
    if isinstance(batch, Batch):
        return batch.split(parts)
    n = len(batch) // parts
    return [batch[k * n:(k + 1) * n] for k in range(parts)]


torch.manual_seed(0)
model = Detector().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step, parts = 0, 1
source = batches()
batch = next(source)
while step < args.steps:
    try:
        optimizer.zero_grad()
        for piece in split(batch, parts):
            (model(piece) * len(piece) / len(batch)).backward()
        optimizer.step()
    except torch.cuda.OutOfMemoryError:
        optimizer.zero_grad()
        torch.cuda.empty_cache()
        parts *= 2
        print("out of memory: %d pieces per batch" % parts, flush=True)
        if args.bug:
            batch = next(source)
        continue
    step += 1
    print("step %d" % step, flush=True)
    batch = next(source)
