"""`oomharness sweep` and `budget` on the virtual CUDA device (issue 16): the real PyTorch trainers of
examples/python/train.py, their segments asked of the shim through the driver double."""
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
MLP = [sys.executable, TRAIN, "--model", "mlp", "--steps", "6", "--batch", "4096", "--recovery", "retry"]


class SweepOnTheVirtualDevice(unittest.TestCase):
    def setUp(self):
        if not os.access(BINARY, os.X_OK):
            self.fail("%s is not built" % BINARY)
        self.dir = tempfile.mkdtemp(prefix="oomh-sweep-virtual-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def oomharness(self, args, command):
        return subprocess.run([BINARY, *args, "--", *command], cwd=self.dir, capture_output=True, text=True,
                              timeout=600)

    def sweep(self, name, extra):
        out = os.path.join(self.dir, name)
        r = self.oomharness(["sweep", "--simulate", "--step", "3", "--target-step", "6", "--jobs", "2", "--modes",
                             "persistent", "--name", name, "--timeout", "120s", "--out", out], MLP + extra)
        with open(os.path.join(out, "sweep.json")) as f:
            return r, json.load(f)

    def test_a_broken_retry_does_not_survive_the_sites_a_correct_one_does(self):
        good, good_sweep = self.sweep("good", [])
        broken, broken_sweep = self.sweep("holding", ["--bug", "retry-holding"])
        # Every segment request of step 3 was recorded, in the probe's phases.
        self.assertGreater(good_sweep["calls_recorded"], 0, good.stdout)
        self.assertEqual([s["phase"] for s in good_sweep["sites"]], [s["phase"] for s in broken_sweep["sites"]])
        self.assertIn("forward", [s["phase"] for s in good_sweep["sites"]])
        # Each site names the user's line that asked for its segment (Note [The site of a recorded call]):
        # a line of train.py, the trainer's own file, never torch's or oomharness's.
        for site in good_sweep["sites"]:
            self.assertRegex(site["where"] or "", r"^train\.py:\d+$", site)
        self.assertIn("train.py:", good.stdout)
        outcome = lambda sweep, i: sweep["sites"][i]["cases"][0]["outcome"]
        # The correct retry frees what the failed attempt held, which lifts a fault that lasts until memory
        # is freed; the broken one keeps it referenced (retry-holding) and dies of the OOM.
        forward = [s["phase"] for s in good_sweep["sites"]].index("forward")
        self.assertEqual(outcome(good_sweep, forward), "recovered", good.stdout + good.stderr)
        self.assertEqual(outcome(broken_sweep, forward), "crash", broken.stdout + broken.stderr)
        self.assertEqual(good.returncode, 0, good.stdout + good.stderr)
        self.assertEqual(broken.returncode, 1, broken.stdout + broken.stderr)
        fault = broken_sweep["sites"][forward]["cases"][0]["fault"]
        self.assertIn("--fault '%s'" % fault, broken.stdout)
        self.assertLess(broken_sweep["survived"], good_sweep["survived"])

    def test_budget_says_its_figures_are_modelled(self):
        out = os.path.join(self.dir, "budget")
        r = self.oomharness(["budget", "--simulate", "--target-step", "3", "--tolerance", "32MiB", "--name", "mlp",
                             "--timeout", "120s", "--out", out],
                            [sys.executable, TRAIN, "--model", "mlp", "--steps", "3", "--batch", "4096",
                             "--recovery", "none"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "budget.json")) as f:
            budget = json.load(f)
        self.assertTrue(budget["virtual_device"], budget)
        self.assertTrue(budget["modelled"])
        self.assertLessEqual(len(budget["runs"]), budget["run_bound"])
        self.assertLessEqual(budget["need"] - budget["low"], 32 << 20)
        self.assertIn("these figures are modelled", r.stdout)


if __name__ == "__main__":
    unittest.main()
