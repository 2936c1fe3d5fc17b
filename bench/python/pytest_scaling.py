#!/usr/bin/env python3
"""Does `pytest -n N` scale with the plugin? A test file of a few fixture tests, each a small trainer run by
`oomharness.exec` on the virtual device, run serially and with `-n N` (pytest-xdist), alternating, several
repetitions, medians (issue 29).

    python3 bench/python/pytest_scaling.py [--binary build/runner/oomharness] [--python PYTHON] [--tests 4]
                                          [--workers 2] [--reps 3]

Each job prints how many intra-op threads PyTorch gave it: under `-n N` the plugin passes each job its share
of the cores (`--threads-per-job`, Note [CPU share of packed jobs] in runner/src/exec/cpu_share.h), so that N
jobs at once do not start N x cores OpenMP threads. `--no-share` runs the `-n N` case without it (the jobs
then get every core each, as before), for comparison.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

TRAIN = r'''
import os, torch
with open("threads-%d.txt" % os.getpid(), "w") as f:  # xdist's workers do not pass a test's output on
    f.write(str(torch.get_num_threads()))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(40):
    loss = model(torch.randn(256, 256, device="cuda")).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
'''

TESTS = '''
import os, sys
def make(i):
    def test(oomharness):
        o = oomharness.exec([sys.executable, "train.py"], expect=["exit=0"], name="t%d" % i)
        out = "\\n".join(o.output_tail)
        print("JOB", i, "pid", os.getpid(), out)
    return test
for i in range({tests}):
    globals()["test_job_%d" % i] = make(i)
'''


def run_pytest(python, folder, env, workers):
    argv = [python, "-m", "pytest", "-q", "-s", "-p", "oomharness.pytest_plugin", "-p", "no:cacheprovider",
            "--oomh-device", "virtual", "test_jobs.py"]
    if workers > 1:
        argv += ["-n", str(workers)]
    t0 = time.time()
    p = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit("pytest failed (exit %d):\n%s\n%s" % (p.returncode, p.stdout[-4000:], p.stderr[-2000:]))
    threads = set()
    for name in os.listdir(folder):
        if name.startswith("threads-"):
            with open(os.path.join(folder, name)) as f:
                threads.add(int(f.read()))
            os.unlink(os.path.join(folder, name))
    return wall, sorted(threads)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "runner", "oomharness"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tests", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-share", action="store_true", help="-n N with OMP_NUM_THREADS=<all cores> for each job")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="oomh-pytest-scaling-")
    with open(os.path.join(folder, "train.py"), "w") as f:
        f.write(TRAIN)
    with open(os.path.join(folder, "test_jobs.py"), "w") as f:
        f.write(TESTS.replace("{tests}", str(args.tests)))
    env = dict(os.environ, OOMH_BINARY=os.path.abspath(args.binary),
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("OMP_NUM_THREADS", None)
    parallel_env = dict(env)
    if args.no_share:
        parallel_env["OMP_NUM_THREADS"] = str(len(os.sched_getaffinity(0)))
    load0 = os.getloadavg()
    serial, parallel, seen = [], [], {}
    run_pytest(args.python, folder, env, 1)  # warm-up, not counted
    for i in range(args.reps):
        order = [(1, env, serial), (args.workers, parallel_env, parallel)]
        for workers, e, into in (order if i % 2 == 0 else reversed(order)):
            wall, threads = run_pytest(args.python, folder, e, workers)
            into.append(wall)
            seen[workers] = threads
    load1 = os.getloadavg()
    s, p = statistics.median(serial), statistics.median(parallel)
    print("pytest -n %d vs serial: %d fixture tests (one virtual-device job each), %d repetitions, medians; "
          "python %s; %d CPUs; load %.1f -> %.1f"
          % (args.workers, args.tests, args.reps, args.python, len(os.sched_getaffinity(0)), load0[0], load1[0]))
    print("serial:  %.2f s  (runs %s; PyTorch threads per job %s)" % (s, ", ".join("%.2f" % x for x in serial), seen.get(1)))
    print("-n %d:    %.2f s  (runs %s; PyTorch threads per job %s%s)"
          % (args.workers, p, ", ".join("%.2f" % x for x in parallel), seen.get(args.workers),
             ", shared off" if args.no_share else ""))
    print("speed-up: %.2fx" % (s / p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
