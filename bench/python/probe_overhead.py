#!/usr/bin/env python3
"""The Python probe's cost per training step: the same loop in fresh processes with and without the probe
(alternating, median of the repetitions), on the CPU or, with --device cuda, on the GPU.

    /usr/bin/python3 bench/python/probe_overhead.py [--steps 2000] [--reps 5]
    python3 bench/python/probe_overhead.py --device cuda [--model mlp]   # a GPU machine (issue 19)

The tiny model makes a step cost little, so that the probe's absolute cost per step (its module and
optimizer hooks, the control-block writes, one event line) stands out; `--model mlp` (4096 wide, batch 512)
is a step of a size a GPU is used for. On a GPU the probe's losses part (OOMH_EVIDENCE all or losses) reads
each step's loss with `.item()`, which waits for the step's kernels; the lean probe and every job's default
one wait for nothing (tests/python/test_probe.py counts it). The loop is also timed without the probe but with
its own `.item()` per step (as most loops that log their loss do), so the cost of that wait and the rest of
the probe's are told apart.
Prints the per-step times and their differences in microseconds.

Note [The probe's cost in one process]
Fresh processes differ from one another by more than the lean probe costs: on the H200 the bare loop alone
ran from 608 to 872 us a step between runs of the same command (bench/RESULTS.md), so a paired median of
fresh processes could not show a figure under 100 us. `--interleaved ROUNDS` measures in one process instead:
the probe is installed as a job's is (sitecustomize at `import torch`) and then taken away (Probe.uninstall:
the patch table restores every function it replaced and removes the global hooks) and put back between
blocks of steps, so that each round is a block with the probe and a block without it on the same process,
the same memory, the same CUDA context and the same core, in alternating order. The per-round differences
are the probe's cost; their median and quartiles are printed. What it leaves out: what the probe costs once
(installing, the first step) and what a process with the probe differs in beside the hooks (its imports).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

# The loop both benchmarks run (probe_profile.py profiles it): argv is steps, device, model, item; after it,
# `step()` is one training step and 50 have run (warm-up).
LOOP = r'''
import sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
steps, device, model_name, item = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
width, batch = (64, 16) if model_name == "tiny" else (4096, 512)
model = torch.nn.Sequential(torch.nn.Linear(32 if model_name == "tiny" else width, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, 8)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(batch, 32 if model_name == "tiny" else width, device=device)
y = torch.randint(0, 8, (batch,), device=device)
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if item:
        loss.item()
for _ in range(50):
    step()
sync()
'''

WORKER = LOOP + r'''
t0 = time.perf_counter()
for _ in range(steps):
    step()
sync()
print((time.perf_counter() - t0) / steps)
'''

# One process, the probe installed (OOMH_PROBE=1) and taken away again between blocks of `steps` steps: each
# round times a block with the probe and one without, in the order ABBA, BAAB, ... so that a drift within the
# round cancels. argv after LOOP's: rounds. Prints one "round ON OFF" line (seconds per step) per round.
INTERLEAVED = LOOP + r'''
rounds = int(sys.argv[5])
import os
from oomharness import probe as _probe
P = _probe.get()
assert P.installed, "the probe is not installed: OOMH_PROBE=1 and a job's environment are needed"
# What the bench varies beside the evidence (PROBE_BENCH: a comma-separated list): "aa" times two blocks
# without the probe against each other (the method's noise floor); "devnull" writes the events to /dev/null,
# "nowrite" makes the lines and writes none (what the step event's write(2) costs on this host's file system);
# "hollow" keeps the hooks and makes the parts do nothing in them (what the hooks alone cost).
knobs = set(filter(None, os.environ.get("PROBE_BENCH", "").split(",")))
if "devnull" in knobs:
    P.ctx.log.fd = os.open(os.devnull, os.O_WRONLY)
if "nowrite" in knobs:
    from oomharness import _events
    P.ctx.log.write = lambda kind, fields: bool(_events.format_line(kind, fields))
if "hollow" in knobs:  # the hooks in place, the parts doing nothing in them: what the hooks alone cost
    knobs |= {"no:" + name for name in ("optimizer_begins", "optimizer_done", "backward_begins", "pre")}
for knob in knobs:  # "no:NAME": the part method NAME does nothing (where the parts' time goes)
    if knob.startswith("no:"):  # no:NAME for every part that has it, or no:Part.NAME (the class's name)
        P.uninstall()
        owner, _, name = knob[3:].rpartition(".")
        for part in P.needed:
            if hasattr(part, name) and owner in ("", type(part).__name__):
                setattr(part, name, lambda *a, **k: None)
        for obj in (P.ctx, P.ctx.log, P.ctx.clock):  # the job context's: emit, write, set_phase, ...
            if not owner and hasattr(obj, name):
                setattr(obj, name, lambda *a, **k: None)
def probe_on(on):
    on = on and "aa" not in knobs
    if on and not P.installed:
        for part in P.needed:  # uninstall() took them off the hook bus; install() puts their torch hooks back
            P.ctx.hooks.register(part)
        P.install(torch)
    elif not on and P.installed:
        P.uninstall()
def block(on):
    probe_on(on)
    for _ in range(10):  # a few steps that settle the change (the first step after install is not the loop)
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t0) / steps
for r in range(rounds):
    order = (True, False) if r % 2 == 0 else (False, True)
    t = {on: block(on) for on in order}
    print("round", t[True], t[False], flush=True)
probe_on(True)
'''


def run(steps, probe, tmp, device="cpu", model="tiny", item=False, evidence=None, rounds=None, knobs=""):
    """Seconds per step of one fresh process; with `rounds`, [(with the probe, without)] per round of the
    interleaved worker instead."""
    from harness import Job  # tests/python/harness.py: a real control block in /dev/shm and the probe's env
    job = Job(seal_key=os.urandom(32))  # sealed event lines, as under the runner
    try:
        env = job.env(probe=probe)
        env.pop("OOMH_CHECK_EVENTS", None)  # the tests' schema check is not what a job pays for
        if evidence is not None:
            env["OOMH_EVIDENCE"] = evidence
        env["PROBE_BENCH"] = knobs
        argv = [sys.executable, "-c", WORKER, str(steps), device, model, "1" if item else "0"]
        if rounds is not None:
            argv[2:3] = [INTERLEAVED]
            argv.append(str(rounds))
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit("the benchmark's worker failed (exit %d):\n%s" % (out.returncode, out.stderr[-3000:]))
        lines = out.stdout.strip().splitlines()
        if rounds is None:
            return float(lines[-1])
        return [(float(on), float(off)) for _, on, off in (line.split() for line in lines if line.startswith("round "))]
    finally:
        job.close()


def interleaved(a, variants):
    """Note [The probe's cost in one process]."""
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            e, _, knobs = variant.partition(":")
            pairs = run(a.steps, True, tmp, a.device, a.model, evidence=e, rounds=a.interleaved, knobs=knobs)
            diffs = sorted((on - off) * 1e6 for on, off in pairs)
            offs = sorted(off * 1e6 for _, off in pairs)
            q = len(diffs) // 4
            # A distribution-free 95% interval of the median: the order statistics n/2 -+ 0.98 sqrt(n).
            half = int(0.98 * len(diffs) ** 0.5)
            lo, hi = diffs[max(0, len(diffs) // 2 - half - 1)], diffs[min(len(diffs) - 1, len(diffs) // 2 + half)]
            print(f"device {a.device}, model {a.model}, evidence {e!r}{' (' + knobs + ')' if knobs else ''}: {len(pairs)} rounds of {a.steps} steps in one "
                  f"process; without the probe {statistics.median(offs):.1f} us/step (from {offs[0]:.1f} to {offs[-1]:.1f}); "
                  f"probe cost per step, paired: median {statistics.median(diffs):.1f} us (95% interval {lo:.1f} to "
                  f"{hi:.1f}), quartiles {diffs[q]:.1f} "
                  f"to {diffs[-1 - q]:.1f}, from {diffs[0]:.1f} to {diffs[-1]:.1f}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", choices=("tiny", "mlp"), default="tiny")
    ap.add_argument("--evidence", action="append",
                    help="OOMH_EVIDENCE for the probed runs: 'all' (every part, as a job run by hand), '' (none: "
                         "a job whose checks need no per-step evidence), or a list such as 'batches,data' "
                         "(Note [A probe that pays for what is checked] in include/oomharness/evidence.h); given "
                         "several times, each repetition runs the bare loop and then every one of them, so that "
                         "the variants are measured side by side (default: all); with --interleaved, E:KNOBS adds "
                         "the worker's PROBE_BENCH knobs (aa, devnull, nowrite: see INTERLEAVED)")
    ap.add_argument("--interleaved", type=int, metavar="ROUNDS",
                    help="instead of fresh processes, one process per evidence variant in which the probe is "
                         "installed and taken away between blocks of --steps steps, ROUNDS pairs of blocks "
                         "(Note [The probe's cost in one process])")
    a = ap.parse_args()
    variants = a.evidence if a.evidence is not None else ["all"]
    if a.interleaved:
        return interleaved(a, variants)
    plain, synced, probed = [], [], {e: [] for e in variants}
    gpu = a.device == "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.reps):
            plain.append(run(a.steps, False, tmp, a.device, a.model))
            if gpu:
                synced.append(run(a.steps, False, tmp, a.device, a.model, item=True))
            for e in variants:
                probed[e].append(run(a.steps, True, tmp, a.device, a.model, evidence=e))
            # Each repetition as it ends, so that a run cut short by a time limit still says what it measured.
            print(f"repetition {len(plain)}: bare {plain[-1] * 1e6:.1f}"
                  + (f", bare with .item() {synced[-1] * 1e6:.1f}" if gpu else "")
                  + "".join(f", {e!r} {probed[e][-1] * 1e6:.1f}" for e in variants) + " us/step", flush=True)
    runs = lambda vs: ", ".join(f"{v * 1e6:.1f}" for v in vs)
    p = statistics.median(plain)
    print(f"device {a.device}, model {a.model}, {a.steps} steps, {a.reps} runs each, evidence "
          + ", ".join(repr(e) for e in variants))
    print(f"without probe: {p * 1e6:.1f} us/step  (runs: {runs(plain)})")
    if gpu:
        s = statistics.median(synced)
        print(f"without probe, loss.item() each step: {s * 1e6:.1f} us/step  (runs: {runs(synced)})")
    for e in variants:
        q = statistics.median(probed[e])
        # Each probed run against the bare run of its own repetition, made just before it: the machine's drift
        # between repetitions cancels out of these differences, not out of the medians' difference above.
        paired = sorted((b - a0) * 1e6 for a0, b in zip(plain, probed[e]))
        print(f"with probe, evidence {e!r}: {q * 1e6:.1f} us/step  (runs: {runs(probed[e])})")
        print(f"  probe cost: {(q - p) * 1e6:.1f} us/step ({(q - p) / p * 100:.2f}% of a step); paired "
              f"differences: median {statistics.median(paired):.1f}, from {paired[0]:.1f} to {paired[-1]:.1f}")
        if gpu:
            print(f"  of which the wait for the step's kernels (.item()): {(s - p) * 1e6:.1f} us/step; "
                  f"the rest: {(q - s) * 1e6:.1f} us/step ({(q - s) / s * 100:.2f}% of a step that reads its loss)")


if __name__ == "__main__":
    main()
