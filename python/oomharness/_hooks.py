"""The hook bus: how the in-job parts hear of each other's news (pluggy's habit, without pluggy).

Note [The hook bus]
A part is a small object that owns its state and subscribes to the few hooks it needs, by defining a method
on_<hook> (the probe's steps part defines on_forward, its memory part on_device_peak, ...). HOOKS declares every
hook once, with its arguments and when it is called; registering a part whose on_ method names no hook is an
error, so a misspelt subscription cannot go unheard. A part that has nothing to do at a hook in this job (the
memory part's step fields where no check reads memory) sets that on_<hook> to None on itself before it is
registered, and is not called there: a hook is called at every step, and a call that does nothing still costs
the step (Note [A probe that pays for what is checked] in include/oomharness/evidence.h). A part that learns
only at install that it has nothing to do at all (the faults part without a shim) takes itself off the bus
(unregister). A hook is called with call(name, ...): the subscribers run in the order they registered (the probe
registers its parts in PARTS' order, which is the order of an event's fields), each guarded, since everything in
the job's process is a guest and swallows its own failures (Note [The probe is a guest] in probe/__init__.py).
Two things are let through: a schema error of the event writer (Note [Event fields] in
include/oomharness/events.h), and an exception a part raises on purpose into the training code, marked with
TO_THE_CODE (the OOM of Note [An OOM the probe raises] in probe/faults.py).
"""

from ._events import SchemaError

TO_THE_CODE = "_oomh_to_code"

# name -> (arguments, when it is called)
HOOKS = {
    "cuda_init": ("()", "the job initialised CUDA (torch.cuda._lazy_call): never initialised by the probe itself"),
    "step_begins": ("(n)", "step n begins, between steps: nothing of it is in flight yet"),
    "forward": ("(module, args, kwargs, training, frame)", "a top-level forward of a model begins"),
    "forward_done": ("(module, result)", "a top-level forward of a model returned `result` (where the job's checks "
                     "need its data)"),
    "exception": ("(exc)", "an exception passed a place the probe wraps (forward, backward, save, load)"),
    "backward": ("(tensors)", "torch.autograd.backward is called"),
    "backward_done": ("()", "torch.autograd.backward returned: the forwards before it are in the gradients"),
    "grads_cleared": ("()", "the code called zero_grad (an optimizer's or a module's)"),
    "optimizer_begins": ("(optimizer)", "an optimizer's step begins"),
    "optimizer_step": ("(optimizer)", "an optimizer's step has run"),
    "step_ending": ("()", "a step is done: what must be written before its step event"),
    "step_fields": ("(fields, batch_size, loss)", "each part adds its fields to the step event (batch_size, loss: "
                    "what the code said, or None)"),
    "step_done": ("(fields)", "the step event was written"),
    "oom_fields": ("(fields)", "each part adds its fields to an oom event"),
    "oom_seen": ("(fields)", "an oom event was written"),
    "evaluation_starts": ("(args, kwargs, site, frame)", "the first forward of an evaluation begins"),
    "device_peak": ("()", "the virtual device's allocated memory passed a new high (Note [The peak breakdown])"),
    "exit": ("(uncaught)", "the process ends: uncaught is the exception it dies of, or None"),
}


class HookBus:
    def __init__(self):
        self._subscribers = {name: [] for name in HOOKS}

    def register(self, part):
        """Subscribes each on_<hook> method of `part`."""
        for attr in dir(part):
            if not attr.startswith("on_"):
                continue
            name = attr[3:]
            if name not in HOOKS:
                raise ValueError("%s.%s subscribes to no hook: HOOKS has %s" % (type(part).__name__, attr, ", ".join(HOOKS)))
            fn = getattr(part, attr)
            if fn is not None:  # None: the part does not listen there in this job (Note [The hook bus])
                self._subscribers[name].append(fn)

    def unregister(self, part):
        for subscribers in self._subscribers.values():
            subscribers[:] = [s for s in subscribers if getattr(s, "__self__", None) is not part]

    def subscribers(self, name):
        return self._subscribers[name]

    def call(self, name, *args):
        for fn in self._subscribers[name]:
            try:
                fn(*args)
            except SchemaError:
                raise
            except Exception as e:
                if getattr(e, TO_THE_CODE, False):
                    raise


def safely(fn, *args, **kwargs):
    """Calls fn; a failure is swallowed (the parts are guests in the job), but for what Note [The hook bus] lets
    through."""
    try:
        return fn(*args, **kwargs)
    except SchemaError:
        raise
    except Exception as e:
        if getattr(e, TO_THE_CODE, False):
            raise
        return None
