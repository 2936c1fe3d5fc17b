"""A Llama-style decoder in plain PyTorch (RMSNorm, rotary embeddings, SwiGLU, causal scaled-dot-product
attention, untied embedding and head) and its training loop with AdamW: the model `oomharness predict` is
measured on (bench/python/predict_7b.py, issue 31). Configurations by name (--config 7b: Llama-2-7B's shapes),
no weights and no hub: the parameters are initialised as the modules do.

    python3 bench/python/llama_train.py --config 7b --batch-size 1 --seq 2048 --steps 2
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # name: (layers, dim, heads, ffn hidden, vocab)
    "7b": (32, 4096, 32, 11008, 32000),
    "1b": (16, 2048, 16, 5632, 32000),
    "tiny": (2, 256, 4, 688, 1024),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(seq, head_dim, device):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    t = torch.arange(seq, device=device).float()
    freqs = torch.outer(t, inv)
    return freqs.cos(), freqs.sin()


def apply_rotary(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(dim), Attention(dim, heads)
        self.ffn_norm, self.ffn = RMSNorm(dim), FeedForward(dim, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, layers, dim, heads, hidden, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.heads = heads

    def forward(self, tokens):
        x = self.embed(tokens)
        cos, sin = rotary(tokens.shape[1], x.shape[-1] // self.heads, tokens.device)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="7b", choices=sorted(CONFIGS))
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--amp", choices=("bf16", "off"), default="bf16")
    ap.add_argument("--layers", type=int, default=0, help="override the configuration's number of layers")
    args = ap.parse_args()
    layers, dim, heads, hidden, vocab = CONFIGS[args.config]
    layers = args.layers or layers
    device = "cuda"
    model = Llama(layers, dim, heads, hidden, vocab).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    print("parameters: %.2fB" % (sum(p.numel() for p in model.parameters()) / 1e9), flush=True)
    for step in range(1, args.steps + 1):
        t0 = time.time()
        tokens = torch.randint(0, vocab, (args.batch_size, args.seq + 1), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.amp == "bf16"):
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("step %d loss %.4f (%.2f s) max reserved %.2f GiB" % (
            step, loss.item(), time.time() - t0, torch.cuda.max_memory_reserved() / 2**30), flush=True)
        if not math.isfinite(loss.item()):
            raise SystemExit("loss is not finite")


if __name__ == "__main__":
    main()
