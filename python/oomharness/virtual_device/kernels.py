"""The kernels a GPU picks where the CPU picks others that hold different memory: attention and dropout
(issue 43; Note [Kernels a GPU runs] in shape_only.py).

Note [Attention as a GPU runs it]
scaled_dot_product_attention is one Python call that PyTorch sends to one of several kernels, and the choice
decides memory: the CPU takes its flash kernel only without dropout and without a mask, and otherwise computes
attention from its parts (the math path), keeping the B x H x L x S probabilities for backward; a GPU (PyTorch's
sdp_utils for CUDA, sm_80 and later) takes FlashAttention for float16/bfloat16 without an arbitrary mask, and
the memory-efficient kernel otherwise (float32, a mask, dropout): neither keeps the probabilities. Under
autocast the arguments take the low-precision type first, as CUDA's autocast casts them. Measured on
an H200 (PyTorch 2.11, bench/python/op_memory.py): the Accelerate loop of the public corpus (a padding mask,
dropout 0.1, float32) ran `_scaled_dot_product_efficient_attention` on the GPU and the math path on the
virtual device, which booked 6-7 MiB of probabilities per layer that the GPU never held (a prediction 14-20%
high).

In shape-only mode with the GPU's kernels (Note [Kernels a GPU runs] in shape_only.py), a call whose query is
on the device takes the GPU's choice through the same ATen operations a GPU runs, whose fake kernels give the
outputs and saved tensors their GPU shapes: `_scaled_dot_product_flash_attention` or
`_scaled_dot_product_efficient_attention`, the mask made as the CUDA path makes it first (a boolean mask becomes
a float one of the query's type, `where`; its last dimension padded to a multiple of 16 for the
memory-efficient kernel, as attention.cu's preprocess_mask does). Calls the GPU would also send to the math
path (enable_gqa, a head dimension FlashAttention and the memory-efficient kernel refuse, nested tensors) keep
the CPU's own path. What the kernels hold while they run (the memory-efficient backward's float32 accumulators)
is not booked.
"""

import math

import torch

from . import autocast_policy

_FLASH_DTYPES = (torch.float16, torch.bfloat16)


def gpu_attention(dev, original):
    """The replacement of torch.nn.functional.scaled_dot_product_attention in shape-only mode with the GPU's
    kernels: Note [Attention as a GPU runs it]."""
    aten = torch.ops.aten

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        if torch.is_autocast_enabled("cpu"):
            # CUDA's autocast lists scaled_dot_product_attention as lower_precision_fp (Note [CUDA's autocast
            # lists on the CPU]): its floating arguments take the autocast type before the kernel is chosen
            # (Llama-style code computes RoPE in float32 and hands float32 queries to it).
            query, key, value, attn_mask = autocast_policy.cast((query, key, value, attn_mask),
                                                                torch.get_autocast_dtype("cpu"))
        head = query.shape[-1] if isinstance(query, torch.Tensor) else 0
        usable = (isinstance(query, torch.Tensor) and not enable_gqa and not query.is_nested and query.dim() == 4
                  and dev.on_device(query) and query.dtype in _FLASH_DTYPES + (torch.float32,)
                  and not (attn_mask is not None and is_causal))
        # sdp_utils' head-dimension checks: FlashAttention a multiple of 8 up to 256, the memory-efficient
        # kernel 16-byte aligned rows (a multiple of 4 in float32, of 8 in 16 bits); else the math path.
        flash = usable and attn_mask is None and query.dtype in _FLASH_DTYPES and head <= 256 and head % 8 == 0
        efficient = usable and head % (16 // query.element_size()) == 0
        if not (flash or efficient):
            return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        if flash:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
                                                            scale=scale)[0]
        bias = attn_mask
        if bias is not None:
            if bias.dtype == torch.bool:
                bias = torch.where(bias.logical_not(), torch.tensor(-math.inf, dtype=query.dtype,
                                                                     device=bias.device),
                                   torch.tensor(0.0, dtype=query.dtype, device=bias.device))
            last = bias.shape[-1]
            if last % 16:
                bias = torch.nn.functional.pad(bias, (0, 16 - last % 16))[..., :last]
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(query, key, value, bias, needs_lse, dropout_p,
                                                            is_causal, scale=scale)[0]
    return scaled_dot_product_attention


# Note [Dropout as a GPU runs it]
# aten::dropout runs the fused native_dropout on a CUDA tensor (Dropout.cpp, is_fused_kernel_acceptable), which
# keeps a boolean mask of 1 byte per element for backward; on the CPU it multiplies by a noise tensor of the
# input's type (4 bytes per element in float32) and keeps that. Measured on an H200 (PyTorch 2.11,
# bench/python/op_memory.py): the Accelerate loop's 10 dropouts ran native_dropout on the GPU and empty_like +
# mul on the virtual device. In shape-only mode with the GPU's kernels, F.dropout of a device tensor in training
# runs native_dropout, whose fake kernel gives the output and the mask their GPU types.


def gpu_dropout(dev, original):
    """The replacement of torch.nn.functional.dropout in shape-only mode with the GPU's kernels: Note [Dropout
    as a GPU runs it]."""
    def dropout(input, p=0.5, training=True, inplace=False):
        if (not training or inplace or not 0.0 < p < 1.0 or not isinstance(input, torch.Tensor)
                or input.numel() == 0 or not dev.on_device(input)):
            return original(input, p, training, inplace)
        return torch.native_dropout(input, p, True)[0]
    return dropout
