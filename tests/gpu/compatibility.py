#!/usr/bin/env python3
"""Builds docs/compatibility.md from what tests/gpu/run_all.sh measured.

    python3 tests/gpu/compatibility.py RUN_DIR OUT.md

RUN_DIR holds the phase logs of run_all.sh: RESULT lines (injector/results.txt, reservation.log,
libtorch.log) and the results.json of the demo and the self-test.
"""
import datetime
import json
import os
import re
import subprocess
import sys

ROWS = [
    ("PyTorch, default caching allocator", "torch", "native"),
    ("PyTorch, expandable_segments:True", "torch", "expandable"),
    ("PyTorch, backend:cudaMallocAsync", "torch", "async"),
    ("LibTorch (C++)", "libtorch", "default"),
    ("JAX (preallocation on)", "jax", "prealloc"),
    ("JAX (XLA_PYTHON_CLIENT_PREALLOCATE=false)", "jax", "noprealloc"),
    ("CuPy", "cupy", "default"),
    ("plain CUDA runtime (cudaMalloc)", "runtime", "default"),
]
# Which RESULT checks make up each column.
COLUMNS = {
    "cap": ["cap_oom", "cap_mem_get_info", "cap_mem_info", "sizes_from_cap", "oom_beyond_cap", "cudaMalloc_over_cap", "cudaMallocAsync_over_cap", "cap"],
    "Nth persistent fault": ["nth_persistent", "rule_oom"],
    "step fault": ["step_fault"],
    "reservation": ["reservation"],
    "single transient fault": ["transient_absorbed"],
}


def read_results(run):
    results = {}
    for rel in ["injector/results.txt", "reservation.log", "libtorch.log", "injector.log"]:
        path = os.path.join(run, rel)
        if not os.path.exists(path):
            continue
        for line in open(path, errors="replace"):
            m = re.match(r"RESULT (\S+) (\S+) (\S+) (PASS|FAIL) ?(.*)", line.strip())
            if m:
                results[(m.group(1), m.group(2), m.group(3))] = (m.group(4), m.group(5))
    return results


def cell(results, fw, mode, column):
    found = [(c, results[(fw, mode, c)]) for c in COLUMNS[column] if (fw, mode, c) in results]
    if not found:
        return "not run"
    ok = all(r[0] == "PASS" for _, r in found)
    detail = "; ".join(f"{c}: {r[1][:90]}" for c, r in found)
    return ("PASS" if ok else "FAIL") + " (" + detail.replace("|", "/") + ")"


def suite_table(run, name):
    path = os.path.join(run, name, "results.json")
    if not os.path.exists(path):
        return f"\n_{name}: no results (the phase did not run or failed to write them)._\n"
    r = json.load(open(path))
    lines = ["| job | status | verdicts |", "| --- | --- | --- |"]
    for s in r["suites"]:
        for j in s["jobs"]:
            vs = ", ".join(v["policy"] + ("(must fail)" if v.get("must_fail") else "") + " " + v["status"] for v in j["verdicts"])
            lines.append(f"| {j['name']} | {j['status']} | {vs} |")
    return "\n".join(lines) + "\n"


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception:  # noqa: BLE001
        return "?"


def main():
    run, out = sys.argv[1], sys.argv[2]
    results = read_results(run)
    gpu = sh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1")
    versions = sh("python3 -c 'import torch, jax, cupy; print(f\"torch {torch.__version__} (CUDA {torch.version.cuda}), jax {jax.__version__}, cupy {cupy.__version__}\")'")
    today = datetime.date.today().isoformat()
    md = [
        "# Compatibility",
        "",
        f"Measured on {today}: {gpu} (GPU, driver); {versions}.",
        "Regenerate with `tests/gpu/run_all.sh` on a GPU machine (this file is its `compat` phase's output).",
        "",
        "What each framework saw under each kind of fault (PASS: the framework raised its own out-of-memory",
        "error, or sized itself from the cap, as the check expects; the detail says what was seen):",
        "",
        "| framework | " + " | ".join(COLUMNS) + " |",
        "| --- | " + " | ".join("---" for _ in COLUMNS) + " |",
    ]
    for label, fw, mode in ROWS:
        md.append(f"| {label} | " + " | ".join(cell(results, fw, mode, c) for c in COLUMNS) + " |")
    md += [
        "",
        "Column meanings: **cap** — `OOMH_CAP=4GiB` (LibTorch: 1 GiB through `oomharness exec --cap`); memory queries",
        "report the cap and an allocation beyond it fails. **Nth persistent fault** — from the Nth allocation on, every",
        "allocation fails. **step fault** — allocations of one training step fail (step written by the probe).",
        "**reservation** — the `oomh-reserve` sidecar holds real memory so that 4 GiB stay free, and a 6 GiB request",
        "fails with no shim at all. **single transient fault** — one failed allocation, which PyTorch's caching",
        "allocator absorbs by freeing its cache and retrying (the event log shows the injection, the code never sees it).",
        "",
        "## Did the verdicts match?",
        "",
        "The demo (`suites/demo.yaml`) and the self-test (`suites/self-test.yaml`) on this machine: a good trainer passes",
        "its checks; a `broken-...` trainer passes when each check marked `must_fail` fails.",
        "",
        "### Demo",
        "",
        suite_table(run, "demo"),
        "### Self-test",
        "",
        suite_table(run, "self-test"),
    ]
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(tmp, out)
    print("\n".join(md))


if __name__ == "__main__":
    main()
