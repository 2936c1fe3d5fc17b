"""Distributed jobs (issue 15, docs/distributed.md), end to end through `oomharness run`:

1. tests/python/distributed_ranks.yaml (plain shell ranks, no torch), then one GPU per rank through the CLI
   with a fake nvidia-smi listing three GPUs (`--gpus 2,0`: each rank sees "2,0" and its LOCAL_RANK; a
   3-rank job is an error). tests/python/distributed_ranks.yaml: each rank gets RANK, LOCAL_RANK,
   WORLD_SIZE, MASTER_ADDR and one shared free MASTER_PORT; a job whose rank 1 died of an OOM fails `exit`
   and `completes` although rank 0 finished; a rank that ignores SIGTERM and SIGUSR1 and never exits is
   found hung and killed within the stall limit plus 2 s.
2. suites/distributed.yaml under --simulate (2 ranks, gloo on the virtual CUDA device): the rank-consistent
   recovery passes; the broken twins fail exactly the checks they mark must_fail; the hung job's results
   hold every rank's stacks and its verdict names the rank and the collective it waited in.
Exit 0 passed, 1 failed; part 2 is skipped (exit 125 when part 1 passed) where torch cannot be imported."""
import json
import os
import re
import subprocess
import sys
import tempfile

build = os.environ["OOMH_BUILD_DIR"]
source = os.environ["OOMH_SOURCE_DIR"]
out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="oomh-distributed-")
oomharness = os.path.join(build, "runner", "oomharness")
env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
problems = []


def run(suite, where, extra):
    argv = [oomharness, "run", suite, "--out", where] + extra
    print(" ".join(argv), flush=True)
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    print(proc.stdout)
    with open(os.path.join(where, "results.json")) as f:
        results = json.load(f)
    jobs = {j["name"].split("::")[-1]: j for s in results["suites"] for j in s["jobs"]}
    try:  # the per-rank fields are in docs/results-schema.json
        import jsonschema
        with open(os.path.join(source, "docs", "results-schema.json")) as f:
            schema = json.load(f)
        for e in jsonschema.Draft202012Validator(schema).iter_errors(results):
            problems.append("%s/results.json does not match the schema: %s" % (where, e.message[:300]))
    except ImportError:
        if os.environ.get("TORCH_ENV_UNDER_TEST"):  # every environment of the matrix has it: missing is a failure
            problems.append("jsonschema cannot be imported in %s: results.json not checked" % sys.executable)
        else:
            print("jsonschema missing: results.json not checked against the schema")
    return proc, jobs


def verdict(job, policy):
    return next((v for v in job["verdicts"] if v["policy"] == policy), None)


def expect(cond, what):
    if not cond:
        problems.append(what)


# ---- 1. shell ranks ------------------------------------------------------------------------------------
proc, jobs = run(os.path.join(source, "tests", "python", "distributed_ranks.yaml"), os.path.join(out, "ranks"), [])
expect(set(jobs) == {"env-per-rank", "rank1-oom-rank0-finishes", "hostile-rank-ignores-term", "restart-restarts-every-rank",
                     "restart-stops-a-waiting-rank", "no-restart-so-the-wait-is-a-hang"},
       "ranks suite: jobs %s" % sorted(jobs))
for name, j in jobs.items():
    expect(j["status"] == "passed", "%s: %s (%s)" % (name, j["status"], j.get("message", "")))
j = jobs.get("env-per-rank")
if j:
    ranks = j["attempts"][0].get("ranks", [])
    expect([r["rank"] for r in ranks] == [0, 1, 2], "env-per-rank: ranks %s" % ranks)
    seen = []
    for r in ranks:
        with open(r["log_path"]) as f:
            m = re.search(r"rank (\d+) of 3 at 127.0.0.1:(\d+)", f.read())
        expect(m is not None, "env-per-rank: rank %d's log lacks its line" % r["rank"])
        if m:
            seen.append((int(m.group(1)), int(m.group(2))))
    expect([s[0] for s in seen] == [0, 1, 2], "env-per-rank: RANK per log %s" % seen)
    expect(len({s[1] for s in seen}) == 1, "env-per-rank: the ranks got different MASTER_PORTs %s" % seen)
j = jobs.get("rank1-oom-rank0-finishes")
if j:
    ranks = j["attempts"][0].get("ranks", [])
    # Shell ranks that only print an OOM message: no shim refusal and no probe recorded one, so the rank
    # exited non-zero, not of an OOM (Note [An OOM is an event] in policies/src/trace.cpp, issue 26).
    expect([r["outcome"] for r in ranks] == ["ok", "nonzero"], "rank1-oom: rank outcomes %s" % [r["outcome"] for r in ranks])
    expect(j["attempts"][0]["outcome"] == "nonzero", "rank1-oom: the attempt's outcome is %s, not nonzero" % j["attempts"][0]["outcome"])
    for policy in ("exit", "completes"):
        v = verdict(j, policy)
        expect(v is not None and v["status"] == "fail", "rank1-oom: %s did not fail: %s" % (policy, v))
    v = verdict(j, "completes")
    expect(v is not None and "rank 1 stopped at step 1" in v["reason"], "rank1-oom: completes does not name rank 1: %s" % v)
j = jobs.get("hostile-rank-ignores-term")
if j:
    v = verdict(j, "no_hang")
    expect(v is not None and v["status"] == "fail" and v["reason"].startswith("rank 1 waited")
           and "after rank 0 exited with code 3" in v["reason"], "hostile: no_hang %s" % v)
    # Target: ended within the stall limit (1 s) plus 2 s of rank 0's exit; the job's start takes a few ms.
    expect(j["duration"] < 1 + 2 + 0.5, "hostile: the job took %.2fs (stall 1s + 2s)" % j["duration"])
    ranks = j["attempts"][0].get("ranks", [])
    expect(len(ranks) == 2 and ranks[1]["outcome"] == "timeout" and ranks[1].get("signal") == 9,
           "hostile: rank 1 must have been killed (SIGKILL): %s" % ranks)

j = jobs.get("restart-restarts-every-rank")
if j:
    attempts = j["attempts"]
    # restart: {on: [oom]} still restarts on the printed OOM (a behaviour, not a verdict); the outcome is the
    # recorded one: non-zero (see rank1-oom above).
    expect([a["outcome"] for a in attempts] == ["nonzero", "ok"], "restart: attempt outcomes %s" % [a["outcome"] for a in attempts])
    expect([[r["outcome"] for r in a.get("ranks", [])] for a in attempts] == [["ok", "nonzero"], ["ok", "ok"]],
           "restart: every rank of each attempt %s" % [a.get("ranks") for a in attempts])
    expect(all(os.path.exists(os.path.join(os.path.dirname(attempts[0]["ranks"][0]["log_path"]), "attempt-1.rank%d.log" % k))
               for k in (0, 1)) if attempts and attempts[0].get("ranks") else False, "restart: attempt 2 did not start both ranks")

# Note [A restart of every rank]: the waiting rank stopped kRestartGrace (5 s) after rank 1 died, not after
# the 20 s stall limit; no hang recorded; both ranks ran again and completed.
j = jobs.get("restart-stops-a-waiting-rank")
if j:
    attempts = j["attempts"]
    expect([a["outcome"] for a in attempts] == ["nonzero", "ok"], "restart-stops: attempt outcomes %s" % [a["outcome"] for a in attempts])
    first = attempts[0] if attempts else {}
    took = first.get("duration", 0)
    expect(4 <= took < 12, "restart-stops: attempt 1 took %.1f s (rank 0 stopped 5 s after rank 1 died)" % took)
    v = verdict(j, "no_hang")
    expect(v is not None and v["status"] == "pass" and "the runner stopped rank 0 after rank 1" in v["reason"],
           "restart-stops: no_hang %s" % v)
j = jobs.get("no-restart-so-the-wait-is-a-hang")
if j:
    v = verdict(j, "no_hang")
    expect(v is not None and v["status"] == "fail" and v["reason"].startswith("rank 0 waited"), "no-restart: no_hang %s" % v)
    expect(len(j["attempts"]) == 1, "no-restart: %d attempts" % len(j["attempts"]))

# ---- 1b. one GPU per rank, through the CLI, on a made-up machine of three GPUs ---------------------------
# A fake nvidia-smi on PATH lists GPUs 0, 1 and 2 (Note [One GPU per rank]); no job here touches CUDA.
fake_bin = os.path.join(out, "fake-smi")
os.makedirs(fake_bin, exist_ok=True)
with open(os.path.join(fake_bin, "nvidia-smi"), "w") as f:
    f.write("#!/bin/sh\ncase \"$*\" in\n"
            "  *--query-gpu*) printf '0, 81559, 0, Fake GPU, 1.0\\n1, 81559, 0, Fake GPU, 1.0\\n2, 81559, 0, Fake GPU, 1.0\\n' ;;\n"
            "  *) echo '| NVIDIA-SMI 1.0   Driver Version: 1.0   CUDA Version: 13.0 |' ;;\nesac\n")
os.chmod(os.path.join(fake_bin, "nvidia-smi"), 0o755)
gpu_suite = os.path.join(out, "gpu-per-rank.yaml")
with open(gpu_suite, "w") as f:
    f.write("version: 1\nname: gpu-per-rank\ndefaults: {probe: none, shell: true, timeout: 30s}\njobs:\n"
            "  - name: two\n    ranks: 2\n"
            "    run: echo \"rank $RANK local $LOCAL_RANK cvd $CUDA_VISIBLE_DEVICES nvls $NCCL_NVLS_ENABLE\"\n"
            "    expect: [exit: 0]\n"
            "  - name: three\n    ranks: 3\n    run: \"true\"\n    expect: [exit: 0]\n")
saved_path = env["PATH"]
env["PATH"] = fake_bin + os.pathsep + saved_path
proc, jobs = run(gpu_suite, os.path.join(out, "gpu-per-rank"), ["--gpus", "2,0"])
env["PATH"] = saved_path
j = jobs.get("two", {})
expect(j.get("status") == "passed" and j.get("gpu") == 2 and j.get("gpus") == [2, 0],
       "gpu-per-rank two: %s gpu=%s gpus=%s" % (j.get("status"), j.get("gpu"), j.get("gpus")))
for r in (j.get("attempts") or [{}])[0].get("ranks", []):
    with open(r["log_path"]) as f:
        line = f.read().strip()
    want_line = "rank %d local %d cvd 2,0 nvls 0" % (r["rank"], r["rank"])
    expect(line == want_line, "gpu-per-rank two: rank %d printed %r, not %r" % (r["rank"], line, want_line))
j = jobs.get("three", {})
expect(j.get("status") == "error" and j.get("message") == "ranks: 3 needs one GPU per rank, and this run has 2 GPUs "
       "(choose them with --gpus, or give the job fewer ranks)" and not j.get("attempts"),
       "gpu-per-rank three: %s %r" % (j.get("status"), j.get("message")))

# ---- 2. DDP on the virtual device -----------------------------------------------------------------------
if problems:  # part 1 has failed whatever part 2 does; say so before part 2 can skip or fail
    for p in problems:
        print("FAILED: " + p)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

try:
    require_torch("DDP on the virtual device", "torch.distributed")
except SystemExit as stop:
    sys.exit(1 if problems else stop.code)

proc, jobs = run(os.path.join(source, "suites", "distributed.yaml"), os.path.join(out, "ddp"), ["--simulate", "-j", "2"])
expect(proc.returncode == 0, "distributed.yaml: oomharness exited %d" % proc.returncode)
want = {
    "ddp-consistent": {"exit": "pass", "oom_visible": "pass", "completes": "pass", "ranks_recover_together": "pass", "no_hang": "pass"},
    "broken-ddp-local-halving": {"exit": "pass", "completes": "pass", "ranks_recover_together": "fail"},
    "broken-ddp-no-handler": {"exit": "fail", "completes": "fail"},
    "broken-ddp-no-handler-hangs": {"no_hang": "fail", "completes": "fail"},
}
expect(set(jobs) == set(want), "distributed.yaml: jobs %s" % sorted(jobs))
for name, verdicts in want.items():
    j = jobs.get(name)
    if not j:
        continue
    expect(j["status"] == "passed", "%s: %s (%s)" % (name, j["status"], j.get("message", "")))
    for policy, status in verdicts.items():
        v = verdict(j, policy)
        expect(v is not None and v["status"] == status, "%s: %s should %s: %s" % (name, policy, status, v))
    expect(j.get("virtual_device", "").startswith("virtual CUDA device"), "%s: did not run on the virtual device" % name)
j = jobs.get("broken-ddp-no-handler-hangs")
if j:
    v = verdict(j, "no_hang")
    expect(v is not None and re.match(r"rank 0 waited \S+ in all_reduce \(distributed_c10d\.py:\d+\) after rank 1 raised an "
                                      r"out-of-memory error at step 5", v["reason"] or ""), "hangs: no_hang reason %s" % v)
    ranks = j["attempts"][0].get("ranks", [])
    expect(len(ranks) == 2 and all("most recent call first" in r["stacks"] for r in ranks),
           "hangs: every rank's stacks must be in the results")
    expect(len(ranks) == 2 and "in all_reduce" in ranks[0]["stacks"], "hangs: rank 0's stack lacks all_reduce")

# Note [Stacks a job's signal handler cannot take away]: the hung rank had set SIGUSR1 to its default.
proc, jobs = run(os.path.join(source, "tests", "python", "distributed_stacks.yaml"), os.path.join(out, "stacks"), ["--simulate"])
j = jobs.get("job-resets-sigusr1", {})
ranks = (j.get("attempts") or [{}])[0].get("ranks", [])
v = verdict(j, "no_hang") if j else None
expect(v is not None and v["status"] == "fail" and "in wait_for_the_peer" in (v["reason"] or ""), "stacks: no_hang %s" % v)
expect(len(ranks) == 2 and "wait_for_the_peer" in ranks[0].get("stacks", "") and ranks[0].get("signal") != 10,
       "stacks: rank 0 %s" % (ranks[:1],))

for p in problems:
    print("FAILED: " + p)
sys.exit(1 if problems else 0)
