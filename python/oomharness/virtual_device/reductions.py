"""The scratch a GPU's reduction kernel asks for (issue 43).

Note [A reduction's scratch on a GPU]
PyTorch's CUDA reductions (sum, mean, amax, amin: aten/src/ATen/native/cuda/Reduce.cuh, gpu_reduce_kernel) split
a long reduction across thread blocks when there are few outputs and many inputs each, and then stage every
block's partial results in a buffer from the caching allocator (`config.global_memory_size()`), freed when
the kernel returns. When the reduced dimension is not the fastest-moving one (a Linear layer's bias gradient,
`grad.sum(0)` over batch x sequence rows, and autograd's reduce of a broadcast input's gradient), that buffer
is num_outputs x ctas_per_output x 32 x 4 accumulators, which is larger than the input itself: measured on an
H200 (PyTorch 2.11, bench/python/op_memory.py), the bias gradients of a 384-wide GPT at 64 x 256 tokens asked
for 48 MiB (the 384-wide rows) and 132 MiB (the 1536-wide ones) beyond their outputs, which raised the
backward's peak and made the allocator reserve two more segments of 132 and 134 MiB. A prediction without them
was 7.4% low for that trainer.

`scratch_bytes` is setReduceConfig's arithmetic (PyTorch 2.11 to 2.14: the same code) for the TensorIterator a
reduction builds: reduced dimensions first, each group in the input's stride order, size-1 dimensions
dropped and adjacent ones coalesced; the GPU is the H100/H200 the device describes (132 multiprocessors of
2,048 threads; Note [The device's properties] in runtime.py says sm_90). Inputs larger than 32-bit indexing
allows are split by PyTorch into several kernels: not modelled (the figure is then that of one whole kernel).
Shape-only mode books the buffer when it predicts with the GPU's kernels (Note [Kernels a GPU runs]).
"""

MULTIPROCESSORS = 132
THREADS_PER_MULTIPROCESSOR = 2048
MAX_THREADS = 512
WARP = 32
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256
SEMAPHORE_BYTES = 4


def _last_pow2(n):
    return 1 << (max(int(n), 1).bit_length() - 1)


def _div_up(a, b):
    return -(-a // b)


def _geometry(sizes, strides, reduced):
    """The TensorIterator's dimensions for a reduction of a tensor of these sizes and strides (in elements)
    over the dimensions `reduced`: [(size, stride, is_reduced)], reduced dimensions first, fastest first."""
    dims = [(s, st, i in reduced) for i, (s, st) in enumerate(zip(sizes, strides)) if s != 1]
    dims.sort(key=lambda d: (not d[2], d[1]))
    out = []
    for d in dims:
        if out and out[-1][2] == d[2] and d[1] == out[-1][1] * out[-1][0]:
            out[-1] = (out[-1][0] * d[0], out[-1][1], d[2])
        else:
            out.append(d)
    return out


def scratch_bytes(sizes, strides, reduced, element_size, accumulator_size, storage_offset=0):
    """(buffer, semaphores): the bytes gpu_reduce_kernel asks the caching allocator for beyond the output, for an
    input of these sizes and strides (in elements); (0, 0) when it reduces within its thread blocks."""
    numel = 1
    for s in sizes:
        numel *= s
    if numel == 0:
        return 0, 0
    dims = _geometry(sizes, strides, set(reduced))
    n_reduce = sum(1 for d in dims if d[2])
    num_outputs = 1
    for d in dims:
        if not d[2]:
            num_outputs *= d[0]
    inputs_per_output = numel // num_outputs
    if dims:
        on_fastest = n_reduce == len(dims) or dims[0][1] < dims[n_reduce][1]
        if on_fastest:
            dim0, dim1, fastest = inputs_per_output, num_outputs, dims[0][1]
        else:
            dim0, dim1, fastest = num_outputs, inputs_per_output, dims[n_reduce][1]
    else:
        on_fastest, dim0, dim1, fastest = True, 1, 1, 1
    output_vec = 1
    if fastest == 1:
        if on_fastest and dim0 >= 128 and n_reduce == 1:  # "vectorize along input"
            dim0 //= 8 if element_size == 2 else 4
        elif not on_fastest:  # "vectorize along output": the data's own alignment is taken as 16 bytes
            output_vec = 4
            for n in [storage_offset, dims[n_reduce][0]] + [d[1] for i, d in enumerate(dims) if i != n_reduce]:
                while n % output_vec:
                    output_vec //= 2
            dim0 //= output_vec
    max_threads = MAX_THREADS // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    block_width = min(dim0_pow2, WARP)
    block_height = min(dim1_pow2, max_threads // block_width)
    block_width = min(dim0_pow2, max_threads // block_height)
    num_threads = block_width * block_height
    step_input, step_output = 1, 1
    block_x_reduce = on_fastest
    if on_fastest:
        step_input *= block_width
    else:
        step_output *= block_width
    values_per_thread = _div_up(inputs_per_output, step_input)
    split_across_warps = values_per_thread >= min(block_height * 16, MAX_VALUES_PER_THREAD)
    if split_across_warps:
        step_input *= block_height
    else:
        step_output *= block_height
    values_per_thread = _div_up(inputs_per_output, step_input)
    target_grid = MULTIPROCESSORS * (THREADS_PER_MULTIPROCESSOR // num_threads)
    grid = _div_up(num_outputs // output_vec, step_output)
    if not (split_across_warps and values_per_thread >= MAX_VALUES_PER_THREAD and grid <= target_grid):
        return 0, 0
    ctas = min(max(_div_up(target_grid, grid), _div_up(values_per_thread, MAX_VALUES_PER_THREAD)),
               _div_up(values_per_thread, MIN_VALUES_PER_THREAD))
    if ctas <= 1:
        return 0, 0
    size = accumulator_size * num_outputs * ctas
    if not block_x_reduce:
        size *= block_width * output_vec
    return size, SEMAPHORE_BYTES * grid



def _scratch_watcher(widens):
    """The watcher of one kind of reduction (mode.py's table): `widens` for sum and mean, which accumulate a
    half-precision input in float32 and an integer one in int64; amax and amin keep the input's type."""
    def book_scratch(dev, out, args):
        # Note [A reduction's scratch on a GPU]: in shape-only mode with the GPU's kernels, booked and given
        # back around the operation, as the kernel's DataPtrs are.
        if getattr(dev, "kernels", None) != "gpu" or not args or not hasattr(args[0], "stride"):
            return
        x = args[0]
        if x.is_complex() or x.dim() == 0:
            return
        dim = args[1] if len(args) > 1 else None
        if dim is None or isinstance(dim, (list, tuple)) and not dim or not isinstance(dim, (int, list, tuple)):
            reduced = range(x.dim())  # sum(x), sum(x, dtype), amax(x, []): every dimension
        else:
            reduced = [d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)]
        element = x.element_size()
        accumulator = element
        if widens:
            accumulator = max(element, 4) if x.dtype.is_floating_point else 8
        buffer, semaphores = scratch_bytes(tuple(x.shape), x.stride(), reduced, element, accumulator,
                                           x.storage_offset())
        if buffer:
            model = dev.model
            block = model.malloc(buffer)
            sem = model.malloc(semaphores)
            model.free(sem)  # the kernel's DataPtrs go in reverse order of their making
            model.free(block)
    return book_scratch


WATCHERS = {"sum": _scratch_watcher(True), "mean": _scratch_watcher(True), "amax": _scratch_watcher(False),
            "amin": _scratch_watcher(False)}
