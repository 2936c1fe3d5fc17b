"""examples/python/train.py runs on the CPU in every mode and prints `step N bs=B loss=L`."""
import os
import re
import unittest

from harness import EXAMPLES, Job

TRAIN = os.path.join(EXAMPLES, "train.py")
SMALL = ["--device", "cpu", "--steps", "3", "--batch", "4", "--seq", "16", "--d-model", "32", "--layers", "1",
         "--vocab", "64", "--features", "16", "--hidden", "32"]
STEP = re.compile(r"^step (\d+) bs=(\d+) loss=([0-9.e+-]+)$", re.M)


class ExamplesTest(unittest.TestCase):
    def setUp(self):
        self.job = Job()

    def tearDown(self):
        self.job.close()

    def steps(self, args, probe=True):
        r = self.job.run_file(TRAIN, SMALL + args, probe=probe)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [(int(s), int(b), float(l)) for s, b, l in STEP.findall(r.stdout)]

    def test_every_mode_trains(self):
        modes = [["--recovery", "none"], ["--recovery", "halve"], ["--recovery", "retry"],
                 ["--bug", "skip-batch"], ["--bug", "retry-holding"], ["--bug", "leak-outputs"],
                 ["--bug", "keep-after-loop"]]
        for model, args in [("transformer", m) for m in modes] + [("mlp", modes[1]), ("mlp", modes[2])]:
            with self.subTest(model=model, args=args):
                steps = self.steps(["--model", model] + args, probe=False)
                self.assertEqual([s for s, _, _ in steps], [1, 2, 3])
                self.assertEqual({b for _, b, _ in steps}, {4})

    def test_deterministic_and_the_probe_sees_the_printed_losses(self):
        plain = self.steps(["--model", "mlp"], probe=False)
        probed = self.steps(["--model", "mlp"])
        self.assertEqual(plain, probed)
        reported = [(e["fields"]["step"], e["fields"]["batch_size"], e["fields"]["loss"])
                    for e in self.job.read_events() if e["kind"] == "step"]
        self.assertEqual([(s, b) for s, b, _ in reported], [(s, b) for s, b, _ in plain])
        for (_, _, a), (_, _, b) in zip(reported, plain):
            self.assertAlmostEqual(a, b, places=5)

    def test_checkpoint_resume_continues_like_an_uninterrupted_run(self):
        ck = os.path.join(self.job.dir, "ck.pt")
        reference = self.steps(["--steps", "4", "--recovery", "checkpoint", "--checkpoint", ck + ".ref", "--save-every", "2"], probe=False)
        first = self.steps(["--steps", "2", "--recovery", "checkpoint", "--checkpoint", ck, "--save-every", "2"])
        resumed = self.steps(["--steps", "4", "--recovery", "checkpoint", "--checkpoint", ck, "--save-every", "2"])
        self.assertEqual(first + resumed, reference)
        loads = [e["fields"] for e in self.job.read_events() if e["kind"] == "checkpoint_load"]
        self.assertEqual([l["step"] for l in loads], [2])

    def test_broken_resumes_are_visibly_different(self):
        ck = os.path.join(self.job.dir, "ck.pt")
        reference = self.steps(["--steps", "4", "--recovery", "checkpoint", "--checkpoint", ck + ".ref", "--save-every", "2"], probe=False)
        self.steps(["--steps", "2", "--recovery", "checkpoint", "--checkpoint", ck, "--save-every", "2"])
        from_zero = self.steps(["--steps", "4", "--bug", "resume-from-zero", "--checkpoint", ck, "--save-every", "2"])
        self.assertEqual([s for s, _, _ in from_zero], [1, 2, 3, 4])
        ck2 = ck + ".2"
        self.steps(["--steps", "2", "--recovery", "checkpoint", "--checkpoint", ck2, "--save-every", "2"])
        no_opt = self.steps(["--steps", "4", "--bug", "resume-no-optimizer", "--checkpoint", ck2, "--save-every", "2"])
        self.assertEqual([s for s, _, _ in no_opt], [3, 4])
        self.assertNotAlmostEqual(no_opt[1][2], reference[3][2], places=6)


if __name__ == "__main__":
    unittest.main()
