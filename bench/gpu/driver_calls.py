#!/usr/bin/env python3
"""The shim's added cost per intercepted driver call on the real driver: build/bench/driver_call_bench run in
fresh processes, alternately native and under the shim (LD_PRELOAD with a 1 TiB cap, so every allocation
goes through the ledger and the cap check, and no rule), median of --runs each. Prints a Markdown table.

    python3 bench/gpu/driver_calls.py --bench build/bench/driver_call_bench \\
        --inject build/injector/liboomharness_inject.so [--runs 5] [--footprint]

--footprint also runs the shim with OOMH_CAP_COUNTS=footprint (one NVML query per 100 ms at most), and the
benchmark natively with NVML initialised in the process (--nvml): what NVML's presence alone costs.
"""
import argparse
import json
import os
import statistics
import subprocess


def run(bench, env, args):
    out = subprocess.run([bench] + args, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"driver_call_bench failed ({out.returncode}): {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--inject", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--footprint", action="store_true")
    ap.add_argument("--calls", default="2000")
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("OOMH_")}
    modes = {"native": (base, []), "shim": (dict(base, LD_PRELOAD=args.inject, OOMH_CAP="1TiB"), [])}
    if args.footprint:
        modes["shim, footprint"] = (dict(modes["shim"][0], OOMH_CAP_COUNTS="footprint"), [])
        modes["native, NVML initialised"] = (base, ["--nvml"])
    results = {m: [] for m in modes}
    for _ in range(args.runs):
        for m, (env, extra) in modes.items():
            results[m].append(run(args.bench, env, ["--calls", args.calls] + extra))
    ops = [("alloc_free_ns", "`cuMemAlloc_v2` + `cuMemFree_v2` (2 MiB)"),
           ("async_pair_ns", "`cuMemAllocAsync` + `cuMemFreeAsync` (2 MiB, pool)"),
           ("mem_get_info_ns", "`cuMemGetInfo_v2`")]
    med = {m: {op: statistics.median(r[op] for r in results[m]) for op, _ in ops} for m in modes}
    print(json.dumps({"runs": args.runs, "medians": med}))
    if args.footprint:
        nv = results["native, NVML initialised"]
        print("nvmlInit_v2 ms: %s; nvmlDeviceGetComputeRunningProcesses_v3 us (median of 21): %s" % (
            [r["nvml_init_ms"] for r in nv], [r["nvml_query_us"] for r in nv]))
    header = "| call | native ns | " + " | ".join(f"{m} ns | added" for m in modes if m != "native") + " |"
    print(header)
    print("| --- | ---: |" + " ---: | ---: |" * (len(modes) - 1))
    for op, name in ops:
        if med["native"][op] < 0:
            continue
        cells = [f"{med[m][op]:.0f} | {med[m][op] - med['native'][op]:+.0f}" for m in modes if m != "native"]
        print(f"| {name} | {med['native'][op]:.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
