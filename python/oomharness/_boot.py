"""Installs the probe when the job imports torch, without importing torch itself.

Note [Waiting for torch]
sitecustomize runs before the job's code, when torch is not imported yet, and most Python processes of a job
(tools, DataLoader helpers, the job's own launcher) never import it. So the probe puts a finder at the head
of sys.meta_path that answers nothing itself: when `torch` is imported it asks the other finders for the
real spec and wraps that spec's loader's exec_module (an attribute on the loader instance, removed after
use), so that once torch/__init__.py has run completely the probe installs its hooks. The finder then
leaves sys.meta_path; torch's loader, spec and module are the ones Python would have used anyway.
"""

import sys


def _after_torch(module):
    import os
    if os.environ.get("OOMH_DEVICE") == "virtual":
        # First, so that the probe wraps the virtual device's torch.cuda (its empty_cache, its figures).
        try:
            from oomharness import virtual_device
            virtual_device.install_for_job()
        except Exception as e:  # the job then fails on its first CUDA request, and the harness says why
            sys.stderr.write("oomharness: the virtual CUDA device could not start: %s: %s\n" % (type(e).__name__, e))
    if os.environ.get("OOMH_PROBE") != "1":
        return
    try:
        from oomharness import probe
        probe.install(module)
    except Exception:
        pass


class TorchFinder:
    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
        except Exception:
            return None
        finally:
            self._busy = False
        self._leave()
        loader = getattr(spec, "loader", None) if spec is not None else None
        original = getattr(loader, "exec_module", None)
        if original is None:
            return spec

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module
                except Exception:
                    pass
            _after_torch(module)

        try:
            loader.exec_module = exec_module
        except Exception:
            pass
        return spec

    def _leave(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


_stacks_file = []  # kept open for faulthandler


def _stacks_on_signal():
    """A rank of a distributed job: when the runner finds it hung (Note [Hang detection] in
    runner/src/exec/job_runner.cpp) it sends SIGUSR1, and faulthandler writes every thread's Python stack
    to OOMH_STACKS, even while the main thread is blocked in a collective. Only the job's first Python
    process takes the file (the variable leaves the environment), so that a helper it starts cannot
    truncate it."""
    import os
    path = os.environ.pop("OOMH_STACKS", None)
    if not path:
        return
    try:
        import faulthandler
        import signal
        f = open(path, "a")
        faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)
        _stacks_file.append(f)
    except Exception:
        pass


def install():
    _stacks_on_signal()
    torch = sys.modules.get("torch")
    if torch is not None:
        _after_torch(torch)
        return
    if not any(isinstance(f, TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchFinder())
