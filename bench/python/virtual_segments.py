"""The segments the virtual device's allocator model asks for, in order, for one program in shape-only mode
(issue 43): the CPU side of bench/python/peak_anatomy.py's `segments`, to find where a prediction's allocator
first parts from a GPU's.

    python3 bench/python/virtual_segments.py [--gpu ANATOMY.json] -- PROGRAM.py ARGS...

In-process (no runner, no shim: a plain byte budget), the program run unchanged with runpy. Prints each new
segment (size, allocated and reserved after it, the phase, the line of the program), and with --gpu the GPU's
list beside it, row by row, marking the first row where the sizes differ.
"""
import argparse
import json
import os
import sys

from op_memory import run_program  # beside this file in bench/python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", help="an anatomy JSON of the same command (tests/gpu/run_all.sh anatomy)")
    ap.add_argument("--allocs", action="store_true", help="every request of 10 MiB or more too, not only segments")
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    prog = [a for a in args.program if a != "--"]
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch  # noqa: F401
    from oomharness import _sites
    from oomharness.virtual_device import install_with_budget
    dev = install_with_budget(1 << 40, shape_only=True)
    model = dev.model
    rows = []
    new_segment, malloc = model._new_segment, model.malloc

    def where():
        return _sites.site_text(_sites.user_site(sys._getframe(2), 1)) or "-"

    def traced_segment(size, small):
        block = new_segment(size, small)
        rows.append(("seg", block.segment.size, model.allocated, model.reserved, dev.ctx.clock.phase, where()))
        return block

    def traced_malloc(nbytes):
        block = malloc(nbytes)
        if args.allocs and nbytes >= 10 << 20:
            rows.append(("alloc", block.size, model.allocated, model.reserved, dev.ctx.clock.phase, where()))
        return block

    model._new_segment = traced_segment
    model.malloc = traced_malloc
    run_program(prog)
    gpu = []
    if args.gpu:
        with open(args.gpu) as f:
            gpu = json.load(f)["segments"]
    print("%-5s %8s %9s %9s  %-10s %-40s | %8s %9s %9s" % ("what", "MiB", "alloc", "reserved", "phase", "line",
                                                            "GPU MiB", "alloc", "reserved"))
    segs = [r for r in rows if r[0] == "seg"]
    marked = False
    for i, r in enumerate(rows):
        g = None
        if r[0] == "seg":
            k = sum(1 for x in rows[:i] if x[0] == "seg")
            g = gpu[k] if k < len(gpu) else None
        mark = ""
        if g is not None and not marked and g["size"] != r[1]:
            mark, marked = "  <- first difference", True
        print("%-5s %8.1f %9.1f %9.1f  %-10s %-40s | %s%s" % (
            r[0], r[1] / 2**20, r[2] / 2**20, r[3] / 2**20, r[4] or "-", r[5][:40],
            "%8.1f %9.1f %9.1f" % (g["size"] / 2**20, g["allocated"] / 2**20, g["reserved"] / 2**20) if g else "",
            mark))
    for g in gpu[len(segs):]:
        print("%-5s %8s %9s %9s  %-10s %-40s | %8.1f %9.1f %9.1f" % ("", "", "", "", "", "", g["size"] / 2**20,
                                                                     g["allocated"] / 2**20, g["reserved"] / 2**20))
    p = dev.prediction()
    print("peak allocated %.1f MiB, reserved %.1f MiB; GPU %s" % (
        p["peak_allocated"] / 2**20, p["peak_reserved"] / 2**20,
        "%.1f MiB reserved" % (gpu[-1]["reserved"] / 2**20) if gpu else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
