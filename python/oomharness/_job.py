"""The job context: what the runner told this process, and what every in-job part shares.

Note [One job context]
The code that runs inside a job (the virtual device, the probe's parts) needs the same few things: the
settings the runner passed in the environment, the event log, the control block, which step and phase
training is in, which models and optimizers it saw, the patch table that owns every replacement of a torch
function, and the hook bus through which parts hear of each other's news. They are made once per process,
here, and handed to every part: no part looks another up through sys.modules or a module global. The one
global is the process's context itself (current()), which the public API (oomharness.probe.step() and the
rest, called by the user's code) and _boot use to find it.

Note [The job's settings]
Everything the runner tells a job comes through the environment. OPTIONS is the one table of those
variables: its name, what the job does with it, and how its text is read. JobSettings reads them once; a
part asks the settings, never os.environ. Unknown OOMH_ variables are not warned about here: the runner,
the pytest plugin and the user's own scripts set others (OOMH_BINARY, ...), and the job must print nothing
of its own (the probe is a guest).
"""

import atexit
import os
import weakref

from . import _abi
from ._control import ControlBlock, PHASES
from ._events import EventLog
from ._hooks import HookBus
from ._patches import PatchTable


def _text(value):
    return value or None


def _flag(value):
    return value == "1"


def _steps(value):
    out = set()
    for part in (value or "").split(","):
        try:
            out.add(int(part))
        except ValueError:
            pass
    return out


def _saved_steps(value):
    """Note [A resume numbered by what it loaded] in runner/src/exec/launch.h: {content digest: steps completed
    when an earlier attempt saved it}. The runner wrote it; anything else in it is skipped."""
    out = {}
    for part in (value or "").split(",")[:64]:
        digest, _, completed = part.partition(":")
        if len(digest) == 16 and all(c in "0123456789abcdef" for c in digest) and completed.isdigit():
            out[digest] = int(completed)
    return out


def _step_base(value):
    # The runner checked the value (0 or 1); anything else run by hand counts from 1 (Note [Step convention]).
    return 0 if (value or "").strip() == "0" else 1


def _evidence(value):
    """Note [A probe that pays for what is checked] in include/oomharness/evidence.h: the kinds of evidence the
    job's checks need. None, every kind: a job run by hand (no OOMH_EVIDENCE), or one that asks for "all"."""
    if value is None or value.strip() == "all":
        return None
    return frozenset(w.strip() for w in value.split(",") if w.strip())


# Note [The job's settings]: variable, attribute, reader, what it says.
OPTIONS = (
    ("OOMH_EVENTS", "events", _text, "the attempt's event log (JSON lines, appended)"),
    ("OOMH_CONTROL", "control", _text, "the control block: a shared-memory name or the runner's memfd path"),
    ("OOMH_PROBE", "probe", _flag, "1: install the probe when torch is imported"),
    ("OOMH_DEVICE", "device", _text, "virtual: run CUDA code on the virtual CUDA device"),
    ("OOMH_SHAPE_ONLY", "shape_only", _flag, "1: the virtual device's shape-only mode (oomharness predict)"),
    ("OOMH_SHAPE_STEPS", "shape_steps", lambda v: int(v) if (v or "").isdigit() and int(v) > 0 else None,
     "N: a shape-only run stops after N training steps (predict --steps)"),
    ("OOMH_SHAPE_KERNELS", "shape_kernels", lambda v: v or "gpu", "gpu|cpu: which kernels shape-only mode picks"),
    ("OOMH_PHASE_EVENTS", "phase_events", _flag, "1: write a phase event at each phase change"),
    ("OOMH_SNAPSHOT", "snapshot_dir", _text, "record PyTorch's memory history; dump a snapshot at the first OOM"),
    ("OOMH_FLUSH_AT_STEPS", "flush_at", _steps, "steps the faults target: empty the cache as each begins"),
    ("OOMH_STEP_BASE", "step_base", _step_base, "0 or 1: the number of the job's first step"),
    ("OOMH_SAVED_STEPS", "saved_steps", _saved_steps, "digest:completed,...: the earlier attempts' checkpoints"),
    ("OOMH_RECORD_STEP", "record_step", _text, "a sweep's golden run: name the user's line of each segment"),
    ("OOMH_EVIDENCE", "evidence", _evidence, "the evidence the job's checks need (_abi.EVIDENCE; all: every kind)"),
    ("OOMH_CHECK_EVENTS", "check_events", _flag, "1: refuse event fields the C++ schema lacks (the tests)"),
)


def _rank(environ):
    """RANK when WORLD_SIZE says the process is one of several (torchrun, or the runner's `ranks: N`), else None.

    Note [Ranks seen in events]
    A job that starts torchrun itself is one process to the runner, and its ranks share the job's event log
    and control block. So that the runner can still tell them apart, each rank's probe puts its RANK on every
    event it writes; the runner gives a shim event the rank of the probe events of the same pid, and folds
    an attempt whose events name several ranks as if it had run them itself (split_ranks_from_events in
    policies/src/trace_ranks.cpp). For the runner's own ranks the field only repeats what merge_ranks adds."""
    try:
        if int(environ.get("WORLD_SIZE", "1")) > 1:
            rank = int(environ["RANK"])
            return rank if rank >= 0 else None
    except (KeyError, ValueError):
        pass
    return None


class JobSettings:
    """What the runner told this process (Note [The job's settings])."""

    def __init__(self, environ=None):
        environ = os.environ if environ is None else environ
        for variable, attribute, read, _ in OPTIONS:
            setattr(self, attribute, read(environ.get(variable)))
        self.rank = _rank(environ)

    def wants(self, *evidence):
        """Whether the job's checks need any of these kinds of evidence (every kind when the runner did not say)."""
        return self.evidence is None or any(e in self.evidence for e in evidence)


class StepClock:
    """Where training is: its step and phase, and the batch of its last forward. Note [Step convention] in
    probe/steps.py: the one place that converts between steps done and the user's numbering, and that writes
    the block's step and phase."""

    def __init__(self, ctx, base):
        self._ctx = ctx
        self.base = base
        self.completed = 0       # optimizer steps done
        self.started = False     # training has started: the block holds completed + 1
        self.phase = "none"
        self.batch_size = -1     # the batch of the last top-level forward, training or not (probe/batches.py)
        self.batch_from = ""     # where it came from (Note [The batch the code did not report])

    def number(self, k):
        """The number the user's log gives the Kth step."""
        return k - 1 + self.base

    def done_after(self, n):
        """How many steps are done once the step numbered n is."""
        return n - self.base + 1

    def current_step(self):
        block = self._ctx.block
        if block is not None:
            return block.step
        return self.local_step()

    def local_step(self):
        """The step in progress as this process counts it (the block's is shared by the ranks of a job that starts
        torchrun itself: Note [Where a step fault fires] in injector/engine/fault_plan.h)."""
        return self.number(self.completed + 1) if self.started else _abi.UNKNOWN_STEP

    def where(self):
        """(step, phase number) of this process, as the shim's oomh_request takes them."""
        return self.local_step(), PHASES.get(self.phase, 0)

    def set_step_in_progress(self, n):
        if self._ctx.block is not None:
            self._ctx.block.step = n

    def set_phase(self, name):
        if name == self.phase:
            return
        self.phase = name
        ctx = self._ctx
        if ctx.block is not None:
            ctx.block.phase = name
        if ctx.settings.phase_events:
            ctx.emit("phase", phase=name)


class Seen:
    """What the job trains, as the probe saw it: the top-level models of its forwards and its optimizers
    (weakly held). Breakdowns read them to sort tensors into parameters, gradients and optimizer state."""

    def __init__(self):
        self.models = weakref.WeakSet()
        self.optimizers = weakref.WeakSet()


def _shim_active():
    """Whether the shim is active in this process: preloaded (its symbols are in the global scope) and
    intercepting (Note [Processes outside the shim] in runner/src/exec/escapes.h). "absent", "inactive" or
    None (active)."""
    try:
        import ctypes
        active = ctypes.CDLL(None).oomh_shim_active
    except (AttributeError, OSError):
        return "absent"
    active.restype = ctypes.c_int
    active.argtypes = []
    return None if active() == 1 else "inactive"


class JobContext:
    """Note [One job context]."""

    def __init__(self, settings=None):
        self.settings = settings if settings is not None else JobSettings()
        self.block = ControlBlock.open(self.settings.control)
        # Note [Sealed event lines] in include/oomharness/event_seal.h: read once, as the process starts.
        self.log = EventLog(self.settings.events, check=self.settings.check_events,
                            key=self.block.seal_key() if self.block is not None else None)
        self.active = self.log.fd >= 0 or self.block is not None
        self.clock = StepClock(self, self.settings.step_base)
        self.seen = Seen()
        self.hooks = HookBus()
        self.patches = PatchTable()
        self.torch = None       # set when torch is imported (_boot)
        self.device = None      # the virtual device, when this job runs on one
        self.probe = None       # the probe, once installed
        if self.block is not None:  # registered first, so it runs last: after the probe's own exit events
            atexit.register(self.block.flush)
            self.patches.registered("job", "the control block's event count, added at exit (atexit)",
                                    lambda: atexit.unregister(self.block.flush))
        # Note [Processes outside the shim] in runner/src/exec/escapes.h: None until device memory is seen.
        self._outside = None if self.log.key is not None else False
        if self._outside is None:
            atexit.register(self._outside_at_exit)
            self.patches.registered("job", "a process outside the shim that held device memory, said at exit (atexit)",
                                    lambda: atexit.unregister(self._outside_at_exit))

    def emit(self, event_kind, /, **fields):
        """Writes one event (with the rank: Note [Ranks seen in events]) and counts it in the block."""
        if self.settings.rank is not None:
            fields.setdefault("rank", self.settings.rank)
        if self._outside is None and (fields.get("allocated") or fields.get("reserved")):
            self.device_memory_seen(fields.get("allocated"), fields.get("reserved"))
        if self.log.write(event_kind, fields) and self.block is not None:
            self.block.count_event()

    def device_memory_seen(self, allocated, reserved):
        """This process holds device memory: under a runner, a process the shim is not active in says so once,
        with its command (Note [Processes outside the shim] in runner/src/exec/escapes.h)."""
        if self._outside is not None:
            return
        why = _shim_active()
        self._outside = why is not None
        if why is None:
            return
        import sys
        command = " ".join([sys.executable or "python"] + list(getattr(sys, "argv", []) or []))
        self.emit("outside_shim", shim=why, command=command, allocated=allocated, reserved=reserved, via="probe")

    def _outside_at_exit(self):
        """A process that never wrote a memory figure may still have held device memory: asked of torch at exit."""
        if self._outside is not None or self.torch is None:
            return
        try:
            cuda = self.torch.cuda
            if self.device is None and not cuda.is_initialized():
                return
            reserved = int(cuda.max_memory_reserved())
        except Exception:
            return
        if reserved > 0:
            self.device_memory_seen(None, reserved)


_context = None


def current():
    """This process's job context, made from the environment the first time it is asked for."""
    global _context
    if _context is None:
        _context = JobContext()
    return _context


__all__ = ["JobContext", "JobSettings", "OPTIONS", "PHASES", "current"]
