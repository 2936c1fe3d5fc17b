"""The virtual device's tensors part: the ways code asks for CUDA memory by name (`.cuda()`, `.cuda(i)`,
`.to("cuda")`, `.to(p.device)`, `.to(other)`, a factory or `new_*` with `device="cuda"`, the default device)
land on the CPU and are booked on the device; `.cpu()` and `.to("cpu")` make host copies, as on a GPU; pins go
to the driver (Note [Host memory] in injector/engine/fault_plan.h, pinned.py).

Note [What a tensor on the virtual device says it is]
A tensor on the device says `t.device == torch.device("cuda", 0)` (the current device's index in a rank that
took another: Note [A device per local rank] in runtime.py), as on a GPU: public code decides by it
where to put what it makes (`x.to(p.device)`, `torch.zeros(..., device=x.device)`, an optimizer's
`load_state_dict` moving its state with `value.to(device=param.device)`), and whether it runs on a GPU at all
(Ultralytics' AutoBatch returns its default batch when `next(model.parameters()).device.type == "cpu"`;
nn.DataParallel refuses parameters that are not on `cuda:0`). The property is replaced on torch.Tensor (a row
of the patch table), so only Python code sees it: ATen's kernels, the dispatch mode and the C++ autograd
engine still see the CPU tensor it is. `Tensor.is_cuda`, `get_device()` and the storage's device stay the
truth (cpu, -1): PyTorch's own Python branches on them to call CUDA-only kernels (nn.LSTM's
flatten_parameters calls cuDNN when every weight `is_cuda`); torch.save, which writes a storage's device as
its location, is told "cuda:0" for a storage the device holds (Note [Where torch.save says a tensor was] in
loading.py). One choice the device's answer would change is kept as the CPU makes it: an optimizer's default
between its per-tensor loop and its foreach implementation (`_default_to_fused_or_foreach`, which takes
foreach for parameters whose `device.type` is cuda), so that figures measured before stay comparable; on a GPU
PyTorch takes foreach, whose whole-model temporaries (Adam's sqrt(v)) the virtual device then does not book
(shape-only mode picks the GPU's: Note [Kernels a GPU runs] in shape_only.py)."""

import contextlib
import sys
import threading
import weakref

import torch

from .. import _patches
from . import pinned

WHO = "device.tensors"
_UNINITIALIZED = getattr(torch.nn.parameter, "UninitializedTensorMixin", ())

# Note [A lazy parameter sent to the device]
# A LazyLinear's weight has no shape until its first forward. On a GPU `.cuda()` of the module gives it an
# uninitialized parameter on the device, which its first forward makes there (materialize with the data's
# device). Here the copy to the device cannot be made (cloning an uninitialized parameter is refused), so
# `.cuda()` leaves it as it is and remembers it, and its materialize makes it on the device, booked there.


# Note [A device context on the virtual device]
# `with torch.device("meta"):` (or "cuda", or a DeviceContext that torch.set_default_device pushes) is a torch
# function mode: it gives a device to the constructor functions that torch.utils._device._device_constructors()
# lists, a set built once, by attribute, at its first use. Built after the factories were replaced, it held the
# replacements, and the original each of them calls was no member: the context gave no device, so under the
# virtual device `with torch.device("meta")` made host tensors (litgpt's fit() counts FLOPs on a meta copy of its
# model with a [4, 512] input: it trained as a model on real memory, its input one more part of the step's data).
# So the set is built from the originals, before any replacement; the factories leave a context to the mode
# (whose device then wins, as it does in torch), and the mode's own answer is replaced for a CUDA context:
# the constructor runs on the CPU and its tensor is booked, as with device="cuda". torch.set_default_device
# ("cuda") is the device's own flag, the real context the CPU's, so the factories keep booking for it unless a
# context with another device is entered inside it (the innermost DeviceContext on the mode stack says).


def context_device():
    """The device of the innermost torch.device context (or set_default_device's), None without one. From the
    function-mode stack, not torch.utils._device.CURRENT_DEVICE: a `with torch.device(...)` entered inside
    set_default_device's context is pushed above it without changing that global (PyTorch 2.14)."""
    if _device_module is None:
        return None
    try:
        stack = torch.overrides._get_current_function_mode_stack()
    except Exception:
        return None
    for mode in reversed(stack):
        if isinstance(mode, _device_module.DeviceContext):
            return mode.device
    return None


try:
    import torch.utils._device as _device_module
    _device_module._device_constructors()  # Note [A device context on the virtual device]: the originals
except Exception:  # a torch without device contexts
    _device_module = None


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
        self._local = threading.local()  # truth: the real device is asked for (real_devices())
        self.lazy_on_device = {}  # id -> weak reference (Note [A lazy parameter sent to the device]; no ==)

    def install(self, torch_, patches):
        dev = self.device
        for name in _patches.FACTORIES:
            patches.replace(WHO, "torch", name, self._factory)
        patches.replace(WHO, "torch.Tensor", "device", self._device_property)
        for name in _patches.NEW_TENSOR_METHODS:
            patches.replace(WHO, "torch.Tensor", name, self._new_method)
        # Note [What a tensor on the virtual device says it is]: the optimizers' default kernel, as the CPU picks it.
        import torch.optim  # noqa: F401 - its submodules, each with its own reference to the function
        for mod in list(sys.modules.values()):
            name = getattr(mod, "__name__", "") or ""
            if name == "torch.optim" or name.startswith("torch.optim."):
                patches.replace_in(WHO, "torch.optim.*", mod, "_default_to_fused_or_foreach", self._cpu_kernels)
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
        patches.replace(WHO, "torch.UntypedStorage", "resize_", self._resize)
        # Note [A lazy parameter sent to the device]
        patches.replace(WHO, "torch.nn.parameter.UninitializedTensorMixin", "materialize", self._materialize)
        patches.replace(WHO, "torch", "set_default_device", self._set_default_device)
        patches.replace(WHO, "torch.utils._device.DeviceContext", "__torch_function__", self._device_context)
        patches.replace(WHO, "torch", "get_default_device", lambda original: lambda: (
            self.device.parts["runtime"].devices.current if self.default_on_device else original()))

    # ---- what a tensor says it is (Note [What a tensor on the virtual device says it is])
    @contextlib.contextmanager
    def real_devices(self):
        """Inside: every tensor says the device it really is on (cpu)."""
        self._local.truth = getattr(self._local, "truth", 0) + 1
        try:
            yield
        finally:
            self._local.truth -= 1

    def _device_property(self, original):
        dev, local = self.device, self._local
        devices = dev.parts["runtime"].devices
        real = original.__get__  # TensorBase's getset descriptor

        def device(t):
            d = real(t)
            if d.type == "cpu" and not getattr(local, "truth", 0) and dev.on_device(t):
                return devices.current  # Note [A device per local rank] in runtime.py
            return d
        return property(device, doc=original.__doc__)

    def _cpu_kernels(self, original):
        def _default_to_fused_or_foreach(params, differentiable, use_fused=False):
            with self.real_devices():
                return original(params, differentiable, use_fused)
        return _default_to_fused_or_foreach

    def _new_method(self, original):
        """t.new_zeros(..., device=...) and its siblings: without a device, the result is where t is (the mode
        books it); with one, where it says."""
        dev = self.device

        def new(t, *args, **kwargs):
            device = kwargs.get("device")
            if device is None:
                return original(t, *args, **kwargs)
            kwargs = dict(kwargs, device="cpu")
            if is_cuda(device):
                dev.check_thread()
                with dev.making():
                    out = original(t, *args, **kwargs)
                dev.book(out)
                return out
            if dev.on_device(t) and is_cpu(device):
                with dev.host_work():
                    return original(t, *args, **kwargs)
            return original(t, *args, **kwargs)
        return new

    def _factory(self, fn):
        dev = self.device

        def wrapper(*args, **kwargs):
            device = kwargs.get("device")
            if device is None and self.default_on_device:
                inside = context_device()  # Note [A device context on the virtual device]
                if inside is not None and inside.type != "cpu":
                    return fn(*args, **kwargs)  # the context's device (meta, or cuda: booked by the mode)
            if is_cuda(device) or (device is None and self.default_on_device and not dev.creating()):
                return self.made_on_device(fn, args, kwargs)
            return fn(*args, **kwargs)
        return wrapper

    def made_on_device(self, fn, args, kwargs):
        """fn(*args, **kwargs), a constructor asked for the device: made on the host and booked."""
        dev = self.device
        dev.check_thread()
        kwargs["device"] = "cpu"
        with dev.making():
            out = fn(*args, **kwargs)
        # Some factories (torch.tensor) build their tensor without an operation the mode sees.
        if isinstance(out, torch.Tensor):
            dev.book(out)
        return out

    def to_device(self, t):
        """The host-to-device copy of `t` (itself when it is on the device already)."""
        dev = self.device
        if dev.on_device(t):
            return t
        if isinstance(t, _UNINITIALIZED):  # Note [A lazy parameter sent to the device]
            self.lazy_on_device[id(t)] = weakref.ref(t)
            return t
        dev.check_thread()
        with dev.making():
            out = t.clone()  # a new storage, booked by the mode
        dev.book(out)
        return out

    def _materialize(self, original):
        def materialize(param, shape, device=None, dtype=None):
            ref = self.lazy_on_device.get(id(param))
            if device is None and ref is not None and ref() is param:
                device = "cuda"
                del self.lazy_on_device[id(param)]
            return original(param, shape, device=device, dtype=dtype)
        return materialize

    def _to(self, original):
        dev = self.device

        def to(t, *args, **kwargs):
            # to(device, dtype, non_blocking, copy), to(dtype, ...), to(other, non_blocking, copy): only a device
            # changes here. to(other) is to(other.device, other.dtype), which says cuda for a tensor on the device.
            if args and isinstance(args[0], torch.Tensor):
                args = (args[0].device, args[0].dtype) + tuple(args[1:])
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

    # Note [A storage resized on the device]
    # FSDP2 gives back an unsharded parameter's memory after the forward by resizing the parameter's storage to
    # 0 bytes, and gets it back before the backward by resizing it to its size again (free_storage and
    # alloc_storage in torch/distributed/fsdp/_fully_shard/_fsdp_param.py): the same storage, a new address. On
    # a GPU each resize goes through the caching allocator: to 0 the block goes back, to a size a new block is
    # taken (and the old one given back after the copy). The device knows its storages by address, so before
    # this a resized storage kept its old block booked and came back as a host storage: torchtitan's debug
    # model under FSDP2 with activation checkpointing found the weights it had saved on "cuda" in the forward
    # recomputed on "cpu" in the backward (CheckpointError: "Recomputed values ... have different metadata"),
    # and its all-gathered parameters were never freed between forward and backward. A resize of a storage on
    # the device (or of one emptied on it) books the new memory and gives the old block back; a storage
    # emptied to 0 bytes stays the device's, so that its next resize is booked.
    def _resize(self, original):
        dev = self.device

        def resize_(storage, size):
            old, old_bytes = dev.storage_key(storage), storage.nbytes()
            was_on_device = old is not None and dev._live(old) or dev.emptied_storage(storage)
            result = original(storage, size)
            if was_on_device:
                dev.resized(storage, old, old_bytes)
            return result
        return resize_

    def _record_stream(self, original):
        from .runtime import Stream
        dev = self.device

        def record_stream(t, stream):
            if isinstance(stream, Stream) or dev.on_device(t):
                return None  # work is synchronous on the CPU: nothing to keep alive for another stream
            return original(t, stream)
        return record_stream

    def _device_context(self, original):
        """Note [A device context on the virtual device]: a CUDA context's constructors make host tensors, booked."""
        def __torch_function__(mode, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if (is_cuda(getattr(mode, "device", None)) and kwargs.get("device") is None and _device_module is not None
                    and func in _device_module._device_constructors()):
                return self.made_on_device(func, args, kwargs)
            return original(mode, func, types, args, kwargs)
        return __torch_function__

    def _set_default_device(self, original):
        def set_default_device(device):
            self.default_on_device = is_cuda(device)
            return original("cpu" if self.default_on_device else device)
        return set_default_device
