"""The probe's faults part: on a GPU, where no Python sees PyTorch's allocations, the points of a step the probe
sees begin are where a fault aimed at the step is asked (Note [Where a step fault fires] in
injector/engine/fault_plan.h): a training forward of a model, backward, and the optimizer's step.

Note [An OOM the probe raises]
Asked at such a point, the shim refuses (and writes the inject event, `layer: "probe"`) or not. A refusal is
taken as PyTorch's caching allocator takes a refused segment: it gives its cached blocks back
(torch._C._cuda_emptyCache, as its retry frees them) and asks once more; refused again, the probe raises
what PyTorch raises, torch.OutOfMemoryError with the words of its message and the device's figures, out of
the hook into the training code, as if the step's next allocation had failed there. What differs from an
OOM of the allocator: nothing was allocated or refused by the allocator, so its statistics (num_ooms,
num_alloc_retries) do not count it and its OOM observers are not called (the probe reports the OOM
itself); the exception leaves the hook, not a kernel's allocation, so the step's forward has made nothing
yet when a forward's point fails it. On the virtual device the caching-allocator model is the request
layer (virtual_device/allocator.py) and this part stays out.
"""

import ctypes

from .. import _abi, oom_kinds
from .._hooks import TO_THE_CODE

LAYER_PROBE = _abi.REQUEST_LAYERS["probe"]

WHO = "probe.faults"


class Faults:
    def __init__(self, ctx):
        self.ctx = ctx
        self._request = None

    def install(self, torch):
        if self.ctx.device is not None:
            # The virtual device's allocator model asks for every request itself: nothing to hear (Note [The
            # hook bus] in _hooks.py).
            self.ctx.hooks.unregister(self)
            return
        try:
            shim = ctypes.CDLL(None)
            register, request = shim.oomh_register_requests, shim.oomh_request
        except (AttributeError, OSError):
            self.ctx.hooks.unregister(self)
            return  # no shim in this process: the driver layer is all there is
        register.argtypes, register.restype = [ctypes.c_int], None
        request.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_longlong, ctypes.c_int]
        request.restype = ctypes.c_int
        register(LAYER_PROBE)
        self._request = request

    def point(self):
        """A point of a training step: Note [An OOM the probe raises]."""
        if self._request is None or not self.ctx.clock.started:
            return
        torch = self.ctx.torch
        device = self._device(torch)
        step, phase = self.ctx.clock.where()
        if self._request(LAYER_PROBE, 0, device, step, phase) != 1:
            return
        try:
            if torch.cuda.is_initialized():
                torch._C._cuda_emptyCache()
        except Exception:
            pass
        if self._request(LAYER_PROBE, 0, device, step, phase) != 1:
            return
        exc = self.oom_error(torch, device)
        setattr(exc, TO_THE_CODE, True)
        ooms = self.ctx.probe.ooms if self.ctx.probe is not None else None
        if ooms is not None:
            ooms.new_oom(str(exc), exc=exc)
            exc._oomh_seen = True  # reported: the boundaries it passes do not report it again
        raise exc

    @staticmethod
    def _device(torch):
        try:
            return int(torch.cuda.current_device()) if torch.cuda.is_initialized() else 0
        except Exception:
            return 0

    @staticmethod
    def oom_error(torch, device):
        """torch.OutOfMemoryError, worded as c10's CUDACachingAllocator words it, with the device's figures."""
        try:
            free, total = torch.cuda.mem_get_info(device)
            allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        except Exception:
            free = total = allocated = reserved = 0
        message = oom_kinds.allocator_message(2 << 20, device, total, free, allocated, max(0, reserved - allocated))
        error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        return error(message)

    # The points (the steps part has set the phase and the block's step before each).
    def on_forward(self, module, args, kwargs, training, frame):
        if training:
            self.point()

    def on_backward(self, tensors):
        self.point()

    def on_optimizer_begins(self, optimizer):
        self.point()
