#!/usr/bin/env python3
"""What a GPU allocates outside PyTorch's caching allocator, measured (issues 27 and 32, item 2): the figures
the virtual device models (LIBRARY_HANDLE_BYTES, the pinned host cache in python/oomharness/virtual_device/pinned.py).

    python3 tests/gpu/library_ooms.py measure            # plain: prints one JSON object
    oomharness exec --fault memory=host,forever -- python3 tests/gpu/library_ooms.py pin   # under the shim

`measure` takes the driver's free memory (cudaMemGetInfo) and PyTorch's reserved bytes around each first use of
a library: the driver bytes that are not the caching allocator's are the library's own (cuBLAS's handle at
the first matmul of the main thread, and of autograd's device thread at the first backward matmul; cuBLASLt
under autocast; cuDNN's handle at the first convolution, forward and backward). It also asks whether
PyTorch's CachingHostAllocator reuses a freed pinned block (host_memory_stats' allocations before and after
a second pin of the same size) and how a pin's size is rounded.

`pin` pins a tensor, and says whether the pin raised and with what: under a `memory: host` fault that never
ends, a GPU that routes cudaHostAlloc through the shim's cuMemHostAlloc must raise.
"""
import json
import sys
import time

import torch

MIB = 1 << 20


def driver_used():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def outside(fn):
    """Driver bytes `fn` took that are not PyTorch's reserved memory, and the reserved bytes it took."""
    used0, res0 = driver_used(), torch.cuda.memory_reserved()
    fn()
    used1, res1 = driver_used(), torch.cuda.memory_reserved()
    return {"outside": (used1 - used0) - (res1 - res0), "reserved": res1 - res0}


def measure():
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
           "cudnn": torch.backends.cudnn.version()}
    torch.zeros(1, device="cuda")  # the context
    a = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda", requires_grad=True)
    holder = {}
    out["cublas_forward"] = outside(lambda: holder.setdefault("y", a @ w))
    out["cublas_forward_again"] = outside(lambda: holder.setdefault("y2", a @ w))
    out["cublas_backward_thread"] = outside(lambda: holder["y"].sum().backward())
    with torch.autocast("cuda", dtype=torch.float16):
        out["autocast_matmul"] = outside(lambda: holder.setdefault("h", a @ w))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out["cublas_new_stream"] = outside(lambda: holder.setdefault("z", a @ w))
    torch.cuda.synchronize()
    conv = torch.nn.Conv2d(16, 16, 3).cuda()
    img = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)
    out["cudnn_forward"] = outside(lambda: holder.setdefault("c", conv(img)))
    out["cudnn_backward"] = outside(lambda: holder["c"].sum().backward())
    # Pinned host memory: PyTorch's CachingHostAllocator, its rounding and its reuse of a freed block.
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is not None:
        def allocs():
            s = stats()
            return s.get("num_host_alloc", s.get("allocations.current", None)), s
        n0, s0 = allocs()
        t = torch.empty(300 * 1024, dtype=torch.uint8).pin_memory()
        n1, s1 = allocs()
        del t
        torch.cuda.synchronize()
        t = torch.empty(300 * 1024, dtype=torch.uint8).pin_memory()
        n2, s2 = allocs()
        t2 = torch.empty(300 * 1024, dtype=torch.uint8).pin_memory()
        n3, s3 = allocs()
        out["pinned"] = {"first": [n0, n1], "after_free_same_size": n2, "while_held": n3,
                         "stats_keys": sorted(s3)[:60], "stats": {k: v for k, v in s3.items()
                                                                 if isinstance(v, (int, float))}}
        del t, t2
    print(json.dumps(out, indent=1, default=str))


def pin():
    x = torch.randn(256, 512)
    torch.zeros(1, device="cuda")
    t0 = time.perf_counter()
    try:
        p = x.pin_memory()
        print("RESULT pin: no error (pinned=%s)" % p.is_pinned(), flush=True)
    except Exception as e:  # what a GPU raises is the finding
        print("RESULT pin: %s: %s" % (type(e).__name__, str(e).splitlines()[0]), flush=True)
    try:
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=64, pin_memory=True)
        for (b,) in loader:
            b.cuda(non_blocking=True)
        print("RESULT loader: no error", flush=True)
    except Exception as e:
        print("RESULT loader: %s: %s" % (type(e).__name__, str(e).splitlines()[0]), flush=True)
    print("RESULT pin took %.1f ms" % ((time.perf_counter() - t0) * 1e3))


def which():
    """Each library's first use, caught: run under a fault that fails allocations of exactly one size (for
    example `--fault min_size=8MiB,max_size=8MiB,forever`), it tells which of the driver bytes `measure`
    counted pass through the entry points the shim intercepts (a refused one raises; an unseen one does not)."""
    torch.zeros(1, device="cuda")
    a = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda", requires_grad=True)
    conv = torch.nn.Conv2d(16, 16, 3).cuda()
    img = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)  # past a fault's `after`: the set-up is done
    for name, fn in (("first matmul", lambda: (a @ w).sum().backward()),
                     ("first convolution", lambda: conv(img).sum().backward())):
        try:
            fn()
            torch.cuda.synchronize()
            print("RESULT which %s: no error" % name, flush=True)
        except Exception as e:  # what was refused is the finding
            print("RESULT which %s: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0][:160]), flush=True)


def spaced():
    """The probe's one-copy read of a GPU batch's values (Note [One copy of a GPU batch's values] in
    python/oomharness/probe/gpu_copy.py) against reading the same elements one by one, for several dtypes, on the
    default stream and a side stream; and its cost against the one-by-one read."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    from oomharness.probe import digests as ev, gpu_copy
    ok = gpu_copy.cuda_runtime() is not False
    print("RESULT spaced_runtime", "PASS" if ok else "FAIL (no libcudart found: the probe reads one by one)")
    side = torch.cuda.Stream()
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8, torch.bool):
        for stream in (None, side):
            with torch.cuda.stream(stream):
                t = (torch.randn(1000, 37, device="cuda") * 100).to(dtype)
                k = ev.WHOLE_VALUES
                got = ev._spaced_values(torch, t, k)
                want = ev._element_bits(torch, t, [j * (t.numel() // k) for j in range(k)])
                print("RESULT spaced_values %s %s" % (dtype, "side" if stream else "default"),
                      "PASS" if got == want else "FAIL got %s want %s" % (got, want))
    # Per-sample windows: the same as slicing on the host, and halves add up to the whole (Note [A step is its
    # data]): the self-test's halving trainers depend on it.
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        t = (torch.randn(300, 7, 5, device="cuda") * 100).to(dtype)
        got = ev._sample_windows(torch, t, 0, 300, 35, 16)
        want = t.reshape(300, 35)[:, :16].cpu()
        whole, first, second = (ev.batch_hash(torch, u, 0) for u in (t, t[:150], t[150:]))
        ok = got is not None and torch.equal(got, want) and whole[2] and first[2] and \
            whole[1] == (first[1] + second[1]) & ev.MASK
        print("RESULT sample_windows %s" % dtype, "PASS" if ok else "FAIL %s %s" % (whole, (first, second)))
    t = torch.randn(512, 4096, device="cuda")
    for name, fn in (("one copy", lambda: ev._spaced_values(torch, t, 8)),
                     ("per-sample windows", lambda: ev.batch_hash(torch, t, 0)),
                     ("one by one", lambda: ev._element_bits(torch, t, ev._positions(t.numel(), 8)))):
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        print("RESULT spaced_cost %s: %.1f us" % (name, (time.perf_counter() - t0) / 200 * 1e6))


if __name__ == "__main__":
    {"measure": measure, "pin": pin, "spaced": spaced, "which": which}[sys.argv[1]]()
