#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test. GPU tests skip
# (exit 125) where there is no GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
jobs=${OOMH_JOBS:-$(nproc)}
phase() { echo "== $(date -u +%H:%M:%S) $*"; }
phase "deps (Debian's packages)"
"$root/scripts/deps.sh" test

# The PyTorch matrix (Note [The PyTorch matrix] in tests/CMakeLists.txt): every Python test runs under each
# of these, made by scripts/venv.sh from python/requirements/. OOMH_TORCH_MATRIX narrows it (a list of names).
# They are made beside the C++ build (pip mostly unpacks files, the compiler mostly computes), one after the
# other, each saying its time; the build is then configured with them.
matrix=${OOMH_TORCH_MATRIX:-"torch-2.13.0-cpu torch-2.14.1-cuda"}
mkdir -p "$build"
venvs_out="$build/venvs.txt"
: >"$venvs_out"
phase "Python environments ($matrix, public-torch-2.14.1-cuda), beside the build"
(
  for name in $matrix; do
    python=$("$root/scripts/venv.sh" "$name") || exit 1
    echo "$name=$python" >>"$venvs_out"
  done
  # The public training programs' own environment (tests/public); OOMH_PUBLIC=0 leaves it and its test out.
  if [ "${OOMH_PUBLIC:-1}" = 1 ]; then
    "$root/scripts/venv.sh" public-torch-2.14.1-cuda >"$build/venv-public.txt" || exit 1
  fi
) &
venvs_pid=$!
trap 'kill "$venvs_pid" 2>/dev/null || true' EXIT  # a failed build leaves no pip behind
phase "build"
# Through ccache where it is installed: the wheel's build (tests/install/check_wheel.sh, a sibling build
# folder at the same depth) then compiles only what differs from this one.
ccache_args=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  ccache_args=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
"$root/scripts/build.sh" "${ccache_args[@]}"
if ! wait "$venvs_pid"; then
  echo "scripts/test.sh: making the Python environments failed (above)" >&2
  exit 1
fi
phase "Python environments ready; configuring the tests with them"
pythons=$(paste -sd';' "$venvs_out")
public_python=""
[ "${OOMH_PUBLIC:-1}" = 1 ] && public_python=$(cat "$build/venv-public.txt")
"$root/scripts/build.sh" "-DOOMH_TEST_PYTHONS=$pythons" "-DOOMH_PUBLIC_PYTHON=$public_python"

# The shim's engine under AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer: the code
# that runs inside every CUDA allocation of a job must be clean under both. (The preload tests run in the
# main build only: a sanitizer runtime cannot be preloaded behind another program's.)
if [ "${OOMH_SANITIZERS:-1}" = 1 ]; then
  for san in "address;undefined" thread; do
    dir="$build-${san%%;*}"
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DOOMH_SANITIZE="$san" -DOOMH_WITH_TORCH=OFF \
      -DOOMH_BUILD_BENCH=OFF >/dev/null
    cmake --build "$dir" -j"$jobs" --target injector_engine_test
    phase "injector engine tests under -fsanitize=$san"
    "$dir/tests/injector/injector_engine_test" --gtest_brief=1
  done
fi

# The libFuzzer targets (tests/fuzz), each for OOMH_FUZZ_SECONDS (30 by default) under ASan + UBSan, in
# their own clang build. Skipped, saying so, where clang or its libFuzzer runtime is missing; OOMH_FUZZ=0
# skips them on purpose.
if [ "${OOMH_FUZZ:-1}" = 1 ]; then
  rc=0
  phase "fuzz targets"
  OOMH_FUZZ_BUILD_DIR="$build-fuzz" "$root/scripts/fuzz.sh" || rc=$?
  if [ "$rc" = 77 ]; then
    echo "== fuzz targets SKIPPED: clang or libFuzzer is not installed (scripts/deps.sh test installs them on Debian)"
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
fi

# The Slurm backend's tests (tests/slurm) bring up a local one-node Slurm; where deps.sh installed Slurm
# and we are root (CI), they must run: a cluster that cannot start fails them instead of skipping.
if command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export OOMH_REQUIRE_SLURM=1
fi

# Last, so that its summary closes the output.
phase "ctest"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 600
