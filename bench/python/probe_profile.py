#!/usr/bin/env python3
"""Where the Python probe's per-step time goes: the training loop of probe_overhead.py run once under the
probe with cProfile, printing the probe's own functions by total time (and, with --all, everything).

    python3 bench/python/probe_profile.py --device cuda --model mlp --steps 500

cProfile adds its own cost to every Python call, so its times are for ranking, not for the per-step figure:
that is probe_overhead.py's (fresh processes, no profiler)."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
sys.path.insert(0, HERE)

WORKER = r'''
import cProfile, pstats, sys, torch
from probe_overhead import WORKER  # noqa: the same model and step
steps, device, model_name, show_all = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
torch.manual_seed(0)
torch.set_num_threads(1)
width, batch = (64, 16) if model_name == "tiny" else (4096, 512)
model = torch.nn.Sequential(torch.nn.Linear(32 if model_name == "tiny" else width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, 8)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(batch, 32 if model_name == "tiny" else width, device=device)
y = torch.randint(0, 8, (batch,), device=device)
def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
for _ in range(50):
    step()
pr = cProfile.Profile()
pr.enable()
for _ in range(steps):
    step()
pr.disable()
st = pstats.Stats(pr)
st.sort_stats("tottime")
if show_all:
    st.print_stats(25)
else:
    st.print_stats("oomharness", 25)
st.sort_stats("cumulative")
st.print_stats("oomharness", 12)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", choices=("tiny", "mlp"), default="tiny")
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    from harness import Job
    job = Job()
    try:
        env = job.env(probe=True)
        env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-c", WORKER, str(a.steps), a.device, a.model, "1" if a.all else "0"],
                           env=env, capture_output=True, text=True, timeout=600)
        print(r.stdout[-12000:])
        if r.returncode != 0:
            print(r.stderr[-4000:])
        return r.returncode
    finally:
        job.close()


if __name__ == "__main__":
    sys.exit(main())
