"""A nanoGPT-style trainer (karpathy/nanoGPT train.py's data path and loop, shrunk): uint16 tokens in a numpy
memmap, batches by torch.randint offsets, torch.stack of from_numpy slices, pinned and copied with
non_blocking=True; estimate_loss on a host tensor of losses printed with a format; a checkpoint dict saved
with torch.save. Used by tests/python/test_predict_real.py and bench/predict_public.py.

--amp and --accum are nanoGPT's bfloat16 autocast and gradient accumulation; --forever trains until stopped (predict --steps N); --no-train exits before its first step; --resume-check
loads the checkpoint it saved and prints the shapes it read back."""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block, d, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.wte.weight = self.head.weight  # weight tying, as nanoGPT
        for p in self.parameters():
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--amp", action="store_true", help="bf16 autocast, as nanoGPT's dtype='bfloat16'")
    ap.add_argument("--accum", type=int, default=1, help="gradient accumulation micro-steps per step")
    ap.add_argument("--forever", action="store_true")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--resume-check", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(a.data):
        np.random.default_rng(0).integers(0, a.vocab, 200_000, dtype=np.uint16).tofile(a.data)
    device = "cuda"
    torch.manual_seed(1337)

    def get_batch():
        data = np.memmap(a.data, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - a.block, (a.batch,))
        x = torch.stack([torch.from_numpy((data[i:i + a.block]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + a.block]).astype(np.int64)) for i in ix])
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)

    model = GPT(a.vocab, a.block, a.d, a.layers, 4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        losses = torch.zeros(2)
        for k in range(2):
            _, loss = model(*get_batch())
            losses[k] = loss.item()
        model.train()
        return losses.mean()

    X, Y = get_batch()
    print("batch %s" % (tuple(X.shape),), flush=True)
    if a.no_train:
        raise SystemExit("no-train: stopping before the first step")
    step = 0
    while a.forever or step < a.steps:
        for _ in range(a.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.amp):
                _, loss = model(X, Y)
                loss = loss / a.accum
            X, Y = get_batch()
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        print(f"iter {step}: loss {loss.item():.4f}", flush=True)
    print(f"val loss {estimate_loss():.4f}", flush=True)
    if a.out:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": step}, a.out)
        if a.resume_check:
            ck = torch.load(a.out, map_location=device)
            w = ck["model"]["head.weight"]
            print("loaded %s %s %s" % (tuple(w.shape), w.dtype, ck["iter_num"]), flush=True)
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optimizer"])


if __name__ == "__main__":
    main()
