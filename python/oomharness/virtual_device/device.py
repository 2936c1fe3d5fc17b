"""The virtual device itself: which storages are on it and their blocks in the caching-allocator model, the
thread that owns it, and what it says where it cannot do what a GPU would. Its parts (PARTS) answer the
ways code reaches CUDA: tensors.py (.cuda(), .to(), factories, pins), runtime.py (torch.cuda, streams,
events), libraries.py (cuBLAS and cuDNN), amp.py (autocast, GradScaler), loading.py (torch.load, safetensors),
parallel.py (nn.DataParallel, NCCL) and unsupported.py (what it cannot run, said in one place); the dispatch
mode (mode.py) sees every operation.

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

Note [Divergences]
Where the CPU cannot do what a GPU would, the device does the nearest thing and says so, once per kind and
process, as a `divergence` event that the reports list under the job: CUDA autocast runs as CPU bfloat16
autocast (activations take 2 bytes, as under float16 on a GPU; the numerics differ), a GradScaler is disabled
(bfloat16 needs no loss scaling), composite attention keeps B*H*S^2 probabilities that a GPU's fused attention
does not, convolutions run without cuDNN's workspaces, and CUDA requests on other threads are booked but their
operations are not seen.
"""

import contextlib
import sys
import threading

import torch

from .. import _sites
from .amp import Amp
from .libraries import Libraries, cublas_workspace_bytes
from .loading import Loading
from .mode import DeviceMode
from .parallel import Parallel
from .runtime import Runtime
from .tensors import Tensors
from .unsupported import Errors

YOUNG = 64  # storages checked before each booking, newest first
_expired = torch.UntypedStorage._expired

DESCRIPTION = "virtual CUDA device (PyTorch %s on the CPU, caching-allocator model)"

# The device's parts, in the order they install (each through the patch table: Note [The patch table]).
PARTS = (("libraries", Libraries), ("tensors", Tensors), ("runtime", Runtime), ("amp", Amp), ("loading", Loading),
         ("parallel", Parallel), ("unsupported", Errors))


class _Tracked:
    __slots__ = ("block", "weak", "key", "shape", "dtype", "site")

    def __init__(self, block, weak, key, shape=None, dtype=None, site=()):
        self.block, self.weak, self.key = block, weak, key
        self.shape, self.dtype, self.site = shape, dtype, site


class VirtualDevice:
    """Installs the virtual device in this process: torch.cuda answers from the model, CUDA requests land on
    the CPU, and device storages are booked (Note [Which tensors are on the virtual device])."""

    def __init__(self, ctx, model):
        self.ctx = ctx
        self.model = model
        self.tracked = {}   # storage data_ptr -> _Tracked
        self.emptied = {}   # StorageImpl address -> weak reference: the device's storages resized to 0 bytes
        self.order = []     # keys, oldest first
        self._local = threading.local()  # creating, host: what this thread is doing (making(), host_work())
        self._mode = None
        self.thread = threading.get_ident()
        self.current_stream = None  # the stream code made current (torch.cuda.stream), None: the default
        self.pinned_host = None     # the driver's pinned host memory behind PyTorch's cache (pinned.py)
        self.divergences = {}       # kind -> sentence (Note [Divergences])
        self.peak_mark = 0          # allocated bytes above which the next new high is a `device_peak`
        self.parts = {name: make(self) for name, make in PARTS}
        self.libraries = self.parts["libraries"]
        self.rng = self.parts["runtime"].rng  # the dispatch mode draws from it (Note [The CUDA generator's state])
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

    def holds_storage(self, s):
        """Whether the untyped storage s is on the device (torch.save's location: loading.py)."""
        key = self.storage_key(s)
        return key is not None and self._live(key)

    def on_device(self, t):
        if not isinstance(t, torch.Tensor):
            return False
        key = self._key(t)
        if key is None:  # no memory: the device's still if it emptied it (Note [A storage resized on the device])
            return bool(self.emptied) and self.emptied_storage(self._storage(t))
        return self._live(key)

    def book(self, t):
        """Puts t's storage on the device (once). May raise torch.cuda.OutOfMemoryError."""
        key = self._key(t)
        if key is None:
            return
        if self._live(key):
            return
        self._book_storage(key, self._storage(t), t.shape, t.dtype, sys._getframe(1))

    def _book_storage(self, key, s, shape, dtype, frame):
        block = self.model.malloc(s.nbytes())
        # Note [Where a tensor was made] (_sites.py): only a block of SITE_MIN_BYTES or more pays for the
        # walk up the stack (a few microseconds per booking).
        site = _sites.user_site(frame) if block.size >= _sites.SITE_MIN_BYTES else ()
        self.tracked[key] = _Tracked(block, s._weak_ref(), key, shape, dtype, site)
        self.order.append(key)
        if self.model.allocated > self.peak_mark:
            # Note [The peak breakdown] in probe/memory.py: a new high, 1/16 above the last one taken.
            self.peak_mark = self.model.allocated + self.model.allocated // 16
            self.ctx.hooks.call("device_peak")

    def emptied_storage(self, s):
        """Whether s is a storage of the device resized to 0 bytes (Note [A storage resized on the device])."""
        weak = self.emptied.get(s._cdata)
        if weak is None:
            return False
        if _expired(weak):
            del self.emptied[s._cdata]
            torch.UntypedStorage._free_weak_ref(weak)
            return False
        return True

    def storage_key(self, s):
        """The key of the untyped storage s in `tracked` (its address; None without memory)."""
        return s.data_ptr() or None

    def resized(self, s, old_key, old_bytes):
        """s, the device's, was resized from old_bytes (Note [A storage resized on the device] in tensors.py): its
        new memory is booked and its old block goes back (the new first where both have their own address, as
        a GPU's resize copies before it frees)."""
        nbytes = s.nbytes()
        if nbytes == old_bytes:
            return  # resized to the size it had: the same memory (an emptied storage stays emptied)
        weak = self.emptied.pop(s._cdata, None)
        if weak is not None:
            torch.UntypedStorage._free_weak_ref(weak)
        key = self.storage_key(s) if nbytes else None
        if old_key is not None and old_key == key:
            self._release(old_key)  # one key for old and new (shape-only mode: the storage's identity)
            old_key = None
        if key is not None:
            self._book_storage(key, s, (nbytes,), torch.uint8, sys._getframe(2))
        else:
            self.emptied[s._cdata] = s._weak_ref()
        if old_key is not None:
            self._release(old_key)

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

    # ---- what the CPU cannot do
    def diverged(self, kind, sentence):
        """Says once per kind that this run does something a GPU would not (Note [Divergences])."""
        if kind in self.divergences:
            return
        self.divergences[kind] = sentence
        self.ctx.emit("divergence", kind=kind, detail=sentence)

    def check_thread(self):
        if threading.get_ident() != self.thread:
            self.diverged("other_thread", "a thread other than the one that imported torch asked for the CUDA "
                          "device: its tensors are booked, but the operations it runs are not seen")

    def library_refused(self, library):
        """A library's handle was refused (shape_only.py records it as the OOM a prediction names)."""

    # ---- what this thread is doing
    def creating(self):
        """Inside making(): every storage an operation makes is the device's."""
        return getattr(self._local, "creating", 0) > 0

    def copying_to_host(self):
        """Inside host_work(): no operation's output is booked."""
        return getattr(self._local, "host", 0) > 0

    @contextlib.contextmanager
    def making(self):
        self._local.creating = getattr(self._local, "creating", 0) + 1
        try:
            yield
        finally:
            self._local.creating -= 1

    @contextlib.contextmanager
    def host_work(self):
        self._local.host = getattr(self._local, "host", 0) + 1
        try:
            yield
        finally:
            self._local.host -= 1

    def host_copy(self, t):
        """A copy of a device tensor in host memory (`.cpu()`): not booked."""
        with self.host_work():
            return t.clone()

    # ---- installing
    def make_mode(self):
        return DeviceMode(self)  # shape_only.py gives its own (Note [Shape-only mode])

    def install(self):
        ctx = self.ctx
        self._mode = self.make_mode()
        self._mode.__enter__()
        ctx.patches.registered("device", "the device's TorchDispatchMode, entered on the thread that imported torch",
                               self._leave_mode)
        for part in self.parts.values():
            part.install(torch, ctx.patches)
        ctx.device = self
        ctx.emit("virtual_device", description=DESCRIPTION % torch.__version__, torch=torch.__version__,
                 model="caching-allocator", cublas_workspace=cublas_workspace_bytes())
        return self

    def _leave_mode(self):
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None

    def uninstall(self):
        self.ctx.patches.uninstall("device")
        if self.ctx.device is self:
            self.ctx.device = None


def oom_error(message):
    return torch.cuda.OutOfMemoryError(message)
