"""Runs tests/pytest_plugin with the pytest beside the torch under test (python/requirements/test.txt): exit
0 passed, 1 failed, 125 skipped (no torch here, outside scripts/test.sh: tests/python/torch_env.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_env import require_torch  # noqa: E402

require_torch("tests/pytest_plugin")
try:
    import pytest
except ImportError as e:
    # Every environment scripts/venv.sh makes has it (python/requirements/test.txt): missing there is a failure.
    if not os.environ.get("TORCH_ENV_UNDER_TEST"):
        print("tests/pytest_plugin: skipped, pytest cannot be imported: %s" % e)
        sys.exit(125)
    print("tests/pytest_plugin: FAILED: pytest cannot be imported (%s) in %s: scripts/venv.sh installs it "
          "from python/requirements/test.txt" % (e, sys.executable))
    sys.exit(1)
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-v", "-p", "no:cacheprovider", "--rootdir", here, os.path.join(here, "test_plugin.py")]))
