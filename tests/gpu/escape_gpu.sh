#!/usr/bin/env bash
# Issue 44 (1) on a real GPU: a job whose launcher runs its trainer with a clean environment (no LD_PRELOAD, no
# probe: `env -i`) holds device memory the shim never sees. Only the driver's process list (NVML, read by the
# runner: Note [Processes outside the shim] in runner/src/exec/escapes.h) can show it; the job must be an error
# that names the process. Its twin keeps the harness's environment and must not be (it meets no fault and
# reaches no cap, so it may be inconclusive).
#   tests/gpu/escape_gpu.sh BUILD WORK
set -uo pipefail
build=$1 work=$2
mkdir -p "$work"
cat >"$work/hold.py" <<'PY'
import time, torch
x = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(4)
PY
cat >"$work/small.py" <<'PY'
import torch
torch.empty(1 << 20, device="cuda")
torch.cuda.synchronize()
PY
# launcher.sh escape|stay: a tiny GPU call under the shim, then the trainer, outside it or not.
cat >"$work/launcher.sh" <<'SH'
python3 "$(dirname "$0")/small.py" || exit $?
if [ "$1" = escape ]; then exec env -i PATH="$PATH" HOME=/tmp python3 "$(dirname "$0")/hold.py"; fi
exec python3 "$(dirname "$0")/hold.py"
SH
cat >"$work/escape.yaml" <<YAML
version: 1
name: escape-gpu
defaults: {timeout: 2m}
jobs:
  - name: escapes
    run: sh $work/launcher.sh escape
    memory: {limit: 1GiB}
    expect: [{exit: 0}]
  - name: stays
    run: sh $work/launcher.sh stay
    memory: {limit: 1GiB}
    expect: [{exit: 0}]
YAML
"$build/runner/oomharness" run "$work/escape.yaml" --out "$work/out"
echo "runner exit $?"
python3 - "$work/out/results.json" <<'PY'
import json, sys
jobs = {j["name"]: j for suite in json.load(open(sys.argv[1]))["suites"] for j in suite["jobs"]}
def say(name, ok, what):
    print("RESULT escape_gpu_%s %s %s" % (name, "PASS" if ok else "FAIL", what))
e, s = jobs.get("escapes", {}), jobs.get("stays", {})
msg = (e.get("message") or e.get("error") or "")
say("escapes", e.get("status") == "error" and "outside the shim" in msg, "%s: %s" % (e.get("status"), msg[:400]))
# The twin reaches no cap and meets no fault, so it may be inconclusive; it must not be taken for an escape.
say("stays", s.get("status") in ("passed", "inconclusive") and "outside the shim" not in (s.get("message") or ""),
    "%s: %s" % (s.get("status"), (s.get("message") or "")[:400]))
PY
