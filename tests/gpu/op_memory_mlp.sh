#!/usr/bin/env bash
# Issue 43: bench/python/op_memory.py on this GPU for the held-out MLP of tests/gpu/predict_check.py at two
# batch sizes, and its max_memory_reserved without the recording; packed in $OUT/op_memory_mlp.tgz.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/out/gpu}
w=$(mktemp -d)
for b in 4096 16384; do
  (cd "$w" && python3 "$root/bench/python/op_memory.py" --gpu --json "$w/mlp-$b.json" -- "$root/examples/python/train.py" \
     --model mlp --steps 3 --batch $b --hidden 4096 >"$w/mlp-$b.log" 2>&1; echo "mlp $b rc=$?")
  python3 -c "
import atexit, runpy, sys, torch
atexit.register(lambda: print('MAX_RESERVED', torch.cuda.max_memory_reserved(), 'MAX_ALLOCATED', torch.cuda.max_memory_allocated(), flush=True))
sys.argv = ['train.py', '--model', 'mlp', '--steps', '3', '--batch', '$b', '--hidden', '4096']
runpy.run_path('$root/examples/python/train.py', run_name='__main__')" 2>&1 | grep MAX_ | sed "s/^/mlp $b /"
done
tar czf "$out/op_memory_mlp.tgz" -C "$w" .
