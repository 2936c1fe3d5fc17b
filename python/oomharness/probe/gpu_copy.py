"""One copy of a CUDA tensor's values to the host through the libcudart this process already loaded, for the
probe's digests (digests.py) on a GPU: no operation runs on the device and nothing is allocated there.

Note [One copy of a GPU batch's values]
Read one by one (`t[i].item()`), WHOLE_VALUES elements cost a copy and a stream synchronisation each: 8 of
them were the probe's largest cost per step on an H100 (about 200 of its 450 us, bench/RESULTS.md). And a
digest of the batch as a whole cannot say that two halves redo a failed batch: on an H200 the self-test's
correct halving trainers were failed ("the failed batch was never trained on again"). So a batch whose
samples are contiguous (batch dimension 0, a contiguous tensor) is read in one cudaMemcpy2DAsync of the
first GPU_SAMPLE_VALUES values of every sample (a window per row, the same for any batch size), on the
current stream (the order `.item()`
reads in), then one cudaStreamSynchronize, and hashed per sample on the host as on the CPU (`per_sample`
true; the window, not values strided over the sample, so a GPU's digest is not a CPU's). Other batches are
read as WHOLE_VALUES elements spaced numel // WHOLE_VALUES apart in one such copy, batch-level. No operation
runs on the device and nothing is allocated there. The runtime is the libcudart this process already loaded
(found in /proc/self/maps); where there is none (a static runtime), the batch is not contiguous or on another
device than the current one, or a call fails, the probe reads the values one by one as before. The positions differ from the one-by-one read's when numel is not a multiple of
WHOLE_VALUES, so the two digests of one batch may differ; one process uses one way for a given batch shape.
"""

import ctypes

_CUDA_MEMCPY_DEFAULT = 4
_runtime = None  # (cudaMemcpy2DAsync, cudaStreamSynchronize), or False: none loaded, or not usable


def cuda_runtime():
    """The memcpy and sync of the libcudart this process loaded (Note [One copy of a GPU batch's values])."""
    global _runtime
    if _runtime is None:
        _runtime = False
        try:
            with open("/proc/self/maps") as maps:
                paths = [line.split()[-1] for line in maps if "/libcudart.so" in line]
            if paths:
                lib = ctypes.CDLL(paths[0])
                copy, sync = lib.cudaMemcpy2DAsync, lib.cudaStreamSynchronize
                copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
                copy.restype = ctypes.c_int
                sync.argtypes = [ctypes.c_void_p]
                sync.restype = ctypes.c_int
                _runtime = (copy, sync)
        except (OSError, AttributeError):
            _runtime = False
    return _runtime


def copy_rows(torch, t, rows, width, pitch):
    """`rows` runs of `width` elements of contiguous CUDA tensor `t`, each starting `pitch` elements after the
    last, as a host tensor [rows, width] of t's dtype, read in one cudaMemcpy2DAsync on the current stream and
    one synchronisation; None where that cannot be done (Note [One copy of a GPU batch's values])."""
    runtime = cuda_runtime()
    if not runtime or rows <= 0 or width <= 0 or not t.is_contiguous() or t.is_complex():
        return None
    if t.device.index != torch.cuda.current_device():
        return None
    host = torch.empty((rows, width), dtype=t.dtype)
    size = t.element_size()
    stream = torch.cuda.current_stream(t.device).cuda_stream
    copy, sync = runtime
    if copy(host.data_ptr(), size * width, t.data_ptr(), size * pitch, size * width, rows, _CUDA_MEMCPY_DEFAULT,
            stream) != 0:
        return None
    if sync(stream) != 0:
        return None
    return host


__all__ = ["copy_rows", "cuda_runtime"]
