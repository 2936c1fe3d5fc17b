"""The probe against a real GPU (tests/gpu/run_all.sh's probe phase, tests/python/device_check.sh): a real
out-of-memory error seen by the caching allocator's observer, caught and uncaught, and a memory snapshot.
With --sizes it also prints the example trainers' memory per step and run time (what sized the self-test's
caps; informative, about 80 s). Prints what it found; exits 125 without a GPU.

    python3 tests/python/gpu_probe_check.py [OUT_DIR] [--sizes]"""
import json
import os
import sys
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from harness import EXAMPLES, Job  # noqa: E402

if not torch.cuda.is_available():
    print("no GPU: skipped")
    sys.exit(125)
args = [a for a in sys.argv[1:] if a != "--sizes"]
sizes = "--sizes" in sys.argv[1:]
out = args[0] if args else "/tmp"
failures = 0


def check(what, ok, detail=""):
    global failures
    failures += 0 if ok else 1
    print("%s %s %s" % ("ok  " if ok else "FAIL", what, detail))


CAUGHT = textwrap.dedent("""
    import torch
    model = torch.nn.Linear(64, 64).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(3):
        model(torch.randn(32, 64, device="cuda")).sum().backward(); opt.step(); opt.zero_grad()
        if i == 1:
            try:
                torch.empty(1 << 45, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError as e:
                print("caught")
""")
job = Job()
snap = os.path.join(out, "snapshots")
r = job.run(CAUGHT, extra_env={"OOMH_SNAPSHOT": snap})
events = job.read_events()
kinds = [e["kind"] for e in events]
check("caught OOM: exit 0", r.returncode == 0, r.stderr[-500:])
ooms = [e["fields"] for e in events if e["kind"] == "oom"]
check("caught OOM: one oom event from the observer", len(ooms) == 1 and ooms[0].get("size") == 1 << 45, json.dumps(ooms))
check("caught OOM: oom_caught for step 3 (in progress when it ran out)", {"kind": "oom_caught", "step": 3} in
      [{"kind": e["kind"], **e["fields"]} for e in events if e["kind"] == "oom_caught"], str(kinds))
snaps = [e["fields"]["path"] for e in events if e["kind"] == "snapshot"]
check("snapshot written", len(snaps) == 1 and os.path.getsize(snaps[0]) > 0, str(snaps))
steps = [e["fields"] for e in events if e["kind"] == "step"]
check("steps carry allocated and reserved", all("allocated" in s and "reserved" in s for s in steps) and len(steps) == 3, json.dumps(steps))
check("block counters", job.block()["ooms_seen"] == 1 and job.block()["ooms_caught"] == 1, str(job.block()))
job.close()

job = Job()
r = job.run(CAUGHT.replace("except torch.OutOfMemoryError", "except ValueError"))
events = job.read_events()
ooms = [e["fields"] for e in events if e["kind"] == "oom"]
check("uncaught OOM: exit 1, one oom, not caught", r.returncode == 1 and len(ooms) == 1 and "oom_caught" not in
      [e["kind"] for e in events], str([e["kind"] for e in events]))
check("uncaught OOM: probe_exit says so", events[-1]["kind"] == "probe_exit" and "uncaught" in events[-1]["fields"]["reason"])
job.close()

# Memory per step of the example trainers (to size the self-test's caps), and their run time.
for args in ([] if not sizes else (["--model", "transformer"], ["--model", "mlp"], ["--model", "transformer", "--bug", "leak-outputs"],
             ["--model", "transformer", "--recovery", "halve"], ["--model", "mlp", "--recovery", "retry"])):
    job = Job()
    t0 = time.time()
    r = job.run_file(os.path.join(EXAMPLES, "train.py"), args + ["--steps", "6"])
    took = time.time() - t0
    steps = [e["fields"] for e in job.read_events() if e["kind"] == "step"]
    print("train.py %s: rc=%d %.1fs  allocated MiB %s  reserved MiB %s  peak-ish" % (
        " ".join(args), r.returncode, took, [s.get("allocated", 0) >> 20 for s in steps],
        [s.get("reserved", 0) >> 20 for s in steps]))
    if r.returncode:
        print(r.stderr[-1500:])
    job.close()
code = textwrap.dedent("""
    import sys, torch
    sys.argv = ["train.py", "--steps", "3"] + sys.argv[1:]
    sys.path.insert(0, %r)
    import train
    train.main(sys.argv[1:])
    print("max_allocated MiB", torch.cuda.max_memory_allocated() >> 20, "max_reserved MiB", torch.cuda.max_memory_reserved() >> 20)
""" % EXAMPLES)
for model in (("transformer", "mlp") if sizes else ()):
    job = Job()
    r = job.run(code, probe=False, args=("--model", model))
    print(model, r.stdout.strip().splitlines()[-1] if r.stdout else r.stderr[-800:])
    job.close()
print("gpu_probe_check: %d failures" % failures)
sys.exit(1 if failures else 0)
