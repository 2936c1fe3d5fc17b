#!/usr/bin/env python3
"""Compares one suite run on the GPU with the same suite run on the virtual CUDA device (issue 19, item 1).

    python3 tests/gpu/virtual_vs_gpu.py GPU_RESULTS.json VIRTUAL_RESULTS.json OUT.md

For every job in both: its status and each verdict on each device, and its peak (bytes held on device 0,
as results.json's `peak` gives it; the virtual device's is modelled). Prints RESULT lines (PASS when every
verdict matched, FAIL naming the jobs whose verdicts differ) and writes a Markdown table for
docs/compatibility.md. Jobs present in only one run are listed as such, never silently dropped.
"""
import json
import sys


def jobs_of(path):
    with open(path) as f:
        run = json.load(f)
    out = {}
    for suite in run.get("suites", []):
        for job in suite.get("jobs", []):
            out[job["name"]] = job
    return run, out


def verdicts(job):
    return {v["policy"] + ("(must_fail)" if v.get("must_fail") else ""): v["status"] for v in job.get("verdicts", [])}


def peak(job):
    values = [int(b) for b in (job.get("peak") or {}).values()]
    return max(values) if values else None


def mib(b):
    return "-" if b is None else f"{b / 2**20:,.1f} MiB"


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    gpu_run, gpu = jobs_of(sys.argv[1])
    virt_run, virt = jobs_of(sys.argv[2])
    rows, differ, only = [], [], []
    for name in sorted(set(gpu) | set(virt)):
        if name not in gpu or name not in virt:
            only.append(f"{name} ({'GPU' if name in gpu else 'virtual device'} only)")
            continue
        g, v = gpu[name], virt[name]
        vg, vv = verdicts(g), verdicts(v)
        same = vg == vv and g["status"] == v["status"]
        if not same:
            differ.append(name)
        pg, pv = peak(g), peak(v)
        ratio = f"{pv / pg:.3f}" if pg and pv else "-"
        cells = ", ".join(f"{k} {vg.get(k, '-')}/{vv.get(k, '-')}" for k in sorted(set(vg) | set(vv)))
        rows.append(f"| {name} | {g['status']} / {v['status']} | {'same' if same else 'DIFFERENT'} | {cells} | "
                    f"{mib(pg)} | {mib(pv)} | {ratio} |")
    env = gpu_run.get("environment", {})
    lines = [f"GPU: {env.get('gpu_name', '?')}, driver {env.get('driver_version', '?')}; "
             f"frameworks {json.dumps(env.get('frameworks', {}))}. Virtual device: "
             f"{virt_run.get('environment', {}).get('virtual_device', '?')}.", "",
             "| job | status (GPU / virtual) | verdicts | each verdict (GPU/virtual) | peak on the GPU | peak on the virtual device | virtual / GPU |",
             "| --- | --- | --- | --- | ---: | ---: | ---: |"] + rows
    if only:
        lines += ["", "In one run only: " + "; ".join(only)]
    with open(sys.argv[3], "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    compared = len(rows)
    if differ:
        print(f"RESULT verdicts_match FAIL {len(differ)} of {compared} jobs differ: {', '.join(differ)}")
    else:
        print(f"RESULT verdicts_match {'PASS' if compared else 'FAIL'} {compared} jobs compared, every verdict the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
