"""The probe's losses part: the loss of each step, the sum of the scalars backward() ran on since the last
step (with gradient accumulation that is the batch's loss when the pieces are weighted; a scaled loss, e.g.
under GradScaler, is reported scaled). Reading it is the one thing of the probe that waits for the step's
kernels on a GPU (`.item()`), so the part is installed only for jobs whose checks compare losses (Note [A
probe that pays for what is checked] in probe/__init__.py)."""


class Losses:
    def __init__(self, ctx):
        self.ctx = ctx
        self.parts = []  # detached scalars backward() ran on since the last step

    def on_backward(self, tensors):
        torch = self.ctx.torch
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
            self.parts.append(tensors.detach())

    def on_step_fields(self, fields, batch_size, loss):
        if loss is None and self.parts:
            try:
                loss = sum(float(t.item()) for t in self.parts)
            except Exception:
                loss = None
        self.parts = []
        if loss is not None:
            fields["loss"] = float(loss)

    def on_oom_seen(self, fields):
        # The failed attempt's work does not count: a redo reports its loss again.
        self.parts = []
