#!/usr/bin/env python3
"""Where a small training job's seconds go: `import torch`, CUDA start-up, the first training step (cuBLAS
and kernel loading), and the steady step time, for examples/python/train.py. Prints one JSON line.

    python3 bench/gpu/job_phases.py --model mlp --steps 100 --batch 512 --seed 1
    # eight at once, as `oomharness run --jobs 8` starts them (bench/RESULTS.md, "Packing"):
    for i in 1 2 3 4 5 6 7 8; do OMP_NUM_THREADS=2 python3 bench/gpu/job_phases.py --model mlp --steps 100 --batch 512 --seed $i & done; wait

Arguments are train.py's. T_LAUNCH (seconds since the epoch), when set, is when the launcher started it.
"""
import time

t0 = time.time()
import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

t1 = time.time()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t2 = time.time()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python"))
import train  # noqa: E402

stamps = []
train.report = lambda step, bs, loss: stamps.append(time.time())  # one time stamp per finished step
with contextlib.redirect_stdout(io.StringIO()):
    train.main(sys.argv[1:])
torch.cuda.synchronize()
t3 = time.time()
start = float(os.environ.get("T_LAUNCH", t0))
print(json.dumps({
    "pid": os.getpid(), "threads": torch.get_num_threads(),
    "import_s": round(t1 - t0, 3), "cuda_init_s": round(t2 - t1, 3), "train_s": round(t3 - t2, 3),
    "first_step_s": round(stamps[0] - t2, 3),
    "steady_ms_per_step": round(1000 * (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1), 2),
    "total_s": round(t3 - start, 3)}))
