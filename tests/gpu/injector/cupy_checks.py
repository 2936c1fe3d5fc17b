"""CuPy under the shim with OOMH_CAP=4GiB.

  cap_mem_info     cupy.cuda.runtime.memGetInfo() reports the cap as the total
  cap_oom          an array over the cap raises cupy.cuda.memory.OutOfMemoryError
  rule_oom         a persistent rule fault (plan switched through the control block) raises it too
  step_fault       every allocation of 1 MiB or more in step 3 fails (the step written into the control block):
                   each step keeps a fresh, larger array, so that every step's allocation reaches the driver (the
                   pool has nothing cached to serve it from); CuPy frees its pool and retries, then raises
"""
import sys

from oomh_gpu_common import GIB, MIB, ControlBlock, guarded, inject_events, result

MODE = "default"
CAP = 4 * GIB

try:
    import cupy
except Exception as e:  # noqa: BLE001
    result("cupy", MODE, "import", False, f"cannot import cupy: {e}")
    sys.exit(0)

block = ControlBlock()


def cap_mem_info():
    free, total = cupy.cuda.runtime.memGetInfo()
    result("cupy", MODE, "cap_mem_info", total == CAP and 0 < free <= total, f"free={free} total={total}")


def cap_oom():
    try:
        x = cupy.empty(5 * GIB, dtype=cupy.uint8)
        del x
        result("cupy", MODE, "cap_oom", False, "a 5 GiB array was allocated under a 4 GiB cap")
    except cupy.cuda.memory.OutOfMemoryError as e:
        result("cupy", MODE, "cap_oom", True, f"{type(e).__name__}: {str(e)[:200]}")


def rule_oom():
    cupy.get_default_memory_pool().free_all_blocks()
    block.publish_plan({"rules": [{"name": "cupy-forever", "when": {"min_size": "1MiB"}, "fail": {"forever": True}}]})
    try:
        x = cupy.empty(256 * MIB, dtype=cupy.uint8)
        del x
        result("cupy", MODE, "rule_oom", False, "allocation succeeded under a forever rule")
    except cupy.cuda.memory.OutOfMemoryError as e:
        result("cupy", MODE, "rule_oom", True, f"{type(e).__name__}: {str(e)[:200]}")
    finally:
        block.publish_plan({})


def step_fault():
    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    block.publish_plan({"rules": [{"name": "cupy-step", "when": {"step": 3, "every": 1, "min_size": "1MiB"},
                                   "fail": {"times": 1}}]})
    kept, failed_at, message = [], None, ""
    try:
        for step in range(6):
            block.set_step(step)
            try:
                kept.append(cupy.empty((step + 1) * 64 * MIB, dtype=cupy.uint8))
            except cupy.cuda.memory.OutOfMemoryError as e:
                failed_at, message = step, f"{type(e).__name__}: {str(e)[:150]}"
                break
    finally:
        block.set_step(-1)
        block.publish_plan({})
    injected = len(inject_events("cupy-step"))
    del kept
    pool.free_all_blocks()
    result("cupy", MODE, "step_fault", failed_at == 3 and injected > 0,
           f"oom_at_step={failed_at} {message or 'no error'} (injected={injected})")


guarded("cupy", MODE, "cap_mem_info", cap_mem_info)
guarded("cupy", MODE, "cap_oom", cap_oom)
guarded("cupy", MODE, "rule_oom", rule_oom)
guarded("cupy", MODE, "step_fault", step_fault)
