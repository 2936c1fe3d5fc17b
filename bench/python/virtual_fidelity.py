#!/usr/bin/env python3
"""The virtual CUDA device's memory figures against a real GPU's (issue 13's memory target: the held memory
of examples/python/train.py's models within 2% of the H100's; bench/RESULTS.md).

For each model, a fresh process trains 3 steps and reports, after each optimizer step, what the caching
allocator holds (torch.cuda.memory_allocated: parameters, gradients, optimizer state, cuBLAS workspaces), and
at the end the peaks. `--device virtual` runs it on the virtual device (on the CPU, CUDA hidden), `--device
gpu` on the real GPU; `--device both` does both and prints the ratios. Without a GPU, the virtual figures are
compared with the H100 figures recorded in suites/self-test.yaml (PyTorch 2.11).

    python3 bench/python/virtual_fidelity.py [--device virtual|gpu|both] [--json-out FILE]
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TRAIN = os.path.join(ROOT, "examples", "python", "train.py")

# suites/self-test.yaml's header: measured on an H100 with PyTorch 2.11 by tests/python/gpu_probe_check.py.
H100 = {"transformer": {"held_mib": 121, "peak_allocated_mib": 461, "peak_reserved_mib": 554},
        "mlp": {"held_mib": 85, "peak_allocated_mib": 90}}
MODELS = {"transformer": ["--model", "transformer", "--batch", "32"], "mlp": ["--model", "mlp", "--batch", "32"]}

CHILD = r"""
import json, sys
sys.path.insert(0, %(python)r)
sys.path.insert(0, %(examples)r)
import torch
if %(virtual)r:
    from oomharness.virtual_device import install_with_budget
    install_with_budget(80 << 30)
held = []
import train
Adam = torch.optim.Adam
real_step = Adam.step
def step(self, *a, **k):
    out = real_step(self, *a, **k)
    held.append(torch.cuda.memory_allocated())
    return out
Adam.step = step
train.main(sys.argv[1:] + ["--steps", "3", "--device", "cuda"])
print("RESULT " + json.dumps({"held": held, "peak_allocated": torch.cuda.max_memory_allocated(),
                             "peak_reserved": torch.cuda.max_memory_reserved(), "torch": torch.__version__}))
"""


def measure(model, virtual):
    code = CHILD % {"python": os.path.join(ROOT, "python"), "examples": os.path.dirname(TRAIN), "virtual": virtual}
    env = dict(os.environ)
    env.pop("OOMH_DEVICE", None)
    if virtual:
        env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, "-c", code] + MODELS[model], capture_output=True, text=True, env=env,
                          timeout=1200)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit("%s (%s) failed:\n%s%s" % (model, "virtual" if virtual else "gpu", proc.stdout[-2000:],
                                                     proc.stderr[-3000:]))
    r = json.loads(lines[-1][len("RESULT "):])
    mib = 1 << 20
    return {"torch": r["torch"], "held_mib": round(r["held"][-1] / mib, 1),
            "held_per_step_mib": [round(h / mib, 1) for h in r["held"]],
            "peak_allocated_mib": round(r["peak_allocated"] / mib, 1),
            "peak_reserved_mib": round(r["peak_reserved"] / mib, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("virtual", "gpu", "both"), default="virtual")
    p.add_argument("--json-out")
    a = p.parse_args()
    out = {}
    for model in MODELS:
        row = {}
        if a.device in ("virtual", "both"):
            row["virtual"] = measure(model, True)
        if a.device in ("gpu", "both"):
            row["gpu"] = measure(model, False)
        reference = row.get("gpu", H100[model])
        row["reference"] = "gpu (this machine)" if "gpu" in row else "H100, PyTorch 2.11 (suites/self-test.yaml)"
        if "virtual" in row:
            row["held_ratio"] = round(row["virtual"]["held_mib"] / reference["held_mib"], 4)
            row["peak_allocated_ratio"] = round(row["virtual"]["peak_allocated_mib"] / reference["peak_allocated_mib"], 4)
        out[model] = row
        print("%-12s %s" % (model, json.dumps(row)), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
