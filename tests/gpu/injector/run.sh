#!/usr/bin/env bash
# The injector's GPU evidence: PyTorch (three allocator modes), JAX (two), CuPy and a plain CUDA runtime
# program, each under LD_PRELOAD=liboomharness_inject.so with OOMH_CAP=4GiB, run in parallel (each job has its
# own control block, so their caps and plans are independent). Faults are switched at run time through the
# control block (cap, Nth persistent fault, step fault, single transient fault). JAX runs as three jobs per
# mode (cap, nth, step groups of jax_checks.py): XLA's BFC allocator waits up to 10 s for memory to come back
# before it reports an out-of-memory error (tsl's AllocatorRetry), so one OOM per process keeps the phase short.
# Prints one line per check:
#     RESULT <framework> <mode> <check> PASS|FAIL <detail>
# for docs/compatibility.md. Bounded: every job is killed after JOB_LIMIT seconds; the whole run stays under
# 4 minutes. Exit status: 0 all PASS, 1 some FAIL, 125 no GPU.
#
# usage: tests/gpu/injector/run.sh BUILD_DIR [OUT_DIR]
#   also builds runtime_alloc.cu into OUT_DIR/runtime_alloc (tests/gpu/reservation_checks.sh can reuse it)
set -u

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
  exit 2
fi
BUILD=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
SHIM="$BUILD/injector/liboomharness_inject.so"
OUT=${2:-$(mktemp -d /tmp/oomh-gpu-injector-XXXXXX)}
mkdir -p "$OUT"
JOB_LIMIT=${JOB_LIMIT:-150}
PYTHON=${PYTHON:-python3}

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU here (nvidia-smi -L failed): skipped"
  exit 125
fi
if [ ! -f "$SHIM" ]; then
  echo "RESULT shim - build FAIL $SHIM is missing (build the oomharness_inject target)"
  exit 1
fi
echo "# shim: $SHIM"
echo "# output: $OUT"

# run_job NAME FRAMEWORK MODE ENV... -- COMMAND...   (in the background; its log is $OUT/NAME.log)
pids=()
names=()
run_job() {
  local name=$1 framework=$2 mode=$3
  shift 3
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  rm -f "$OUT/$name.events"
  (
    cd "$HERE" && env -u OOMH_CONTROL -u OOMH_PLAN -u OOMH_SHIM_PARENT \
      LD_PRELOAD="$SHIM" OOMH_CAP=4GiB OOMH_EVENTS="$OUT/$name.events" OOMH_LOG=warn PYTHONUNBUFFERED=1 \
      "${envs[@]}" timeout -k 5 "$JOB_LIMIT" "$@"
    code=$?
    if [ $code -ne 0 ]; then echo "RESULT $framework $mode run FAIL exit=$code (124: timed out; see $OUT/$name.log)"; fi
  ) >"$OUT/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}

run_job torch-native torch native -- "$PYTHON" torch_checks.py native
run_job torch-expandable torch expandable PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -- "$PYTHON" torch_checks.py expandable
run_job torch-async torch async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync -- "$PYTHON" torch_checks.py async
for group in cap nth step; do
  run_job "jax-prealloc-$group" jax prealloc -- "$PYTHON" jax_checks.py prealloc "$group"
  run_job "jax-noprealloc-$group" jax noprealloc XLA_PYTHON_CLIENT_PREALLOCATE=false -- "$PYTHON" jax_checks.py noprealloc "$group"
done
run_job cupy cupy default -- "$PYTHON" cupy_checks.py

# The runtime program: built without the shim (nvcc must not run under it), then run under it. It maps the
# control block through include/oomharness/control_block.h.
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if timeout 120 "$NVCC" -O2 -std=c++17 -I"$ROOT/include" -o "$OUT/runtime_alloc" "$HERE/runtime_alloc.cu" >"$OUT/runtime-build.log" 2>&1; then
  run_job runtime runtime default -- "$OUT/runtime_alloc"
else
  echo "RESULT runtime default build FAIL nvcc failed (see $OUT/runtime-build.log)" | tee "$OUT/runtime.log"
fi

for pid in "${pids[@]}"; do wait "$pid"; done

failed=0
for name in "${names[@]}" runtime; do
  [ -f "$OUT/$name.log" ] || continue
  grep '^RESULT ' "$OUT/$name.log"
  if ! grep -q '^RESULT ' "$OUT/$name.log"; then echo "RESULT $name - output FAIL no RESULT line (see $OUT/$name.log)"; fi
done | awk '!seen[$0]++' | tee "$OUT/results.txt"
if grep -q '^RESULT .* FAIL ' "$OUT/results.txt"; then failed=1; fi
exit $failed
