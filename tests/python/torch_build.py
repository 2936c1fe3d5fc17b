"""Says which torch this environment holds (version, CPU or CUDA build, Python) and checks it is the one the
environment's name promises (tests/python/torch_env.py): the first line CI prints for each PyTorch of the
matrix. Exit 0 passed, 1 failed, 125 skipped (no torch, outside the matrix)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import require_torch  # noqa: E402

torch = require_torch("torch under test")
# The virtual device must work on a CUDA build without a GPU exactly as on a CPU build: say which this is.
print("CUDA build without a GPU" if torch.version.cuda else "CPU build", "(TORCH_ENV_UNDER_TEST=%s)" % os.environ.get("TORCH_ENV_UNDER_TEST", ""))
