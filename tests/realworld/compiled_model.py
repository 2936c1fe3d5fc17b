"""torch.compile on a small model, as in the torch.compile tutorial; on an out-of-memory error the step is
retried once the cache is emptied.

    python compiled_model.py --steps 6
"""
import argparse

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return self.net(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--backend", default="inductor")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = MLP().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    compiled = torch.compile(model, backend=args.backend)
    xs = torch.randn(args.steps, args.batch_size, 256)

    def train_step(x):
        opt.zero_grad(set_to_none=True)
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    for step in range(args.steps):
        x = xs[step].to(device)
        for attempt in range(4):
            try:
                loss = train_step(x)
                break
            except torch.cuda.OutOfMemoryError:
                print(f"step {step + 1}: out of memory, emptying the cache (attempt {attempt + 1})", flush=True)
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        else:
            raise SystemExit("step %d never fit" % (step + 1))
        print(f"step {step + 1} loss {loss:.5f}", flush=True)


if __name__ == "__main__":
    main()
