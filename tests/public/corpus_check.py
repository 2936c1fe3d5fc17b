"""The corpus of public training programs (tests/public/corpus.yaml, issue 41) on the virtual CUDA device:
runs `oomharness run corpus.yaml --simulate` (the job builder `exec --simulate` uses) and `oomharness predict`
on some of them, and compares every scenario's verdicts with the expected ones, which corpus.yaml states (a
check passes unless it carries must_fail). Exit 0 passed, 1 failed, 125 skipped (the environment lacks the
programs).

    corpus_check.py OUT [--all | -k EXPR]        # run (CI_SCENARIOS by default) and judge
    corpus_check.py --results RESULTS.json [--gpu] # judge a run made elsewhere (--gpu: against the expected
                                                  # verdicts alone: KNOWN is the virtual device's)
    corpus_check.py --importable                  # the -k expression of the jobs this Python can run (the GPU
                                                  # machine's python3 lacks some programs: tests/gpu/run_all.sh public)

KNOWN lists the scenarios where the harness does not give the expected verdict today: the verdict it gives,
the class of the difference ((a) the virtual device cannot run the program, (b) memory the virtual device does
not book, (c) a verdict that misreads the code, (d) the program is broken) and why. Such a scenario must give
today's verdict; one that gives the expected verdict instead fails until it is taken off KNOWN (the fix landed).
"""
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "realworld"))
from corpus_check import table  # noqa: E402  (tests/realworld's: one table of differences for both corpora)

# The scenarios CI runs (python.public_corpus), chosen for what each costs on the 2-core machine (measured
# times in docs/compatibility.md, "Public training programs"): one of each kind of recovery, each program
# that runs at all once, the known failures of every class.
CI_SCENARIOS = ["hf-trainer-cap", "hf-trainer-datasets-first", "hf-trainer-resume", "peft-lora-resume",
                "accelerate-resume", "lightning-batch-finder", "lightning-resume", "mmengine-resume",
                "timm-dataparallel", "torchvision-cnn-step-fault", "torchvision-cnn-resume", "lstm-resume",
                "deepspeed-zero2-resume", "timm-dataparallel-resume", "trl-sft-resume", "litgpt-resume",
                "accelerate-ddp-resume", "torchtitan-debug-resume"]

# job -> (today's job status, {check: today's verdict}, class, why)
CUBLAS_HELPER = ("the cap's first OOM comes before autograd's cuBLAS handle exists; after the helper's retry at "
                 "0.9x the 64 MiB handle is refused in cublasCreate (CUBLAS_STATUS_ALLOC_FAILED, a RuntimeError), "
                 "which accelerate/utils/memory.py should_reduce_batch_size does not take for an OOM, so the "
                 "helper re-raises: the program's own limit, as the H200 showed for Accelerate's helper in "
                 "issue 32 and for this program's Accelerate loop (accelerate-find-batch-size: the same "
                 "CUBLAS_STATUS_ALLOC_FAILED on an H200, tests/gpu/run_all.sh public, 2026-11-28)")
KNOWN = {
    "hf-trainer-auto-batch": ("failed", {"exit": "fail", "oom_visible": "pass", "batch_halving": "fail",
                                         "completes": "inconclusive"}, "d", CUBLAS_HELPER),
    "accelerate-find-batch-size": ("failed", {"exit": "fail", "oom_visible": "pass", "batch_halving": "fail",
                                              "completes": "inconclusive"}, "d", CUBLAS_HELPER),
    "accelerate-resume": ("inconclusive", {"exit": "pass", "checkpoint_resume": "inconclusive", "completes": "pass"},
                          "d", "the steps are counted right since optimizer.bin's 4 AdamW steps are no longer undone by "
                          "random_states_0.pkl's `step` 0 (Accelerate's accumulation position: Note [A step is what "
                          "the optimizer did]); the data cannot be checked: the loader is DataLoader(shuffle=True) "
                          "without Accelerate's seedable sampler, and the RNG state load_state restores is step 4's, "
                          "not the epoch start's, so skip_first_batches(4) skips into another order (attempt 2's "
                          "first batch is none attempt 1 trained on): the program's resume does not go on where it "
                          "stopped, and the harness says it cannot tell"),
    "lightning-resume": ("failed", {"exit": "pass", "checkpoint_resume": "fail", "completes": "pass"}, "d",
                         "the harness is right and the written expectation was not: fit(ckpt_path='last') from a "
                         "mid-epoch checkpoint restarts a plain DataLoader at the epoch's first batch (Lightning "
                         "warns: training_epoch_loop.py 'resuming from a checkpoint that ended before the epoch "
                         "ended'), so step 5 trains on step 1's batch"),
    "yolo-oom-halving": ("failed", {"exit": "fail", "oom_visible": "pass", "batch_halving": "fail"}, "b",
                         "the first epoch's OOM at batch 32 is halved to 16 (trainer.py 'Reducing to batch=16'), "
                         "epoch 1 trains, then epoch 2 runs out of memory at batch 16 and BaseTrainer re-raises "
                         "(only the first epoch reduces). On an H200 under the same 180 MiB cap (tests/gpu/run_all.sh "
                         "public with PUBLIC_ONLY=yolo-oom-halving, ultralytics carried as wheels, 2026-11-29) "
                         "batch 32 trains both epochs and exits 0: the cap refused one cudaMalloc, which the caching "
                         "allocator absorbed by freeing its cache and retrying, so the code never saw an OOM (the "
                         "GPU's own verdicts: oom_visible fail, batch_halving inconclusive). So the virtual device "
                         "holds more than the GPU for this program (b), and the scenario's cap is too loose to make "
                         "a GPU run out: the expected verdicts, written for the virtual device's first run, need a "
                         "cap measured on the GPU"),
    "yolo-resume": ("inconclusive", {"exit": "pass", "checkpoint_resume": "inconclusive", "completes": "pass"}, "c",
                    "the resume is right and judged right up to the data: the model holds the saved state (last.pt's "
                    "EMA model, saved as deepcopy(model).half() and made float32 again: Note [A checkpoint is its "
                    "content] compares values, not their width) and the optimizer's state is restored (read at the "
                    "first step's model_state, not at the Detect head's stride forward before it); the resumed "
                    "epoch's batches are mosaics drawn afresh, which no earlier attempt trained on, so whether it "
                    "went on after the checkpoint cannot be told"),
    "mmengine-resume": ("failed", {"exit": "fail", "checkpoint_resume": "fail", "completes": "fail"}, "d",
                        "mmengine 0.10.7 resumes with torch.load's default weights_only=True (PyTorch >= 2.6), "
                        "which refuses its own mmengine.logging.history_buffer.HistoryBuffer in the checkpoint: "
                        "Runner(resume=True) is broken beside torch 2.14 (UnpicklingError)"),
}

# predict scenarios: name -> (argv after `predict`, what is expected)
PREDICT = {}


def expected_from_suite():
    import yaml
    with open(os.path.join(HERE, "corpus.yaml")) as f:
        suite = yaml.safe_load(f)
    out = {}
    for job in suite["jobs"]:
        checks = {}
        for e in job.get("expect", []):
            if isinstance(e, str):
                checks[e] = "pass"
                continue
            must_fail = e.get("must_fail", False)
            name = [k for k in e if k != "must_fail"][0]
            checks[name] = "fail" if must_fail else "pass"
        out[job["name"]] = ("passed", checks)
    return out


# What each driver in programs/ imports (beside torch), read from their imports: --importable selects the jobs
# whose libraries all import here.
PROGRAM_LIBS = {"hf_trainer.py": ("datasets", "transformers"), "peft_lora.py": ("datasets", "peft", "transformers"),
                "trl_sft.py": ("datasets", "transformers", "trl"), "accelerate_loop.py": ("accelerate", "transformers"),
                "lightning_transformer.py": ("lightning",), "litgpt_pretrain.py": ("litgpt",),
                "ultralytics_yolo.py": ("ultralytics",), "mmengine_runner.py": ("mmengine", "torchvision"),
                "vision_loop.py": ("torchvision", "timm"), "lstm_lm.py": (), "deepspeed_zero.py": ("deepspeed",),
                "torchtitan_debug.py": ("torchtitan",)}


def importable_selection():
    """The -k expression naming every job whose program's libraries import in this Python; None when none does."""
    import yaml
    with open(os.path.join(HERE, "corpus.yaml")) as f:
        suite = yaml.safe_load(f)
    ok = {}
    names = []
    for job in suite["jobs"]:
        program = next((w.rsplit("/", 1)[-1] for w in job["run"].split() if w.endswith(".py")), "")
        libs = PROGRAM_LIBS[program]  # a KeyError here: a new program needs its row
        for lib in libs:
            if lib not in ok:
                try:
                    with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout at import
                        __import__(lib)
                    ok[lib] = True
                except Exception:  # noqa: BLE001 - any failure to import means the program cannot run here
                    ok[lib] = False
        if all(ok[lib] for lib in libs):
            names.append(job["name"])
    return " or ".join(names) if names else None


def run_corpus(out, selection):
    build = os.environ["OOMH_BUILD_DIR"]
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    argv = [os.path.join(build, "runner", "oomharness"), "run", os.path.join(HERE, "corpus.yaml"), "--simulate",
            "-j", "2", "--out", out]
    if selection:
        argv += ["-k", selection]
    print(" ".join(argv), flush=True)
    t0 = time.time()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3000)
    print(proc.stdout[-12000:])
    print("corpus: %.0f s" % (time.time() - t0), flush=True)
    return os.path.join(out, "results.json")


def compare(results_path, expected, known):
    with open(results_path) as f:
        results = json.load(f)
    jobs = {j["name"].split("::")[-1]: j for s in results["suites"] for j in s["jobs"]}
    rows, notes = [], []
    for name in sorted(jobs):
        status, checks = expected[name]
        j = jobs[name]
        got = {v["policy"]: v["status"] for v in j["verdicts"]}
        gap = known.get(name)
        want_status, want = (gap[0], gap[1]) if gap else (status, checks)
        diffs = [(c, v, got.get(c, "absent")) for c, v in want.items() if got.get(c) != v]
        if j["status"] != want_status:
            diffs.insert(0, ("(job)", want_status, j["status"]))
        matches_expected = j["status"] == status and all(got.get(c) == v for c, v in checks.items())
        if gap and not diffs:
            notes.append("known (%s): %s: expected %s, today %s %s: %s" % (gap[2], name, checks, j["status"], got, gap[3]))
        for c, v, g in diffs:
            note = "the gap closed: take it off KNOWN" if gap and matches_expected else j.get("message", "")[:200]
            rows.append((name, c, v + (" (known, %s)" % gap[2] if gap else ""), g, note))
    return rows, notes, jobs


def main():
    args = sys.argv[1:]
    results_path = None
    selection = " or ".join(CI_SCENARIOS) if CI_SCENARIOS else None
    if "--results" in args:
        i = args.index("--results")
        results_path = args[i + 1]
        del args[i:i + 2]
    gpu = "--gpu" in args
    if gpu:
        args.remove("--gpu")
    if "--importable" in args:
        sel = importable_selection()
        print(sel or "")
        return 0 if sel else 1
    if "--all" in args:
        args.remove("--all")
        selection = None
    if "-k" in args:
        i = args.index("-k")
        selection = args[i + 1]
        del args[i:i + 2]
    if results_path is None:
        from torch_env import require_torch  # tests/python/torch_env.py
        require_torch("the corpus of public training programs")
        for lib in ("transformers", "trl", "peft", "accelerate", "lightning", "litgpt", "ultralytics", "mmengine",
                    "timm", "torchvision", "yaml"):
            try:
                __import__(lib)
            except Exception as e:  # noqa: BLE001
                print("skipped: %s cannot be imported in %s: %s (scripts/venv.sh public-torch-2.14.1-cuda)"
                      % (lib, sys.executable, e))
                return 125
        out = args[0] if args else tempfile.mkdtemp(prefix="oomh-public-")
        results_path = run_corpus(out, selection)
    expected = expected_from_suite()
    rows, notes, jobs = compare(results_path, expected, {} if gpu else KNOWN)
    for n in notes:
        print(n)
    if rows:
        print("\n%d difference(s) from the expected verdicts:\n%s" % (len(rows), table(rows)))
        return 1
    print("public corpus: %d scenarios, every verdict as expected or as known (%d known)" % (len(jobs), len(notes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
