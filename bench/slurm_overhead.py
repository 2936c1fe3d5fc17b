#!/usr/bin/env python3
"""What the Slurm backend adds per job beyond Slurm's own cost (issue 17), on a running Slurm.

    eval "$(bash scripts/slurm-local.sh env)"
    python3 bench/slurm_overhead.py --bin build/runner/oomharness --jobs 200 [--poll 0.2]

Three measurements, one after the other, each of N trivial jobs (`true`):
  srun      N x `srun true`, one after the other: Slurm's latency for one job, start to end.
  sbatch    N x `sbatch --wrap true`, then one squeue per interval until every job ended: Slurm's own
            throughput for a batch of jobs, polled as the harness polls.
  harness   `oomharness run --backend slurm --simulate` of a suite of N jobs `run: true` (each job an sbatch
            whose batch script runs the agent, which runs the job under the shim and writes its results),
            with squeue wrapped on PATH to count its calls.
The harness's overhead per job is (harness - sbatch) / N. Prints a Markdown table.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def wait_all(ids, poll):
    calls = 0
    pending = set(ids)
    while pending:
        time.sleep(poll)
        calls += 1
        r = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(sorted(pending)), "-o", "%i|%T"],
                           capture_output=True, text=True)
        listed = {}
        for line in r.stdout.splitlines():
            i, _, state = line.partition("|")
            listed[i] = state
        for i in list(pending):
            st = listed.get(i)
            if st is None or st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                pending.discard(i)
    return calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--srun", type=int, default=50, help="srun true repetitions (sequential)")
    a = ap.parse_args()
    n = a.jobs
    with tempfile.TemporaryDirectory(prefix="oomh-slurm-bench-", dir=os.environ.get("OOMH_BENCH_DIR")) as tmp:
        t0 = time.time()
        for _ in range(a.srun):
            subprocess.run(["srun", "--quiet", "true"], check=True)
        srun_each = (time.time() - t0) / a.srun

        t0 = time.time()
        ids = []
        for _ in range(n):
            r = subprocess.run(["sbatch", "--parsable", "--output=/dev/null", "--wrap", "true"],
                               capture_output=True, text=True, check=True, cwd=tmp)
            ids.append(r.stdout.strip().split(";")[0])
        submitted = time.time() - t0
        wait_all(ids, a.poll)
        sbatch_total = time.time() - t0

        suite = os.path.join(tmp, "suite.yaml")
        with open(suite, "w") as f:
            f.write("version: 1\nname: trivial\njobs:\n  - name: t-{i}\n    run: 'true'\nmatrix:\n  i: [%s]\n"
                    % ", ".join(str(i) for i in range(n)))
        wrap = os.path.join(tmp, "bin")
        os.makedirs(wrap)
        log = os.path.join(tmp, "squeue.log")
        real = subprocess.run(["sh", "-c", "command -v squeue"], capture_output=True, text=True).stdout.strip()
        with open(os.path.join(wrap, "squeue"), "w") as f:
            f.write("#!/bin/sh\necho \"$*\" >> %s\nexec %s \"$@\"\n" % (log, real))
        os.chmod(os.path.join(wrap, "squeue"), 0o755)
        env = dict(os.environ, PATH=wrap + ":" + os.environ["PATH"])
        t0 = time.time()
        r = subprocess.run([a.bin, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", str(a.poll),
                            "-o", os.path.join(tmp, "out")], capture_output=True, text=True, env=env)
        harness_total = time.time() - t0
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:], file=sys.stderr)
            sys.exit("the harness run failed (exit %d)" % r.returncode)
        calls = [l for l in open(log).read().splitlines() if " -j " in l]
        max_ids = max(len(l.split(" -j ")[1].split()[0].split(",")) for l in calls)

    print("| measurement | %d jobs |" % n)
    print("| --- | ---: |")
    print("| `srun true`, one after the other (per job) | %.3f s |" % srun_each)
    print("| %d x `sbatch --wrap true` submitted | %.2f s (%.1f ms each) |" % (n, submitted, 1000 * submitted / n))
    print("| ... until all ended (squeue every %.1f s) | %.2f s |" % (a.poll, sbatch_total))
    print("| `oomharness run --backend slurm`, %d jobs `true` | %.2f s |" % (n, harness_total))
    print("| **harness overhead per job beyond Slurm's** (harness - sbatch) / N | **%.1f ms** |"
          % (1000 * (harness_total - sbatch_total) / n))
    print("| squeue calls by the harness (interval %.1f s; most ids in one call) | %d (%d ids) |" % (a.poll, len(calls), max_ids))


if __name__ == "__main__":
    main()
