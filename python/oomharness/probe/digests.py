"""Fingerprints of samples, tensors and saved objects: 64-bit hashes the policies compare, never recompute
(docs/design/DESIGN.md, "Evidence"; issues 26, 42). What they are hashes of: evidence.py.

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

"""

import collections.abc
import dataclasses
import struct

from . import gpu_copy

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


def mix(h):
    """A 64-bit finalizer (splitmix64's) for a Python int."""
    h &= MASK
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & MASK
    return h ^ (h >> 31)


def text_hash(text):
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
            out.append(text_hash(repr(v)))
        else:
            out.append(int(v))
    return out


def _spaced_values(torch, t, k):
    """k values of contiguous CUDA tensor `t` spaced numel // k apart, as _bits gives them, read in one copy;
    None where that cannot be done (Note [One copy of a GPU batch's values])."""
    n = t.numel()
    host = gpu_copy.copy_rows(torch, t, k, 1, n // k) if 0 < k <= n else None
    return None if host is None else _bits(torch, host.reshape(-1)).tolist()


def value_kind(t):
    """What a tensor's values are, not how wide: a state saved in float16 and made float32 again holds the same
    values (Note [A checkpoint is its content])."""
    if t.is_complex():
        return "complex"
    if t.is_floating_point():
        return "floating"
    return "bool" if str(t.dtype) == "torch.bool" else "integer"


def tensor_hash(torch, t):
    """One tensor's 64-bit fingerprint: the kind of its values, its shape and up to TENSOR_VALUES values strided
    over it (floats through float64, so a value converted exactly to a wider type keeps its fingerprint)."""
    h = text_hash("%s%s" % (value_kind(t), tuple(t.shape)))
    n = t.numel()
    if n == 0 or t.is_sparse or t.is_quantized:
        return mix(h)
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
        h = mix(h ^ ((v * _MULT[i % len(_MULT)]) & MASK))
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
    salt = text_hash("%s%s" % (t.dtype, rest))
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
            h = mix(h ^ ((v * _MULT[i % len(_MULT)]) & MASK))
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
    return gpu_copy.copy_rows(torch, t, count, k, per) if dim == 0 else None


def item_hash(torch, item):
    """One sample given as a container of its own (a dict of one image and its annotations, Detectron2's style):
    one 64-bit hash of every tensor in it, by key path, and its plain values; None when it holds no tensor."""
    h = 0
    found = False
    for path, leaf in walk_state(torch, plain(item), depth=26):
        if isinstance(leaf, torch.Tensor):
            got = sample_hashes(torch, leaf.reshape(1, -1), 0)
            if got is None:
                continue
            found = True
            f = got[1] ^ text_hash(str(tuple(leaf.shape)))
        else:
            f = text_hash(repr(leaf))
        h = (h + mix(text_hash(path) ^ f)) & MASK
    return h if found else None


def plain(obj):
    """A dataclass as the dict of its fields (walk_state reads dicts, lists and objects' __dict__)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    return obj


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
        walk_state(torch, plain(obj), path + "/" + type(obj).__name__, out, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        walk_state(torch, vars(obj), path + "/" + type(obj).__name__, out, depth + 1)
    return out


__all__ = ["MASK", "batch_hash", "distinct", "hex64", "item_hash", "mix", "plain", "sample_hashes", "signed",
           "tensor_hash", "text_hash", "value_kind", "walk_state"]
