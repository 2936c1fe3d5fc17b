"""The start cost of a distributed job's ranks (issue 15's target: at most 20 ms per rank beyond the processes'
own start, measured on the CPU). Runs jobs of `ranks: N` (N = 1, 2, 4, 8, 16) whose every rank is /bin/true,
REPEAT times each, through `oomharness run`, and reads each job's duration from results.json (the runner's
clock: from the job's start to its end, every rank reaped, logs and event logs read, control blocks released).
The per-rank figure is the slope of the median duration over N; beside it, the slope of starting and reaping
N /bin/true processes directly from Python with the same LD_PRELOAD (the processes' own start).

    python3 bench/ranks_start.py BUILD_DIR [REPEAT]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

build = sys.argv[1]
repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 7
sizes = [1, 2, 4, 8, 16]
oomharness = os.path.join(build, "runner", "oomharness")
inject = os.path.join(build, "injector", "liboomharness_inject.so")
out = tempfile.mkdtemp(prefix="oomh-ranks-bench-")
suite = os.path.join(out, "ranks.yaml")
with open(suite, "w") as f:
    f.write("version: 1\nname: ranks-bench\ndefaults: {probe: none, timeout: 60s}\njobs:\n")
    for k in range(repeat):
        for n in sizes:
            f.write("  - {name: ranks-%d-%d, run: /bin/true, ranks: %d}\n" % (n, k, n))
subprocess.run([oomharness, "run", suite, "--out", os.path.join(out, "run"), "-j", "1"], stdout=subprocess.DEVNULL, check=False)
with open(os.path.join(out, "run", "results.json")) as f:
    jobs = [j for s in json.load(f)["suites"] for j in s["jobs"]]
runner = {n: statistics.median(j["duration"] for j in jobs if j["name"].split("::")[-1].startswith("ranks-%d-" % n)) for n in sizes}


def direct(n):
    env = dict(os.environ, LD_PRELOAD=inject)
    t = time.perf_counter()
    procs = [subprocess.Popen(["/bin/true"], env=env) for _ in range(n)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t


own = {n: statistics.median(direct(n) for _ in range(repeat)) for n in sizes}


def slope(d):
    xs, ys = sizes, [d[n] for n in sizes]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


print("ranks  runner job (ms)  direct start+reap (ms)")
for n in sizes:
    print("%5d  %15.1f  %22.1f" % (n, runner[n] * 1e3, own[n] * 1e3))
print("per rank: runner %.2f ms, direct %.2f ms, added by the runner %.2f ms" %
      (slope(runner) * 1e3, slope(own) * 1e3, (slope(runner) - slope(own)) * 1e3))
