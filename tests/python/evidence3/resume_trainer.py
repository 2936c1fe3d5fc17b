"""A trainer that checkpoints and resumes with its step counter kept the ways public code keeps it, not as a
`step` key (issue 42, class 9), and one that forgets the optimizer (class 5). --style:

  iter_num   nanoGPT: one file {"model", "optimizer", "iter_num", "best_val_loss"}, resumed with
             `iter_num = checkpoint["iter_num"]`
  hf         Hugging Face Trainer's folder: checkpoint-N/ with pytorch_model.bin, optimizer.pt,
             scheduler.pt and trainer_state.json {"global_step": N}; the newest folder is resumed
  side       the state dicts in one file and the counter in a text file beside it (last_step.txt)
  module     the whole module saved, torch.save(model, "model_N.pt") (as many public examples do), beside
             the optimizer's state and the counter in opt_N.pt; the newest pair is resumed

--bug forget-optimizer: the iter_num file without the optimizer: the resumed Adam starts from zero moments.
--bug older-module: the module style, but the model is loaded from the save before the newest (issue 42,
class 6: every whole-module file had one digest, so an older one passed as the newest).

    python resume_trainer.py --dir RUN --style iter_num [--bug forget-optimizer] [--steps 10] [--save-every 2]
"""
import argparse
import glob
import json
import os

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--dir", required=True)
parser.add_argument("--style", choices=("iter_num", "hf", "side", "module"), default="iter_num")
parser.add_argument("--bug", choices=("none", "forget-optimizer", "older-module"), default="none")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--save-every", type=int, default=2)
args = parser.parse_args()
os.makedirs(args.dir, exist_ok=True)

BATCH = 256
device = "cuda"
data_gen = torch.Generator().manual_seed(7)
X = torch.randn(args.steps * BATCH, 16, generator=data_gen)
Y = torch.randint(0, 4, (args.steps * BATCH,), generator=data_gen)


def get_batch(it):
    """nanoGPT's get_batch, but by iteration: the data position is the counter."""
    return X[it * BATCH:(it + 1) * BATCH].to(device), Y[it * BATCH:(it + 1) * BATCH].to(device)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 16384), nn.ReLU(), nn.Linear(16384, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 4))
iter_num = 0  # iterations done

# ---- resume
if args.style == "iter_num" and os.path.exists(os.path.join(args.dir, "ckpt.pt")):
    checkpoint = torch.load(os.path.join(args.dir, "ckpt.pt"), map_location=device)
    model.load_state_dict(checkpoint["model"])
    if "optimizer" in checkpoint:
        optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    print("resuming from iter %d" % iter_num, flush=True)
elif args.style == "hf":
    folders = sorted(glob.glob(os.path.join(args.dir, "checkpoint-*")), key=lambda p: int(p.rsplit("-", 1)[1]))
    if folders:
        newest = folders[-1]
        model.load_state_dict(torch.load(os.path.join(newest, "pytorch_model.bin"), map_location=device))
        optimizer.load_state_dict(torch.load(os.path.join(newest, "optimizer.pt"), map_location=device))
        scheduler.load_state_dict(torch.load(os.path.join(newest, "scheduler.pt")))
        with open(os.path.join(newest, "trainer_state.json")) as f:
            iter_num = json.load(f)["global_step"]
        print("resuming from %s" % newest, flush=True)
elif args.style == "module":
    saved = sorted(int(p.rsplit("_", 1)[1][:-3]) for p in glob.glob(os.path.join(args.dir, "model_*.pt")))
    if saved:
        newest = saved[-1]
        which = saved[-2] if args.bug == "older-module" and len(saved) > 1 else newest
        model = torch.load(os.path.join(args.dir, "model_%d.pt" % which), map_location=device, weights_only=False)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 4))
        state = torch.load(os.path.join(args.dir, "opt_%d.pt" % newest), map_location=device)
        optimizer.load_state_dict(state["optimizer"])
        iter_num = state["iter_num"]
elif args.style == "side" and os.path.exists(os.path.join(args.dir, "last_step.txt")):
    state = torch.load(os.path.join(args.dir, "state.pt"), map_location=device)
    model.load_state_dict(state[0])
    optimizer.load_state_dict(state[1])
    scheduler.load_state_dict(state[2])
    with open(os.path.join(args.dir, "last_step.txt")) as f:
        iter_num = int(f.read())


def save():
    if args.style == "iter_num":
        checkpoint = {"model": model.state_dict(), "iter_num": iter_num, "best_val_loss": 1e9}
        if args.bug != "forget-optimizer":
            checkpoint["optimizer"] = optimizer.state_dict()
        torch.save(checkpoint, os.path.join(args.dir, "ckpt.pt"))
    elif args.style == "hf":
        folder = os.path.join(args.dir, "checkpoint-%d" % iter_num)
        os.makedirs(folder, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
        torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
        torch.save(scheduler.state_dict(), os.path.join(folder, "scheduler.pt"))
        with open(os.path.join(folder, "trainer_state.json"), "w") as f:
            json.dump({"global_step": iter_num, "log_history": []}, f)
    elif args.style == "module":
        torch.save(model, os.path.join(args.dir, "model_%d.pt" % iter_num))
        torch.save({"optimizer": optimizer.state_dict(), "iter_num": iter_num}, os.path.join(args.dir, "opt_%d.pt" % iter_num))
    else:
        torch.save([model.state_dict(), optimizer.state_dict(), scheduler.state_dict()], os.path.join(args.dir, "state.pt"))
        with open(os.path.join(args.dir, "last_step.txt"), "w") as f:
            f.write(str(iter_num))


while iter_num < args.steps:
    x, y = get_batch(iter_num)
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step()
    iter_num += 1
    print("iter %d: loss %.4f" % (iter_num, loss.item()), flush=True)
    if iter_num % args.save_every == 0:
        save()
