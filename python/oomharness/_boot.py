"""Installs the probe when the job imports torch, without importing torch itself.

Note [Waiting for torch]
sitecustomize runs before the job's code, when torch is not imported yet, and most Python processes of a job
(tools, DataLoader helpers, the job's own launcher) never import it. So the probe puts a finder at the head
of sys.meta_path that answers nothing itself: when `torch` is imported it asks the other finders for the
real spec and wraps that spec's loader's exec_module (an attribute on the loader instance, removed after
use), so that once torch/__init__.py has run completely the probe installs its hooks. The finder leaves
sys.meta_path when that exec_module runs: a library that only looks torch's spec up (importlib.util.find_spec,
as Transformers and Datasets do before anything imports torch) gets a loader the import never uses, so the
finder stays for the import itself. torch's loader, spec and module are the ones Python would have used anyway.
"""

import sys

# Note [Supported PyTorch]
# The probe and the virtual device are tested in CI under torch 2.13.0 (CPU build) and 2.14.1 (the CUDA
# build, without a GPU), and on the GPU machine under 2.11 (docs/compatibility.md). torch 1.x lacks what
# they read (torch.OutOfMemoryError, the allocator's OOM observers, the 2.x snapshot format) and what 2.x
# trainers use: a job that imports an older torch under the harness stops at the import with one sentence
# that names the torch it found and the one it needs, rather than giving verdicts nobody tested.
MIN_TORCH = (2, 0)


def _torch_version(text):
    parts = []
    for piece in str(text).split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts) if len(parts) == 2 else None


def unsupported_torch(module):
    """One sentence on why this torch cannot run under the harness, or None."""
    version = getattr(module, "__version__", "")
    have = _torch_version(version)
    if have is not None and have >= MIN_TORCH:
        return None
    return ("oomharness: this job imported torch %s (%s); the probe and the virtual CUDA device need torch %d.%d "
            "or newer (pip install -U torch)" % (version or "of unknown version", getattr(module, "__file__", "?"),
                                                 MIN_TORCH[0], MIN_TORCH[1]))


def no_torch_sentence():
    """On the virtual device, the sentence for a job whose `import torch` finds nothing; elsewhere None (a job
    on a GPU may well try torch and fall back to something else)."""
    import os
    if os.environ.get("OOMH_DEVICE") != "virtual":
        return None
    return ("oomharness: this job's Python (%s, %s) has no torch, and the job runs on the virtual CUDA device, "
            "which runs PyTorch code on the CPU: install torch %d.%d or newer into that Python (pip install torch), "
            "or start the job with the Python that has it"
            % (sys.executable, sys.version.split()[0], MIN_TORCH[0], MIN_TORCH[1]))


def _after_torch(module):
    wrong = unsupported_torch(module)
    if wrong:
        # Raised out of the job's `import torch`: the job stops there, with this sentence as its error.
        sys.stderr.write(wrong + "\n")
        raise ImportError(wrong)
    from oomharness import _job
    ctx = _job.current()  # Note [One job context]: made once, handed to the device and the probe
    ctx.torch = module
    _keep_stacks(ctx)
    if ctx.settings.device == "virtual":
        # First, so that the probe's layers go on top of the device's (Note [The patch table]).
        try:
            from oomharness import virtual_device
            virtual_device.install_for_job(ctx)
        except Exception as e:  # the job then fails on its first CUDA request, and the harness says why
            sys.stderr.write("oomharness: the virtual CUDA device could not start: %s: %s\n" % (type(e).__name__, e))
    if not ctx.settings.probe:
        return
    try:
        from oomharness import probe
        probe.install(module)
    except Exception:
        pass


def spec_elsewhere(finder, name, path=None, target=None):
    """The spec the other finders of sys.meta_path give for `name` (None: none does), for a finder that answers
    nothing itself and wraps the real spec's loader (TorchFinder; Note [A module patched once the job imports
    it] in _patches.py). Raises what a finder raised."""
    for other in list(sys.meta_path):
        find = getattr(other, "find_spec", None)
        if other is finder or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            return spec
    return None


def after_exec(spec, after, before=None):
    """`spec`, its loader's exec_module wrapped (an attribute on the loader instance, removed after use) so that
    before() runs first and after(module) once the module has been executed."""
    loader = getattr(spec, "loader", None) if spec is not None else None
    original = getattr(loader, "exec_module", None)
    if original is None:
        return spec

    def exec_module(module):
        if before is not None:
            before()
        try:
            original(module)
        finally:
            try:
                del loader.exec_module
            except Exception:
                pass
        after(module)

    try:
        loader.exec_module = exec_module
    except Exception:
        pass
    return spec


class TorchFinder:
    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = spec_elsewhere(self, name, path, target)
        except Exception:
            return None
        finally:
            self._busy = False
        if spec is None:
            self._leave()
            # `import torch` is about to fail with ModuleNotFoundError: on the virtual device, say first
            # what is missing and what is needed, in the harness's words.
            sentence = no_torch_sentence()
            if sentence:
                try:
                    sys.stderr.write(sentence + "\n")
                except Exception:
                    pass
            return None
        # Note [Waiting for torch]: the finder leaves once torch is really being imported, not when its spec was
        # only looked up (importlib.util.find_spec("torch"), as Transformers and Datasets do at their own import):
        # that spec's loader is not the one the import then uses.
        return after_exec(spec, _after_torch, before=self._leave)

    def _leave(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


_stacks_file = []  # kept open for faulthandler


def _stacks_on_signal():
    """A rank of a distributed job: when the runner finds it hung (Note [Hang detection] in
    runner/src/exec/job_runner_hangs.cpp) it sends SIGUSR1, and faulthandler writes every thread's Python stack
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


def _keep_stacks(ctx):
    """Note [Stacks a job's signal handler cannot take away]
    faulthandler answers SIGUSR1 from C, so a rank blocked in a collective still writes its stacks; but a job
    that sets its own SIGUSR1 handler with signal.signal replaces it. Lightning does (its signal connector puts
    back, at the end of a fit, the handlers signal.getsignal named at its start, which cannot see
    faulthandler's: SIG_DFL; on 2 H200s a Lightning DDP rank that hung after its OOM was then killed by the
    runner's SIGUSR1, signal 10, and no_hang had no stack of either rank). So after each signal.signal for
    SIGUSR1 the stacks are registered again on top, chained to the job's handler when it has one (faulthandler
    writes the stacks, then the job's handler runs as before); a default or ignored SIGUSR1 is not chained, so
    that the runner's signal never kills the rank whose stacks it asked for."""
    if not _stacks_file:
        return
    import faulthandler
    import signal as signal_module

    def make(original):
        def signal(signalnum, handler):
            previous = original(signalnum, handler)
            if signalnum == signal_module.SIGUSR1:
                try:
                    # faulthandler.register does not install its handler again while it counts itself
                    # registered; unregister puts back what it found at the first registration, so the job's
                    # handler is set once more before the stacks go on top of it.
                    faulthandler.unregister(signal_module.SIGUSR1)
                    original(signalnum, handler)
                    faulthandler.register(signal_module.SIGUSR1, file=_stacks_file[0], all_threads=True,
                                          chain=handler not in (signal_module.SIG_DFL, signal_module.SIG_IGN))
                except Exception:
                    pass
            return previous
        return signal
    ctx.patches.replace("job.stacks", "signal", "signal", make)


def install():
    _stacks_on_signal()
    torch = sys.modules.get("torch")
    if torch is not None:
        _after_torch(torch)
        return
    if not any(isinstance(f, TorchFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchFinder())
