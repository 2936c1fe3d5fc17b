"""Issue 40: a step fault fires at its step, every time (Note [Where a step fault fires] in
injector/engine/fault_plan.h). Runs tests/python/step_faults/step_faults.yaml with `oomharness run --simulate`:
every run of every job must pass, and each of its rules must have fired in its own step (and phase) at the
request layer the job has, with the OOM visible to the code. Exit 0 passed, 1 failed, 125 skipped (no torch).

    step_faults.py [OUT]
    step_faults.py OUT --gpu      # tests/gpu/step_faults_gpu.yaml on this machine's GPU (tests/gpu/run_all.sh)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

gpu = "--gpu" in sys.argv
args = [a for a in sys.argv[1:] if a != "--gpu"]
if not gpu:
    require_torch("step faults")

build = os.environ["OOMH_BUILD_DIR"]
source = os.environ["OOMH_SOURCE_DIR"]
out = args[0] if args else tempfile.mkdtemp(prefix="oomh-step-faults-")
binary = os.path.join(build, "runner", "oomharness")
env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")

EVERY_STEP = {"s%d" % k: (k, None) for k in range(1, 11)}
EVERY_STEP.update({"forward-11": (11, "forward"), "backward-12": (12, "backward"), "optimizer-13": (13, "optimizer")})
DATA = {"d%d" % k: (k, "data") for k in (2, 5, 8)}
# job prefix -> (the rules and where each must fire, the layer they fire at)
WANT = {"allocator-": (EVERY_STEP, "allocator"), "data-": (DATA, "allocator"), "probe-": (EVERY_STEP, "probe")}
if gpu:
    WANT = {"gpu-": (EVERY_STEP, "probe")}
    suite, flags = os.path.join(source, "tests", "gpu", "step_faults_gpu.yaml"), ["-j", "1"]
else:
    suite, flags = os.path.join(source, "tests", "python", "step_faults", "step_faults.yaml"), ["--simulate", "-j", "2"]

argv = [binary, "run", suite] + flags + ["--out", out]
print(" ".join(argv), flush=True)
proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1700)
print(proc.stdout[-20000:])
with open(os.path.join(out, "results.json")) as f:
    results = json.load(f)
jobs = [j for s in results["suites"] for j in s["jobs"]]
problems = []
counted = {prefix: 0 for prefix in WANT}
for j in jobs:
    prefix = next(p for p in WANT if j["name"].startswith(p))
    rules, layer = WANT[prefix]
    counted[prefix] += 1
    if j["status"] != "passed":
        problems.append("%s: %s (%s)" % (j["name"], j["status"], j.get("message", "")))
    fired = {}
    for f in j.get("faults", []):
        fired.setdefault(f["rule"], []).append(f)
    for rule, (step, phase) in rules.items():
        got = fired.get(rule, [])
        where = sorted({(f["step"], f["phase"], f.get("layer")) for f in got})
        if len(got) != 2 or any(f["step"] != step or (phase and f["phase"] != phase) or f.get("layer") != layer
                                for f in got):
            problems.append("%s: rule %s fired %d times at %s, want twice at step %d%s at the %s layer"
                            % (j["name"], rule, len(got), where, step, " (" + phase + ")" if phase else "", layer))
        elif not any(f["visible"] for f in got):
            problems.append("%s: rule %s fired, but the code saw no OOM" % (j["name"], rule))
for prefix, n in counted.items():
    if n == 0:
        problems.append("no job %s* ran" % prefix)
for p in problems:
    print("FAIL:", p)
print("step faults: %d runs (%s), %d problems" % (len(jobs), ", ".join("%s %d" % kv for kv in counted.items()),
                                                  len(problems)))
sys.exit(1 if problems else 0)
