"""The probe's memory part: memory held at each step, the code's empty_cache() calls, and what held the memory
(`memory_breakdown`, _breakdown.py) at each OOM, at the peak, where held memory grew, and after the loop; with
OOMH_SNAPSHOT, PyTorch's memory history and a snapshot at the first OOM.

Note [Memory figures per step]
torch.cuda.memory_allocated() and memory_reserved() each build memory_stats()'s whole flattened dict in
Python: on the H100 the two took most of the probe's 650-730 us per step (issue 19's probecost phase,
bench/RESULTS.md). On a GPU the probe asks the allocator once, for the nested stats PyTorch's own functions
read (torch._C._cuda_memoryStats), and reads the two figures from it. The virtual device answers
memory_allocated() from its model, so it keeps the public functions.

Note [The peak breakdown]
Gathering a breakdown walks every live tensor, which no step may pay for. On the virtual device the device
calls the `device_peak` hook when allocated first passes 17/16 of the last high it reported (a handful of
times per attempt, mostly during the first step); the probe gathers then and writes the latest at the next
step's end, or at exit. The breakdown is therefore taken within 1/16 of the true peak. On a GPU no peak
breakdown is taken (only at OOMs).

Note [The growth breakdown]
A leak is told by what holds more at each step's end, when nothing of the step is in flight: on the virtual
device, when allocated at a step's end is more than GROWTH above the previous step's end (which the step
event reports anyway), the probe writes a breakdown `at: "step"`. A healthy loop does so at most during its
first steps (the optimizer's state appears); a leaking one at every step, up to MAX_GROWTH_BREAKDOWNS. The
kept_with_graph finding compares the first and the last of them.

Note [After the loop]
Rule 5 of the usual diagnosis: references kept after the loop. A training loop's variables (`loss`, `out`,
the batch) stay bound after it in Python, and a list filled in it stays alive with the function, so what the
last step made can hold memory through what comes next: an evaluation, a checkpoint, the next epoch. The
probe sees the loop left when a model's forward runs for evaluation (eval mode or gradients off) after at
least one training step since the last such look: there it writes a breakdown `at: "after_loop"` (the first
forward of that evaluation, before it allocates anything), with the storages of the forward's own arguments
counted apart (`inputs`), and the variables of the user's frames that keep the largest lines' tensors (Note
[Which variable keeps them] in _sites.py). What other live tensors hold there beyond the inputs was left
by the code before: the kept_after_loop finding weighs it. At most MAX_AFTER_LOOP per process; an evaluation
every step costs a breakdown every step up to that.
"""

import os
import sys
import time

from .. import _breakdown
from .._hooks import safely

WHO = "probe.memory"
GROWTH = 1 << 20              # Note [The growth breakdown]
MAX_GROWTH_BREAKDOWNS = 64
MAX_AFTER_LOOP = 16           # Note [After the loop]


class Memory:
    def __init__(self, ctx):
        self.ctx = ctx
        self.peak = None                 # the last peak breakdown gathered, not written yet
        self.last_held = None            # allocated at the last step's end (virtual device)
        self.growth_written = 0          # breakdowns written because it grew
        self.after_loop_written = 0      # Note [After the loop]
        self.trained_since_look = False  # a training step completed since the last after-loop look
        self.history = False             # PyTorch's memory history is being recorded (OOMH_SNAPSHOT)
        self.snapshot_done = False
        # Memory at each step's end, and breakdowns where it grew: only where a check reads them (Note [A probe
        # that pays for what is checked] in include/oomharness/evidence.h). At OOMs and peaks, always.
        self.per_step = ctx.settings.wants("memory")
        if not self.per_step:
            self.on_step_fields = None  # Note [The hook bus]: not called at each step

    def install(self, torch):
        self.ctx.patches.replace(WHO, "torch.cuda", "empty_cache", self._empty_cache)
        self.ctx.patches.replace(WHO, "torch.cuda.memory", "empty_cache", self._empty_cache)

    # ---- figures
    def memory_fields(self):
        """allocated and reserved bytes, when CUDA is in use (never initialises it): Note [Memory figures per
        step]."""
        ctx = self.ctx
        torch = ctx.torch
        try:
            if torch is not None and torch.cuda.is_initialized():
                raw = getattr(torch._C, "_cuda_memoryStats", None) if ctx.device is None else None
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
            stats = self.ctx.torch.cuda.memory_stats()
            reserved = int(stats.get("reserved_bytes.all.current", fields["reserved"]))
            in_use = max(int(stats.get("active_bytes.all.current", 0)), fields["allocated"])
            pinned = int(stats.get("inactive_split_bytes.all.current", 0))
            fields["freeable"] = max(0, reserved - in_use - pinned)
        except Exception:
            pass
        return fields

    def _empty_cache(self, original):
        # What the cache held free before the call is recorded with it: empty_cache_retry tells a cache that
        # was already empty (the allocator gives its free blocks back itself before it raises) from one the
        # call could not shrink (docs/events.md).
        ctx = self.ctx

        def empty_cache():
            before = safely(self.cache_fields) or {}
            result = original()
            after = safely(self.memory_fields) or {}
            if ctx.block is not None:
                safely(ctx.block.count_empty_cache)
            fields = {"reserved_before": before.get("reserved", 0), "reserved_after": after.get("reserved", 0)}
            if "allocated" in before:
                fields["allocated_before"] = before["allocated"]
            if "freeable" in before:
                fields["freeable_before"] = before["freeable"]
            safely(ctx.emit, "empty_cache", **fields)
            return result
        return empty_cache

    def report(self, allocated=None, reserved=None):
        """probe.memory(): the figures now, or the code's."""
        fields = self.memory_fields()
        if allocated is not None:
            fields["allocated"] = int(allocated)
        if reserved is not None:
            fields["reserved"] = int(reserved)
        self.ctx.emit("memory", **fields)

    # ---- breakdowns
    def breakdown(self, inputs=(), frame=None, oom=False):
        """The breakdown now (_breakdown.py), or None when no device memory is in use. `inputs`: a forward's
        arguments, counted apart; `frame`: where to look for the variables that keep tensors; `oom`: at an
        OOM (memory_summary() is added, and on a GPU the memory history is read when recorded)."""
        ctx = self.ctx
        torch = ctx.torch
        t0 = time.perf_counter()
        models, optimizers = list(ctx.seen.models), list(ctx.seen.optimizers)
        if ctx.device is not None:
            fields = _breakdown.virtual(ctx.device, models, optimizers, inputs, frame)
        elif torch is None or not torch.cuda.is_initialized():
            return None
        else:
            fields = _breakdown.gpu(torch, models, optimizers, inputs)
            if oom and self.history:
                fields.update(_breakdown.gpu_history(torch))
        if torch is not None:
            fields.update(_breakdown.allocator_fields(torch, oom))
        fields["gather_s"] = round(time.perf_counter() - t0, 6)  # what gathering it cost (issue 14's target: < 1 s)
        return fields

    def where(self):
        clock = self.ctx.clock
        return {"step": clock.current_step(), "phase": clock.phase, "batch_size": clock.batch_size}

    def emit_breakdown(self, at, fields):
        self.ctx.emit("memory_breakdown", **dict(fields, at=at, **self.where()))

    def flush_peak(self):
        if self.peak is not None:
            fields, self.peak = self.peak, None
            self.ctx.emit("memory_breakdown", at="peak", **fields)

    def on_device_peak(self):
        """Note [The peak breakdown]."""
        if self.ctx.clock.started:
            fields = self.breakdown()
            if fields is not None:
                self.peak = dict(fields, **self.where())

    def on_step_fields(self, fields, batch_size, loss):
        if self.per_step:
            fields.update(self.memory_fields())

    def on_step_done(self, fields):
        self.trained_since_look = True
        if self.peak is not None:
            self.flush_peak()
        if self.per_step and self.ctx.device is not None and "allocated" in fields:
            self.held_grew(fields["allocated"], sys._getframe())

    def held_grew(self, held, frame):
        """Note [The growth breakdown]: held memory at a step's end grew by more than GROWTH."""
        last, self.last_held = self.last_held, held
        if last is None or held - last <= GROWTH or self.growth_written >= MAX_GROWTH_BREAKDOWNS:
            return
        self.growth_written += 1
        fields = self.breakdown(frame=frame)
        if fields is not None:
            self.emit_breakdown("step", fields)

    def on_evaluation_starts(self, args, kwargs, site, frame):
        """Note [After the loop]: an evaluation starts after training steps."""
        if not self.trained_since_look or self.after_loop_written >= MAX_AFTER_LOOP:
            return
        self.trained_since_look = False
        self.after_loop_written += 1
        fields = self.breakdown(inputs=(args, kwargs or {}), frame=frame)
        if fields is not None:
            self.emit_breakdown("after_loop", dict(fields, completed=self.ctx.clock.completed, site=site))

    def on_oom_seen(self, fields):
        bd = safely(self.breakdown, oom=True)
        if bd is not None:
            safely(self.emit_breakdown, "oom", bd)
        self.take_snapshot()

    def on_exit(self, uncaught):
        safely(self.flush_peak)

    # ---- the memory history (OOMH_SNAPSHOT)
    def on_cuda_init(self):
        if not self.ctx.settings.snapshot_dir:
            return
        # Python stacks only: C++ stacks ("all", 2.x's default) cost far more per allocation and name no line
        # of the user's (tests/gpu/explain_check.py measures the per-step cost with and without).
        record = self.ctx.torch.cuda.memory._record_memory_history
        for call in (lambda: record("all", stacks="python", max_entries=100000),
                     lambda: record(max_entries=100000),
                     lambda: record(True, trace_alloc_max_entries=100000, trace_alloc_record_context=True),
                     lambda: record(True)):  # 1.13: the blocks' stacks, no trace
            try:
                call()
                self.history = True
                break
            except TypeError:
                continue
            except Exception:
                break

    def take_snapshot(self):
        ctx = self.ctx
        if not ctx.settings.snapshot_dir or self.snapshot_done or ctx.torch is None:
            return
        self.snapshot_done = True
        try:
            memory = ctx.torch.cuda.memory
            os.makedirs(ctx.settings.snapshot_dir, exist_ok=True)
            path = os.path.join(ctx.settings.snapshot_dir,
                                "snapshot-%d-step%d.pickle" % (os.getpid(), ctx.clock.current_step()))
            if hasattr(memory, "_dump_snapshot"):
                memory._dump_snapshot(path)
            else:
                import pickle
                with open(path, "wb") as f:
                    pickle.dump(memory._snapshot(), f)
            ctx.emit("snapshot", path=path)
        except Exception:
            pass
