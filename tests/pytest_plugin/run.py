"""Runs tests/pytest_plugin with Debian's pytest: exit 0 passed, 1 failed, 125 skipped (no torch here)."""
import os
import sys

try:
    import torch  # noqa: F401
except Exception as e:
    print("tests/pytest_plugin: skipped, torch cannot be imported: %s" % e)
    sys.exit(125)
try:
    import pytest
except ImportError as e:
    # Debian (CI's system) has it, and scripts/deps.sh test installs it: missing there is a failure.
    with open("/etc/os-release") as f:
        debian = "ID=debian" in f.read().split()
    if not debian:
        print("tests/pytest_plugin: skipped, pytest cannot be imported (not Debian): %s" % e)
        sys.exit(125)
    print("tests/pytest_plugin: FAILED: pytest cannot be imported (%s): scripts/deps.sh test installs "
          "python3-pytest and python3-pytest-xdist" % e)
    sys.exit(1)
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-v", "-p", "no:cacheprovider", "--rootdir", here, os.path.join(here, "test_plugin.py")]))
