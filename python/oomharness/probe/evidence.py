"""What a step trained on and what a checkpoint holds, told by content (docs/design/DESIGN.md, "Evidence"; issue 26).

Note [A step is its data]
Counting optimizer steps cannot tell a retried step from the next one: code that empties the cache and
goes on with the next batch completes "step 5" on batch 6. So the probe fingerprints the inputs of each
training forward (the top-level module's tensor arguments) and reports, with each step and each OOM, the
data trained on since the last step: `samples` (the batch dimension's sizes added up) and `digest`, the sum
modulo 2**64 of one 64-bit hash per sample. A sample's hash mixes its dtype, its shape without the batch
dimension and its values (Note [A sample is all its values]), over every tensor of the forward's inputs that
has the batch dimension (token ids, attention mask, labels: Note [What a batch comes in]). A sum of per-sample hashes does not depend
on the order of the samples or on how a batch was cut: a failed batch of 32 redone as two halves of 16 adds
up to the failed batch's digest, and any other 32 samples almost surely do not (a policy compares digests,
never recomputes them). Two samples equal in every hashed value look the same.

Note [A sample is all its values]
A fingerprint of a few values per sample (16, strided over it, until issue 42) made every padded token batch
look the same: BERT-style inputs are [CLS], a few tokens, [SEP] and padding to a fixed length, so the sampled
values were [CLS] and padding in every sample, and a retry that went on with the next batch passed as "the same
data". So a sample's hash covers every one of its values, read as 64-bit integers (a float by the bits of
its float64 value), each weighted by an odd 64-bit weight of its position, summed (wrapping) and mixed: samples
that differ in any value differ, and so do permutations of a sample. On the host that is a few vector
operations over the batch: a sample of up to HOST_SAMPLE_VALUES (512) values is hashed whole (a sequence
of 512 tokens); a larger one by every k-th value, k = ceil(values / 512) (a CIFAR image: 1 in 6; an
ImageNet one: 1 in 294), and the event says so (`whole: false`). The values read depend on the sample alone,
never on the batch's size: a budget per batch (tried first) read other positions in a half than in the whole,
so the halves of a failed batch of images no longer added up to it (a false red on a correct halving). The
cost, measured 2026-11-28 with min-of-5 timeit of sample_hashes and distinct against the old batch_hash (one
thread) on this project's 2-core CI machine at a load of about 20-30: see docs/probe.md. On a GPU see Note
[One copy of a GPU batch's values]: the one copy reads the first GPU_SAMPLE_VALUES (256) values of each
sample (the whole of a 256-token sequence), and the event says `whole: false` for longer samples.

The hashes are computed with torch on the host: on the virtual device the tensors live on the CPU, and the
probe's own operations are kept off its books (off_books: VirtualDevice.host_work). On a GPU the probe never
computes on the device (an injected fault could land on it): it copies the first values of every sample to
the host (Note [One copy of a GPU batch's values]), or, where the samples are not contiguous, up to
WHOLE_VALUES elements, and then the digest covers the batch as a whole (`per_sample` false: a redone batch
gives the same digest, its halves do not add up to it).

Note [One copy of a GPU batch's values]
Read one by one (`t[i].item()`), WHOLE_VALUES elements cost a copy and a stream synchronisation each: 8 of
them were the probe's largest cost per step on an H100 (about 200 of its 450 us, bench/RESULTS.md). And a
digest of the batch as a whole cannot say that two halves redo a failed batch: on an H200 the self-test's
correct halving trainers were failed ("the failed batch was never trained on again"). So a batch whose
samples are contiguous (batch dimension 0, a contiguous tensor) is read in one cudaMemcpy2DAsync of the
first GPU_SAMPLE_VALUES values of every sample (a window per row, the same for any batch size), on the
current stream (the order `.item()`
reads in), then one cudaStreamSynchronize, and hashed per sample on the host as on the CPU (`per_sample`
true; the window, not values strided over the sample, so a GPU's digest is not a CPU's). Other batches are
read as WHOLE_VALUES elements spaced numel // WHOLE_VALUES apart in one such copy, batch-level. No operation
runs on the device and nothing is allocated there. The runtime is the libcudart this process already loaded
(found in /proc/self/maps); where there is none (a static runtime), the batch is not contiguous or on another
device than the current one, or a call fails, the probe reads the values one by one as before. The positions differ from the one-by-one read's when numel is not a multiple of
WHOLE_VALUES, so the two digests of one batch may differ; one process uses one way for a given batch shape.

Note [Which dimension is the batch]
A batch is not always dimension 0: nn.LSTM, nn.GRU and nn.RNN without batch_first take (seq, batch, ...).
The probe takes the batch dimension from evidence, in this order: the DataLoader's batch (the number of
indices its sampler gave for the batch in hand: the first dimension of that size; `from: "loader"`); a
recurrent module without batch_first inside the model (dimension 1; `from: "rnn"`); the one dimension whose
size changed between two training forwards of the model with the same number of dimensions, once seen
(`from: "change"`); else dimension 0 (`from: "guess"`). A policy that sees a guessed dimension and two
shapes that differ in one other dimension reads the batch from that one (batch_halving). A model that
transposes its input before its recurrent layer is misread.

Note [A checkpoint is its content]
A path says little: the best code saves to `last.pt.tmp` and renames it, copies `last.pt` to `best.pt`,
saves to an in-memory stream and writes the bytes itself, saves by a relative path and loads by an absolute
one. So torch.save and torch.load report `digest`: a hash of what was saved or loaded, the tensors (by key
path, dtype, shape and up to TENSOR_VALUES sampled values) and the plain values (ints, floats, strings)
that the object holds. The object loaded back from any copy of the bytes has the digest the save reported.
Beside it, at the first training forward of each model after one or more loads, the probe compares the
model's state_dict with the tensors of the objects loaded (`model_state`): each of the model's tensors is
looked up by its dtype, shape and sampled values among the loaded tensors, and the event says, for each set
of loaded objects that hold the same tensors, how many of the model's tensors they hold (`from`), how many no
loaded object holds though one has a tensor of that name (`unmatched`), and how many no loaded object names
(`unseen`: loaded by other means, such as safetensors). A resume that loaded the file but did not put it into the model,
or put an older or pretrained state into it, shows there. Not seen: checkpoints written by other means
than torch.save (safetensors, numpy), and a state saved in another dtype than the model's.
"""

import collections.abc
import contextlib
import ctypes
import dataclasses
import struct

SAMPLE_VALUES = 16   # values hashed per sample at least (Note [A sample is all its values])
HOST_SAMPLE_VALUES = 512  # values of a sample hashed on the host: all of them up to this many (Note [A sample is all its values])
GPU_SAMPLE_VALUES = 256    # values at the start of each sample of a GPU batch read in its one copy
WHOLE_VALUES = 8     # elements read from a GPU batch whose samples are not contiguous
TENSOR_VALUES = 8    # values hashed per tensor of a checkpoint or a model's state
MASK = (1 << 64) - 1

# Odd 63-bit multipliers: torch's int64 arithmetic wraps, which is all a hash needs.
_MULT = [0x1F3D5B79A2C4E6F1, 0x5851F42D4C957F2D, 0x2545F4914F6CDD1D, 0x14057B7EF767814F,
         0x3C6EF372FE94F82B, 0x27BB2EE687B0B0FD, 0x0BF58476D1CE4E5B, 0x14A8A5D8A4C2B7E9,
         0x61C8864680B583EB, 0x0C2B2AE3D27D4EB5, 0x165667B19E3779F9, 0x2127599BF4325C37,
         0x4CF5AD432745937F, 0x1B873593ACB4C3E5, 0x6A09E667F3BCC909, 0x3C6EF372FE94F83B]


def _mix(h):
    """A 64-bit finalizer (splitmix64's) for a Python int."""
    h &= MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & MASK
    return h ^ (h >> 31)


def _text_hash(text):
    h = 1469598103934665603
    for b in text.encode("utf-8", "replace"):
        h = ((h ^ b) * 1099511628211) & MASK
    return h


def hex64(h):
    return "%016x" % (h & MASK)


def _positions(n, k):
    return sorted(set(j * n // k for j in range(k))) if n > 0 else []


def _unravel(flat, shape):
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def _bits(torch, values, copy=False):
    """The values as int64 bit patterns (floats through float64, so that equal values give equal bits); with
    `copy`, always a new tensor of the probe's own."""
    if values.is_complex():
        values = torch.view_as_real(values)
    if values.is_floating_point():
        return values.to(torch.float64, copy=copy).view(torch.int64)
    return values.to(torch.int64, copy=copy)


def _on_gpu(t):
    return bool(getattr(t, "is_cuda", False)) and t.device.type == "cuda"


def _element_bits(torch, t, positions):
    """Single elements read one by one (a GPU tensor: no operation runs on the device)."""
    out = []
    shape = tuple(t.shape)
    for p in positions:
        v = t[_unravel(p, shape)].item() if shape else t.item()
        if isinstance(v, float):
            out.append(struct.unpack("<q", struct.pack("<d", v))[0])
        elif isinstance(v, complex):
            out.append(_text_hash(repr(v)))
        else:
            out.append(int(v))
    return out


_CUDA_MEMCPY_DEFAULT = 4
_runtime = None  # (cudaMemcpy2DAsync, cudaStreamSynchronize), or False: none loaded, or not usable


def _cuda_runtime():
    """The memcpy and sync of the libcudart this process loaded (Note [One copy of a GPU batch's values])."""
    global _runtime
    if _runtime is None:
        _runtime = False
        try:
            with open("/proc/self/maps") as maps:
                paths = [line.split()[-1] for line in maps if "/libcudart.so" in line]
            if paths:
                lib = ctypes.CDLL(paths[0])
                copy, sync = lib.cudaMemcpy2DAsync, lib.cudaStreamSynchronize
                copy.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
                copy.restype = ctypes.c_int
                sync.argtypes = [ctypes.c_void_p]
                sync.restype = ctypes.c_int
                _runtime = (copy, sync)
        except (OSError, AttributeError):
            _runtime = False
    return _runtime


def _copy_rows(torch, t, rows, width, pitch):
    """`rows` runs of `width` elements of contiguous CUDA tensor `t`, each starting `pitch` elements after the
    last, as a host tensor [rows, width] of t's dtype, read in one cudaMemcpy2DAsync on the current stream and
    one synchronisation; None where that cannot be done (Note [One copy of a GPU batch's values])."""
    runtime = _cuda_runtime()
    if not runtime or rows <= 0 or width <= 0 or not t.is_contiguous() or t.is_complex():
        return None
    if t.device.index != torch.cuda.current_device():
        return None
    host = torch.empty((rows, width), dtype=t.dtype)
    size = t.element_size()
    stream = torch.cuda.current_stream(t.device).cuda_stream
    copy, sync = runtime
    if copy(host.data_ptr(), size * width, t.data_ptr(), size * pitch, size * width, rows, _CUDA_MEMCPY_DEFAULT,
            stream) != 0:
        return None
    if sync(stream) != 0:
        return None
    return host


def _spaced_values(torch, t, k):
    """k values of contiguous CUDA tensor `t` spaced numel // k apart, as _bits gives them, read in one copy;
    None where that cannot be done (Note [One copy of a GPU batch's values])."""
    n = t.numel()
    host = _copy_rows(torch, t, k, 1, n // k) if 0 < k <= n else None
    return None if host is None else _bits(torch, host.reshape(-1)).tolist()


def tensor_hash(torch, t):
    """One tensor's 64-bit fingerprint: dtype, shape and up to TENSOR_VALUES values strided over it."""
    h = _text_hash("%s%s" % (t.dtype, tuple(t.shape)))
    n = t.numel()
    if n == 0 or t.is_sparse or t.is_quantized:
        return _mix(h)
    t = t.detach()
    positions = _positions(n, min(n, TENSOR_VALUES))
    if _on_gpu(t):
        values = _element_bits(torch, t, positions)
    else:
        flat = t.reshape(-1) if t.is_contiguous() else None
        if flat is not None:
            values = _bits(torch, flat[torch.tensor(positions, dtype=torch.long)]).tolist()
        else:
            values = _element_bits(torch, t, positions)
    for i, v in enumerate(values):
        h = _mix(h ^ ((v * _MULT[i % len(_MULT)]) & MASK))
    return h


def batch_hash(torch, t, dim):
    """(samples, digest, per_sample) of one input tensor whose batch is dimension `dim` (Note [A step is its
    data]), or None when it cannot be read."""
    got = sample_hashes(torch, t, dim)
    return None if got is None else got[:3]


def sample_hashes(torch, t, dim):
    """(samples, digest, per_sample, hashes, whole) of one input tensor whose batch is dimension `dim`: the
    digest, the sum of the samples' hashes (Note [A step is its data]); `hashes` the host int64 tensor of one
    hash per sample (None when `per_sample` is false); `whole` whether every value of each sample was read
    (Note [A sample is all its values]). None when it cannot be read."""
    if t.dim() <= dim or t.is_sparse or t.is_quantized:
        return None
    t = t.detach()
    count = int(t.shape[dim])
    rest = tuple(t.shape[:dim]) + tuple(t.shape[dim + 1:])
    salt = _text_hash("%s%s" % (t.dtype, rest))
    if count == 0:
        return 0, 0, True, torch.zeros(0, dtype=torch.int64), True
    per = 1
    for s in rest:
        per *= s
    if _on_gpu(t):
        width = min(per, GPU_SAMPLE_VALUES)  # never by the batch's size: a piece's samples hash as the whole's
        windows = _sample_windows(torch, t, dim, count, per, width) if per > 0 else None
        if windows is not None:
            hashes = _sample_row_hashes(torch, _bits(torch, windows), salt)
            return count, int(hashes.sum().item()) & MASK, True, hashes, width == per
        n = t.numel()
        values = _spaced_values(torch, t, min(n, WHOLE_VALUES))
        if values is None:
            values = _element_bits(torch, t, _positions(n, min(n, WHOLE_VALUES)))
        h = salt ^ count
        for i, v in enumerate(values):
            h = _mix(h ^ ((v * _MULT[i % len(_MULT)]) & MASK))
        return count, h, False, None, False
    xs = t.movedim(dim, 0) if dim else t
    width = min(per, HOST_SAMPLE_VALUES)  # never by the batch's size: a piece's samples hash as the whole's
    rows = xs.reshape(count, per)
    if width < per:  # Note [A sample is all its values]: beyond the budget, every k-th value of the sample
        rows = rows[:, ::-(-per // width)]
    bits = _bits(torch, rows, copy=True)
    hashes = _sample_row_hashes(torch, bits, salt)
    return count, int(hashes.sum().item()) & MASK, True, hashes, width == per


def _weights(torch, n):
    """n odd 64-bit weights, one per position of a sample's values (cached: the same n every step)."""
    w = _WEIGHTS.get(n)
    if w is None:
        j = torch.arange(1, n + 1, dtype=torch.int64)
        w = (j * _MULT[0] + _MULT[1]) ^ (j * _MULT[2])
        w = w | 1
        if len(_WEIGHTS) > 64:
            _WEIGHTS.clear()
        _WEIGHTS[n] = w
    return w


_WEIGHTS = {}


def _sample_row_hashes(torch, bits, salt):
    """One 64-bit hash per row of `bits` (a sample's values as int64 bit patterns): a weighted sum of every
    value, one odd weight per position, then mixed (Note [A sample is all its values])."""
    if bits.shape[1] == 0:
        h = torch.zeros(bits.shape[0], dtype=torch.int64)
    else:
        h = (bits * _weights(torch, bits.shape[1])).sum(1)
    h = h ^ (signed(salt) >> 1)
    h = h ^ (h >> 29)
    h = h * 0x5851F42D4C957F2D
    h = h ^ (h >> 32)
    h = h * 0x2545F4914F6CDD1D
    return h ^ (h >> 29)


def signed(h):
    """A 64-bit hash as torch's int64 holds it."""
    h &= MASK
    return h - (1 << 64) if h >= (1 << 63) else h


def distinct(torch, hashes):
    """How many distinct samples the per-sample hash tensors hold together (Note [Distinct samples])."""
    return int(torch.unique(torch.cat(hashes) if len(hashes) > 1 else hashes[0]).numel())


def _per_sample_digest(torch, bits, salt):
    """The sum over samples (rows of `bits`) of each sample's hash, modulo 2**64 (Note [A step is its data])."""
    return int(_sample_row_hashes(torch, bits, salt).sum().item()) & MASK


def _sample_windows(torch, t, dim, count, per, k):
    """The first k values of each sample of contiguous CUDA tensor `t` (batch dimension 0), as a host tensor
    [count, k], read in one copy; None where that cannot be done (Note [One copy of a GPU batch's values])."""
    return _copy_rows(torch, t, count, k, per) if dim == 0 else None


def item_hash(torch, item):
    """One sample given as a container of its own (a dict of one image and its annotations, Detectron2's style):
    one 64-bit hash of every tensor in it, by key path, and its plain values; None when it holds no tensor."""
    h = 0
    found = False
    for path, leaf in walk_state(torch, _plain(item), depth=26):
        if isinstance(leaf, torch.Tensor):
            got = sample_hashes(torch, leaf.reshape(1, -1), 0)
            if got is None:
                continue
            found = True
            f = got[1] ^ _text_hash(str(tuple(leaf.shape)))
        else:
            f = _text_hash(repr(leaf))
        h = (h + _mix(_text_hash(path) ^ f)) & MASK
    return h if found else None


def _plain(obj):
    """A dataclass as the dict of its fields (walk_state reads dicts, lists and objects' __dict__)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    return obj


# Note [What a batch comes in]
# A model is called with its batch in whatever the data pipeline made: tensors, a dict or a Hugging Face
# BatchEncoding (a Mapping, not a dict), a tuple or a named tuple, a @dataclass, a list of per-sample dicts
# (Detectron2 and many detection models: `model([{"image": ..., "instances": ...}, ...])`), nested. A probe
# that looked one level into lists and dicts found no tensor in a dataclass or a list of dicts, and the
# checks fell back to step numbers, which the probe advances itself (issue 42, class 2). input_leaves walks
# all of these, depth first in argument order, at most INPUT_DEPTH levels and INPUT_LEAVES tensors deep: a
# list or tuple whose every item is a container (a Mapping or a dataclass) is a list of samples, each item
# one sample (`from: "items"`), hashed whole by item_hash; anything else is walked for its tensors. Objects
# of other classes (a config, a module) are not walked: their tensors are not the batch.
INPUT_DEPTH = 6
INPUT_LEAVES = 64


def _is_item(torch, v):
    return (isinstance(v, collections.abc.Mapping) or
            (dataclasses.is_dataclass(v) and not isinstance(v, type))) and not isinstance(v, torch.Tensor)


def input_leaves(torch, args, kwargs=None):
    """(tensors, item lists): the tensors among a forward's arguments, outside lists of samples, and the lists
    of samples (Note [What a batch comes in]). An explicit stack, not a recursive closure: a closure that calls
    itself is a reference cycle, and its lists (the job's input batch) lived until the garbage collector ran
    (on the virtual device, a batch's bytes per step kept on its books)."""
    Tensor = torch.Tensor
    tensors, items = [], []
    stack = [(v, 0) for v in reversed(list(kwargs.values()) if kwargs else [])]
    stack += [(v, 0) for v in reversed(args)]
    while stack and len(tensors) < INPUT_LEAVES:
        v, depth = stack.pop()
        if depth > INPUT_DEPTH:
            continue
        if isinstance(v, Tensor):
            tensors.append(v)
        elif isinstance(v, (str, bytes, int, float, bool)) or v is None:
            continue
        elif isinstance(v, (list, tuple)):
            if v and all(_is_item(torch, w) for w in v):
                items.append(v)
            else:
                stack.extend((w, depth + 1) for w in reversed(v))
        elif isinstance(v, collections.abc.Mapping):
            stack.extend((w, depth + 1) for w in reversed(list(v.values())))
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            stack.extend((getattr(v, f.name, None), depth + 1) for f in reversed(dataclasses.fields(v)))
    return tensors, items


def first_tensor(torch, args, kwargs=None):
    """The first tensor among the arguments (Note [What a batch comes in]: outside lists of samples), and all
    of them."""
    tensors, _ = input_leaves(torch, args, kwargs)
    return (tensors[0] if tensors else None), tensors


# Note [Keyword inputs]
# Much public training code calls its model with keyword arguments only: `model(**batch)` (Hugging Face
# models, Accelerate, Transformers' Trainer, Lightning modules that unpack a dict). PyTorch's global forward
# pre-hook (register_module_forward_pre_hook) takes no keyword arguments on any version the probe supports,
# so the hook saw an empty `args`, no tensor, and no batch size: an OOM at step 1 of such a job had none
# (issue 27: the ecosystem's helpers under a cap were judged inconclusive). The keyword arguments are still
# in the frame that called the hook: Module._call_impl (and its inner() closure on PyTorch 2.x) holds them as
# `kwargs`, beside `self`, the module. call_kwargs reads them from there, a few frames up, only when the
# positional arguments hold no tensor, and only from a frame whose `self` is the module being called, so
# that another function's `kwargs` is never taken for them. Reading a frame's locals changes nothing the
# program computes. When no frame holds them (a PyTorch that calls hooks another way), nothing is found, as
# before.
KWARGS_FRAMES = 8  # frames walked up from the hook


def call_kwargs(module, frame):
    """The keyword arguments of the module call in progress whose hook runs below `frame` (Note [Keyword
    inputs]), or None."""
    f = frame
    for _ in range(KWARGS_FRAMES):
        if f is None:
            return None
        if f.f_code.co_name in ("_call_impl", "inner", "_wrapped_call_impl"):
            local = f.f_locals
            if local.get("self") is module:
                kwargs = local.get("kwargs")
                if isinstance(kwargs, dict):
                    return kwargs
        f = f.f_back
    return None


def has_tensor(torch, args):
    """Whether the positional arguments hold a tensor (Note [What a batch comes in])."""
    tensors, items = input_leaves(torch, args)
    return bool(tensors or items)


def has_sequence_first_rnn(torch, module):
    """Whether the model holds a recurrent module that takes (seq, batch, ...): Note [Which dimension is the
    batch]."""
    rnn = getattr(torch.nn.modules, "rnn", None)
    base = getattr(rnn, "RNNBase", None) if rnn is not None else None
    if base is None:
        return False
    try:
        for m in module.modules():
            if isinstance(m, base) and not getattr(m, "batch_first", False):
                return True
    except Exception:
        return False
    return False


def batch_dim(t, loader_count, rnn, changed):
    """(dimension, how it was found): Note [Which dimension is the batch]."""
    shape = tuple(t.shape)
    if loader_count is not None and loader_count > 0:
        for d, s in enumerate(shape):
            if s == loader_count:
                return d, "loader"
    if rnn and len(shape) >= 2:
        return 1, "rnn"
    if changed is not None and changed < len(shape):
        return changed, "change"
    return 0, "guess"


def changed_dim(before, after):
    """The one dimension whose size differs between two shapes of the same rank, else None."""
    if before is None or len(before) != len(after):
        return None
    diff = [d for d, (a, b) in enumerate(zip(before, after)) if a != b]
    return diff[0] if len(diff) == 1 else None


# ---- checkpoints ---------------------------------------------------------------------------------------

def walk_state(torch, obj, path="", out=None, depth=0):
    """(key path, leaf) pairs of a saved object: tensors and plain values, through dicts, lists, tuples and
    objects' __dict__ (an argparse.Namespace), at most 32 levels deep."""
    if out is None:
        out = []
    if depth > 32:
        return out
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
    elif isinstance(obj, torch.nn.Module):
        # Note [A checkpoint is its content]: a whole module saved (torch.save(model)) is its state.
        walk_state(torch, obj.state_dict(), path + "/" + type(obj).__name__, out, depth + 1)
    elif isinstance(obj, (dict, collections.abc.Mapping)):
        for k in list(obj.keys()):
            walk_state(torch, obj[k], "%s/%s" % (path, k), out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            walk_state(torch, v, "%s/%d" % (path, i), out, depth + 1)
    elif isinstance(obj, (int, float, str, bool)) or obj is None:
        out.append((path, obj))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        walk_state(torch, _plain(obj), path + "/" + type(obj).__name__, out, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        walk_state(torch, vars(obj), path + "/" + type(obj).__name__, out, depth + 1)
    return out


def state_digest(torch, obj):
    """(digest, {tensor fingerprint}, tensors, {tensor key path}): Note [A checkpoint is its content]."""
    h = _text_hash(type(obj).__name__)
    fingerprints = set()
    paths = set()
    tensors = 0
    for path, leaf in walk_state(torch, obj):
        if isinstance(leaf, torch.Tensor):
            f = tensor_hash(torch, leaf)
            fingerprints.add(f)
            paths.add(path)
            tensors += 1
        else:
            f = _text_hash(repr(leaf))
        h = _mix(h ^ _mix(_text_hash(path) ^ f))
    return h, fingerprints, tensors, paths


def model_state(torch, module, loaded):
    """The `model_state` fields: which loaded objects hold the model's tensors. `loaded`: [(digest,
    fingerprints, key paths)] in load order. A tensor that no loaded object holds counts as `unmatched`
    when a loaded object has a tensor under its name (`.../encoder.weight`: the state was there, with other
    values), else as `unseen` (its state came by other means than torch.load: safetensors, as Hugging Face's
    Trainer loads model weights beside an optimizer.pt)."""
    groups = {}
    unmatched = unseen = 0
    count = 0
    for name, t in module.state_dict().items():
        if not isinstance(t, torch.Tensor):
            continue
        count += 1
        f = tensor_hash(torch, t)
        holders = sorted(set(hex64(entry[0]) for entry in loaded if f in entry[1]))
        if not holders:
            ends = ("/" + name, "." + name)
            if any(p.endswith(ends) for entry in loaded for p in entry[2]):
                unmatched += 1
            else:
                unseen += 1
            continue
        key = ",".join(holders)
        groups[key] = groups.get(key, 0) + 1
    return {"tensors": count, "unmatched": unmatched, "unseen": unseen,
            "from": [{"digests": k.split(","), "tensors": n} for k, n in sorted(groups.items())]}


# ---- the DataLoader ------------------------------------------------------------------------------------
# Note [The DataLoader's indices]
# The indices the sampler gave for each batch are taken where the DataLoader asks for them
# (_BaseDataLoaderIter._next_index) and handed out in the same order as the batches come out of __next__
# (workers keep that order unless in_order=False). They give the batch dimension (Note [Which dimension
# is the batch]) and name a dropped batch in a verdict ("samples 160-191").

def indices_text(indices):
    """"160-191" for a run, else the first few and a count."""
    try:
        ints = [int(i) for i in indices]
    except Exception:
        return ""
    if not ints:
        return ""
    if ints == list(range(ints[0], ints[0] + len(ints))):
        return "%d-%d" % (ints[0], ints[-1]) if len(ints) > 1 else str(ints[0])
    head = ", ".join(str(i) for i in ints[:4])
    return head + (", ... (%d in all)" % len(ints) if len(ints) > 4 else "")


def off_books(device):
    """Keeps the probe's own operations off the virtual device's books (they are the host's work)."""
    return device.host_work() if device is not None else contextlib.nullcontext()


__all__ = ["call_kwargs", "has_tensor", "batch_hash", "tensor_hash", "state_digest", "model_state", "batch_dim", "changed_dim",
           "has_sequence_first_rnn", "first_tensor", "indices_text", "hex64", "off_books"]
