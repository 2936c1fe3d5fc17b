"""The virtual CUDA device: a user's unchanged PyTorch code runs on the CPU while every "GPU" tensor is booked
in a model of PyTorch's caching allocator (caching_allocator.py), whose segments the shim sees (issue 13;
shared/notes/virtual-device.md has the feasibility study's facts).

Note [Which tensors are on the virtual device]
A CPU build of PyTorch cannot make a tensor say device='cuda', so the device is a set of storages. A storage
joins it when code asks for CUDA (`.cuda()`, `.to("cuda")`, a factory with `device="cuda"`, `module.cuda()`),
and every storage an ATen operation creates from an input on the device joins it too (a TorchDispatchMode sees
every operation). `.cpu()` makes a copy that is not on the device, as on a GPU. A storage leaves the device
when its StorageImpl dies, which a weak reference to it tells, whoever held it (Python, or autograd's saved
tensors); then its block goes back to the model's cache, as PyTorch's allocator would take it back.
Lifetimes are polled (a finalizer on the Python object fires too early: autograd keeps the storage alive
without it): the youngest storages at each operation (activations die young), every storage before the model
asks the driver for a new segment and whenever memory is reported, so figures and block reuse match a GPU's.
Not seen: operations on threads other than the one that installed the device (dispatch modes are per thread).
"""

import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .caching_allocator import BudgetSegments, CachingAllocatorModel

YOUNG = 64  # storages checked at each operation, newest first


def _is_cpu(device):
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _is_cuda(device):
    if device is None:
        return False
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, int):
        return True  # a bare ordinal means a CUDA device
    return isinstance(device, str) and device.split(":")[0] == "cuda"


class _Tracked:
    __slots__ = ("block", "weak", "key")

    def __init__(self, block, weak, key):
        self.block, self.weak, self.key = block, weak, key


class VirtualDevice:
    """Installs the virtual device in this process: torch.cuda answers from the model, CUDA requests land on
    the CPU, and device storages are booked (Note [Which tensors are on the virtual device])."""

    def __init__(self, model):
        self.model = model
        self.tracked = {}   # storage data_ptr -> _Tracked
        self.order = []     # keys, oldest first
        self._local = threading.local()
        self._mode = None
        self._saved = []

    # ---- storages
    @staticmethod
    def _storage(t):
        s = t.storage()
        return getattr(s, "_storage", s)

    def _key(self, t):
        try:
            s = self._storage(t)
            return s.data_ptr() if s.nbytes() > 0 else None
        except Exception:  # noqa: BLE001 - sparse and other layouts have no plain storage
            return None

    def on_device(self, t):
        if not isinstance(t, torch.Tensor):
            return False
        key = self._key(t)
        if key is None or key not in self.tracked:
            return False
        if torch.UntypedStorage._expired(self.tracked[key].weak):
            self._release(key)
            return False
        return True

    def book(self, t):
        """Puts t's storage on the device (once). May raise torch.cuda.OutOfMemoryError."""
        key = self._key(t)
        if key is None:
            return
        entry = self.tracked.get(key)
        if entry is not None and not torch.UntypedStorage._expired(entry.weak):
            return
        if entry is not None:
            self._release(key)
        s = self._storage(t)
        nbytes = s.nbytes()
        if not self._cache_fits(nbytes):
            self.sweep()
        block = self.model.malloc(nbytes)
        self.tracked[key] = _Tracked(block, s._weak_ref(), key)
        self.order.append(key)

    def _cache_fits(self, nbytes):
        from .caching_allocator import round_size, SMALL_SIZE
        size = round_size(nbytes)
        pool = self.model.free_small if size <= SMALL_SIZE else self.model.free_large
        return any(b.size >= size for b in pool)

    def _release(self, key):
        entry = self.tracked.pop(key, None)
        if entry is None:
            return
        torch.UntypedStorage._free_weak_ref(entry.weak)
        self.model.free(entry.block)

    def sweep(self, young_only=False):
        keys = self.order[-YOUNG:] if young_only else self.order
        dead = [k for k in keys if k in self.tracked and torch.UntypedStorage._expired(self.tracked[k].weak)]
        for k in dead:
            self._release(k)
        if dead or len(self.order) > 2 * len(self.tracked) + YOUNG:
            self.order = [k for k in self.order if k in self.tracked]

    # ---- installing
    def install(self):
        self._mode = _DeviceMode(self)
        self._mode.__enter__()
        self._patch()
        return self

    def uninstall(self):
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)
        self._saved.clear()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None

    def _set(self, owner, name, value):
        self._saved.append((owner, name, getattr(owner, name, None)))
        setattr(owner, name, value)

    def creating(self):
        return getattr(self._local, "creating", 0) > 0

    def copying_to_host(self):
        return getattr(self._local, "host", 0) > 0

    def host_copy(self, t):
        """A copy of a device tensor in host memory (`.cpu()`): not booked."""
        self._local.host = getattr(self._local, "host", 0) + 1
        try:
            return t.clone()
        finally:
            self._local.host -= 1

    def _create_on_device(self, fn, *args, **kwargs):
        kwargs["device"] = "cpu"
        self._local.creating = getattr(self._local, "creating", 0) + 1
        try:
            return fn(*args, **kwargs)
        finally:
            self._local.creating -= 1

    def _patch(self):
        dev = self
        model = self.model

        def factory(fn):
            def wrapper(*args, **kwargs):
                if _is_cuda(kwargs.get("device")):
                    out = dev._create_on_device(fn, *args, **kwargs)
                    # Some factories (torch.tensor) build their tensor without an operation the mode sees.
                    if isinstance(out, torch.Tensor):
                        dev.book(out)
                    return out
                return fn(*args, **kwargs)
            wrapper.__wrapped__ = fn
            return wrapper

        for name in ("zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye",
                     "tensor", "as_tensor", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like",
                     "randn_like", "randint_like", "randperm", "normal"):
            if hasattr(torch, name):
                self._set(torch, name, factory(getattr(torch, name)))

        def to_device(t):
            if dev.on_device(t):
                return t
            dev._local.creating = getattr(dev._local, "creating", 0) + 1
            try:
                out = t.clone()  # the host-to-device copy: a new storage, booked by the mode
            finally:
                dev._local.creating -= 1
            dev.book(out)
            return out

        original_to = torch.Tensor.to
        original_cpu = torch.Tensor.cpu

        def cuda(self, device=None, non_blocking=False, **kwargs):
            return to_device(self)

        def to(self, *args, **kwargs):
            # to(device, dtype, non_blocking, copy), to(dtype, ...), to(tensor, ...): only a device changes here.
            if "device" in kwargs:
                device = kwargs["device"]
            elif args and (isinstance(args[0], (str, torch.device)) or
                           (isinstance(args[0], int) and not isinstance(args[0], bool))):
                device = args[0]
            else:
                device = None
            to_cuda, to_cpu = _is_cuda(device), _is_cpu(device)
            if not (to_cuda or to_cpu):
                return original_to(self, *args, **kwargs)
            if "device" in kwargs:
                kwargs = dict(kwargs, device="cpu")
            else:
                args = ("cpu",) + tuple(args[1:])
            if to_cuda:
                if dev.on_device(self):
                    return original_to(self, *args, **kwargs)  # a dtype change on the device: the mode books it
                dev._local.creating = getattr(dev._local, "creating", 0) + 1
                try:
                    out = original_to(self, *args, **kwargs)
                finally:
                    dev._local.creating -= 1
                if out is self:
                    return to_device(self)
                dev.book(out)
                return out
            if not dev.on_device(self):
                return original_to(self, *args, **kwargs)
            dev._local.host = getattr(dev._local, "host", 0) + 1
            try:
                out = original_to(self, *args, **kwargs)
            finally:
                dev._local.host -= 1
            return dev.host_copy(out) if out is self else out

        def cpu(self, *args, **kwargs):
            return dev.host_copy(self) if dev.on_device(self) else original_cpu(self, *args, **kwargs)

        def is_cuda(self):
            return dev.on_device(self)

        self._set(torch.Tensor, "cuda", cuda)
        self._set(torch.Tensor, "to", to)
        self._set(torch.Tensor, "cpu", cpu)
        # Tensor.is_cuda stays the truth (cpu): a subclass claiming cuda breaks autograd (the study).

        def memory_allocated(device=None):
            dev.sweep()
            return model.allocated

        def memory_reserved(device=None):
            dev.sweep()
            return model.reserved

        def max_memory_allocated(device=None):
            return model.peak_allocated

        def max_memory_reserved(device=None):
            return model.peak_reserved

        def memory_stats(device=None):
            dev.sweep()
            return model.stats()

        def reset_peak_memory_stats(device=None):
            dev.sweep()
            model.reset_peak()

        def empty_cache():
            dev.sweep()
            model.empty_cache()

        def mem_get_info(device=None):
            dev.sweep()
            free, total = model.source.mem_info()
            if model.fraction_limit is not None:
                total = min(total, model.fraction_limit)
                free = max(0, total - model.reserved)
            return free, total

        def set_per_process_memory_fraction(fraction, device=None):
            _, total = model.source.mem_info()
            model.fraction_limit = int(total * fraction)

        class _Properties:
            def __init__(self):
                free, total = mem_get_info()
                self.name = "virtual CUDA device (PyTorch %s on the CPU, caching-allocator model)" % torch.__version__
                self.total_memory = total
                self.major, self.minor = 8, 0
                self.multi_processor_count = 1

        def memory_summary(device=None, abbreviated=False):
            s = memory_stats()
            return ("|  virtual CUDA device: memory summary (modelled)  |\n"
                    "|  allocated: %d bytes (peak %d)  |\n|  reserved: %d bytes (peak %d)  |\n|  segments: %d  |\n"
                    % (s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"],
                       s["reserved_bytes.all.current"], s["reserved_bytes.all.peak"], s["segment.all.current"]))

        cuda_mod = torch.cuda
        for name, value in (("is_available", lambda: True), ("device_count", lambda: 1),
                            ("current_device", lambda: 0), ("set_device", lambda d: None),
                            ("synchronize", lambda device=None: None), ("is_initialized", lambda: True),
                            ("init", lambda: None),
                            ("get_device_name", lambda device=None: _Properties().name),
                            ("get_device_properties", lambda device=None: _Properties()),
                            ("memory_allocated", memory_allocated), ("memory_reserved", memory_reserved),
                            ("max_memory_allocated", max_memory_allocated), ("max_memory_reserved", max_memory_reserved),
                            ("memory_stats", memory_stats), ("reset_peak_memory_stats", reset_peak_memory_stats),
                            ("empty_cache", empty_cache), ("mem_get_info", mem_get_info),
                            ("set_per_process_memory_fraction", set_per_process_memory_fraction),
                            ("memory_summary", memory_summary)):
            self._set(cuda_mod, name, value)
        if hasattr(cuda_mod, "memory"):
            for name in ("empty_cache", "memory_allocated", "memory_reserved", "memory_stats", "mem_get_info",
                         "max_memory_allocated", "reset_peak_memory_stats", "memory_summary"):
                if hasattr(cuda_mod.memory, name):
                    self._set(cuda_mod.memory, name, getattr(cuda_mod, name))


class _DeviceMode(TorchDispatchMode):
    def __init__(self, device):
        super().__init__()
        self.device = device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dev = self.device
        flat = tree_flatten((args, kwargs))[0]
        inputs = [a for a in flat if isinstance(a, torch.Tensor)]
        from_device = not dev.copying_to_host() and (dev.creating() or any(dev.on_device(a) for a in inputs))
        out = func(*args, **kwargs)
        if from_device:
            dev.sweep(young_only=True)
            in_keys = {dev._key(a) for a in inputs}
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and dev._key(t) not in in_keys:
                    dev.book(t)
        return out


def oom_error(message):
    return torch.cuda.OutOfMemoryError(message)


_installed = None


def install_for_job():
    """The virtual device of a job the runner started with OOMH_DEVICE=virtual: its segments come from the CPU
    driver double (on LD_LIBRARY_PATH) through the shim (LD_PRELOAD), so the job's faults, caps, events and
    armed record are the shim's own. Once per process."""
    global _installed
    if _installed is None:
        from .caching_allocator import DriverSegments
        _installed = VirtualDevice(CachingAllocatorModel(DriverSegments(), oom_error=oom_error)).install()
    return _installed


def install_with_budget(total_bytes):
    """A virtual device whose segments come from a plain byte budget (tests, and machines without the driver
    double)."""
    return VirtualDevice(CachingAllocatorModel(BudgetSegments(total_bytes), oom_error=oom_error)).install()
