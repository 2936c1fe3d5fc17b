#!/usr/bin/env python3
"""Issue 43's benchmark: `oomharness predict` on configurations of real public training programs, unchanged
(the corpus of issue 41: tests/public/programs on branch `public`), and the same commands on a GPU without the
harness. One table of configurations (CONFIGS) serves both sides, so that the figures compare.

CPU side (the prediction; wall clock and largest resident set of the whole `predict`, from /usr/bin/time):
    python3 bench/predict_public.py --python PUBLIC_VENV/bin/python3 --programs tests/public/programs \
        [--build build] [--only NAME,...] [--batch-under] [--json OUT]
GPU side (tests/gpu/run_all.sh predict; no harness: each command run as it is, under a wrapper that prints
torch.cuda.max_memory_reserved() at exit; --batch-under bisects the largest batch that completes under the
cap with torch.cuda.set_per_process_memory_fraction):
    python3 bench/predict_public.py --gpu --python PUBLIC_VENV/bin/python3 --programs tests/public/programs \
        [--only NAME,...] [--batch-under] [--json OUT]
Compare the two JSON files with --compare CPU.json GPU.json (the error of each configuration, the median,
and the largest batches).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OURS = os.path.join(ROOT, "tests", "python", "predict_programs")

# name -> (program, arguments with {batch}, the batch predicted, what it is). {work}: a scratch folder;
# {programs}: the corpus's programs; {ours}: tests/python/predict_programs.
CONFIGS = {
    "nanogpt-char": ("{ours}/gpt_memmap.py", "--data {work}/tokens-65.bin --vocab 65 --block 256 --d 384 --layers 6 "
                     "--batch {batch} --steps 3", 64, "nanoGPT's shakespeare-char shape: memmap data, AdamW"),
    "nanogpt-124m": ("{ours}/gpt_memmap.py", "--data {work}/tokens-50304.bin --vocab 50304 --block 1024 --d 768 "
                     "--layers 12 --batch {batch} --steps 2", 4, "GPT-2 124M shape, fp32"),
    "nanogpt-124m-bf16-accum": ("{ours}/gpt_memmap.py", "--data {work}/tokens-50304.bin --vocab 50304 --block 1024 "
                                "--d 768 --layers 12 --batch {batch} --steps 2 --amp --accum 2", 4,
                                "GPT-2 124M, bf16 autocast, gradient accumulation 2"),
    "lstm-default": ("{programs}/lstm_lm.py", "--batch_size {batch} --steps 3", 20,
                     "word-level LSTM LM (nn.LSTM, cuDNN on a GPU)"),
    "lstm-checkpoint": ("{programs}/lstm_lm.py", "--batch_size {batch} --steps 4 --save-every 2 --resume "
                        "{work}/lstm/ck.pt", 64, "the LSTM with torch.save every 2 steps"),
    "resnet18-fakedata": ("{programs}/vision_loop.py", "--arch torchvision:resnet18 -b {batch} --steps 3 "
                          "--image-size 224", 32, "torchvision ResNet-18, FakeData, SGD"),
    "resnet50-fakedata": ("{programs}/vision_loop.py", "--arch torchvision:resnet50 -b {batch} --steps 3 "
                          "--image-size 224", 32, "torchvision ResNet-50, FakeData, SGD"),
    "resnet18-dataparallel": ("{programs}/vision_loop.py", "--arch timm:resnet18 --data-parallel -b {batch} "
                              "--steps 3 --image-size 224", 64, "timm ResNet-18 in nn.DataParallel"),
    "hf-trainer-gpt2": ("{programs}/hf_trainer.py", "--output_dir {work}/hf --per_device_train_batch_size {batch} "
                        "--max_steps 3 --save_steps 100", 16, "Transformers Trainer, GPT-2 config"),
    "peft-lora": ("{programs}/peft_lora.py", "--output_dir {work}/peft --per_device_train_batch_size {batch} "
                  "--max_steps 3 --save_steps 100", 16, "PEFT LoRA fine-tune under Trainer"),
    "lightning-transformer": ("{programs}/lightning_transformer.py", "--default_root_dir {work}/pl --batch_size "
                              "{batch} --max_steps 3 --save_every 100", 64, "Lightning transformer LM"),
    "accelerate-loop": ("{programs}/accelerate_loop.py", "--output_dir {work}/acc --batch_size {batch} "
                        "--max_steps 3 --checkpointing_steps 100", 32, "Accelerate training loop"),
}
BATCH_UNDER = {"nanogpt-char": "4GiB", "lstm-default": "2GiB", "resnet18-fakedata": "8GiB"}  # cap per config
MAX_BATCH = 512

# The GPU side's wrapper: runs the program unchanged and prints its max_memory_reserved() at exit.
WRAPPER = r"""
import atexit, os, runpy, sys
import torch
cap = os.environ.get("PREDICT_PUBLIC_CAP")
if cap:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, int(cap) / total))
atexit.register(lambda: print("MAX_MEMORY_RESERVED %d MAX_MEMORY_ALLOCATED %d" % (
    torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()), flush=True))
anatomy = os.environ.get("PREDICT_PUBLIC_ANATOMY")
if anatomy:  # bench/python/peak_anatomy.py: what the GPU holds at its peak, by who made it
    sys.path.insert(0, os.environ["PREDICT_PUBLIC_BENCH"])
    import json, peak_anatomy
    torch.cuda.memory._record_memory_history(max_entries=4000000, context="all", stacks="all")

    def _anatomy():
        with open(anatomy, "w") as f:
            json.dump(peak_anatomy.summarise(torch.cuda.memory._snapshot()), f, indent=1)
    atexit.register(_anatomy)  # runs before the figures' line above (atexit is last in, first out)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def parse_bytes(text):
    m = re.fullmatch(r"([0-9.]+)\s*(B|KiB|MiB|GiB)", text)
    if not m:
        raise SystemExit("bad size %r" % text)
    return int(float(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)])


def command(args, name, work, batch):
    program, line, default, _ = CONFIGS[name]
    fill = {"ours": OURS, "programs": args.programs, "work": work, "batch": str(batch or default)}
    return [args.python, program.format(**fill)] + line.format(**fill).split()


def timed(cmd, env=None, cwd=None):
    """(completed process, wall seconds, largest resident set in bytes of any process of it)."""
    time_bin = shutil.which("time") or "/usr/bin/time"
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        t0 = time.time()
        r = subprocess.run([time_bin, "-f", "%M", "-o", t.name] + cmd, capture_output=True, text=True, env=env, cwd=cwd)
        wall = time.time() - t0
        lines = [x for x in t.read().split() if x.isdigit()]
    return r, wall, (int(lines[-1]) * 1024 if lines else None)


def predict_one(args, name, work):
    out = os.path.join(work, "predict-" + name)
    doc_path = out + ".json"
    cmd = [os.path.join(args.build, "runner", "oomharness"), "predict", "--timeout", "20m", "--out", out, "--json",
           doc_path]
    if "{batch}" in CONFIGS[name][1]:
        cmd += ["--batch", str(CONFIGS[name][2])]
    if args.batch_under and name in BATCH_UNDER:
        cmd += ["--batch-under", BATCH_UNDER[name], "--max-batch", str(MAX_BATCH)]
    r, wall, rss = timed(cmd + ["--"] + command(args, name, work, "{batch}"), cwd=work)
    row = {"name": name, "exit": r.returncode, "seconds": round(wall, 1), "max_rss": rss}
    if os.path.exists(doc_path):
        with open(doc_path) as f:
            doc = json.load(f)
        p = doc.get("prediction") or {}
        row.update(peak_reserved=p.get("peak_reserved"), peak_allocated=p.get("peak_allocated"),
                   steps=p.get("steps"), trained=doc.get("trained"), divergences=p.get("divergences"))
        if "batch_under" in doc:
            row["largest_batch"] = doc["batch_under"].get("largest_batch")
    if r.returncode != 0:
        row["said"] = (r.stderr.strip().splitlines() or [""])[-1][:300]
    return row


def gpu_run(args, name, work, batch=None, cap=None):
    env = dict(os.environ)
    if cap:
        env["PREDICT_PUBLIC_CAP"] = str(cap)
    elif args.anatomy:  # the uncapped run at the predicted batch only, not the bisection's
        os.makedirs(args.anatomy, exist_ok=True)
        env.update(PREDICT_PUBLIC_ANATOMY=os.path.join(os.path.abspath(args.anatomy), name + ".json"),
                   PREDICT_PUBLIC_BENCH=os.path.join(ROOT, "bench", "python"), TORCH_SYMBOLIZE_MODE="dladdr")
    cmd = command(args, name, work, batch)
    r = subprocess.run([cmd[0], "-c", WRAPPER] + cmd[1:], capture_output=True, text=True, env=env, cwd=work)
    m = re.findall(r"MAX_MEMORY_RESERVED (\d+) MAX_MEMORY_ALLOCATED (\d+)", r.stdout)
    return r.returncode, (tuple(map(int, m[-1])) if m else (None, None)), r.stderr


def gpu_one(args, name, work):
    rc, (reserved, allocated), err = gpu_run(args, name, work)
    # allocated beside reserved tells what the tensors needed from what the caching allocator kept around them
    row = {"name": name, "exit": rc, "max_memory_reserved": reserved, "max_memory_allocated": allocated}
    if rc != 0:
        row["said"] = (err.strip().splitlines() or [""])[-1][:300]
    if args.batch_under and name in BATCH_UNDER:
        cap = parse_bytes(BATCH_UNDER[name])
        # The bisection predict --batch-under does: batch 1 must fit; MAX_BATCH + 1 is taken not to.
        lo, hi = (1, MAX_BATCH + 1) if gpu_run(args, name, work, 1, cap)[0] == 0 else (0, 1)
        while hi - lo > 1:
            mid = lo + (hi - lo) // 2
            if gpu_run(args, name, work, mid, cap)[0] == 0:
                lo = mid
            else:
                hi = mid
        row["largest_batch"] = lo or None
    return row


def compare(cpu_path, gpu_path):
    with open(cpu_path) as f:
        cpu = {r["name"]: r for r in json.load(f)["rows"]}
    with open(gpu_path) as f:
        gpu = {r["name"]: r for r in json.load(f)["rows"]}
    errors, missed = [], []
    print("%-26s %12s %12s %8s %10s" % ("configuration", "GPU MiB", "predicted", "error", "batch g/p"))
    for name in CONFIGS:
        c, g = cpu.get(name, {}), gpu.get(name, {})
        real, pred = g.get("max_memory_reserved"), c.get("peak_reserved")
        if c.get("exit") != 0:  # no prediction (it did not train, or did not complete): a miss, whatever its figure
            pred = None
            missed.append("%s (predict exit %s)" % (name, c.get("exit")))
        err = (pred - real) / real if real and pred else None
        if err is not None:
            errors.append(abs(err))
        print("%-26s %12s %12s %8s %10s" % (name, "%.0f" % (real / 2**20) if real else "-",
                                           "%.0f" % (pred / 2**20) if pred else "-",
                                           "%+.1f%%" % (100 * err) if err is not None else "-",
                                           "%s/%s" % (g.get("largest_batch", "-"), c.get("largest_batch", "-"))))
    if errors:
        print("median |error| %.1f%%, largest %.1f%% over %d configurations" % (
            100 * statistics.median(errors), 100 * max(errors), len(errors)))
    if missed:
        print("no prediction: " + ", ".join(missed))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default=sys.executable, help="the Python with torch and the corpus's libraries")
    ap.add_argument("--programs", default=os.path.join(ROOT, "tests", "public", "programs"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="", help="comma-separated configuration names")
    ap.add_argument("--batch-under", action="store_true", help="also the largest batch under BATCH_UNDER's caps")
    ap.add_argument("--gpu", action="store_true", help="run the commands on the GPU without the harness")
    ap.add_argument("--json", default="")
    ap.add_argument("--anatomy", default="", metavar="DIR",
                    help="GPU side: what the GPU holds at its peak, by who made it (bench/python/peak_anatomy.py), "
                         "one JSON per configuration in DIR")
    ap.add_argument("--compare", nargs=2, metavar=("CPU_JSON", "GPU_JSON"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
        return 0
    args.programs = os.path.abspath(args.programs)
    if os.sep in args.python:  # the commands run in a scratch folder: a relative path would not resolve there
        args.python = os.path.abspath(args.python)
    names = [n for n in args.only.split(",") if n] or list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit("unknown configuration %s; known: %s" % (", ".join(unknown), ", ".join(CONFIGS)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="predict-public-") as work:
        for name in names:
            row = gpu_one(args, name, work) if args.gpu else predict_one(args, name, work)
            rows.append(row)
            print(json.dumps(row), flush=True)
    doc = {"side": "gpu" if args.gpu else "predict", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "python": args.python, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
