"""The probe's OOMs part: every out-of-memory error the code saw, reported once, and whether the code caught it.

Note [Caught or not]
An OOM is reported once, as an `oom` event, when it is seen: by the allocator's OOM observer (PyTorch 2.x,
native caching allocator: it fires only when the allocator gives up, after freeing its cache and retrying,
so absorbed faults are not reported), or when an OOM exception passes a place the probe wraps (backward,
the top-level forward on PyTorch >= 2.1, torch.save/load, the explicit probe.oom()). Whether the code
caught it is learned later: the next completed step, or an explicit probe.oom(caught=True), emits
`oom_caught` with the OOM's step, and so does the next OOM (the code went on after it to meet another); the
process dying of it (sys.excepthook) leaves it uncaught. A process that exits by itself after the OOM
(sys.exit after printing a message) caught it: atexit says so.

Note [Which errors are OOMs] (policies/include/oomharness/policies/oom_kinds.h; oom_kinds.py reads its rows
from the generated _abi.py): PyTorch's OOM types, and errors of other types whose message carries an
allocation failure of CUDA (its out-of-memory codes inside torch.AcceleratorError or a RuntimeError) or of a
CUDA library (cuBLAS, cuDNN, cuFFT, cuSOLVER, cuSPARSE, NCCL), or the CPU allocator's. A RuntimeError that
only mentions "out of memory" (a DataLoader worker, the user's own message) is not one: counting it made a
job that died of an unrelated error look like a graceful exit. A row whose words alone do not say so
(`needs_refusal`: CUDNN_STATUS_NOT_SUPPORTED, also a non-contiguous input's error) is not reported by the
probe, which cannot see the shim's refusals; the runner's output detector takes it as support for a refusal.
"""

import atexit

from .. import oom_kinds
from .._hooks import safely

WHO = "probe.ooms"


def oom_kind(exc):
    """The row of the OOM table that names `exc`, or None (Note [Which errors are OOMs])."""
    kind = oom_kinds.classify(exc)
    return None if kind is None or kind.needs_refusal else kind


def is_oom(exc):
    """True for an out-of-memory error (Note [Which errors are OOMs])."""
    return oom_kind(exc) is not None


class Ooms:
    def __init__(self, ctx):
        self.ctx = ctx
        self.unresolved = []   # steps of OOMs seen whose fate (caught or not) is not known yet
        self.unclaimed = 0     # OOMs the observer reported that no exception was matched to yet
        self.uncaught = False  # the process is dying of an OOM

    def install(self, torch):
        ctx = self.ctx

        def excepthook(previous):
            def hook(kind, value, tb):
                safely(self.excepthook_seen, value)
                previous(kind, value, tb)
            return hook
        ctx.patches.replace(WHO, "sys", "excepthook", excepthook)
        at_exit = lambda: safely(self.at_exit)  # noqa: E731
        atexit.register(at_exit)
        ctx.patches.registered(WHO, "the process's end (atexit)", lambda: atexit.unregister(at_exit))

    def on_cuda_init(self):
        attach = getattr(self.ctx.torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is not None:
            attach(lambda device, size, allocated, free: safely(self.observed, device, size, allocated, free))

    def on_exception(self, exc):
        self.note_exception(exc)

    def on_step_ending(self):
        if self.unresolved:
            self.resolve_all()
        self.unclaimed = 0

    def new_oom(self, message, caught=None, device=None, size=None, exc=None):
        # Note [Caught or not]: a new OOM means the code went on after the earlier ones (a retry loop such as
        # Accelerate's, which meets several OOMs before a step completes): they were caught.
        ctx = self.ctx
        clock = ctx.clock
        self.resolve_all()
        step = clock.current_step()
        fields = {"step": step, "batch_size": clock.batch_size, "phase": clock.phase, "message": message or ""}
        # Note [Which errors are OOMs]: which row of the table, and the type the code could catch it as.
        kind = oom_kind(exc) if exc is not None else oom_kinds.classify_message(message)
        if kind is None and device is not None:
            kind = oom_kinds.kind_named("allocator")
        if kind is not None:
            fields["oom_kind"] = kind.name
        if exc is not None:
            fields["exception"] = type(exc).__name__
        elif device is not None:
            fields["exception"] = "OutOfMemoryError"  # the allocator's observer: it is about to raise one
        if clock.batch_size >= 0:
            fields["batch_from"] = clock.batch_from or "inputs"
        if device is not None:
            fields["device"] = int(device)
        if size is not None:
            fields["size"] = int(size)
        if caught is not None:
            fields["caught"] = bool(caught)
        ctx.hooks.call("oom_fields", fields)
        ctx.emit("oom", **fields)
        ctx.hooks.call("oom_seen", fields)
        if ctx.block is not None:
            ctx.block.count_oom(caught is True)
        if caught is not True:
            self.unresolved.append(step)

    def observed(self, device, size, device_allocated, device_free):
        """The caching allocator's OOM observer: it is about to raise OutOfMemoryError."""
        self.unclaimed += 1
        self.new_oom("CUDA out of memory: tried to allocate %d bytes (device %d, %d bytes free)"
                     % (int(size), int(device), int(device_free)), device=device, size=size)

    def claim(self, exc):
        """True when `exc` is an OOM already reported (by the observer or an earlier boundary)."""
        if exc is not None and getattr(exc, "_oomh_seen", False):
            return True
        if exc is not None:
            try:
                exc._oomh_seen = True
            except Exception:
                pass
        if self.unclaimed > 0:
            self.unclaimed -= 1
            return True
        return False

    def note_exception(self, exc):
        """An exception passed a place the probe wraps; report it if it is an OOM not reported yet."""
        if is_oom(exc) and not self.claim(exc):
            self.new_oom(str(exc), exc=exc)

    def resolve_last(self):
        if self.unresolved:
            step = self.unresolved.pop()
            self.ctx.emit("oom_caught", step=step)
            if self.ctx.block is not None:
                self.ctx.block.count_caught()

    def resolve_all(self):
        while self.unresolved:
            self.resolve_last()

    def explicit(self, caught, exc, message):
        """probe.oom(): the code says it saw an OOM (and whether it caught it)."""
        if is_oom(exc) and self.claim(exc) or exc is None and self.unclaimed > 0 and self.claim(None):
            if caught:
                self.resolve_last()
            return
        self.new_oom(message if message is not None else (str(exc) if exc is not None else "out of memory"),
                     caught=bool(caught), exc=exc if is_oom(exc) else None)

    # ---- the process's end
    def excepthook_seen(self, exc):
        self.ctx.hooks.call("exit", exc)
        if is_oom(exc):
            self.note_exception(exc)
            self.uncaught = True
            self.ctx.emit("probe_exit", reason="uncaught out-of-memory error")

    def at_exit(self):
        self.ctx.hooks.call("exit", None)
        if self.uncaught:
            return
        # The code went on past the OOMs and exits by itself: it caught them.
        self.resolve_all()
        self.ctx.emit("probe_exit", reason="exit")
