#!/usr/bin/env python3
"""End-to-end tests of `oomharness run --backend slurm` on the local one-node Slurm (scripts/slurm-local.sh).

    slurm_e2e.py CASE     # one of the cases below; ctest runs each as its own test (tests/slurm/CMakeLists.txt)

Environment: E2E_BIN (the oomharness binary), E2E_TRAINER_DIR (the emulated trainer's folder),
E2E_SOURCE_DIR, SLURM_CONF. (Not OOMH_ names: the shim warns in every job about OOMH_ names it does not know.) When the local Slurm is not up the case exits 77 (ctest: skipped) and says
why, unless OOMH_REQUIRE_SLURM=1 (scripts/test.sh sets it after deps.sh installed Slurm): then it fails.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("E2E_BIN", "")
SOURCE = os.environ.get("E2E_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TRAINER_DIR = os.environ.get("E2E_TRAINER_DIR", "")
SKIP = 77


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def require_slurm():
    script = os.path.join(SOURCE, "scripts", "slurm-local.sh")
    r = subprocess.run(["bash", script, "status"], capture_output=True, text=True)
    if r.returncode != 0:
        why = "the local Slurm is not up (scripts/slurm-local.sh status: %s)" % (r.stdout + r.stderr).strip()
        if os.environ.get("OOMH_REQUIRE_SLURM") == "1":
            fail(why + "; OOMH_REQUIRE_SLURM=1: this run must test the Slurm backend")
        print("SKIPPED: " + why, flush=True)
        sys.exit(SKIP)
    if not BIN or not os.access(BIN, os.X_OK):
        fail("E2E_BIN does not name the oomharness binary: %r" % BIN)


def env_with_trainer():
    # The shim warns in every job about OOMH_ names it does not know (OOMH_SLURM_DIR, OOMH_REQUIRE_SLURM).
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMH_")}
    # Jobs run `python3`: the one that runs this (ctest gives the one with torch), whatever PATH has first.
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if TRAINER_DIR:
        env["PATH"] = TRAINER_DIR + ":" + env.get("PATH", "")
    return env


def run(args, **kw):
    print("+ " + " ".join(args), flush=True)
    r = subprocess.run(args, capture_output=True, text=True, env=kw.pop("env", env_with_trainer()), **kw)
    print(r.stdout[-4000:], r.stderr[-4000:], sep="\n", flush=True)
    return r


def results(out):
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


def jobs_of(res):
    return {s["name"] + "::" + j["name"]: j for s in res["suites"] for j in s["jobs"]}


def write_suite(folder, text):
    path = os.path.join(folder, "suite.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def squeue_ours():
    r = subprocess.run(["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True)
    return [l for l in r.stdout.splitlines() if "|oomh:" in l]


# ---- cases -------------------------------------------------------------------------------------------


def case_demo_verdicts(tmp):
    """The simulated demo suite through the local Slurm gives the same verdicts as the local runner."""
    suite = os.path.join(SOURCE, "suites", "demo-simulated.yaml")
    local = run([BIN, "run", suite, "--simulate", "-o", os.path.join(tmp, "local")])
    slurm = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", "0.2", "-o", os.path.join(tmp, "slurm")])
    if local.returncode != 0:
        fail("the local run of the demo did not pass (exit %d): nothing to compare with" % local.returncode)
    if local.returncode != slurm.returncode:
        fail("exit codes differ: local %d, slurm %d" % (local.returncode, slurm.returncode))
    a, b = jobs_of(results(os.path.join(tmp, "local"))), jobs_of(results(os.path.join(tmp, "slurm")))
    if sorted(a) != sorted(b):
        fail("job lists differ: %s vs %s" % (sorted(a), sorted(b)))
    if len(a) < 6:
        fail("the demo ran only %d jobs" % len(a))
    for name in a:
        ja, jb = a[name], b[name]
        if ja["status"] != jb["status"]:
            fail("%s: local %s, slurm %s (%s)" % (name, ja["status"], jb["status"], jb.get("message")))
        va = [(v["policy"], v["status"]) for v in ja["verdicts"]]
        vb = [(v["policy"], v["status"]) for v in jb["verdicts"]]
        if va != vb:
            fail("%s: verdicts differ: local %s, slurm %s" % (name, va, vb))
        if len(ja["attempts"]) != len(jb["attempts"]):
            fail("%s: %d attempts locally, %d under Slurm" % (name, len(ja["attempts"]), len(jb["attempts"])))
    print("same statuses and verdicts for %d jobs" % len(a))


def case_interrupt(tmp):
    """SIGINT to the runner: every Slurm job cancelled, results written and marked interrupted, none left."""
    suite = write_suite(tmp, """version: 1
name: interrupt
jobs:
  - name: sleeper-{n}
    run: sleep 83.25
    timeout: 5m
matrix:
  n: [1, 2, 3]
""")
    out = os.path.join(tmp, "out")
    p = subprocess.Popen([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", "0.2", "-o", out],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env_with_trainer())
    deadline = time.time() + 30
    while time.time() < deadline:
        if sum(1 for l in squeue_ours() if l.endswith("|RUNNING")) >= 3:
            break
        time.sleep(0.2)
    else:
        p.kill()
        fail("the three jobs did not run within 30 s: %s" % squeue_ours())
    time.sleep(1.0)  # the agents have started their jobs
    p.send_signal(signal.SIGINT)
    try:
        output, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the runner did not stop within 60 s of SIGINT")
    print(output[-4000:])
    if p.returncode != 2:
        fail("exit code %d after SIGINT, expected 2 (interrupted)" % p.returncode)
    res = results(out)
    if not res.get("interrupted"):
        fail("results.json does not say the run was interrupted")
    for name, j in jobs_of(res).items():
        if j["status"] != "interrupted":
            fail("%s is %s, expected interrupted" % (name, j["status"]))
    left = [l for l in squeue_ours() if not l.endswith(("|CANCELLED", "|COMPLETED", "|FAILED"))]
    if left:
        fail("Slurm jobs left: %s" % left)
    time.sleep(0.5)
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    if "sleep 83.25" in procs:
        fail("a job's process outlived the run:\n" + procs)
    print("interrupted: 3 jobs cancelled, results written, nothing left")


def case_env_commas(tmp):
    """An environment value with commas (and an equals sign, quotes, spaces) reaches the job intact."""
    value = "a,b,c=d, e 'f' \"g\""
    suite = write_suite(tmp, """version: 1
name: env
jobs:
  - name: prints
    run: printenv COMMA_VALUE
    env: {COMMA_VALUE: %s}
""" % json.dumps(value))
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", "0.2", "-o", out])
    j = jobs_of(results(out))["env::prints"]
    lines = open(j["attempts"][0]["log_path"]).read().split("\n")
    if value not in lines:
        fail("the job did not see %r; its output: %r" % (value, lines))
    if r.returncode not in (0, 5):
        fail("exit code %d" % r.returncode)
    print("the value arrived intact: %r" % value)


def case_gres_distinct(tmp):
    """Two 1-GPU jobs at once get distinct GPUs from Slurm (CUDA_VISIBLE_DEVICES), never shared."""
    suite = write_suite(tmp, """version: 1
name: gres
jobs:
  - name: gpu-{n}
    run: sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; date +%s.%N; sleep 3; date +%s.%N'
matrix:
  n: [1, 2]
""")
    out = os.path.join(tmp, "out")
    run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-gres", "gpu", "--slurm-poll", "0.2", "-o", out])
    seen, spans = [], []
    for name, j in sorted(jobs_of(results(out)).items()):
        lines = open(j["attempts"][0]["log_path"]).read().split("\n")
        cvd = [l for l in lines if l.startswith("CVD=")]
        if not cvd or cvd[0] == "CVD=":
            fail("%s: no CUDA_VISIBLE_DEVICES from Slurm: %s" % (name, lines))
        seen.append(cvd[0])
        times = [float(l) for l in lines if l.replace(".", "", 1).isdigit()]
        if len(times) != 2:
            fail("%s: expected two time stamps in its log: %s" % (name, lines))
        spans.append((times[0], times[1]))
        if j.get("gpu") is None:
            fail("%s: results.json names no GPU" % name)
    if seen[0] == seen[1]:
        fail("both jobs got %s" % seen[0])
    if not (spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]):
        fail("the two jobs did not run at the same time: %s" % spans)
    print("distinct GPUs at the same time: %s" % seen)


def case_missing_results(tmp):
    """A job whose agent wrote no results (the agent was killed) is an error naming Slurm's state. The agent is
    killed from beside it: its job cannot reach it (as root it runs in the run's PID namespace, issue 44)."""
    suite = write_suite(tmp, """version: 1
name: missing
jobs:
  - name: loses-its-agent
    run: sleep 5
""")
    killer = os.path.join(tmp, "killed_agent.sh")
    with open(killer, "w") as f:
        f.write("#!/bin/sh\n'%s' \"$@\" &\nagent=$!\nsleep 1\nkill -9 $agent\nwait $agent\nexit 137\n" % BIN)
    os.chmod(killer, 0o755)
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-agent", killer, "--slurm-poll", "0.2", "-o", out])
    j = jobs_of(results(out))["missing::loses-its-agent"]
    if j["status"] != "error":
        fail("status %s, expected error" % j["status"])
    msg = j["message"]
    if "Slurm job" not in msg or "FAILED" not in msg or "wrote no results" not in msg:
        fail("the message does not name Slurm's state and the missing results: %r" % msg)
    if r.returncode != 1:
        fail("exit code %d, expected 1" % r.returncode)
    print("reported as: " + msg)


def case_completed_without_results(tmp):
    """A batch script that exits 0 without results (the nodes' agent is not oomharness) is an error, after
    the grace a late shared filesystem gets (Note [Results that are late])."""
    suite = write_suite(tmp, "version: 1\nname: late\njobs:\n  - {name: t, run: 'true'}\n")
    out = os.path.join(tmp, "out")
    t0 = time.time()
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-agent", "/bin/true", "--slurm-poll", "0.5",
             "-o", out])
    took = time.time() - t0
    j = jobs_of(results(out))["late::t"]
    if j["status"] != "error" or "COMPLETED" not in j["message"] or "wrote no results" not in j["message"]:
        fail("status %s, message %r" % (j["status"], j["message"]))
    if took < 14:
        fail("judged after %.1f s, before the 15 s grace" % took)
    if r.returncode != 1:
        fail("exit code %d, expected 1" % r.returncode)
    print("reported after %.1f s as: %s" % (took, j["message"]))


def case_cancelled_by_slurm(tmp):
    """A job Slurm cancels (here it cancels itself) is an error that says Slurm cancelled it."""
    suite = write_suite(tmp, """version: 1
name: cancelled
jobs:
  - name: scancels-itself
    run: sh -c 'scancel $SLURM_JOB_ID; sleep 30'
""")
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", "0.2", "-o", out])
    j = jobs_of(results(out))["cancelled::scancels-itself"]
    if j["status"] != "error" or "CANCELLED" not in j["message"]:
        fail("status %s, message %r: expected an error naming CANCELLED" % (j["status"], j["message"]))
    if r.returncode != 1:
        fail("exit code %d, expected 1" % r.returncode)
    print("reported as: " + j["message"])


def wrapped(tmp, command, before):
    """The jobs' environment with `command` first on PATH: a script that runs the shell lines `before`, then
    execs the real command with the (possibly rewritten) arguments."""
    wrap = os.path.join(tmp, "bin")
    os.makedirs(wrap)
    real = subprocess.run(["sh", "-c", "command -v " + command], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(wrap, command), "w") as f:
        f.write("#!/bin/sh\n%sexec %s \"$@\"\n" % (before, real))
    os.chmod(os.path.join(wrap, command), 0o755)
    env = env_with_trainer()
    env["PATH"] = wrap + ":" + env["PATH"]
    return env


def case_agent_not_runnable(tmp):
    """Before the first job: nodes that cannot run the agent stop the run (exit 3), saying so."""
    suite = write_suite(tmp, "version: 1\nname: a\njobs:\n  - {name: t, run: 'true'}\n")
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-agent", "/nonexistent/oomharness", "-o", out])
    if r.returncode != 3 or "the nodes cannot run /nonexistent/oomharness" not in r.stderr:
        fail("exit %d, stderr %r" % (r.returncode, r.stderr))
    if squeue_ours() and any("|oomh:a::t|" in l for l in squeue_ours()):
        fail("a job was submitted anyway")


def case_folder_not_shared(tmp):
    """Before the first job: an output folder the node cannot read stops the run (exit 3), saying so.

    One node shares everything with itself: an srun wrapper on PATH makes the node look for the check's
    file elsewhere, as a node that does not mount the folder would."""
    env = wrapped(tmp, "srun", "for a; do shift; case $a in */shared-check.txt) a=/elsewhere/shared-check.txt;; esac; "
                               "set -- \"$@\" \"$a\"; done\n")
    suite = write_suite(tmp, "version: 1\nname: ns\njobs:\n  - {name: t, run: 'true'}\n")
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "-o", out], env=env)
    if r.returncode != 3 or "is not shared with the cluster's nodes" not in r.stderr:
        fail("exit %d, stderr %r" % (r.returncode, r.stderr))
    if any("|oomh:ns::t|" in l for l in squeue_ours()):
        fail("a job was submitted anyway")


def case_sbatch_refuses(tmp):
    """A job sbatch refuses (more memory than the node has) is an error quoting sbatch."""
    suite = write_suite(tmp, """version: 1
name: refused
jobs:
  - name: too-big
    run: 'true'
""")
    out = os.path.join(tmp, "out")
    r = run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-mem", "900000G", "--slurm-poll", "0.2",
             "-o", out])
    j = jobs_of(results(out))["refused::too-big"]
    if j["status"] != "error" or "sbatch refused the job" not in j["message"]:
        fail("status %s, message %r" % (j["status"], j["message"]))
    if r.returncode != 1:
        fail("exit code %d, expected 1" % r.returncode)
    print("reported as: " + j["message"])


def case_squeue_per_interval(tmp):
    """Polling costs one squeue call per interval, whatever the number of jobs."""
    log = os.path.join(tmp, "calls.log")
    env = wrapped(tmp, "squeue", "echo \"$(date +%%s.%%N) $*\" >> %s\n" % log)
    counts = {}
    for n in (2, 12):
        suite = write_suite(tmp, """version: 1
name: poll
jobs:
  - name: j-{n}
    run: sleep 2
matrix:
  n: [%s]
""" % ", ".join(str(i) for i in range(n)))
        if os.path.exists(log):
            os.remove(log)
        t0 = time.time()
        run([BIN, "run", suite, "--simulate", "--backend", "slurm", "--slurm-poll", "0.5", "-o", os.path.join(tmp, "out%d" % n)], env=env)
        elapsed = time.time() - t0
        calls = [l for l in open(log).read().splitlines() if " -j " in l or "-h -t all -j" in l]
        counts[n] = (len(calls), elapsed)
        bound = elapsed / 0.5 + 2
        if len(calls) > bound:
            fail("%d jobs: %d squeue calls in %.1f s, more than one per 0.5 s interval (%d)" % (n, len(calls), elapsed, bound))
        first_ids = calls[0].split(" -j ")[1].split()[0].split(",")
        if len(first_ids) != n:
            fail("%d jobs: the first poll asked about %d ids, not all of them in one call" % (n, len(first_ids)))
    print("squeue calls (calls, seconds): %s" % counts)


# A job whose event log the runner thins (past kMaxRoutineEvents routine events, Note [Thinned event logs]
# in policies/src/event_log_reader.cpp): 70,000 probe steps, every 7,000th without its gradients cleared (only the
# first three of those are pinned, so zero_grad's count of ten comes from the log's folded figures), memory
# growing by 1 KiB a step. And a 2-rank job whose ranks write their own steps and memory.
# The probe's own event writer (python/oomharness/_events.py), with the attempt's key from the control block:
# lines a job writes itself are not evidence (Note [Sealed event lines] in include/oomharness/event_seal.h).
SAME_WRITER = r"""
import os, sys, time
from oomharness import _control, _events
rank = int(os.environ.get("RANK", "0"))
steps = int(sys.argv[1])
t0 = time.time_ns()
block = _control.ControlBlock.open(os.environ.get("OOMH_CONTROL", ""))
key = block.seal_key() if block is not None else None
seal = _events.sealer(key) if key is not None else None
with open(os.environ["OOMH_EVENTS"], "ab") as f:
    for s in range(1, steps + 1):
        line = _events.format_line("step", {"step": s, "batch_size": 8, "allocated": (1 << 20) + 1024 * s * (rank + 1),
                                            "grads_cleared": s % 7000 != 0}, now_ns=t0 + s * 1000)
        f.write(_events.seal_line(line, seal) if seal is not None else line)
print("rank %d wrote %d steps" % (rank, steps))
"""

SAME_SUITE = """version: 1
name: same
defaults:
  timeout: 2m
  probe: none
jobs:
  - name: thinned-log
    run: python3 {suite_dir}/writer.py 70000
    expect:
      - exit: 0
      - completes: 70000
      - zero_grad: {}
        must_fail: true
      - memory_stable: {}
        must_fail: true
  - name: two-ranks
    run: python3 {suite_dir}/writer.py 6
    ranks: 2
    expect:
      - exit: 0
      - completes: 6
"""

# What may differ between two runs of the same suite: when things happened, how long they took, where
# the output went, the host, and what the runner sampled on its clock (timelines).
VOLATILE = {"start", "duration", "t", "recovery_seconds", "timeline", "rank_timeline", "environment",
            "log_path", "hostname", "command_line"}


def normalised(out):
    with open(os.path.join(out, "results.json")) as f:
        text = f.read()
    text = text.replace(os.path.realpath(out), "<out>").replace(out, "<out>")

    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k not in VOLATILE}
        if isinstance(v, list):
            items = [strip(x) for x in v]
            # Lists merged from several ranks (markers, faults) are in time order: how the ranks' entries
            # interleave depends on the clock like "t" does, so they are compared rank by rank (a stable sort
            # keeps each rank's own order).
            if items and all(isinstance(x, dict) and "rank" in x for x in items):
                items.sort(key=lambda x: x["rank"])
            return items
        return v
    return json.dumps(strip(json.loads(text)), sort_keys=True, indent=1)


def case_same_results(tmp):
    """A Slurm run and a local run of the same suite give the same results.json, byte for byte once the
    times, durations, output paths and sampled timelines are taken out: a thinned event log (its folded
    figures decide zero_grad) and a 2-rank job included (issue 30: the agent's codec dropped both)."""
    with open(os.path.join(tmp, "writer.py"), "w") as f:
        f.write(SAME_WRITER)
    suite = write_suite(tmp, SAME_SUITE)
    outs = {}
    for name, extra in [("local-1", []), ("local-2", []), ("slurm", ["--backend", "slurm", "--slurm-poll", "0.2"])]:
        out = os.path.join(tmp, name)
        r = run([BIN, "run", suite, "--simulate", "-o", out] + extra)
        if r.returncode != 0:
            fail("%s run: exit %d" % (name, r.returncode))
        outs[name] = normalised(out)
    res = results(os.path.join(tmp, "slurm"))
    jobs = jobs_of(res)
    thinned = jobs["same::thinned-log"]
    if not any("were thinned" in w for w in thinned.get("warnings", [])):
        fail("the thinned-log job's log was not thinned: %s" % thinned.get("warnings"))
    zg = [v for v in thinned["verdicts"] if v["policy"] == "zero_grad"]
    if not zg or "10" not in zg[0].get("reason", json.dumps(zg[0])):
        fail("zero_grad did not count the ten uncleared steps of the whole log: %s" % zg)
    ranks = jobs["same::two-ranks"]
    if len(ranks["attempts"][0].get("ranks", [])) != 2:
        fail("the two-rank job's attempt has no two ranks: %s" % ranks["attempts"][0])
    if outs["local-1"] != outs["local-2"]:
        diff = [l for l in zip(outs["local-1"].splitlines(), outs["local-2"].splitlines()) if l[0] != l[1]]
        fail("two local runs differ (the comparison is not deterministic): %s" % diff[:10])
    if outs["local-1"] != outs["slurm"]:
        diff = [l for l in zip(outs["local-1"].splitlines(), outs["slurm"].splitlines()) if l[0] != l[1]]
        fail("the Slurm run's results differ from the local run's: %s" % diff[:10])
    print("same results (%d bytes normalised) locally and through Slurm" % len(outs["slurm"]))


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: slurm_e2e.py " + "|".join(sorted(CASES)), file=sys.stderr)
        sys.exit(2)
    require_slurm()
    with tempfile.TemporaryDirectory(prefix="oomh-slurm-test-") as tmp:
        CASES[sys.argv[1]](tmp)
    print("PASS")
