#!/usr/bin/env python3
"""Issue 31's target: `oomharness predict` on a Llama-style 7B configuration (bench/python/llama_train.py
--config 7b: 6.74B parameters, AdamW, bf16 autocast, batch 1, sequence 2048, 2 steps) in under 60 s and
under 4 GB of host memory, measured with /usr/bin/time -v (wall clock, and the largest resident set of any
process of the run: the runner, or the job's Python).

    python3 bench/python/predict_7b.py [--build build] [--python PY] [--steps 2] [--json OUT]
    /usr/bin/time -v python3 bench/python/predict_7b.py --in-process   # the device alone, without the runner
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def in_process(args):
    import runpy
    import time
    t0 = time.time()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch  # noqa: F401
    from oomharness.virtual_device import install_with_budget
    dev = install_with_budget(200 << 30, shape_only=True)
    sys.argv = ["llama_train.py", "--config", args.config, "--batch-size", "1", "--seq", "2048", "--steps",
                str(args.steps)]
    runpy.run_path(os.path.join(ROOT, "bench", "python", "llama_train.py"), run_name="__main__")
    p = dev.prediction()
    print("peak allocated %.2f GiB, reserved %.2f GiB, %.1f s" % (p["peak_allocated"] / 2**30,
                                                                  p["peak_reserved"] / 2**30, time.time() - t0))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--config", default="7b")
    ap.add_argument("--json")
    ap.add_argument("--in-process", action="store_true",
                    help="run the trainer in this process under install_with_budget(200 GiB, shape_only=True)")
    args = ap.parse_args()
    if args.in_process:
        return in_process(args)
    out = tempfile.mkdtemp(prefix="oomh-predict-7b-")
    pred = os.path.join(out, "prediction.json")
    command = ["/usr/bin/time", "-v", os.path.join(args.build, "runner", "oomharness"), "predict", "--timeout", "30m",
               "--out", out, "--json", pred, "--", args.python, os.path.join(ROOT, "bench", "python", "llama_train.py"),
               "--config", args.config, "--batch-size", "1", "--seq", "2048", "--steps", str(args.steps)]
    r = subprocess.run(command, capture_output=True, text=True)
    print(r.stdout)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    seconds = (int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))) if wall else None
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", r.stderr))
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    rss_bytes = int(rss.group(1)) * 1024 if rss else None
    with open(pred) as f:
        doc = json.load(f)
    p = doc["prediction"]
    result = {"config": args.config, "steps": args.steps, "wall_s": seconds, "cpu_s": round(cpu, 1), "max_rss_bytes": rss_bytes,
              "peak_allocated": p["peak_allocated"], "peak_reserved": p["peak_reserved"], "context": p["context"],
              "breakdown": {k: p["breakdown"].get(k) for k in ("parameters", "gradients", "optimizer_state", "other",
                                                                 "workspace", "cached_free", "step", "phase")},
              "exit": r.returncode, "cpus": os.cpu_count(), "load": os.getloadavg()}
    print(json.dumps(result, indent=2))
    print("RESULT predict_7b %s wall=%.1fs cpu=%.1fs rss=%.2fGB (targets < 60 s, < 4 GB)" % (
        "PASS" if seconds is not None and seconds < 60 and rss_bytes < 4e9 else "MISS", seconds or -1, cpu,
        (rss_bytes or 0) / 1e9))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
