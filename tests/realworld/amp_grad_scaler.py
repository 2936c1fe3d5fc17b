"""Mixed precision the way the PyTorch AMP recipe writes it: torch.autocast + torch.amp.GradScaler. When a
batch runs out of memory the loop halves the batch size and carries on from the same position in the data.

    python amp_grad_scaler.py --batch-size 512 --steps 8
"""
import argparse

import torch
import torch.nn as nn


def make_model(width):
    return nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, width), nn.GELU(), nn.Linear(width, 10))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    data = torch.randn(args.steps * args.batch_size, 64)
    labels = torch.randint(0, 10, (args.steps * args.batch_size,))
    model = make_model(args.width).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    bs = args.batch_size
    pos = 0
    step = 0
    print(f"step {step} bs={bs} (start)", flush=True)
    while step < args.steps and pos < len(data):
        x = data[pos:pos + bs].to(device, non_blocking=True)
        y = labels[pos:pos + bs].to(device, non_blocking=True)
        try:
            with torch.autocast(device_type="cuda", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
        except torch.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            del x, y
            torch.cuda.empty_cache()
            bs = max(1, bs // 2)
            print(f"OOM: batch size reduced to {bs}", flush=True)
            continue
        pos += bs
        step += 1
        print(f"step {step} bs={bs} loss={loss.item():.4f} scale={scaler.get_scale():.0f}", flush=True)


if __name__ == "__main__":
    main()
