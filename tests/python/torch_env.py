"""The torch a Python test runs under: says which it is, and decides what a missing one means.

scripts/test.sh (and so CI) makes one virtual environment per PyTorch that CI tests (scripts/venv.sh,
python/requirements/) and ctest runs every Python test once under each, with TORCH_ENV_UNDER_TEST set to the
environment's name ("torch-2.14.1-cuda"). There a torch that cannot be imported, or one of another version
or build than the name says, FAILS the test: a skip would be a green that tested nothing. Where
TORCH_ENV_UNDER_TEST is not set (a Python given by hand, the GPU machine's own), a missing torch skips (exit 125).
"""
import os
import re
import sys

SKIPPED = 125
NAME = re.compile(r"^torch-(\d+\.\d+(?:\.\d+)?)-(cpu|cuda)$")


def describe(torch):
    """One line: version, build, Python. It asks nothing of the CUDA runtime (no driver is needed)."""
    build = "CUDA build (CUDA %s)" % torch.version.cuda if torch.version.cuda else "CPU build"
    return "torch %s, %s, Python %s at %s" % (torch.__version__, build, sys.version.split()[0], sys.executable)


def mismatch(name, torch):
    """Why this torch is not the one the environment's name promises, or None."""
    m = NAME.match(name)
    if not m:
        return "TORCH_ENV_UNDER_TEST=%r is not of the form torch-VERSION-cpu|cuda" % name
    version, build = m.groups()
    have = torch.__version__.split("+")[0]
    if have != version and not have.startswith(version + "."):
        return "the environment %s has torch %s" % (name, torch.__version__)
    if (build == "cuda") != bool(torch.version.cuda):
        return "the environment %s has a %s build" % (name, "CUDA" if torch.version.cuda else "CPU")
    return None


def require_torch(what, module="torch"):
    """Imports `module` (torch, or a part of it), prints what runs, and returns torch; exits 1 or 125 when it
    cannot be had (see the module's note)."""
    name = os.environ.get("TORCH_ENV_UNDER_TEST", "")
    try:
        __import__(module)
        import torch
    except Exception as e:  # noqa: BLE001
        if name:
            print("%s: FAILED: %s cannot be imported in %s (%s): %s" % (what, module, name, sys.executable, e))
            sys.exit(1)
        print("%s: skipped, %s cannot be imported: %s" % (what, module, e))
        sys.exit(SKIPPED)
    print("%s: %s" % (what, describe(torch)), flush=True)
    if name:
        wrong = mismatch(name, torch)
        if wrong:
            print("%s: FAILED: %s" % (what, wrong))
            sys.exit(1)
    return torch
