"""The OOM table (Note [Which errors are OOMs] in policies/include/oomharness/policies/oom_kinds.h): its C++
and Python twins hold the same rows, words and flags, and each real message from a GPU or from PyTorch's
source is named by the row it belongs to."""
import os
import re
import unittest

import torch

from oomharness import oom_kinds, probe

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "policies", "include", "oomharness",
                      "policies", "oom_kinds.h")
TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"|\b(true|false)\b|([{},])')


def _tokens(text):
    """C string literals (adjacent ones joined, as the compiler joins them), true/false, braces, commas."""
    out = []
    for m in TOKEN.finditer(text):
        if m.group(1) is not None:
            value = bytes(m.group(1), "utf-8").decode("unicode_escape")
            if out and out[-1][0] == "str":
                out[-1] = ("str", out[-1][1] + value)
            else:
                out.append(("str", value))
        elif m.group(2) is not None:
            out.append(("bool", m.group(2) == "true"))
        else:
            out.append(("punct", m.group(3)))
    return out


def cpp_table(path=HEADER):
    """The rows of kOomKinds and the loose words, read from the header."""
    with open(path) as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    body = text[text.index("kOomKinds[] = {") + len("kOomKinds[] = {"):]
    body = body[:body.index("};")]
    rows, depth, row = [], 0, []
    for kind, value in _tokens(body):
        if kind == "punct" and value == "{":
            depth += 1
            if depth == 1:
                row = []
            elif depth == 2:
                row.append([])
            continue
        if kind == "punct" and value == "}":
            depth -= 1
            if depth == 0:
                rows.append(row)
            continue
        if kind == "punct":
            continue
        (row[-1] if depth == 2 else row).append(value)
    loose = text[text.index("kLooseWords[] = {"):]
    loose = [v for k, v in _tokens(loose[:loose.index("};")]) if k == "str"]
    return rows, loose


class Agree(unittest.TestCase):
    def test_the_cpp_and_python_tables_hold_the_same_rows(self):
        rows, loose = cpp_table()
        self.assertGreaterEqual(len(rows), 8, "the header's table was not read")
        cpp = [(r[0], tuple(w for w in r[1] if w), r[2], r[3], r[4], r[5]) for r in rows]
        py = [(k.name, k.words, k.memory, k.source, k.catchable, k.needs_refusal) for k in oom_kinds.KINDS]
        self.assertEqual(cpp, py)
        self.assertEqual(tuple(loose), oom_kinds.LOOSE_WORDS)
        for r in rows:
            self.assertEqual(len(r), 7, r)
            self.assertTrue(r[6] or r[4], "%s: a row the code cannot catch as OutOfMemoryError needs advice" % r[0])
            for w in r[1]:
                self.assertEqual(w, w.lower(), "words are lowercase")

    def test_a_changed_header_is_told_apart(self):
        # The reader itself can fail: a header whose row lost a word reads differently.
        with open(HEADER) as f:
            text = f.read()
        changed = text.replace('"cublas_status_alloc_failed", "", "", ""', '"", "", "", ""')
        self.assertNotEqual(changed, text)
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "oomh_kinds_%d.h" % os.getpid())
        with open(path, "w") as f:
            f.write(changed)
        try:
            rows, _ = cpp_table(path)
        finally:
            os.unlink(path)
        self.assertEqual([w for w in rows[1][1] if w], [])


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
