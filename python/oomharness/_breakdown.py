"""What held the memory: the `memory_breakdown` event the probe writes at each OOM the code saw and at the
attempt's peak (issue 14; docs/diagnosis.md).

Note [A breakdown that adds up]
On the virtual device every device storage is booked with its block (virtual_device/device.py), so a breakdown can
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
allocated first passes 17/16 of the last peak taken (Note [The peak breakdown] in probe/memory.py), never per step.
"""

import heapq
import os
import sys

from . import _sites

TOP_TENSORS = 8
TOP_SITES = 5
_BLOCK = 512


def format_bytes(n):
    """"2.00 MiB": a size as PyTorch's messages write it."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return "%.2f %s" % (n / scale, unit)
    return "%d bytes" % n


def _rounded(nbytes):
    return max(_BLOCK, (nbytes + _BLOCK - 1) // _BLOCK * _BLOCK)


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


def virtual(dev, models, optimizers, inputs=(), frame=None):
    """The breakdown of the virtual device `dev` now (Note [A breakdown that adds up]). The storages of the
    tensors `inputs` (a forward's arguments) are counted in `other` and as `inputs`, and left out of the
    largest tensors and lines. With `frame`, each line of `sites` also says which local variable of the
    user's frames from `frame` outwards keeps its tensors, where one does (Note [Which variable keeps them] in _sites.py)."""
    dev.sweep()  # storages that died give their blocks back: what is left lives
    tracked = dev.tracked
    key = dev._key
    params, grads, state = _tensors_of(models, optimizers)
    claimed = set()
    input_keys = set()
    for t in _sites.tensors_in(inputs, 2):
        k = key(t)
        if k is not None and k in tracked:
            input_keys.add(k)
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
    workspace = dev.libraries.workspace_bytes()
    model = dev.model
    allocated = model.allocated
    other = allocated - bins["parameters"] - bins["gradients"] - bins["optimizer_state"] - workspace
    rest = [e for k, e in tracked.items() if k not in claimed and k not in input_keys]
    input_bytes = sum(tracked[k].block.size for k in input_keys if k not in claimed)
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
    site_list = [{"site": _sites.site_text(s), "bytes": v[0], "count": v[1]} for s, v in top_sites]
    if frame is not None:
        try:
            _sites.name_keepers(frame, key, [(entry, [e for e in rest if e.site == s])
                                       for entry, (s, _) in zip(site_list, top_sites) if s])
        except Exception:  # noqa: BLE001 - naming the keeper is a help, never a failure
            pass
    fields = {
        "allocated": allocated, "reserved": model.reserved, "total": total,
        "parameters": bins["parameters"], "gradients": bins["gradients"],
        "optimizer_state": bins["optimizer_state"], "workspace": workspace, "other": other,
        "cached_free": model.reserved - allocated, "exact": True,
        "top": [{"bytes": e.block.size, "shape": _shape(e.shape), "dtype": _dtype(e.dtype), "site": _sites.site_text(e.site)}
                for e in top],
        "sites": site_list,
    }
    if input_keys:
        fields["inputs"] = input_bytes
    return fields


SUMMARY_MAX = 8192


def allocator_fields(torch, oom):
    """What PyTorch's own allocator says, beside a breakdown: memory_stats()'s allocated and reserved (so a
    GPU run can check that the breakdown adds up) and, at an OOM, memory_summary() (at most SUMMARY_MAX
    characters)."""
    fields = {}
    try:
        stats = torch.cuda.memory_stats()
        fields["stats_allocated"] = int(stats.get("allocated_bytes.all.current", 0))
        fields["stats_reserved"] = int(stats.get("reserved_bytes.all.current", 0))
    except Exception:  # noqa: BLE001
        pass
    if oom:
        try:
            text = torch.cuda.memory_summary(abbreviated=True)
            if len(text) > SUMMARY_MAX:
                text = text[:SUMMARY_MAX] + "\n[... %d more characters]" % (len(text) - SUMMARY_MAX)
            fields["summary"] = text
        except Exception:  # noqa: BLE001
            pass
    return fields


# Note [Reading the memory history]
# On a GPU no tensor is booked with its line, but PyTorch's memory history (recorded with OOMH_SNAPSHOT,
# probe/memory.py) keeps the Python frames that allocated each block. At an OOM the probe reads the snapshot
# (torch.cuda.memory._snapshot()) and names the largest blocks in use and the lines holding the most, as the
# virtual device does: the user's frames only (torch's and oomharness's left out), innermost first. The
# snapshot's format moved between versions: 1.13 keeps the frames in a block's `history` (the last entry),
# 2.x in the block's `frames`; both are read. `history_allocated` is the sum of the blocks in use, which a
# GPU run compares with memory_stats() (tests/gpu/explain_check.py).
def from_history(snapshot, top=TOP_TENSORS, top_sites=TOP_SITES):
    """`top`, `sites` and `history_allocated` from a memory snapshot (a dict, as _snapshot() returns)."""
    blocks = []
    for seg in (snapshot or {}).get("segments", ()):
        for b in seg.get("blocks", ()):
            if b.get("state") != "active_allocated":
                continue
            frames = b.get("frames")
            if frames is None:
                history = b.get("history") or [{}]
                frames = history[-1].get("frames") or []
            size = int(b.get("requested_size") or b.get("size") or 0)
            blocks.append((int(b.get("size") or 0), size, _frames_text(frames)))
    sites = {}
    for size, _, site in blocks:
        s = sites.setdefault(site, [0, 0])
        s[0] += size
        s[1] += 1
    return {
        "history_allocated": sum(b[0] for b in blocks),
        "top": [{"bytes": b[0], "shape": "", "dtype": "", "site": b[2]}
                for b in heapq.nlargest(top, blocks, key=lambda b: b[0])],
        "sites": [{"site": s, "bytes": v[0], "count": v[1]}
                  for s, v in heapq.nlargest(top_sites, sites.items(), key=lambda kv: kv[1][0]) if s],
    }


def _frames_text(frames, keep=_sites.SITE_FRAMES):
    out = []
    torch = sys.modules.get("torch")
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep if torch is not None else None
    skip = tuple(d for d in (_sites.OWN_DIR, torch_dir) if d)
    for f in frames or ():
        name = f.get("filename", "") if isinstance(f, dict) else ""
        if not name or name.startswith("<") or name.startswith("??") or not name.endswith(".py") \
                or os.path.abspath(name).startswith(skip):
            continue
        out.append("%s:%d" % (os.path.basename(name), int(f.get("line", 0))))
        if len(out) >= keep:
            break
    return " < ".join(out)


def gpu(torch, models, optimizers, inputs=()):
    """What can be gathered on a GPU without the memory history (Note [A breakdown that adds up]); the
    storages of `inputs` (a forward's arguments) are counted in `other` and as `inputs`."""
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
    input_bytes = 0
    for t in _sites.tensors_in(inputs, 2):
        try:
            if not t.is_cuda:
                continue
            s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
            if s.data_ptr() not in seen:
                seen.add(s.data_ptr())
                input_bytes += _rounded(int(s.nbytes()))
        except Exception:
            continue
    try:
        total = int(torch.cuda.mem_get_info()[1])
    except Exception:
        total = 0
    fields = {
        "allocated": allocated, "reserved": reserved, "total": total,
        "parameters": bins["parameters"], "gradients": bins["gradients"],
        "optimizer_state": bins["optimizer_state"], "workspace": 0, "other": max(0, allocated - known),
        "cached_free": max(0, reserved - allocated), "exact": False, "top": [], "sites": [],
    }
    if input_bytes:
        fields["inputs"] = input_bytes
    return fields


def gpu_history(torch):
    """from_history() of the memory history now, or {} when none is recorded."""
    try:
        memory = torch.cuda.memory
        snap = memory._snapshot()
    except Exception:  # noqa: BLE001 - no history recorded, or an older PyTorch
        return {}
    fields = from_history(snap)
    return fields if fields["top"] else {}
