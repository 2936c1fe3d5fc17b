"""What held the memory: the `memory_breakdown` event the probe writes at each OOM the code saw and at the
attempt's peak (issue 14; docs/diagnosis.md).

Note [A breakdown that adds up]
On the virtual device every device storage is booked with its block (virtual_device.py), so a breakdown can
put each allocated byte in exactly one bin: parameters, gradients, optimizer state (the tensors the probe
finds through the models and optimizers it saw), the cuBLAS workspaces, and other live tensors (activations,
saved tensors, whatever the code keeps). `other` is what no earlier bin claimed, so

    parameters + gradients + optimizer_state + workspace + other == allocated

holds by construction, and tests check that `other` equals the blocks of the storages left over. A storage
shared by two bins (a parameter that is also optimizer state) counts once, in the first. cached_free is
reserved - allocated: what the allocator holds free (fragmentation, or a cache not emptied). Each booked
storage also carries the shape and dtype of the tensor that made it and the user's lines that made it
(innermost first, torch's and oomharness's own frames left out), so the largest tensors and the lines that
hold the most can be named.

On a GPU (no virtual device) the bins come from the same Python objects, sized by their storages rounded
as the allocator rounds them; allocated and reserved come from torch.cuda.memory_stats(); `other` is the
remainder (never below 0) and the event says `exact: false`, since blocks are not visible one by one there.

Gathering costs a walk over every booked storage and every parameter; it happens only at an OOM and when
allocated first passes 17/16 of the last peak taken (Note [The peak breakdown] in probe.py), never per step.
"""

import heapq
import os
import sys

TOP_TENSORS = 8
TOP_SITES = 5
_BLOCK = 512


def _rounded(nbytes):
    return max(_BLOCK, (nbytes + _BLOCK - 1) // _BLOCK * _BLOCK)


# Note [Where a tensor was made]
# Each booking on the virtual device keeps the user's frames that made it (innermost first, at most
# SITE_FRAMES, as (code, line) pairs: nothing that keeps a frame alive), so that a breakdown can name the
# lines holding memory. Frames of torch and of oomharness itself are skipped; whether a code object is the
# user's is decided once per code object.
SITE_FRAMES = 3
# Blocks under this get no site: the walk costs a few microseconds per booking (bench/python/
# virtual_device_cost.py), and a small tensor is never among the largest; a leak of small tensors alone
# (scalars kept without their graph) shows as growth with no line (the kept_with_graph finding says so).
SITE_MIN_BYTES = 64 << 10
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_skip_dirs = None
_user_code = {}


def _is_user(code):
    global _skip_dirs
    known = _user_code.get(code)
    if known is None:
        if _skip_dirs is None:
            torch = sys.modules.get("torch")
            torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep if torch is not None else None
            _skip_dirs = tuple(d for d in (_OWN_DIR, torch_dir) if d)
        f = code.co_filename
        known = _user_code[code] = not (f.startswith("<") or os.path.abspath(f).startswith(_skip_dirs))
    return known


def user_site(frame, frames=SITE_FRAMES):
    """The user's frames from `frame` outwards (Note [Where a tensor was made])."""
    site = []
    while frame is not None and len(site) < frames:
        code = frame.f_code
        if _is_user(code):
            site.append((code, frame.f_lineno))
        frame = frame.f_back
    return tuple(site)


def site_text(site):
    """'train.py:77 < train.py:97 < train.py:216' for a tuple of (code, line) pairs, innermost first."""
    if not site:
        return ""
    return " < ".join("%s:%d" % (os.path.basename(code.co_filename), line) for code, line in site)


def _tensors_of(models, optimizers):
    """(parameters, gradients, optimizer state) tensors, each list in a stable order."""
    params, grads, state = [], [], []
    seen = set()
    for m in models:
        try:
            for p in m.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        except Exception:
            continue
    for opt in optimizers:
        try:
            for g in opt.param_groups:
                for p in g.get("params", ()):
                    if id(p) not in seen:
                        seen.add(id(p))
                        params.append(p)
            for s in opt.state.values():
                if isinstance(s, dict):
                    state.extend(v for v in s.values() if hasattr(v, "data_ptr"))
        except Exception:
            continue
    for p in params:
        g = getattr(p, "grad", None)
        if g is not None:
            grads.append(g)
    return params, grads, state


def _shape(shape):
    return "x".join(str(int(d)) for d in shape) if shape is not None else ""


def _dtype(dtype):
    return str(dtype).replace("torch.", "") if dtype is not None else ""


def virtual(dev, models, optimizers):
    """The breakdown of the virtual device `dev` now (Note [A breakdown that adds up])."""
    dev.sweep()  # storages that died give their blocks back: what is left lives
    tracked = dev.tracked
    key = dev._key
    params, grads, state = _tensors_of(models, optimizers)
    claimed = set()
    bins = {}
    for name, tensors in (("parameters", params), ("gradients", grads), ("optimizer_state", state)):
        total = 0
        for t in tensors:
            k = key(t)
            if k is None or k in claimed:
                continue
            entry = tracked.get(k)
            if entry is None:
                continue
            claimed.add(k)
            total += entry.block.size
        bins[name] = total
    workspace = sum(b.size for b in dev.workspaces.values() if b is not None and not b.free)
    model = dev.model
    allocated = model.allocated
    other = allocated - bins["parameters"] - bins["gradients"] - bins["optimizer_state"] - workspace
    rest = [e for k, e in tracked.items() if k not in claimed]
    top = heapq.nlargest(TOP_TENSORS, rest, key=lambda e: e.block.size)
    sites = {}
    for e in rest:
        s = sites.get(e.site)
        if s is None:
            sites[e.site] = [e.block.size, 1]
        else:
            s[0] += e.block.size
            s[1] += 1
    top_sites = heapq.nlargest(TOP_SITES, sites.items(), key=lambda kv: kv[1][0])
    try:
        total = int(model.mem_info()[1])
    except Exception:  # noqa: BLE001 - the driver could not say
        total = 0
    return {
        "allocated": allocated, "reserved": model.reserved, "total": total,
        "parameters": bins["parameters"], "gradients": bins["gradients"],
        "optimizer_state": bins["optimizer_state"], "workspace": workspace, "other": other,
        "cached_free": model.reserved - allocated, "exact": True,
        "top": [{"bytes": e.block.size, "shape": _shape(e.shape), "dtype": _dtype(e.dtype), "site": site_text(e.site)}
                for e in top],
        "sites": [{"site": site_text(s), "bytes": v[0], "count": v[1]} for s, v in top_sites],
    }


def gpu(torch, models, optimizers):
    """What can be gathered on a GPU without the memory history (Note [A breakdown that adds up])."""
    stats = torch.cuda.memory_stats()
    allocated = int(stats.get("allocated_bytes.all.current", 0))
    reserved = int(stats.get("reserved_bytes.all.current", 0))
    params, grads, state = _tensors_of(models, optimizers)
    seen = set()
    bins = {}
    for name, tensors in (("parameters", params), ("gradients", grads), ("optimizer_state", state)):
        total = 0
        for t in tensors:
            try:
                if not t.is_cuda:
                    continue
                s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
                ptr = s.data_ptr()
                if ptr in seen:
                    continue
                seen.add(ptr)
                total += _rounded(int(s.nbytes()))
            except Exception:
                continue
        bins[name] = total
    known = bins["parameters"] + bins["gradients"] + bins["optimizer_state"]
    try:
        total = int(torch.cuda.mem_get_info()[1])
    except Exception:
        total = 0
    return {
        "allocated": allocated, "reserved": reserved, "total": total,
        "parameters": bins["parameters"], "gradients": bins["gradients"],
        "optimizer_state": bins["optimizer_state"], "workspace": 0, "other": max(0, allocated - known),
        "cached_free": max(0, reserved - allocated), "exact": False, "top": [], "sites": [],
    }
