#!/usr/bin/env python3
"""Issue 32 item 3 (issue 31's accuracy target): `oomharness predict`'s shape-only prediction, made on this
machine's CPU (CUDA_VISIBLE_DEVICES=), against the GPU's own figures, for an MLP, a GPT-style transformer and a
CNN at three batch sizes each: predicted peak reserved against torch.cuda.max_memory_reserved() of the same
command run natively on the GPU, and the largest batch under a cap found by `predict --batch-under` (shape-only
runs) against `budget --batch-under` (real runs under the shim's cap). Target: within 10%. Writes
predict.json and predict.md into OUT and prints one RESULT line per comparison (informative: a miss is a
finding, reported as MISS, not a failure of the phase).

    tests/gpu/predict_check.py BUILD_DIR OUT
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PY = sys.executable
FAMILIES = {
    "mlp": ([PY, os.path.join(ROOT, "examples", "python", "train.py"), "--model", "mlp", "--steps", "3",
             "--batch", "{batch}", "--hidden", "4096"], (1024, 4096, 16384), "1GiB"),
    "gpt": ([PY, os.path.join(ROOT, "bench", "python", "llama_train.py"), "--config", "1b", "--layers", "4",
             "--seq", "1024", "--steps", "2", "--batch-size", "{batch}"], (1, 4, 8), "12GiB"),
    "cnn": ([PY, os.path.join(ROOT, "bench", "python", "cnn_train.py"), "--steps", "3", "--batch-size", "{batch}"],
            (32, 128, 512), "4GiB"),
}
MAX_BATCH = {"mlp": 262144, "gpt": 256, "cnn": 8192}
GPU_PEAK = r"""
import atexit, runpy, sys, torch
atexit.register(lambda: print("MAX_RESERVED %d" % torch.cuda.max_memory_reserved(), flush=True))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def fill(command, batch):
    return [a.replace("{batch}", str(batch)) for a in command]


def gpu_peak(command):
    r = subprocess.run([PY, "-c", GPU_PEAK, *command[1:]], capture_output=True, text=True, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("MAX_RESERVED "):
            return int(line.split()[1]), r
    return None, r


def run(args, env=None, timeout=600):
    t0 = time.time()
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    return r, time.time() - t0


def main():
    build, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    binary = os.path.join(build, "runner", "oomharness")
    cpu = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    rows, batches = [], []
    for family, (command, sizes, cap) in FAMILIES.items():
        for batch in sizes:
            measured, gr = gpu_peak(fill(command, batch))
            path = os.path.join(out, "predict-%s-%d.json" % (family, batch))
            pr, seconds = run([binary, "predict", "--out", os.path.join(out, "p-%s-%d" % (family, batch)),
                               "--json", path, "--batch", str(batch), "--", *command], env=cpu)
            predicted = None
            if os.path.exists(path):
                with open(path) as f:
                    predicted = json.load(f)["prediction"]["peak_reserved"]
            error = (predicted - measured) / measured if predicted and measured else None
            ok = error is not None and abs(error) <= 0.10
            rows.append({"family": family, "batch": batch, "gpu_max_reserved": measured, "predicted": predicted,
                         "error": error, "predict_seconds": round(seconds, 1)})
            print("RESULT predict_%s_batch_%d %s gpu=%s predicted=%s error=%s" % (
                family, batch, "PASS" if ok else "MISS", measured, predicted,
                "%.1f%%" % (100 * error) if error is not None else "-"), flush=True)
            if measured is None:
                print(gr.stdout[-2000:], gr.stderr[-2000:])
            if predicted is None:
                print(pr.stdout[-2000:], pr.stderr[-2000:])
        # The largest batch under the cap, both ways.
        bp = os.path.join(out, "batch-%s.json" % family)
        pr, pseconds = run([binary, "predict", "--out", os.path.join(out, "pb-" + family), "--json", bp,
                            "--batch-under", cap, "--max-batch", str(MAX_BATCH[family]), "--", *command], env=cpu)
        predicted = None
        if os.path.exists(bp):
            with open(bp) as f:
                predicted = json.load(f).get("batch_under", {}).get("largest_batch")
        gout = os.path.join(out, "gb-" + family)
        gr, gseconds = run([binary, "budget", "--out", gout, "--batch-under", cap, "--max-batch",
                            str(MAX_BATCH[family]), "--expect", "exit=0", "--", *command])
        measured = None
        try:
            with open(os.path.join(gout, "budget.json")) as f:
                measured = json.load(f).get("batch")
        except (OSError, ValueError):
            print(gr.stdout[-2000:], gr.stderr[-2000:])
        error = (predicted - measured) / measured if predicted and measured else None
        ok = error is not None and abs(error) <= 0.10
        batches.append({"family": family, "cap": cap, "gpu_largest_batch": measured, "predicted": predicted,
                        "error": error, "predict_seconds": round(pseconds, 1), "gpu_seconds": round(gseconds, 1)})
        print("RESULT predict_%s_largest_batch %s gpu=%s predicted=%s" % (family, "PASS" if ok else "MISS",
                                                                          measured, predicted), flush=True)
    import torch
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    doc = {"device": device, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "peaks": rows,
           "largest_batch": batches}
    with open(os.path.join(out, "predict.json"), "w") as f:
        json.dump(doc, f, indent=2)
    gib = lambda n: "%.3f" % (n / 2**30) if n else "-"
    lines = ["# oomharness predict against %s (PyTorch %s, %s)" % (device, torch.__version__, doc["date"]), "",
             "| family | batch | GPU max_memory_reserved (GiB) | predicted (GiB) | error | predict (s) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %s | %s | %s | %s |" % (r["family"], r["batch"], gib(r["gpu_max_reserved"]),
                     gib(r["predicted"]), "%+.1f%%" % (100 * r["error"]) if r["error"] is not None else "-",
                     r["predict_seconds"]))
    lines += ["", "| family | cap | GPU largest batch | predicted | error | predict (s) | GPU budget (s) |",
              "|---|---|---|---|---|---|---|"]
    for b in batches:
        lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (b["family"], b["cap"], b["gpu_largest_batch"],
                     b["predicted"], "%+.1f%%" % (100 * b["error"]) if b["error"] is not None else "-",
                     b["predict_seconds"], b["gpu_seconds"]))
    with open(os.path.join(out, "predict.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
