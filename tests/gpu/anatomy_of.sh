#!/usr/bin/env bash
# Issue 43: bench/python/peak_anatomy.py's summary (the segments the allocator reserved, in order, and the
# live blocks at the peaks) of one command run on this GPU without the harness:
#   tests/gpu/anatomy_of.sh NAME PROGRAM.py ARGS...      -> $OUT/anatomy-NAME.json
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/out/gpu}
name=$1; shift
TORCH_SYMBOLIZE_MODE=dladdr python3 - "$out/anatomy-$name.json" "$@" <<PY
import atexit, json, runpy, sys
sys.path.insert(0, "$root/bench/python")
import torch, peak_anatomy
path = sys.argv[1]
torch.cuda.memory._record_memory_history(max_entries=4000000, context="all", stacks="all")
def dump():
    with open(path, "w") as f:
        json.dump(peak_anatomy.summarise(torch.cuda.memory._snapshot()), f, indent=1)
    print("MAX_RESERVED", torch.cuda.max_memory_reserved(), "MAX_ALLOCATED", torch.cuda.max_memory_allocated(), flush=True)
atexit.register(dump)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
