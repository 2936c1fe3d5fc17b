#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs each for a bounded time
# on its seed corpus; fails on any crash, leak, timeout or sanitizer report. tests/fuzz/README.md.
#
#   scripts/fuzz.sh                 # every target, 30 s each, OOMH_JOBS of them at a time
#   scripts/fuzz.sh suite units     # some targets
#   OOMH_FUZZ_SECONDS=600 scripts/fuzz.sh events
#
# Environment: OOMH_FUZZ_SECONDS (default 30), OOMH_FUZZ_BUILD_DIR (default build-fuzz), OOMH_JOBS,
# OOMH_FUZZ_WORK (where new inputs and crash files go; default BUILD/fuzz-work). Exit 0: no finding;
# 1: a target found something (its crash file is named); 77: clang or libFuzzer is missing (skipped).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${OOMH_FUZZ_SECONDS:-30}
jobs=${OOMH_JOBS:-$(nproc)}
work=${OOMH_FUZZ_WORK:-$build/fuzz-work}
# Every target tests/fuzz/CMakeLists.txt declares: a new one is run without being listed twice.
mapfile -t all_targets < <(sed -n 's/^oomh_add_fuzzer(\([a-z_]*\).*/\1/p' "$root/tests/fuzz/CMakeLists.txt")
[ ${#all_targets[@]} -gt 0 ] || { echo "scripts/fuzz.sh: no oomh_add_fuzzer in tests/fuzz/CMakeLists.txt" >&2; exit 1; }
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

# clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev on 12, -19- on 13; scripts/deps.sh test installs them).
cxx=${OOMH_FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  for c in clang++ clang++-14 clang++-19 clang++-15 clang++-16 clang++-17 clang++-18; do command -v "$c" >/dev/null 2>&1 && { cxx=$c; break; }; done
fi
if [ -z "$cxx" ]; then
  echo "scripts/fuzz.sh: SKIPPED: no clang++ (apt-get install clang and its libclang-rt-VERSION-dev)" >&2
  exit 77
fi
cc=${cxx/clang++/clang}
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >"$probe/log" 2>&1; then
  echo "scripts/fuzz.sh: SKIPPED: $cxx cannot link -fsanitize=fuzzer (apt-get install the libclang-rt-VERSION-dev of its version):" >&2
  cat "$probe/log" >&2
  exit 77
fi

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
# -O1 and line tables only: what libFuzzer advises, and half the compile time of -O2 -g on a 2-core CI machine.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_RELEASE="-O1 -gline-tables-only" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DOOMH_FUZZ=ON -DOOMH_BUILD_TESTS=OFF -DOOMH_BUILD_BENCH=OFF -DOOMH_WITH_TORCH=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}")

# One target per core at a time: each libFuzzer run is one process on one core.
fuzz_one() {
  local t=$1
  local exe="$build/tests/fuzz/fuzz_$t"
  local seeds="$root/tests/fuzz/corpus/$t"
  local corpus="$work/corpus/$t"      # new inputs go here, never into the seeds in the tree
  local artifacts="$work/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: the issue's "bounded memory".
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$artifacts" "$corpus" "$seeds" >"$work/$t.log" 2>&1
}
declare -A pids=()
failed=()
reap() {  # waits for the target started first of those running; says what it found
  local t=$1
  if wait "${pids[$t]}"; then
    echo "== fuzz_$t for ${seconds}s: $(grep -E '^stat::number_of_executed_units' "$work/$t.log" | tr -s ' ' | paste -sd' ')"
  else
    tail -40 "$work/$t.log"
    echo "scripts/fuzz.sh: fuzz_$t found a problem: $(ls "$work/artifacts/$t/" | head -3 | sed "s|^|$work/artifacts/$t/|" | tr '\n' ' ')" >&2
    failed+=("$t")
  fi
  unset "pids[$t]"
}
running=()
for t in "${targets[@]}"; do
  if [ ${#running[@]} -ge "$jobs" ]; then
    reap "${running[0]}"
    running=("${running[@]:1}")
  fi
  fuzz_one "$t" &
  pids[$t]=$!
  running+=("$t")
done
for t in "${running[@]}"; do reap "$t"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "scripts/fuzz.sh: findings in ${failed[*]} (full logs in $work)" >&2
  exit 1
fi
echo "scripts/fuzz.sh: no finding in ${targets[*]}"
