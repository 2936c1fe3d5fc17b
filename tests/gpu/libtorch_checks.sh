#!/usr/bin/env bash
# The LibTorch row of docs/compatibility.md: examples/libtorch/trainer.cpp (built with the project when
# LibTorch is found) under `oomharness exec`. Prints RESULT lines like tests/gpu/injector/run.sh.
#
# usage: tests/gpu/libtorch_checks.sh BUILD_DIR OUT_DIR
set -u
BUILD=$(cd "$1" && pwd)
OUT=$2
mkdir -p "$OUT"
bin=$BUILD/runner/oomharness
trainer=$BUILD/examples/oomh_libtorch_trainer
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 125; }
[ -x "$trainer" ] || { echo "RESULT libtorch default build FAIL $trainer was not built"; exit 1; }
# Under a 1 GiB cap a batch of 65536 (1 GiB of hidden activations) does not fit: the halving trainer must
# recover. (Under 256 MiB, cuBLAS's own handle allocation, made outside PyTorch's allocator after the
# caught OOM, failed as CUBLAS_STATUS_ALLOC_FAILED: a cap must leave room for the libraries' workspaces.)
"$bin" exec --cap 1GiB --expect oom_visible --expect batch_halving --expect exit=0 --out "$OUT/libtorch-cap" \
  -- "$trainer" --recovery halve --steps 6 --batch 65536 >"$OUT/libtorch-cap.txt" 2>&1
rc=$?
echo "RESULT libtorch default cap $([ $rc -eq 0 ] && echo PASS || echo FAIL) c10::OutOfMemoryError caught under a 1 GiB cap, batch halved (oomharness exec rc=$rc)"
# From the 20th allocation on nothing succeeds: the trainer without a handler must stop with the OOM.
"$bin" exec --fault nth=20,forever --expect oom_visible --out "$OUT/libtorch-nth" \
  -- "$trainer" --recovery none --steps 6 >"$OUT/libtorch-nth.txt" 2>&1
rc=$?
echo "RESULT libtorch default nth_persistent $([ $rc -eq 0 ] && echo PASS || echo FAIL) c10::OutOfMemoryError raised from the 20th allocation on (oomharness exec rc=$rc)"
