"""PyTorch under the shim, for one allocator mode (run.sh sets PYTORCH_CUDA_ALLOC_CONF and OOMH_CAP=4GiB).

usage: torch_checks.py MODE      MODE: native | expandable | async   (a label for the RESULT lines)

Checks, in this order (the plan is switched at run time through the control block):
  cap_mem_get_info   torch.cuda.mem_get_info() reports the 4 GiB cap as the total
  cap_oom            a tensor over the cap raises torch.OutOfMemoryError naming the capped total
  transient          one injected failure: absorbed by the caching allocator's retry (native, expandable);
                     the detail says what happened with cudaMallocAsync
  step_fault         a fault at step 3 (step written into the control block) surfaces as OutOfMemoryError
  nth_persistent     the 3rd allocation and every one after fail: surfaces as OutOfMemoryError
"""
import sys

from oomh_gpu_common import GIB, MIB, ControlBlock, guarded, inject_events, result

MODE = sys.argv[1] if len(sys.argv) > 1 else "native"
CAP = 4 * GIB

try:
    import torch
except Exception as e:  # noqa: BLE001
    result("torch", MODE, "import", False, f"cannot import torch: {e}")
    sys.exit(0)

if not torch.cuda.is_available():
    result("torch", MODE, "cuda", False, "torch.cuda.is_available() is False")
    sys.exit(0)

block = ControlBlock()
torch.cuda.init()


def fresh(plan):
    """Drop PyTorch's cache, then switch to `plan` (rule counters start over)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    block.publish_plan(plan)


def cap_mem_get_info():
    free, total = torch.cuda.mem_get_info()
    ok = total == CAP and 0 < free <= total
    result("torch", MODE, "cap_mem_get_info", ok, f"free={free} total={total} expected_total={CAP}")


def cap_oom():
    fresh({})
    try:
        x = torch.empty(5 * GIB, dtype=torch.uint8, device="cuda")
        del x
        result("torch", MODE, "cap_oom", False, "a 5 GiB tensor was allocated under a 4 GiB cap")
    except torch.OutOfMemoryError as e:
        msg = str(e)
        result("torch", MODE, "cap_oom", "4.00 GiB" in msg, f"message: {msg[:220]}")


def transient():
    fresh({"rules": [{"name": "transient", "when": {"nth": 2, "min_size": "1MiB"}, "fail": {"times": 1}}]})
    kept, surfaced = [], None
    try:
        for _ in range(4):
            kept.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        surfaced = str(e)
    injected = len(inject_events("transient"))
    del kept
    outcome = "surfaced" if surfaced else "absorbed"
    detail = f"injected={injected} outcome={outcome}"
    if MODE == "async":
        # The spike saw one failure reach Python with cudaMallocAsync; record what happens, fail only if
        # nothing was injected.
        result("torch", MODE, "transient_observed", injected == 1, detail)
    else:
        result("torch", MODE, "transient_absorbed", injected == 1 and not surfaced, detail)


def step_fault():
    fresh({"rules": [{"name": "at-step-3", "when": {"step": 3, "min_size": "1MiB"}, "fail": {"times": 4}}]})
    kept, failed_at, message = [], None, ""
    for step in range(6):
        block.set_step(step)
        try:
            kept.append(torch.empty((step + 1) * 64 * MIB, dtype=torch.uint8, device="cuda"))
            torch.cuda.synchronize()
        except torch.OutOfMemoryError as e:
            failed_at, message = step, str(e)
            break
    block.set_step(-1)
    del kept
    injected = len(inject_events("at-step-3"))
    result("torch", MODE, "step_fault", failed_at == 3,
           f"oom_at_step={failed_at} injected={injected} message: {message[:150]}")


def nth_persistent():
    fresh({"rules": [{"name": "third-on", "when": {"nth": 3, "min_size": "1MiB"}, "fail": {"forever": True}}]})
    kept, raised, message = [], False, ""
    try:
        for _ in range(10):
            kept.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
    except torch.OutOfMemoryError as e:
        raised, message = True, str(e)
    n = len(kept)
    del kept
    block.publish_plan({})
    result("torch", MODE, "nth_persistent", raised, f"tensors_before_oom={n} message: {message[:150]}")


for name, fn in [("cap_mem_get_info", cap_mem_get_info), ("cap_oom", cap_oom), ("transient", transient),
                 ("step_fault", step_fault), ("nth_persistent", nth_persistent)]:
    guarded("torch", MODE, name, fn)
