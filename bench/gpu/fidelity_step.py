#!/usr/bin/env python3
"""Two training steps of bench/gpu/fidelity.py's transformer (d=1024, 8 layers, seq 512) at one batch size,
for `oomharness budget --batch-under CAP -- python3 bench/gpu/fidelity_step.py --batch {batch}`: the
budget's largest batch under a cap, against the fidelity benchmark's bisection inside one process.
Exits 0 when both steps ran, 1 on an out-of-memory error (no recovery: the budget searches the batch)."""
import argparse
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=2)
a = ap.parse_args()
torch.manual_seed(0)
d, layers, seq, vocab = 1024, 8, 512, 8192
layer = torch.nn.TransformerEncoderLayer(d, 16, 4 * d, batch_first=True, dropout=0.0)
model = torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.TransformerEncoder(layer, layers),
                            torch.nn.Linear(d, vocab)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(1, a.steps + 1):
    x = torch.randint(0, vocab, (a.batch, seq), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), x.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    print(f"step {step} batch {a.batch} loss {loss.item():.3f}", flush=True)
sys.exit(0)
