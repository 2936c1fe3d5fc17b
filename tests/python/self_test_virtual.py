"""suites/self-test.yaml on the virtual CUDA device (issue 13): the project's own GPU self-test, unchanged,
run by `oomharness run --simulate` on a machine without a GPU. Every PyTorch job must get the verdict the
suite states for a GPU: the correct trainers pass, each broken one fails exactly the checks it marks
`must_fail` (XFAIL). --strict: an inconclusive job fails the run. The LibTorch jobs need a GPU build of
LibTorch and are left out. The run's terminal output (terminal.txt), results, JUnit (junit.xml), Markdown
(summary.md) and HTML stay in OUT for diagnosis_suite.py, which judges the same run (Note [One run, two
judges] in tests/python/CMakeLists.txt). Exit 0 passed, 1 failed, 125 skipped (no torch here)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

require_torch("self-test on the virtual device")

build = os.environ["OOMH_BUILD_DIR"]
source = os.environ["OOMH_SOURCE_DIR"]
out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="oomh-self-test-virtual-")
env = dict(os.environ)
# The suite runs `python3`: the one that has torch (this one), whatever else is first on PATH.
env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
argv = [os.path.join(build, "runner", "oomharness"), "run", os.path.join(source, "suites", "self-test.yaml"),
        "--simulate", "--strict", "-k", "not libtorch", "-j", "2", "--out", out,
        "--junit", os.path.join(out, "junit.xml"), "--markdown", os.path.join(out, "summary.md")]
print(" ".join(argv), flush=True)
proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
print(proc.stdout)
with open(os.path.join(out, "terminal.txt"), "w") as f:
    f.write(proc.stdout)
with open(os.path.join(out, "results.json")) as f:
    results = json.load(f)
jobs = [j for s in results["suites"] for j in s["jobs"]]
problems = []
if proc.returncode != 0:
    problems.append("oomharness exited %d" % proc.returncode)
if len(jobs) < 12:
    problems.append("only %d jobs ran" % len(jobs))
for j in jobs:
    broken = j["name"].startswith("broken-")
    must_fail = [v for v in j["verdicts"] if v.get("must_fail")]
    if j["status"] != "passed":
        problems.append("%s: %s (%s)" % (j["name"], j["status"], j.get("message", "")))
    if broken and not all(v["status"] == "fail" for v in must_fail) or broken and not must_fail:
        problems.append("%s: a broken trainer must fail every check it marks must_fail" % j["name"])
    if not j.get("virtual_device", "").startswith("virtual CUDA device"):
        problems.append("%s: did not run on the virtual device" % j["name"])
if "No GPU ran these %d jobs" % len(jobs) not in proc.stdout:
    problems.append("the terminal did not say that no GPU ran the jobs")
for p in problems:
    print("FAILED: " + p)
sys.exit(1 if problems else 0)
