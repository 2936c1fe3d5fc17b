"""The OOM table (Note [Which errors are OOMs] in policies/include/oomharness/policies/oom_kinds.h), whose rows
the Python package gets through the generated _abi.py (the ctest python_abi_fresh checks it is the header's):
each real message from a GPU or from PyTorch's source is named by the row it belongs to."""
import unittest

import torch

from oomharness import oom_kinds, probe


class Classify(unittest.TestCase):
    # Messages as PyTorch 2.x words them (aten/src/ATen/cuda/Exceptions.h: TORCH_CUDABLAS_CHECK, AT_CUDNN_CHECK;
    # c10/cuda/CUDAException.h: C10_CUDA_CHECK), and as the GPU runs in docs/compatibility.md met them.
    CASES = [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB."), "allocator"),
        (torch.OutOfMemoryError("anything at all"), "allocator"),
        (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), "cublas"),
        (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), "cudnn"),
        (RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"), "cudnn"),
        (torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
         "cuda_runtime"),
        (RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5\n"
                      "Last error:\nCuda failure 'out of memory'"), "nccl"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you "
                      "tried to allocate 1099511627776 bytes. Error code 12 (Cannot allocate memory)"), "host"),
        (RuntimeError("CUFFT_ALLOC_FAILED"), "cufft"),
    ]

    def test_each_message_is_named_by_its_row(self):
        for exc, name in self.CASES:
            kind = oom_kinds.classify(exc)
            self.assertIsNotNone(kind, str(exc))
            self.assertEqual(kind.name, name, str(exc))
            self.assertTrue(probe.is_oom(exc), str(exc))
            self.assertEqual(kind.catchable, isinstance(exc, torch.OutOfMemoryError), str(exc))

    def test_what_is_no_oom(self):
        for exc in (RuntimeError("DataLoader worker (pid 4242) ran out of memory reading shard 7"),
                    RuntimeError("host out of memory"), ValueError("expected 3 channels"),
                    RuntimeError("CUDA error: device-side assert triggered"), None):
            self.assertIsNone(oom_kinds.classify(exc), str(exc))
            self.assertFalse(probe.is_oom(exc), str(exc))

    def test_words_that_need_a_refusal_are_not_the_probes(self):
        # CUDNN_STATUS_NOT_SUPPORTED is also a non-contiguous input's error: the table names it, the probe
        # does not report it (the runner takes it as support for a refusal of the shim).
        exc = RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                           "non-contiguous input.")
        self.assertEqual(oom_kinds.classify(exc).name, "cudnn_workspace")
        self.assertTrue(oom_kinds.classify(exc).needs_refusal)
        self.assertFalse(probe.is_oom(exc))


if __name__ == "__main__":
    unittest.main()
