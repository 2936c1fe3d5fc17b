"""The virtual device's tensors part: the ways code asks for CUDA memory by name (`.cuda()`, `.to("cuda")`, a
factory with `device="cuda"`, the default device) land on the CPU and are booked on the device; `.cpu()` and
`.to("cpu")` make host copies, as on a GPU; pins go to the driver (Note [Host memory] in
injector/engine/fault_plan.h, pinned.py). Tensor.is_cuda stays the truth (cpu): a subclass claiming cuda
breaks autograd (shared notes: the virtual device's feasibility study)."""

import torch

from .. import _patches
from . import pinned

WHO = "device.tensors"


def is_cpu(device):
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def is_cuda(device):
    if device is None:
        return False
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, int):
        return True  # a bare ordinal means a CUDA device
    return isinstance(device, str) and device.split(":")[0] == "cuda"


class Tensors:
    def __init__(self, device):
        self.device = device
        self.default_on_device = False  # torch.set_default_device("cuda") on PyTorch 2.x

    def install(self, torch_, patches):
        dev = self.device
        for name in _patches.FACTORIES:
            patches.replace(WHO, "torch", name, self._factory)
        patches.replace(WHO, "torch.Tensor", "cuda", lambda original: lambda t, device=None, non_blocking=False,
                        **kwargs: self.to_device(t))
        patches.replace(WHO, "torch.Tensor", "to", self._to)
        patches.replace(WHO, "torch.Tensor", "cpu", lambda original: lambda t, *args, **kwargs: (
            dev.host_copy(t) if dev.on_device(t) else original(t, *args, **kwargs)))
        # Note [Host memory] (injector/engine/fault_plan.h): a pin asks the driver double for pinned host memory
        # through the shim, so a `memory: host` fault refuses it as cudaHostAlloc is refused on a GPU
        # (pinned.py). Without the driver, host memory stays where it is.
        dev.pinned_host = pinned.pinned_host_for(dev.model)
        patches.replace(WHO, "torch.Tensor", "pin_memory", lambda original: lambda t, *args, **kwargs: (
            t if dev.pinned_host is None or dev.on_device(t) else dev.pinned_host.pin(t)))
        patches.replace(WHO, "torch.Tensor", "record_stream", self._record_stream)
        patches.replace(WHO, "torch", "set_default_device", self._set_default_device)
        patches.replace(WHO, "torch", "get_default_device", lambda original: lambda: (
            torch.device("cuda", 0) if self.default_on_device else original()))

    def _factory(self, fn):
        dev = self.device

        def wrapper(*args, **kwargs):
            device = kwargs.get("device")
            if is_cuda(device) or (device is None and self.default_on_device and not dev.creating()):
                dev.check_thread()
                kwargs["device"] = "cpu"
                with dev.making():
                    out = fn(*args, **kwargs)
                # Some factories (torch.tensor) build their tensor without an operation the mode sees.
                if isinstance(out, torch.Tensor):
                    dev.book(out)
                return out
            return fn(*args, **kwargs)
        return wrapper

    def to_device(self, t):
        """The host-to-device copy of `t` (itself when it is on the device already)."""
        dev = self.device
        if dev.on_device(t):
            return t
        dev.check_thread()
        with dev.making():
            out = t.clone()  # a new storage, booked by the mode
        dev.book(out)
        return out

    def _to(self, original):
        dev = self.device

        def to(t, *args, **kwargs):
            # to(device, dtype, non_blocking, copy), to(dtype, ...), to(tensor, ...): only a device changes here.
            if "device" in kwargs:
                device = kwargs["device"]
            elif args and (isinstance(args[0], (str, torch.device)) or
                           (isinstance(args[0], int) and not isinstance(args[0], bool))):
                device = args[0]
            else:
                device = None
            to_cuda, to_cpu = is_cuda(device), is_cpu(device)
            if not (to_cuda or to_cpu):
                return original(t, *args, **kwargs)
            if "device" in kwargs:
                kwargs = dict(kwargs, device="cpu")
            else:
                args = ("cpu",) + tuple(args[1:])
            if to_cuda:
                if dev.on_device(t):
                    return original(t, *args, **kwargs)  # a dtype change on the device: the mode books it
                with dev.making():
                    out = original(t, *args, **kwargs)
                if out is t:
                    return self.to_device(t)
                dev.book(out)
                return out
            if not dev.on_device(t):
                return original(t, *args, **kwargs)
            with dev.host_work():
                out = original(t, *args, **kwargs)
            return dev.host_copy(out) if out is t else out
        return to

    def _record_stream(self, original):
        from .runtime import Stream
        dev = self.device

        def record_stream(t, stream):
            if isinstance(stream, Stream) or dev.on_device(t):
                return None  # work is synchronous on the CPU: nothing to keep alive for another stream
            return original(t, stream)
        return record_stream

    def _set_default_device(self, original):
        def set_default_device(device):
            self.default_on_device = is_cuda(device)
            return original("cpu" if self.default_on_device else device)
        return set_default_device
