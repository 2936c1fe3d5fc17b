#!/usr/bin/env python3
"""What the virtual CUDA device costs (issue 13's cost targets; figures in bench/RESULTS.md).

1. Per ATen operation: the time the device adds to an operation, against the time a bare TorchDispatchMode
   that does nothing adds, measured side by side in one process (rounds interleaved: plain, bare mode,
   device), so that a shared machine's noise hits all three alike. Target: at most 1.5x the bare mode.
2. Per trainer: examples/python/train.py at the demo's sizes on the device (through the same entry a job
   gets) against the same training on the plain CPU, each in a fresh process, interleaved. Target: at most
   1.5x.

    /usr/bin/python3 bench/python/virtual_device_cost.py [--rounds 5] [--ops 4000] [--skip-trainers]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

# The demo's trainers (suites/demo-simulated.yaml), without faults: what a CI run pays for the device.
TRAINERS = {
    "mlp": ["--model", "mlp", "--steps", "8", "--batch", "4096"],
    "transformer": ["--model", "transformer", "--steps", "8", "--batch", "16", "--d-model", "128", "--layers", "2",
                    "--seq", "64"],
}

ON_DEVICE = """
import runpy, sys
sys.path.insert(0, %r)
import torch
from oomharness.virtual_device import install_with_budget
install_with_budget(80 << 30)
sys.argv = [%r] + sys.argv[1:]
runpy.run_path(%r, run_name="__main__")
"""


def per_op(rounds, ops):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from oomharness import virtual_device

    class Bare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def loop(x, w):
        t0 = time.perf_counter()
        for _ in range(ops):
            y = x + w  # a small operation: the worst case, where the per-operation cost is all there is
            del y
        return (time.perf_counter() - t0) / ops * 1e6

    times = {"plain": [], "bare_mode": [], "device": []}
    for _ in range(rounds):
        x, w = torch.randn(64), torch.randn(64)
        times["plain"].append(loop(x, w))
        with Bare():
            times["bare_mode"].append(loop(x, w))
        dev = virtual_device.install_with_budget(80 << 30)
        try:
            xd, wd = x.cuda(), w.cuda()
            times["device"].append(loop(xd, wd))
            del xd, wd
        finally:
            dev.uninstall()
    med = {k: statistics.median(v) for k, v in times.items()}
    bare_added = med["bare_mode"] - med["plain"]
    device_added = med["device"] - med["plain"]
    return {"us_per_op": med, "bare_mode_added_us": bare_added, "device_added_us": device_added,
            "ratio_to_bare_mode": device_added / bare_added if bare_added > 0 else None,
            "rounds": {k: [round(t, 2) for t in v] for k, v in times.items()}}


def trainer_times(rounds):
    train = os.path.join(ROOT, "examples", "python", "train.py")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("OOMH_DEVICE", None)
    out = {}
    for name, args in TRAINERS.items():
        plain, device = [], []
        for _ in range(rounds):
            for kind, argv in (("plain", [sys.executable, train, "--device", "cpu"] + args),
                               ("device", [sys.executable, "-c", ON_DEVICE % (os.path.join(ROOT, "python"), train, train)]
                                + args)):
                t0 = time.perf_counter()
                proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
                elapsed = time.perf_counter() - t0
                if proc.returncode != 0:
                    raise SystemExit("%s (%s) failed:\n%s%s" % (name, kind, proc.stdout, proc.stderr))
                (plain if kind == "plain" else device).append(elapsed)
        p, d = statistics.median(plain), statistics.median(device)
        out[name] = {"plain_s": round(p, 2), "device_s": round(d, 2), "ratio": round(d / p, 2),
                     "rounds": {"plain": [round(t, 2) for t in plain], "device": [round(t, 2) for t in device]}}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--ops", type=int, default=4000)
    p.add_argument("--skip-trainers", action="store_true")
    a = p.parse_args()
    import torch
    result = {"torch": torch.__version__, "per_op": per_op(a.rounds, a.ops)}
    if not a.skip_trainers:
        result["trainers"] = trainer_times(max(1, a.rounds // 2))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
