"""oomharness's sitecustomize: the runner puts this directory on PYTHONPATH of jobs run with `probe: auto`
or `probe: python`, and sets OOMH_PROBE=1.

Python imports the first sitecustomize on sys.path, so this one hides any other (Debian's, a virtualenv's):
it runs that one afterwards. It must be cheap and can never be allowed to break the job: without
OOMH_PROBE=1 it does nothing but chain; with it, it only arranges for the probe to install itself when the
job imports torch (oomharness/_boot.py, Note [Waiting for torch]). Every failure is swallowed.
"""


def _oomh_start_probe():
    import os
    if os.environ.get("OOMH_PROBE") != "1" and os.environ.get("OOMH_DEVICE") != "virtual":
        return
    try:
        from oomharness import _boot
        _boot.install()
    except Exception:
        pass


def _oomh_chain():
    """Runs the next sitecustomize on sys.path, the one this file hides."""
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    later = []
    seen_here = False
    for entry in sys.path:
        full = os.path.abspath(entry or os.curdir)
        if full == here:
            seen_here = True
            continue
        if seen_here:
            later.append(entry)
    import importlib.machinery
    import importlib.util
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_oomh_chained_sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _oomh_start_probe()
except Exception:
    pass
try:
    _oomh_chain()
except Exception:
    pass
