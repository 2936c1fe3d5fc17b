"""The virtual device's mixed-precision part: CUDA autocast runs as CPU bfloat16 autocast with CUDA's cast lists
(Note [CUDA's autocast lists on the CPU] in autocast_policy.py), and a GradScaler is disabled (Note
[Divergences] in device.py). CUDA autocast to float32 (`torch.autocast("cuda",
dtype=torch.float32)`, which code uses to turn a region back to full precision inside a float16 one, and
which a GPU runs with float32 activations) runs as CPU autocast to float32: the CPU's autocast refuses float32
in its constructor ("the target dtype is not supported. Disabling autocast."), yet runs it once set, casting
the region's matmuls and convolutions to float32 as CUDA's does, so the device sets it after the check."""

import torch

from . import autocast_policy

WHO = "device.amp"


class Amp:
    def __init__(self, device):
        self.device = device

    def install(self, torch_, patches):
        dev = self.device

        def autocast_init(original):
            def init(autocast, device_type, dtype=None, enabled=True, cache_enabled=None):
                if device_type == "cuda" and dtype == torch.float32:
                    original(autocast, "cpu", dtype=torch.bfloat16, enabled=enabled, cache_enabled=cache_enabled)
                    autocast.fast_dtype = torch.float32
                    return
                if device_type == "cuda":
                    if enabled and dtype != torch.bfloat16:
                        dev.diverged("autocast", "CUDA autocast to %s ran as CPU autocast to bfloat16: activations "
                                     "take the same 2 bytes, the numerics differ" % (
                                         str(dtype or torch.float16).replace("torch.", "")))
                    device_type, dtype = "cpu", torch.bfloat16
                original(autocast, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
            return init

        def scaler_init(original):
            def init(scaler, *args, **kwargs):
                original(scaler, *args, **kwargs)
                if getattr(scaler, "_enabled", False):
                    scaler._enabled = False
                    dev.diverged("grad_scaler", "GradScaler was disabled: under bfloat16 autocast no loss "
                                 "scaling is needed, so its inf checks and skipped steps do not happen")
            return init

        patches.replace(WHO, "torch.amp.autocast_mode.autocast", "__init__", autocast_init)
        autocast_policy.install(patches, WHO)
        patches.replace(WHO, "torch.amp.grad_scaler.GradScaler", "__init__", scaler_init)
        # torch.cuda.amp.GradScaler is a subclass of torch.amp's on PyTorch 2.3+ (its __init__ calls the
        # base's): wrapped only where it is a class of its own.
        cuda_scaler = getattr(getattr(torch.cuda, "amp", None), "GradScaler", None)
        base = getattr(getattr(getattr(torch, "amp", None), "grad_scaler", None), "GradScaler", None)
        if cuda_scaler is not None and not (base is not None and issubclass(cuda_scaler, base)):
            patches.replace(WHO, "torch.cuda.amp.GradScaler", "__init__", scaler_init)
