#!/usr/bin/env python3
"""End-to-end tests of jobs on several nodes (`nodes:` and `ranks_per_node:`, docs/slurm.md "Jobs on several
nodes") on the local multi-node Slurm of scripts/slurm-multinode.sh: 2 nodes, each slurmd in its own network
and UTS namespace, 2 ranks per node, gloo on the virtual CUDA device across the namespaces.

    multinode_e2e.py CASE     # ctest runs each case as its own test (tests/slurm/CMakeLists.txt)

Environment: E2E_BIN (the oomharness binary), E2E_SOURCE_DIR, E2E_SLURM_DIR (the cluster's folder, as
OOMH_SLURM_DIR for the script), E2E_SLURM_PORT, SLURM_CONF. When the cluster is not up the case exits 77
(ctest: skipped) and says why, unless OOMH_REQUIRE_SLURM=1: then it fails.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BIN = os.environ.get("E2E_BIN", "")
SOURCE = os.environ.get("E2E_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SLURM_DIR = os.environ.get("E2E_SLURM_DIR", "/tmp/oomh-slurm-mn")
SLURM_PORT = os.environ.get("E2E_SLURM_PORT", "6837")
SUITE = os.path.join(SOURCE, "tests", "slurm", "multinode.yaml")
SCRIPT = os.path.join(SOURCE, "scripts", "slurm-multinode.sh")
SKIP = 77


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def cluster(*args):
    env = dict(os.environ, OOMH_SLURM_DIR=SLURM_DIR, OOMH_SLURM_PORT=SLURM_PORT)
    return subprocess.run(["bash", SCRIPT] + list(args), capture_output=True, text=True, env=env)


def require_cluster():
    r = cluster("status")
    if r.returncode != 0:
        why = "the local multi-node Slurm is not up (scripts/slurm-multinode.sh status: %s)" % (r.stdout + r.stderr).strip()
        if os.environ.get("OOMH_REQUIRE_SLURM") == "1":
            fail(why + "; OOMH_REQUIRE_SLURM=1: this run must test jobs on several nodes")
        print("SKIPPED: " + why, flush=True)
        sys.exit(SKIP)
    if not BIN or not os.access(BIN, os.X_OK):
        fail("E2E_BIN does not name the oomharness binary: %r" % BIN)


def job_env():
    # The shim warns in every job about OOMH_ names it does not know.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OOMH_")}
    # Jobs run `python3`: the one that runs this (ctest gives the one with torch).
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run(args, **kw):
    print("+ " + " ".join(args), flush=True)
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True, env=job_env(), **kw)
    print(r.stdout[-6000:], r.stderr[-4000:], sep="\n", flush=True)
    print("(%.1f s)" % (time.time() - t0), flush=True)
    return r


TORCHRUN_SUITE = os.path.join(SOURCE, "tests", "slurm", "multinode_torchrun.yaml")


def run_suite(out, *select, suite=SUITE):
    args = [BIN, "run", suite, "--simulate", "--slurm-poll", "0.2", "-o", out]
    for s in select:
        args += ["-k", s]
    return run(args)


def jobs_of(out):
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    return {j["name"]: j for s in res["suites"] for j in s["jobs"]}


def verdicts(job):
    return {v["policy"]: v for v in job["verdicts"]}


def host_of_rank(job, attempt, rank):
    """The host the rank's log says it ran on (the suite's jobs print it first)."""
    for r in job["attempts"][attempt].get("ranks", []):
        if r["rank"] == rank:
            with open(r["log_path"], errors="replace") as f:
                m = re.search(r"^host (\S+)$", f.read(), re.M)
            return m.group(1) if m else None
    return None


def check_placement(job):
    """4 ranks per attempt, ranks 0-1 on oomh-n1 and 2-3 on oomh-n2: the job really ran on two nodes."""
    for i, a in enumerate(job["attempts"]):
        ranks = sorted(r["rank"] for r in a.get("ranks", []))
        if ranks != [0, 1, 2, 3]:
            fail("%s attempt %d: ranks %s, not 0-3" % (job["name"], i, ranks))
        hosts = [host_of_rank(job, i, k) for k in range(4)]
        if hosts != ["oomh-n1", "oomh-n1", "oomh-n2", "oomh-n2"]:
            fail("%s attempt %d: the ranks ran on %s, not 2 per node" % (job["name"], i, hosts))


def expect_status(job, status):
    if job["status"] != status:
        fail("%s: %s, expected %s (%s; verdicts %s)" % (job["name"], job["status"], status, job.get("message"),
                                                       [(v["policy"], v["status"], v.get("reason")) for v in job["verdicts"]]))



def expect_four_ranks_recovered(job):
    """Every check of a consistent 2 x 2 job passed, completes judged over its 4 ranks."""
    v = verdicts(job)
    for policy in ("exit", "oom_visible", "completes", "ranks_recover_together", "no_hang"):
        if v.get(policy, {}).get("status") != "pass":
            fail("%s: %s did not pass: %s" % (job["name"], policy, v.get(policy)))
    if "4 ranks" not in v["completes"]["reason"]:
        fail("completes did not judge 4 ranks: %s" % v["completes"]["reason"])

# ---- cases -------------------------------------------------------------------------------------------


def case_multinode_recover(tmp):
    """Rank 3 (node 2) faulted at step 4: the consistent trainer's 4 ranks recover together (every check
    passes); the trainer where only rank 3 halves fails ranks_recover_together, naming rank 3."""
    out = os.path.join(tmp, "out")
    r = run_suite(out, "mn-consistent", "mn-local-halving")
    if r.returncode != 0:
        fail("the run did not pass (exit %d)" % r.returncode)
    jobs = jobs_of(out)
    good, broken = jobs["mn-consistent"], jobs["mn-local-halving"]
    expect_status(good, "passed")
    check_placement(good)
    expect_four_ranks_recovered(good)
    # The fault fired on rank 3 only: its event log has the injections, rank 2's (same node) has none.
    logs = {r["rank"]: r["log_path"].replace(".log", ".events.jsonl") for r in good["attempts"][0]["ranks"]}
    def injected(rank):
        with open(logs[rank]) as f:
            return sum(1 for line in f if '"kind":"inject"' in line.replace(" ", ""))
    if injected(3) < 1 or injected(2) != 0 or injected(0) != 0:
        fail("the fault did not fire on rank 3 alone: injections %s" % {k: injected(k) for k in logs})
    expect_status(broken, "passed")  # its must_fail check failed, as expected
    check_placement(broken)
    rr = verdicts(broken)["ranks_recover_together"]
    if rr["status"] != "fail" or "rank 3" not in rr["reason"]:
        fail("mn-local-halving: ranks_recover_together: %s" % rr)
    print("ranks recovered together across 2 nodes; the broken twin failed naming rank 3")


def case_multinode_hang(tmp):
    """No handler and rank 3's process kept alive: the ranks of both nodes wait in all_reduce; no_hang
    finds it within the stall limit (5 s), every rank's stack is taken on both nodes, the attempt ends."""
    out = os.path.join(tmp, "out")
    r = run_suite(out, "mn-hang")
    if r.returncode != 0:
        fail("the run did not pass (the hang is expected to fail no_hang: xfail; exit %d)" % r.returncode)
    job = jobs_of(out)["mn-hang"]
    expect_status(job, "passed")  # its must_fail checks failed, as expected
    check_placement(job)
    nh = verdicts(job)["no_hang"]
    if nh["status"] != "fail" or "waited" not in nh["reason"] or "rank 3" not in nh["reason"]:
        fail("no_hang: %s" % nh)
    a = job["attempts"][0]
    for rank in a["ranks"]:
        stacks = rank.get("stacks", "")
        if not stacks.strip():
            fail("rank %d has no stacks: %s" % (rank["rank"], rank))
        if rank["rank"] != 3 and "all_reduce" not in stacks:
            fail("rank %d's stacks do not show the collective it waited in: %s" % (rank["rank"], stacks[:400]))
    if a["duration"] > 60:
        fail("the hang took %.0f s to end (stall limit 5 s): not the runner's doing" % a["duration"])
    print("hang across nodes found; stacks of ranks 0-3 (both nodes) taken; attempt ended after %.1f s" % a["duration"])


def case_multinode_checkpoint(tmp):
    """Rank 3 (node 2) dies of its OOM at step 5: every rank of both nodes restarts together inside the
    allocation and loads rank 0's checkpoint (checkpoint_resume per rank passes); the twin where rank 3
    never loads fails, naming rank 3."""
    out = os.path.join(tmp, "out")
    r = run_suite(out, "mn-checkpoint")
    if r.returncode != 0:
        fail("the run did not pass (exit %d)" % r.returncode)
    jobs = jobs_of(out)
    good, broken = jobs["mn-checkpoint"], jobs["mn-checkpoint-rank3-never-loads"]
    expect_status(good, "passed")
    if len(good["attempts"]) != 2:
        fail("mn-checkpoint: %d attempts, expected 2 (all ranks restarted together once)" % len(good["attempts"]))
    check_placement(good)
    for policy in ("oom_visible", "checkpoint_resume", "completes"):
        if verdicts(good)[policy]["status"] != "pass":
            fail("mn-checkpoint: %s: %s" % (policy, verdicts(good)[policy]))
    expect_status(broken, "passed")  # its must_fail check failed, as expected
    cr = verdicts(broken)["checkpoint_resume"]
    if "rank 3: attempt 2 started from scratch" not in cr["reason"]:
        fail("the broken twin's checkpoint_resume does not name rank 3: %s" % cr["reason"])
    print("all ranks of both nodes restarted together and resumed; the twin failed naming rank 3")


def case_multinode_node_killed(tmp, suite=SUITE, name="mn-node-killed", log_name="attempt-0.rank3.log"):
    """Node 2 disappears mid-run (every process in its namespace SIGKILLed: slurmd, the step, the ranks):
    the job is an error naming oomh-n2, never a pass, never an OOM verdict. The cluster is brought back."""
    out = os.path.join(tmp, "out")
    args = [BIN, "run", suite, "--simulate", "--slurm-poll", "0.2", "-o", out, "-k", name]
    print("+ " + " ".join(args), flush=True)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=job_env())
    try:
        deadline = time.time() + 240
        log3 = None
        while time.time() < deadline:
            for root, _, files in os.walk(os.path.join(out, "jobs")):
                if log_name in files:
                    log3 = os.path.join(root, log_name)
            if log3 and re.search(r"^(\[\w+\]:)?step 3 ", open(log3, errors="replace").read(), re.M):
                break
            if proc.poll() is not None:
                fail("the run ended before node 2's ranks trained: %s" % proc.stdout.read())
            time.sleep(0.5)
        else:
            fail("rank 3 never reached step 3")
        killed_at = time.time()
        k = cluster("kill-node", "oomh-n2")
        print(k.stdout, k.stderr, flush=True)
        try:
            text, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            fail("the run did not end within 240 s of node 2's death")
        took = time.time() - killed_at
        print(text[-4000:], flush=True)
    finally:
        if proc.poll() is None:
            proc.kill()
        up = cluster("up")  # the killed node back (down and up again)
        print(up.stdout, up.stderr, flush=True)
    if proc.returncode == 0:
        fail("the run passed although a node disappeared")
    job = jobs_of(out)[name]
    if job["status"] != "error":
        fail("status %s, expected error (%s)" % (job["status"], job.get("message")))
    msg = job.get("message", "")
    if "oomh-n2" not in msg or "not an out-of-memory error" not in msg:
        fail("the error does not name the node as a node failure: %s" % msg)
    if any(v["status"] == "pass" for v in job["verdicts"]):
        fail("a verdict passed: %s" % job["verdicts"])
    print("node killed: error naming oomh-n2 %.1f s after the kill: %s" % (took, msg[:300]))


def events_of(path):
    """The event log's lines, each with its `fields` (where the probe puts `rank`) lifted beside src and kind."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            out.append(dict(e.get("fields") or {}, pid=e.get("pid"), src=e.get("src"), kind=e.get("kind")))
    return out


def check_torchrun_nodes(job):
    """One torchrun per node: each attempt has one log and event log per node (no per-rank files), the node's
    log says it ran on oomh-n1 / oomh-n2, and the ranks each node's event log names are that node's ranks, by
    --node_rank (0-1 on the first, 2-3 on the second): the ranks really ran 2 per node under 2 torchruns."""
    for i, a in enumerate(job["attempts"]):
        ranks = sorted(r["rank"] for r in a.get("ranks", []))
        if ranks != [0, 1, 2, 3]:
            fail("%s attempt %d: ranks %s, not 0-3" % (job["name"], i, ranks))
        folder = os.path.dirname(a["ranks"][0]["log_path"])
        files = sorted(f for f in os.listdir(folder) if f.startswith("attempt-%d." % i))
        if files != ["attempt-%d.node%d.%s" % (i, k, x) for k in (0, 1) for x in ("events.jsonl", "log")]:
            fail("%s attempt %d: files %s, not one log and event log per node" % (job["name"], i, files))
        for k, host in ((0, "oomh-n1"), (1, "oomh-n2")):
            log = os.path.join(folder, "attempt-%d.node%d.log" % (i, k))
            with open(log, errors="replace") as f:
                m = re.search(r"^host (\S+) node (\d+)$", f.read(), re.M)
            if not m or m.group(1) != host or m.group(2) != str(k):
                fail("%s: %s says %s, expected host %s node %d" % (job["name"], log, m and m.group(0), host, k))
            evs = events_of(os.path.join(folder, "attempt-%d.node%d.events.jsonl" % (i, k)))
            named = sorted({e["rank"] for e in evs if e.get("src") == "probe" and isinstance(e.get("rank"), int)})
            if named != [2 * k, 2 * k + 1]:
                fail("%s: node %d's event log names ranks %s, not %s" % (job["name"], k + 1, named, [2 * k, 2 * k + 1]))
            # Each node's torchrun and its 2 ranks ran under the shim (3 processes or more: torch may start helpers).
            armed = [e for e in evs if e.get("src") == "shim" and e.get("kind") == "shim_start"]
            if len(armed) < 3:
                fail("%s: node %d: %d processes under the shim, expected its torchrun and 2 ranks" % (job["name"], k + 1, len(armed)))


def case_multinode_torchrun(tmp):
    """One torchrun per node, rank 3 (node 2) faulted at step 4: the consistent trainer's 4 ranks recover
    together (every check passes) and the fault hit rank 3's process alone; the trainer where only rank 3
    halves fails ranks_recover_together, naming rank 3; a hang across the nodes' torchruns is found at the
    stall limit and the attempt ended."""
    out = os.path.join(tmp, "out")
    r = run_suite(out, "mn-torchrun-consistent", "mn-torchrun-local-halving", "mn-torchrun-hang", suite=TORCHRUN_SUITE)
    if r.returncode != 0:
        fail("the run did not pass (exit %d)" % r.returncode)
    jobs = jobs_of(out)
    good, broken, hang = jobs["mn-torchrun-consistent"], jobs["mn-torchrun-local-halving"], jobs["mn-torchrun-hang"]
    expect_status(good, "passed")
    check_torchrun_nodes(good)
    expect_four_ranks_recovered(good)
    # The fault fired in rank 3's process alone: every injection in the node logs is rank 3's (by its pid's
    # probe events, on node 2), and there is one.
    folder = os.path.dirname(good["attempts"][0]["ranks"][0]["log_path"])
    injected = {}
    for k in (0, 1):
        evs = events_of(os.path.join(folder, "attempt-0.node%d.events.jsonl" % k))
        rank_of_pid = {e["pid"]: e["rank"] for e in evs if e.get("src") == "probe" and isinstance(e.get("rank"), int)}
        for e in evs:
            if e.get("src") == "shim" and e.get("kind") == "inject":
                key = (k, rank_of_pid.get(e["pid"]))
                injected[key] = injected.get(key, 0) + 1
    if set(injected) != {(1, 3)}:
        fail("the fault did not fire on rank 3 (node 2) alone: injections by (node, rank) %s" % injected)
    expect_status(broken, "passed")  # its must_fail check failed, as expected
    check_torchrun_nodes(broken)
    rr = verdicts(broken)["ranks_recover_together"]
    if rr["status"] != "fail" or "rank 3" not in rr["reason"]:
        fail("mn-torchrun-local-halving: ranks_recover_together: %s" % rr)
    expect_status(hang, "passed")  # its must_fail checks failed, as expected
    check_torchrun_nodes(hang)
    nh = verdicts(hang)["no_hang"]
    if nh["status"] != "fail" or "waited" not in nh["reason"] or "(its torchrun)" not in nh["reason"]:
        fail("mn-torchrun-hang: no_hang: %s" % nh)
    a = hang["attempts"][0]
    if a["duration"] > 60:
        fail("the hang took %.0f s to end (stall limit 5 s): not the runner's doing" % a["duration"])
    print("one torchrun per node: ranks recovered together; the twin failed naming rank 3; hang found after %.1f s: %s"
          % (a["duration"], nh["reason"]))


def case_multinode_torchrun_node_killed(tmp):
    """One torchrun per node, and node 2 disappears mid-run: the same error naming oomh-n2 (the heartbeat of
    Note [Ranks on several nodes] does not depend on who starts the ranks)."""
    case_multinode_node_killed(tmp, TORCHRUN_SUITE, "mn-torchrun-node-killed", "attempt-0.node1.log")


TORCHRUN_BAD = """version: 1
name: bad
backend: slurm
jobs:
  - name: bad
    device: virtual
    nodes: 2
    ranks_per_node: 2
    shell: true
    run: %s
"""


def case_multinode_torchrun_bad_input(tmp):
    """A torchrun job whose --nnodes or --nproc_per_node contradicts nodes x ranks_per_node, or that is
    --standalone or lacks --nnodes, is refused by the loader (exit 4) before anything reaches Slurm; one whose
    values are shell variables is taken (the runner assumes them) and checked no further here."""
    cases = [("nnodes", "exec torchrun --nnodes=3 --nproc_per_node=2 t.py", "torchrun --nnodes 3, and the job has nodes: 2"),
             ("nproc", "exec python3 -m torch.distributed.run --nnodes 2 --nproc-per-node 4 t.py", "would start 4 ranks, not 2"),
             ("standalone", "torchrun --standalone --nproc_per_node 2 t.py", "--standalone is one node"),
             ("no-nnodes", "torchrun --nproc_per_node 2 t.py", "not given --nnodes")]
    for name, command, words in cases:
        suite = os.path.join(tmp, name + ".yaml")
        with open(suite, "w") as f:
            f.write(TORCHRUN_BAD % json.dumps(command))
        r = run([BIN, "validate", suite])
        if r.returncode != 4 or words not in r.stdout + r.stderr:
            fail("%s: exit %d, expected 4 saying '%s'" % (name, r.returncode, words))
    suite = os.path.join(tmp, "readable-not.yaml")
    with open(suite, "w") as f:
        f.write(TORCHRUN_BAD % json.dumps("torchrun --nnodes=$SLURM_NNODES --nproc_per_node=$M t.py"))
    r = run([BIN, "validate", suite])
    if r.returncode != 0:
        fail("a torchrun job whose values are shell variables was refused: exit %d" % r.returncode)
    print("every contradiction refused by the loader; shell variables assumed")


BAD_SUITE = """version: 1
name: bad
backend: slurm
jobs:
  - name: bad
    run: python3 -c "print(1)"
    device: virtual
%s
"""


def case_multinode_bad_input(tmp):
    """Each a clear error before any rank starts: nodes the partition cannot give, ranks_per_node beyond its
    CPUs, an output folder not mounted on every node, a node that runs another oomharness; and suites that
    do not say how the ranks spread, and nodes on the local backend."""
    def one(name, fields, extra=(), out=None):
        suite = os.path.join(tmp, name + ".yaml")
        with open(suite, "w") as f:
            f.write(BAD_SUITE % fields)
        out = out or os.path.join(tmp, name)
        r = run([BIN, "run", suite, "--simulate", "--slurm-poll", "0.2", "-o", out] + list(extra))
        return r, out

    def job_error(out):
        job = jobs_of(out)["bad"]
        if job["status"] != "error":
            fail("status %s, expected error (%s)" % (job["status"], job.get("message")))
        if job["attempts"]:
            fail("ranks started: %s" % job["attempts"])
        return job.get("message", "")

    r, out = one("three-nodes", "    nodes: 3\n    ranks_per_node: 1")
    msg = job_error(out)
    if "nodes: 3" not in msg or "more than the partition" not in msg:
        fail("three nodes on two: %s" % msg)
    r, out = one("many-ranks", "    nodes: 2\n    ranks_per_node: 64")
    msg = job_error(out)
    if "ranks_per_node: 64" not in msg:
        fail("64 ranks per node: %s" % msg)
    # The last node has its own tmpfs at SLURM_DIR/unshared (Note [Nodes as namespaces]).
    unshared = os.path.join(SLURM_DIR, "unshared", "out-%d" % os.getpid())
    r, out = one("unshared", "    nodes: 2\n    ranks_per_node: 1", out=unshared)
    msg = (r.stdout + r.stderr) if not os.path.exists(os.path.join(out, "results.json")) else job_error(out)
    shutil.rmtree(unshared, ignore_errors=True)
    if "not shared" not in msg or "oomh-n2" not in msg:
        fail("a folder node 2 does not share: %s" % msg)
    # A node whose oomharness is another version: the agent the nodes run is a wrapper that answers
    # --version for another release on oomh-n2 only.
    wrapper = os.path.join(tmp, "agent.sh")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = --version ] && [ "$(hostname)" = oomh-n2 ]; then echo "oomharness 0.0.0-other"; exit 0; fi\n'
                'exec "%s" "$@"\n' % BIN)
    os.chmod(wrapper, 0o755)
    r, out = one("version", "    nodes: 2\n    ranks_per_node: 1", ["--slurm-agent", wrapper])
    msg = job_error(out)
    if "oomh-n2" not in msg or "another oomharness" not in msg or "0.0.0-other" not in msg:
        fail("another version on node 2: %s" % msg)
    # The loader: how the ranks spread must be said, and agree.
    for name, fields, words in [("no-per-node", "    nodes: 2", "needs ranks_per_node"),
                                ("uneven", "    nodes: 2\n    ranks: 3", "cannot be spread evenly"),
                                ("disagree", "    nodes: 2\n    ranks_per_node: 2\n    ranks: 3", "is not nodes x ranks_per_node"),
                                ("zero", "    nodes: 0\n    ranks_per_node: 1", "nodes")]:
        r, _ = one(name, fields)
        if r.returncode != 4 or words not in r.stdout + r.stderr:
            fail("%s: exit %d, expected 4 saying '%s'" % (name, r.returncode, words))
    r, _ = one("local", "    nodes: 2\n    ranks_per_node: 1", ["--backend", "local"])
    if r.returncode != 4 or "only the Slurm backend" not in r.stdout + r.stderr:
        fail("nodes on the local backend: exit %d" % r.returncode)
    print("every bad input refused before a rank started")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print("usage: multinode_e2e.py " + "|".join(sorted(CASES)), file=sys.stderr)
        sys.exit(2)
    require_cluster()
    with tempfile.TemporaryDirectory(prefix="oomh-multinode-test-") as tmp:
        CASES[sys.argv[1]](tmp)
    print("PASS")
