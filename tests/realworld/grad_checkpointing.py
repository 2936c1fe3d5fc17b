"""A small transformer encoder trained with activation (gradient) checkpointing, torch.utils.checkpoint with
use_reentrant=False as the docs now recommend. On OOM: halve the batch and retry the same samples.

    python grad_checkpointing.py --batch-size 64 --steps 6
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln1 = nn.LayerNorm(d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    def __init__(self, vocab=512, d=64, heads=4, layers=2, use_checkpoint=True):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)
        self.use_checkpoint = use_checkpoint

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.use_checkpoint and self.training else blk(x)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = Encoder().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    tokens = torch.randint(0, 512, (args.steps * args.batch_size, args.seq_len + 1))
    bs, i, step = args.batch_size, 0, 0
    while step < args.steps:
        batch = tokens[i:i + bs].to(device)
        try:
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad()
            torch.cuda.empty_cache()
            bs = bs // 2
            if bs == 0:
                raise
            print(f"OOM -> batch size {bs}", flush=True)
            continue
        i += bs
        step += 1
        print(f"step {step} bs={bs} loss={loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
