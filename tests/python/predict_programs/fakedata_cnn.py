"""An ImageNet-style loop on a fake-data dataset, as torchvision's FakeData gives one (an image made on the
host from a per-index generator, a random label), through a DataLoader, a small CNN and SGD. Used by
tests/python/test_predict_real.py."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class FakeImages(Dataset):
    def __init__(self, size, image_size, classes):
        self.size, self.image_size, self.classes = size, image_size, classes

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.randn(3, self.image_size, self.image_size, generator=g)
        return img, int(torch.randint(0, self.classes, (1,), generator=g).item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(FakeImages(a.batch * a.steps, a.image_size, 10), batch_size=a.batch, pin_memory=True)
    for step, (images, target) in enumerate(loader, 1):
        images, target = images.cuda(non_blocking=True), target.cuda(non_blocking=True)
        loss = nn.functional.cross_entropy(model(images), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d bs=%d loss=%.4f" % (step, images.shape[0], loss.item()), flush=True)


if __name__ == "__main__":
    main()
