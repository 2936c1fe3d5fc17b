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

Note [What a GPU holds that no tensor shows]
cuBLAS takes a workspace from the caching allocator the first time a handle runs a BLAS call on a stream, and
keeps it: one for the thread that runs forward, one for autograd's device thread (the study's 64 MiB beyond
parameters, gradients and Adam state on an H100). The device books one workspace at the first BLAS operation
outside backward and one at the first inside it, of the size CUBLAS_WORKSPACE_CONFIG gives (":SIZE_KiB:COUNT"
pairs), else PyTorch 2.x's default on Hopper (:4096:8, 32 MiB). The CUDA context is no allocation: the runner
gives the driver double a context of the size measured on an H100 (Note [The context on the virtual device] in
runner/src/exec/launch.cpp), which mem_get_info and a cap that counts the footprint see, as on a GPU.

Note [What libraries allocate outside the caching allocator]
On a GPU, cuBLAS and cuDNN also allocate device memory themselves, through cudaMalloc, at the moment a
thread first needs them: cublasCreate at the first BLAS call of each thread (PyTorch keeps one handle per
thread and device: the forward thread's, then autograd's device thread's at the first backward matmul, when
activations fill the memory), cudnnCreate at the first convolution of each thread. The shim sees those
allocations and a cap or a fault refuses them like any other, but PyTorch's caching allocator does not make
them: no cache is freed and no retry happens, and the failure reaches the code as the library's error, a
RuntimeError that is not torch.OutOfMemoryError (measured on an H100 under a cap, issue 27: "CUDA error:
CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", the text of PyTorch's TORCH_CUDABLAS_CHECK).
The device asks its segment source (the driver double through the shim, or the budget) for a handle's bytes
at the same moments, outside the model, and raises the same exception with PyTorch's message when refused;
a refused handle is asked for again at the next call, as PyTorch does. The workspace PyTorch then gives the
handle (Note [What a GPU holds that no tensor shows]) is the caching allocator's, one per handle and stream.
The sizes are measured (LIBRARY_HANDLE_BYTES; tests/gpu/library_ooms.py on an H100, PyTorch 2.11.0+cu130,
CUDA 13.0, cuDNN 9.19, 2026-11-26): the first matmul of the process took 66 MiB from the driver outside
PyTorch's reserved memory (an H200 showed cublasCreate's 64 MiB as one cuMemAlloc), autograd's thread's first
matmul 64 MiB, the first convolution 8 MiB (cuDNN's handle), autocast's first matmul and a second stream
nothing more. A library allocates when an operation runs, after its output tensor was allocated (as ATen
allocates the result, then asks for the handle), so the device asks for a handle after booking the
operation's outputs. Which of those bytes pass through the entry points the shim intercepts was measured
too (tests/gpu/run_all.sh libooms, an H200, same day: a fault on every allocation of one size): cuBLAS's
64 MiB handle does (refused, it raised CUBLAS_STATUS_ALLOC_FAILED); cuDNN 9's 8 MiB handle and the 2 MiB of
the first matmul do not (cuDNN allocates through its own runtime; no error), so no cap or fault of the shim
refuses or counts them on a GPU. The device so asks the driver (through the shim) for cuBLAS's handles only,
and records cuDNN's without allocating it (LIBRARY_THROUGH_SHIM). Not modelled: the 2 MiB of the first
matmul and of autograd's first convolution, a full GPU refusing cuDNN's handle, cuDNN's workspaces (its
algorithm search falls back to one that fits), NCCL's buffers (gloo stands in for NCCL and allocates on the
host), cuFFT's plans. Other GPUs and library versions take other sizes.

Note [Divergences]
Where the CPU cannot do what a GPU would, the device does the nearest thing and says so, once per kind and
process, as a `divergence` event that the reports list under the job: CUDA autocast runs as CPU bfloat16
autocast (activations take 2 bytes, as under float16 on a GPU; the numerics differ), a GradScaler is disabled
(bfloat16 needs no loss scaling), composite attention keeps B*H*S^2 probabilities that a GPU's fused attention
does not, convolutions run without cuDNN's workspaces, and CUDA requests on other threads are booked but their
operations are not seen.
"""

import os
import sys
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _pinned
from ._events import EventLog
from ._breakdown import SITE_MIN_BYTES, user_site
from .caching_allocator import BudgetSegments, CachingAllocatorModel

YOUNG = 64  # storages checked before each booking, newest first
_expired = torch.UntypedStorage._expired

DESCRIPTION = "virtual CUDA device (PyTorch %s on the CPU, caching-allocator model)"

# Note [What a GPU holds that no tensor shows]
# Note [What libraries allocate outside the caching allocator]: measured on an H100 with CUDA 13.0's libraries.
LIBRARY_HANDLE_BYTES = {"cublas": 64 << 20, "cudnn": 8 << 20}
LIBRARY_THROUGH_SHIM = {"cublas": True, "cudnn": False}  # cuDNN 9's handle: its own runtime, unseen
# PyTorch 2.x's words when the handle's allocation fails (TORCH_CUDABLAS_CHECK, AT_CUDNN_CHECK): RuntimeError.
LIBRARY_ERRORS = {"cublas": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                  "cudnn": "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}
BLAS_OPS = frozenset(("mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "addr",
                      "_addmm_activation"))
DEFAULT_CUBLAS_WORKSPACE_CONFIG = ":4096:8"  # PyTorch 2.x on Hopper (sm90): 8 buffers of 4 MiB


def cublas_workspace_bytes(config=None):
    """One cuBLAS workspace's bytes for CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs, as cuBLAS reads it);
    PyTorch's default on Hopper when it is unset or unreadable."""
    if config is None:
        config = os.environ.get("CUBLAS_WORKSPACE_CONFIG") or DEFAULT_CUBLAS_WORKSPACE_CONFIG
    parts = config.split(":")
    if len(parts) < 3 or parts[0] != "" or (len(parts) - 1) % 2:
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    try:
        pairs = [(int(parts[i]), int(parts[i + 1])) for i in range(1, len(parts), 2)]
    except ValueError:
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    if any(size < 0 or count < 0 for size, count in pairs):
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    return sum(size * 1024 * count for size, count in pairs)


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
    __slots__ = ("block", "weak", "key", "shape", "dtype", "site")

    def __init__(self, block, weak, key, shape=None, dtype=None, site=()):
        self.block, self.weak, self.key = block, weak, key
        self.shape, self.dtype, self.site = shape, dtype, site




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
        self.thread = threading.get_ident()
        self.workspaces = {}        # ("forward" / "backward", stream) -> the cuBLAS workspace's block
        self.handles = {}           # ("cublas" / "cudnn", "forward" / "backward") -> the driver's handle
        self.current_stream = None  # the stream code made current (torch.cuda.stream), None: the default
        self.pinned_host = None     # the driver's pinned host memory behind PyTorch's cache (_pinned.py)
        self.divergences = {}       # kind -> sentence (Note [Divergences])
        self.default_on_device = False  # torch.set_default_device("cuda") on PyTorch 2.x
        self.events = EventLog(os.environ.get("OOMH_EVENTS"))
        self.peak_mark = 0          # allocated bytes above which the next new high is reported to on_peak
        self.on_peak = None         # the probe's (Note [The peak breakdown] in probe.py)
        model.before_new_segment = self.sweep  # every storage that died gives its block back first

    # ---- storages
    @staticmethod
    def _storage(t):
        if hasattr(t, "untyped_storage"):  # PyTorch 2.x (t.storage() warns there)
            return t.untyped_storage()
        s = t.storage()
        return getattr(s, "_storage", s)

    @staticmethod
    def _key(t):
        """The address of t's storage, or None when it has no memory: the storage's identity while it lives.
        Worked out from the tensor (three C calls), since making a storage object costs more than the rest
        of an operation's booking (bench/python/virtual_device_cost.py)."""
        try:
            ptr = t.data_ptr()
            return ptr - t.storage_offset() * t.element_size() if ptr else None
        except Exception:  # noqa: BLE001 - sparse and other layouts have no plain storage
            return None

    def _live(self, key):
        """Whether key is the address of a storage on the device that still lives."""
        entry = self.tracked.get(key)
        if entry is None:
            return False
        if _expired(entry.weak):  # that storage died, and the address went to a new one
            self._release(key)
            return False
        return True

    def on_device(self, t):
        if not isinstance(t, torch.Tensor):
            return False
        key = self._key(t)
        return key is not None and self._live(key)

    def book(self, t):
        """Puts t's storage on the device (once). May raise torch.cuda.OutOfMemoryError."""
        key = self._key(t)
        if key is None:
            return
        if self._live(key):
            return
        s = self._storage(t)
        block = self.model.malloc(s.nbytes())
        # Note [Where a tensor was made] (_breakdown.py): only a block of SITE_MIN_BYTES or more pays for the
        # walk up the stack (a few microseconds per booking).
        site = user_site(sys._getframe(1)) if block.size >= SITE_MIN_BYTES else ()
        self.tracked[key] = _Tracked(block, s._weak_ref(), key, t.shape, t.dtype, site)
        self.order.append(key)
        if self.model.allocated > self.peak_mark:
            # Note [The peak breakdown] in probe.py: a new high, 1/16 above the last one taken.
            self.peak_mark = self.model.allocated + self.model.allocated // 16
            if self.on_peak is not None:
                self.on_peak()

    def _release(self, key):
        entry = self.tracked.pop(key, None)
        if entry is None:
            return
        torch.UntypedStorage._free_weak_ref(entry.weak)
        self.model.free(entry.block)

    def sweep(self, young_only=False):
        keys = self.order[-YOUNG:] if young_only else self.order
        tracked = self.tracked
        dead = [k for k in keys if k in tracked and _expired(tracked[k].weak)]
        for k in dead:
            self._release(k)
        if dead or len(self.order) > 2 * len(self.tracked) + YOUNG:
            self.order = [k for k in self.order if k in self.tracked]

    # ---- what no tensor shows, and what the CPU cannot do
    def in_backward(self):
        return getattr(self._local, "backward", 0) > 0

    def library_handle(self, library, which):
        """The handle `library` makes on thread `which` the first time it is used there, allocated outside the
        caching allocator (Note [What libraries allocate outside the caching allocator]). Raises the library's
        RuntimeError when the driver (the cap, a fault) refuses it."""
        key = (library, which)
        if key in self.handles:
            return
        size = LIBRARY_HANDLE_BYTES[library]
        self.handles[key] = self._library_alloc(library, size) if LIBRARY_THROUGH_SHIM[library] else (None, size)
        self.events.write("library_alloc", {"library": library, "thread": which, "bytes": size,
                                            "counted": LIBRARY_THROUGH_SHIM[library]})

    def _library_alloc(self, library, size):
        from .caching_allocator import OutOfMemory
        try:
            block = self.model.source.alloc(size)
        except OutOfMemory:
            block = None
        if block is None:
            self.library_refused(library)
            raise RuntimeError(LIBRARY_ERRORS[library])
        return block, size

    def library_refused(self, library):
        """A library's handle was refused (shape_only.py records it as the OOM a prediction names)."""

    def blas_call(self):
        """The cuBLAS handle and workspace of the thread (and stream) a GPU would run this BLAS call on (Note
        [What a GPU holds that no tensor shows], Note [What libraries allocate outside the caching
        allocator])."""
        which = "backward" if self.in_backward() else "forward"
        self.library_handle("cublas", which)
        key = (which, id(self.current_stream) if self.current_stream is not None else 0)
        if key not in self.workspaces:  # a refused workspace is asked for again at the next call, as on a GPU
            self.workspaces[key] = self.model.malloc(cublas_workspace_bytes())

    def conv_call(self):
        """The cuDNN handle of the thread a GPU would run this convolution on."""
        self.library_handle("cudnn", "backward" if self.in_backward() else "forward")

    def diverged(self, kind, sentence):
        """Says once per kind that this run does something a GPU would not (Note [Divergences])."""
        if kind in self.divergences:
            return
        self.divergences[kind] = sentence
        self.events.write("divergence", {"kind": kind, "detail": sentence})

    def check_thread(self):
        if threading.get_ident() != self.thread:
            self.diverged("other_thread", "a thread other than the one that imported torch asked for the CUDA "
                          "device: its tensors are booked, but the operations it runs are not seen")

    # ---- installing
    def _make_mode(self):
        return _DeviceMode(self)  # shape_only.py gives its own (Note [Shape-only mode])

    def install(self):
        self._mode = self._make_mode()
        self._mode.__enter__()
        self._patch()
        self.events.write("virtual_device", {"description": DESCRIPTION % torch.__version__,
                                             "torch": torch.__version__, "model": "caching-allocator",
                                             "cublas_workspace": cublas_workspace_bytes()})
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
                device = kwargs.get("device")
                if _is_cuda(device) or (device is None and dev.default_on_device and not dev.creating()):
                    dev.check_thread()
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
            dev.check_thread()
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

        # Note [Host memory] (injector/engine/fault_plan.h): a pin asks the driver double for pinned host memory
        # through the shim, so a `memory: host` fault refuses it as cudaHostAlloc is refused on a GPU
        # (python/oomharness/_pinned.py). Without the driver, host memory stays where it is.
        pinned_host = self.pinned_host = _pinned.pinned_host_for(self.model)

        def pin_memory(self, *args, **kwargs):
            if pinned_host is None or dev.on_device(self):
                return self
            return pinned_host.pin(self)

        self._set(torch.Tensor, "cuda", cuda)
        self._set(torch.Tensor, "to", to)
        self._set(torch.Tensor, "cpu", cpu)
        self._set(torch.Tensor, "pin_memory", pin_memory)
        self._patch_autograd()
        self._patch_amp()
        self._patch_default_device()
        self._patch_runtime_objects()
        self._patch_load()
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
            return model.mem_info()

        def set_per_process_memory_fraction(fraction, device=None):
            _, total = model.source.mem_info()
            model.fraction_limit = int(total * fraction)

        class _Properties:
            def __init__(self):
                free, total = mem_get_info()
                self.name = "virtual CUDA device (PyTorch %s on the CPU, caching-allocator model)" % torch.__version__
                self.total_memory = total
                self.major, self.minor = 9, 0  # as the H100 the model's figures were checked against
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
                            ("memory_summary", memory_summary),
                            ("get_device_capability", lambda device=None: (9, 0)),
                            ("is_bf16_supported", lambda *a, **k: True),
                            # No stream is ever capturing a graph (optimizers on PyTorch 2.x ask).
                            ("is_current_stream_capturing", lambda: False),
                            # The CPU RNG stands in for CUDA's: torch.manual_seed seeds it already.
                            ("manual_seed", lambda seed: None), ("manual_seed_all", lambda seed: None),
                            ("seed", lambda: None), ("seed_all", lambda: None),
                            ("get_rng_state", lambda device="cuda": torch.get_rng_state()),
                            ("set_rng_state", lambda state, device="cuda": torch.set_rng_state(state)),
                            ("get_rng_state_all", lambda: [torch.get_rng_state()]),
                            ("set_rng_state_all", lambda states: torch.set_rng_state(states[0]))):
            self._set(cuda_mod, name, value)
        # The allocator's own entry, which the probe calls to flush the cache before a faulted step (Note
        # [Flushing before a faulted step] in probe.py), so that the code's empty_cache() stays its own.
        self._set(torch._C, "_cuda_emptyCache", empty_cache)
        # The allocator's OOM observers (the probe's: Note [Caught or not] in probe.py) hear of each OOM the
        # model raises, as the native allocator's do on PyTorch 2.x.
        self._set(torch._C, "_cuda_attach_out_of_memory_observer", model.oom_observers.append)
        # torch.cuda's submodules define what torch.cuda re-exports; code may call them there.
        self._mirror(getattr(cuda_mod, "graphs", None), cuda_mod, ("is_current_stream_capturing",))
        self._mirror(getattr(cuda_mod, "random", None), cuda_mod,
                     ("manual_seed", "manual_seed_all", "seed", "seed_all", "get_rng_state", "set_rng_state",
                      "get_rng_state_all", "set_rng_state_all"))
        self._mirror(getattr(cuda_mod, "memory", None), cuda_mod,
                     ("empty_cache", "memory_allocated", "memory_reserved", "memory_stats", "mem_get_info",
                      "max_memory_allocated", "reset_peak_memory_stats", "memory_summary"))

    def _mirror(self, owner, source, names):
        """Sets owner.NAME to source.NAME for each of `names` that owner has (owner may be None)."""
        if owner is None:
            return
        for name in names:
            if hasattr(owner, name):
                self._set(owner, name, getattr(source, name))


    def _patch_autograd(self):
        """Marks backward, which a GPU runs on autograd's own thread, with a cuBLAS handle of its own."""
        dev = self

        def marking(fn):
            def wrapper(*args, **kwargs):
                dev._local.backward = getattr(dev._local, "backward", 0) + 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    dev._local.backward -= 1
            wrapper.__wrapped__ = fn
            return wrapper

        self._set(torch.autograd, "backward", marking(torch.autograd.backward))
        self._set(torch.autograd, "grad", marking(torch.autograd.grad))

    def _patch_amp(self):
        """CUDA autocast runs as CPU bfloat16 autocast; GradScaler is disabled (Note [Divergences])."""
        dev = self
        autocast = torch.amp.autocast_mode.autocast
        original_init = autocast.__init__

        def init(self_, device_type, dtype=None, enabled=True, cache_enabled=None):
            if device_type == "cuda":
                if enabled and dtype != torch.bfloat16:
                    dev.diverged("autocast", "CUDA autocast to %s ran as CPU autocast to bfloat16: activations "
                                 "take the same 2 bytes, the numerics differ" % (
                                     str(dtype or torch.float16).replace("torch.", "")))
                device_type, dtype = "cpu", torch.bfloat16
            original_init(self_, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

        init.__wrapped__ = original_init
        self._set(autocast, "__init__", init)

        scalers = []
        amp = getattr(torch, "amp", None)
        if amp is not None and hasattr(amp, "grad_scaler") and hasattr(amp.grad_scaler, "GradScaler"):
            scalers.append(amp.grad_scaler.GradScaler)
        cuda_scaler = getattr(getattr(torch.cuda, "amp", None), "GradScaler", None)
        if cuda_scaler is not None and not any(issubclass(cuda_scaler, c) for c in scalers):
            scalers.append(cuda_scaler)
        for cls in scalers:
            original = cls.__init__

            def scaler_init(self_, *args, _original=original, **kwargs):
                _original(self_, *args, **kwargs)
                if getattr(self_, "_enabled", False):
                    self_._enabled = False
                    dev.diverged("grad_scaler", "GradScaler was disabled: under bfloat16 autocast no loss "
                                 "scaling is needed, so its inf checks and skipped steps do not happen")

            scaler_init.__wrapped__ = original
            self._set(cls, "__init__", scaler_init)

    def _patch_runtime_objects(self):
        """Streams, events, device guards and NVTX ranges (Note [No CUDA runtime under the virtual device])."""
        cuda_mod = torch.cuda
        default = _Stream()
        state = {"current": default}
        dev = self

        def make_current(stream):
            # The cuBLAS workspace is per handle and stream (blas_call): the device knows the current one.
            state["current"] = stream
            dev.current_stream = None if stream is default else stream

        class _StreamContext:
            def __init__(self, stream):
                self.stream, self.saved = stream, None

            def __enter__(self):
                self.saved = state["current"]
                if self.stream is not None:
                    make_current(self.stream)
                return self.stream

            def __exit__(self, *exc):
                make_current(self.saved)
                return False

        class _DeviceGuard:
            """torch.cuda.device(i) / device_of(t): one device, so a guard that changes nothing."""
            def __init__(self, device=None):
                self.idx = 0

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        def set_stream(stream):
            make_current(stream if stream is not None else default)

        for name, value in (("Event", _Event), ("Stream", _Stream), ("ExternalStream", _Stream),
                            ("StreamContext", _StreamContext), ("stream", _StreamContext),
                            ("current_stream", lambda device=None: state["current"]),
                            ("default_stream", lambda device=None: default), ("set_stream", set_stream),
                            ("device", _DeviceGuard), ("device_of", _DeviceGuard),
                            ("_exchange_device", lambda device: 0), ("_maybe_exchange_device", lambda device: 0),
                            ("_lazy_init", lambda: None)):
            if hasattr(cuda_mod, name):
                self._set(cuda_mod, name, value)
        self._mirror(getattr(cuda_mod, "streams", None), cuda_mod, ("Event", "Stream", "ExternalStream"))
        # CUDA graphs are not modelled: a clear error where the CPU build's dummy class would say "Tried to
        # instantiate dummy base class CUDAGraph" (Note [No CUDA runtime under the virtual device]).
        for name in ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle"):
            if hasattr(cuda_mod, name):
                self._set(cuda_mod, name, _graphs_not_modelled(name))
        self._mirror(getattr(cuda_mod, "graphs", None), cuda_mod,
                     ("CUDAGraph", "graph", "make_graphed_callables", "graph_pool_handle"))
        nvtx = getattr(cuda_mod, "nvtx", None)
        if nvtx is not None:
            class _Range:
                def __init__(self, *args, **kwargs):
                    pass

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    return False

                def __call__(self, fn):
                    return fn

            for name, value in (("range_push", lambda msg: 0), ("range_pop", lambda: 0), ("mark", lambda msg: None),
                                ("range_start", lambda msg: 0), ("range_end", lambda rid: None), ("range", _Range)):
                if hasattr(nvtx, name):
                    self._set(nvtx, name, value)
        original_record_stream = torch.Tensor.record_stream

        def record_stream(t, stream):
            if isinstance(stream, _Stream) or dev.on_device(t):
                return None  # work is synchronous on the CPU: nothing to keep alive for another stream
            return original_record_stream(t, stream)

        self._set(torch.Tensor, "record_stream", record_stream)

    def _patch_load(self):
        """torch.load(..., map_location="cuda" | "cuda:0" | torch.device("cuda") | 0 | {...: "cuda:0"} | fn):
        the storages are read to the host, and what was meant for the device is booked there, as a GPU would
        hold it (Note [No CUDA runtime under the virtual device])."""
        dev = self
        local = self._local
        original_load = torch.load

        def host_location(where):
            """(the map_location to read with, whether the result goes on the device)."""
            if where is None:
                return None, False
            if isinstance(where, (str, torch.device)) or (isinstance(where, int) and not isinstance(where, bool)):
                to_cuda = isinstance(where, int) or _is_cuda(where)
                return ("cpu" if to_cuda else where), to_cuda
            if isinstance(where, dict):
                cuda = {k for k, v in where.items() if _is_cuda(v) or isinstance(v, torch.device) and v.type == "cuda"}
                return {k: ("cpu" if k in cuda else v) for k, v in where.items()}, bool(cuda)
            if callable(where):
                return where, None  # known after the load: did the function move a storage (storage.cuda())?
            return where, False

        def load(f, map_location=None, *args, **kwargs):
            target, to_device = host_location(map_location)
            local.load_moved = False
            out = original_load(f, target, *args, **kwargs)
            if to_device or (to_device is None and getattr(local, "load_moved", False)):
                for t in _tensors_in(out):
                    dev.book(t)
            return out

        load.__wrapped__ = original_load
        self._set(torch, "load", load)
        if getattr(torch.serialization, "load", None) is original_load:
            self._set(torch.serialization, "load", load)

        # A map_location function moves storages with storage.cuda(): on the CPU build that raises, and on a
        # CUDA build without a GPU it reaches the driver. Here it leaves the storage on the host and says so.
        storage_base = getattr(torch.storage, "_StorageBase", None)
        typed = getattr(torch.storage, "TypedStorage", None)
        for cls in (storage_base, typed):
            if cls is None or not hasattr(cls, "cuda"):
                continue
            original = cls.cuda

            def storage_cuda(self_, device=None, non_blocking=False, _original=original, **kwargs):
                local.load_moved = True
                return self_

            storage_cuda.__wrapped__ = original
            self._set(cls, "cuda", storage_cuda)

    def _patch_default_device(self):
        """torch.set_default_device("cuda") and torch.accelerator (PyTorch 2.x)."""
        dev = self
        if hasattr(torch, "set_default_device"):
            original_set = torch.set_default_device

            def set_default_device(device):
                dev.default_on_device = _is_cuda(device)
                return original_set("cpu" if dev.default_on_device else device)

            self._set(torch, "set_default_device", set_default_device)
            if hasattr(torch, "get_default_device"):
                original_get = torch.get_default_device
                self._set(torch, "get_default_device",
                          lambda: torch.device("cuda", 0) if dev.default_on_device else original_get())
        accel = getattr(torch, "accelerator", None)
        if accel is None:
            return
        answers = {"is_available": lambda: True, "device_count": lambda: 1,
                   "current_accelerator": lambda check_available=False: torch.device("cuda"),
                   "current_device_index": lambda: 0, "current_device_idx": lambda: 0,
                   "set_device_index": lambda device: None, "set_device_idx": lambda device: None,
                   "synchronize": lambda device=None: None,
                   # Adam and AdamW (PyTorch >= 2.10) ask the accelerator's current stream whether a graph is
                   # being captured, before every step: the virtual device's stream never is.
                   "current_stream": lambda device=None: torch.cuda.current_stream(),
                   "set_stream": lambda stream: torch.cuda.set_stream(stream)}
        answers.update({name: getattr(torch.cuda, name) for name in (
            "empty_cache", "memory_allocated", "memory_reserved", "memory_stats", "max_memory_allocated",
            "max_memory_reserved", "reset_peak_memory_stats")})
        answers["get_memory_info"] = lambda device=None: torch.cuda.mem_get_info()
        for owner in (accel, getattr(accel, "memory", None)):
            if owner is not None:
                for name, value in answers.items():
                    if hasattr(owner, name):
                        self._set(owner, name, value)


# Note [No CUDA runtime under the virtual device]
# On a CUDA build without a GPU (what `pip install torch` gives a laptop or a CI runner), any call that reaches
# the CUDA runtime fails ("API call is not supported in the installed CUDA driver") or prints its
# initialisation warnings; on a CPU build the same calls raise "Torch not compiled with CUDA" or meet dummy
# classes. So nothing the virtual device does may reach it: streams and events are host objects (work runs
# synchronously on the CPU, so an event is complete once recorded and times with the host's clock), a device
# guard changes nothing (there is one device), NVTX ranges are no-ops, and torch.load reads storages meant for
# the device to the host and books them. tests/python/test_cuda_build.py runs each way public code writes
# these, under every PyTorch of the CI matrix.
class _Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
        self.enable_timing = enable_timing
        self._t = None

    def record(self, stream=None):
        import time
        self._t = time.perf_counter()

    def wait(self, stream=None):
        pass

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end_event._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._t - self._t) * 1000.0


GRAPHS_NOT_MODELLED = ("torch.cuda.%s: CUDA graphs are not modelled by oomharness's virtual CUDA device "
                       "(docs/without-a-gpu.md): run this job without capturing graphs, or on a GPU")


def _graphs_not_modelled(name):
    """What stands for torch.cuda.NAME: a class where PyTorch has one (CUDAGraph, graph), so that annotations
    such as `torch.cuda.CUDAGraph | None` in libraries' code still work, else a function; either refuses."""
    def refuse(*args, **kwargs):
        raise RuntimeError(GRAPHS_NOT_MODELLED % name)
    if name in ("CUDAGraph", "graph"):
        return type(name, (), {"__init__": refuse, "__module__": "torch.cuda"})
    refuse.__name__ = name
    return refuse


class _Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("cuda", 0)
        self.priority = priority
        self.cuda_stream = 0

    def wait_event(self, event):
        pass

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        event = event if event is not None else _Event()
        event.record(self)
        return event

    def query(self):
        return True

    def synchronize(self):
        pass

    def is_capturing(self):
        return False  # no CUDA graph is ever captured on the virtual device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _tensors_in(obj, depth=0):
    """The tensors in what torch.load returned: nested dicts, lists and tuples (a checkpoint's shape)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 16 and isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors_in(v, depth + 1)
    elif depth < 16 and isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors_in(v, depth + 1)


class _DeviceMode(TorchDispatchMode):
    def __init__(self, device):
        super().__init__()
        self.device = device

    # Runs at every ATen operation: kept to what the booking needs (its cost is measured against a bare
    # dispatch mode's by bench/python/virtual_device_cost.py).
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        dev = self.device
        out = func(*args, **kwargs) if kwargs else func(*args)
        if dev.copying_to_host():
            return out
        key = dev._key
        in_keys = []
        from_device = dev.creating()
        for a in _tensors(args, kwargs):
            k = key(a)
            in_keys.append(k)
            if not from_device and k is not None and dev._live(k):
                from_device = True
        if not from_device:
            return out
        outs = (out,) if isinstance(out, torch.Tensor) else _tensors(out if isinstance(out, (list, tuple)) else (), None)
        swept = False
        for t in outs:
            k = key(t)
            if k is None or k in in_keys or dev._live(k):
                continue  # a view, an in-place result, or a storage already on the device
            if not swept:  # tensors that died since: their blocks go back to the cache first, as on a GPU
                dev.sweep(young_only=True)
                swept = True
            dev.book(t)
        # After the outputs: a library asks for its handle when the operation runs, its result already allocated.
        watch = _WATCHED.get(func)
        if watch is None:
            watch = _WATCHED[func] = _WATCHED_BY_NAME.get(func.overloadpacket.__name__, False)
        if watch:
            watch(dev, out, args)
        return out


def _tensors(args, kwargs):
    """The tensors among an operation's arguments (and one level into lists: cat, stack, foreach ops)."""
    found = []
    for group in (args, kwargs.values() if kwargs else ()):
        for a in group:
            if isinstance(a, torch.Tensor):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                found.extend(b for b in a if isinstance(b, torch.Tensor))
    return found


def _softmax(dev, out, args):
    # Attention computed from its parts on the CPU (PyTorch 1.x's nn.MultiheadAttention, hand-written
    # attention, and PyTorch 2.x's math fallback, whose parts the mode sees) keeps the B*H*S^2 probabilities,
    # which fused attention on a GPU does not (the study: 128 of 388 MiB per sample of the fidelity model;
    # examples/python/train.py's transformer peaked 1.42x higher than on an H100 with PyTorch 2.11).
    if isinstance(out, torch.Tensor) and out.dim() >= 3 and out.shape[-1] == out.shape[-2] >= 64:
        dev.diverged("attention", "attention kept its %s probabilities, which a GPU's fused attention does not "
                     "keep: peaks are higher and the largest batch lower than on a GPU that fuses it"
                     % "x".join(str(d) for d in out.shape))


def _scalar_read(dev, out, args):
    # `.item()` of a device tensor: PyTorch 2.x copies the value through a pinned host block (measured on an
    # H200: a 4-byte cuMemHostAlloc at a loop's first float32 loss.item(); Note [The pinned host cache]).
    if dev.pinned_host is not None and args and isinstance(args[0], torch.Tensor):
        dev.pinned_host.scratch(args[0].element_size())


def _convolution(dev, out, args):
    dev.conv_call()
    dev.diverged("convolution", "convolutions ran on the CPU: cuDNN's handle is allocated as on a GPU, its "
                 "workspaces and algorithm choice are not modelled")


_WATCHED_BY_NAME = {name: (lambda dev, out, args: dev.blas_call()) for name in BLAS_OPS}
_WATCHED_BY_NAME.update({"_softmax": _softmax, "softmax": _softmax, "convolution": _convolution,
                         "_local_scalar_dense": _scalar_read,
                         "convolution_backward": _convolution})
_WATCHED = {}  # operation -> its watcher, or False: looked up by name once per operation


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
