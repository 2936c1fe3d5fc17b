"""A small ResNet-style CNN (convolutions, batch norm, residual blocks) trained with SGD and momentum on
synthetic 3x64x64 images: the CNN family of `oomharness predict`'s comparison with a GPU (tests/gpu/
predict_check.py, issue 32 item 3).

    python3 bench/python/cnn_train.py --batch-size 64 --steps 3
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Residual(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class Net(nn.Module):
    def __init__(self, width=64, classes=100):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layers = nn.Sequential(Residual(width, width, 1), Residual(width, 2 * width, 2),
                                    Residual(2 * width, 4 * width, 2), Residual(4 * width, 8 * width, 2))
        self.head = nn.Linear(8 * width, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    model = Net().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(1, args.steps + 1):
        x = torch.randn(args.batch_size, 3, args.size, args.size, device="cuda")
        y = torch.randint(0, 100, (args.batch_size,), device="cuda")
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("step %d loss %.4f" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
