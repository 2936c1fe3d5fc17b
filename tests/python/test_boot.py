"""The probe's start in a job (python/oomharness/_boot.py): the torch it accepts (Note [Supported PyTorch])
and the sentence a job gets when its Python has no torch on the virtual device."""
import os
import tempfile
import textwrap
import unittest

from harness import Job
from oomharness import _boot


class Versions(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(_boot._torch_version("2.14.1+cu130"), (2, 14))
        self.assertEqual(_boot._torch_version("2.13.0+cpu"), (2, 13))
        self.assertEqual(_boot._torch_version("2.6.0a0+git1234"), (2, 6))
        self.assertEqual(_boot._torch_version("1.13.1"), (1, 13))
        self.assertIsNone(_boot._torch_version(""))
        self.assertIsNone(_boot._torch_version("nightly"))

    def test_this_torch_is_accepted(self):
        import torch
        self.assertIsNone(_boot.unsupported_torch(torch))


class OldTorch(unittest.TestCase):
    """A job whose Python finds a torch older than 2.0 (a stand-in package named torch, version 1.13.1)."""

    def setUp(self):
        self.job = Job()
        self.fake = tempfile.mkdtemp(prefix="oomh-old-torch-")
        os.makedirs(os.path.join(self.fake, "torch"))
        with open(os.path.join(self.fake, "torch", "__init__.py"), "w") as f:
            f.write("__version__ = '1.13.1'\n")

    def tearDown(self):
        self.job.close()

    def test_refused_at_import_with_one_sentence(self):
        code = "import sys\nsys.path.insert(0, %r)\nimport torch\nprint('trained anyway')\n" % self.fake
        for extra in ({}, {"OOMH_DEVICE": "virtual"}):
            p = self.job.run(code, extra_env=extra)
            self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertNotIn("trained anyway", p.stdout)
            self.assertIn("this job imported torch 1.13.1", p.stderr)
            self.assertIn("need torch 2.0 or newer", p.stderr)

    def test_without_the_harness_nothing_changes(self):
        code = "import sys\nsys.path.insert(0, %r)\nimport torch\nprint('ran', torch.__version__)\n" % self.fake
        p = self.job.run(code, probe=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("ran 1.13.1", p.stdout)


class NoTorch(unittest.TestCase):
    """A job on the virtual device whose Python cannot find torch at all."""

    def setUp(self):
        self.job = Job()

    def tearDown(self):
        self.job.close()

    CODE = textwrap.dedent("""
        import sys
        sys.path = [p for p in sys.path if "site-packages" not in p and "dist-packages" not in p]
        import torch
    """)

    def test_virtual_device_says_what_is_missing(self):
        p = self.job.run(self.CODE, probe=False, extra_env={"OOMH_DEVICE": "virtual"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("has no torch, and the job runs on the virtual CUDA device", p.stderr)
        self.assertIn("ModuleNotFoundError", p.stderr)  # the job's own error follows, unchanged

    def test_on_a_gpu_a_missing_torch_is_the_job_s_business(self):
        p = self.job.run(self.CODE, extra_env={})
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("oomharness:", p.stderr)



class Settings(unittest.TestCase):
    def test_every_variable_the_job_reads_is_one_the_shim_knows(self):
        # Note [The job's settings] (_job.py): the shim warns on the job's stderr about an OOMH_ variable its
        # table (injector/engine/options.h) lacks, so every one the Python package reads must be there.
        from oomharness import _abi, _job
        read = {variable for variable, _, _, _ in _job.OPTIONS} | {"OOMH_STACKS"}
        self.assertEqual(read - set(_abi.VARIABLES), set())


if __name__ == "__main__":
    unittest.main()
