"""Runs a trainer in this process after one allocation through the CUDA driver (the CPU driver double under
`--simulate`): a job on CPU tensors that still meets the shim, so that the probe's request layer, the one a GPU
has (Note [An OOM the probe raises] in python/oomharness/probe/faults.py), is tested without a GPU. The trainer
is run unchanged, as `python3 TRAINER ARGS...` would run it.

    with_driver.py TRAINER [ARGS...]
"""
import ctypes
import runpy
import sys

lib = ctypes.CDLL("libcuda.so.1")
device, context, block = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for rc in (lib.cuInit(0), lib.cuDeviceGet(ctypes.byref(device), 0),
           lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), lib.cuCtxSetCurrent(context),
           lib.cuMemAlloc_v2(ctypes.byref(block), ctypes.c_size_t(1 << 20))):
    if rc != 0:
        sys.exit("with_driver.py: the CUDA driver said %d" % rc)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
