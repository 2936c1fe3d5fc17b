"""The virtual device's libraries part: what cuBLAS and cuDNN hold on a GPU beside the tensors, booked at the
moments a GPU takes it.

Note [What a GPU holds that no tensor shows]
cuBLAS takes a workspace from the caching allocator the first time a handle runs a BLAS call on a stream, and
keeps it: one for the thread that runs forward, one for autograd's device thread (the study's 64 MiB beyond
parameters, gradients and Adam state on an H100). The device books one workspace at the first BLAS operation
outside backward and one at the first inside it, of the size CUBLAS_WORKSPACE_CONFIG gives (":SIZE_KiB:COUNT"
pairs), else PyTorch 2.x's default on Hopper (:4096:8, 32 MiB). The CUDA context is no allocation: the runner
gives the driver double a context of the size measured on an H100 (Note [The context on the virtual device] in
runner/src/exec/launch.cpp), which mem_get_info and a cap that counts the footprint see, as on a GPU.

Note [What libraries allocate outside the caching allocator]
On a GPU, cuBLAS and cuDNN also allocate device memory themselves, through cudaMalloc, at the moment a
thread first needs them: cublasCreate at the first BLAS call of each thread (PyTorch keeps one handle per
thread and device: the forward thread's, then autograd's device thread's at the first backward matmul, when
activations fill the memory), cudnnCreate at the first convolution of each thread. The shim sees those
allocations and a cap or a fault refuses them like any other, but PyTorch's caching allocator does not make
them: no cache is freed and no retry happens, and the failure reaches the code as the library's error, a
RuntimeError that is not torch.OutOfMemoryError (measured on an H100 under a cap, issue 27: "CUDA error:
CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", the text of PyTorch's TORCH_CUDABLAS_CHECK).
The device asks its segment source (the driver double through the shim, or the budget) for a handle's bytes
at the same moments, outside the model, and raises the same exception with PyTorch's message when refused;
a refused handle is asked for again at the next call, as PyTorch does. The workspace PyTorch then gives the
handle (Note [What a GPU holds that no tensor shows]) is the caching allocator's, one per handle and stream.
The sizes are measured (LIBRARY_HANDLE_BYTES; tests/gpu/library_ooms.py on an H100, PyTorch 2.11.0+cu130,
CUDA 13.0, cuDNN 9.19, 2026-11-26): the first matmul of the process took 66 MiB from the driver outside
PyTorch's reserved memory (an H200 showed cublasCreate's 64 MiB as one cuMemAlloc), autograd's thread's first
matmul 64 MiB, the first convolution 8 MiB (cuDNN's handle), autocast's first matmul and a second stream
nothing more. A library allocates when an operation runs, after its output tensor was allocated (as ATen
allocates the result, then asks for the handle), so the device asks for a handle after booking the
operation's outputs. Which of those bytes pass through the entry points the shim intercepts was measured
too (tests/gpu/run_all.sh libooms, an H200, same day: a fault on every allocation of one size): cuBLAS's
64 MiB handle does (refused, it raised CUBLAS_STATUS_ALLOC_FAILED); cuDNN 9's 8 MiB handle and the 2 MiB of
the first matmul do not (cuDNN allocates through its own runtime; no error), so no cap or fault of the shim
refuses or counts them on a GPU. The device so asks the driver (through the shim) for cuBLAS's handles only,
and records cuDNN's without allocating it (LIBRARY_THROUGH_SHIM). Not modelled: the 2 MiB of the first
matmul and of autograd's first convolution, a full GPU refusing cuDNN's handle, cuDNN's workspaces (its
algorithm search falls back to one that fits), NCCL's buffers (gloo stands in for NCCL and allocates on the
host), cuFFT's plans. Other GPUs and library versions take other sizes.
"""

import os
import threading

from .segments import OutOfMemory

WHO = "device.libraries"

# Note [What a GPU holds that no tensor shows]
# Note [What libraries allocate outside the caching allocator]: measured on an H100 with CUDA 13.0's libraries.
LIBRARY_HANDLE_BYTES = {"cublas": 64 << 20, "cudnn": 8 << 20}
LIBRARY_THROUGH_SHIM = {"cublas": True, "cudnn": False}  # cuDNN 9's handle: its own runtime, unseen
# PyTorch 2.x's words when the handle's allocation fails (TORCH_CUDABLAS_CHECK, AT_CUDNN_CHECK): RuntimeError.
LIBRARY_ERRORS = {"cublas": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                  "cudnn": "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}
BLAS_OPS = frozenset(("mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "addr",
                      "_addmm_activation"))
DEFAULT_CUBLAS_WORKSPACE_CONFIG = ":4096:8"  # PyTorch 2.x on Hopper (sm90): 8 buffers of 4 MiB

# Note [cuBLASLt's workspace]
# A Linear layer's addmm with its bias goes through cuBLASLt on a GPU (Blas.cpp's gemm_and_bias epilogue),
# which takes a workspace of its own from the caching allocator, once per handle and stream, after the cuBLAS
# workspace: 1 MiB, measured on an H200 (PyTorch 2.11, tests/gpu/anatomy_of.sh: a 1.0 MiB block made in
# at::cuda::getCUDABlasLtWorkspace at the first forward Linear). At 1 MiB it comes from the small pool, where
# it decides whether the next small tensors need a segment of their own. Booked at the first addmm with a
# one-dimensional bias (and _addmm_activation) of each thread and stream.
CUBLASLT_WORKSPACE_BYTES = 1 << 20


def cublas_workspace_bytes(config=None):
    """One cuBLAS workspace's bytes for CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT" pairs, as cuBLAS reads it);
    PyTorch's default on Hopper when it is unset or unreadable."""
    if config is None:
        config = os.environ.get("CUBLAS_WORKSPACE_CONFIG") or DEFAULT_CUBLAS_WORKSPACE_CONFIG
    parts = config.split(":")
    if len(parts) < 3 or parts[0] != "" or (len(parts) - 1) % 2:
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    try:
        pairs = [(int(parts[i]), int(parts[i + 1])) for i in range(1, len(parts), 2)]
    except ValueError:
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    if any(size < 0 or count < 0 for size, count in pairs):
        return cublas_workspace_bytes(DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    return sum(size * 1024 * count for size, count in pairs)


class Libraries:
    """The handles and workspaces of the CUDA libraries, per thread (forward, autograd's backward) and stream."""

    def __init__(self, device):
        self.device = device
        self.workspaces = {}  # ("forward" / "backward", stream) -> the cuBLAS workspace's block
        self.lt_workspaces = {}  # the same keys -> cuBLASLt's workspace's block (Note [cuBLASLt's workspace])
        self.handles = {}     # ("cublas" / "cudnn", "forward" / "backward") -> (the driver's block, bytes)
        self._local = threading.local()

    def install(self, torch, patches):
        """Marks backward, which a GPU runs on autograd's own thread, with a cuBLAS handle of its own."""
        local = self._local

        def marking(fn):
            def wrapper(*args, **kwargs):
                local.backward = getattr(local, "backward", 0) + 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    local.backward -= 1
            return wrapper

        patches.replace(WHO, "torch.autograd", "backward", marking)
        patches.replace(WHO, "torch.autograd", "grad", marking)

    def in_backward(self):
        return getattr(self._local, "backward", 0) > 0

    def thread(self):
        return "backward" if self.in_backward() else "forward"

    def handle(self, library, which):
        """The handle `library` makes on thread `which` the first time it is used there, allocated outside the
        caching allocator (Note [What libraries allocate outside the caching allocator]). Raises the library's
        RuntimeError when the driver (the cap, a fault) refuses it."""
        key = (library, which)
        if key in self.handles:
            return
        size = LIBRARY_HANDLE_BYTES[library]
        self.handles[key] = self._alloc(library, size) if LIBRARY_THROUGH_SHIM[library] else (None, size)
        self.device.ctx.emit("library_alloc", library=library, thread=which, bytes=size,
                             counted=LIBRARY_THROUGH_SHIM[library])

    def _alloc(self, library, size):
        try:
            block = self.device.model.source.alloc(size)
        except OutOfMemory:
            block = None
        if block is None:
            self.device.library_refused(library)
            raise RuntimeError(LIBRARY_ERRORS[library])
        return block, size

    def held(self):
        """The bytes the handles hold outside the caching allocator."""
        return sum(size for _, size in self.handles.values())

    def blas_call(self, lt=False):
        """The cuBLAS handle and workspace of the thread (and stream) a GPU would run this BLAS call on; `lt`:
        the call goes through cuBLASLt (Note [cuBLASLt's workspace])."""
        which = self.thread()
        self.handle("cublas", which)
        stream = self.device.current_stream
        key = (which, id(stream) if stream is not None else 0)
        if key not in self.workspaces:  # a refused workspace is asked for again at the next call, as on a GPU
            self.workspaces[key] = self.device.model.malloc(cublas_workspace_bytes())
        if lt and key not in self.lt_workspaces:
            self.lt_workspaces[key] = self.device.model.malloc(CUBLASLT_WORKSPACE_BYTES)

    def conv_call(self):
        """The cuDNN handle of the thread a GPU would run this convolution on."""
        self.handle("cudnn", self.thread())

    def workspace_bytes(self):
        """The bytes of the cuBLAS workspaces held now (a breakdown's `workspace`)."""
        return sum(b.size for b in list(self.workspaces.values()) + list(self.lt_workspaces.values())
                   if b is not None and not b.free)
