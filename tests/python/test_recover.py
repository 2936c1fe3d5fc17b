"""oomharness.recover: halving that keeps the gradient, retries outside the except block, checkpoints that are
whole or absent, resume that restores every generator."""
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import torch

from harness import Job
from oomharness import recover


class FailsAbove(torch.nn.Module):
    """A model that runs out of memory (a fake one) on batches larger than `limit`, and records whether an
    exception was being handled when it was called (a retry from inside an except block)."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit
        self.lin = torch.nn.Linear(5, 3)
        self.calls = []

    def forward(self, x):
        self.calls.append((x.shape[0], sys.exc_info()[0] is not None))
        if x.shape[0] > self.limit:
            raise recover.oom_error("CUDA out of memory. Tried to allocate %d bytes" % (x.shape[0] << 20))
        return self.lin(x)


def mean_loss(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


class BatchHalvingTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.x, self.y = torch.randn(16, 5), torch.randint(0, 3, (16,))

    def test_redoes_the_failed_batch_as_halves_with_the_same_gradient(self):
        model = FailsAbove(limit=4)
        reference = torch.nn.Linear(5, 3)
        reference.load_state_dict(model.lin.state_dict())
        mean_loss(reference, self.x, self.y).backward()

        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the step leaves the gradient to compare
        halving = recover.BatchHalving(model, opt, mean_loss, micro_batch=16)
        loss = halving.step(self.x, self.y)

        self.assertEqual(halving.micro_batch, 4)
        self.assertEqual(halving.step_count, 1)
        with torch.no_grad():
            self.assertAlmostEqual(loss, mean_loss(reference, self.x, self.y).item(), places=5)
        torch.testing.assert_close(model.lin.weight.grad, reference.weight.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model.lin.bias.grad, reference.bias.grad, rtol=1e-5, atol=1e-6)
        sizes = [n for n, _ in model.calls]
        self.assertEqual(sizes, [16, 8, 4, 4, 4, 4], "16 fails, 8 fails, then four pieces of 4")
        self.assertFalse(any(in_except for _, in_except in model.calls), "a retry ran inside an except block")

    def test_keeps_the_smaller_batch_and_gives_up_at_the_minimum(self):
        model = FailsAbove(limit=4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        halving = recover.BatchHalving(model, opt, mean_loss, micro_batch=16, min_batch=8)
        with self.assertRaises(recover.oom_error_types()):
            halving.step(self.x, self.y)
        self.assertEqual(halving.micro_batch, 8)
        self.assertEqual(halving.step_count, 0)

    def test_reports_to_the_probe(self):
        job = Job()
        try:
            code = textwrap.dedent("""
                import sys, torch
                sys.path.insert(0, %r)
                from test_recover import FailsAbove, mean_loss
                from oomharness import recover
                torch.manual_seed(0)
                model = FailsAbove(limit=4)
                halving = recover.BatchHalving(model, torch.optim.SGD(model.parameters(), lr=0.1), mean_loss, micro_batch=8)
                for i in range(2):
                    halving.step(torch.randn(8, 5), torch.randint(0, 3, (8,)))
            """ % os.path.dirname(os.path.abspath(__file__)))
            r = job.run(code)
            self.assertEqual(r.returncode, 0, r.stderr)
            events = [(e["kind"], e["fields"]) for e in job.read_events() if e["kind"] not in ("probe_start", "probe_exit")]
            kinds = [k for k, _ in events]
            # PyTorch >= 2.1 sees the OOM leave forward first (oom, then oom_caught); older ones only hear it
            # from BatchHalving (oom with caught: true).
            if "oom_caught" in kinds:
                self.assertEqual(kinds, ["oom", "oom_caught", "samples", "step", "samples", "step"])
                self.assertEqual(events[1][1]["step"], events[0][1]["step"])
            else:
                self.assertEqual(kinds, ["oom", "samples", "step", "samples", "step"])
                self.assertEqual(events[0][1]["caught"], True)
            self.assertEqual(events[0][1]["batch_size"], 8)
            self.assertEqual([f["count"] for k, f in events if k == "samples"], [8, 8])
            self.assertEqual([(f["step"], f["batch_size"]) for k, f in events if k == "step"], [(1, 4), (2, 4)])
            self.assertEqual((job.block()["ooms_seen"], job.block()["ooms_caught"]), (1, 1))
        finally:
            job.close()


class RetryTest(unittest.TestCase):
    def test_retries_outside_the_except_block_until_it_works(self):
        calls = []

        def flaky():
            calls.append(sys.exc_info()[0] is not None)
            if len(calls) < 3:
                raise recover.oom_error("CUDA out of memory")
            return "done"
        zeroed = []
        self.assertEqual(recover.retry_after_empty_cache(flaky, max_retries=3, before_retry=lambda: zeroed.append(1)), "done")
        self.assertEqual(calls, [False, False, False])
        self.assertEqual(len(zeroed), 2)

    def test_gives_up_after_max_retries_and_never_retries_other_errors(self):
        calls = []

        def always():
            calls.append(1)
            raise recover.oom_error("CUDA out of memory")
        with self.assertRaises(recover.oom_error_types()):
            recover.retry_after_empty_cache(always, max_retries=2)
        self.assertEqual(len(calls), 3)

        def other():
            calls.append(1)
            raise ValueError("not memory")
        with self.assertRaises(ValueError):
            recover.retry_after_empty_cache(other, max_retries=5)
        self.assertEqual(len(calls), 4)


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="oomh-ckpt-")
        self.path = os.path.join(self.dir, "ck.pt")

    def make(self):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
        return model, torch.optim.Adam(model.parameters(), lr=1e-2)

    def draw(self):
        numpy = sys.modules.get("numpy")
        return (torch.rand(3).tolist(), random.random(), numpy.random.rand(2).tolist() if numpy is not None else None)

    def test_round_trip_restores_model_optimizer_step_data_and_rng(self):
        import numpy  # noqa: F401  (so that its generator is saved and restored too)
        torch.manual_seed(1)
        model, opt = self.make()
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(6, 4)).sum().backward()
            opt.step()
        recover.save_checkpoint(self.path, model, opt, step=3, data={"next_batch": 3})
        expected = self.draw()
        expected_params = [p.detach().clone() for p in model.parameters()]
        expected_opt = opt.state_dict()["state"][0]["exp_avg"].clone()

        torch.manual_seed(99)
        random.seed(99)
        fresh, fresh_opt = self.make()
        state = recover.load_checkpoint(self.path, fresh, fresh_opt)
        self.assertEqual(state["step"], 3)
        self.assertEqual(state["data"], {"next_batch": 3})
        self.assertEqual(self.draw(), expected, "every generator continues where it was")
        for a, b in zip(fresh.parameters(), expected_params):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(fresh_opt.state_dict()["state"][0]["exp_avg"], expected_opt)
        self.assertEqual([f for f in os.listdir(self.dir)], ["ck.pt"], "no temporary file is left behind")

    def test_no_checkpoint_means_start_afresh(self):
        model, opt = self.make()
        self.assertIsNone(recover.load_checkpoint(self.path, model, opt))

    def test_a_failed_save_leaves_the_good_checkpoint(self):
        model, opt = self.make()
        recover.save_checkpoint(self.path, model, opt, step=5)
        with open(self.path, "rb") as f:
            good = f.read()
        real_replace = os.replace

        def crash(*a, **k):
            raise OSError("disk full (simulated)")
        os.replace = crash
        try:
            with self.assertRaises(OSError):
                recover.save_checkpoint(self.path, model, opt, step=6)
        finally:
            os.replace = real_replace
        with open(self.path, "rb") as f:
            self.assertEqual(f.read(), good)
        self.assertEqual(os.listdir(self.dir), ["ck.pt"], "the torn temporary file was removed")
        self.assertEqual(recover.load_checkpoint(self.path, *self.make())["step"], 5)

    def test_killed_mid_save_never_leaves_a_torn_checkpoint(self):
        # A real process saving big checkpoints in a loop, killed with SIGKILL at some moment of a save:
        # what is at the path is always a whole checkpoint.
        code = textwrap.dedent("""
            import sys, torch
            sys.path.insert(0, %r)
            from oomharness import recover
            model = torch.nn.Linear(2048, 2048)  # 16 MiB of weights, 48 MiB with Adam's state
            opt = torch.optim.Adam(model.parameters())
            model(torch.ones(1, 2048)).sum().backward(); opt.step()
            step = 0
            while True:
                step += 1
                recover.save_checkpoint(%r, model, opt, step)
                print(step, flush=True)
        """ % (os.path.join(os.path.dirname(recover.__file__), ".."), self.path))
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            self.assertTrue(first.strip().isdigit(), "the saver did not start")
            time.sleep(0.7)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        model = torch.nn.Linear(2048, 2048)
        state = recover.load_checkpoint(self.path, model, torch.optim.Adam(model.parameters()))
        self.assertGreaterEqual(state["step"], 1)


if __name__ == "__main__":
    unittest.main()
