#!/usr/bin/env python3
"""What `oomharness exec` on the virtual device adds to a job: the same small training script run bare and
under the harness, side by side in one run (alternating, so that a busy machine slows both alike), several
repetitions, medians (issue 29; the target is at most 0.5 s over the bare script).

    python3 bench/python/job_overhead.py [--binary build/runner/oomharness] [--python PYTHON] [--reps 7]

The bare run is `PYTHON train.py`, the harnessed one `oomharness exec --simulate --device virtual -o DIR --
PYTHON train.py`: the same interpreter, the same script (it trains on "cuda" when torch says it has it, else
on the CPU, so both runs train the same model the same number of steps). Prints wall and CPU seconds
(this process's children, so the runner, the job and anything they wait for), the difference and the
ratio, and for the harnessed runs where the difference goes: before the job's Python starts (runner start,
suite building, launch), inside the job (the script's own marks against the bare run's), and after the job's
process ended (reading its events, judging, writing results.json and report.html).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# A tiny trainer: what a user's first test would run. Its marks (wall clock) split the job's own time.
SCRIPT = r'''
import atexit, sys, time
marks = {"start": time.time()}
import torch
marks["torch"] = time.time()
torch.manual_seed(0)
dev = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(20):
    x = torch.randn(16, 32, device=dev)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print("step", step, "loss", round(loss.item(), 4))
marks["trained"] = time.time()
def _at_exit():
    marks["exit"] = time.time()
    sys.stderr.write("JOB-MARKS " + " ".join("%s=%.6f" % kv for kv in marks.items()) + "\n")
atexit.register(_at_exit)
'''


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def marks_in(text):
    for line in text.splitlines():
        if line.startswith("JOB-MARKS "):
            return {k: float(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return None


def run_bare(python, script, cwd):
    cpu0, t0 = children_cpu(), time.time()
    p = subprocess.run([python, script], cwd=cwd, capture_output=True, text=True)
    t1, cpu1 = time.time(), children_cpu()
    if p.returncode != 0:
        sys.exit("the bare script failed:\n" + p.stderr[-3000:])
    m = marks_in(p.stderr)
    return {"wall": t1 - t0, "cpu": cpu1 - cpu0, "t0": t0, "t1": t1, "marks": m}


def run_exec(binary, python, script, cwd, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [binary, "exec", "--simulate", "--device", "virtual", "-o", out, "--", python, script]
    cpu0, t0 = children_cpu(), time.time()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    t1, cpu1 = time.time(), children_cpu()
    if p.returncode != 0:
        sys.exit("oomharness exec failed (exit %d):\n%s\n%s" % (p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    results = json.load(open(os.path.join(out, "results.json")))
    job = results["suites"][0]["jobs"][0]
    log = job["attempts"][0]["log_path"]
    m = marks_in(open(log, errors="replace").read())
    shim = {}
    events = os.path.join(os.path.dirname(log), "attempt-0.events.jsonl")
    for line in open(events):
        e = json.loads(line)
        if e.get("kind") in ("shim_start", "shim_exit") and e["kind"] not in shim:
            shim[e["kind"]] = e["t"]
    return {"wall": t1 - t0, "cpu": cpu1 - cpu0, "t0": t0, "t1": t1, "marks": m, "shim": shim,
            "status": job["status"]}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "runner", "oomharness"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--json", help="also write the measurements here")
    args = ap.parse_args()
    args.binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="oomh-job-overhead-")
    script = os.path.join(work, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    load0 = os.getloadavg()
    bare, harnessed = [], []
    # One warm-up of each (page cache), not counted.
    run_bare(args.python, script, work)
    run_exec(args.binary, args.python, script, work, os.path.join(work, "out"))
    for i in range(args.reps):
        pair = [lambda: bare.append(run_bare(args.python, script, work)),
                lambda: harnessed.append(run_exec(args.binary, args.python, script, work, os.path.join(work, "out")))]
        for f in (pair if i % 2 == 0 else reversed(pair)):
            f()
    load1 = os.getloadavg()
    shutil.rmtree(work, ignore_errors=True)

    def phase(runs, fn):
        return med([fn(r) for r in runs if r.get("marks")])

    b_wall, h_wall = med([r["wall"] for r in bare]), med([r["wall"] for r in harnessed])
    b_cpu, h_cpu = med([r["cpu"] for r in bare]), med([r["cpu"] for r in harnessed])
    rows = [
        ("wall, whole command", b_wall, h_wall),
        ("CPU (user+sys, all processes)", b_cpu, h_cpu),
        ("command start -> script's first line", phase(bare, lambda r: r["marks"]["start"] - r["t0"]),
         phase(harnessed, lambda r: r["marks"]["start"] - r["t0"])),
        ("import torch (with the harness: + probe, device)", phase(bare, lambda r: r["marks"]["torch"] - r["marks"]["start"]),
         phase(harnessed, lambda r: r["marks"]["torch"] - r["marks"]["start"])),
        ("20 training steps", phase(bare, lambda r: r["marks"]["trained"] - r["marks"]["torch"]),
         phase(harnessed, lambda r: r["marks"]["trained"] - r["marks"]["torch"])),
        ("script's end -> its atexit", phase(bare, lambda r: r["marks"]["exit"] - r["marks"]["trained"]),
         phase(harnessed, lambda r: r["marks"]["exit"] - r["marks"]["trained"])),
        ("atexit -> command done", phase(bare, lambda r: r["t1"] - r["marks"]["exit"]),
         phase(harnessed, lambda r: r["t1"] - r["marks"]["exit"])),
    ]
    after = phase(harnessed, lambda r: r["t1"] - r["shim"]["shim_exit"] if "shim_exit" in r["shim"] else float("nan"))
    print("job overhead on the virtual device: %d repetitions, medians; python %s; %d CPUs; load %.1f -> %.1f"
          % (args.reps, args.python, os.cpu_count(), load0[0], load1[0]))
    print("%-50s %9s %9s %9s %7s" % ("", "bare s", "exec s", "added s", "ratio"))
    for name, b, h in rows:
        print("%-50s %9.3f %9.3f %+9.3f %7s" % (name, b, h, h - b, "%.2f" % (h / b) if b > 0 else "-"))
    print("%-50s %9s %9.3f" % ("runner after the job's process ended", "", after))
    print("added wall: %.3f s (ratio %.2f); added CPU: %.3f s (ratio %.2f); target: at most 0.5 s of wall "
          "over the bare script: %s; statuses: %s"
          % (h_wall - b_wall, h_wall / b_wall, h_cpu - b_cpu, h_cpu / b_cpu,
             "met" if h_wall - b_wall <= 0.5 else "NOT met", sorted(set(r["status"] for r in harnessed))))
    print("each pair, wall s (bare, exec): %s" % ", ".join("(%.2f, %.2f)" % (b["wall"], h["wall"])
                                                           for b, h in zip(bare, harnessed)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bare": bare, "exec": harnessed, "load": [load0, load1]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
