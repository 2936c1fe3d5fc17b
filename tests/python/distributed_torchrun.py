"""A job that starts torchrun itself (issue 15, docs/distributed.md "Jobs that start torchrun"), end to end
through `oomharness run --simulate`: the runner starts one process and torchrun (torch.distributed.run) its two
ranks, which share the job's event log and control block. Checks that

- every probe event of a rank carries its `rank`, and the shim's events of a rank's process get it too;
- the `rank: 1` fault filter hits rank 1's process only (its inject events), the shim reading torchrun's RANK;
- the attempt is judged rank by rank: results.json has both ranks, `completes` and `ranks_recover_together`
  pass for the rank-consistent recovery and the latter fails for the broken twin that halves on one rank.

Exit 0 passed, 1 failed, 125 skipped (torch, or torch.distributed.run, cannot be imported)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

require_torch("torchrun inside a job", "torch.distributed.run")

build = os.environ["OOMH_BUILD_DIR"]
source = os.environ["OOMH_SOURCE_DIR"]
out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="oomh-torchrun-")
oomharness = os.path.join(build, "runner", "oomharness")
env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
problems = []


def expect(cond, what):
    if not cond:
        problems.append(what)


# Note [gloo ranks that abort] (tests/python/CMakeLists.txt): PyTorch's gloo backend can end a rank that
# finished every step with SIGABRT during interpreter shutdown ("terminate called without an active exception"),
# without oomharness too, more often on busy cores (2026-11-28 under 2.14: in CI's full ctest, and in 1 of 2 runs
# here beside the public corpus; in none of 3 runs alone).
# That one crash, after every rank printed its last step, is PyTorch's: the suite runs once more, and says so;
# any other failure, or the same crash again, fails.
TORCH_ABORT = "terminate called without an active exception"


def torch_abort_after_last_step(run_out):
    for dp, _, fs in os.walk(os.path.join(run_out, "jobs")):
        for f in fs:
            if f.endswith(".log"):
                with open(os.path.join(dp, f), errors="replace") as fh:
                    text = fh.read()
                if TORCH_ABORT in text and text.count("step 8 bs=") == 2:
                    return os.path.join(dp, f)
    return None


suite = os.path.join(source, "tests", "python", "distributed_torchrun.yaml")
for run in (1, 2):
    argv = [oomharness, "run", suite, "--out", out, "--simulate", "-j", "1"]
    print(" ".join(argv), flush=True)
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    print(proc.stdout)
    aborted = torch_abort_after_last_step(out) if proc.returncode != 0 else None
    if run == 2 or aborted is None:
        break
    print("a rank of the job in %s ended with PyTorch's gloo abort at shutdown after its last step (Note [gloo ranks "
          "that abort]): running the suite again" % aborted, flush=True)
    out += "-again"
expect(proc.returncode == 0, "oomharness exited %d" % proc.returncode)
with open(os.path.join(out, "results.json")) as f:
    results = json.load(f)
jobs = {j["name"].split("::")[-1]: j for s in results["suites"] for j in s["jobs"]}
want = {
    "torchrun-consistent": {"exit": "pass", "oom_visible": "pass", "completes": "pass", "ranks_recover_together": "pass"},
    "torchrun-local-halving": {"exit": "pass", "completes": "pass", "ranks_recover_together": "fail"},
}
expect(set(jobs) == set(want), "jobs %s" % sorted(jobs))
for name, verdicts in want.items():
    j = jobs.get(name)
    if not j:
        continue
    expect(j["status"] == "passed", "%s: %s (%s)" % (name, j["status"], j.get("message", "")))
    for policy, status in verdicts.items():
        v = next((v for v in j["verdicts"] if v["policy"] == policy), None)
        expect(v is not None and v["status"] == status, "%s: %s should %s: %s" % (name, policy, status, v))
    attempt = j["attempts"][0] if j["attempts"] else {}
    expect([r["rank"] for r in attempt.get("ranks", [])] == [0, 1], "%s: ranks %s" % (name, attempt.get("ranks")))

# The events, as the runner read them: the job's one event log.
j = jobs.get("torchrun-consistent")
log = os.path.join(out, "jobs", "distributed-torchrun__torchrun-consistent", "attempt-0.events.jsonl")
if not os.path.exists(log):  # the folder's name is the runner's dir_name of the job
    cands = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(out, "jobs")) for f in fs
             if f == "attempt-0.events.jsonl" and "consistent" in dp]
    log = cands[0] if cands else log
events = []
with open(log) as f:
    for line in f:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
steps = {}
for e in events:
    if e["src"] == "probe" and e["kind"] == "step":
        steps.setdefault(e["fields"].get("rank"), set()).add(e["pid"])
expect(set(steps) == {0, 1}, "probe step events by rank: %s (every rank's steps must carry it)" % sorted(steps, key=str))
rank_pids = {r: pids for r, pids in steps.items() if r is not None}
injects = [e for e in events if e["src"] == "shim" and e["kind"] == "inject"]
expect(injects, "no fault was injected")
expect(all(e["pid"] in rank_pids.get(1, set()) for e in injects),
       "the rank: 1 fault hit another process: inject pids %s, rank pids %s" % ({e["pid"] for e in injects}, rank_pids))

for p in problems:
    print("FAILED: " + p)
sys.exit(1 if problems else 0)
