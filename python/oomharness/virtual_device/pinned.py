"""Pinned host memory on the virtual CUDA device (Note [Host memory] in injector/engine/fault_plan.h).

On a GPU, `Tensor.pin_memory()` (and a DataLoader with `pin_memory=True`, whose pin thread calls it on each
batch) asks PyTorch's CachingHostAllocator for page-locked memory, which calls cudaHostAlloc, which reaches the
driver's cuMemHostAlloc. Where the driver refuses, C10_CUDA_CHECK raises `torch.AcceleratorError` (a
RuntimeError, not an OutOfMemoryError) whose message starts "CUDA error: out of memory"
(c10/cuda/CUDAException.cpp, c10_cuda_check_implementation).

On the virtual device the same call goes to the CPU driver double's cuMemHostAlloc through the shim, so a
`memory: host` rule or cap refuses it and records the `inject` event as on a GPU. Without the driver (a
budget-only virtual device) nothing is pinned, as before.

Note [The pinned host cache]
PyTorch's CachingHostAllocator does not give a pinned block back to the driver when its tensor dies: it keeps
it, and the next pin of the same size class (the size rounded up to a power of two) reuses it without asking
the driver. Measured on an H100 (PyTorch 2.11.0+cu130, tests/gpu/library_ooms.py, 2026-11-26): a 300 KiB pin
took a 512 KiB cudaHostAlloc, a second pin after the first died took none, a pin while both lived took one
more; a DataLoader with pin_memory=True therefore asks the driver only for its first few batches, and a
`memory: host` rule at a later step never meets an allocation (the corpus's pinned jobs did not fire on an
H200 for that reason, issue 32). The model keeps the same cache: blocks by size class, returned when the
pinned tensor dies (a finalizer), reused by the next pin of that class; the driver sees only the misses, so a
host cap counts what the cache holds, as on a GPU. Not modelled: the events that keep a block busy until a
non_blocking copy from it has run (the CPU copies at once), and `torch._C._host_emptyCache()`.
"""
import ctypes
import threading
import weakref

import torch

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

# What c10_cuda_check_implementation says for cudaErrorMemoryAllocation (PyTorch 2.x).
OOM_MESSAGE = ("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported at some other API call, "
               "so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
               "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")


def host_alloc_error():
    """The exception PyTorch raises on a GPU when cudaHostAlloc fails."""
    error_type = getattr(torch, "AcceleratorError", RuntimeError)
    return error_type(OOM_MESSAGE)


def size_class(nbytes):
    """The bytes PyTorch's CachingHostAllocator asks the driver for: the size rounded up to a power of two."""
    return 1 << max(0, int(nbytes) - 1).bit_length()


class PinnedHost:
    """cuMemHostAlloc of the driver the virtual device's segments come from, behind PyTorch's pinned block
    cache (Note [The pinned host cache])."""

    def __init__(self, lib):
        self._alloc = lib.cuMemHostAlloc
        self._alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
        self._lock = threading.Lock()  # the DataLoader's pin thread pins beside the main thread
        self.cached = {}               # size class -> free blocks (pointers) kept for reuse

    def pin(self, tensor):
        """A pinned copy of `tensor` (a CPU tensor), or the error PyTorch raises when the pin is refused."""
        size = size_class(max(1, tensor.untyped_storage().nbytes()))
        block = self._take(size)
        out = tensor.clone()
        weakref.finalize(out, self._release, size, block)
        return out

    def scratch(self, nbytes):
        """A pinned block held for the length of a copy and given back to the cache at once (`.item()`'s)."""
        size = size_class(max(1, nbytes))
        self._release(size, self._take(size))

    def _take(self, size):
        """A free block of the size class from the cache, else one from the driver (or PyTorch's error)."""
        with self._lock:
            free = self.cached.get(size)
            block = free.pop() if free else None
        if block is not None:
            return block
        ptr = ctypes.c_void_p()
        rc = self._alloc(ctypes.byref(ptr), size, 0)
        if rc == CUDA_ERROR_OUT_OF_MEMORY:
            raise host_alloc_error()
        if rc != CUDA_SUCCESS:
            raise RuntimeError("cuMemHostAlloc failed with CUDA error %d" % rc)
        return ptr.value

    def _release(self, size, block):
        with self._lock:
            self.cached.setdefault(size, []).append(block)


def pinned_host_for(model):
    """The pinner of a caching-allocator model whose segments come from a driver, or None."""
    lib = getattr(getattr(model, "source", None), "lib", None)
    if lib is None:
        return None
    try:
        return PinnedHost(lib)
    except AttributeError:  # a driver without the host entry points
        return None
