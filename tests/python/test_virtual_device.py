"""The virtual CUDA device (Note [Which tensors are on the virtual device] in
python/oomharness/virtual_device.py): unchanged CUDA code runs on the CPU, its device memory is
counted byte-exactly in the caching-allocator model, and running out raises PyTorch's own error."""
import json
import subprocess
import tempfile
import sys
import os
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "python")

PRELUDE = """
import sys
sys.path.insert(0, %r)
import torch
from oomharness.caching_allocator import round_size
""" % PY


def run(body, budget=1 << 30, device=True):
    """Runs `body` in a fresh interpreter (the device patches torch for the whole process); its stdout."""
    code = PRELUDE
    if device:
        code += "from oomharness.virtual_device import install_with_budget\ndev = install_with_budget(%d)\n" % budget
    code += textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    if proc.returncode != 0:
        raise AssertionError("the program failed:\n" + proc.stdout + proc.stderr)
    return proc.stdout


MLP = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 16)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
params = sum(round_size(p.numel() * 4) for p in model.parameters())
losses = []
for step in range(3):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(64, 256, generator=g).cuda()
    y = torch.randint(0, 16, (64,), generator=g).cuda()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(round(loss.item(), 6))
del x, y, loss
"""


class VirtualDevice(unittest.TestCase):
    def test_an_mlp_with_adam_is_counted_byte_exactly(self):
        out = run(MLP + """
print(torch.cuda.is_available(), torch.cuda.device_count())
print(params, torch.cuda.memory_allocated())
print(torch.cuda.memory_reserved() > 0, torch.cuda.max_memory_allocated() > 4 * params)
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "True 1")
        params, allocated = map(int, lines[1].split())
        self.assertEqual(allocated, 4 * params, "parameters, gradients and Adam's two moments, each rounded to 512 B")
        self.assertEqual(lines[2], "True True", "the peak includes the activations")

    def test_the_same_losses_as_on_the_cpu(self):
        on_device = run(MLP + "print(losses)\n")
        on_cpu = run(MLP.replace(".cuda()", "") + "print(losses)\n", device=False)
        self.assertEqual(on_device, on_cpu)

    def test_running_out_raises_pytorchs_error_and_recovery_works(self):
        out = run("""
kept = torch.zeros(3 << 20, device="cuda")            # 12 MiB of a 32 MiB device
try:
    torch.ones(8 << 20, device="cuda")                 # 32 MiB more: refused twice (the allocator's retry)
    print("no error")
except torch.cuda.OutOfMemoryError as e:
    print(type(e).__name__, isinstance(e, RuntimeError), "out of memory" in str(e))
    print(str(e)[:len("CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 32.00 MiB of which 20.00 MiB is free")])
half = torch.ones(4 << 20, device="cuda")              # 16 MiB: fits
print(torch.cuda.memory_allocated() == round_size(12 << 20) + round_size(16 << 20))
print(torch.cuda.memory_stats()["num_ooms"])
""", budget=32 << 20)
        lines = out.split("\n")
        self.assertEqual(lines[0], "OutOfMemoryError True True")
        self.assertEqual(lines[1], "CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 32.00 MiB of which 20.00 MiB is free")
        self.assertEqual(lines[2], "True")
        self.assertEqual(lines[3], "1")

    def test_cpu_copies_leave_the_device_and_freed_tensors_return_to_the_cache(self):
        out = run("""
x = torch.randn(1024, 1024).cuda()                     # 4 MiB
a = torch.cuda.memory_allocated()
h = x.cpu()                                            # a host copy: not device memory
h2 = x.to("cpu")
print(a, torch.cuda.memory_allocated() == a)
del x
print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved() == 20 << 20)
torch.cuda.empty_cache()
print(torch.cuda.memory_reserved())
""")
        lines = out.split("\n")
        self.assertEqual(lines[0], "%d True" % (4 << 20))
        self.assertEqual(lines[1], "0 True", "freed, and kept in the 20 MiB segment's cache")
        self.assertEqual(lines[2], "0")

    def test_a_memory_fraction_is_a_cap(self):
        out = run("""
torch.cuda.set_per_process_memory_fraction(0.25)
free, total = torch.cuda.mem_get_info()
print(total, free)
try:
    torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
    print("no error")
except torch.cuda.OutOfMemoryError:
    print("oom")
""", budget=1 << 30)
        lines = out.split("\n")
        self.assertEqual(lines[0], "%d %d" % (256 << 20, 256 << 20))
        self.assertEqual(lines[1], "oom")


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(os.environ.get("OOMH_BUILD_DIR"), "needs the build (OOMH_BUILD_DIR): run through ctest")
class ThroughTheRunner(unittest.TestCase):
    """A real PyTorch trainer, unchanged, run by `oomharness exec --simulate`: Python jobs get the virtual
    device, its segments go through the shim, and the checks judge it as on a GPU."""

    def exec(self, trainer_args, expects, cap="48MiB"):
        build = os.environ["OOMH_BUILD_DIR"]
        train = os.path.join(HERE, "..", "..", "examples", "python", "train.py")
        with tempfile.TemporaryDirectory() as out:
            argv = [os.path.join(build, "runner", "oomharness"), "exec", "--simulate", "--cap", cap, "--out", out]
            for e in expects:
                argv += ["--expect", e]
            argv += ["--", sys.executable, train, "--model", "mlp", "--steps", "4", "--batch", "4096"] + trainer_args
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            with open(os.path.join(out, "results.json")) as f:
                job = json.load(f)["suites"][0]["jobs"][0]
            events = ""
            for root, _, files in os.walk(os.path.join(out, "jobs")):
                for name in files:
                    if name.endswith(".events.jsonl"):
                        with open(os.path.join(root, name)) as f:
                            events += f.read()
            return proc, job, events

    def test_a_halving_trainer_passes_and_a_trainer_without_recovery_fails(self):
        proc, job, events = self.exec(["--recovery", "halve"], ["oom_visible", "batch_halving", "exit=0"])
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertEqual(job["status"], "passed", job.get("message"))
        self.assertIn('"reason":"cap"', events, "the cap refused the model's segments, in the shim")
        proc, job, _ = self.exec(["--recovery", "none"], ["oom_visible", "batch_halving"])
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertEqual(job["status"], "failed")
        self.assertIn("batch_halving", json.dumps(job["verdicts"]))
