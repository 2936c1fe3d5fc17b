"""Where the modelled caching allocator's segments come from (Note [The caching allocator, modelled] in
allocator.py): the CUDA driver through the shim on the virtual device (DriverSegments), a byte budget in unit tests
(BudgetSegments). A source has request(size) (a fault aimed at a step, asked before the cache is looked in),
alloc(size) -> handle, free(handle, size) and mem_info() -> (free, total)."""

import ctypes
import sys

from .. import _abi, _sites


# This model is the `allocator` request layer (Note [Where a step fault fires] in injector/engine/fault_plan.h).
LAYER_ALLOCATOR = _abi.REQUEST_LAYERS["allocator"]


class OutOfMemory(Exception):
    """Raised by a SegmentSource when the driver refuses a segment."""


class BudgetSegments:
    """Segments from a fixed budget of bytes; `refuse` makes the next N segments fail, `refuse_requests` the next
    N requests (for tests)."""

    def __init__(self, total):
        self.total = total
        self.used = 0
        self.refuse = 0
        self.refuse_requests = 0
        self.requests = []  # sizes asked for, in order (refused ones too)
        self._next = 1

    def request(self, size):
        """Whether the fault plan refuses a request of `size` bytes (Note [Where a step fault fires])."""
        if self.refuse_requests > 0:
            self.refuse_requests -= 1
            return True
        return False

    def alloc(self, size):
        self.requests.append(size)
        if self.refuse > 0:
            self.refuse -= 1
            raise OutOfMemory()
        if self.used + size > self.total:
            raise OutOfMemory()
        self.used += size
        handle = self._next
        self._next += 1
        return handle

    def free(self, handle, size):
        self.used -= size

    def mem_info(self):
        return self.total - self.used, self.total


class DriverSegments:
    """Segments from the CUDA driver (on the virtual device: the CPU driver double, with the shim preloaded,
    which sees each segment as the real driver's allocation and applies the job's faults and caps)."""

    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = 2

    def __init__(self, device=0, library="libcuda.so.1", record_sites=False, where=None):
        self.ordinal = device
        self._where = where  # () -> (step, phase number) of this process (Note [Where a step fault fires])
        self.lib = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
        self._check(self.lib.cuInit(0), "cuInit")
        self.device = ctypes.c_int(0)
        self._check(self.lib.cuDeviceGet(ctypes.byref(self.device), device), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self._alloc = self.lib.cuMemAlloc_v2
        self._alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self._free = self.lib.cuMemFree_v2
        self._free.argtypes = [ctypes.c_uint64]
        self._info = self.lib.cuMemGetInfo_v2
        self._info.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        # Note [The site of a recorded call] (injector/engine/engine.h): while a sweep's golden run records
        # a step's allocations, each segment's `alloc` event names the user's line that asked for it. Only
        # then: finding the line walks the stack.
        self._note_site = None
        if record_sites:
            try:
                self._note_site = ctypes.CDLL(None).oomh_note_site
                self._note_site.argtypes = [ctypes.c_char_p]
                self._note_site.restype = None
            except (AttributeError, OSError):
                self._note_site = None  # no shim preloaded: nothing records
        # Note [Where a step fault fires] (injector/engine/fault_plan.h): this model is the job's allocator
        # layer; without the shim, no request is ever refused.
        self._request = None
        try:
            shim = ctypes.CDLL(None)
            register, self._request = shim.oomh_register_requests, shim.oomh_request
        except (AttributeError, OSError):
            register = None
        if register is not None:
            register.argtypes = [ctypes.c_int]
            register.restype = None
            self._request.argtypes = [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_int, ctypes.c_longlong, ctypes.c_int]
            self._request.restype = ctypes.c_int
            register(LAYER_ALLOCATOR)

    def request(self, size):
        """Whether the fault plan refuses a request of `size` bytes (Note [Where a step fault fires])."""
        if self._request is None or self._where is None:
            return False
        step, phase = self._where()
        return self._request(LAYER_ALLOCATOR, size, self.ordinal, step, phase) == 1

    def _check(self, rc, what):
        if rc != self.CUDA_SUCCESS:
            raise RuntimeError("%s failed with CUDA error %d" % (what, rc))

    def _current(self):
        # The context is per thread (autograd runs backward on a thread of its own).
        self.lib.cuCtxSetCurrent(self.context)

    def alloc(self, size):
        self._current()
        ptr = ctypes.c_uint64(0)
        if self._note_site is not None:
            where = _sites.site_text(_sites.user_site(sys._getframe(1), 1))
            self._note_site(where.encode("utf-8", "replace") if where else None)
            try:
                rc = self._alloc(ctypes.byref(ptr), size)
            finally:
                self._note_site(None)
        else:
            rc = self._alloc(ctypes.byref(ptr), size)
        if rc == self.CUDA_ERROR_OUT_OF_MEMORY:
            raise OutOfMemory()
        self._check(rc, "cuMemAlloc_v2")
        return ptr.value

    def free(self, handle, size):
        self._current()
        self._check(self._free(handle), "cuMemFree_v2")

    def mem_info(self):
        self._current()
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self._check(self._info(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value


__all__ = ["BudgetSegments", "DriverSegments", "LAYER_ALLOCATOR", "OutOfMemory"]
