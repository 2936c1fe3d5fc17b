"""The Python probe: tells the harness what a PyTorch training job is doing, with no change to its code.

The runner puts python/ on PYTHONPATH and sets OOMH_PROBE=1; sitecustomize.py then waits for the
job to import torch and calls install() (docs/probe.md). From then on the probe

  - counts training steps from the optimizers' step hooks and writes the step in progress into the control
    block, so that `when: {step: N}` faults fire during the Nth step (Note [Step convention]);
  - writes the training phase into the control block (forward, backward, optimizer, eval, checkpoint, data)
    for phase-triggered faults;
  - takes the batch size from the batch dimension of the first tensor given to the top-level module, found
    from evidence (Note [Which dimension is the batch] in _evidence.py), and reports with each step and OOM
    what data it trained on (Note [A step is its data]);
  - reports every out-of-memory error the code saw (the caching allocator's OOM observer, and OOM exceptions
    passing the places the probe wraps), and whether the code caught it (Note [Caught or not]);
  - records torch.cuda.empty_cache(), torch.save and torch.load (with a digest of what was saved or
    loaded, and whether the model's state then equals it: Note [A checkpoint is its content]), and memory
    at each step;
  - with OOMH_SNAPSHOT=<dir>, records PyTorch's memory history (with Python stacks), reads the largest blocks
    and their lines from it at each OOM, and dumps a memory snapshot at the first OOM;
  - writes what held the memory (`memory_breakdown`) at each OOM the code saw (with memory_summary()), at
    the attempt's peak, and when an evaluation starts after training steps (Note [After the loop]) (_breakdown.py), whether each optimizer step came after the gradients were cleared (Note [Cleared
    gradients]), and when an evaluation forward starts, with or without a graph (`eval_forward`).

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
import sys
import time
import weakref

from oomharness import _breakdown
from oomharness import _evidence
from oomharness import oom_kinds

from oomharness._control import ControlBlock, PHASES, UNKNOWN_STEP
from oomharness._events import EventLog

# Note [Step convention]
# Inside the probe `completed` counts optimizer steps done; every step NUMBER it writes (events, the control
# block, the steps of OOMH_FLUSH_AT_STEPS) and every number it is given (probe.step(n), a checkpoint's
# step) is in the user's numbering, which counts from the job's step_base (OOMH_STEP_BASE: 1 by default, 0
# for the many training loops that print `for step in range(n)`). The Kth step is numbered K - 1 + base, and
# a step numbered n leaves n - base + 1 steps done: _Steps below is the one place that converts. The runner
# passes faults' `step`, a cap's `at: {step}` and the target step through unchanged, so that `step=3` is the
# step the user's own log calls 3 (Note [Step numbering] in runner/src/suite/job_fields.cpp). The step events
# report COMPLETED steps; the control block holds the step IN PROGRESS (the one after the last completed),
# so a fault `when: {step: 5}` fires during the step whose completion is reported as step 5. The C++ probe
# (oomh::probe::begin_step / step) takes the program's own numbers the same way, and the emulated trainer
# counts from 1. The block's step stays unknown (-1) until training starts (the first training forward, or a
# step completed), so that building the model is not "step 1".
#
# Note [Caught or not]
# An OOM is reported once, as an `oom` event, when it is seen: by the allocator's OOM observer (PyTorch 2.x,
# native caching allocator: it fires only when the allocator gives up, after freeing its cache and retrying,
# so absorbed faults are not reported), or when an OOM exception passes a place the probe wraps (backward,
# the top-level forward on PyTorch >= 2.1, torch.save/load, the explicit probe.oom()). Whether the code
# caught it is learned later: the next completed step, or an explicit probe.oom(caught=True), emits
# `oom_caught` with the OOM's step, and so does the next OOM (the code went on after it to meet another); the
# process dying of it (sys.excepthook) leaves it uncaught. A process
# that exits by itself after the OOM (sys.exit after printing a message) caught it: atexit says so.
#
# Note [The batch the code did not report]
# The zero-code promise: a job that reports no batch size still gets one at each step and each OOM, inferred
# from what the probe already sees, and every event says where its batch came from (`batch_from`): "inputs",
# the batch dimension of the model's inputs at its top-level forward (positional or keyword: Note [Keyword
# inputs] and Note [Which dimension is the batch] in _evidence.py); "loader", the number of samples the
# DataLoader handed out for the batch in hand, when the forward's inputs hold no tensor the probe can read;
# "code", the batch_size the code passed to probe.step(). An OOM before the step's first forward (moving the
# batch to the device) has the batch of the last forward. batch_halving says in its verdict when the batches
# it compared were inferred.
#
# Note [Cleared gradients]
# The zero_grad check needs to know, at each optimizer step, whether the gradients were cleared since the
# previous one. Three ways of clearing are seen, at a cost of a few attribute reads per step: a call of
# Optimizer.zero_grad or Module.zero_grad (wrapped); the first parameter's .grad being a different tensor
# than after the previous step (set to None, by hand or by zero_grad(set_to_none=True)); or its version
# counter having moved more than the backward passes since then account for (grad.zero_() by hand: each
# backward accumulates into an existing gradient once). Not seen: a clearing that leaves the first
# parameter's gradient alone. In-place changes of the gradient other than backward's (clip_grad_norm_,
# GradScaler.unscale_) also move the counter, so they can hide a missing zero_grad, never invent one.
#
# Note [The peak breakdown]
# Gathering a breakdown walks every live tensor, which no step may pay for. On the virtual device the
# device calls the probe back when allocated first passes 17/16 of the last high it reported (a handful of
# times per attempt, mostly during the first step); the probe gathers then and writes the latest at the
# next step's end, or at exit. The breakdown is therefore taken within 1/16 of the true peak. On a GPU no
# peak breakdown is taken (only at OOMs).
#
# Note [The growth breakdown]
# A leak is told by what holds more at each step's end, when nothing of the step is in flight: on the
# virtual device, when allocated at a step's end is more than GROWTH above the previous step's end (which the
# step event reports anyway), the probe writes a breakdown `at: "step"`. A healthy loop does so at most
# during its first steps (the optimizer's state appears); a leaking one at every step, up to
# MAX_GROWTH_BREAKDOWNS. The kept_with_graph finding compares the first and the last of them.

#
# Note [After the loop]
# Rule 5 of the usual diagnosis: references kept after the loop. A training loop's variables (`loss`,
# `out`, the batch) stay bound after it in Python, and a list filled in it stays alive with the function, so
# what the last step made can hold memory through what comes next: an evaluation, a checkpoint, the next
# epoch. The probe sees the loop left when a model's forward runs for evaluation (eval mode or gradients off)
# after at least one training step since the last such look: there it writes a breakdown `at: "after_loop"`
# (the first forward of that evaluation, before it allocates anything), with the storages of the forward's
# own arguments counted apart (`inputs`), and the variables of the user's frames that keep the largest
# lines' tensors (Note [Which variable keeps them] in _breakdown.py). What other live tensors hold there
# beyond the inputs was left by the code before: the kept_after_loop finding weighs it. At most
# MAX_AFTER_LOOP per process; an evaluation every step costs a breakdown every step up to that.

_probe = None
GROWTH = 1 << 20              # Note [The growth breakdown]
MAX_GROWTH_BREAKDOWNS = 64
MAX_AFTER_LOOP = 16           # Note [After the loop]
MAX_PARTS = 64                # forwards of one step whose digests a step event lists (Note [A step is its data])



class _Steps:
    """The user's step numbering (Note [Step convention]): the only place that converts."""

    def __init__(self, text):
        # The runner checked the value (0 or 1); anything else run by hand counts from 1 as before.
        self.base = 0 if (text or "").strip() == "0" else 1

    def number(self, k):
        """The number the user's log gives the Kth step."""
        return k - 1 + self.base

    def done_after(self, n):
        """How many steps are done once the step numbered n is."""
        return n - self.base + 1

# Note [Which errors are OOMs] (policies/include/oomharness/policies/oom_kinds.h; oom_kinds.py is its Python
# twin): PyTorch's OOM types, and errors of other types whose message carries an allocation failure of CUDA
# (its out-of-memory codes inside torch.AcceleratorError or a RuntimeError) or of a CUDA library (cuBLAS,
# cuDNN, cuFFT, cuSOLVER, cuSPARSE, NCCL), or the CPU allocator's. A RuntimeError that only mentions "out of
# memory" (a DataLoader worker, the user's own message) is not one: counting it made a job that died of an
# unrelated error look like a graceful exit. A row whose words alone do not say so (`needs_refusal`:
# CUDNN_STATUS_NOT_SUPPORTED, also a non-contiguous input's error) is not reported by the probe, which cannot
# see the shim's refusals; the runner's output detector takes it as support for a refusal.
_oom_types = oom_kinds._oom_types


def oom_kind(exc):
    """The row of the OOM table that names `exc`, or None (Note [Which errors are OOMs])."""
    kind = oom_kinds.classify(exc)
    return None if kind is None or kind.needs_refusal else kind


def is_oom(exc):
    """True for an out-of-memory error (Note [Which errors are OOMs]): torch.OutOfMemoryError,
    torch.cuda.OutOfMemoryError, or an error whose message carries CUDA's, a CUDA library's or the CPU
    allocator's allocation failure."""
    return oom_kind(exc) is not None


def _leading_dim(args, kwargs=None):
    """The leading dimension of the first tensor among the arguments (one level into lists, tuples, dicts)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    Tensor = torch.Tensor

    def first(values):
        for v in values:
            if isinstance(v, Tensor):
                return v
            if isinstance(v, (list, tuple)):
                for w in v:
                    if isinstance(w, Tensor):
                        return w
            elif isinstance(v, dict):
                for w in v.values():
                    if isinstance(w, Tensor):
                        return w
        return None

    t = first(args)
    if t is None and kwargs:
        t = first(kwargs.values())
    if t is None or t.dim() == 0:
        return None
    return int(t.shape[0])


def _checkpoint_step(obj):
    """The step a checkpoint says it holds: its `step` (or `global_step`) entry when it is a dict."""
    if not isinstance(obj, dict):
        return None
    for key in ("step", "global_step"):
        v = obj.get(key)
        if v is None or isinstance(v, bool):
            continue
        try:
            return int(v.item() if hasattr(v, "item") else v)
        except Exception:
            continue
    return None


def _path_of(f):
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.fsdecode(os.fspath(f))
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "<stream>"


def _rank_from_env():
    """RANK when WORLD_SIZE says the process is one of several (torchrun, or the runner's `ranks: N`), else None.

    Note [Ranks seen in events]
    A job that starts torchrun itself is one process to the runner, and its ranks share the job's event log
    and control block. So that the runner can still tell them apart, each rank's probe puts its RANK on every
    event it writes; the runner gives a shim event the rank of the probe events of the same pid, and folds
    an attempt whose events name several ranks as if it had run them itself (split_ranks_from_events in
    policies/src/trace_ranks.cpp). For the runner's own ranks the field only repeats what merge_ranks adds."""
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            rank = int(os.environ["RANK"])
            return rank if rank >= 0 else None
    except (KeyError, ValueError):
        pass
    return None


class _Probe:
    def __init__(self):
        self.log = EventLog(os.environ.get("OOMH_EVENTS"))
        self.cb = ControlBlock.open(os.environ.get("OOMH_CONTROL"))
        self.active = self.log.fd >= 0 or self.cb is not None
        self.phase_events = os.environ.get("OOMH_PHASE_EVENTS") == "1"
        self.snapshot_dir = os.environ.get("OOMH_SNAPSHOT") or None
        self.history = False        # PyTorch's memory history is being recorded (with OOMH_SNAPSHOT)
        self.snapshot_done = False
        self.torch = None
        self.installed = False
        self.completed = 0          # steps completed (Note [Step convention])
        self.steps = _Steps(os.environ.get("OOMH_STEP_BASE"))
        self.started = False        # training has started: the block holds completed + 1
        self.batch_size = -1        # leading dimension of the last training forward
        self.current_batch = -1     # ... of the last top-level forward, training or not
        self.batch_from = ""        # where each came from (Note [The batch the code did not report])
        self.current_from = ""
        self.pending_samples = 0    # samples of training forwards since the last step
        self.loss_parts = []        # detached scalars backward() ran on since the last step
        self.manual_steps = False   # the code reports steps itself (probe.step)
        self.manual_samples = False # the code reports samples itself (probe.samples)
        self.unresolved = []        # steps of OOMs seen whose fate (caught or not) is not known yet
        self.unclaimed = 0          # OOMs the observer reported that no exception was matched to yet
        self.uncaught = False       # the process is dying of an OOM
        self.quiet = 0              # > 0: torch.save/load inside the recover module, which reports itself
        self.depth = 0              # module call depth, to find top-level forwards
        self.top = None             # the top-level module of the forward in progress
        self.phase_name = "none"
        self.is_model = weakref.WeakKeyDictionary()
        self.flush_at = _steps_from_env(os.environ.get("OOMH_FLUSH_AT_STEPS"))
        self.models = weakref.WeakSet()      # top-level modules seen in a forward
        self.optimizers = weakref.WeakSet()  # optimizers seen stepping
        self.device = None                   # the virtual device, when this job runs on one
        self.peak = None                     # the last peak breakdown gathered, not written yet
        self.zeroed = False                  # zero_grad was called since the last optimizer step
        self.backwards = 0                   # backward passes since the last optimizer step
        self.last_grad = None                # (weak parameter, weak gradient, version) after the last step
        self.grads_cleared = None            # this step's answer (Note [Cleared gradients])
        self.step_site = ""                  # where optimizer.step() was called when they were not
        self.last_optimizer = None           # id() of the optimizer of the last step
        self.last_held = None                # allocated at the last step's end (virtual device)
        self.growth_written = 0              # breakdowns written because it grew
        self.after_loop_written = 0          # Note [After the loop]
        self.trained_since_look = False      # a training step completed since the last after-loop look
        self.rank = _rank_from_env()         # a distributed rank: every event carries it (Note [Ranks seen in events])
        # Note [A step is its data] (_evidence.py): the data of the training forwards since the last step
        self.data_samples = 0
        self.data_digest = 0
        self.data_per_sample = True
        self.data_parts = []                 # the digest of each training forward (gradient accumulation)
        self.data_shape = None               # the first input's shape, its batch dimension and how it was found
        self.data_dim = None
        self.data_from = None
        self.loader_indices = None           # the DataLoader batch handed out last (Note [The DataLoader's indices])
        self.loader_fresh = False            # ... and not used by a training forward yet
        self.data_loader = ""                # indices text of the batches trained on since the last step
        self.last_shape = weakref.WeakKeyDictionary()   # model -> shape of its last training input
        self.changed = weakref.WeakKeyDictionary()      # model -> the dimension seen changing
        self.rnn = weakref.WeakKeyDictionary()          # model -> holds a sequence-first recurrent module
        self.loaded = []                     # (digest, tensor fingerprints, key paths) of each torch.load, in order
        self.state_checked = weakref.WeakSet()  # models compared with the loaded state since the last load
        self.quiet_content = None            # what a torch.save/load inside quiet() saw, for the caller's report

    # ---- output --------------------------------------------------------------------------------------
    def emit(self, kind, **fields):
        if self.rank is not None:
            fields.setdefault("rank", self.rank)
        if self.log.write(kind, fields) and self.cb is not None:
            self.cb.count_event()

    def set_phase(self, name):
        if name == self.phase_name:
            return
        self.phase_name = name
        if self.cb is not None:
            self.cb.phase = name
        if self.phase_events:
            self.emit("phase", phase=name)

    def start_training(self):
        if not self.started:
            self.started = True
            n = self.steps.number(self.completed + 1)
            if self.cb is not None:
                self.cb.step = n
            self.entering_step(n)

    # Note [Flushing before a faulted step]
    # A caching allocator serves a training loop's steady state from its cache: step 5 allocates nothing
    # from the driver, so a fault `when: {step: 5}` at the driver level would never fire. Under real memory
    # pressure the allocator has to go to the driver; to get there on purpose, the runner lists the steps
    # its faults target in OOMH_FLUSH_AT_STEPS and the probe releases the allocator's unused cached blocks
    # as such a step begins (between steps, where nothing is in flight). This changes no value the program
    # computes: only where its tensors live. It calls the allocator directly, so the code's own
    # empty_cache() calls (which policies look at) are not confused with it.
    def entering_step(self, n):
        if n not in self.flush_at or self.torch is None:
            return
        self.flush_at.discard(n)
        torch = self.torch
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch._C._cuda_emptyCache()
        except Exception:
            pass

    def memory_fields(self):
        """allocated and reserved bytes, when CUDA is in use (never initialises it).

        Note [Memory figures per step]
        torch.cuda.memory_allocated() and memory_reserved() each build memory_stats()'s whole flattened dict in
        Python: on the H100 the two took most of the probe's 650-730 us per step (issue 19's probecost phase,
        bench/RESULTS.md). On a GPU the probe asks the allocator once, for the nested stats PyTorch's own
        functions read (torch._C._cuda_memoryStats), and reads the two figures from it. The virtual device
        answers memory_allocated() from its model, so it keeps the public functions."""
        torch = self.torch
        try:
            if torch is not None and torch.cuda.is_initialized():
                raw = getattr(torch._C, "_cuda_memoryStats", None) if self.device is None else None
                if raw is not None:
                    try:
                        stats = raw(torch.cuda.current_device())
                        return {"allocated": int(stats["allocated_bytes"]["all"]["current"]),
                                "reserved": int(stats["reserved_bytes"]["all"]["current"])}
                    except Exception:
                        pass  # another PyTorch's layout: the public functions below
                return {"allocated": int(torch.cuda.memory_allocated()), "reserved": int(torch.cuda.memory_reserved())}
        except Exception:
            pass
        return {}

    def cache_fields(self):
        """What the caching allocator holds, for an empty_cache event: reserved, allocated, and freeable: the
        bytes of free cached blocks that emptying the cache can give back. A free block split off a segment
        that a live tensor still uses cannot go back (inactive_split_bytes); neither can a block in use
        (active_bytes, or allocated where the backend does not count active blocks). Empty when CUDA is not
        in use (never initialises it)."""
        fields = self.memory_fields()
        if not fields:
            return fields
        try:
            stats = self.torch.cuda.memory_stats()
            reserved = int(stats.get("reserved_bytes.all.current", fields["reserved"]))
            in_use = max(int(stats.get("active_bytes.all.current", 0)), fields["allocated"])
            pinned = int(stats.get("inactive_split_bytes.all.current", 0))
            fields["freeable"] = max(0, reserved - in_use - pinned)
        except Exception:
            pass
        return fields

    # ---- what held the memory ----------------------------------------------------------------------
    def breakdown(self, inputs=(), frame=None, oom=False):
        """The breakdown now (_breakdown.py), or None when no device memory is in use. `inputs`: a forward's
        arguments, counted apart; `frame`: where to look for the variables that keep tensors; `oom`: at an
        OOM (memory_summary() is added, and on a GPU the memory history is read when recorded)."""
        torch = self.torch
        t0 = time.perf_counter()
        if self.device is not None:
            fields = _breakdown.virtual(self.device, list(self.models), list(self.optimizers), inputs, frame)
        elif torch is None or not torch.cuda.is_initialized():
            return None
        else:
            fields = _breakdown.gpu(torch, list(self.models), list(self.optimizers), inputs)
            if oom and self.history:
                fields.update(_breakdown.gpu_history(torch))
        if torch is not None:
            fields.update(_breakdown.allocator_fields(torch, oom))
        fields["gather_s"] = round(time.perf_counter() - t0, 6)  # what gathering it cost (issue 14's target: < 1 s)
        return fields

    def emit_breakdown(self, at, fields):
        fields = dict(fields, at=at, step=self.current_step(), phase=self.phase_name, batch_size=self.current_batch)
        self.emit("memory_breakdown", **fields)

    def peak_seen(self):
        """The virtual device's allocated bytes reached a new high (Note [The peak breakdown])."""
        if self.started:
            fields = self.breakdown()
            if fields is not None:
                self.peak = dict(fields, step=self.current_step(), phase=self.phase_name,
                                 batch_size=self.current_batch)

    def held_grew(self, held):
        """Note [The growth breakdown]: held memory at a step's end grew by more than GROWTH."""
        last, self.last_held = self.last_held, held
        if last is None or held - last <= GROWTH or self.growth_written >= MAX_GROWTH_BREAKDOWNS:
            return
        self.growth_written += 1
        fields = self.breakdown(frame=sys._getframe())
        if fields is not None:
            self.emit_breakdown("step", fields)

    def after_loop(self, args, kwargs, site=""):
        """Note [After the loop]: an evaluation starts after training steps."""
        if not self.trained_since_look or self.after_loop_written >= MAX_AFTER_LOOP:
            return
        self.trained_since_look = False
        self.after_loop_written += 1
        fields = self.breakdown(inputs=(args, kwargs or {}), frame=sys._getframe())
        if fields is not None:
            self.emit_breakdown("after_loop", dict(fields, completed=self.completed, site=site))

    def flush_peak(self):
        if self.peak is not None:
            fields, self.peak = self.peak, None
            self.emit("memory_breakdown", at="peak", **fields)

    # ---- steps ---------------------------------------------------------------------------------------
    def finish_step(self, n, batch_size=None, loss=None):
        """Step n is done: samples, caught OOMs, the step event, and the block moves on to step n + 1."""
        self.completed = self.steps.done_after(n)
        if not self.manual_samples and self.pending_samples > 0:
            self.emit("samples", count=self.pending_samples)
        self.pending_samples = 0
        self.resolve_all()
        self.unclaimed = 0
        fields = {"step": n}
        bs = self.batch_size if batch_size is None else batch_size
        if bs is not None and bs >= 0:
            fields["batch_size"] = int(bs)
            fields["batch_from"] = "code" if batch_size is not None else (self.batch_from or "inputs")
        if loss is None and self.loss_parts:
            try:
                loss = sum(float(t.item()) for t in self.loss_parts)
            except Exception:
                loss = None
        self.loss_parts = []
        if loss is not None:
            fields["loss"] = float(loss)
        data = self.take_data()
        if data is not None:
            fields["data"] = data
        if self.grads_cleared is not None:
            fields["grads_cleared"] = self.grads_cleared
            if not self.grads_cleared:
                fields["site"] = self.step_site
            self.grads_cleared = None
        fields.update(self.memory_fields())
        self.emit("step", **fields)
        self.trained_since_look = True
        if self.peak is not None:
            self.flush_peak()
        if self.device is not None and "allocated" in fields:
            self.held_grew(fields["allocated"])
        self.started = True
        if self.cb is not None:
            self.cb.step = n + 1
        self.entering_step(n + 1)
        self.depth = 0
        # Between steps the job fetches its next batch: allocations there (the copy to the GPU) are "data".
        self.set_phase("data")

    def optimizer_pre(self, *_):
        self.depth = 0
        self.start_training()
        self.set_phase("optimizer")

    def check_cleared(self):
        """Note [Cleared gradients]: were the gradients cleared since the last optimizer step? (Asked after
        the step, which changes no gradient: PyTorch 1.13 has no hook before it.)"""
        last = self.last_grad
        if last is not None:
            param, grad, version = last[0](), last[1](), last[2]
            now = getattr(param, "grad", None) if param is not None else None
            cleared = (self.zeroed or now is None or now is not grad
                       or now._version - version > self.backwards)
            self.grads_cleared = bool(cleared)
            if not cleared:  # the line that called optimizer.step(), for the finding
                self.step_site = _breakdown.site_text(_breakdown.user_site(sys._getframe(1), 1))

    def remember_grads(self, optimizer):
        self.zeroed = False
        self.backwards = 0
        last, self.last_grad = self.last_grad, None
        try:
            p = optimizer.param_groups[0]["params"][0]
            g = p.grad
            if g is not None:
                param = last[0] if last is not None and last[0]() is p else weakref.ref(p)
                self.last_grad = (param, weakref.ref(g), g._version)
        except Exception:
            pass

    def optimizer_post(self, optimizer=None, *_):
        if optimizer is not None:
            if id(optimizer) != self.last_optimizer:  # as for models: look up only when it changes
                self.optimizers.add(optimizer)
                self.last_optimizer = id(optimizer)
            self.check_cleared()
            self.remember_grads(optimizer)
        if self.manual_steps:
            self.set_phase("data")
            return
        self.finish_step(self.steps.number(self.completed + 1))

    # ---- forward and backward ------------------------------------------------------------------------
    def model_like(self, module):
        """A module whose forward is a model's: it has parameters and is not a loss."""
        known = self.is_model.get(module)
        if known is None:
            loss_type = getattr(self.torch.nn.modules.loss, "_Loss", ())
            known = not isinstance(module, loss_type) and next(module.parameters(), None) is not None
            try:
                self.is_model[module] = known
            except TypeError:
                pass
        return known

    def forward_pre(self, module, args, kwargs=None):
        # A module call at depth 0 is top-level; the top module seen again means an exception (an OOM in
        # forward) left the depth count stale on a PyTorch without always-called forward hooks.
        if self.depth > 0 and module is not self.top:
            self.depth += 1
            return
        if not self.model_like(module):
            self.depth += 1
            return
        self.depth = 1
        if module is not self.top:  # a WeakSet look-up costs a weak reference: only when the model changes
            self.models.add(module)
        self.top = module
        training = module.training and self.torch.is_grad_enabled()
        if kwargs is None and not _evidence.has_tensor(self.torch, args):
            kwargs = _evidence.call_kwargs(module, sys._getframe(1))  # Note [Keyword inputs] (_evidence.py)
        bs = _safely(self.batch_of, module, args, kwargs, training)
        if bs is None:
            bs = _leading_dim(args, kwargs)
        how = "inputs"
        if bs is None and self.loader_fresh and self.loader_indices:
            bs, how = len(self.loader_indices), "loader"  # Note [The batch the code did not report]
        if bs is not None:
            self.current_batch, self.current_from = bs, how
            if self.cb is not None:
                self.cb.batch_size = bs
        if training:
            if self.loaded and module not in self.state_checked:
                _safely(self.check_state, module)
            if bs is not None:
                self.batch_size, self.batch_from = bs, how
                if not self.manual_samples:
                    self.pending_samples += bs
            self.start_training()
            self.set_phase("forward")
        else:
            if self.phase_name != "eval":
                # Once per evaluation, not per forward: does it build a graph (eval_no_grad)?
                site = _breakdown.site_text(_breakdown.user_site(sys._getframe(1)))
                self.emit("eval_forward", step=self.current_step(), grad=bool(self.torch.is_grad_enabled()),
                          training=bool(module.training), batch_size=self.current_batch, site=site)
                _safely(self.after_loop, args, kwargs, site)
            self.set_phase("eval")

    # ---- what a step trained on (Note [A step is its data] in _evidence.py) -------------------------------
    def batch_of(self, module, args, kwargs, training):
        """The batch size of a top-level forward, from its batch dimension; for a training forward, its data
        is added to the step's."""
        torch = self.torch
        t, tensors = _evidence.first_tensor(torch, args, kwargs)
        if t is None or t.dim() == 0:
            return None
        shape = tuple(t.shape)
        rnn = self.rnn.get(module)
        if rnn is None:
            rnn = _evidence.has_sequence_first_rnn(torch, module)
            _safely(self.rnn.__setitem__, module, rnn)
        if training:
            changed = _evidence.changed_dim(self.last_shape.get(module), shape)
            if changed is not None and module not in self.changed:
                _safely(self.changed.__setitem__, module, changed)
            _safely(self.last_shape.__setitem__, module, shape)
        loader = len(self.loader_indices) if self.loader_fresh and self.loader_indices else None
        dim, how = _evidence.batch_dim(t, loader, rnn, self.changed.get(module))
        count = int(shape[dim])
        if not training:
            return count
        with _evidence.off_books(self.device):
            samples, digest, per_sample = 0, 0, True
            for u in tensors:
                if u.dim() <= dim or int(u.shape[dim]) != count:
                    continue
                got = _evidence.batch_hash(torch, u, dim)
                if got is None:
                    continue
                if not samples:
                    samples = got[0]
                digest = (digest + got[1]) & _evidence.MASK
                per_sample = per_sample and got[2]
        self.data_samples += samples
        self.data_parts.append(digest)
        self.data_digest = (self.data_digest + digest) & _evidence.MASK
        self.data_per_sample = self.data_per_sample and per_sample
        if self.data_shape is None:
            self.data_shape, self.data_dim, self.data_from = list(shape), dim, how
        if self.loader_fresh and self.loader_indices:
            text = _evidence.indices_text(self.loader_indices)
            if text:
                self.data_loader = text if not self.data_loader else self.data_loader + "; " + text
        self.loader_fresh = False
        return count

    def take_data(self):
        """The `data` field of a step or OOM event (None when no training forward was fingerprinted), and
        the count starts again."""
        data = None
        if self.data_shape is not None:
            data = {"samples": self.data_samples, "digest": _evidence.hex64(self.data_digest),
                    "per_sample": self.data_per_sample, "shape": self.data_shape, "dim": self.data_dim,
                    "from": self.data_from}
            if self.data_loader:
                data["loader"] = self.data_loader
            if 1 < len(self.data_parts) <= MAX_PARTS:
                data["parts"] = [_evidence.hex64(d) for d in self.data_parts]
        self.data_samples, self.data_digest, self.data_per_sample, self.data_parts = 0, 0, True, []
        self.data_shape = self.data_dim = self.data_from = None
        self.data_loader = ""
        return data

    def loader_batch(self, indices):
        """The DataLoader handed out a batch (Note [The DataLoader's indices])."""
        self.loader_indices = list(indices) if indices is not None else None
        self.loader_fresh = self.loader_indices is not None

    # ---- what a checkpoint holds (Note [A checkpoint is its content] in _evidence.py) --------------------
    def digest_of(self, obj):
        with _evidence.off_books(self.device):
            return _evidence.state_digest(self.torch, obj)

    def check_state(self, module):
        """The first training forward of `module` after a load: does its state equal what was loaded?"""
        self.state_checked.add(module)
        with _evidence.off_books(self.device):
            fields = _evidence.model_state(self.torch, module, self.loaded)
        self.emit("model_state", step=self.current_step(), model=type(module).__name__, **fields)

    def forward_post(self, module, args, *rest):
        if self.depth > 0:
            self.depth -= 1
        if self.depth == 0 and module is self.top:
            result = rest[-1] if rest else None
            exc = sys.exc_info()[1]
            # With always_call, the hook also runs when forward raised: the OOM left the top-level forward.
            if result is None and exc is not None:
                self.note_exception(exc)

    def before_backward(self, args, kwargs):
        self.depth = 0
        self.backwards += 1
        self.start_training()
        self.set_phase("backward")
        tensors = args[0] if args else kwargs.get("tensors")
        torch = self.torch
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
            self.loss_parts.append(tensors.detach())

    # ---- out-of-memory errors ------------------------------------------------------------------------
    def current_step(self):
        return self.cb.step if self.cb is not None else (self.steps.number(self.completed + 1) if self.started else UNKNOWN_STEP)

    def new_oom(self, message, caught=None, device=None, size=None, exc=None):
        # Note [Caught or not]: a new OOM means the code went on after the earlier ones (a retry loop such as
        # Accelerate's, which meets several OOMs before a step completes): they were caught.
        self.resolve_all()
        step = self.current_step()
        fields = {"step": step, "batch_size": self.current_batch, "phase": self.phase_name, "message": message or ""}
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
        if self.current_batch >= 0:
            fields["batch_from"] = self.current_from or "inputs"
        if device is not None:
            fields["device"] = int(device)
        if size is not None:
            fields["size"] = int(size)
        if caught is not None:
            fields["caught"] = bool(caught)
        data = self.take_data()
        if data is not None:
            fields["data"] = data
        self.emit("oom", **fields)
        bd = _safely(self.breakdown, oom=True)
        if bd is not None:
            _safely(self.emit_breakdown, "oom", bd)
        if self.cb is not None:
            self.cb.count_oom(caught is True)
        if caught is not True:
            self.unresolved.append(step)
        # The failed attempt's work does not count: a redo reports its samples and loss again.
        self.pending_samples = 0
        self.loss_parts = []
        self.depth = 0
        self.take_snapshot()

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
            self.emit("oom_caught", step=step)
            if self.cb is not None:
                self.cb.count_caught()

    def resolve_all(self):
        while self.unresolved:
            self.resolve_last()

    def explicit_oom(self, caught, exc, message):
        if is_oom(exc) and self.claim(exc) or exc is None and self.unclaimed > 0 and self.claim(None):
            if caught:
                self.resolve_last()
            return
        self.new_oom(message if message is not None else (str(exc) if exc is not None else "out of memory"),
                     caught=bool(caught), exc=exc if is_oom(exc) else None)

    def take_snapshot(self):
        if not self.snapshot_dir or self.snapshot_done or self.torch is None:
            return
        self.snapshot_done = True
        try:
            memory = self.torch.cuda.memory
            os.makedirs(self.snapshot_dir, exist_ok=True)
            path = os.path.join(self.snapshot_dir, "snapshot-%d-step%d.pickle" % (os.getpid(), self.current_step()))
            if hasattr(memory, "_dump_snapshot"):
                memory._dump_snapshot(path)
            else:
                import pickle
                with open(path, "wb") as f:
                    pickle.dump(memory._snapshot(), f)
            self.emit("snapshot", path=path)
        except Exception:
            pass

    # ---- process end ---------------------------------------------------------------------------------
    def excepthook_seen(self, exc):
        _safely(self.flush_peak)
        if is_oom(exc):
            self.note_exception(exc)
            self.uncaught = True
            self.emit("probe_exit", reason="uncaught out-of-memory error")

    def at_exit(self):
        _safely(self.flush_peak)
        if self.uncaught:
            return
        # The code went on past the OOMs and exits by itself: it caught them.
        self.resolve_all()
        self.emit("probe_exit", reason="exit")


def _steps_from_env(text):
    steps = set()
    for part in (text or "").split(","):
        try:
            steps.add(int(part))
        except ValueError:
            pass
    return steps


def _get():
    global _probe
    if _probe is None:
        _probe = _Probe()
    return _probe


def _safely(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None


# ---- the explicit API ------------------------------------------------------------------------------------

def active():
    """True when running under the harness."""
    return _get().active


def step(n, batch_size=None, loss=None):
    """Step `n` is done, in the code's own numbering (from the job's step_base: 1 unless it says 0). From the
    first call on, the optimizer hooks no longer count steps."""
    p = _get()
    if p.active:
        if not p.manual_steps and int(n) == 0 and p.steps.base == 1:
            # Note [Step convention]: the code's own counter shows its numbering; the faults were placed by
            # the job's before it started, so say so rather than guess.
            _safely(p.emit, "warning", message="probe.step(0): the code counts steps from 0, the job from 1 "
                    "(step_base: 0 makes fault steps and reports use the code's numbering)")
        p.manual_steps = True
        _safely(p.finish_step, int(n), batch_size, loss)


def numbered(k):
    """The number the job's numbering gives its Kth step: k, or k - 1 with step_base 0 (Note [Step
    convention]). For code that counts steps done and reports them with step()."""
    return _get().steps.number(int(k))


def manual_steps():
    """The code will report its steps with step(); call before the first optimizer step."""
    _get().manual_steps = True


def samples(k):
    """`k` samples were consumed since the last report. From the first call on, forwards are not counted."""
    p = _get()
    if p.active:
        p.manual_samples = True
        p.pending_samples = 0
        _safely(p.emit, "samples", count=int(k))


def phase(name):
    """Sets the training phase: none, forward, backward, optimizer, eval, checkpoint or data."""
    if name not in PHASES:
        raise ValueError("oomharness.probe.phase: unknown phase %r (one of %s)" % (name, ", ".join(PHASES)))
    p = _get()
    if p.active:
        _safely(p.set_phase, name)


def oom(caught=True, exc=None, message=None):
    """The code saw an out-of-memory error (`exc`, when it has it) and caught it (or not). An OOM the probe
    already reported on its own is not reported twice: the call only says whether it was caught."""
    p = _get()
    if p.active:
        _safely(p.explicit_oom, caught, exc, message)


def uncaught(exc):
    """`exc` ended the program's work uncaught, though something above the code caught it to report it (a
    test runner: pytest catches a test's exception): the probe takes it as it takes one sys.excepthook sees."""
    p = _get()
    if p.active:
        _safely(p.excepthook_seen, exc)


def checkpoint_saved(path, step):
    """A checkpoint of step `step` was written to `path`. Inside quiet(), what the last torch.save wrote is
    reported with it (its digest: Note [A checkpoint is its content])."""
    p = _get()
    if p.active:
        fields, p.quiet_content = p.quiet_content or {"completed": p.completed}, None
        _safely(p.emit, "checkpoint_save", path=os.fsdecode(os.fspath(path)), step=int(step), **fields)


def checkpoint_loaded(path, step, **fields):
    """A checkpoint of step `step` (the last step it holds, in the job's numbering) was loaded: step
    counting goes on from there."""
    p = _get()
    if p.active:
        if not fields and p.quiet_content:
            fields = p.quiet_content
        p.quiet_content = None
        p.completed = p.steps.done_after(int(step))
        if p.started and p.cb is not None:
            _safely(setattr, p.cb, "step", int(step) + 1)
        _safely(p.emit, "checkpoint_load", path=os.fsdecode(os.fspath(path)), step=int(step), **fields)


def memory(allocated=None, reserved=None):
    """Reports memory held now (PyTorch's figures when not given)."""
    p = _get()
    if p.active:
        fields = p.memory_fields()
        if allocated is not None:
            fields["allocated"] = int(allocated)
        if reserved is not None:
            fields["reserved"] = int(reserved)
        _safely(p.emit, "memory", **fields)


@contextlib.contextmanager
def quiet():
    """torch.save/torch.load inside this block are not reported (the caller reports them itself)."""
    p = _get()
    p.quiet += 1
    try:
        yield
    finally:
        p.quiet -= 1


# ---- installation ----------------------------------------------------------------------------------------

def _wrap(owner, name, make):
    original = getattr(owner, name, None)
    if original is None or getattr(original, "_oomh_original", None) is not None:
        return
    wrapper = make(original)
    wrapper.__name__ = getattr(original, "__name__", name)
    wrapper.__qualname__ = getattr(original, "__qualname__", name)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    wrapper.__wrapped__ = original
    wrapper._oomh_original = original
    setattr(owner, name, wrapper)


def _make_backward(original):
    def backward(*args, **kwargs):
        p = _probe
        _safely(p.before_backward, args, kwargs)
        try:
            return original(*args, **kwargs)
        except BaseException as e:
            _safely(p.note_exception, e)
            raise
    return backward


def _make_empty_cache(original):
    # What the cache held free before the call is recorded with it: empty_cache_retry tells a cache that was
    # already empty (the allocator gives its free blocks back itself before it raises) from one the call
    # could not shrink (docs/events.md).
    def empty_cache():
        p = _probe
        before = _safely(p.cache_fields) or {}
        result = original()
        after = _safely(p.memory_fields) or {}
        if p.cb is not None:
            _safely(p.cb.count_empty_cache)
        fields = {"reserved_before": before.get("reserved", 0), "reserved_after": after.get("reserved", 0)}
        if "allocated" in before:
            fields["allocated_before"] = before["allocated"]
        if "freeable" in before:
            fields["freeable_before"] = before["freeable"]
        _safely(p.emit, "empty_cache", **fields)
        return result
    return empty_cache


def _make_zero_grad(original):
    def zero_grad(self, *args, **kwargs):
        _probe.zeroed = True
        return original(self, *args, **kwargs)
    return zero_grad


def _make_optimizer_init(original):
    # An optimizer is known from its construction, so that its state counts as optimizer state in a
    # breakdown taken during its first step (PyTorch 1.13 has no hook before a step).
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _safely(_probe.optimizers.add, self)
    return __init__


def _attach_device(p):
    """The virtual device of this job, when there is one: breakdowns come from its bookings."""
    vd = sys.modules.get("oomharness.virtual_device")
    dev = getattr(vd, "_installed", None) if vd is not None else None
    if dev is not None:
        p.device = dev
        dev.on_peak = lambda: _safely(p.peak_seen)


def _in_checkpoint_phase(p, call, *args, **kwargs):
    """Runs torch.save/load in the checkpoint phase (an OOM there is noted), then restores the phase."""
    previous = p.phase_name
    _safely(p.set_phase, "checkpoint")
    try:
        return call(*args, **kwargs)
    except BaseException as e:
        _safely(p.note_exception, e)
        raise
    finally:
        _safely(p.set_phase, previous)


def _make_save(original):
    def save(obj, f, *args, **kwargs):
        p = _probe
        result = _in_checkpoint_phase(p, original, obj, f, *args, **kwargs)
        content = _safely(p.digest_of, obj)
        fields = {"completed": p.completed}
        if content is not None:
            fields.update(digest=_evidence.hex64(content[0]), tensors=content[2])
        if p.quiet:  # the caller reports it (checkpoint_saved), with what was written
            p.quiet_content = fields
        else:
            s = _checkpoint_step(obj)
            _safely(p.emit, "checkpoint_save", path=_path_of(f), step=p.steps.number(p.completed) if s is None else s, **fields)
        return result
    return save


def _make_load(original):
    def load(f, *args, **kwargs):
        p = _probe
        obj = _in_checkpoint_phase(p, original, f, *args, **kwargs)
        fields = {}
        content = _safely(p.digest_of, obj)
        if content is not None:
            fields.update(digest=_evidence.hex64(content[0]), tensors=content[2])
            p.loaded.append((content[0], content[1], content[3]))
            p.state_checked = weakref.WeakSet()
        if p.quiet:
            p.quiet_content = fields
        else:
            s = _checkpoint_step(obj)
            if s is not None:
                checkpoint_loaded(_path_of(f), s, **fields)
            else:
                _safely(p.emit, "checkpoint_load", path=_path_of(f), **fields)
        return obj
    return load


def _register_forward_hooks(p, torch):
    module_mod = torch.nn.modules.module
    pre = module_mod.register_module_forward_pre_hook
    post = module_mod.register_module_forward_hook

    def pre_hook(module, args, kwargs=None):
        _safely(p.forward_pre, module, args, kwargs)
        return None

    def post_hook(module, args, *rest):
        _safely(p.forward_post, module, args, *rest)
        return None

    try:  # PyTorch >= 2.0 gives the hooks the keyword arguments too; >= 2.1 can call them when forward raises
        pre(pre_hook, with_kwargs=True)
    except TypeError:
        pre(pre_hook)
    for kwargs in ({"with_kwargs": True, "always_call": True}, {"always_call": True}, {}):
        try:
            post(post_hook, **kwargs)
            break
        except TypeError:
            continue


def _register_optimizer_hooks(p, torch):
    import importlib
    opt_mod = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the name on 1.13
    register_pre = getattr(opt_mod, "register_optimizer_step_pre_hook", None)
    register_post = getattr(opt_mod, "register_optimizer_step_post_hook", None)
    if register_pre is not None and register_post is not None:
        register_pre(lambda *a: _safely(p.optimizer_pre, *a))
        register_post(lambda *a: _safely(p.optimizer_post, *a))
        return
    # PyTorch 1.13: no global step hooks, but every step ends in Optimizer._optimizer_step_code (the
    # profiler's entry point, an empty method), which no optimizer overrides.
    Optimizer = torch.optim.Optimizer
    original = Optimizer._optimizer_step_code

    def _optimizer_step_code(self):
        original(self)
        _safely(p.optimizer_post, self)
    Optimizer._optimizer_step_code = _optimizer_step_code


def _on_cuda_init(p, torch):
    """Runs when the job initialises CUDA (torch.cuda._lazy_call): never initialises it itself."""
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is not None:
        _safely(attach, lambda device, size, allocated, free: _safely(p.observed, device, size, allocated, free))
    if p.snapshot_dir:
        # Python stacks only: C++ stacks ("all", 2.x's default) cost far more per allocation and name no line
        # of the user's (tests/gpu/explain_check.py measures the per-step cost with and without).
        record = torch.cuda.memory._record_memory_history
        for call in (lambda: record("all", stacks="python", max_entries=100000),
                     lambda: record(max_entries=100000),
                     lambda: record(True, trace_alloc_max_entries=100000, trace_alloc_record_context=True),
                     lambda: record(True)):  # 1.13: the blocks' stacks, no trace
            try:
                call()
                p.history = True
                break
            except TypeError:
                continue
            except Exception:
                break


def install(torch):
    """Installs the hooks into `torch` (just imported). Does nothing outside the harness or when done."""
    p = _get()
    if not p.active or p.installed:
        return
    p.installed = True
    p.torch = torch
    steps = [
        lambda: _register_optimizer_hooks(p, torch),
        lambda: _register_forward_hooks(p, torch),
        lambda: _wrap(torch.autograd, "backward", _make_backward),
        lambda: _wrap(torch.cuda, "empty_cache", _make_empty_cache),
        lambda: _wrap(torch.cuda.memory, "empty_cache", _make_empty_cache),
        lambda: _wrap(torch, "save", _make_save),
        lambda: _wrap(torch, "load", _make_load),
        lambda: torch.cuda._lazy_call(lambda: _safely(_on_cuda_init, p, torch)),
        lambda: _wrap(torch.optim.Optimizer, "zero_grad", _make_zero_grad),
        lambda: _wrap(torch.optim.Optimizer, "__init__", _make_optimizer_init),
        lambda: _wrap(torch.nn.Module, "zero_grad", _make_zero_grad),
        lambda: _attach_device(p),
        lambda: _evidence.wrap_dataloader(torch, p.loader_batch, _safely),
    ]
    for s in steps:
        _safely(s)
    previous_hook = sys.excepthook

    def excepthook(kind, value, tb):
        _safely(p.excepthook_seen, value)
        previous_hook(kind, value, tb)
    sys.excepthook = excepthook
    import atexit
    atexit.register(lambda: _safely(p.at_exit))
    allocator = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or "native"
    _safely(p.emit, "probe_start", framework="torch", version=str(getattr(torch, "__version__", "")),
            allocator=allocator)
