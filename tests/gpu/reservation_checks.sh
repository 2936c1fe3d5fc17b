#!/usr/bin/env bash
# The reservation column of docs/compatibility.md: the oomh-reserve sidecar holds real device memory so
# that only LEAVE (4 GiB) stays free (--leave: measured once the sidecar's own CUDA context exists), then each
# framework asks for 6 GiB, with no shim at all, and must fail with its own out-of-memory error:
#   torch native/expandable/async   torch.OutOfMemoryError
#   jax noprealloc                  an XLA RESOURCE_EXHAUSTED error
#   jax prealloc                    the same; the detail says what XLA sized its pool from: bytes_limit is 75%
#                                   of the TOTAL memory (the reservation does not change it), and the pool it
#                                   got is what its allocator found by backing off (0.9x per try) until one
#                                   allocation fit, measured once a small array was made after the OOM
#   cupy                            cupy.cuda.memory.OutOfMemoryError
#   libtorch                        c10::OutOfMemoryError (examples/libtorch/trainer.cpp --alloc-bytes, when built)
#   runtime                         cudaErrorMemoryAllocation (tests/gpu/injector/runtime_alloc.cu reservation)
# One check at a time, since they share what the sidecar left free; each process's own CUDA context (about
# 0.5 GiB) comes out of those 4 GiB. Each check is killed after CHECK_LIMIT seconds. Prints RESULT lines
# like tests/gpu/injector/run.sh.
#
# usage: tests/gpu/reservation_checks.sh BUILD_DIR [OUT_DIR]
#   RUNTIME_ALLOC=PATH   use this runtime_alloc (tests/gpu/injector/run.sh builds one into its OUT_DIR)
#                        instead of building it here with nvcc (a few seconds)
set -u
BUILD=$(cd "$1" && pwd)
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
CHECK_LIMIT=${CHECK_LIMIT:-60}
LEAVE=$((4 << 30))
ASK=$((6 << 30))
nvidia-smi -L >/dev/null 2>&1 || { echo "no GPU: skipped"; exit 125; }

# Built before the sidecar starts: nvcc needs no GPU, and the reservation should be held for no longer than
# the checks take.
runtime_alloc=${RUNTIME_ALLOC:-}
if [ -z "$runtime_alloc" ] || [ ! -x "$runtime_alloc" ]; then
  runtime_alloc=$OUT/runtime_alloc
  NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  timeout 120 "$NVCC" -O2 -std=c++17 -I"$ROOT/include" -o "$runtime_alloc" "$ROOT/tests/gpu/injector/runtime_alloc.cu" \
    >"$OUT/runtime-build.log" 2>&1 || runtime_alloc=""
fi

coproc SIDE { exec "$BUILD/runner/oomh-reserve" --device 0 --leave "$LEAVE" 2>"$OUT/reserve.log"; }
read -r -t 60 ready <&"${SIDE[0]}" || ready=""
case "$ready" in READY*) ;; *) echo "RESULT reservation - sidecar FAIL '$ready' (see $OUT/reserve.log)"; exit 1 ;; esac
echo "# sidecar holds ${ready#READY } bytes, leaving $LEAVE free; each framework asks for $ASK"

check() {  # check FRAMEWORK MODE ENV... -- python snippet (its last line: OOM:<what was raised> or anything else)
  local fw=$1 mode=$2; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local got
  got=$(env -u LD_PRELOAD "${envs[@]}" timeout -k 5 "$CHECK_LIMIT" "$PYTHON" -c "$1" 2>"$OUT/$fw-$mode.err" | tail -1)
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
# The 6 GiB request comes first, while the pool is still empty (so the kernel that fills the array can
# still be loaded); the small array after it is a plain host-to-device copy, which needs no kernel in the
# little the pool leaves.
check jax prealloc -- 'import jax, jax.numpy as jnp, numpy as np
def gib(n):
    return f"{n / (1 << 30):.2f} GiB" if isinstance(n, int) else str(n)
try:
    x = jnp.zeros((6 << 30,), dtype=jnp.uint8); x.block_until_ready(); got = "NOOOM"
except Exception as e:
    m = str(e)
    got = "OOM:" + type(e).__name__ if "RESOURCE_EXHAUSTED" in m or "out of memory" in m.lower() else "OTHER:" + m[:100]
if got.startswith("OOM:"):
    try:
        y = jax.device_put(np.zeros(16, np.uint8)); y.block_until_ready()
        s = jax.devices()[0].memory_stats() or {}
        got += " (bytes_limit " + gib(s.get("bytes_limit")) + ", pool then " + gib(s.get("pool_bytes")) + ")"
    except Exception as e:
        got += f" (then a 16-byte array failed too: {type(e).__name__}: {str(e)[:60]})"
print(got)'
check cupy default -- 'import cupy
try:
    x = cupy.empty(6 << 30, dtype=cupy.uint8); print("NOOOM")
except cupy.cuda.memory.OutOfMemoryError:
    print("OOM:cupy.cuda.memory.OutOfMemoryError")'

trainer=$BUILD/examples/oomh_libtorch_trainer
if [ -x "$trainer" ]; then
  got=$(env -u LD_PRELOAD timeout -k 5 "$CHECK_LIMIT" "$trainer" --alloc-bytes "$ASK" 2>"$OUT/libtorch.err" | tail -1)
  case "$got" in
    c10::OutOfMemoryError:*) echo "RESULT libtorch default reservation PASS c10::OutOfMemoryError raised when asking for 6 GiB with 4 GiB free:${got#c10::OutOfMemoryError:}" ;;
    *) echo "RESULT libtorch default reservation FAIL got '$got' (see $OUT/libtorch.err)" ;;
  esac
else
  echo "RESULT libtorch default reservation FAIL $trainer was not built"
fi

if [ -n "$runtime_alloc" ]; then
  got=$(env -u LD_PRELOAD timeout -k 5 "$CHECK_LIMIT" "$runtime_alloc" reservation 2>"$OUT/runtime.err" | grep '^RESULT ' | tail -1)
  echo "${got:-RESULT runtime default reservation FAIL no RESULT line (see $OUT/runtime.err)}"
else
  echo "RESULT runtime default reservation FAIL nvcc could not build runtime_alloc (see $OUT/runtime-build.log)"
fi

side_pid=$SIDE_PID
eval "exec ${SIDE[1]}>&-"
wait "$side_pid"
