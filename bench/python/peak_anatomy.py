"""What a GPU holds at its peak, from PyTorch's own allocator history (issue 43: where predictions miss).

On the GPU side of bench/predict_public.py (--anatomy DIR), the program runs unchanged under
torch.cuda.memory._record_memory_history(stacks="all"); at exit its trace is replayed here: every segment the
caching allocator reserved and every block it handed out, in order, so that the live blocks at the moment of
the largest reserved total (and of the largest allocated total) can be listed by where they were made: the
first frame of the program's or its libraries' Python code, and the first C++ frame that names what asked
(a cuDNN convolution's workspace, a cuBLAS workspace, an operator). The summary is small JSON; the trace is
not kept.

    python3 peak_anatomy.py SNAPSHOT.pickle   # summarise a snapshot saved by torch.cuda.memory._dump_snapshot
"""
import collections
import json
import os
import re
import sys

# C++ frames that say nothing about who asked: the allocator, the dispatcher, the autograd engine's plumbing
_PLUMBING = re.compile(r"CUDACachingAllocator|c10::cuda::|DeviceCachingAllocator|NativeCachingAllocator|"
                       r"c10::impl::|c10::Dispatcher|c10::KernelFunction|c10::BoxedKernel|c10::detail::|"
                       r"wrapper_|torch::autograd::Engine|std::|_PyEval|PyObject|pybind11|THPVariable|"
                       r"at::_ops::|at::detail::|at::empty|at::native::empty|c10::TensorImpl|c10::StorageImpl|"
                       r"gather_and_|unwind|libc\.so|^\?\?|^$|torch::CapturedTraceback|c10::GatheredContext|"
                       r"at::TensorBase|at::Tensor::|at::native::resize|at::native::DispatchStub|"
                       r"c10::Allocator|c10::DataPtr|at::TensorIteratorBase|at::meta::|at::native::structured_|"
                       r"^_?Py|cfunction_|method_vectorcall|slot_tp|^_start|__libc|^clone|start_thread|_run_code|_run_module|"
                       r"run_path|^main$|Py_RunMain|Py_BytesMain")


def _where(frames):
    """(python site, C++ hint) for one block's frames (innermost first): the innermost Python frame outside
    torch, and the three innermost C++ frames that are not plumbing."""
    py, cpp = None, []
    for f in frames or []:
        name, filename = f.get("name") or "", f.get("filename") or ""
        if filename.endswith(".py"):
            if py is None and "/torch/" not in filename:
                py = "%s:%s" % (os.path.basename(filename), f.get("line"))
        elif len(cpp) < 3 and name and not _PLUMBING.search(name):
            cpp.append(re.sub(r"\(.*", "", name)[:70])
    return py or "-", " < ".join(cpp) or "-"


def summarise(snapshot, top=30):
    events = []
    for dev in snapshot.get("device_traces", []):
        events.extend(dev)
    reserved = allocated = 0
    peak_r = peak_a = 0
    live = {}
    at_r = at_a = None
    segments = []  # every segment the allocator asked the driver for: when, and for whom
    library = collections.defaultdict(lambda: [0, 0, 0])  # cuDNN's and cuBLAS's own blocks: (hint, size) -> n
    for e in events:
        a, size = e.get("action"), e.get("size", 0)
        if a == "alloc":
            hint = _where(e.get("frames"))[1]
            if re.search(r"cudnn|Workspace|workspace|cublas|Blas", hint, re.I):
                library[(hint, size)][0] += 1
        if a in ("segment_alloc", "segment_map"):
            reserved += size
            segments.append({"size": size, "allocated": allocated, "reserved": reserved,
                             "where": " | ".join(_where(e.get("frames")))})
        elif a in ("segment_free", "segment_unmap"):
            reserved -= size
        elif a == "alloc":
            allocated += size
            live[e["addr"]] = e
        elif a == "free_completed":
            if live.pop(e["addr"], None) is not None:
                allocated -= size
        if reserved > peak_r:
            peak_r, at_r = reserved, (allocated, list(live.values()))
        if allocated > peak_a:
            peak_a, at_a = allocated, (reserved, list(live.values()))

    def groups(blocks):
        g = collections.defaultdict(lambda: [0, 0, None])
        for b in blocks:
            k = _where(b.get("frames"))
            g[k][0] += b.get("size", 0)
            g[k][1] += 1
            if g[k][2] is None:  # the first block's sizes and raw frames, to read what the hint left out
                g[k][2] = {"size": b.get("size"), "frames": ["%s %s" % ((f.get("name") or "")[:60],
                                                                        os.path.basename(f.get("filename") or ""))
                                                             for f in (b.get("frames") or [])[:14]]}
        rows = sorted(g.items(), key=lambda kv: -kv[1][0])
        return [{"python": k[0], "cpp": k[1], "bytes": v[0], "blocks": v[1], "first": v[2]} for k, v in rows[:top]]

    out = {"events": len(events), "trace_peak_reserved": peak_r, "trace_peak_allocated": peak_a,
           "segments": segments[:200],
           "library_blocks": [{"where": k[0], "size": k[1], "count": v[0]}
                              for k, v in sorted(library.items(), key=lambda kv: -kv[0][1])[:60]]}
    if at_r:
        out["at_peak_reserved"] = {"allocated": at_r[0], "cached_free": peak_r - at_r[0], "groups": groups(at_r[1])}
    if at_a:
        out["at_peak_allocated"] = {"reserved": at_a[0], "groups": groups(at_a[1])}
    return out


def main():
    import pickle
    with open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)
    print(json.dumps(summarise(snap), indent=1))


if __name__ == "__main__":
    main()
