#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test. GPU tests skip
# (exit 125) where there is no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
jobs=${OOMH_JOBS:-$(nproc)}
"$root/scripts/deps.sh" test
"$root/scripts/build.sh"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600
