#!/usr/bin/env bash
# Configures and builds oomharness into build/ (or $OOMH_BUILD_DIR). Extra arguments go to CMake.
#
#   scripts/build.sh                    # everything: the tool, tests, benchmarks
#   scripts/build.sh --demo             # only what `oomharness demo` needs (scripts/demo.sh)
#   scripts/build.sh --demo --print-targets
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
jobs=${OOMH_JOBS:-$(nproc)}
targets=()
if [ "${1:-}" = --demo ]; then
  shift
  # The command, the shim, the reservation sidecar, and for a machine without a GPU the CPU driver double
  # and the emulated trainer the simulated demo runs (tests/install checks nothing else is compiled).
  targets=(oomharness oomharness_inject oomh-reserve oomh_cuda_double emulated_trainer)
  if [ "${1:-}" = --print-targets ]; then
    echo "${targets[*]}"
    exit 0
  fi
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build" -j"$jobs" --target "${targets[@]}"
else
  cmake --build "$build" -j"$jobs"
fi
