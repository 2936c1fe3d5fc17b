"""Train, then evaluate every few steps under torch.no_grad() with model.eval(), as the tutorials do.

    python eval_no_grad.py --steps 8 --eval-every 4
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def evaluate(model, data, targets, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in zip(data.split(256), targets.split(256)):
            pred = model(x.to(device)).argmax(dim=1)
            correct += (pred == y.to(device)).sum().item()
    model.train()
    return correct / len(data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_x, train_y = torch.randn(args.steps * args.batch_size, 32), torch.randint(0, 10, (args.steps * args.batch_size,))
    val_x, val_y = torch.randn(1024, 32), torch.randint(0, 10, (1024,))
    for step in range(1, args.steps + 1):
        x = train_x[(step - 1) * args.batch_size:step * args.batch_size].to(device)
        y = train_y[(step - 1) * args.batch_size:step * args.batch_size].to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if step % args.eval_every == 0:
            print(f"step {step} val_acc {evaluate(model, val_x, val_y, device):.3f}", flush=True)


if __name__ == "__main__":
    main()
