#!/usr/bin/env bash
# Packing: 8 small capped jobs on one GPU with `--jobs 8` against `--jobs 1`, in one invocation.
# Target: the 8 packed jobs take at most 1.5x the time of one job alone (total with --jobs 1 / 8).
#
# usage: bench/gpu/packing.sh BUILD_DIR OUT_DIR
set -eu
BUILD=$(cd "$1" && pwd)
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
suite=$OUT/packing.yaml
{
  echo "version: 1"
  echo "name: packing"
  echo "defaults: {timeout: 5m, probe: none, memory: {limit: 2GiB}, env: {PYTHONUNBUFFERED: \"1\"}}"
  echo "jobs:"
  for i in 1 2 3 4 5 6 7 8; do
    echo "  - {name: mlp-$i, run: python3 $ROOT/examples/python/train.py --model mlp --steps 100 --batch 512 --seed $i, expect: [{exit: 0}]}"
  done
} > "$suite"
t0=$(date +%s.%N)
"$BUILD/runner/oomharness" run "$suite" --jobs 1 --out "$OUT/jobs1" > "$OUT/jobs1.log" 2>&1
t1=$(date +%s.%N)
"$BUILD/runner/oomharness" run "$suite" --jobs 8 --out "$OUT/jobs8" > "$OUT/jobs8.log" 2>&1
t2=$(date +%s.%N)
python3 - "$t0" "$t1" "$t2" <<'PY'
import sys
t0, t1, t2 = map(float, sys.argv[1:])
serial, packed = t1 - t0, t2 - t1
one = serial / 8
print(f"| jobs | --jobs 1 total | one job (total/8) | --jobs 8 total | packed / one job |\n| --- | --- | --- | --- | --- |")
print(f"| 8 x MLP, cap 2 GiB each | {serial:.1f} s | {one:.1f} s | {packed:.1f} s | {packed / one:.2f}x |")
PY
