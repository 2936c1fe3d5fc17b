"""CUDA's autocast lists for the virtual device's autocast (issue 43).

Note [CUDA's autocast lists on the CPU]
The virtual device runs `torch.autocast("cuda")` as CPU autocast (amp.py), and PyTorch's two autocasts do not
cast the same operations: CUDA's lists (ATen/autocast_mode.h, AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32,
AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE, and norm's fp32_append_dtype) run layer_norm, softmax's
optional dtype, exp, pow and the losses in float32, while the CPU's (autocast_mode.cpp, AutocastCPU) run
cross_entropy_loss whole in float32 and leave layer_norm in bfloat16. Memory follows the lists: measured on an
H200 (PyTorch 2.11, bench/python/op_memory.py), GPT-2 124M under bf16 autocast computed its 50,304-way
log_softmax in bfloat16 (394 MiB) and cast it to float32 for nll_loss (786 MiB more, both kept for backward),
where the CPU's cross_entropy_loss cast the logits first and kept 786 MiB: the prediction was 5.8% low.

So while a virtual device is installed, every operation whose policy differs between the two lists gets a
kernel for the AutocastCPU key that applies CUDA's policy as autocast_mode.h writes it: `lower_precision_fp`
casts its floating (not double) tensors to the autocast type, `fp32` to float32, `fp32_set_opt_dtype` passes
dtype=float32 when the first tensor is floating and no dtype was given, `fp32_append_dtype` (norm) appends it,
`promote` casts to the widest floating type among the arguments, `banned` raises CUDA's error
(binary_cross_entropy), and an operation only the CPU lists runs as it is. The kernels run the operation with
AutocastCPU excluded, as the C++ wrappers do. Only the differing operations are replaced: the ones both lists
give the same policy keep PyTorch's own kernels (and its cache of weights cast once per region). Not done: the
lower-precision casts these Python kernels make are not cached (CUDA caches a leaf float32 weight's cast for
the region): an operation CUDA casts and the CPU does not (einsum, mv, the RNN cells) makes its cast at each
call. A job that uses CPU autocast itself on the virtual device gets CUDA's lists too (Note [Divergences]).
"""

import warnings

import torch

from .mode import argument_tensors

# ATen/autocast_mode.h of PyTorch 2.11 to 2.14 (the same lists): operation (overload) -> policy
_CUDA_LOWER = ("_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
               "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul einsum mm "
               "mv linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell "
               "_thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell "
               "_scaled_dot_product_flash_attention scaled_dot_product_attention")
_CUDA_FP32 = ("acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
              "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm rms_norm group_norm "
              "frobenius_norm.dim nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss "
              "cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss kl_div l1_loss smooth_l1_loss "
              "huber_loss mse_loss margin_ranking_loss multilabel_margin_loss soft_margin_loss triplet_margin_loss "
              "multi_margin_loss binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp "
              "upsample_nearest1d _upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d "
              "upsample_nearest3d _upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d "
              "_upsample_bilinear2d_aa upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa")
_CUDA_SET_OPT_DTYPE = ("prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm "
                       "linalg_matrix_norm linalg_matrix_norm.str_ord sum sum.dim_IntList")
_CUDA_APPEND_DTYPE = "norm.Scalar norm.ScalarOpt_dim"
_CUDA_PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"
_CUDA_BANNED = "binary_cross_entropy"

# ATen/autocast_mode.cpp's AutocastCPU registrations (PyTorch 2.11 to 2.14)
_CPU_LOWER = ("conv1d conv1d.padding conv2d conv2d.padding conv3d conv3d.padding bmm mm linalg_vecdot baddbmm addmm "
              "_addmm_activation addbmm linear _convolution.deprecated matmul conv_tbc mkldnn_rnn_layer "
              "conv_transpose1d conv_transpose2d.input conv_transpose3d.input prelu scaled_dot_product_attention "
              "_native_multi_head_attention")
_CPU_FP32 = ("avg_pool3d binary_cross_entropy grid_sampler polar prod prod.dim_int prod.dim_Dimname quantile "
             "quantile.scalar nanquantile nanquantile.scalar stft stft.center cdist grid_sampler_2d "
             "_grid_sampler_2d_cpu_fallback grid_sampler_3d trace view_as_complex cholesky cholesky_inverse "
             "cholesky_solve inverse lu_solve orgqr ormqr pinverse max_pool3d max_unpool2d max_unpool3d "
             "adaptive_avg_pool3d reflection_pad1d reflection_pad2d replication_pad1d replication_pad2d "
             "replication_pad3d mse_loss cosine_embedding_loss nll_loss nll_loss2d hinge_embedding_loss "
             "poisson_nll_loss smooth_l1_loss cross_entropy_loss l1_loss huber_loss margin_ranking_loss "
             "soft_margin_loss triplet_margin_loss multi_margin_loss ctc_loss.IntList ctc_loss.Tensor kl_div "
             "multilabel_margin_loss binary_cross_entropy_with_logits fft_fft fft_ifft fft_fft2 fft_ifft2 fft_fftn "
             "fft_ifftn fft_rfft fft_irfft fft_rfft2 fft_irfft2 fft_rfftn fft_irfftn fft_hfft fft_ihfft linalg_cond "
             "linalg_cond.p_str linalg_matrix_rank linalg_matrix_rank.tol_tensor linalg_matrix_rank.atol_rtol_tensor "
             "linalg_matrix_rank.atol_rtol_float linalg_solve linalg_cholesky linalg_svdvals linalg_eigvals "
             "linalg_eigvalsh linalg_inv linalg_householder_product linalg_tensorinv linalg_tensorsolve "
             "fake_quantize_per_tensor_affine geqrf _lu_with_info qr svd triangular_solve fractional_max_pool2d "
             "fractional_max_pool3d adaptive_max_pool3d multilabel_margin_loss_forward linalg_qr linalg_cholesky_ex "
             "linalg_svd linalg_eig linalg_eigh linalg_lstsq linalg_inv_ex")
_CPU_PROMOTE = "stack cat index_copy index_copy.dimname"


def _table(*groups):
    out = {}
    for names, policy in groups:
        for name in names.split():
            out[name if "." in name else name + ".default"] = policy
    return out


CUDA = _table((_CUDA_LOWER, "lower_precision_fp"), (_CUDA_FP32, "fp32"), (_CUDA_SET_OPT_DTYPE, "fp32_set_opt_dtype"),
              (_CUDA_APPEND_DTYPE, "fp32_append_dtype"), (_CUDA_PROMOTE, "promote"), (_CUDA_BANNED, "banned"))
CPU = _table((_CPU_LOWER, "lower_precision_fp"), (_CPU_FP32, "fp32"), (_CPU_PROMOTE, "promote"))

_BANNED_MESSAGE = ("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
                   "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
                   "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
                   "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
                   "safe to autocast.")


def differing():
    """{overload name: CUDA's policy, or None where only the CPU lists it}: the operations whose AutocastCPU
    kernel the virtual device replaces."""
    return {name: CUDA.get(name) for name in sorted(set(CUDA) | set(CPU)) if CUDA.get(name) != CPU.get(name)}


def eligible(t):
    """Whether autocast casts t (autocast_mode.h's is_eligible): a floating tensor, not double."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def cast(value, dtype):
    """autocast's cached_cast without the cache: an eligible tensor (or each one of a list or tuple) in dtype."""
    if eligible(value) and value.dtype != dtype:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, dtype) for v in value)
    return value


def _qualified(op):
    overload = op._overloadname
    return op._schema.name + ("" if overload == "default" else "." + overload)


def _kernel(op, policy):
    excluded = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    positions = [i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"]
    dtype_at = positions[0] if positions else None
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(_qualified(op), "CompositeImplicitAutograd")
    with_dtype = None
    if policy == "fp32_append_dtype":  # norm.Scalar -> norm.ScalarOpt_dtype, norm.ScalarOpt_dim -> ..._dim_dtype
        with_dtype = getattr(torch.ops.aten.norm, {"Scalar": "ScalarOpt_dtype",
                                                   "ScalarOpt_dim": "ScalarOpt_dim_dtype"}[op._overloadname])

    def kernel(*args, **kwargs):
        if policy == "banned":
            raise RuntimeError(_BANNED_MESSAGE)
        if policy == "none":
            # Only the CPU lists it: it runs as CUDA's fallthrough runs it. A composite operation decomposes
            # with autocast still on, so that its parts meet their own policies (cross_entropy_loss's
            # log_softmax and nll_loss); a kernel runs below autocast.
            if composite:
                return op.decompose(*args, **kwargs)
            with torch._C._ExcludeDispatchKeyGuard(excluded):
                return op(*args, **kwargs)
        if with_dtype is not None:
            with torch._C._ExcludeDispatchKeyGuard(excluded):
                if args and eligible(args[0]):
                    return with_dtype(*args, **kwargs, dtype=torch.float32)
                return op(*args, **kwargs)
        if policy == "lower_precision_fp":
            dtype = torch.get_autocast_dtype("cpu")
            args, kwargs = cast(args, dtype), {k: cast(v, dtype) for k, v in kwargs.items()}
        elif policy == "fp32":
            args, kwargs = cast(args, torch.float32), {k: cast(v, torch.float32) for k, v in kwargs.items()}
        elif policy == "promote":
            floats = [t.dtype for t in argument_tensors(args, kwargs) if t.is_floating_point()]
            if floats:
                widest = max(floats, key=lambda d: torch.finfo(d).bits)
                args, kwargs = cast(args, widest), {k: cast(v, widest) for k, v in kwargs.items()}
        elif policy == "fp32_set_opt_dtype":
            if args and eligible(args[0]) and dtype_at is not None and kwargs.get("dtype") is None:
                if len(args) > dtype_at:
                    if args[dtype_at] is None:
                        args = args[:dtype_at] + (torch.float32,) + args[dtype_at + 1:]
                else:
                    kwargs = dict(kwargs, dtype=torch.float32)
        with torch._C._ExcludeDispatchKeyGuard(excluded):
            return op(*args, **kwargs)
    return kernel


def install(patches, who):
    """Registers CUDA's policy for every operation whose lists differ (Note [CUDA's autocast lists on the
    CPU]); the registration is recorded in the patch table with its undo."""
    lib = torch.library.Library("aten", "IMPL")
    replaced = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": that is the point
        for name, policy in differing().items():
            packet, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
            if op is None:
                continue  # an operation this PyTorch does not have
            lib.impl(packet if overload == "default" else name, _kernel(op, policy or "none"), "AutocastCPU")
            replaced.append(name)
    patches.registered(who, "CUDA's autocast lists for the CPU's autocast (AutocastCPU kernels)", lib._destroy)
    return replaced
