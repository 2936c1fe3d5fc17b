"""Judges tests/gpu/multigpu.sh's runs (issue 33): one RESULT line per claim, exit 1 when one fails. Also
prints, for the NCCL faults, what each rank saw (the last error line of its log) and what the report said.

    python3 tests/gpu/multigpu.py OUT_DIR [--simulate]"""
import csv
import glob
import json
import os
import re
import sys

out = sys.argv[1]
simulate = "--simulate" in sys.argv[2:]
only = os.environ.get("MULTIGPU_ONLY")  # multigpu.sh ran some jobs only: the others are not judged
failed = False


def claim(name, ok, detail="", job=None):
    global failed
    if only and job is not None and job not in jobs:
        return
    failed = failed or not ok
    print("RESULT %s %s %s" % (name, "PASS" if ok else "FAIL", detail), flush=True)


try:
    with open(os.path.join(out, "run", "results.json")) as f:
        results = json.load(f)
except (OSError, ValueError) as e:
    claim("multigpu_results", False, "no results.json: %s" % e)
    sys.exit(1)
jobs = {j["name"].split("::")[-1]: j for s in results["suites"] for j in s["jobs"]}


def verdicts(job):
    return {v["policy"]: (v["status"], v.get("reason", "")) for v in job.get("verdicts", [])}


def rank_tails(job):
    """The last line of each rank's log that looks like an error, per attempt."""
    seen = []
    for a, attempt in enumerate(job.get("attempts", [])):
        for r in attempt.get("ranks", []):
            try:
                text = open(r["log_path"], errors="replace").read()
            except (OSError, KeyError):
                text = ""
            errs = [ln for ln in text.splitlines() if re.search(r"Error|error|NCCL WARN|out of memory", ln)]
            seen.append("attempt %d rank %s (%s, exit %s): %s" % (
                a, r.get("rank"), r.get("outcome", r.get("status", "?")), r.get("exit_code"),
                errs[-1][:300] if errs else "(no error line)"))
    return seen


def fired(job):
    """How many allocations the shim refused on purpose (the job's `faults`, from the shim's events)."""
    return len(job.get("faults", []))


# 1. An OOM inside NCCL's own allocations: the run must end with a verdict (never a hang, never the job's
# timeout), and what each rank saw is printed for docs/distributed.md.
for name in ("nccl-oom-init", "nccl-oom-step3"):
    j = jobs.get(name, {})
    print("== %s: status %s, %s injections, %.1f s: %s" % (name, j.get("status"), fired(j), j.get("duration", 0),
                                                          j.get("message", "")))
    for v, (status, reason) in verdicts(j).items():
        print("   verdict %s: %s: %s" % (v, status, reason[:400]))
    for line in rank_tails(j):
        print("   " + line)
    # Ends with a verdict well before the job's 4-minute timeout: a hung rank is found by no_hang's stall
    # limit (30 s) and stopped by the runner, which is what must happen; NCCL's own watchdog takes 10 min.
    claim(name.replace("-", "_") + "_ends", bool(j) and j.get("status") in ("passed", "failed", "inconclusive")
          and j.get("duration", 1e9) < 120, "status %s in %.1f s" % (j.get("status"), j.get("duration", 0)), job=name)
    if not fired(j):  # a fault that never fired must not read as a pass
        claim(name.replace("-", "_") + "_not_green_unfired", j.get("status") != "passed", "status %s" % j.get("status"), job=name)

# 2. All ranks restarting from a checkpoint.
j = jobs.get("resume-all-ranks", {})
v = verdicts(j)
claim("resume_all_ranks", j.get("status") == "passed" and v.get("checkpoint_resume", ("",))[0] == "pass",
      "%s %s attempts=%d" % (j.get("status"), {k: s for k, (s, _) in v.items()}, len(j.get("attempts", []))), job="resume-all-ranks")
j = jobs.get("resume-rank1-never-loads", {})
v = verdicts(j)
claim("resume_broken_twin_fails", v.get("checkpoint_resume", ("",))[0] == "fail",
      "%s: %s" % (v.get("checkpoint_resume", ("?", ""))[0], v.get("checkpoint_resume", ("", ""))[1][:300]), job="resume-rank1-never-loads")

# 4. One rank per GPU over all of them.
j = jobs.get("ranks-all-consistent", {})
v = verdicts(j)
claim("ranks_all_consistent", j.get("status") == "passed" and all(s == "pass" for s, _ in v.values()),
      "%s %s gpus=%s" % (j.get("status"), {k: s for k, (s, _) in v.items()}, j.get("gpus")), job="ranks-all-consistent")
j = jobs.get("ranks-all-hang", {})
hang = verdicts(j).get("no_hang", ("", ""))
claim("ranks_all_hang_found", hang[0] == "fail" and j.get("duration", 1e9) < 200,
      "%s: %s (job took %.1fs)" % (j.get("status"), hang[1][:300], j.get("duration", 0)), job="ranks-all-hang")

# 5. Public trainers with their own DDP over NCCL, rank 1 faulted at step 5 (multigpu.sh says what each should get).
def show(name, j, v):
    print("== %s: status %s, %d attempts, %.1f s" % (name, j.get("status"), len(j.get("attempts", [])), j.get("duration", 0)))
    for k, (status, reason) in v.items():
        print("   verdict %s: %s: %s" % (k, status, reason[:500]))
    for a in j.get("attempts", []):
        for r in a.get("ranks", []):
            if r.get("stacks"):
                print("   attempt %d rank %d stacks:\n      %s" % (a["index"], r["rank"], r["stacks"][:1500].replace("\n", "\n      ")))
    for line in rank_tails(j):
        print("   " + line)


name = "lightning-ddp-resume"
if not simulate and name in jobs:
    j = jobs[name]
    v = verdicts(j)
    show(name, j, v)
    ranks = (j.get("attempts") or [{}])[0].get("ranks", [])
    hang = v.get("no_hang", ("", ""))
    claim("lightning_ddp_hang_found", hang[0] == "fail" and j.get("duration", 1e9) < 120 and v.get("oom_visible", ("",))[0] == "pass",
          "%s in %.1f s: %s" % (hang[0], j.get("duration", 0), hang[1][:300]))
    claim("lightning_ddp_rank1_in_teardown", len(ranks) == 2 and "destroy_process_group" in ranks[1].get("stacks", ""),
          "rank 1's stack: %s" % (ranks[1].get("stacks", "")[-300:] if len(ranks) == 2 else "no ranks"))
name = "accelerate-ddp-resume"
if not simulate and name in jobs:
    j = jobs[name]
    v = verdicts(j)
    show(name, j, v)
    attempts = j.get("attempts", [])
    claim("accelerate_ddp_restarted", len(attempts) == 2 and attempts[0].get("duration", 1e9) < 60,
          "attempts %s" % [(a.get("outcome"), round(a.get("duration", 0), 1)) for a in attempts])
    claim("accelerate_ddp_no_hang", v.get("no_hang", ("",))[0] == "pass" and "stopped rank 0" in v.get("no_hang", ("", ""))[1],
          "%s: %s" % v.get("no_hang", ("?", "")))
    claim("accelerate_ddp_expert_verdict", v.get("oom_visible", ("",))[0] == "pass" and v.get("completes", ("",))[0] == "pass"
          and v.get("checkpoint_resume", ("",))[0] == "pass",
          "status %s %s" % (j.get("status"), {k: s for k, (s, _) in v.items()}))

# 3. Packing across GPUs, and no job on a GPU it was not given.
if not simulate and not only:
    def bus_key(text):  # nvidia-smi's "00000000:06:00.0" and which_gpu.py's "0000:06:00": (domain, bus, device)
        parts = text.strip().split(".")[0].split(":")
        try:
            return tuple(int(x, 16) for x in parts[-3:])
        except ValueError:
            return text

    index_of = {}
    with open(os.path.join(out, "gpus.csv")) as f:
        for row in csv.reader(f):
            index_of[bus_key(row[1])] = int(row[0])

    def placed(run):
        got = []
        for log in glob.glob(os.path.join(out, run, "jobs", "*", "attempt-0*.log")):
            m = re.search(r"^BUS (\d+) (\S+) (\S+)", open(log, errors="replace").read(), re.M)
            if m:
                got.append((int(m.group(1)), index_of.get(bus_key(m.group(2)), m.group(2)), m.group(3)))
        return got

    ngpu = len(index_of)
    for run, allowed in (("pack-jobs1", {0}), ("pack-all", set(range(ngpu))), ("pack-sub", set(range(1, ngpu)))):
        if not os.path.isdir(os.path.join(out, run)):
            continue  # MULTIGPU_SKIP_SERIAL
        got = placed(run)
        used = sorted({g for _, g, _ in got}, key=str)
        claim("packing_%s_placement" % run.replace("-", "_"), len(got) == 8 and all(c == 1 and g in allowed for c, g, _ in got),
              "%d jobs seen, GPUs used %s, allowed %s" % (len(got), used, sorted(allowed)))
        if len(allowed) > 1:  # Note [GPU packing]: spread over the GPUs given before sharing one
            claim("packing_%s_spread" % run.replace("-", "_"), len(used) == len(allowed), "GPUs used %s" % used)
sys.exit(1 if failed else 0)
