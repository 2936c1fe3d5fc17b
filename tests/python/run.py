"""Runs one test module of tests/python: exit 0 passed, 1 failed, 125 skipped (no torch here)."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from torch_env import require_torch  # noqa: E402

require_torch("tests/python " + sys.argv[1])
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
