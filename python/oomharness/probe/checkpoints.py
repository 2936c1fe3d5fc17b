"""The probe's checkpoints part: torch.save and torch.load with what they saved or loaded (Note [A checkpoint is
its content] in evidence.py), and whether a model's state then equals what was loaded (`model_state`)."""

import os
import weakref

from .._hooks import safely
from . import evidence

WHO = "probe.checkpoints"


def checkpoint_step(obj):
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

    def install(self, torch):
        self.ctx.patches.replace(WHO, "torch", "save", self._save)
        self.ctx.patches.replace(WHO, "torch", "load", self._load)

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

    def saved(self, obj, f):
        clock = self.ctx.clock
        content = safely(self.digest_of, obj)
        fields = {"completed": clock.completed}
        if content is not None:
            fields.update(digest=evidence.hex64(content[0]), tensors=content[2])
        if self.quiet:  # the caller reports it (checkpoint_saved), with what was written
            self.quiet_content = fields
        else:
            s = checkpoint_step(obj)
            self.ctx.emit("checkpoint_save", path=path_of(f), step=clock.number(clock.completed) if s is None else s,
                          **fields)

    def _load(self, original):
        def load(f, *args, **kwargs):
            obj = self._in_checkpoint_phase(original, f, *args, **kwargs)
            safely(self.loaded_from, obj, f)
            return obj
        return load

    def loaded_from(self, obj, f):
        fields = {}
        content = safely(self.digest_of, obj)
        if content is not None:
            fields.update(digest=evidence.hex64(content[0]), tensors=content[2])
            self.loaded.append((content[0], content[1], content[3]))
            self.state_checked = weakref.WeakSet()
        if self.quiet:
            self.quiet_content = fields
            return
        s = checkpoint_step(obj)
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
        self.ctx.emit("model_state", step=self.ctx.clock.current_step(), model=type(module).__name__, **fields)
