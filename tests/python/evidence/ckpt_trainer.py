"""A classifier that checkpoints every few steps and resumes after a crash, in the ways public training
scripts write it. --style picks how it saves (each a correct resume):

  plain     torch.save(state, "ckpt/last.pt")
  atomic    torch.save(state, last + ".tmp"), fsync, os.replace(tmp, last): a crash never leaves half a file
  best      last.pt, then best.pt (the model alone) after it when the loss improved
  init      a pretrained init.pt loaded at every start, before the resume
  stream    torch.save to an io.BytesIO, whose bytes the code writes to the file itself
  relative  saved by a relative path from the run folder, loaded by its absolute path
  shards    the model and the optimizer in two files, saved and loaded in that order

--bug breaks the resume:

  restart-loop  restores the weights and the optimizer, but its loop starts again at the first batch
  ignore-load   loads the file and takes its step, but never puts the state into the model or optimizer
  init-only     loads the checkpoint, then the pretrained init over the model (a wrong order)

    python ckpt_trainer.py --dir RUN [--style atomic] [--bug restart-loop] [--steps 10] [--save-every 2]
"""
import argparse
import io
import itertools
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--dir", required=True)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--style", default="plain",
                    choices=["plain", "atomic", "best", "init", "stream", "relative", "shards"])
parser.add_argument("--bug", default="none", choices=["none", "restart-loop", "ignore-load", "init-only"])
args = parser.parse_args()

os.makedirs(os.path.join(args.dir, "ckpt"), exist_ok=True)
os.chdir(args.dir)
last = os.path.join(os.getcwd(), "ckpt", "last.pt")
init = os.path.join(os.getcwd(), "init.pt")

torch.manual_seed(0)
device = "cuda"
gen = torch.Generator().manual_seed(1)
n = args.steps * 256
dataset = TensorDataset(torch.randn(n, 16, generator=gen), torch.randint(0, 4, (n,), generator=gen))
loader = DataLoader(dataset, batch_size=256, shuffle=False)
model = nn.Sequential(nn.Linear(16, 16384), nn.ReLU(), nn.Linear(16384, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
criterion = nn.CrossEntropyLoss()

if args.style == "init" or args.bug == "init-only":
    if not os.path.exists(init):  # the "pretrained" weights, made once
        torch.save(model.state_dict(), init)
    model.load_state_dict(torch.load(init))


def save(step, loss):
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    if args.style == "atomic":
        tmp = last + ".tmp"
        torch.save(state, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, last)
    elif args.style == "stream":
        buffer = io.BytesIO()
        torch.save(state, buffer)
        with open(last, "wb") as f:
            f.write(buffer.getvalue())
    elif args.style == "relative":
        torch.save(state, os.path.join("ckpt", "last.pt"))
    elif args.style == "shards":
        torch.save({"model": model.state_dict(), "step": step}, last + ".model")
        torch.save({"optimizer": optimizer.state_dict(), "step": step}, last + ".optim")
    else:
        torch.save(state, last)
    if args.style == "best" and loss < save.best:
        save.best = loss
        torch.save(model.state_dict(), os.path.join("ckpt", "best.pt"))


save.best = float("inf")


def load():
    """The step to go on from (0: from scratch)."""
    if args.style == "shards":
        if not os.path.exists(last + ".optim"):
            return 0
        state = torch.load(last + ".model")
        state.update(torch.load(last + ".optim"))
    elif os.path.exists(last):
        state = torch.load(last)
    else:
        return 0
    if args.bug != "ignore-load":
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    if args.bug == "init-only":
        model.load_state_dict(torch.load(init))
    if args.bug == "restart-loop":
        return 0
    print("resumed at step %d" % state["step"], flush=True)
    return state["step"]


start = load()
for step, (x, y) in enumerate(itertools.islice(loader, start, None), start + 1):
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad(set_to_none=True)
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
    print("step %d loss %.4f" % (step, loss.item()), flush=True)
    if step % args.save_every == 0:
        save(step, loss.item())
    if step >= args.steps:
        break
