#!/usr/bin/env python3
"""The Python probe's cost per training step: the same loop in fresh processes with and without the probe
(alternating, median of the repetitions), on whatever device torch has (CPU here).

    /usr/bin/python3 bench/python/probe_overhead.py [--steps 2000] [--reps 5]

The model is deliberately tiny, so that a step costs little and the probe's absolute cost per step (its
module and optimizer hooks, the control-block writes, one event line) stands out. Prints the per-step times
and their difference in microseconds.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

WORKER = r'''
import sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randint(0, 8, (16,))
def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
for _ in range(50):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
print((time.perf_counter() - t0) / steps)
'''


def run(steps, probe, tmp):
    from harness import Job  # tests/python/harness.py: a real control block in /dev/shm and the probe's env
    job = Job()
    try:
        env = job.env(probe=probe)
        out = subprocess.run([sys.executable, "-c", WORKER, str(steps)], env=env, capture_output=True, text=True,
                             timeout=600, check=True)
        return float(out.stdout.strip().splitlines()[-1])
    finally:
        job.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    plain, probed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.reps):
            plain.append(run(a.steps, False, tmp))
            probed.append(run(a.steps, True, tmp))
    p, q = statistics.median(plain), statistics.median(probed)
    print(f"without probe: {p * 1e6:.1f} us/step  (runs: {', '.join(f'{v * 1e6:.1f}' for v in plain)})")
    print(f"with probe:    {q * 1e6:.1f} us/step  (runs: {', '.join(f'{v * 1e6:.1f}' for v in probed)})")
    print(f"probe cost:    {(q - p) * 1e6:.1f} us/step")


if __name__ == "__main__":
    main()
