"""Small PyTorch trainers in the styles issue 26 was seen with, plain code without oomharness in it, for the
false-green cases evidence_*.yaml (run on the virtual CUDA device under `oomharness run --simulate`).

  --mode keep-logits     keeps every step's logits (with their graph) for a metric at the end: a leak of
                         about 0.25 MiB per step in a model of a few MiB (the old 1 MiB/step limit passed it)
  --mode keep-preds      the same metric written another way: the predictions moved off the device
  --mode unrelated-death trains, then dies of an error whose text mentions memory but is no device OOM
  --mode grow            doubles its batch every step until the cap refuses it, and lets the OOM end it
  --mode halve           halves its batch after each OOM and retries the step, giving up below batch 1
"""
import argparse
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--width", type=int, default=256)
p.add_argument("--classes", type=int, default=1000)
a = p.parse_args()

torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, a.classes)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def step(n):
    x = torch.randn(n, a.width, device=dev)
    y = torch.randint(0, a.classes, (n,), device=dev)
    opt.zero_grad(set_to_none=True)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss, logits


kept = []
batch = a.batch
s = 1
while s <= a.steps:
    if a.mode == "halve":
        try:
            loss, logits = step(batch)
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            if batch == 1:
                raise
            batch //= 2
            print("out of memory at step %d: batch now %d" % (s, batch), flush=True)
            continue
    else:
        loss, logits = step(batch)
    if a.mode == "keep-logits":
        kept.append(logits)
    elif a.mode == "keep-preds":
        kept.append(logits.argmax(dim=1).cpu())
    print("step %d bs=%d loss=%.4f" % (s, batch, loss.item()), flush=True)
    if a.mode == "unrelated-death" and s == 4:
        raise RuntimeError("DataLoader worker (pid 4242) ran out of memory reading shard 7")
    if a.mode == "grow":
        batch *= 2
    s += 1
print("accuracy proxy over %d steps: %d kept" % (a.steps, len(kept)))
sys.exit(0)
