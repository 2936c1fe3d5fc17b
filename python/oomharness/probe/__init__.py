"""The Python probe: tells the harness what a PyTorch training job is doing, with no change to its code.

The runner puts python/ on PYTHONPATH and sets OOMH_PROBE=1; sitecustomize.py then waits for the job to
import torch and calls install() (docs/probe.md). The probe is made of parts (PARTS), each a small object that
owns its state, installs what it needs through the patch table (Note [The patch table] in _patches.py) and
subscribes to the few hooks it needs on the job's hook bus (Note [The hook bus] in _hooks.py):

  forwards     finds the top-level forwards of the job's models among all module calls (forwards.py)
  batches      the batch size of each forward, and what each step trained on (batches.py, evidence.py)
  losses       each step's loss (losses.py)
  checkpoints  torch.save and torch.load, by content, and the model's state after a load (checkpoints.py)
  steps        counts steps, writes step and phase into the control block, writes the step event (steps.py)
  faults       on a GPU, where a fault aimed at a step is asked, and the OOM it raises (faults.py)
  evaluation   the first forward of each evaluation, with or without a graph (evaluation.py)
  grads        whether the gradients were cleared before each optimizer step (grads.py)
  memory       memory at each step, empty_cache, what held the memory, the memory history (memory.py)
  ooms         every OOM the code saw, once, and whether it caught it (ooms.py)

Note [The probe is a guest]
Everything here is a guest in someone else's training job: it never changes what the job computes or
prints, never initialises CUDA itself (a fork after that breaks DataLoader workers), never allocates device
memory (an injected fault could land on it), and swallows its own failures. Outside the harness (no
OOMH_EVENTS, no OOMH_CONTROL) every call is a no-op.

The explicit API, for what hooks cannot see:

    from oomharness import probe
    probe.step(n, batch_size=None, loss=None)   # step n is done (switches automatic step counting off)
    probe.samples(k)                            # k samples consumed (switches automatic counting off)
    probe.phase("eval")
    probe.oom(caught=True)                      # the code caught an out-of-memory error
    probe.checkpoint_saved(path, step); probe.checkpoint_loaded(path, step); probe.memory()
"""

import contextlib
import os

from .. import _job
from .._control import PHASES
from .._hooks import safely
from .batches import Batches
from .checkpoints import Checkpoints
from .evaluation import Evaluation
from .faults import Faults
from .forwards import Forwards
from .grads import Grads
from .losses import Losses
from .memory import Memory
from .ooms import Ooms, is_oom, oom_kind
from .steps import Steps

# The parts, in the order they hear each hook (which is the order of a step event's fields), and the kinds
# of evidence (_abi.EVIDENCE) for which each is installed: Note [A probe that pays for what is checked] in
# include/oomharness/evidence.h. None: every job gets it (its steps, its OOMs, what held the memory at each).
PARTS = (
    ("forwards", Forwards, None),  # lean where no part needs every module's forward (Note [Which forward is a model's])
    ("batches", Batches, ("batches", "data")),
    ("losses", Losses, ("losses",)),
    ("checkpoints", Checkpoints, ("checkpoints",)),
    ("steps", Steps, None),
    ("faults", Faults, None),      # after steps: a step fault is asked once the step and phase are written
    ("evaluation", Evaluation, ("evaluation",)),
    ("grads", Grads, ("grads", "data")),  # data: when the gradients are cleared (Note [Micro-batches an OOM leaves])
    ("memory", Memory, None),
    ("ooms", Ooms, None),
)


class Probe:
    """The probe of one process: its parts, made at once (the explicit API works before torch is imported, and
    with every part, needed by a check or not); those the job's checks need hear the hooks, and install() puts
    their torch hooks in."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.installed = False
        self.parts = {}
        self.needed = []
        for name, make, gives in PARTS:
            part = make(ctx)
            self.parts[name] = part
            if gives is None or ctx.settings.wants(*gives):
                self.needed.append(part)
                ctx.hooks.register(part)
        self.steps, self.batches, self.ooms = self.parts["steps"], self.parts["batches"], self.parts["ooms"]
        self.checkpoints, self.memory = self.parts["checkpoints"], self.parts["memory"]

    @property
    def active(self):
        return self.ctx.active

    def install(self, torch):
        ctx = self.ctx
        if not ctx.active or self.installed:
            return
        self.installed = True
        ctx.torch = torch
        for part in self.needed:
            install = getattr(part, "install", None)
            if install is not None:
                safely(install, torch)
        # Work at CUDA's initialisation: never initialises it itself.
        safely(torch.cuda._lazy_call, lambda: ctx.hooks.call("cuda_init"))
        allocator = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or "native"
        safely(ctx.emit, "probe_start", framework="torch", version=str(getattr(torch, "__version__", "")),
               allocator=allocator)

    def uninstall(self):
        self.ctx.patches.uninstall("probe")
        for part in self.needed:
            self.ctx.hooks.unregister(part)
        self.installed = False


def get():
    """This process's probe (made on first use, on the process's job context)."""
    ctx = _job.current()
    if ctx.probe is None:
        ctx.probe = Probe(ctx)
    return ctx.probe


def install(torch):
    """Installs the probe's hooks into `torch` (just imported). Does nothing outside the harness or when done."""
    get().install(torch)


# ---- the explicit API ------------------------------------------------------------------------------------

def active():
    """True when running under the harness."""
    return get().active


def step(n, batch_size=None, loss=None):
    """Step `n` is done, in the code's own numbering (from the job's step_base: 1 unless it says 0). From the
    first call on, the optimizer hooks no longer count steps."""
    p = get()
    if p.active:
        steps = p.steps
        if not steps.manual and int(n) == 0 and steps.clock.base == 1:
            # Note [Step convention]: the code's own counter shows its numbering; the faults were placed by
            # the job's before it started, so say so rather than guess.
            safely(p.ctx.emit, "warning", message="probe.step(0): the code counts steps from 0, the job from 1 "
                   "(step_base: 0 makes fault steps and reports use the code's numbering)")
        steps.manual = True
        safely(steps.finish_step, int(n), batch_size, loss)


def numbered(k):
    """The number the job's numbering gives its Kth step: k, or k - 1 with step_base 0 (Note [Step
    convention]). For code that counts steps done and reports them with step()."""
    return get().ctx.clock.number(int(k))


def manual_steps():
    """The code will report its steps with step(); call before the first optimizer step."""
    get().steps.manual = True


def samples(k):
    """`k` samples were consumed since the last report. From the first call on, forwards are not counted."""
    p = get()
    if p.active:
        safely(p.batches.samples, k)


def phase(name):
    """Sets the training phase: none, forward, backward, optimizer, eval, checkpoint or data."""
    if name not in PHASES:
        raise ValueError("oomharness.probe.phase: unknown phase %r (one of %s)" % (name, ", ".join(PHASES)))
    p = get()
    if p.active:
        safely(p.ctx.clock.set_phase, name)


def oom(caught=True, exc=None, message=None):
    """The code saw an out-of-memory error (`exc`, when it has it) and caught it (or not). An OOM the probe
    already reported on its own is not reported twice: the call only says whether it was caught."""
    p = get()
    if p.active:
        safely(p.ooms.explicit, caught, exc, message)


def uncaught(exc):
    """`exc` ended the program's work uncaught, though something above the code caught it to report it (a
    test runner: pytest catches a test's exception): the probe takes it as it takes one sys.excepthook sees."""
    p = get()
    if p.active:
        safely(p.ooms.excepthook_seen, exc)


def checkpoint_saved(path, step):
    """A checkpoint of step `step` was written to `path`. Inside quiet(), what the last torch.save wrote is
    reported with it (its digest: Note [A checkpoint is its content])."""
    p = get()
    if p.active:
        safely(p.checkpoints.report_saved, path, step)


def checkpoint_loaded(path, step, **fields):
    """A checkpoint of step `step` (the last step it holds, in the job's numbering) was loaded: step
    counting goes on from there."""
    p = get()
    if p.active:
        safely(p.checkpoints.report_loaded, path, step, **fields)


def memory(allocated=None, reserved=None):
    """Reports memory held now (PyTorch's figures when not given)."""
    p = get()
    if p.active:
        safely(p.memory.report, allocated, reserved)


@contextlib.contextmanager
def quiet():
    """torch.save/torch.load inside this block are not reported (the caller reports them itself)."""
    checkpoints = get().checkpoints
    checkpoints.quiet += 1
    try:
        yield
    finally:
        checkpoints.quiet -= 1


__all__ = ["active", "step", "numbered", "manual_steps", "samples", "phase", "oom", "uncaught", "checkpoint_saved",
           "checkpoint_loaded", "memory", "quiet", "is_oom", "oom_kind", "install", "get", "Probe", "PARTS"]
