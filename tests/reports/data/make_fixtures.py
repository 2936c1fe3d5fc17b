#!/usr/bin/env python3
"""Writes the fixed results files the report tests read (run.json, hostile.json, base.json, new.json).

The files are committed; this script only documents how they were made and regenerates them when the
schema changes. Everything is deterministic: no clock, no randomness.
"""
import json
import math
import os

GiB = 1 << 30
MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1714564800.0  # 2024-05-01T12:00:00Z


def env(simulated=True, **over):
    e = {
        "hostname": "ci-runner-7",
        "gpu_name": "simulated (CPU driver double)" if simulated else "NVIDIA H200",
        "driver_version": "580.65.06",
        "cuda_version": "13.0",
        "simulated_device": simulated,
        "frameworks": {"python": "3.11.2", "torch": "2.11.0+cu130"},
        "harness_version": "0.1.0",
        "command_line": ["oomharness", "run", "suites/demo.yaml", "--json", "out/results.json"],
    }
    e.update(over)
    return e


def sawtooth(duration, n, base, amp, cap, oom_at=None, drop=0.0, step_every=0.25):
    pts = []
    for i in range(n):
        t = round(duration * i / (n - 1), 3)
        phase = (t % step_every) / step_every
        held = base + amp * math.sin(math.pi * phase)
        if oom_at is not None and t >= oom_at:
            held *= (1 - drop)
        pts.append({"t": t, "held": int(held), "cap": cap, "step": int(t / step_every)})
    return pts


def steps(attempt, start, end, every, first=0):
    out, k, t = [], first, start
    while t < end - 1e-9:
        out.append({"t": round(t, 3), "attempt": attempt, "kind": "step", "label": "step %d" % k})
        k += 1
        t += every
    return out


def attempt(index, start, duration, outcome, exit_code=0, last_step=-1, tail="", signal=None, faults_enabled=True):
    a = {"index": index, "start": start, "duration": duration, "outcome": outcome, "faults_enabled": faults_enabled,
         "last_step": last_step, "output_tail": tail, "log_path": "out/logs/attempt-%d.log" % index}
    if exit_code is not None:
        a["exit_code"] = exit_code
    if signal is not None:
        a["signal"] = signal
    return a


def verdict(policy, status, reason, evidence=(), must_fail=False, **args):
    v = {"policy": policy, "args": args, "status": status, "reason": reason,
         "evidence": [{"attempt": a, "t": t, "what": w} for a, t, w in evidence]}
    if must_fail:
        v["must_fail"] = True
    return v


def fault(attempt_, t, size, visible, step, rule="burst", phase="forward", entry="cuMemAlloc_v2", device=0):
    return {"attempt": attempt_, "t": t, "rule": rule, "entry": entry, "size": size, "device": device,
            "step": step, "phase": phase, "visible": visible, "layer": "driver"}


def job(name, status, message, start, duration, **kw):
    j = {"name": name, "status": status, "message": message, "start": start, "duration": duration,
         "command": ["python3", "examples/train.py", "--batch", "64"], "attempts": [], "verdicts": [],
         "faults": [], "timeline": {}, "peak": {}, "markers": []}
    j.update(kw)
    return j


def run_json():
    halving = job(
        "halving-ok", "passed", "", T0 + 0.5, 8.0, gpu=0, target_step=31,
        attempts=[attempt(0, 0.0, 8.0, "ok", 0, 31, "step 30 loss 0.412 batch 32\nstep 31 loss 0.405 batch 32\ndone\n")],
        verdicts=[verdict("batch_halving", "pass",
                          "OOM at step 16 (batch 64) was caught; step 16 ran again at batch 32 and training reached step 31",
                          [(0, 4.02, "OOM at step 16 (batch 64)"), (0, 4.3, "step 16 ran at batch 32")], factor=0.5),
                  verdict("peak_below", "pass", "peak 6.10 GiB stayed under the 7.00 GiB budget", budget=7 * GiB)],
        faults=[fault(0, 3.98, 512 * MiB, False, 16), fault(0, 4.0, 512 * MiB, False, 16),
                fault(0, 4.02, 512 * MiB, True, 16)],
        timeline={"0": sawtooth(8.0, 120, 4.5 * GiB, 1.6 * GiB, 8 * GiB, oom_at=4.02, drop=0.3)},
        peak={"0": int(6.1 * GiB)},
        markers=steps(0, 0.0, 8.0, 0.25) + [
            {"t": 4.02, "attempt": 0, "kind": "oom", "label": "torch.OutOfMemoryError at step 16"},
            {"t": 4.1, "attempt": 0, "kind": "empty_cache", "label": "released 1.20 GiB"}],
        recovery_seconds=0.28)
    resume_tail = ("step 11 loss 0.9\nTraceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                   "capacity of 8.00 GiB of which 0 bytes is free.\n")
    resume = job(
        "resume-broken", "failed",
        "the job was restarted after the OOM at step 12 but loaded checkpoint step 0, not step 10: progress was lost",
        T0 + 9.0, 14.5, gpu=0,
        attempts=[attempt(0, 0.0, 6.0, "oom", 1, 12, resume_tail),
                  attempt(1, 6.5, 8.0, "ok", 0, 20, "resumed from checkpoint step 0\nstep 20 loss 0.3\ndone\n")],
        verdicts=[verdict("checkpoint_resume", "fail",
                          "the job was restarted after the OOM at step 12 but loaded checkpoint step 0, not step 10: progress was lost",
                          [(0, 5.0, "checkpoint step 10 saved"), (0, 5.9, "OOM at step 12"),
                           (1, 6.9, "loaded checkpoint step 0")]),
                  verdict("graceful_exit", "pass", "the last attempt (attempt 1) exited with code 1 and an out-of-memory message after 0.1s")],
        faults=[fault(0, 5.9, 2 * GiB, True, 12, rule="cap", entry="cuMemCreate")],
        timeline={"0": sawtooth(6.0, 60, 5 * GiB, 2.5 * GiB, 8 * GiB, step_every=0.5)
                  + [dict(p, t=round(p["t"] + 6.5, 3)) for p in sawtooth(8.0, 60, 3 * GiB, 1 * GiB, 8 * GiB, step_every=0.4)]},
        peak={"0": int(7.5 * GiB)},
        markers=steps(0, 0.0, 6.0, 0.5) + steps(1, 6.5, 14.5, 0.4) + [
            {"t": 5.0, "attempt": 0, "kind": "checkpoint_save", "label": "step 10 -> ckpt/step10.pt"},
            {"t": 5.9, "attempt": 0, "kind": "oom", "label": "torch.OutOfMemoryError at step 12"},
            {"t": 6.5, "attempt": 1, "kind": "restart", "label": "attempt 2 started"},
            {"t": 6.9, "attempt": 1, "kind": "checkpoint_load", "label": "ckpt/step0.pt"}],
        snapshot="out/jobs/resume-broken/oom_snapshot.pickle",
        recovery_seconds=1.4)
    leaky = job(
        "leaky-eval", "failed",
        "memory held at step start grew from 2.00 GiB to 3.50 GiB over 20 steps (losses kept with their graph?)",
        T0 + 0.5, 6.0, gpu=1,
        attempts=[attempt(0, 0.0, 6.0, "ok", 0, 20, "eval step 20\n")],
        verdicts=[verdict("memory_stable", "fail",
                          "memory held at step start grew from 2.00 GiB to 3.50 GiB over 20 steps (losses kept with their graph?)",
                          [(0, 0.3, "step 1 started at 2.00 GiB"), (0, 5.9, "step 20 started at 3.50 GiB")]),
                  verdict("peak_below", "pass", "peak 3.90 GiB stayed under the 6.00 GiB budget")],
        timeline={"1": [{"t": round(i * 0.1, 3), "held": int(2 * GiB + i * 25 * MiB + (i % 3) * 100 * MiB), "cap": 0, "step": i // 3}
                        for i in range(61)]},
        peak={"1": int(3.9 * GiB)},
        markers=steps(0, 0.0, 6.0, 0.3))
    nostart = job("no-start", "error", "cannot start 'python3 missing.py': No such file or directory", T0 + 0.6, 0.01,
                  attempts=[attempt(0, 0.0, 0.01, "failed_to_start", None, -1, "")])
    quiet = job("quiet", "inconclusive",
                "no OOM reached the training code: 2 injected faults were absorbed by the caching allocator",
                T0 + 1.0, 3.0, gpu=0,
                attempts=[attempt(0, 0.0, 3.0, "ok", 0, 10, "done\n")],
                verdicts=[verdict("empty_cache_retry", "inconclusive",
                                  "no OOM reached the training code: 2 injected faults were absorbed by the caching allocator")],
                faults=[fault(0, 1.0, 64 * MiB, False, 3, rule="once"), fault(0, 2.0, 64 * MiB, False, 6, rule="once")],
                timeline={"0": sawtooth(3.0, 30, 1 * GiB, 0.2 * GiB, 0)},
                peak={"0": int(1.2 * GiB)})
    skipped = job("needs-two-gpus", "skipped", "needs 2 GPUs, 1 available", 0.0, 0.0)
    # A broken trainer kept to show that memory_stable catches it (must_fail: true): XFAIL when the check
    # fails as expected, XPASS when it passes (Note [Expected failures] in reports/src/result.cpp).
    leak_reason = "memory held at step start grew from 1.00 GiB to 1.60 GiB over 12 steps (losses kept with their graph?)"
    xfail = job("leak-caught", "passed", "", T0 + 24.0, 2.0, gpu=0,
                attempts=[attempt(0, 0.0, 2.0, "ok", 0, 12, "step 12 loss 0.7\ndone\n")],
                verdicts=[verdict("memory_stable", "fail", leak_reason,
                                  [(0, 0.2, "step 1 started at 1.00 GiB"), (0, 1.9, "step 12 started at 1.60 GiB")],
                                  must_fail=True)],
                peak={"0": int(1.7 * GiB)})
    xpass_reason = "memory held at step start stayed at 1.00 GiB over 12 steps"
    xpass = job("leak-missed", "failed",
                "memory_stable must fail for this job (must_fail: true) but passed, so it did not catch what the job "
                "gets wrong: " + xpass_reason, T0 + 26.0, 2.0, gpu=0,
                attempts=[attempt(0, 0.0, 2.0, "ok", 0, 12, "step 12 loss 0.7\ndone\n")],
                verdicts=[verdict("memory_stable", "pass", xpass_reason, must_fail=True)],
                peak={"0": int(1.1 * GiB)})
    return {
        "schema_version": 1, "start": T0, "duration": 28.0, "interrupted": False, "environment": env(),
        "suites": [
            {"name": "demo", "file": "suites/demo.yaml", "start": T0 + 0.5, "duration": 23.0,
             "jobs": [halving, resume, leaky]},
            {"name": "selftest", "file": "suites/selftest.yaml", "start": T0 + 0.6, "duration": 3.5,
             "jobs": [nostart, quiet, skipped]},
            {"name": "expectations", "file": "suites/expectations.yaml", "start": T0 + 24.0, "duration": 4.0,
             "jobs": [xfail, xpass]},
        ]}


HOSTILE = "<script>alert(1)</script>"
HOSTILE_ATTR = "\"><img src=x onerror=alert(1)>"


def hostile_json():
    out = ("normal line\n" + HOSTILE + "\n" + HOSTILE_ATTR + "\n\u001b[31mred text\u001b[0m\u0001\u0002\u0007bell\n"
           "```\nfence | pipe `tick`\n'single' & \"double\"\n\u0000nul after\nprogress 10%\rprogress 100%\n")
    j = job(HOSTILE, "failed", HOSTILE_ATTR, T0, 2.0,
            command=["sh", "-c", "echo '" + HOSTILE + "'"],
            attempts=[attempt(0, 0.0, 2.0, "oom", 1, 3, out)],
            verdicts=[verdict("batch_halving", "fail", HOSTILE + " then " + HOSTILE_ATTR, [(0, 1.0, HOSTILE_ATTR)])],
            faults=[fault(0, 1.0, 1 * MiB, True, 3, rule=HOSTILE, entry=HOSTILE_ATTR)],
            timeline={"0": [{"t": 0.0, "held": 0, "cap": 4 * MiB, "step": 0}, {"t": 2.0, "held": 3 * MiB, "cap": 4 * MiB, "step": 3}]},
            peak={"0": 3 * MiB},
            markers=[{"t": 1.0, "attempt": 0, "kind": "oom", "label": HOSTILE},
                     {"t": 0.5, "attempt": 0, "kind": "step", "label": HOSTILE_ATTR}],
            snapshot="javascript:alert(1)")
    return {"schema_version": 1, "start": T0, "duration": 2.0, "interrupted": False,
            "environment": env(simulated=True, hostname=HOSTILE, gpu_name=HOSTILE_ATTR,
                               frameworks={HOSTILE: HOSTILE_ATTR}, command_line=["oomharness", HOSTILE_ATTR]),
            "suites": [{"name": HOSTILE_ATTR, "file": HOSTILE, "start": T0, "duration": 2.0, "jobs": [j]}]}


def compare_pair():
    def cj(name, status, peak, visible=1, recovery=None, verdicts=None):
        extra = {"recovery_seconds": recovery} if recovery is not None else {}
        return job(name, status, "" if status == "passed" else name + " failed its check", T0, 1.0,
                   verdicts=verdicts or [verdict("batch_halving", "pass" if status == "passed" else "fail", "r")],
                   faults=[fault(0, 0.5, MiB, i < visible, 1) for i in range(2)],
                   peak={"0": peak}, **extra)
    base = {"schema_version": 1, "start": T0, "duration": 5.0, "interrupted": False, "environment": env(),
            "suites": [{"name": "s", "file": "suites/s.yaml", "start": T0, "duration": 5.0, "jobs": [
                cj("regressed", "passed", 1 * GiB),
                cj("improved", "failed", 2 * GiB),
                cj("peak-grew", "passed", 1 * GiB, recovery=1.0),
                cj("absorbed-more", "passed", 1 * GiB, visible=2),
                cj("dropped", "passed", 1 * GiB)]}]}
    new = {"schema_version": 1, "start": T0 + 3600, "duration": 5.0, "interrupted": False, "environment": env(),
           "suites": [{"name": "s", "file": "suites/s.yaml", "start": T0 + 3600, "duration": 5.0, "jobs": [
               cj("regressed", "failed", 1 * GiB),
               cj("improved", "passed", int(1.5 * GiB)),
               cj("peak-grew", "passed", int(1.1 * GiB), recovery=1.5),
               cj("absorbed-more", "passed", 1 * GiB, visible=1),
               cj("added", "passed", 512 * MiB)]}]}
    return base, new


def write(name, data):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    write("run.json", run_json())
    write("hostile.json", hostile_json())
    base, new = compare_pair()
    write("base.json", base)
    write("new.json", new)
