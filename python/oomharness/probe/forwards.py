"""The probe's forwards part: finds, among all module calls, the top-level forwards of the job's models, and
tells the other parts of each (the `forward` hook), with its keyword inputs.

Note [Which forward is a model's]
PyTorch's global forward hooks run for every module call. A call at depth 0 of a module that has parameters
and is not a loss is a model's top-level forward; the calls inside it only move the depth. The top module
seen again at depth > 0 means an exception (an OOM in forward) left the depth count stale on a PyTorch
without always-called forward hooks; a backward, an optimizer step, a step's end and an OOM reset it. With
always_call (PyTorch >= 2.1) the forward hook also runs when forward raised: the OOM left the top-level
forward, and the `exception` hook tells the OOMs part.
Global hooks send every module call through PyTorch's slow path (a few microseconds per call: hundreds per
step for a transformer). So where no part needs every module's forward (no data, checkpoints or phases to
gather: Note [A probe that pays for what is checked] in include/oomharness/evidence.h), the part is lean: the
global hooks hear only the first training forward of a model, which starts training (the block's step becomes
the first step, so that a `step: 1` fault fires in its forward), and are then taken out; from then on only that
model's own calls are heard, through its class's __call__ (Note [One model's forwards]). The steps part sees
every step from the optimizer's hooks, and the OOMs part every OOM from the allocator's observer.

Note [One model's forwards]
The lean part still tells the batches and evaluation parts of each forward of the model that trained (the
findings read both on every job: Note [Findings on every job] in policies/findings.h), at the cost of one
Python call per forward of that model. Not with a hook on the module: a module's hooks are in its __dict__,
so torch.save(model) of the whole module (YOLO's checkpoints) would try to pickle them, and copy.deepcopy
(an EMA copy) would copy them. The model's class gets a __call__ that hears calls of that one module object
and passes every other straight on; uninstalling puts the class back. What the lean part does not hear: a
second model's forwards (a GAN's discriminator, a teacher), and an evaluation of a model that never trained.

Note [A model on the meta device]
A model whose parameters are on the meta device computes nothing: code builds one to count FLOPs or infer
shapes. litgpt's fit() runs a meta copy of its model forward and backward (lightning's measure_flops) after
a resume's load and before the first step; taken for a model's forward, it started the step, its meta input
counted as the step's data (a [4, 512] "batch" beside the real [4, 128] one, so the resumed step's data
matched nothing trained before), and its state matched no loaded checkpoint. Its forward is not a model's;
the answer is not remembered, since a model built on meta and then materialized (`to_empty`, as torchtitan
does) is one from then on.

Note [A part of a model called on its own]
A loss can call a part of the model itself: torchtitan's chunked cross-entropy (components/loss.py) applies the
model's output projection (`lm_head`) to the hidden states the model returned, in 8 chunks, after the model's
forward has ended. At depth 0, with parameters, each call was taken for a model's forward: a step of 2 samples
counted 18, and the data of a step no longer equalled the data of the same batch met by an OOM in the model's
forward, so a resume that went on at the right batch was "inconclusive". A module that is a submodule of a
model whose training forward ran in this step (since the last step ended) is part of that model's work, not a
forward of its own. Only this step's: a LightningModule whose forward ran once (a sanity check, a batch size
finder) and whose training_step then calls its network directly still has that network's forwards as the
model's. A second model that is not part of the first (a GAN's discriminator, a teacher) stays a model.

Note [A forward recomputed in backward]
Activation checkpointing (torch.utils.checkpoint, Hugging Face's gradient_checkpointing, which TRL's SFTConfig
turns on by default) runs each checkpointed block's forward again while autograd executes the backward. The
depth is 0 then (a backward resets it) and the block has parameters, so it was taken for a model's top-level
forward: TRL's step of 8 samples counted 40 (the model's forward and four decoder layers again), and the data
of a step no longer equalled the data of the same batch met by an OOM in its forward, so a resume that went
on exactly where it stopped was "inconclusive". A forward that runs inside a backward (autograd's graph task
is set on that thread: torch._C._current_graph_task_id() is not -1, with the reentrant checkpoint and the
non-reentrant one alike) is a recomputation of data the step already has, never a forward of its own.
"""

import sys
import weakref

from .._hooks import safely
from . import evidence

WHO = "probe.forwards"


# The kinds of evidence that need every module's forward (global hooks): Note [One model's forwards] is enough
# for the others.
EVERY_FORWARD = ("data", "checkpoints", "phases")
_MISSING = object()


class Forwards:
    def __init__(self, ctx):
        self.ctx = ctx
        self.depth = 0                            # module call depth
        self.top = None                           # the top-level module of the forward in progress
        self.is_model = weakref.WeakKeyDictionary()
        self.parts_of = weakref.WeakKeyDictionary()  # a model that trained -> id()s of its modules
        self.this_step = []                       # weak references to the models whose training forward ran this step
        self.lean = not ctx.settings.wants(*EVERY_FORWARD)
        if self.lean:
            # The model's own __call__ starts the depth again after each of its forwards (watch()), which are
            # all the lean part hears: nothing to do at each step's backward, optimizer step and end (Note [The
            # hook bus] in _hooks.py).
            self.on_backward = self.on_optimizer_begins = self.on_step_done = None
        self.results_wanted = ctx.settings.wants("data")  # forward_done: only the batches part's data reads it
        self.handles = []
        self.graph_task = None                    # torch._C._current_graph_task_id (Note [A forward recomputed in backward])

    def install(self, torch):
        self.graph_task = getattr(torch._C, "_current_graph_task_id", None)
        module_mod = torch.nn.modules.module
        handles = self.handles

        if self.lean:
            def first_forward(module, args, kwargs=None):
                safely(self.first_forward, module, args, kwargs, sys._getframe(1))
                return None
            try:
                handles.append(module_mod.register_module_forward_pre_hook(first_forward, with_kwargs=True))
            except TypeError:
                handles.append(module_mod.register_module_forward_pre_hook(first_forward))
            self.ctx.patches.registered(WHO, "the global module forward pre-hook and forward hook",
                                        lambda: [h.remove() for h in handles])
            return

        def pre_hook(module, args, kwargs=None):
            safely(self.pre, module, args, kwargs, sys._getframe(1))
            return None

        def post_hook(module, args, *rest):
            safely(self.post, module, rest)
            return None

        try:  # PyTorch >= 2.0 gives the hooks the keyword arguments too; >= 2.1 can call them when forward raises
            handles.append(module_mod.register_module_forward_pre_hook(pre_hook, with_kwargs=True))
        except TypeError:
            handles.append(module_mod.register_module_forward_pre_hook(pre_hook))
        for kwargs in ({"with_kwargs": True, "always_call": True}, {"always_call": True}, {}):
            try:
                handles.append(module_mod.register_module_forward_hook(post_hook, **kwargs))
                break
            except TypeError:
                continue
        self.ctx.patches.registered(WHO, "the global module forward pre-hook and forward hook",
                                    lambda: [h.remove() for h in handles])

    def first_forward(self, module, args, kwargs, frame):
        """Lean: the first training forward of a model starts training; from then on only that model's calls are
        heard (Note [One model's forwards])."""
        if not (self.model_like(module) and module.training and self.ctx.torch.is_grad_enabled()):
            return
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.watch(module)
        self.pre(module, args, kwargs, frame)

    def watch(self, module):
        """Note [One model's forwards]: the class's __call__ hears `module`'s calls from now on."""
        cls = type(module)
        watched = weakref.ref(module)
        inherited = cls.__call__
        own = cls.__dict__.get("__call__", _MISSING)
        forwards = self

        def __call__(mod, *args, **kwargs):
            if mod is not watched():
                return inherited(mod, *args, **kwargs)
            safely(forwards.pre, mod, args, kwargs, sys._getframe(1))
            try:
                result = inherited(mod, *args, **kwargs)
            except BaseException as exc:
                forwards.depth = 0
                safely(forwards.ctx.hooks.call, "exception", exc)
                raise
            forwards.depth = 0
            if forwards.results_wanted:
                safely(forwards.ctx.hooks.call, "forward_done", mod, result)
            return result

        def restore():
            if own is _MISSING:
                if cls.__dict__.get("__call__") is __call__:
                    delattr(cls, "__call__")
            else:
                setattr(cls, "__call__", own)

        try:
            cls.__call__ = __call__
        except (TypeError, AttributeError):
            return  # a class that cannot take it (a C extension type): the first forward only
        self.ctx.patches.registered(WHO, "the training model's class's __call__ (Note [One model's forwards])", restore)

    def model_like(self, module):
        """A module whose forward is a model's: it has parameters, not on the meta device (Note [A model on the
        meta device]), and is not a loss."""
        known = self.is_model.get(module)
        if known is None:
            loss_type = getattr(self.ctx.torch.nn.modules.loss, "_Loss", ())
            first = next(module.parameters(), None)
            if first is not None and first.device.type == "meta":
                return False  # not remembered: a model built on meta and then materialized (to_empty) is one
            known = not isinstance(module, loss_type) and first is not None
            try:
                self.is_model[module] = known
            except TypeError:
                pass
        return known

    def pre(self, module, args, kwargs, frame):
        if self.depth > 0 and module is not self.top:
            self.depth += 1
            return
        # The model of the last forward was a model's then (model_like): a WeakKeyDictionary look-up costs a weak
        # reference, once per model.
        if (module is not self.top and (not self.model_like(module) or self.part_of_a_model(module))) \
                or self.recomputing():
            self.depth += 1
            return
        self.depth = 1
        if module is not self.top:  # a WeakSet look-up costs a weak reference: only when the model changes
            self.ctx.seen.models.add(module)
        self.top = module
        torch = self.ctx.torch
        training = module.training and torch.is_grad_enabled()
        if training and not any(ref() is module for ref in self.this_step):
            self.this_step.append(weakref.ref(module))
        if kwargs is None and not evidence.has_tensor(torch, args):
            kwargs = evidence.call_kwargs(module, frame)  # Note [Keyword inputs] (evidence.py)
        self.ctx.hooks.call("forward", module, args, kwargs, training, frame)

    def part_of_a_model(self, module):
        """Note [A part of a model called on its own]: `module` is a submodule of a model whose training forward ran
        in this step."""
        for ref in self.this_step:
            model = ref()
            if model is None or model is module:
                continue
            parts = self.parts_of.get(model)
            if parts is None:
                parts = {id(m) for m in model.modules()}
                try:
                    self.parts_of[model] = parts
                except TypeError:
                    pass
            if id(module) in parts:
                return True
        return False

    def recomputing(self):
        """Note [A forward recomputed in backward]: this thread is inside a backward."""
        return self.graph_task is not None and self.graph_task() != -1

    def post(self, module, rest):
        if self.depth > 0:
            self.depth -= 1
        if self.depth == 0 and module is self.top:
            result = rest[-1] if rest else None
            exc = sys.exc_info()[1]
            # With always_call, the hook also runs when forward raised: the OOM left the top-level forward.
            if result is None and exc is not None:
                self.ctx.hooks.call("exception", exc)
            elif result is not None and self.results_wanted:
                self.ctx.hooks.call("forward_done", module, result)

    # Note [Which forward is a model's]: the depth starts again.
    def on_backward(self, tensors):
        self.depth = 0

    def on_optimizer_begins(self, optimizer):
        self.depth = 0

    def on_step_done(self, fields):
        self.depth = 0
        self.this_step = []

    def on_oom_seen(self, fields):
        self.depth = 0
