"""The virtual device's parallel part: what single-GPU programs use of torch's multi-GPU and distributed code.

Note [nn.DataParallel on the virtual device]
Public single-GPU trainers (ImageNet-style examples, timm's and torchvision's references) wrap their model in
nn.DataParallel whatever the number of GPUs. On one GPU it moves the module to cuda:0 in its constructor, and
its forward checks that every parameter and buffer is on cuda:0 (the virtual device's tensors say so: Note
[What a tensor on the virtual device says it is] in tensors.py), scatters the inputs to that one device (a
host tensor is copied there, a device tensor is passed on as it is) and calls the module. The scatter is
torch's C++ `comm.scatter` on CUDA streams, which the CPU cannot run: the device replaces the autograd
function `Scatter` that scatter_gather.py calls by one whose `apply`, for one target device, is the
host-to-device copy of `.cuda()` (differentiable, as Scatter is), and leaves the rest of DataParallel (and `nn.parallel.data_parallel`) torch's own. More than one
device is a call the virtual device cannot run (it has one; a one-GPU machine refuses it too).
DistributedDataParallel is not touched: it runs over gloo as the distributed tests run it.

Note [NCCL on the virtual device]
A GPU program asks for NCCL (`init_process_group("nccl")`, "cuda:nccl,cpu:gloo", or no backend at all, which
torch makes NCCL for CUDA tensors since torch.cuda says it is available), and NCCL cannot run on the CPU. The
device gives the program gloo in NCCL's place, as the distributed tests do by hand: the collectives are the same
(all_reduce, broadcast, all_gather, reduce_scatter on one process), their tensors are host memory, and the job
says so once (a `divergence` event, `nccl`). What NCCL would hold on a GPU (its buffers, through the driver's VMM
calls) is not booked (Note [What libraries allocate outside the caching allocator] in libraries.py), and
NCCL's own options (`pg_options` of ProcessGroupNCCL) and a CUDA `device_id` (eager NCCL initialisation) are
dropped. The other choice, an error naming the call, would make every torchrun program untestable without a
GPU, for a difference in buffers the docs already list as not modelled.
"""

import torch

from .unsupported import unsupported

WHO = "device.parallel"
NCCL_DIVERGENCE = ("NCCL ran as gloo: the collectives are the same, their tensors are host memory; NCCL's own "
                   "buffers are not booked")


def host_backend(backend):
    """(the backend to give torch, whether NCCL was asked for): "nccl" and "cuda:nccl" entries become gloo."""
    if backend is None:
        return "gloo", True  # torch's default for CUDA tensors is NCCL
    text = str(backend)
    if ":" not in text:
        return ("gloo", True) if text.lower() in ("nccl", "undefined") else (backend, False)
    entries, nccl = [], False
    for entry in text.split(","):
        device, _, name = entry.partition(":")
        if name.strip().lower() == "nccl":
            name, nccl = "gloo", True
        entries.append("%s:%s" % (device.strip(), name.strip()))
    return ",".join(entries), nccl


class Parallel:
    def __init__(self, device):
        self.device = device

    def install(self, torch_, patches):
        patches.replace(WHO, "torch.nn.parallel.scatter_gather", "Scatter", self._scatter)
        for owner in ("torch.distributed", "torch.distributed.distributed_c10d"):
            patches.replace(WHO, owner, "init_process_group", self._init_process_group)
            patches.replace(WHO, owner, "new_group", self._new_group)

    # ---- Note [nn.DataParallel on the virtual device]
    def _scatter(self, original):
        tensors = self.device.parts["tensors"]

        def apply(target_gpus, chunk_sizes, dim, input):
            if len(target_gpus) != 1:
                raise unsupported("nn.DataParallel over %d devices (device_ids=%s)" % (len(target_gpus), list(target_gpus)),
                                  "the virtual CUDA device is one device; pass device_ids=[0] or use one device")
            return (tensors.to_device(input),)
        return type("Scatter", (), {"apply": staticmethod(apply), "__module__": __name__,
                                    "__doc__": "Note [nn.DataParallel on the virtual device]"})

    # ---- Note [NCCL on the virtual device]
    def _on_host(self, backend, kwargs):
        backend, nccl = host_backend(backend)
        if nccl:
            self.device.diverged("nccl", NCCL_DIVERGENCE)
            options = kwargs.get("pg_options")
            if options is not None and "NCCL" in type(options).__qualname__:
                kwargs.pop("pg_options")
            device_id = kwargs.get("device_id")
            if device_id is not None and (isinstance(device_id, int) or getattr(device_id, "type", "") == "cuda"):
                kwargs.pop("device_id")
        return backend, kwargs

    def _init_process_group(self, original):
        def init_process_group(backend=None, *args, **kwargs):
            backend, kwargs = self._on_host(backend, kwargs)
            return original(backend, *args, **kwargs)
        return init_process_group

    def _new_group(self, original):
        def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
            if backend is not None:
                backend, kwargs = self._on_host(backend, kwargs)
            return original(ranks, timeout, backend, *args, **kwargs)
        return new_group
