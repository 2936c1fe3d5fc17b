#!/usr/bin/env python3
"""Issue 19: does the reservation sidecar's fragmentation mode (`memory: {reserve_chunk: ...}`) fragment a
real GPU? Run as a job beside the sidecar, it prints what the GPU shows free and the largest single tensor
PyTorch can allocate (bisection, to 64 MiB), and the same for a tensor built from 256 MiB pieces.
If the largest single tensor is far below the free memory, the holes the sidecar left are real
fragmentation; if it is close to it, the driver maps scattered pages into one range and the holes do not
matter to an allocation (tests/gpu/run_all.sh `fragment` phase; docs/compatibility.md)."""
import json
import sys

import torch

GIB, MIB = 1 << 30, 1 << 20


def fits(nbytes):
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        del t
        return True
    except torch.OutOfMemoryError:
        return False
    finally:
        torch.cuda.empty_cache()


def largest(low, high, step=64 * MIB):
    """The largest size in [low, high] that fits, by bisection (low is assumed to fit, or 0)."""
    while high - low > step:
        mid = (low + high) // 2 // step * step
        if mid <= low:
            break
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def pieces(size):
    """How many 256 MiB tensors fit at once (a caching allocator's many segments)."""
    held = []
    try:
        while len(held) * 256 * MIB < size:
            held.append(torch.empty(256 * MIB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError:
        pass
    n = len(held)
    del held
    torch.cuda.empty_cache()
    return n


def main():
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info()
    single = largest(0, free)
    n = pieces(2 * free)
    out = {"label": sys.argv[1] if len(sys.argv) > 1 else "", "free": free, "total": total,
           "largest_single": single, "pieces_256mib": n, "pieces_bytes": n * 256 * MIB}
    print("FRAGMENT " + json.dumps(out))
    print(f"{out['label']}: free {free / GIB:.2f} GiB of {total / GIB:.2f} GiB; largest single tensor "
          f"{single / GIB:.2f} GiB ({single / free * 100 if free else 0:.0f}% of free); {n} pieces of 256 MiB "
          f"({n / 4:.2f} GiB)")


if __name__ == "__main__":
    main()
