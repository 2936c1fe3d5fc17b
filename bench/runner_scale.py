#!/usr/bin/env python3
"""The runner's cost per job as jobs accumulate (issue 12, "constant cost per job").

Runs N trivial `true` jobs (a generated suite, one job at a time) through `oomharness run --simulate`,
optionally under a descriptor limit, samples the runner's open descriptors and resident memory while it
runs, and reports:
  - the cost per job near job 100 and near job N: the median gap between the starts of consecutive jobs
    over a window of 100 jobs (results.json's `start` of each job), and their ratio;
  - open descriptors and RSS when about 100 jobs had started and at the end; peak RSS (VmHWM).

  bench/runner_scale.py --bin build/runner/oomharness [-n 10000] [--nofile 256] [--keep DIR]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])  # kB
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("-n", type=int, default=10000)
    ap.add_argument("--nofile", type=int, default=0, help="RLIMIT_NOFILE for the runner (0: leave it)")
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--keep")
    a = ap.parse_args()
    folder = a.keep or tempfile.mkdtemp(prefix="oomh-scale-")
    os.makedirs(folder, exist_ok=True)
    suite = os.path.join(folder, "scale.yaml")
    with open(suite, "w") as f:
        f.write("version: 1\nname: scale\ndefaults: {timeout: 1m, probe: none}\njobs:\n")
        for i in range(a.n):
            f.write(f"  - name: j{i:05d}\n    run: \"true\"\n    expect: [exit: 0]\n")

    def limit():
        if a.nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (a.nofile, a.nofile))

    samples = []
    t0 = time.time()
    p = subprocess.Popen([os.path.abspath(a.bin), "run", "--simulate", suite, "-o", os.path.join(folder, "out")],
                         cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit, text=True)

    def sampler():
        while p.poll() is None:
            s = proc_status(p.pid)
            if s:
                samples.append((time.time(), s))
            time.sleep(0.25)

    th = threading.Thread(target=sampler)
    th.start()
    _, err = p.communicate()
    th.join()
    wall = time.time() - t0
    with open(os.path.join(folder, "out", "results.json")) as f:
        results = json.load(f)
    jobs = [j for s in results["suites"] for j in s["jobs"]]
    jobs.sort(key=lambda j: j["name"])
    starts = [j["start"] for j in jobs]
    statuses = {}
    for j in jobs:
        statuses[j["status"]] = statuses.get(j["status"], 0) + 1
    gaps = [b - a_ for a_, b in zip(starts, starts[1:])]
    w = a.window
    early = statistics.median(gaps[100:100 + w]) if len(gaps) >= 100 + w else statistics.median(gaps[:w])
    late = statistics.median(gaps[-w:])

    def at(t):  # the sample nearest to wall-clock time t
        return min(samples, key=lambda s: abs(s[0] - t))[1] if samples else {}

    s100 = at(starts[min(100, len(starts) - 1)])
    s_end = at(starts[-1])
    peak = max((s[1].get("VmHWM", 0) for s in samples), default=0)
    print(f"jobs: {len(jobs)} ({statuses}), runner exit {p.returncode}, wall {wall:.1f} s, nofile limit {a.nofile or 'unchanged'}")
    print(f"cost per job (median gap between job starts, window {w}): near job 100 {early * 1e3:.2f} ms, "
          f"near job {len(jobs)} {late * 1e3:.2f} ms, ratio {late / early:.2f}")
    print(f"open descriptors: near job 100 {s100.get('fds')}, near job {len(jobs)} {s_end.get('fds')}, "
          f"max {max((s[1].get('fds', 0) for s in samples), default=0)}")
    print(f"RSS: near job 100 {s100.get('VmRSS', 0) / 1024:.1f} MiB, near job {len(jobs)} {s_end.get('VmRSS', 0) / 1024:.1f} MiB, "
          f"peak {peak / 1024:.1f} MiB")
    if "Too many open files" in err:
        print("stderr mentions 'Too many open files'")
    return 0 if p.returncode in (0, 1) and statuses.get("passed", 0) == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
