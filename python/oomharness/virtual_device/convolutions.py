"""What a GPU's convolution asks for beside its outputs (issue 43): cuDNN's workspace, from measurements.

Note [cuDNN's convolutions as a GPU runs them]
A convolution on a GPU runs in cuDNN. The algorithm cuDNN's heuristics pick (PyTorch's default,
torch.backends.cudnn.benchmark False) asks PyTorch's allocator for a workspace once the call's outputs exist,
and the call gives it back as it ends; in a backward, the input's gradient and then the weight's, each with
its own. Which algorithm the heuristics pick, and so the workspace, cannot be asked of cuDNN without a GPU, and
follows no simple rule: measured on an H200 (tests/gpu/conv_workspace.py, PyTorch 2.11, cuDNN 9.19), an NCHW
forward asks for nothing (1x1, stride 1), for its input and output converted to NHWC (1x1 strided), or for
input, output and weight (most others), but also for input and weight alone (a 3x3 on 64 channels); the
backward for the input's gradient asks input + output + weight or nothing, the weight's gradient that and
partial sums (14 float32 copies of a ResNet-18 3x3 weight at batch 32, 3 at 256 channels); channels_last calls
mostly ask for nothing; depthwise ones nothing. The sizes matter beyond their share of the peak: they decide
which cached blocks later tensors take. ResNet-18 at batch 32 was predicted 22% under the GPU's
max_memory_reserved without them, 25% under with input + output + weight for every NCHW call (more cached
blocks fitted later tensors), and 5% under with the sizes measured for each of its own convolutions.

So the workspace of a call is taken from the measurements of other convolutions (cudnn_conv_table.py: 3,376
calls on an H200: a random grid at batches 1 to 512 in float32, bfloat16 and float16, NCHW and channels_last,
depthwise ones, and a lattice of common shapes, channels 24-768, sizes 10-160; ResNet's own shapes are left
out of it, and check it): among the calls of the same class (dtype, layout, depthwise or not, 1x1 or not,
strided or not), the 5 nearest in log2 of batch, channels in and out and height; the forward takes the median
of their workspace's ratio to input + output + weight, scaled to this call's; the backward (the larger of its
two workspaces, since the second reuses the first's block) takes this call's input + output + weight plus the
median of what the neighbours asked beyond theirs, where they asked at least half of it, and their ratio where
they asked less. Held out (bench/RESULTS.md, "cuDNN's convolution workspaces"): of ResNet-18's and ResNet-50's
261 measured calls, 84% of the forwards' and 74% of the backwards' workspaces within 10% or 2 MiB; whole
programs against the GPU's max_memory_reserved, ResNet-18 -7.0%, ResNet-50 -3.6%, ResNet-18 in DataParallel
-1.5% (without the workspaces: -22.1%, -0.3%, -15.1%), bench/python/cnn_train.py at batches 32, 128 and 512
-16.4%, -9.9%, -23.0% (without: -16.1%, -29.7%, -32.4%). Each call's own measured workspace would give
-5.1%, -2.1%, and +1.2%, -2.1%, -20.8%: a few calls off move which cached blocks later tensors take, and the
512 batch's gap is not the workspaces (its allocated peak is the GPU's to 0.1%). A call outside the table's
classes (float64, transposed, 3-d) books nothing; a grouped convolution is taken for a depthwise one. The
table is one GPU's and one cuDNN's: another GPU's heuristics pick other algorithms, and the `convolution`
divergence says so. In shape-only mode with the GPU's kernels only (Note [Kernels a GPU runs] in
shape_only.py): the full virtual device runs the CPU's convolutions.
"""

import math

import torch

NEIGHBOURS = 5
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _class_of(dtype, channels_last, depthwise, kernel, stride):
    return dtype, bool(channels_last), bool(depthwise), kernel == 1, stride > 1


def _features(batch, c, k, h):
    return math.log2(batch), math.log2(c), math.log2(k), math.log2(h)


def _index():
    """class -> [(features, input + output + weight bytes, forward workspace, backward workspace)]. The table is
    read at the first convolution of a shape-only run with the GPU's kernels, not at every device's start (it
    takes 70 ms to import without bytecode)."""
    from .cudnn_conv_table import ROWS
    index = {}
    for dtype, cl, groups, batch, c, k, h, w, kernel, stride, oh, ow, forward, backward in ROWS:
        element = 4 if dtype == "float32" else 2
        size = (batch * c * h * w + batch * k * oh * ow + k * (c // groups) * kernel * kernel) * element
        key = _class_of(dtype, cl, groups > 1, kernel, stride)
        index.setdefault(key, []).append((_features(batch, c, k, h), size, forward, backward))
    return index


_INDEX = None
_CACHE = {}


def workspace(backward, x, weight, out, stride, groups):
    """The bytes one call asks for: its forward (`out` its output) or its backward (`out` the output's
    gradient). None where the table has no call of its class."""
    global _INDEX
    dtype = _DTYPES.get(x.dtype)
    if dtype is None or x.dim() != 4 or weight.dim() != 4 or out.dim() != 4:
        return None
    cl = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    batch, c, h = x.shape[0], x.shape[1], x.shape[2]
    k, kernel = weight.shape[0], weight.shape[2]
    step = stride[0] if isinstance(stride, (list, tuple)) else stride
    key = (backward, dtype, cl, groups, batch, c, k, h, x.shape[3], kernel, step, tuple(out.shape))
    if key in _CACHE:
        return _CACHE[key]
    if _INDEX is None:
        _INDEX = _index()
    rows = _INDEX.get(_class_of(dtype, cl, groups > 1, kernel, step))
    size = (x.numel() + out.numel() + weight.numel()) * x.element_size()
    result = None
    if rows and min(batch, c, k, h) > 0:
        here = _features(batch, c, k, h)
        near = sorted(rows, key=lambda r: sum((a - b) ** 2 for a, b in zip(r[0], here)))[:NEIGHBOURS]
        values = []
        for _, theirs, forward, back in near:
            asked = back if backward else forward
            if backward and asked >= theirs / 2:
                values.append(size + asked - theirs)
            else:
                values.append(asked / theirs * size)
        values.sort()
        result = int(values[len(values) // 2])
    _CACHE[key] = result
    return result


def book_workspace(dev, out, args):
    """The watcher's part for convolution and convolution_backward (mode.py), in shape-only mode with the GPU's
    kernels: the workspace is booked and given back once the call's outputs exist."""
    try:
        if isinstance(out, tuple):  # convolution_backward(grad_output, input, weight, bias_sizes, stride,
            # padding, dilation, transposed, output_padding, groups, output_mask)
            grad_out, x, weight, _, stride, _, _, transposed, _, groups, mask = args[:11]
            if transposed or not (mask[0] or mask[1]):
                return
            size = workspace(True, x, weight, grad_out, stride, groups)
        else:  # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
            x, weight, _, stride, _, _, transposed, _, groups = args[:9]
            if transposed or not isinstance(out, torch.Tensor):
                return
            size = workspace(False, x, weight, out, stride, groups)
    except (ValueError, TypeError, IndexError, AttributeError):
        return
    if size and dev.on_device(x):
        model = dev.model
        model.free(model.malloc(size))


def divergence():
    """The `convolution` divergence's sentence in shape-only mode with the GPU's kernels."""
    from .cudnn_conv_table import MEASURED_ON
    return ("convolutions ran on the CPU: cuDNN's handle is allocated as on a GPU, and each call's workspace is "
            "taken from the nearest of the convolutions measured on %s; another GPU's cuDNN may pick other "
            "algorithms" % MEASURED_ON)
