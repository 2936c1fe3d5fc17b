"""What counts as an out-of-memory failure: the Python twin of the table in
policies/include/oomharness/policies/oom_kinds.h (Note [Which errors are OOMs] there: what each column means,
and why CUDA's libraries' allocation failures are OOMs that do not arrive as torch.OutOfMemoryError). The
probe names each OOM it reports by its row (`oom_kind` in the `oom` event, docs/events.md); the checks and
findings read the C++ table. tests/python/test_oom_kinds.py checks that both tables hold the same rows,
words and flags.
"""

import sys
from collections import namedtuple

OomKind = namedtuple("OomKind", "name words memory source catchable needs_refusal")

# Note [Which errors are OOMs] (oom_kinds.h). Order matters: the first row whose words a message holds names it.
KINDS = (
    OomKind("allocator", ("cuda out of memory", "hip out of memory"), "device", "PyTorch's caching allocator",
            True, False),
    OomKind("cublas", ("cublas_status_alloc_failed",), "device", "cuBLAS (its handle or workspace)", False, False),
    OomKind("cudnn", ("cudnn_status_alloc_failed", "cudnn_status_internal_error_device_allocation_failed"), "device",
            "cuDNN (its handle or workspace)", False, False),
    OomKind("cudnn_workspace", ("cudnn_status_not_supported",), "device", "cuDNN (no algorithm's workspace fits)",
            False, True),
    OomKind("cuda_runtime", ("cuda error: out of memory", "cuda_error_out_of_memory", "cudaerrormemoryallocation",
                             "hiperroroutofmemory"),
            "device", "the CUDA runtime (an allocation outside the caching allocator)", False, False),
    OomKind("cufft", ("cufft_alloc_failed",), "device", "cuFFT (its plan's workspace)", False, False),
    OomKind("cusolver", ("cusolver_status_alloc_failed",), "device", "cuSOLVER (its handle or workspace)", False, False),
    OomKind("cusparse", ("cusparse_status_alloc_failed",), "device", "cuSPARSE (its handle or workspace)", False, False),
    OomKind("nccl", ("cuda failure 'out of memory'", "ncclsystemerror: out of memory"), "device",
            "NCCL (its communicators' buffers)", False, False),
    OomKind("host", ("defaultcpuallocator: can't allocate memory",), "host", "the CPU allocator (host memory)",
            False, False),
)

# Words that mark a line of output as an OOM message (support for an event), never an exception alone.
LOOSE_WORDS = ("out of memory", "outofmemoryerror", "resource_exhausted")

_BY_NAME = {k.name: k for k in KINDS}


def kind_named(name):
    return _BY_NAME.get(name)


def classify_message(text):
    """The row whose words `text` holds (any case), or None."""
    text = (text or "").lower()
    for k in KINDS:
        if any(w in text for w in k.words):
            return k
    return None


def _oom_types(torch):
    types = []
    for owner, name in ((torch, "OutOfMemoryError"), (getattr(torch, "cuda", None), "OutOfMemoryError")):
        t = getattr(owner, name, None) if owner is not None else None
        if isinstance(t, type) and t not in types:
            types.append(t)
    return tuple(types)


def oom_error_types():
    """PyTorch's out-of-memory exception types in this process (empty before torch is imported)."""
    torch = sys.modules.get("torch")
    return _oom_types(torch) if torch is not None else ()


def classify(exc):
    """The row of an exception, or None when it is no out-of-memory failure: an instance of PyTorch's
    OutOfMemoryError is the allocator's (whatever its message); any other exception is named by its message."""
    if exc is None:
        return None
    types = oom_error_types()
    if types and isinstance(exc, types):
        return _BY_NAME["allocator"]
    if not isinstance(exc, Exception):
        return None
    return classify_message(str(exc))


__all__ = ["OomKind", "KINDS", "LOOSE_WORDS", "kind_named", "classify", "classify_message", "oom_error_types"]
