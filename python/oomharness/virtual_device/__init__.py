"""The virtual CUDA device: a user's unchanged PyTorch code runs on the CPU while every "GPU" tensor is booked
in a model of PyTorch's caching allocator, whose segments the shim sees (issue 13; docs/design/virtual-device.md
has the feasibility study's facts). A package of parts, each small enough to read at once:

  device.py      which storages are on the device, their blocks, its thread, its divergences
  allocator.py   the caching-allocator model and where its segments come from (the driver, or a budget)
  mode.py        the dispatch mode that sees every operation and books what it makes
  tensors.py     .cuda(), .to(), .cpu(), factories, the default device, pins
  runtime.py     torch.cuda's answers: memory figures, empty_cache, streams, events, graphs, NVTX
  libraries.py   what cuBLAS and cuDNN hold beside the tensors
  convolutions.py  cuDNN's convolution workspaces in shape-only mode, from cudnn_conv_table.py's measurements
  amp.py         autocast and GradScaler
  loading.py     torch.load with map_location="cuda", safetensors with device="cuda"
  parallel.py    nn.DataParallel on one device, NCCL asked for (gloo stands in)
  unsupported.py what it cannot run: one sentence naming the call and the user's line
  pinned.py      pinned host memory behind PyTorch's cache
  shape_only.py  tensors with shapes and no data, for `oomharness predict`; fake_state.py their checkpoints
                 and the values read back from them, safetensors_files.py their safetensors files

Everything the parts replace is a row of the patch table (Note [The patch table] in _patches.py).
"""

from .. import _job
from .allocator import CachingAllocatorModel
from .segments import BudgetSegments, DriverSegments
from .device import DESCRIPTION, VirtualDevice, oom_error
from .libraries import LIBRARY_ERRORS, LIBRARY_HANDLE_BYTES, LIBRARY_THROUGH_SHIM, cublas_workspace_bytes


def _device_class(ctx, shape_only):
    if shape_only:
        from .shape_only import ShapeOnlyDevice  # imports torch's FakeTensorMode: only for predict
        return ShapeOnlyDevice
    return VirtualDevice


def install_for_job(ctx=None):
    """The virtual device of a job the runner started with OOMH_DEVICE=virtual: its segments come from the CPU
    driver double (on LD_LIBRARY_PATH) through the shim (LD_PRELOAD), so the job's faults, caps, events and
    armed record are the shim's own; with OOMH_SHAPE_ONLY=1, in shape-only mode (Note [Shape-only mode] in
    shape_only.py). Once per process."""
    ctx = ctx or _job.current()
    if ctx.device is None:
        make = _device_class(ctx, ctx.settings.shape_only)
        segments = DriverSegments(record_sites=bool(ctx.settings.record_step), where=ctx.clock.where)
        make(ctx, CachingAllocatorModel(segments, oom_error=oom_error)).install()
    return ctx.device


def install_with_budget(total_bytes, shape_only=False, ctx=None):
    """A virtual device whose segments come from a plain byte budget (tests, and machines without the driver
    double)."""
    ctx = ctx or _job.current()
    make = _device_class(ctx, shape_only)
    return make(ctx, CachingAllocatorModel(BudgetSegments(total_bytes), oom_error=oom_error)).install()


__all__ = ["VirtualDevice", "install_for_job", "install_with_budget", "cublas_workspace_bytes", "oom_error",
           "DESCRIPTION", "LIBRARY_ERRORS", "LIBRARY_HANDLE_BYTES", "LIBRARY_THROUGH_SHIM", "CachingAllocatorModel",
           "BudgetSegments", "DriverSegments"]
