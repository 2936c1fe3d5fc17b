#!/usr/bin/env python3
"""What gathering one memory breakdown costs on the virtual device (issue 14's target: under a second for a
model with 10^4 tensors): 2500 linear layers, their gradients and Adam's moments, 20,000 storages.

    /usr/bin/python3 bench/python/breakdown_cost.py
"""
import sys, time
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "..", "python"))
import torch
from oomharness import virtual_device, _breakdown
dev = virtual_device.install_with_budget(64 << 30)
# 10^4 tensors: 2500 small linear layers (weight + bias) -> 5000 parameters, their 5000 gradients
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(2500)]).cuda()
opt = torch.optim.Adam(model.parameters())
model(torch.randn(4, 16).cuda()).sum().backward()
opt.step()  # + 10^4 Adam moments
print("tracked storages:", len(dev.tracked))
for _ in range(3):
    t = time.perf_counter()
    b = _breakdown.virtual(dev, [model], [opt])
    print("breakdown: %.3f s" % (time.perf_counter() - t), b["parameters"] + b["gradients"] + b["optimizer_state"] + b["workspace"] + b["other"] == b["allocated"])
