#!/usr/bin/env bash
# Packing: 8 small capped jobs on one GPU with `--jobs 8` against `--jobs 1`, in one invocation.
# Target: the 8 packed jobs take at most 1.5x the time of one job alone (total with --jobs 1 / 8).
# The packed run uses the runner's CPU share (`--threads-per-job auto`, the default: each job gets
# OMP_NUM_THREADS = CPUs / 8). With COMPARE_OFF=1 it is also timed without it (`off`: every job starts one
# thread per core), which is what Note [CPU share of packed jobs] (runner/src/exec/cpu_share.h) is about.
#
# usage: [COMPARE_OFF=1] bench/gpu/packing.sh BUILD_DIR OUT_DIR [STEPS]
set -eu
BUILD=$(cd "$1" && pwd)
OUT=$2
STEPS=${3:-100}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
suite=$OUT/packing.yaml
{
  echo "version: 1"
  echo "name: packing"
  echo "defaults: {timeout: 5m, probe: none, memory: {limit: 2GiB}, env: {PYTHONUNBUFFERED: \"1\"}}"
  echo "jobs:"
  for i in 1 2 3 4 5 6 7 8; do
    echo "  - {name: mlp-$i, run: python3 $ROOT/examples/python/train.py --model mlp --steps $STEPS --batch 512 --seed $i, expect: [{exit: 0}]}"
  done
} > "$suite"
unset OMP_NUM_THREADS
timed() {  # timed NAME ARGS...: runs the suite, prints the seconds it took; fails when a job failed
  local name=$1 t0 t1; shift
  t0=$(date +%s.%N)
  "$BUILD/runner/oomharness" run "$suite" "$@" --out "$OUT/$name" > "$OUT/$name.log" 2>&1 || { echo "$name failed: see $OUT/$name.log" >&2; return 1; }
  t1=$(date +%s.%N)
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$t1"
}
serial=$(timed jobs1 --jobs 1)
packed=$(timed jobs8 --jobs 8)
packed_off=-1
[ "${COMPARE_OFF:-0}" = 1 ] && packed_off=$(timed jobs8-off --jobs 8 --threads-per-job off)
python3 - "$serial" "$packed_off" "$packed" "$(nproc)" "$STEPS" <<'PY'
import sys
serial, off, auto = map(float, sys.argv[1:4])
cpus, steps = sys.argv[4], sys.argv[5]
one = serial / 8
off_cell = f"{off:.1f} s ({off / one:.2f}x)" if off >= 0 else "not run (COMPARE_OFF=1)"
print(f"| jobs | --jobs 1 total | one job (total / 8) | --jobs 8 (auto: {int(cpus) // 8} threads each) | packed / one job | --jobs 8, --threads-per-job off |")
print("| --- | --- | --- | --- | --- | --- |")
print(f"| 8 x MLP ({steps} steps), cap 2 GiB each | {serial:.1f} s | {one:.1f} s | {auto:.1f} s | **{auto / one:.2f}x** | {off_cell} |")
PY
