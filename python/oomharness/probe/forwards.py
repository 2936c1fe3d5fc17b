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
step for a transformer). So where no part needs every forward (no batches, data, evaluation, checkpoints or
phases to gather: Note [A probe that pays for what is checked] in include/oomharness/evidence.h), the part is
lean: it hears only the first training forward of a model, which starts training (the block's step becomes
the first step, so that a `step: 1` fault fires in its forward), and then takes its hooks out. The steps part
sees every step from the optimizer's hooks, and the OOMs part every OOM from the allocator's observer.
"""

import sys
import weakref

from .._hooks import safely
from . import evidence

WHO = "probe.forwards"


# The kinds of evidence that need every top-level forward (the parts that hear the `forward` hook).
EVERY_FORWARD = ("batches", "data", "evaluation", "checkpoints", "phases")


class Forwards:
    def __init__(self, ctx):
        self.ctx = ctx
        self.depth = 0                            # module call depth
        self.top = None                           # the top-level module of the forward in progress
        self.is_model = weakref.WeakKeyDictionary()
        self.lean = not ctx.settings.wants(*EVERY_FORWARD)
        self.handles = []

    def install(self, torch):
        module_mod = torch.nn.modules.module
        handles = self.handles

        if self.lean:
            def first_forward(module, args, kwargs=None):
                safely(self.first_forward, module)
                return None
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

    def first_forward(self, module):
        """Lean: the first training forward of a model starts training; then no forward is heard again."""
        if not (self.model_like(module) and module.training and self.ctx.torch.is_grad_enabled()):
            return
        self.ctx.seen.models.add(module)
        self.ctx.hooks.call("forward", module, (), None, True, None)
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def model_like(self, module):
        """A module whose forward is a model's: it has parameters and is not a loss."""
        known = self.is_model.get(module)
        if known is None:
            loss_type = getattr(self.ctx.torch.nn.modules.loss, "_Loss", ())
            known = not isinstance(module, loss_type) and next(module.parameters(), None) is not None
            try:
                self.is_model[module] = known
            except TypeError:
                pass
        return known

    def pre(self, module, args, kwargs, frame):
        if self.depth > 0 and module is not self.top:
            self.depth += 1
            return
        if not self.model_like(module):
            self.depth += 1
            return
        self.depth = 1
        if module is not self.top:  # a WeakSet look-up costs a weak reference: only when the model changes
            self.ctx.seen.models.add(module)
        self.top = module
        torch = self.ctx.torch
        training = module.training and torch.is_grad_enabled()
        if kwargs is None and not evidence.has_tensor(torch, args):
            kwargs = evidence.call_kwargs(module, frame)  # Note [Keyword inputs] (evidence.py)
        self.ctx.hooks.call("forward", module, args, kwargs, training, frame)

    def post(self, module, rest):
        if self.depth > 0:
            self.depth -= 1
        if self.depth == 0 and module is self.top:
            result = rest[-1] if rest else None
            exc = sys.exc_info()[1]
            # With always_call, the hook also runs when forward raised: the OOM left the top-level forward.
            if result is None and exc is not None:
                self.ctx.hooks.call("exception", exc)

    # Note [Which forward is a model's]: the depth starts again.
    def on_backward(self, tensors):
        self.depth = 0

    def on_optimizer_begins(self, optimizer):
        self.depth = 0

    def on_step_done(self, fields):
        self.depth = 0

    def on_oom_seen(self, fields):
        self.depth = 0
