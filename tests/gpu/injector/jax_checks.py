"""JAX under the shim with OOMH_CAP=4GiB (run.sh sets XLA_PYTHON_CLIENT_PREALLOCATE for the mode).

usage: jax_checks.py MODE [GROUP]     MODE: prealloc | noprealloc     GROUP: cap (default) | nth | step

run.sh runs each group as its own process, all in parallel: XLA's BFC allocator waits up to 10 s for memory
to be freed before it reports an out-of-memory error (tsl's AllocatorRetry), so one OOM per process keeps
the phase short.

  cap   sizes_from_cap     XLA's memory limit (memory_stats()['bytes_limit']) is within the 4 GiB cap
        oom_beyond_cap     a 6 GiB array fails with RESOURCE_EXHAUSTED / out of memory
  nth   nth_persistent     from the Nth driver allocation of 1 MiB or more on, every one fails (plan published
                           once the client exists, before the first array); arrays of 256 MiB until JAX
                           raises RESOURCE_EXHAUSTED. N is 2 without preallocation (the first array's region
                           succeeds) and 1 with it: a preallocating JAX asks the driver once, for its whole pool,
                           at its first array, and serves everything after from that pool.
  step  step_fault         every allocation of 1 MiB or more in step 3 fails (the step written into the
                           control block); each step makes a fresh array, larger than the last, so that step
                           3's needs a new region from the driver. With preallocation the first array is made in
                           step 3 (steps 0-2 leave the GPU alone), so that the pool's one allocation falls in
                           the faulted step.
        step_fault_after_pool   (prealloc only) the same fault, with the pool made in step 0: it serves step 3,
                           nothing reaches the driver, the fault never fires and JAX sees no error. This is
                           the expected outcome (PASS): with preallocation a step fault is visible only in the
                           step of the first allocation.
"""
import sys

from oomh_gpu_common import GIB, MIB, ControlBlock, guarded, inject_events, result

MODE = sys.argv[1] if len(sys.argv) > 1 else "prealloc"
GROUP = sys.argv[2] if len(sys.argv) > 2 else "cap"
PREALLOC = MODE == "prealloc"
CAP = 4 * GIB
FAULT_STEP = 3

try:
    import jax
    import jax.numpy as jnp
except Exception as e:  # noqa: BLE001
    result("jax", MODE, "import", False, f"cannot import jax: {e}")
    sys.exit(0)


def gpu():
    devices = [d for d in jax.devices() if d.platform == "gpu"]
    if not devices:
        raise RuntimeError(f"no GPU device: {jax.devices()}")
    return devices[0]


def pool_bytes():
    """Bytes XLA's BFC allocator holds from the driver (None where memory_stats does not say)."""
    return (gpu().memory_stats() or {}).get("pool_bytes")


def is_oom(e):
    msg = str(e)
    return "RESOURCE_EXHAUSTED" in msg or "out of memory" in msg.lower()


def error_text(e):
    return f"{type(e).__name__}: {str(e)[:160]}" if e is not None else "no error"


def make(nbytes):
    """A device array of nbytes, computed (XLA's async dispatch reports an allocation failure here)."""
    x = jnp.zeros((nbytes,), dtype=jnp.uint8)
    x.block_until_ready()
    return x


def sizes_from_cap():
    stats = gpu().memory_stats() or {}
    limit = stats.get("bytes_limit", 0)
    result("jax", MODE, "sizes_from_cap", 0 < limit <= CAP, f"bytes_limit={limit} cap={CAP}")


def oom_beyond_cap():
    try:
        x = jnp.ones((6 * GIB // 4,), dtype=jnp.float32)
        x.block_until_ready()
        result("jax", MODE, "oom_beyond_cap", False, "a 6 GiB array was allocated under a 4 GiB cap")
    except Exception as e:  # noqa: BLE001 - XlaRuntimeError's module moved between versions
        msg = str(e)
        ok = "RESOURCE_EXHAUSTED" in msg or "out of memory" in msg.lower()
        result("jax", MODE, "oom_beyond_cap", ok, f"{type(e).__name__}: {msg[:220]}")


def nth_persistent():
    n = 1 if PREALLOC else 2
    block = ControlBlock()
    before = pool_bytes()  # creates the client first: its own start-up allocations are not counted
    block.publish_plan({"rules": [{"name": "jax-nth", "when": {"nth": n, "min_size": "1MiB"}, "fail": {"forever": True}}]})
    kept, error = [], None
    try:
        for _ in range(8):  # 2 GiB in all: within the 3 GiB XLA takes under the cap, so only the fault can fail
            kept.append(make(256 * MIB))
    except Exception as e:  # noqa: BLE001 - report whatever JAX raised
        error = e
    injected = len(inject_events("jax-nth"))
    block.publish_plan({})
    arrays = len(kept)
    del kept
    what = "the pool's allocation" if PREALLOC else "a 256 MiB region"
    result("jax", MODE, "nth_persistent", error is not None and is_oom(error) and injected > 0,
           f"nth={n} ({what}) arrays_before_oom={arrays} {error_text(error)} "
           f"(injected={injected} pool_bytes_before={before})")


def step_fault():
    block = ControlBlock()
    before = pool_bytes()  # the client exists before the faulted step
    block.publish_plan({"rules": [{"name": "jax-step", "when": {"step": FAULT_STEP, "every": 1, "min_size": "1MiB"},
                                   "fail": {"times": 1}}]})
    first = FAULT_STEP if PREALLOC else 0
    kept, failed_at, error = [], None, None
    for step in range(5):
        block.set_step(step)
        if step < first:
            continue
        try:
            kept.append(make((step + 1) * 128 * MIB))
        except Exception as e:  # noqa: BLE001
            failed_at, error = step, e
            break
    block.set_step(-1)
    injected = len(inject_events("jax-step"))
    block.publish_plan({})
    del kept
    ok = failed_at == FAULT_STEP and is_oom(error) and injected > 0
    first_note = f" (first array in step {first})" if PREALLOC else ""
    result("jax", MODE, "step_fault", ok,
           f"oom_at_step={failed_at}{first_note} {error_text(error)} (injected={injected} pool_bytes_before={before})")


def step_fault_after_pool():
    block = ControlBlock()
    block.publish_plan({"rules": [{"name": "jax-step-after-pool",
                                   "when": {"step": FAULT_STEP, "every": 1, "min_size": "1MiB"}, "fail": {"times": 1}}]})
    kept, failed_at, error, pools = [], None, None, []
    for step in range(5):  # 1.9 GiB in all: fits the 3 GiB pool
        block.set_step(step)
        try:
            kept.append(make((step + 1) * 128 * MIB))
        except Exception as e:  # noqa: BLE001
            failed_at, error = step, e
            break
        pools.append(pool_bytes())
    block.set_step(-1)
    injected = len(inject_events("jax-step-after-pool"))
    block.publish_plan({})
    del kept
    if error is None:
        result("jax", MODE, "step_fault_after_pool", injected == 0,
               f"no error, injected={injected}: the pool made in step 0 ({pools[0]} bytes) served step {FAULT_STEP} "
               f"(pool_bytes per step: {pools})")
    else:
        result("jax", MODE, "step_fault_after_pool", False,
               f"error at step {failed_at}: {error_text(error)} (injected={injected}, pool_bytes per step: {pools})")


GROUPS = {
    "cap": [("sizes_from_cap", sizes_from_cap), ("oom_beyond_cap", oom_beyond_cap)],
    "nth": [("nth_persistent", nth_persistent)],
    "step": [("step_fault", step_fault)] + ([("step_fault_after_pool", step_fault_after_pool)] if PREALLOC else []),
}
if GROUP not in GROUPS:
    result("jax", MODE, "usage", False, f"unknown group {GROUP!r} (cap, nth, step)")
    sys.exit(0)
for name, fn in GROUPS[GROUP]:
    guarded("jax", MODE, name, fn)
