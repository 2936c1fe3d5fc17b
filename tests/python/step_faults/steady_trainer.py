"""A steady training loop as the usual OOM advice writes it, in no one's style but the advice's: an MLP with AdamW
(its state and the gradients live in the allocator's segments beside each step's activations, so that from the
second step on a step can be served from the cache), fixed batches, and on torch.OutOfMemoryError: leave the
except block, clear the gradients, collect, empty the cache, and do the same step again.

    steady_trainer.py [--steps N] [--device cuda|cpu]

Prints one line per OOM it caught ("oom at step S") and "done N" at the end. The faults are the harness's
(tests/python/step_faults/step_faults.yaml); this file knows nothing of them.
"""
import argparse
import gc

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    device = args.device if args.device != "cuda" or torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(args.steps)]
    for step in range(1, args.steps + 1):
        x, y = data[step - 1]
        for _ in range(3):
            done = False
            try:
                xd, yd = x.to(device), y.to(device)
                loss = torch.nn.functional.cross_entropy(model(xd), yd)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                done = True
            except torch.OutOfMemoryError:
                print("oom at step %d" % step, flush=True)
            if done:
                break
            opt.zero_grad(set_to_none=True)
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
    print("done %d" % args.steps, flush=True)


if __name__ == "__main__":
    main()
