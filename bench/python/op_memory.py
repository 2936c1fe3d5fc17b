"""What each ATen operation of a program allocates, on a GPU and on the virtual device, op by op (issue 43).

A prediction that misses a GPU's peak misses it in some operation: one that keeps more than its outputs, or
asks for a scratch buffer (a workspace) it frees before it returns. This runs a program unchanged and, for
every ATen operation it dispatches (forward and backward: the autograd engine carries the mode to its
thread), records the bytes allocated across the call (what stays) and the highest allocated inside it above
where it started (what it needed at once), then compares two such runs op by op.

    python3 bench/python/op_memory.py --gpu --json gpu.json -- PROGRAM.py ARGS...      # on a GPU (no harness)
    python3 bench/python/op_memory.py --json virtual.json -- PROGRAM.py ARGS...        # shape-only, in-process
    python3 bench/python/op_memory.py --compare gpu.json virtual.json                  # the ops that differ

GPU: torch.cuda.memory_allocated() and max_memory_allocated() around each call (no synchronisation); the
virtual device: its allocator model's own figures. Only each op's first --calls calls are kept in order (the
steps repeat); the comparison sums per op name where the two sequences stop lining up.
"""
import argparse
import collections
import json
import os
import runpy
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run_program(prog):
    """Runs a program unchanged in this process (argv[0] its path), as `python PROGRAM ARGS` would."""
    sys.argv = prog
    try:
        runpy.run_path(prog[0], run_name="__main__")
    except SystemExit:
        pass


def record(args, prog):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    rows = []
    if args.gpu:
        def figures():
            return torch.cuda.memory_allocated()

        def reset():
            torch.cuda.reset_peak_memory_stats()

        def peak():
            return torch.cuda.max_memory_allocated()
    else:
        sys.path.insert(0, os.path.join(ROOT, "python"))
        from oomharness.virtual_device import install_with_budget
        dev = install_with_budget(1 << 40, shape_only=True)
        model = dev.model

        def figures():
            dev.sweep()
            return model.allocated

        def reset():
            model.peak_allocated = model.allocated

        def peak():
            return model.peak_allocated

    def measured(name, call):
        before = figures()
        reset()
        out = call()
        after = figures()
        rows.append((name, after - before, max(0, peak() - before)))
        return out

    if args.gpu:
        class OpMemory(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, a=(), kw=None):
                return measured(str(func.overloadpacket.__name__), lambda: func(*a, **(kw or {})))
        OpMemory().__enter__()
    else:
        # the virtual device's own mode must stay innermost (it makes the fakes): ours goes around it, entered
        # once the device's mode is on the stack, by wrapping the device's dispatch
        cls = type(dev.make_mode())
        inner = cls.__torch_dispatch__

        def outer(self, func, types, a=(), kw=None):
            return measured(str(func.overloadpacket.__name__), lambda: inner(self, func, types, a, kw))
        cls.__torch_dispatch__ = outer
    run_program(prog)
    return rows


def compare(a_path, b_path, top):
    with open(a_path) as f:
        a = json.load(f)
    with open(b_path) as f:
        b = json.load(f)
    ra, rb = a["rows"], b["rows"]
    print("%s: %d ops, %s: %d ops" % (a_path, len(ra), b_path, len(rb)))
    # per op name: count, bytes kept, the largest transient
    def per_op(rows):
        d = collections.defaultdict(lambda: [0, 0, 0, 0])
        for name, kept, transient in rows:
            d[name][0] += 1
            d[name][1] += kept
            d[name][2] = max(d[name][2], transient)
            d[name][3] += max(0, transient - max(kept, 0))
        return d
    pa, pb = per_op(ra), per_op(rb)
    names = sorted(set(pa) | set(pb), key=lambda n: -abs(pa.get(n, [0, 0, 0, 0])[3] - pb.get(n, [0, 0, 0, 0])[3])
                   - abs(pa.get(n, [0, 0, 0, 0])[2] - pb.get(n, [0, 0, 0, 0])[2]))
    print("%-40s %7s %7s %12s %12s %12s %12s" % ("op", "calls A", "calls B", "max trans A", "max trans B",
                                                 "scratch A", "scratch B"))
    for n in names[:top]:
        x, y = pa.get(n, [0, 0, 0, 0]), pb.get(n, [0, 0, 0, 0])
        print("%-40s %7d %7d %12.1f %12.1f %12.1f %12.1f" % (n[:40], x[0], y[0], x[2] / 2**20, y[2] / 2**20,
                                                               x[3] / 2**20, y[3] / 2**20))
    # the first ops, in order, where the two runs differ by more than 1 MiB in what they keep or need at once
    shown = 0
    for i, (x, y) in enumerate(zip(ra, rb)):
        if x[0] != y[0]:
            print("sequences part at op %d: %s against %s" % (i, x[0], y[0]))
            break
        if abs(x[1] - y[1]) > (1 << 20) or abs(x[2] - y[2]) > (1 << 20):
            print("op %5d %-30s kept %8.1f / %8.1f MiB, at once %8.1f / %8.1f MiB" % (
                i, x[0][:30], x[1] / 2**20, y[1] / 2**20, x[2] / 2**20, y[2] / 2**20))
            shown += 1
            if shown >= top:
                break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--compare", nargs=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("program", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare, args.top)
        return 0
    prog = [p for p in args.program if p != "--"]
    rows = record(args, prog)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"side": "gpu" if args.gpu else "virtual", "argv": prog, "rows": rows}, f)
    print("%d ops recorded" % len(rows), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
