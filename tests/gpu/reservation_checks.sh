#!/usr/bin/env bash
# The reservation column of docs/compatibility.md: the oomh-reserve sidecar holds real device memory so
# that only LEAVE bytes stay free, then each framework asks for more than that, with no shim at all, and
# must fail with its own out-of-memory error. Prints RESULT lines like tests/gpu/injector/run.sh.
#
# usage: tests/gpu/reservation_checks.sh BUILD_DIR [OUT_DIR]
set -u
BUILD=$(cd "$1" && pwd)
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
LEAVE=$((4 << 30))
ASK=$((6 << 30))
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 125; }
free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits -i 0 | head -1)
hold=$(( free_mib * 1024 * 1024 - LEAVE ))
coproc SIDE { exec "$BUILD/runner/oomh-reserve" --device 0 --bytes "$hold" 2>"$OUT/reserve.log"; }
read -r -t 60 ready <&"${SIDE[0]}" || ready=""
case "$ready" in READY*) ;; *) echo "RESULT reservation - sidecar FAIL '$ready' (see $OUT/reserve.log)"; exit 1 ;; esac
echo "# sidecar holds $hold bytes; about $LEAVE bytes stay free; each framework asks for $ASK"

check() {  # check FRAMEWORK MODE ENV... -- python snippet (prints OOM:<type> or NOOOM)
  local fw=$1 mode=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local got
  got=$(env -u LD_PRELOAD "${envs[@]}" timeout 120 "$PYTHON" -c "$1" 2>"$OUT/$fw-$mode.err" | tail -1)
  case "$got" in
    OOM:*) echo "RESULT $fw $mode reservation PASS ${got#OOM:} raised when asking for 6 GiB with 4 GiB free" ;;
    *) echo "RESULT $fw $mode reservation FAIL got '$got' (see $OUT/$fw-$mode.err)" ;;
  esac
}
TORCH='import torch
try:
    x = torch.empty(6 << 30, dtype=torch.uint8, device="cuda"); print("NOOOM")
except torch.OutOfMemoryError as e:
    print("OOM:torch.OutOfMemoryError")'
check torch native -- "$TORCH"
check torch expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- "$TORCH"
check torch async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- "$TORCH"
check jax noprealloc XLA_PYTHON_CLIENT_PREALLOCATE=false -- 'import jax, jax.numpy as jnp
try:
    x = jnp.zeros((6 << 30,), dtype=jnp.uint8); x.block_until_ready(); print("NOOOM")
except Exception as e:
    print("OOM:" + type(e).__name__ if "RESOURCE_EXHAUSTED" in str(e) or "out of memory" in str(e).lower() else "OTHER:" + str(e)[:100])'
check cupy default -- 'import cupy
try:
    x = cupy.empty(6 << 30, dtype=cupy.uint8); print("NOOOM")
except cupy.cuda.memory.OutOfMemoryError:
    print("OOM:cupy.cuda.memory.OutOfMemoryError")'
side_pid=$SIDE_PID
eval "exec ${SIDE[1]}>&-"
wait "$side_pid"
