#!/usr/bin/env python3
"""Sample trainers for oomharness: small real models on synthetic data, with correct and broken ways of
surviving CUDA out-of-memory errors. suites/self-test.yaml runs each of them under faults and caps.

    train.py --model transformer --recovery halve          # halves the batch, redoes the failed one
    train.py --model mlp --recovery retry                  # empties the cache and retries the step
    train.py --recovery checkpoint --checkpoint ck.pt      # dies of the OOM; the restart resumes
    train.py --recovery none                               # no OOM handler at all
    train.py --bug skip-batch | retry-holding | resume-from-zero | resume-no-optimizer | leak-outputs
    train.py --eval-every 4                                # evaluates under no_grad, in eval mode
    train.py --bug no-zero-grad | eval-grad                # never clears gradients / evaluates with a graph
    train.py --bug keep-after-loop                         # the loop's last output stays alive after it

Correct trainers are built on oomharness.recover. The broken ones are the mistakes the usual advice warns
about, written the way people write them; each says which recovery check must catch it. Every trainer
prints `step N bs=B loss=L` after each step and is deterministic for a seed (batch k is drawn from its own
generator, seeded with the seed and k, so a resumed run sees the data an uninterrupted one saw).
"""

import argparse
import os
import random
import sys

# Deterministic cuBLAS needs this before CUDA starts (torch.use_deterministic_algorithms below).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from oomharness import recover  # noqa: E402

BUGS = ("none", "skip-batch", "retry-holding", "resume-from-zero", "resume-no-optimizer", "leak-outputs",
        "no-zero-grad", "eval-grad", "keep-after-loop")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("transformer", "mlp"), default="transformer")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps to reach")
    p.add_argument("--batch", type=int, default=32, help="samples per optimizer step")
    p.add_argument("--min-batch", type=int, default=1)
    p.add_argument("--max-retries", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recovery", choices=("none", "halve", "retry", "checkpoint"), default="none")
    p.add_argument("--bug", choices=BUGS, default="none")
    p.add_argument("--checkpoint", default="checkpoint.pt", help="checkpoint file (--recovery checkpoint)")
    p.add_argument("--save-every", type=int, default=5)
    p.add_argument("--eval-every", type=int, default=0, help="evaluate on a held-out batch every N steps (0: never)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--classes", type=int, default=16)
    return p.parse_args(argv)


# ---- models and data ----------------------------------------------------------------------------------------

class TinyTransformer(nn.Module):
    def __init__(self, vocab, d_model, layers, seq):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(torch.zeros(1, seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=4 * d_model, dropout=0.1,
                                           batch_first=True)
        try:
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        except TypeError:
            self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        return self.head(self.encoder(h))


class MLP(nn.Module):
    def __init__(self, features, hidden, classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class Task:
    """The model, its loss and its data."""

    def __init__(self, args, device):
        self.args = args
        self.device = device
        if args.model == "transformer":
            self.model = TinyTransformer(args.vocab, args.d_model, args.layers, args.seq).to(device)
        else:
            self.model = MLP(args.features, args.hidden, args.classes).to(device)
            # A fixed random teacher gives the MLP something learnable.
            g = torch.Generator().manual_seed(args.seed + 1)
            self.teacher = torch.randn(args.features, args.classes, generator=g)

    def batch(self, index, size):
        """Batch number `index` (0-based) of `size` samples: the same whenever it is asked for."""
        a = self.args
        g = torch.Generator().manual_seed(a.seed * 1_000_003 + index)
        if a.model == "transformer":
            tokens = torch.randint(0, a.vocab, (size, a.seq + 1), generator=g)
            x, y = tokens[:, :-1], tokens[:, 1:]
        else:
            x = torch.randn(size, a.features, generator=g)
            y = (x @ self.teacher).argmax(dim=1)
        return x.to(self.device), y.to(self.device)

    def forward_loss(self, model, x, y):
        out = model(x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)), out

    def loss(self, model, x, y):
        return self.forward_loss(model, x, y)[0]


def pick_device(name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    return torch.device(name)


def report(step, bs, loss):
    print("step %d bs=%d loss=%.8g" % (step, bs, loss), flush=True)


def train_step(task, optimizer, x, y):
    """A plain training step: no OOM handling of its own."""
    optimizer.zero_grad(set_to_none=True)
    loss = task.loss(task.model, x, y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


# ---- correct trainers (oomharness.recover) ---------------------------------------------------------------

def evaluate(task, a, step):
    """The loss on a held-out batch, under no_grad and in eval mode (dropout off), as the advice says."""
    x, y = task.batch(1_000_000 + step, a.batch)
    task.model.eval()
    with torch.no_grad():
        loss = task.loss(task.model, x, y)
    task.model.train()
    print("eval %d loss=%.8g" % (step, float(loss)), flush=True)


def run_plain(task, optimizer, a, start=0):
    for step in range(start + 1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        report(step, a.batch, train_step(task, optimizer, x, y))
        if a.eval_every and step % a.eval_every == 0:
            evaluate(task, a, step)


def run_halve(task, optimizer, a):
    halving = recover.BatchHalving(task.model, optimizer, task.loss, micro_batch=a.batch, min_batch=a.min_batch,
                                   on_halve=lambda b: print("out of memory: micro-batch now %d" % b, flush=True))
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        loss = halving.step(x, y)
        report(step, halving.micro_batch, loss)


def run_retry(task, optimizer, a):
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        loss = recover.retry_after_empty_cache(train_step, task, optimizer, x, y, max_retries=a.max_retries,
                                               before_retry=lambda: optimizer.zero_grad(set_to_none=True))
        report(step, a.batch, loss)


def run_checkpoint(task, optimizer, a):
    start = 0
    if a.bug != "resume-from-zero":
        # resume-no-optimizer: the model comes back, Adam's moments do not: the losses part from the
        # uninterrupted run's (checkpoint_resume with a reference must fail).
        keep_optimizer = optimizer if a.bug != "resume-no-optimizer" else None
        state = recover.load_checkpoint(a.checkpoint, task.model, keep_optimizer)
        if state is not None:
            start = state["step"]
            print("resumed from %s at step %d" % (a.checkpoint, start), flush=True)
    # resume-from-zero: saves checkpoints but never loads them: every restart trains from step 0 again
    # (checkpoint_resume must fail).
    for step in range(start + 1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        report(step, a.batch, train_step(task, optimizer, x, y))
        if step % a.save_every == 0:
            recover.save_checkpoint(a.checkpoint, task.model, optimizer, step, data={"next_batch": step})


# ---- broken trainers -------------------------------------------------------------------------------------

def run_skip_batch(task, optimizer, a):
    """Halves the batch after an OOM but drops the batch that failed and never restores the effective batch
    (batch_halving with no_sample_loss must fail)."""
    bs, step, index = a.batch, 0, 0
    while step < a.steps:
        x, y = task.batch(index, bs)
        index += 1
        try:
            loss = train_step(task, optimizer, x, y)
        except recover.oom_error_types() as e:
            bs = max(a.min_batch, bs // 2)
            print("out of memory, batch now %d: %s" % (bs, str(e).splitlines()[0]), flush=True)
            continue
        step += 1
        report(step, bs, loss)


def run_retry_holding(task, optimizer, a):
    """Retries inside the except block: the exception's traceback keeps the failed step's activations alive,
    so the retry runs short of exactly that memory (empty_cache_retry must fail under a cap)."""
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        try:
            loss = train_step(task, optimizer, x, y)
        except recover.oom_error_types() as first:
            print("out of memory, retrying: %s" % str(first).splitlines()[0], flush=True)
            for _ in range(a.max_retries):
                torch.cuda.empty_cache()
                try:
                    loss = train_step(task, optimizer, x, y)
                    break
                except recover.oom_error_types():
                    continue
            else:
                raise
        report(step, a.batch, loss)


def run_leak(task, optimizer, a):
    """Keeps every step's loss and outputs for "later logging" without detaching them: the outputs stay on
    the GPU, step after step (memory_stable must fail)."""
    history = []
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        optimizer.zero_grad(set_to_none=True)
        loss, out = task.forward_loss(task.model, x, y)
        loss.backward()
        optimizer.step()
        history.append((loss, out))
        report(step, a.batch, float(loss.detach()))


def run_no_zero_grad(task, optimizer, a):
    """Never clears the gradients: each step adds its gradient to every earlier one's, so the update grows
    step after step (zero_grad must fail)."""
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        loss = task.loss(task.model, x, y)
        loss.backward()
        optimizer.step()
        report(step, a.batch, float(loss.detach()))


def run_eval_grad(task, optimizer, a):
    """Evaluates in eval mode but without torch.no_grad(): every evaluation forward builds an autograd graph
    it never uses, holding its activations (eval_no_grad must fail)."""
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        report(step, a.batch, train_step(task, optimizer, x, y))
        if step % max(1, a.eval_every) == 0:
            ex, ey = task.batch(1_000_000 + step, a.batch)
            task.model.eval()
            loss = task.loss(task.model, ex, ey)
            task.model.train()
            print("eval %d loss=%.8g" % (step, float(loss)), flush=True)


def run_keep_after_loop(task, optimizer, a):
    """Trains in the function that then evaluates: the loop's `loss` and `out` are still bound after it, so
    the last step's output (16 MiB for the transformer at batch 32) stays alive through the evaluation (the
    kept_after_loop finding must say so; no check fails: it wastes memory without breaking anything)."""
    for step in range(1, a.steps + 1):
        x, y = task.batch(step - 1, a.batch)
        optimizer.zero_grad(set_to_none=True)
        loss, out = task.forward_loss(task.model, x, y)
        loss.backward()
        optimizer.step()
        report(step, a.batch, float(loss.detach()))
    evaluate(task, a, a.steps)


def main(argv=None):
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    device = pick_device(a.device)
    task = Task(a, device)
    optimizer = torch.optim.Adam(task.model.parameters(), lr=1e-3)
    if a.bug in ("resume-from-zero", "resume-no-optimizer") or a.recovery == "checkpoint":
        run_checkpoint(task, optimizer, a)
    elif a.bug == "skip-batch":
        run_skip_batch(task, optimizer, a)
    elif a.bug == "retry-holding":
        run_retry_holding(task, optimizer, a)
    elif a.bug == "leak-outputs":
        run_leak(task, optimizer, a)
    elif a.bug == "no-zero-grad":
        run_no_zero_grad(task, optimizer, a)
    elif a.bug == "eval-grad":
        run_eval_grad(task, optimizer, a)
    elif a.bug == "keep-after-loop":
        run_keep_after_loop(task, optimizer, a)
    elif a.recovery == "halve":
        run_halve(task, optimizer, a)
    elif a.recovery == "retry":
        run_retry(task, optimizer, a)
    else:
        run_plain(task, optimizer, a)
    print("done: %d steps" % a.steps, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
