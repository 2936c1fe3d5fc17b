"""Issues 26 and 42 on the virtual CUDA device: pairs of trainers in the public style (tests/python/evidence/,
evidence2/ to evidence4/), one correct and one broken per class, run by `oomharness run SUITE.yaml
--simulate`; each check must get its verdict, and each failure must name what went wrong. Exit 0 passed, 1
failed, 125 skipped (no torch).

    evidence_suite.py [--suite evidence|evidence2|evidence3|evidence4] [OUT] [-k EXPR]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

require_torch("evidence suite")

build = os.environ["OOMH_BUILD_DIR"]
source = os.environ["OOMH_SOURCE_DIR"]
argv_rest = sys.argv[1:]
only = None
suite = "evidence"
if "--suite" in argv_rest:
    i = argv_rest.index("--suite")
    suite = argv_rest[i + 1]
    del argv_rest[i:i + 2]
if "-k" in argv_rest:
    i = argv_rest.index("-k")
    only = argv_rest[i + 1]
    del argv_rest[i:i + 2]
out = argv_rest[0] if argv_rest else tempfile.mkdtemp(prefix="oomh-evidence-")
# A run starts from an empty folder: evidence3's resume-reference-outside keeps its checkpoints beside its
# {workdir} (in the job's folder, which a later run into the same --out keeps), and a checkpoint left there by
# an earlier run would make its first attempt resume at the last step, with no OOM to recover from.
if argv_rest and os.path.isdir(out):
    shutil.rmtree(out)
binary = os.path.join(build, "runner", "oomharness")
env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

CORRECT_CKPT = ["ckpt-" + s for s in ("plain", "atomic", "best", "init", "stream", "relative", "shards")]
# job -> {check: (status, words its reason must hold)}
WANT = {
    "retry-ok": {"empty_cache_retry": ("pass", "on the same data"), "completes": ("pass", "")},
    "retry-skip": {"empty_cache_retry": ("fail", "was dropped instead of retried")},
    "halve-ok": {"batch_halving": ("pass", "1024 -> 512"), "completes": ("pass", "")},
    "halve-drop": {"batch_halving": ("fail", "was never trained on again")},
    "lstm-halve": {"batch_halving": ("pass", "32 -> 16"), "completes": ("pass", "")},
    "lstm-no-halve": {"batch_halving": ("fail", "no halving")},
    "ckpt-bug-restart-loop": {"checkpoint_resume": ("fail", "its loop went back")},
    "ckpt-bug-ignore-load": {"checkpoint_resume": ("fail", "match no loaded checkpoint")},
    "ckpt-bug-init-only": {"checkpoint_resume": ("fail", "init.pt")},
}
for name in CORRECT_CKPT:
    WANT[name] = {"checkpoint_resume": ("pass", "on the batch that followed it"), "completes": ("pass", ""), "exit": ("pass", "")}
# Issue 42: a sample is its content, whatever container it comes in.
WANT2 = {
    "padded-retry-ok": {"empty_cache_retry": ("pass", "on the same data"), "completes": ("pass", "")},
    "padded-retry-bug": {"empty_cache_retry": ("fail", "was dropped instead of retried")},
    "padded-halve-ok": {"batch_halving": ("pass", "64 -> 32"), "completes": ("pass", "")},
    "padded-halve-bug": {"batch_halving": ("fail", "was never trained on again")},
    "items-ok": {"batch_halving": ("pass", "32 -> 16"), "completes": ("pass", "")},
    "items-bug": {"batch_halving": ("fail", "was never trained on again")},
    "dataclass-ok": {"batch_halving": ("pass", "32 -> 16"), "completes": ("pass", "")},
    "dataclass-bug": {"batch_halving": ("fail", "was never trained on again")},
    "redo-ok": {"effective_batch": ("pass", "64 or more of them distinct"), "batch_halving": ("pass", "64 -> 32"),
                "completes": ("pass", "")},
    "redo-bug": {"effective_batch": ("fail", "only 32 distinct")},
    "seq-batch-first-ok": {"batch_halving": ("pass", "32 -> 16"), "completes": ("pass", "")},
    "seq-first-ok": {"batch_halving": ("pass", "32 -> 16"), "completes": ("pass", "")},
    "seq-halved-bug": {"batch_halving": ("fail", "")},
    "accum-keep-ok": {"empty_cache_retry": ("pass", "on the same data"), "effective_batch": ("pass", ""),
                      "completes": ("pass", "")},
    "accum-zero-bug": {"empty_cache_retry": ("fail", "was dropped instead of retried"),
                       "effective_batch": ("fail", "32 samples per optimizer step instead of 64")},
}
# Issue 42: a step is what the optimizer did; a resume restores the optimizer too.
WANT3 = {"resume-" + style: {"checkpoint_resume": ("pass", "it restored: model, optimizer"), "completes": ("pass", ""),
                             "exit": ("pass", "")} for style in ("iter_num", "hf", "side", "module")}
WANT3["resume-hf"]["checkpoint_resume"] = ("pass", "it restored: model, optimizer, LR scheduler")
WANT3["resume-bug-forget"] = {"checkpoint_resume": ("fail", "did not restore the optimizer's state")}
WANT3["resume-bug-older"] = {"checkpoint_resume": ("fail", "not of the newest state")}
WANT3["resume-reference"] = {"checkpoint_resume": ("pass", "with loss matching the uninterrupted run")}
WANT3["resume-reference-outside"] = {"checkpoint_resume": ("inconclusive", "the reference run was not an uninterrupted one: it loaded")}
# Issue 42: how a run ends.
WANT4 = {
    "leak-short": {"memory_stable": ("inconclusive", "too few steps to tell growth from warm-up")},
    "leak-long": {"memory_stable": ("fail", "with no plateau")},
    "leak-item": {"memory_stable": ("pass", "did not grow")},
    "exit-log": {"graceful_exit": ("pass", "the probe recorded the OOM; the output did not mention it")},
    "exit-zero": {"graceful_exit": ("fail", "exited with code 0")},
    "stall": {"no_hang": ("fail", "no step after step 2 for")},
    "quit-early": {"batch_halving": ("pass", "completion was not checked")},
}
SUITES = {"evidence": WANT, "evidence2": WANT2, "evidence3": WANT3, "evidence4": WANT4}
if suite not in SUITES:
    sys.exit("evidence_suite.py: unknown suite %r (one of %s)" % (suite, ", ".join(SUITES)))
WANT = SUITES[suite]
if only:
    WANT = {k: v for k, v in WANT.items() if only in k}

argv = [binary, "run", os.path.join(source, "tests", "python", suite, suite + ".yaml"), "--simulate",
        "-j", "1", "--out", out]
if only:
    argv += ["-k", only]
print(" ".join(argv), flush=True)
proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1700)
print(proc.stdout)
with open(os.path.join(out, "results.json")) as f:
    results = json.load(f)
jobs = {j["name"]: j for s in results["suites"] for j in s["jobs"]}
problems = []
for name, checks in WANT.items():
    j = jobs.get(name)
    if j is None:
        problems.append("%s did not run" % name)
        continue
    verdicts = {v["policy"]: v for v in j["verdicts"]}
    for check, (status, words) in checks.items():
        v = verdicts.get(check)
        if v is None or v["status"] != status or words not in v["reason"]:
            problems.append("%s: %s is %s (%s), want %s with %r" % (name, check, v and v["status"], v and v["reason"],
                                                                   status, words))
    want_job = "inconclusive" if any(st == "inconclusive" for st, _ in checks.values()) else "passed"
    if j["status"] != want_job:
        problems.append("%s: %s (%s)" % (name, j["status"], j.get("message", "")))
for p in problems:
    print("FAIL:", p)
print("evidence suite: %d jobs, %d problems" % (len(WANT), len(problems)))
sys.exit(1 if problems else 0)
