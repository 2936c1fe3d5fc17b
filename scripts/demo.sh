#!/usr/bin/env bash
# The README's first command: installs what is missing, builds, and runs the demo suite. On a machine
# with a GPU it runs real PyTorch trainers; without one, the emulated trainer on the CPU driver double and
# real PyTorch trainers on the virtual CUDA device.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh" build
"$root/scripts/build.sh" --demo   # only what the demo runs: no test, no benchmark
out=${OOMH_DEMO_OUT:-$root/demo-out}
exec "$build/runner/oomharness" demo --out "$out" "$@"
