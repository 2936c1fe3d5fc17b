"""Pinned host memory on the virtual CUDA device (Note [Host memory] in injector/engine/fault_plan.h).

On a GPU, `Tensor.pin_memory()` (and a DataLoader with `pin_memory=True`, whose pin thread calls it on each
batch) asks PyTorch's CachingHostAllocator for page-locked memory, which calls cudaHostAlloc, which reaches the
driver's cuMemHostAlloc. Where the driver refuses, C10_CUDA_CHECK raises `torch.AcceleratorError` (a
RuntimeError, not an OutOfMemoryError) whose message starts "CUDA error: out of memory"
(c10/cuda/CUDAException.cpp, c10_cuda_check_implementation).

On the virtual device the same call goes to the CPU driver double's cuMemHostAlloc through the shim, so a
`memory: host` rule or cap refuses it and records the `inject` event as on a GPU; the copy is kept while the
pinned tensor lives (freed with cuMemFreeHost by a finalizer), so a host cap counts what is pinned at once.
Without the driver (a budget-only virtual device) nothing is pinned, as before.
"""
import ctypes
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


class PinnedHost:
    """cuMemHostAlloc / cuMemFreeHost of the driver the virtual device's segments come from."""

    def __init__(self, lib):
        self._alloc = lib.cuMemHostAlloc
        self._alloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint]
        self._free = lib.cuMemFreeHost
        self._free.argtypes = [ctypes.c_void_p]

    def pin(self, tensor):
        """A pinned copy of `tensor` (a CPU tensor), or the error PyTorch raises when the pin is refused."""
        size = max(1, tensor.untyped_storage().nbytes())
        ptr = ctypes.c_void_p()
        rc = self._alloc(ctypes.byref(ptr), size, 0)
        if rc == CUDA_ERROR_OUT_OF_MEMORY:
            raise host_alloc_error()
        if rc != CUDA_SUCCESS:
            raise RuntimeError("cuMemHostAlloc failed with CUDA error %d" % rc)
        out = tensor.clone()
        weakref.finalize(out, self._free, ptr.value)
        return out


def pinned_host_for(model):
    """The pinner of a caching-allocator model whose segments come from a driver, or None."""
    lib = getattr(getattr(model, "source", None), "lib", None)
    if lib is None:
        return None
    try:
        return PinnedHost(lib)
    except AttributeError:  # a driver without the host entry points
        return None
