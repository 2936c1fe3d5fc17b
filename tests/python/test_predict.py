"""`oomharness predict` (issue 31): the shape-only run's figures against the full virtual device's on the project's
own trainers at demo size, what it says under a cap, the largest batch, malformed input, and stand-in values."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("OOMH_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("OOMH_BUILD_DIR") or os.path.join(SOURCE, "build")
BINARY = os.path.join(BUILD, "runner", "oomharness")
TRAIN = os.path.join(SOURCE, "examples", "python", "train.py")
TRAINERS = {
    "mlp": [sys.executable, TRAIN, "--model", "mlp", "--steps", "3", "--batch", "512"],
    "transformer": [sys.executable, TRAIN, "--model", "transformer", "--steps", "3", "--batch", "16"],
}


class Predict(unittest.TestCase):
    def setUp(self):
        if not os.access(BINARY, os.X_OK):
            self.fail("%s is not built" % BINARY)
        self.dir = tempfile.mkdtemp(prefix="oomh-predict-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def oomharness(self, args, command):
        return subprocess.run([BINARY, *args, "--", *command], cwd=self.dir, capture_output=True, text=True,
                              timeout=600)

    def predict(self, name, command, extra=()):
        path = os.path.join(self.dir, name + ".json")
        r = self.oomharness(["predict", "--timeout", "300s", "--out", os.path.join(self.dir, name), "--json", path,
                             *extra], command)
        doc = None
        if os.path.exists(path):
            with open(path) as f:
                doc = json.load(f)
        return r, doc

    def full_peak_reserved(self, name, command):
        """The full virtual device's peak reserved: the shim's peak of the segments the model asked for."""
        out = os.path.join(self.dir, name)
        r = self.oomharness(["exec", "--simulate", "--device", "virtual", "--timeout", "300s", "--out", out,
                             "--expect", "exit=0"], command)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        job = results["suites"][0]["jobs"][0]
        return max(int(v) for v in job["peak"].values())

    def test_the_shape_only_prediction_is_within_5_percent_of_the_full_device(self):
        for model, command in TRAINERS.items():
            with self.subTest(model=model):
                # The CPU's kernel choices, as the full device makes them (Note [Kernels a GPU runs]).
                r, doc = self.predict(model, command, ["--env", "OOMH_SHAPE_KERNELS=cpu"])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                # The shim's peak counts cuBLAS's handles beside the segments; the prediction gives them apart.
                predicted = doc["prediction"]["peak_reserved"] + doc["prediction"]["libraries"]
                full = self.full_peak_reserved(model + "-full", command)
                self.assertGreater(full, 0)
                self.assertLessEqual(abs(predicted - full) / full, 0.05, (model, predicted, full, r.stdout))
                self.assertFalse(doc["values_computed"])
                # The breakdown at the peak adds up, and the parameters are the model's.
                b = doc["prediction"]["breakdown"]
                self.assertEqual(b["parameters"] + b["gradients"] + b["optimizer_state"] + b["workspace"] + b["other"],
                                 b["allocated"])
                self.assertGreater(b["parameters"], 0, b)
                self.assertIn("peak reserved", r.stdout)
                self.assertIn("fits on", r.stdout)
                self.assertEqual([row["card_gib"] for row in doc["fits_on"]], [16, 24, 40, 48, 80, 94, 141])
                need = doc["prediction"]["peak_reserved"] + doc["prediction"]["context"] + doc["prediction"]["libraries"]
                self.assertGreater(doc["prediction"]["context"], 0)
                for row in doc["fits_on"]:
                    self.assertEqual(row["fits"], need <= row["card_gib"] << 30)

    def test_under_a_cap_it_names_the_oom_and_what_halving_reaches(self):
        command = [sys.executable, TRAIN, "--model", "mlp", "--steps", "2", "--batch", "{batch}", "--hidden", "4096"]
        _, free = self.predict("free", command, ["--batch", "8192"])
        need = free["prediction"]["peak_reserved"]
        libraries = free["prediction"]["libraries"]  # cuBLAS's handles, which the cap counts too
        # Well under the peak: emptying the cache (the allocator's retry) cannot make up the difference.
        r, doc = self.predict("capped", command, ["--batch", "8192", "--cap", str(need * 3 // 4 + libraries)])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertFalse(doc["completed"])
        self.assertIn("out of memory at step 1", r.stdout)
        self.assertRegex(doc["oom"]["site"], r"train\.py:\d+")
        self.assertIn(doc["oom"]["phase"], ("forward", "backward", "optimizer", "data"))
        self.assertEqual(doc["halved"]["batch"], 4096)
        self.assertTrue(doc["halved"]["completed"], r.stdout)
        self.assertLess(doc["halved"]["peak_reserved"], need)
        # Room for step 1's forward (760 MiB reserved) and forward's cuBLAS handle, not autograd's: it is refused
        # at the first backward, and the prediction names it (on a GPU a RuntimeError, not an OutOfMemoryError).
        # With the CPU's kernel choices: with a GPU's, the backward's first bias gradient stages its sums in a
        # 132 MiB buffer first (Note [A reduction's scratch on a GPU]), which this cap refuses before the handle.
        r, doc = self.predict("handle", command, ["--batch", "8192", "--cap", "882MiB", "--env",
                                                  "OOMH_SHAPE_KERNELS=cpu"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(doc["oom"].get("library"), "cublas", r.stdout)
        self.assertIn("cublas's handle was refused", r.stdout)

    def test_the_largest_batch_under_a_cap(self):
        # A trainer that catches the OOM and halves its batch (issue 40): every batch completes, by halving,
        # and the answer is still the largest that fits (Note [Fits means no OOM]).
        command = [sys.executable, TRAIN, "--model", "mlp", "--steps", "2", "--batch", "{batch}", "--recovery", "halve"]
        cap = 256 << 20  # 128 MiB of it cuBLAS's two handles
        r, doc = self.predict("under", command, ["--batch-under", str(cap), "--max-batch", "8192"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        largest = doc["batch_under"]["largest_batch"]
        self.assertIsNotNone(largest, r.stdout)
        self.assertLess(largest, 8192, r.stdout)  # the cap decided, not --max-batch
        runs = {x["batch"]: x for x in doc["batch_under"]["runs"]}
        # The bisection's evidence: the answer fitted under the cap; one more ran out, and recovered by halving.
        self.assertTrue(runs[largest]["fits"], runs)
        self.assertFalse(runs[largest + 1]["fits"], runs)
        self.assertTrue(runs[largest + 1]["completed"], runs)
        self.assertLessEqual(runs[largest + 1]["recovered_batch"], (largest + 1) // 2, runs)
        self.assertIn("out of memory at step", runs[largest + 1]["oom"])
        self.assertLessEqual(runs[largest].get("peak_reserved", 0), cap)
        self.assertIn("largest batch under 256.00 MiB: %d (batch %d recovered at batch" % (largest, largest + 1), r.stdout)
        # Note [A search's runs]: each run announced, with the runs that may follow.
        self.assertRegex(r.stdout, r"predict: run 2 \(at most \d+ more after it\), \S+ so far: shape-only run "
                                   r"at batch 1 under 256.00 MiB")

    def test_a_run_that_recovered_does_not_fit(self):
        # Issue 40: `predict --cap` exited 0 with the halved run's peak and "fits on 16 GiB: yes".
        command = [sys.executable, TRAIN, "--model", "mlp", "--steps", "2", "--batch", "{batch}", "--recovery", "halve"]
        r, doc = self.predict("recovered", command, ["--batch", "4096", "--cap", "300MiB"])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertTrue(doc["completed"], r.stdout)
        self.assertFalse(doc["fits"])
        self.assertEqual(doc["fits_on"], [])
        self.assertTrue(doc["oom"]["caught"], doc["oom"])
        self.assertEqual(doc["recovered_batch"], 2048)
        self.assertIn("under the cap the job met an OOM: out of memory at step 1", r.stdout)
        self.assertIn("it recovered at batch 2048 and completed: batch 4096 does not fit under 300.00 MiB", r.stdout)
        self.assertIn("fits on: not judged", r.stdout)
        self.assertNotIn("16 GiB   yes", r.stdout)
        self.assertTrue(doc["halved"]["fits"], doc["halved"])

    def test_a_timeout_is_a_timeout(self):
        # Issue 40: a shape-only run stopped at --timeout was counted as "does not fit".
        command = [sys.executable, TRAIN, "--model", "mlp", "--steps", "2", "--batch", "{batch}"]
        path = os.path.join(self.dir, "timeout.json")
        r = self.oomharness(["predict", "--timeout", "1s", "--out", os.path.join(self.dir, "timeout"), "--json", path,
                             "--batch-under", "256MiB"], command)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("the search stopped when run 1 (shape-only run at batch 1) timed out after",
                      r.stderr)
        self.assertNotIn("does not fit", r.stdout + r.stderr)
        self.assertNotIn("wrote no prediction", r.stderr)
        with open(path) as f:
            self.assertIn("timed out", json.load(f)["cut_short"])

    def test_malformed_input_is_refused(self):
        mlp = TRAINERS["mlp"]
        for extra, command, says in ((["--batch", "4"], mlp, "needs {batch}"),
                                     (["--batch-under", "1GiB"], mlp, "needs {batch}"),
                                     # Note [Flags that mean something for a prediction]: not predict's flags
                                     (["--device", "gpu"], mlp, "--device"),
                                     (["--html", "x.html"], mlp, "--html"),
                                     (["--batch-under", "lots"], mlp + ["{batch}"], "bad --batch-under")):
            with self.subTest(extra=extra):
                r = self.oomharness(["predict", *extra], command)
                self.assertEqual(r.returncode, 4, r.stdout + r.stderr)
                self.assertIn(says, r.stderr)


class StandIns(unittest.TestCase):
    """Note [Stand-in values]: a shape-only run gives the code values a healthy run would compute."""

    def test_stand_ins(self):
        code = r"""
import sys
sys.path.insert(0, %r)
import torch
from oomharness.virtual_device import install_with_budget
dev = install_with_budget(1 << 30, shape_only=True)
x = torch.randn(64, 64, device="cuda")
loss = (x @ x).mean()
print("item", loss.item())
print("isnan", bool(torch.isnan(loss).any()))
print("isfinite", bool(torch.isfinite(loss).all()))
print("notfinite", bool((~torch.isfinite(loss)).any()))
print("int", int((x > 0).sum()))
print("booked", dev.model.allocated > 0, dev.stand_ins)
""" % os.path.join(SOURCE, "python")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        self.assertEqual(lines["item"], "1.0")
        self.assertEqual(lines["isnan"], "False")
        self.assertEqual(lines["isfinite"], "True")
        self.assertEqual(lines["notfinite"], "False")
        self.assertEqual(lines["int"], "0")
        self.assertEqual(lines["booked"], "True 5")


if __name__ == "__main__":
    unittest.main()
