"""What counts as an out-of-memory failure: the table of policies/include/oomharness/policies/oom_kinds.h
(Note [Which errors are OOMs] there: what each column means, and why CUDA's libraries' allocation failures
are OOMs that do not arrive as torch.OutOfMemoryError), whose rows reach Python through the generated _abi.py
(Note [Generated, not checked] in runner/src/app/python_abi.cpp). The probe names each OOM it reports by its
row (`oom_kind` in the `oom` event, docs/events.md); the checks and findings read the C++ table.
"""

import sys
from collections import namedtuple

from . import _abi

OomKind = namedtuple("OomKind", "name words memory source catchable needs_refusal")

# Note [Which errors are OOMs] (oom_kinds.h). Order matters: the first row whose words a message holds names it.
KINDS = tuple(OomKind(*row) for row in _abi.OOM_KINDS)

# Words that mark a line of output as an OOM message (support for an event), never an exception alone.
LOOSE_WORDS = _abi.OOM_LOOSE_WORDS

_BY_NAME = {k.name: k for k in KINDS}


def allocator_message(size, device, total, free, allocated, cached):
    """The words of an OutOfMemoryError of PyTorch 2.x's caching allocator (c10/cuda/CUDACachingAllocator.cpp),
    for an OOM the harness raises itself: the virtual device's, and the probe's on a GPU."""
    from ._breakdown import format_bytes
    return ("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "
            "Of the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but unallocated. "
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
            "to avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            % (format_bytes(size), device, format_bytes(total), format_bytes(free), format_bytes(allocated),
               format_bytes(cached)))


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
