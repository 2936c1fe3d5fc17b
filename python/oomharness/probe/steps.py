"""The probe's steps part: counts the training steps, writes the step in progress and the phase into the
control block, and writes the `step` event, to which the other parts add their fields.

Note [Step convention]
Inside the probe `completed` counts optimizer steps done; every step NUMBER it writes (events, the control
block, the steps of OOMH_FLUSH_AT_STEPS) and every number it is given (probe.step(n), a checkpoint's
step) is in the user's numbering, which counts from the job's step_base (OOMH_STEP_BASE: 1 by default, 0
for the many training loops that print `for step in range(n)`). The Kth step is numbered K - 1 + base, and
a step numbered n leaves n - base + 1 steps done: StepClock in _job.py is the one place that converts. The
runner passes faults' `step`, a cap's `at: {step}` and the target step through unchanged, so that `step=3` is
the step the user's own log calls 3 (Note [Step numbering] in runner/src/suite/job_fields.cpp). The step
events report COMPLETED steps; the control block holds the step IN PROGRESS (the one after the last
completed), so a fault `when: {step: 5}` fires during the step whose completion is reported as step 5. The
C++ probe (oomh::probe::begin_step / step) takes the program's own numbers the same way, and the emulated
trainer counts from 1. The block's step stays unknown (-1) until training starts (the first training
forward, or a step completed), so that building the model is not "step 1".

Note [Flushing before a faulted step]
A caching allocator serves a training loop's steady state from its cache: step 5 allocates nothing from the
driver, so a fault `when: {step: 5}` at the driver level would never fire. Under real memory pressure the
allocator has to go to the driver; to get there on purpose, the runner lists the steps its faults target in
OOMH_FLUSH_AT_STEPS and the probe releases the allocator's unused cached blocks as such a step begins
(between steps, where nothing is in flight). This changes no value the program computes: only where its
tensors live. It calls the allocator directly, so the code's own empty_cache() calls (which policies look
at) are not confused with it.
"""

import importlib

from .._hooks import safely

WHO = "probe.steps"
CHECKPOINT = "checkpoint"  # at the bottom of Steps.in_step: an optimizer's step inside a save or a load


class Steps:
    def __init__(self, ctx):
        self.ctx = ctx
        self.clock = ctx.clock
        self.manual = False                      # the code reports its steps itself (probe.step)
        self.flush_at = set(ctx.settings.flush_at)
        self.last_optimizer = None               # id() of the optimizer of the last step
        self.in_step = []                        # id()s of the optimizers whose step is in progress, outermost first

    def install(self, torch):
        ctx = self.ctx
        opt_mod = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the name on 1.13
        register_pre = getattr(opt_mod, "register_optimizer_step_pre_hook", None)
        register_post = getattr(opt_mod, "register_optimizer_step_post_hook", None)
        if register_pre is not None and register_post is not None:
            handles = (register_pre(lambda *a: safely(self.optimizer_begins, *a)),
                       register_post(lambda *a: safely(self.optimizer_done, *a)))
            ctx.patches.registered(WHO, "the global optimizer step pre-hook and post-hook",
                                   lambda: [h.remove() for h in handles])
        else:
            # PyTorch 1.13: no global step hooks, but every step ends in Optimizer._optimizer_step_code (the
            # profiler's entry point, an empty method), which no optimizer overrides.
            def step_code(original):
                def _optimizer_step_code(optimizer):
                    original(optimizer)
                    safely(self.optimizer_done, optimizer)
                return _optimizer_step_code
            ctx.patches.replace(WHO, "torch.optim.Optimizer", "_optimizer_step_code", step_code)
        ctx.patches.replace(WHO, "torch.autograd", "backward", self._backward)
        ctx.patches.replace(WHO, "torch.optim.Optimizer", "__init__", self._optimizer_init)

    # ---- what torch tells
    def _backward(self, original):
        ctx = self.ctx

        def backward(*args, **kwargs):
            safely(self.backward_begins, args, kwargs)
            try:
                result = original(*args, **kwargs)
            except BaseException as e:
                ctx.hooks.call("exception", e)
                raise
            ctx.hooks.call("backward_done")
            return result
        return backward

    def _optimizer_init(self, original):
        # An optimizer is known from its construction, so that its state counts as optimizer state in a
        # breakdown taken during its first step (PyTorch 1.13 has no hook before a step).
        seen = self.ctx.seen

        def __init__(optimizer, *args, **kwargs):
            original(optimizer, *args, **kwargs)
            safely(seen.optimizers.add, optimizer)
        return __init__

    def backward_begins(self, args, kwargs):
        self.in_step.clear()  # no optimizer step is in progress across a backward
        self.start_training()
        self.clock.set_phase("backward")
        tensors = args[0] if args else kwargs.get("tensors")
        self.ctx.hooks.call("backward", tensors)

    # Note [An optimizer inside another's step]
    # An optimizer can wrap others and step them from its own step: torchtitan's OptimizersContainer is a
    # torch.optim.Optimizer whose step() steps one optimizer per model part, and the global step hooks run for
    # both. Each counted as a step: torchtitan's 3 training steps were 6 (the container's, every other one,
    # "without the gradients being cleared", since nothing cleared them between the inner optimizer's step and
    # the container's). The steps in progress are a stack of optimizers: an optimizer whose step begins inside
    # another's is part of that step, and the step ends with the outermost one's. An optimizer whose step begins
    # while it is on the stack had its earlier step end in an exception (an OOM in the optimizer's step, which
    # skips the post-hooks): that step is over. A training forward or a backward clears the stack. A step taken
    # inside a save or a load is part of the checkpoint, not a training step: torch.distributed.checkpoint's
    # set_optimizer_state_dict steps an optimizer with zero gradients and no learning rate to make its state
    # (_init_optim_state), and torchtitan's resume counted it as step 1 before the checkpoint it loaded. (PyTorch
    # 1.13 has only the end of a step, Optimizer._optimizer_step_code: there each counts.)
    def optimizer_begins(self, optimizer=None, *_):
        stack, key = self.in_step, id(optimizer)
        if key in stack:
            del stack[stack.index(key):]
        if not stack and self.clock.phase == "checkpoint":
            stack.append(CHECKPOINT)  # what steps inside is the checkpoint's; cleared at the next forward
        stack.append(key)
        if len(stack) > 1:
            return
        self.start_training()
        self.clock.set_phase("optimizer")
        self.ctx.hooks.call("optimizer_begins", optimizer)

    def optimizer_done(self, optimizer=None, *_):
        stack, key = self.in_step, id(optimizer)
        if key in stack:
            del stack[stack.index(key):]
        if optimizer is not None and key != self.last_optimizer:  # a WeakSet look-up only when it changes
            self.ctx.seen.optimizers.add(optimizer)
            self.last_optimizer = key
        if stack:
            return  # inside another optimizer's step: Note [An optimizer inside another's step]
        if optimizer is not None:
            self.ctx.hooks.call("optimizer_step", optimizer)
        if self.manual:
            self.clock.set_phase("data")
            return
        self.finish_step(self.clock.number(self.clock.completed + 1))

    def on_forward(self, module, args, kwargs, training, frame):
        if training:
            self.in_step.clear()
            self.start_training()
            self.clock.set_phase("forward")

    # ---- where training is
    def start_training(self):
        clock = self.clock
        if not clock.started:
            clock.started = True
            n = clock.number(clock.completed + 1)
            clock.set_step_in_progress(n)
            self.entering_step(n)

    def entering_step(self, n):
        """Note [Flushing before a faulted step]."""
        self.ctx.hooks.call("step_begins", n)
        torch = self.ctx.torch
        if n not in self.flush_at or torch is None:
            return
        self.flush_at.discard(n)
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                torch._C._cuda_emptyCache()
        except Exception:
            pass

    def finish_step(self, n, batch_size=None, loss=None):
        """Step n is done: what the parts write before it, the step event with their fields, and the block
        moves on to step n + 1."""
        ctx, clock = self.ctx, self.clock
        clock.completed = clock.done_after(n)
        ctx.hooks.call("step_ending")
        fields = {"step": n}
        ctx.hooks.call("step_fields", fields, batch_size, loss)
        if loss is not None and "loss" not in fields:  # the code's own figure, with no losses part to add it
            fields["loss"] = float(loss)
        ctx.emit("step", **fields)
        ctx.hooks.call("step_done", fields)
        clock.started = True
        clock.set_step_in_progress(n + 1)
        self.entering_step(n + 1)
        # Between steps the job fetches its next batch: allocations there (the copy to the GPU) are "data".
        clock.set_phase("data")
