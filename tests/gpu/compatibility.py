#!/usr/bin/env python3
"""Builds docs/compatibility.md from what tests/gpu/run_all.sh measured.

    python3 tests/gpu/compatibility.py RUN_DIR OUT.md

RUN_DIR holds the phase logs of run_all.sh: RESULT lines (injector/results.txt, reservation.log,
libtorch.log) and the results.json of the demo and the self-test. The findings that close the file are
written by hand, in compatibility_findings.md beside this script, and copied in as they are. A cell lists every RESULT check that
COLUMNS maps to it, with the first 90 characters of each one's detail (the full lines are in those logs);
"not run" means no such line was found.
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
    # step_fault_after_pool: JAX with preallocation, the fault after the pool exists (expected: never seen).
    "step fault": ["step_fault", "step_fault_after_pool"],
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
        "allocation fails (PyTorch, CUDA runtime: N=3; LibTorch: N=3, `--fault nth=3,forever`; CuPy: N=1; JAX: N=2",
        "without preallocation, N=1 with it, where the first driver allocation is the whole pool's and nothing after it",
        "reaches the driver). **step fault** — allocations of training step 3 fail, the step written into the control",
        "block. PyTorch: four consecutive failures from step 3's first allocation, each step keeping a fresh, larger",
        "tensor; LibTorch: `--fault step=3,times=4` on the trainer at batch 8192, whose `oomh::recover::begin_step`",
        "empties the cache as step 3 begins; JAX, CuPy, CUDA runtime: every allocation of step 3 fails, each step",
        "allocating fresh, larger memory so that step 3's reaches the driver. JAX with preallocation makes its first",
        "array in step 3, so that its pool's one allocation is the faulted one; `step_fault_after_pool` shows that once",
        "the pool exists a step fault never reaches JAX (expected there: no error, nothing injected).",
        "**reservation** — the `oomh-reserve` sidecar holds real memory so that 4 GiB stay free (`--leave 4GiB`; each",
        "framework's own CUDA context comes out of them), and a 6 GiB request fails with no shim at all (LibTorch:",
        "`oomh_libtorch_trainer --alloc-bytes`; CUDA runtime: one `cudaMalloc`). For JAX with preallocation the detail",
        "also gives its pool limit (`bytes_limit`; JAX's documentation: 75% of the total memory, whatever is free) and",
        "the pool it got, once a small array was made after the OOM, by backing off until one allocation fit.",
        "**single transient fault** — one failed allocation, which PyTorch's caching allocator absorbs by freeing its",
        "cache and retrying (the event log shows the injection, the code never sees it).",
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
    findings = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compatibility_findings.md")
    if os.path.exists(findings):
        md += ["", open(findings).read().rstrip()]
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(tmp, out)
    print("\n".join(md))


if __name__ == "__main__":
    main()
