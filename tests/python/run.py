"""Runs one test module of tests/python: exit 0 passed, 1 failed, 125 skipped (no torch here)."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
try:
    import torch  # noqa: F401
except Exception as e:
    print("tests/python: skipped, torch cannot be imported: %s" % e)
    sys.exit(125)
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
suite = unittest.defaultTestLoader.loadTestsFromName(sys.argv[1])
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
