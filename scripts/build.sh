#!/usr/bin/env bash
# Configures and builds oomharness into build/ (or $OOMH_BUILD_DIR). Extra arguments go to CMake.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
jobs=${OOMH_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$jobs"
