"""The user's lines in a breakdown: where a tensor was made (the user's frames at its booking) and which variable
keeps it (a local of the user's frames, and the line that fills it), for _breakdown.py's `memory_breakdown` events
(issue 14; docs/diagnosis.md)."""

import dis
import linecache
import os
import re
import sys

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
OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_skip_dirs = None
_user_code = {}


def is_user(code):
    global _skip_dirs
    known = _user_code.get(code)
    if known is None:
        if _skip_dirs is None:
            torch = sys.modules.get("torch")
            torch_dir = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep if torch is not None else None
            _skip_dirs = tuple(d for d in (OWN_DIR, torch_dir) if d)
        f = code.co_filename
        known = _user_code[code] = not (f.startswith("<") or os.path.abspath(f).startswith(_skip_dirs))
    return known


def user_site(frame, frames=SITE_FRAMES):
    """The user's frames from `frame` outwards (Note [Where a tensor was made])."""
    site = []
    while frame is not None and len(site) < frames:
        code = frame.f_code
        if is_user(code):
            site.append((code, frame.f_lineno))
        frame = frame.f_back
    return tuple(site)


def site_text(site):
    """'train.py:77 < train.py:97 < train.py:216' for a tuple of (code, line) pairs, innermost first."""
    if not site:
        return ""
    return " < ".join("%s:%d" % (os.path.basename(code.co_filename), line) for code, line in site)


def tensors_in(value, depth, budget=None):
    """The tensors in `value`: itself, or inside lists, tuples, sets and dicts up to `depth` levels deep (at
    most `budget[0]` items looked at in all)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    Tensor = torch.Tensor
    budget = budget if budget is not None else [4096]
    stack = [(value, depth)]
    while stack and budget[0] > 0:
        v, d = stack.pop()
        budget[0] -= 1
        if isinstance(v, Tensor):
            yield v
        elif d > 0 and isinstance(v, (list, tuple, set, frozenset)):
            stack.extend((w, d - 1) for w in v)
        elif d > 0 and isinstance(v, dict):
            stack.extend((w, d - 1) for w in v.values())


# Note [Which variable keeps them]
# A breakdown knows the line that MADE each large tensor (Note [Where a tensor was made]); the fix is usually
# at the line that KEEPS it: `history.append((loss, out))`, or a loop's `loss, out = ...` still bound after
# the loop. Where a breakdown is taken inside the user's code (at a step's end, in optimizer.step(); at the
# start of an evaluation, in the model's forward), the user's frames from there outwards are looked at: each
# local variable that is a tensor, or a list, tuple, set or dict holding tensors (KEEPER_DEPTH levels deep,
# at most KEEPER_ITEMS items per frame), is matched against the storages of each line in `sites`; the
# variable holding most of a line's bytes (at least half of them) is named with the line of its function
# that keeps them: for a container, the first line that appends to it (`name.append(`, `.extend(`,
# `.insert(`, `.add(`, `name[...] =`, `name +=`), else the last line that assigns the name. It is found
# from the source text of the function (linecache), so it is a reading of the code, not a trace: a
# container filled through another name is named without its line. Only at these breakdowns (at most
# MAX_GROWTH_BREAKDOWNS and MAX_AFTER_LOOP in probe/memory.py), never per step.
KEEPER_FRAMES = 8
KEEPER_DEPTH = 3
KEEPER_ITEMS = 4096


def name_keepers(frame, key, wanted):
    """Sets `kept_by` on each site entry of `wanted` [(entry, [tracked])] whose storages a local keeps."""
    if not wanted:
        return
    torch = sys.modules.get("torch")
    Tensor = torch.Tensor if torch is not None else ()
    holders = []  # (code, name, is_container, set of storage keys)
    seen = 0
    while frame is not None and seen < KEEPER_FRAMES:
        code = frame.f_code
        if is_user(code):
            seen += 1
            budget = [KEEPER_ITEMS]
            for name, value in list(frame.f_locals.items()):
                if name.startswith("__") or budget[0] <= 0:
                    continue
                keys = set()
                for t in tensors_in(value, KEEPER_DEPTH, budget):
                    keys.add(key(t))
                    if getattr(t, "grad_fn", None) is not None:
                        keys.update(saved_keys(t.grad_fn, key, budget))
                keys.discard(None)
                if keys:
                    holders.append((code, name, not isinstance(value, Tensor), keys))
        frame = frame.f_back
    for entry, tracked in wanted:
        total = sum(e.block.size for e in tracked)
        best, best_bytes = None, 0
        for h in holders:
            held = sum(e.block.size for e in tracked if e.key in h[3])
            if held > best_bytes:
                best, best_bytes = h, held
        if best is None or 2 * best_bytes < total:
            continue
        code, name, container, _ = best
        line, how = keeping_line(code, name, container)
        entry["kept_by"] = {"name": name, "how": how, "bytes": best_bytes,
                            "site": "%s:%d" % (os.path.basename(code.co_filename), line) if line else "",
                            "function": code.co_name}


def saved_keys(root, key, budget):
    """The storage keys of the tensors that the autograd graph from `root` saved for backward: what a kept
    loss keeps with its graph. Nodes' `_saved_*` attributes (PyTorch 1.13 and 2.x); a graph whose backward
    ran has freed them (reading one raises), and keeps nothing."""
    Tensor = sys.modules["torch"].Tensor
    keys, seen, stack = set(), set(), [root]
    while stack and budget[0] > 0:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        budget[0] -= 1
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                v = getattr(node, name)
            except Exception:  # noqa: BLE001 - freed by backward
                continue
            for t in (v if isinstance(v, (list, tuple)) else (v,)):
                if isinstance(t, Tensor):
                    keys.add(key(t))
        try:
            stack.extend(n for n, _ in node.next_functions)
        except Exception:  # noqa: BLE001
            pass
    return keys


_ASSIGN = re.compile(r"^\s*([^=#'\"(]*?)(?<![=!<>+\-*/%&|^@:])=(?!=)")


def keeping_line(code, name, container):
    """(line, how) of the line in `code`'s function that keeps tensors in the variable `name` (Note [Which
    variable keeps them]); (0, "holds") when none is found."""
    try:
        numbers = sorted({n for _, n in dis.findlinestarts(code) if n})
    except Exception:  # noqa: BLE001
        numbers = []
    word = r"\b%s\b" % re.escape(name)
    grows = re.compile(word + r"\s*(\.\s*(append|extend|insert|add|appendleft|update)\s*\(|\[[^\]]*\]\s*=(?!=)|\+=)")
    assigned = 0
    for n in numbers:
        text = linecache.getline(code.co_filename, n)
        if container and grows.search(text):
            return n, "appends to"
        m = _ASSIGN.match(text)
        if m and re.search(word, m.group(1)):
            assigned = n
    return assigned, "assigns" if assigned else "holds"


__all__ = ["OWN_DIR", "SITE_FRAMES", "SITE_MIN_BYTES", "is_user", "keeping_line", "name_keepers", "site_text", "tensors_in",
           "user_site"]
