"""The virtual device's dispatch mode: sees every ATen operation of the thread that installed the device,
books the storages an operation makes from device inputs (Note [Which tensors are on the virtual device] in
device.py), and hands the operations a GPU runs differently to their watchers: BLAS calls and convolutions to
the libraries part, attention's probabilities and `.item()` to the device."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

from . import convolutions
from .libraries import BLAS_OPS
from .reductions import WATCHERS as REDUCTION_WATCHERS


class DeviceMode(TorchDispatchMode):
    # Note [Higher-order operators on the virtual device]
    # A higher-order operator (flex_attention, which torchtitan's llama3 uses; cond, invoke_subgraph, ...)
    # reaches a dispatch mode whole, and torch refuses it ("There was no rule registered for
    # HigherOrderOperator ...") unless the mode says it takes them. The device takes them: the operator runs as
    # torch runs it eagerly (flex_attention's dense implementation on the CPU), with the mode off inside it, and
    # its outputs are booked as any operation's are. What it holds while it runs is not seen, as a fused
    # kernel's would not be on a GPU.
    supports_higher_order_operators = True

    def __init__(self, device):
        super().__init__()
        self.device = device

    # Runs at every ATen operation: kept to what the booking needs (its cost is measured against a bare
    # dispatch mode's by bench/python/virtual_device_cost.py).
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        dev = self.device
        if seeded(func) and _on_device(dev, args, kwargs):
            # Note [The CUDA generator's state] in runtime.py: the device's own random numbers.
            out = dev.rng.draw(lambda: func(*args, **kwargs) if kwargs else func(*args))
        else:
            out = func(*args, **kwargs) if kwargs else func(*args)
        if dev.copying_to_host():
            return out
        key = dev._key
        in_keys = []
        from_device = dev.creating()
        for a in argument_tensors(args, kwargs):
            k = key(a)
            in_keys.append(k)
            if not from_device and k is not None and dev._live(k):
                from_device = True
        if not from_device:
            return out
        outs = (out,) if isinstance(out, torch.Tensor) else argument_tensors(
            out if isinstance(out, (list, tuple)) else (), None)
        host = _HOST_OUTPUTS.get(func)
        if host is None:
            host = _HOST_OUTPUTS[func] = _HOST_OUTPUTS_BY_NAME.get(_op_name(func), ())
        order = _BOOKING_ORDER.get(func)
        if order is None:
            order = _BOOKING_ORDER[func] = _BOOKING_ORDER_BY_NAME.get(_op_name(func), False)
        indexed = [(i, outs[i]) for i in order if i < len(outs)] if order else enumerate(outs)
        swept = False
        for i, t in indexed:
            if i in host:
                continue
            k = key(t)
            if k is None or k in in_keys or dev._live(k):
                continue  # a view, an in-place result, or a storage already on the device
            if not swept:  # tensors that died since: their blocks go back to the cache first, as on a GPU
                dev.sweep(young_only=True)
                swept = True
            dev.book(t)
        # After the outputs: a library asks for its handle when the operation runs, its result already allocated.
        watch = _WATCHED.get(func)
        if watch is None:
            watch = _WATCHED[func] = _WATCHED_BY_NAME.get(_op_name(func), False)
        if watch:
            watch(dev, out, args)
        return out


_SEEDED = {}  # func -> whether torch tags it nondeterministic_seeded (a random operation)


def seeded(func):
    """Whether an ATen operation draws random numbers (torch tags it nondeterministic_seeded)."""
    answer = _SEEDED.get(func)
    if answer is None:
        answer = _SEEDED[func] = torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())
    return answer


def _op_name(func):
    """An ATen operation's name (its overload packet's); a higher-order operator's own."""
    packet = getattr(func, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(func, "_name", "")


def _on_device(dev, args, kwargs):
    """Whether an operation works on the device: it makes the device's tensors, or reads one. A tensor subclass
    that wraps others reaches the mode whole, and the operations on what it wraps run inside its own dispatch,
    which the mode does not see: a DTensor is on the device when its mesh is CUDA's (its local shard, made
    inside that dispatch by empty_like, is a host tensor nobody booked), another subclass when a tensor it
    wraps is on the device."""
    if dev.creating():
        return True
    if dev.copying_to_host():
        return False
    for a in argument_tensors(args, kwargs):
        if type(a) is not torch.Tensor and is_traceable_wrapper_subclass(a):
            mesh = getattr(a, "device_mesh", None)
            if getattr(mesh, "device_type", None) == "cuda":
                return True
            try:
                inner = [getattr(a, name, None) for name in a.__tensor_flatten__()[0]]
            except Exception:  # noqa: BLE001 - a subclass that cannot say what it wraps is not the device's
                continue
            if _on_device(dev, inner, None):
                return True
            continue
        k = dev._key(a)
        if k is not None and dev._live(k):
            return True
    return False


def argument_tensors(args, kwargs):
    """The tensors among an operation's arguments (and one level into lists: cat, stack, foreach ops)."""
    found = []
    for group in (args, kwargs.values() if kwargs else ()):
        for a in group:
            if isinstance(a, torch.Tensor):
                found.append(a)
            elif isinstance(a, (list, tuple)):
                found.extend(b for b in a if isinstance(b, torch.Tensor))
    return found


def _softmax(dev, out, args):
    # Attention computed from its parts on the CPU (PyTorch 1.x's nn.MultiheadAttention, hand-written
    # attention, and PyTorch 2.x's math fallback, whose parts the mode sees) keeps the B*H*S^2 probabilities,
    # which fused attention on a GPU does not (the study: 128 of 388 MiB per sample of the fidelity model;
    # examples/python/train.py's transformer peaked 1.42x higher than on an H100 with PyTorch 2.11).
    if isinstance(out, torch.Tensor) and out.dim() >= 3 and out.shape[-1] == out.shape[-2] >= 64:
        dev.diverged("attention", "attention kept its %s probabilities, which a GPU's fused attention does not "
                     "keep: peaks are higher and the largest batch lower than on a GPU that fuses it"
                     % "x".join(str(d) for d in out.shape))


def _scalar_read(dev, out, args):
    # `.item()` of a device tensor: PyTorch 2.x copies the value through a pinned host block (measured on an
    # H200: a 4-byte cuMemHostAlloc at a loop's first float32 loss.item(); Note [The pinned host cache]).
    if dev.pinned_host is not None and args and isinstance(args[0], torch.Tensor):
        dev.pinned_host.scratch(args[0].element_size())


def _convolution(dev, out, args):
    dev.libraries.conv_call()
    if getattr(dev, "kernels", None) == "gpu":  # Note [cuDNN's convolutions as a GPU runs them]
        convolutions.book_workspace(dev, out, args)
        if "convolution" not in dev.divergences:
            dev.diverged("convolution", convolutions.divergence())
        return
    dev.diverged("convolution", "convolutions ran on the CPU: cuDNN's handle is allocated as on a GPU, its "
                 "workspaces and algorithm choice are not modelled")


_WATCHED_BY_NAME = {name: (lambda dev, out, args: dev.libraries.blas_call()) for name in BLAS_OPS}
# Note [cuBLASLt's workspace] in libraries.py: a bias's addmm goes through cuBLASLt.
_WATCHED_BY_NAME["addmm"] = lambda dev, out, args: dev.libraries.blas_call(
    lt=bool(args) and isinstance(args[0], torch.Tensor) and args[0].dim() == 1)
_WATCHED_BY_NAME["_addmm_activation"] = lambda dev, out, args: dev.libraries.blas_call(lt=True)
_WATCHED_BY_NAME.update({"_softmax": _softmax, "softmax": _softmax, "convolution": _convolution,
                         "_local_scalar_dense": _scalar_read,
                         "convolution_backward": _convolution})
_WATCHED_BY_NAME.update(REDUCTION_WATCHERS)  # Note [A reduction's scratch on a GPU]
_WATCHED = {}  # operation -> its watcher, or False: looked up by name once per operation

# Outputs a GPU makes in host memory from device inputs (by position): a packed sequence's batch_sizes and a
# padded one's lengths stay on the CPU (PackedSequence refuses batch_sizes that say another device).
_HOST_OUTPUTS_BY_NAME = {"_pack_padded_sequence": (1,), "_pad_packed_sequence": (1,)}
_HOST_OUTPUTS = {}

# Note [The order a kernel allocates its outputs in]
# Which cached block each output takes depends on the order the outputs are allocated in (best fit takes the
# smallest block that fits, and splits it), and a CUDA kernel's order is not always its return order: dropout's
# (aten/src/ATen/native/cuda/Dropout.cu) makes the boolean mask before the output. Measured on an H200
# (bench/python/virtual_segments.py against tests/gpu/anatomy_of.sh, examples/python/train.py's MLP at batch
# 16384): the GPU put the 64 MiB mask into a freed 256 MiB block and reserved a new 256 MiB segment for the
# output, where output-then-mask took the free block whole and reserved 64 MiB: 192 MiB less at the peak.
# Outputs are booked in these orders (indices into the returned tuple); the others in return order.
_BOOKING_ORDER_BY_NAME = {"native_dropout": (1, 0)}
_BOOKING_ORDER = {}
