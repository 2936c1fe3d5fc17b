"""The probe's gradients part: whether each optimizer step came after the gradients were cleared (the
zero_grad check).

Note [Cleared gradients]
The zero_grad check needs to know, at each optimizer step, whether the gradients were cleared since the
previous one. Three ways of clearing are seen, at a cost of a few attribute reads per step: a call of
Optimizer.zero_grad or Module.zero_grad (wrapped); the first parameter's .grad being a different tensor
than after the previous step (set to None, by hand or by zero_grad(set_to_none=True)); or its version
counter having moved more than the backward passes since then account for (grad.zero_() by hand: each
backward accumulates into an existing gradient once). Not seen: a clearing that leaves the first
parameter's gradient alone. In-place changes of the gradient other than backward's (clip_grad_norm_,
GradScaler.unscale_) also move the counter, so they can hide a missing zero_grad, never invent one.
"""

import sys
import weakref

from .. import _sites

WHO = "probe.grads"


class Grads:
    def __init__(self, ctx):
        self.ctx = ctx
        self.zeroed = False          # zero_grad was called since the last optimizer step
        self.backwards = 0           # backward passes since the last optimizer step
        self.last_grad = None        # (weak parameter, weak gradient, version) after the last step
        self.cleared = None          # this step's answer
        self.step_site = ""          # where optimizer.step() was called when they were not

    def install(self, torch):
        def zero_grad(original):
            def wrapper(owner, *args, **kwargs):
                self.zeroed = True
                result = original(owner, *args, **kwargs)
                self.ctx.hooks.call("grads_cleared")
                return result
            return wrapper
        self.ctx.patches.replace(WHO, "torch.optim.Optimizer", "zero_grad", zero_grad)
        self.ctx.patches.replace(WHO, "torch.nn.Module", "zero_grad", zero_grad)

    def on_backward(self, tensors):
        self.backwards += 1

    def on_optimizer_step(self, optimizer):
        self.check_cleared()
        self.remember_grads(optimizer)

    def check_cleared(self):
        """Were the gradients cleared since the last optimizer step? (Asked after the step, which changes no
        gradient: PyTorch 1.13 has no hook before it.)"""
        last = self.last_grad
        if last is not None:
            param, grad, version = last[0](), last[1](), last[2]
            now = getattr(param, "grad", None) if param is not None else None
            cleared = (self.zeroed or now is None or now is not grad
                       or now._version - version > self.backwards)
            self.cleared = bool(cleared)
            if not cleared:  # the line that called optimizer.step(), for the finding
                self.step_site = _sites.site_text(_sites.user_site(sys._getframe(1), 1))

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

    def on_step_fields(self, fields, batch_size, loss):
        if self.cleared is not None:
            fields["grads_cleared"] = self.cleared
            if not self.cleared:
                fields["site"] = self.step_site
            self.cleared = None
