"""What held the memory (issue 14, docs/diagnosis.md): the probe's memory_breakdown at each OOM and at the
peak adds up exactly on the virtual device and names the lines that made the largest tensors; the probe says
whether each optimizer step came after the gradients were cleared, and whether an evaluation built a graph.
Each program runs in a fresh interpreter with the virtual device on a byte budget and the probe installed by
hand (no runner), writing its events to a file the test reads."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "python")

PRELUDE = """
import os, sys
sys.path.insert(0, %r)
import torch
from oomharness.virtual_device.allocator import round_size
from oomharness import probe, virtual_device, _breakdown
"""  % PY

DEVICE = """
dev = virtual_device.install_with_budget(%d)
"""


def run(body, budget=256 << 20, device=True):
    """Runs `body` with the probe (and the virtual device); returns (stdout, events)."""
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.jsonl")
        script = os.path.join(tmp, "job.py")
        code = PRELUDE + (DEVICE % budget if device else "") + "probe.install(torch)\n" + textwrap.dedent(body)
        with open(script, "w") as f:
            f.write(code)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OOMH_")}
        env["OOMH_EVENTS"] = events
        env["OOMH_CHECK_EVENTS"] = "1"
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=240, env=env)
        if proc.returncode != 0:
            raise AssertionError("the program failed:\n" + proc.stdout + proc.stderr)
        with open(events) as f:
            evs = [json.loads(line) for line in f]
        return proc.stdout, evs, code.splitlines()


TRAIN = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 16)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
params = sum(round_size(p.numel() * 4) for p in model.parameters())
kept = []
for step in range(6):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(512, 256, generator=g).cuda()
    y = torch.randint(0, 16, (512,), generator=g).cuda()
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    KEEP
"""


def breakdowns(events, at):
    return [e["fields"] for e in events if e["kind"] == "memory_breakdown" and e["fields"]["at"] == at]


def adds_up(b):
    return b["parameters"] + b["gradients"] + b["optimizer_state"] + b["workspace"] + b["other"] == b["allocated"]


class Breakdown(unittest.TestCase):
    def test_at_an_oom_it_adds_up_to_allocated_and_names_the_line(self):
        out, events, lines = run(TRAIN.replace("KEEP", "pass") + """
print(params)
try:
    big = torch.empty(64 << 20, device="cuda")   # 256 MiB: over the budget
except torch.cuda.OutOfMemoryError:
    pass
# 'other' is exactly the blocks of the storages that are not parameters, gradients or optimizer state
b = _breakdown.virtual(dev, [model], [opt])
keys = set()
for t in list(model.parameters()) + [p.grad for p in model.parameters()] + [v for s in opt.state.values() for v in s.values()]:
    keys.add(dev._key(t))
rest = sum(e.block.size for k, e in dev.tracked.items() if k not in keys)
print(b["other"] == rest, b["allocated"] == torch.cuda.memory_allocated(), b["cached_free"] == torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
""")
        params = int(out.split()[0])
        self.assertEqual(out.split()[1:], ["True", "True", "True"])
        ooms = breakdowns(events, "oom")
        self.assertEqual(len(ooms), 1, events)
        b = ooms[0]
        self.assertTrue(adds_up(b), b)
        self.assertTrue(b["exact"])
        self.assertEqual(b["parameters"], params)
        self.assertEqual(b["gradients"], params)
        self.assertEqual(b["optimizer_state"], 2 * params)  # Adam's two moments (its step count stays on the CPU)
        # cuBLAS's workspaces of forward and backward, and cuBLASLt's of forward's biased Linear layers (Note
        # [cuBLASLt's workspace] in virtual_device/libraries.py)
        self.assertEqual(b["workspace"], 2 * virtual_workspace() + (1 << 20))
        self.assertEqual(b["total"], 256 << 20)
        # The largest live tensor that is not a parameter: x (512x256) or the activations of model(x), made
        # at lines of job.py, named with the line's number.
        top = b["top"][0]
        self.assertRegex(top["site"], r"^job\.py:\d+")
        line = int(top["site"].split()[0].split(":")[1])
        self.assertTrue("model(x)" in lines[line - 1] or ".cuda()" in lines[line - 1], (top, lines[line - 1]))
        self.assertEqual(top["dtype"], "float32")

    def test_the_peak_is_taken_within_a_sixteenth_and_adds_up(self):
        out, events, _ = run(TRAIN.replace("KEEP", "pass") + "print(torch.cuda.max_memory_allocated())\n")
        peak = int(out.split()[0])
        peaks = breakdowns(events, "peak")
        self.assertGreaterEqual(len(peaks), 1)
        self.assertTrue(all(adds_up(b) for b in peaks), peaks)
        best = max(b["allocated"] for b in peaks)
        self.assertLessEqual(best, peak)
        self.assertGreaterEqual(best * 17 // 16 + 1, peak, (best, peak))
        # Written at a step's end (or at exit), never per step: fewer than one per step here.
        self.assertLess(len(peaks), 6)

    def test_a_growing_line_shows_in_the_step_end_sites(self):
        _, events, lines = run(TRAIN.replace("KEEP", "kept.append(model(x).sum())  # a graph kept, step after step"))
        ends = breakdowns(events, "step")
        self.assertGreaterEqual(len(ends), 3)
        self.assertTrue(all(adds_up(b) for b in ends), ends)
        first = {s["site"]: s["bytes"] for s in ends[0]["sites"]}
        last = {s["site"]: s["bytes"] for s in ends[-1]["sites"]}
        grew = max(last, key=lambda s: last[s] - first.get(s, 0))
        self.assertIn("kept.append", lines[int(grew.split()[0].split(":")[1]) - 1])

    def test_the_step_end_sites_name_the_list_that_keeps_them(self):
        # Issue 14 (B): the line that made the kept tensors and the line that keeps them (the append).
        _, events, lines = run(TRAIN.replace("KEEP", "kept.append(model(x).sum())  # a graph kept, step after step"))
        last = breakdowns(events, "step")[-1]
        grew = max(last["sites"], key=lambda s: s["bytes"])
        keeper = grew.get("kept_by")
        self.assertIsNotNone(keeper, last["sites"])
        self.assertEqual((keeper["name"], keeper["how"]), ("kept", "appends to"))
        self.assertIn("kept.append(", lines[int(keeper["site"].split(":")[1]) - 1])
        # The same with the outputs themselves kept (no graph: the storages are in the list).
        _, events, lines = run(TRAIN.replace("Linear(1024, 16)", "Linear(1024, 1024)")
                               .replace("y = torch.randint(0, 16", "y = torch.randint(0, 1024")
                               .replace("KEEP", "history[step] = out.detach()").replace("kept = []", "history = {}"))
        keeper = max(breakdowns(events, "step")[-1]["sites"], key=lambda s: s["bytes"]).get("kept_by")
        self.assertEqual((keeper or {}).get("name"), "history")
        self.assertIn("history[step] = out", lines[int(keeper["site"].split(":")[1]) - 1])

    def test_at_an_oom_memory_stats_and_memory_summary_are_kept(self):
        _, events, _ = run(TRAIN.replace("KEEP", "pass") + """
try:
    big = torch.empty(64 << 20, device="cuda")   # 256 MiB: over the budget
except torch.cuda.OutOfMemoryError:
    pass
""")
        b = breakdowns(events, "oom")[0]
        self.assertEqual(b["stats_allocated"], b["allocated"])
        self.assertEqual(b["stats_reserved"], b["reserved"])
        self.assertIn("memory summary", b["summary"])
        self.assertLessEqual(len(b["summary"]), _summary_max() + 64)
        # Peaks carry the figures, not the summary (only OOMs do).
        self.assertTrue(all("summary" not in p and "stats_allocated" in p for p in breakdowns(events, "peak")))

    def test_without_an_oom_or_device_no_breakdown_is_written(self):
        _, events, _ = run(TRAIN.replace(".cuda()", "").replace("KEEP", "pass"), device=False)
        self.assertEqual([e for e in events if e["kind"] == "memory_breakdown"], [])
        self.assertEqual(len([e for e in events if e["kind"] == "step"]), 6)

    def test_a_healthy_loop_writes_no_step_end_breakdown_after_warm_up(self):
        _, events, _ = run(TRAIN.replace("KEEP", "pass"))
        self.assertLessEqual(len(breakdowns(events, "step")), 1)  # step 2: Adam's state appeared


AFTER_LOOP = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(512, 256).cuda()
    out = model(x)
    loss = out.square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
LEAVE
model.eval()
with torch.no_grad():
    model(torch.randn(1024, 256).cuda())
model.train()
"""


class AfterTheLoop(unittest.TestCase):
    """Note [After the loop] in probe/memory.py: a breakdown as an evaluation starts after training steps."""

    def test_the_loops_output_still_bound_is_named_with_its_line(self):
        _, events, lines = run(AFTER_LOOP.replace("LEAVE", "pass"))
        ends = breakdowns(events, "after_loop")
        self.assertEqual(len(ends), 1, events)
        b = ends[0]
        self.assertTrue(adds_up(b), b)
        self.assertEqual(b["completed"], 3)
        self.assertEqual(b["inputs"], 1 << 20)  # the evaluation's own batch, counted apart
        self.assertIn("model(torch.randn(1024", lines[int(b["site"].split(":")[1]) - 1])
        # out (512x1024 float32, 2 MiB) and x (512 KiB) were left bound by the loop
        self.assertGreaterEqual(b["other"] - b["inputs"], (2 << 20) + (512 << 10))
        site = max(b["sites"], key=lambda s: s["bytes"])
        self.assertEqual(site["bytes"], 2 << 20)
        self.assertEqual((site["kept_by"]["name"], site["kept_by"]["how"]), ("out", "assigns"))
        self.assertIn("out = model(x)", lines[int(site["kept_by"]["site"].split(":")[1]) - 1])

    def test_nothing_is_left_when_the_loop_deletes_its_variables(self):
        _, events, _ = run(AFTER_LOOP.replace("LEAVE", "del x, out, loss"))
        b = breakdowns(events, "after_loop")[0]
        self.assertLess(b["other"] - b["inputs"], 64 << 10)

    def test_once_per_evaluation_after_training(self):
        _, events, _ = run(AFTER_LOOP.replace("LEAVE", "pass") + AFTER_LOOP.split("LEAVE")[1])
        self.assertEqual(len(breakdowns(events, "after_loop")), 1)  # no training step between the two


class MemoryHistory(unittest.TestCase):
    """Note [Reading the memory history] in _breakdown.py, on snapshots as PyTorch 1.13 and 2.x write them."""

    def snapshot(self, old):
        def block(size, state, frames):
            b = {"size": size, "state": state}
            if old:
                b["history"] = [{"addr": 0, "real_size": size, "frames": frames}]
            else:
                b["frames"] = frames
                b["requested_size"] = size
            return b
        here = os.path.abspath(__file__)
        user = [{"filename": "/home/u/train.py", "line": 79, "name": "forward"},
                {"filename": "/home/u/train.py", "line": 251, "name": "run"}]
        torchy = [{"filename": os.path.join(os.path.dirname(PY), "python", "oomharness", "probe", "steps.py"), "line": 1,
                   "name": "x"}]
        return {"segments": [{"blocks": [block(16 << 20, "active_allocated", torchy + user),
                                         block(16 << 20, "active_allocated", user),
                                         block(4 << 20, "inactive", user),
                                         block(2 << 20, "active_allocated", [{"filename": here, "line": 5, "name": "t"}])]}]}

    def test_both_formats(self):
        sys.path.insert(0, PY)
        from oomharness import _breakdown
        for old in (True, False):
            got = _breakdown.from_history(self.snapshot(old))
            self.assertEqual(got["history_allocated"], (34 << 20))
            self.assertEqual(got["top"][0], {"bytes": 16 << 20, "shape": "", "dtype": "", "site": "train.py:79 < train.py:251"})
            self.assertEqual(got["sites"][0], {"site": "train.py:79 < train.py:251", "bytes": 32 << 20, "count": 2})
            self.assertEqual(got["sites"][1]["site"], "test_diagnosis.py:5")


def _summary_max():
    sys.path.insert(0, PY)
    from oomharness import _breakdown
    return _breakdown.SUMMARY_MAX


def virtual_workspace():
    sys.path.insert(0, PY)
    from oomharness.virtual_device import cublas_workspace_bytes
    return cublas_workspace_bytes()


CLEARING = """
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = model(torch.randn(4, 8)).sum()
    CLEAR
    loss.backward()
    opt.step()
"""


class ClearedGradients(unittest.TestCase):
    def cleared(self, clear):
        _, events, _ = run(CLEARING.replace("CLEAR", clear), device=False)
        return [e["fields"].get("grads_cleared") for e in events if e["kind"] == "step"]

    def test_each_way_of_clearing_is_seen(self):
        for clear in ("opt.zero_grad()", "opt.zero_grad(set_to_none=True)", "model.zero_grad()",
                      "[setattr(p, 'grad', None) for p in model.parameters()]",
                      "[p.grad.zero_() for p in model.parameters() if p.grad is not None]"):
            with self.subTest(clear=clear):
                self.assertEqual(self.cleared(clear), [None, True, True, True])

    def test_not_clearing_is_seen_with_the_line(self):
        _, events, lines = run(CLEARING.replace("CLEAR", "pass"), device=False)
        steps = [e["fields"] for e in events if e["kind"] == "step"]
        self.assertEqual([s.get("grads_cleared") for s in steps], [None, False, False, False])
        line = int(steps[1]["site"].split(":")[1])
        self.assertEqual(lines[line - 1].strip(), "opt.step()")

    def test_accumulating_over_micro_batches_then_clearing_is_cleared(self):
        body = CLEARING.replace("    CLEAR\n    loss.backward()", "    loss.backward(retain_graph=True)\n    loss.backward()")
        body = body.replace("    opt.step()", "    opt.step()\n    opt.zero_grad()")
        self.assertEqual(self.cleared_body(body), [None, True, True, True])

    def cleared_body(self, body):
        _, events, _ = run(body, device=False)
        return [e["fields"].get("grads_cleared") for e in events if e["kind"] == "step"]


class Evaluation(unittest.TestCase):
    BODY = """
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    EVAL
"""

    def evals(self, how):
        _, events, lines = run(self.BODY.replace("EVAL", how), device=False)
        return [e["fields"] for e in events if e["kind"] == "eval_forward"], lines

    def test_under_no_grad_in_eval_mode(self):
        evs, _ = self.evals("model.eval()\n    with torch.no_grad():\n        model(torch.randn(4, 8)); model(torch.randn(4, 8))\n    model.train()")
        self.assertEqual([(e["grad"], e["training"]) for e in evs], [(False, False)] * 3)  # once per evaluation

    def test_with_grad_enabled_is_seen_with_its_line(self):
        evs, lines = self.evals("model.eval(); model(torch.randn(4, 8)); model.train()")
        self.assertEqual([e["grad"] for e in evs], [True] * 3)
        self.assertIn("model.eval(); model(", lines[int(evs[0]["site"].split(":")[1]) - 1])

    def test_in_train_mode_under_no_grad(self):
        evs, _ = self.evals("with torch.no_grad():\n        model(torch.randn(4, 8))")
        self.assertEqual([(e["grad"], e["training"]) for e in evs], [(False, True)] * 3)


if __name__ == "__main__":
    unittest.main()
