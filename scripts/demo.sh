#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the demo suite. On a machine
# with a GPU it runs real PyTorch trainers; without one, the emulated trainer on the CPU driver double and
# real PyTorch trainers on the virtual CUDA device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh" build
"$root/scripts/build.sh" --demo   # only what the demo runs: no test, no benchmark
# The demo's PyTorch jobs run `python3`: the first one on PATH if it has torch (a GPU machine's, the user's
# own environment); otherwise an environment of the project's (scripts/venv.sh): the CUDA build where a GPU
# is there, the CPU build (the smaller download) where the jobs run on the virtual CUDA device.
if ! python3 -c 'import torch' >/dev/null 2>&1; then
  env_name=torch-2.13.0-cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then env_name=torch-2.14.1-cuda; fi
  python=$("$root/scripts/venv.sh" "$env_name")
  export PATH="$(dirname "$python"):$PATH"
fi
out=${OOMH_DEMO_OUT:-$root/demo-out}
exec "$build/runner/oomharness" demo --out "$out" "$@"
