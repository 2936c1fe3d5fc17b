"""The probe's checkpoints part: torch.save and torch.load with what they saved or loaded (Note [A checkpoint is
its content] in evidence.py), and whether a model's state then equals what was loaded (`model_state`)."""

import importlib
import os
import weakref

from .._hooks import safely
from .._patches import resolve
from . import digests, evidence

WHO = "probe.checkpoints"


# Note [A step is what the optimizer did]
# A resumed attempt must number its steps from where the checkpoint left off, or it "stops at step 4 of 10"
# having trained to step 10. Public code keeps the counter under many names (nanoGPT's `iter_num`,
# DeepSpeed's `global_steps`, fairseq's `num_updates`), in a side file (Hugging Face's trainer_state.json,
# a text file) or in a torch.distributed.checkpoint folder, and the probe only read `step`/`global_step`
# (issue 42, class 9). So the step a process starts at comes from evidence, in this order:
#   - the loaded object's counter, under one of COUNTER_KEYS, at its top level or one level down;
#   - the optimizer's own count: Optimizer.load_state_dict gives each parameter's state its `step` (Adam,
#     AdamW, RMSprop, Adagrad, NAdam, RAdam, Adamax, ...: the optimizer steps taken), whatever file or
#     folder it came from; the largest is the steps done, in the probe's own count (optimizer steps).
# The optimizer's count moves it only before the process completed a step of its own. A loaded counter below
# the count an optimizer restored in this process before its first step is not the training step, and is not
# taken: Accelerate's random_states_0.pkl keeps `step`, its gradient-accumulation position (0), and was loaded
# after optimizer.bin had said 4 steps were done. A save is read the same way: a counter below the count of an
# optimizer state this process saved at the same point (no step completed between: one checkpoint's files) is
# not the training step either, and neither is one more than one below the count of this process's own
# optimizers (a counter from 0 names the last step done, one below): the save is then numbered by the probe's
# own count. Accelerate's save_state writes optimizer.bin and then random_states_0.pkl; on 2 H200s with DDP,
# checkpoint_resume took the newest file, random_states_0.pkl, for "the checkpoint saved at step 0" and failed
# a resume at step 5 ("expected step 1"); rank 1, which writes only random_states_1.pkl, "lost 4 steps". A
# counter in the same object as the optimizer's state is the checkpoint's own, and is taken as it is. Before both comes the content itself: a process that loads
# what an earlier attempt of the job saved starts where that attempt's count was at the save (Note [A resume
# numbered by what it loaded] in runner/src/exec/launch.h), which also covers a counter kept in a side file
# beside an optimizer that keeps none (SGD). Not seen: such a program's first attempt, loading a checkpoint
# no attempt of this job saved: its steps are numbered from 1 again, and `completes` says so.
COUNTER_KEYS = ("step", "global_step", "global_steps", "iter_num", "iteration", "iterations", "num_updates",
                "train_step", "current_step", "steps", "iter", "it")


def _counter(v):
    if v is None or isinstance(v, bool):
        return None
    try:
        n = int(v.item() if hasattr(v, "item") else v)
    except Exception:
        return None
    return n if n >= 0 else None


def checkpoint_step(obj):
    """The step a checkpoint says it holds: its counter under one of COUNTER_KEYS (Note [A step is what the
    optimizer did]), at its top level or in a dict one level down."""
    if not isinstance(obj, dict):
        return None
    for scope in [obj] + [v for v in obj.values() if isinstance(v, dict)]:
        for key in COUNTER_KEYS:
            n = _counter(scope.get(key)) if key in scope else None
            if n is not None:
                return n
    return None


def saved_optimizer_steps(obj):
    """The optimizer steps an optimizer's state_dict (at the top of a saved object, or one level down) says
    were taken; None when it holds none."""
    if not isinstance(obj, dict):
        return None
    best = None
    for scope in [obj] + [v for v in list(obj.values())[:64] if isinstance(v, dict)]:
        state = scope.get("state")
        if not isinstance(state, dict) or "param_groups" not in scope:
            continue
        for v in list(state.values())[:4096]:
            n = _counter(v.get("step")) if isinstance(v, dict) and "step" in v else None
            if n is not None and (best is None or n > best):
                best = n
    return best


def optimizer_steps(optimizer):
    """The optimizer steps an optimizer's state says were taken: the largest `step` of its parameters' state;
    None when it keeps none (Note [A step is what the optimizer did])."""
    best = None
    for state in list(getattr(optimizer, "state", {}).values())[:4096]:
        if isinstance(state, dict) and "step" in state:
            n = _counter(state["step"])
            if n is not None and (best is None or n > best):
                best = n
    return best


# Note [What a resume restored]
# A resume restores more than the weights: the optimizer's state (Adam's moments: without them it restarts
# from zero and the loss jumps), the LR scheduler, the GradScaler's scale, the RNG states and the data
# position (issue 42, class 5; the resume bugs Hugging Face's trackers see most). The probe notes which of
# them the process restored before its first training forward: `optimizer` (Optimizer.load_state_dict with
# a non-empty state), `scheduler` (a learning-rate scheduler's load_state_dict), `scaler` (GradScaler's),
# `rng` (torch's, CUDA's, Python's or NumPy's generator state set), and reports them with `model_state`
# (`restored`), beside the weights it compares there. A save reports whether the job's optimizer held
# state (`optimizer_state`): what a resume of that save has to restore. The data position is judged by the
# policy from the data (Note [A step is its data]).
RESTORED = ("optimizer", "scheduler", "scaler", "rng")


def path_of(f):
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.fsdecode(os.fspath(f))
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else "<stream>"


class Checkpoints:
    def __init__(self, ctx):
        self.ctx = ctx
        self.loaded = []                        # (digest, tensor fingerprints, key paths) of each torch.load, in order
        self.state_checked = weakref.WeakSet()  # models compared with the loaded state since the last load
        self.quiet = 0                          # > 0: inside probe.quiet(): the caller reports the save or load
        self.quiet_content = None               # what a torch.save/load inside quiet() saw, for the caller's report
        self.restored = []                      # Note [What a resume restored], in the order seen
        self.saved_optimizer = None             # (completed, its count): the last optimizer state saved
        self.optimizer_steps = None             # the optimizer's count at its load (Note [A step is what the optimizer did])
        self.stepped = False                    # this process completed a step
        self.in_dcp = 0                         # > 0: inside a DCP save or load (Note [A DCP checkpoint is one checkpoint])

    def install(self, torch):
        patches = self.ctx.patches
        patches.replace(WHO, "torch", "save", self._save)
        patches.replace(WHO, "torch", "load", self._load)
        # Note [What a resume restored]: the load_state_dict of each class that defines one.
        patches.replace(WHO, "torch.optim.Optimizer", "load_state_dict", self._restoring("optimizer"))
        sched = importlib.import_module("torch.optim.lr_scheduler")
        for name in sorted(vars(sched)):
            cls = getattr(sched, name)
            if isinstance(cls, type) and "load_state_dict" in vars(cls) and cls.__module__ == sched.__name__:
                patches.replace_in(WHO, "torch.optim.lr_scheduler.*", cls, "load_state_dict", self._restoring("scheduler"))
        for where in ("torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.GradScaler"):
            cls = resolve(where)
            if isinstance(cls, type) and "load_state_dict" in vars(cls):
                patches.replace(WHO, where, "load_state_dict", self._restoring("scaler"))
        for where, name in (("torch", "set_rng_state"), ("torch.random", "set_rng_state"), ("random", "setstate")):
            patches.replace(WHO, where, name, self._restoring("rng"))
        patches.when_imported(WHO, "torch.distributed.checkpoint", self._install_dcp)

    # Note [A DCP checkpoint is one checkpoint]
    # torch.distributed.checkpoint (DCP) saves a state dict as a folder: `dcp.save(state_dict, checkpoint_id=
    # path)` calls state_dict() on each Stateful value (an optimizer container, a data loader, a train state)
    # and writes every item through torch.save on a stream, one per item, and `dcp.load` reads them back into
    # the given state dict's tensors and calls load_state_dict on its Stateful values. torchtitan checkpoints
    # so (its CheckpointManager, every `--checkpoint.interval` steps into step-N): the probe saw 1,474 saves and
    # 737 loads of "<stream>" in one resume, none of which was the checkpoint, and checkpoint_resume found that
    # the resumed attempt "loaded no checkpoint". A DCP save or load is one checkpoint_save or checkpoint_load
    # here, of the checkpoint's folder, its content the state dict's tensors (each Stateful value's state_dict()
    # taken, a DTensor as its local shard: what this rank holds): read before the save, and after the load,
    # where the tensors hold what was loaded. Only the tensors: a data loader's state is pickled bytes made
    # afresh at each state_dict() call. The torch.save and torch.load calls inside are not reported. The
    # replacements go in once the job imports torch.distributed.checkpoint (Note [A module patched once the
    # job imports it] in _patches.py): code that calls the functions through state_dict_saver or
    # state_dict_loader, or dcp.async_save (whose items a thread writes), is not seen so.
    def _install_dcp(self):
        patches = self.ctx.patches
        patches.replace(WHO, "torch.distributed.checkpoint", "save", self._dcp("save"))
        patches.replace(WHO, "torch.distributed.checkpoint", "load", self._dcp("load"))

    def _dcp(self, kind):
        def wrap(original):
            def run(state_dict, *args, **kwargs):
                self.in_dcp += 1
                try:  # the state dicts taken in the checkpoint phase too (Note [An optimizer inside another's step])
                    before = safely(self.dcp_content, state_dict) if kind == "save" else None
                    result = original(state_dict, *args, **kwargs)
                    return result, before or safely(self.dcp_content, state_dict)
                finally:
                    self.in_dcp -= 1

            def call(state_dict, *args, **kwargs):
                result, content = self._in_checkpoint_phase(run, state_dict, *args, **kwargs)
                # dcp.save and dcp.load take everything but the state dict by keyword (PyTorch 2.2 and later)
                io = kwargs.get("storage_writer" if kind == "save" else "storage_reader")
                where = kwargs.get("checkpoint_id") or getattr(io, "path", None) or "<dcp>"
                if content is not None:
                    safely(self.saved if kind == "save" else self.loaded_from, content[1], where, content[0])
                return result
            return call
        return wrap

    def dcp_content(self, state_dict):
        """(the state dict with each Stateful value's state_dict(), {key path: tensor}): Note [A DCP checkpoint is
        one checkpoint]."""
        torch = self.ctx.torch
        resolved = {}
        for k, v in (state_dict.items() if isinstance(state_dict, dict) else ()):
            if not isinstance(v, torch.Tensor) and callable(getattr(v, "state_dict", None)) \
                    and callable(getattr(v, "load_state_dict", None)):
                v = v.state_dict()
            resolved[k] = v
        tensors = {}
        for path, leaf in digests.walk_state(torch, resolved):
            if isinstance(leaf, torch.Tensor):
                local = getattr(leaf, "to_local", None)
                tensors[path] = local() if callable(local) else leaf
        return resolved, tensors

    def _restoring(self, part):
        def wrap(original):
            def load_state_dict(*args, **kwargs):
                result = original(*args, **kwargs)
                safely(self.restoring, part, args[0] if args else None)
                return result
            return load_state_dict
        return wrap

    def restoring(self, part, owner):
        """A part of the training state was restored (Note [What a resume restored]): noted before the process's
        first step only (activation checkpointing sets the RNG state at every step)."""
        if self.stepped:
            return
        if part == "optimizer":
            steps = optimizer_steps(owner)
            if not getattr(owner, "state", None):
                return  # an empty state loaded: nothing restored
            if steps is not None:
                self.optimizer_steps = steps if self.optimizer_steps is None else max(self.optimizer_steps, steps)
                self.resume_at(steps)
        if part not in self.restored:
            self.restored.append(part)

    def resume_at(self, done):
        """Note [A step is what the optimizer did]: `done` optimizer steps were taken before this process."""
        clock = self.ctx.clock
        if self.stepped or done <= clock.completed:
            return
        clock.completed = done
        if clock.started:
            safely(clock.set_step_in_progress, clock.number(done + 1))

    def on_step_done(self, fields):
        self.stepped = True

    def _in_checkpoint_phase(self, call, *args, **kwargs):
        """Runs torch.save/load in the checkpoint phase (an OOM there is noted), then restores the phase."""
        clock = self.ctx.clock
        previous = clock.phase
        safely(clock.set_phase, "checkpoint")
        try:
            return call(*args, **kwargs)
        except BaseException as e:
            self.ctx.hooks.call("exception", e)
            raise
        finally:
            safely(clock.set_phase, previous)

    def digest_of(self, obj):
        with evidence.off_books(self.ctx.device):
            return evidence.state_digest(self.ctx.torch, obj)

    def _save(self, original):
        def save(obj, f, *args, **kwargs):
            result = self._in_checkpoint_phase(original, obj, f, *args, **kwargs)
            safely(self.saved, obj, f)
            return result
        return save

    def saved(self, obj, f, whole=None):
        """A save of `obj` to f; `whole`: the object whose counter names the step, where obj is only its content
        (a DCP save's tensors)."""
        if self.in_dcp:
            return  # an item of a DCP save: Note [A DCP checkpoint is one checkpoint]
        clock = self.ctx.clock
        content = safely(self.digest_of, obj)
        fields = {"completed": clock.completed}
        if content is not None:
            fields.update(digest=digests.hex64(content[0]), tensors=content[2])
        held = safely(self.optimizer_state_held)
        if held is not None:
            fields["optimizer_state"] = held
        if self.quiet:  # the caller reports it (checkpoint_saved), with what was written
            self.quiet_content = fields
        else:
            obj = obj if whole is None else whole
            s = checkpoint_step(obj)
            held = saved_optimizer_steps(obj)
            if held is not None:
                self.saved_optimizer = (clock.completed, held)
            elif s is not None and self._below_the_optimizers(s):
                s = None  # Note [A step is what the optimizer did]: not the training step
            self.ctx.emit("checkpoint_save", path=path_of(f), step=clock.number(clock.completed) if s is None else s,
                          **fields)

    def _below_the_optimizers(self, s):
        """Whether a saved counter `s` is below what the optimizers say was done: below the count of an
        optimizer state this process saved at the same point, or more than one below its own optimizers'
        count (a counter from 0 names the last step done, one below the count)."""
        clock = self.ctx.clock
        if self.saved_optimizer and self.saved_optimizer[0] == clock.completed and s < self.saved_optimizer[1]:
            return True
        counts = [n for n in (optimizer_steps(o) for o in list(self.ctx.seen.optimizers)) if n is not None]
        return bool(counts) and s + 1 < max(counts)

    def optimizer_state_held(self):
        """Whether an optimizer of the job holds state (Note [What a resume restored]); None: none seen."""
        optimizers = list(self.ctx.seen.optimizers)
        if not optimizers:
            return None
        return any(bool(getattr(o, "state", None)) for o in optimizers)

    def _load(self, original):
        def load(f, *args, **kwargs):
            obj = self._in_checkpoint_phase(original, f, *args, **kwargs)
            safely(self.loaded_from, obj, f)
            return obj
        return load

    def loaded_from(self, obj, f, whole=None):
        if self.in_dcp:
            return  # an item of a DCP load: Note [A DCP checkpoint is one checkpoint]
        fields = {}
        content = safely(self.digest_of, obj)
        if content is not None:
            fields.update(digest=digests.hex64(content[0]), tensors=content[2])
            self.loaded.append((content[0], content[1], content[3]))
            self.state_checked = weakref.WeakSet()
        if self.quiet:
            self.quiet_content = fields
            return
        s = checkpoint_step(obj if whole is None else whole)
        if s is not None and not self.stepped and self.optimizer_steps is not None and s < self.optimizer_steps:
            s = None  # Note [A step is what the optimizer did]: not the training step
        saved = None if self.stepped else self.ctx.settings.saved_steps.get(fields.get("digest"))
        if saved is not None:
            # Note [A resume numbered by what it loaded]: content an earlier attempt saved with `saved` steps
            # done, in the probe's own count; it outranks the object's counter, which is the program's.
            s = self.ctx.clock.number(saved)
        if s is not None:
            self.report_loaded(path_of(f), s, **fields)
        else:
            self.ctx.emit("checkpoint_load", path=path_of(f), **fields)

    # ---- the explicit API (probe.checkpoint_saved / checkpoint_loaded)
    def report_saved(self, path, step):
        fields, self.quiet_content = self.quiet_content or {"completed": self.ctx.clock.completed}, None
        self.ctx.emit("checkpoint_save", path=os.fsdecode(os.fspath(path)), step=int(step), **fields)

    def report_loaded(self, path, step, **fields):
        """A checkpoint of step `step` (the last step it holds, in the job's numbering) was loaded: step
        counting goes on from there."""
        ctx = self.ctx
        if not fields and self.quiet_content:
            fields = self.quiet_content
        self.quiet_content = None
        ctx.clock.completed = ctx.clock.done_after(int(step))
        if ctx.clock.started:
            safely(ctx.clock.set_step_in_progress, int(step) + 1)
        ctx.emit("checkpoint_load", path=os.fsdecode(os.fspath(path)), step=int(step), **fields)

    # ---- the model's state after a load
    def on_forward(self, module, args, kwargs, training, frame):
        if training and self.loaded and module not in self.state_checked:
            self.check_state(module)

    def check_state(self, module):
        """The first training forward of `module` after a load: does its state equal what was loaded?"""
        self.state_checked.add(module)
        with evidence.off_books(self.ctx.device):
            fields = evidence.model_state(self.ctx.torch, module, self.loaded)
        fields["restored"] = list(self.restored)
        if self.optimizer_steps is not None:
            fields["optimizer_steps"] = self.optimizer_steps
        self.ctx.emit("model_state", step=self.ctx.clock.current_step(), model=type(module).__name__, **fields)
