#!/usr/bin/env python3
"""What issue 14 added to the probe's per-step work without an OOM, timed in-process (probe_overhead.py's
end-to-end figure is too noisy on a shared machine to show a microsecond): the cleared-gradients check and
remembering the first gradient (Note [Cleared gradients] in python/oomharness/probe/grads.py). The last line is the
healthy path (the code calls zero_grad); the others time its parts and the not-cleared path, which also looks
up the optimizer.step() line.

    /usr/bin/python3 bench/python/probe_added_cost.py
"""
import sys, timeit, weakref
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "..", "python"))
import torch
from oomharness import probe
p = probe.get().parts["grads"]
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(4, 32)).sum().backward()
p.remember_grads(opt)
top, last_optimizer = model, id(opt)
n = 200000
def added_per_step():
    # what a step now does beyond before: the identity checks, the cleared check, remembering the grads
    model is not top
    id(opt) != last_optimizer
    p.check_cleared()
    p.remember_grads(opt)
    p.backwards += 1
for _ in range(3):
    t = timeit.timeit(added_per_step, number=n) / n
    print("added work per step: %.2f us" % (t * 1e6))
w = model[0].weight
g = w.grad
for name, stmt in (("check_cleared", p.check_cleared), ("remember_grads", lambda: p.remember_grads(opt)),
                   ("p.grad", lambda: w.grad), ("g._version", lambda: g._version), ("weakref", lambda: weakref.ref(g)),
                   ("noop", lambda: None)):
    print(name, "%.2f us" % (timeit.timeit(stmt, number=n) / n * 1e6))
def cleared_path():
    p.zeroed = True  # the code called zero_grad: the healthy path
    p.check_cleared()
    p.remember_grads(opt)
print("healthy step's added work (check + remember): %.2f us" % (timeit.timeit(cleared_path, number=n) / n * 1e6))
