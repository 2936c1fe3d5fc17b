"""CuPy under the shim with OOMH_CAP=4GiB.

  cap_mem_info     cupy.cuda.runtime.memGetInfo() reports the cap as the total
  cap_oom          an array over the cap raises cupy.cuda.memory.OutOfMemoryError
  rule_oom         a persistent rule fault (plan switched through the control block) raises it too
"""
import sys

from oomh_gpu_common import GIB, MIB, ControlBlock, guarded, result

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


guarded("cupy", MODE, "cap_mem_info", cap_mem_info)
guarded("cupy", MODE, "cap_oom", cap_oom)
guarded("cupy", MODE, "rule_oom", rule_oom)
