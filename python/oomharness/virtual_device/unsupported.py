"""What the virtual device cannot run, said in one place.

Note [A call the virtual device cannot run]
Some calls cannot run on the CPU in a GPU's stead (CUDA graphs, DataParallel over several devices), and some
reach the CUDA runtime that a machine without a GPU lacks, through a path the device does not answer (torch
then says "Found no NVIDIA driver", "Torch not compiled with CUDA enabled", ...). Either way the job is an
error that names the call and the line of the user's code that made it, never a traceback through the
harness's own frames and never a pass:
- a call the device knows it cannot run raises `Unsupported` (made by unsupported(call, why)), whose message
  names the call and the user's frames at the moment it was made;
- an error of torch's that says the CUDA runtime is missing (CUDA_MISSING) is named once it reaches the end
  of the process uncaught: the excepthook layer below finds the user's innermost frame in its traceback and
  the call made from it;
- the excepthook prints the one sentence (the runner shows a job's last line as the reason nothing was
  tested) instead of a traceback, and the job records it as a `divergence` event of kind `unsupported`, which
  the reports list under the job. The process still dies of the exception (exit status 1), as it would have.
A program that catches such an error itself (a library probing for a feature) goes on as it would without a
GPU: what it does then is its own.
"""

import linecache
import os
import sys

from .. import _sites

WHO = "device.unsupported"
KIND = "unsupported"  # the divergence event's kind
# What torch says when a call reached the CUDA runtime (or NCCL) that this machine lacks.
CUDA_MISSING = ("Found no NVIDIA driver", "Torch not compiled with CUDA enabled", "No CUDA GPUs are available",
                "API call is not supported in the installed CUDA driver", "CUDA driver initialization failed",
                "ProcessGroupNCCL is only supported with GPUs", "Distributed package doesn't have NCCL",
                "Tried to instantiate dummy base class", "cudaGetDeviceCount", "CUDA driver version is insufficient",
                "cudaErrorNoDevice", "no pinned memory allocator is available",
                "without ATen_cuda library")
ADVICE = "run the job without that call, or on a GPU (docs/without-a-gpu.md lists what the virtual device runs)"


class Unsupported(RuntimeError):
    """A call the virtual CUDA device cannot run (Note [A call the virtual device cannot run])."""


def _line(code, lineno):
    text = linecache.getline(code.co_filename, lineno).strip()
    return "%s:%d" % (os.path.basename(code.co_filename), lineno) + (" (`%s`)" % text if text else "")


def sentence(call, why, site):
    """The one sentence: site is the user's frames, innermost first, as (code, line) pairs."""
    where = ("called at %s" % _line(*site[0])) if site else "called from no code of the job's own"
    if len(site) > 1:
        where += ", from %s" % _sites.site_text(site[1:])
    return "oomharness: the virtual CUDA device cannot run %s, %s: %s; %s" % (call, where, why, ADVICE)


def unsupported(call, why):
    """The error to raise for `call` (what the user wrote, in their words), made at the caller's user frames."""
    return Unsupported(sentence(call, why, _sites.user_site(sys._getframe(1))))


def _frames(tb):
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames  # outermost first


def _function(frame):
    code = frame.f_code
    module = frame.f_globals.get("__name__", "")
    return ("%s.%s" % (module, getattr(code, "co_qualname", code.co_name))).lstrip(".")


def cuda_missing(exc):
    text = str(exc)
    return isinstance(exc, Exception) and any(words in text for words in CUDA_MISSING)


def describe(exc):
    """The sentence for an uncaught exception, or None when it is not one the virtual device caused."""
    if isinstance(exc, Unsupported):
        return str(exc)
    if not cuda_missing(exc):
        return None
    frames = _frames(exc.__traceback__)
    user = [i for i, (f, _) in enumerate(frames) if _sites.is_user(f.f_code)]
    site = tuple((frames[i][0].f_code, frames[i][1]) for i in reversed(user))[:_sites.SITE_FRAMES]
    inner = user[-1] if user else -1
    if inner + 1 < len(frames):
        called = _function(frames[inner + 1][0])
        deepest = _function(frames[-1][0])
        call = called if deepest == called or "oomharness" in deepest else "%s (in %s)" % (called, deepest)
    else:
        call = "the call on that line"
    first = str(exc).strip().split("\n")[0]
    return sentence(call, "it reached the CUDA runtime, which is not on this machine (%s: %s)"
                    % (type(exc).__name__, first[:200]), site)


class Errors:
    """The excepthook layer (Note [A call the virtual device cannot run])."""

    def __init__(self, device):
        self.device = device

    def install(self, torch_, patches):
        dev = self.device

        def excepthook(previous):
            def hook(kind, value, tb):
                try:
                    text = describe(value)
                except Exception:  # noqa: BLE001 - the job's own error must still be shown
                    text = None
                if text is None:
                    return previous(kind, value, tb)
                try:
                    dev.ctx.emit("divergence", kind=KIND, detail=text)
                except Exception:  # noqa: BLE001
                    pass
                sys.stderr.write(text + "\n")
            return hook
        patches.replace(WHO, "sys", "excepthook", excepthook)
