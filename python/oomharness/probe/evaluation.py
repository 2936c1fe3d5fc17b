"""The probe's evaluation part: the first forward of each evaluation (the model in eval mode or gradients off),
and whether it builds an autograd graph (the eval_no_grad check): an `eval_forward` event, and the
`evaluation_starts` hook, at which the memory part looks at what the loop left alive (Note [After the loop]
in memory.py)."""

from .. import _sites


class Evaluation:
    def __init__(self, ctx):
        self.ctx = ctx

    def on_forward(self, module, args, kwargs, training, frame):
        if training:
            return
        ctx = self.ctx
        clock = ctx.clock
        if clock.phase != "eval":
            # Once per evaluation, not per forward: does it build a graph (eval_no_grad)?
            site = _sites.site_text(_sites.user_site(frame))
            ctx.emit("eval_forward", step=clock.current_step(), grad=bool(ctx.torch.is_grad_enabled()),
                     training=bool(module.training), batch_size=clock.batch_size, site=site)
            ctx.hooks.call("evaluation_starts", args, kwargs, site, frame)
        clock.set_phase("eval")
