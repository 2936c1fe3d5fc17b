"""What a step trained on and what a checkpoint holds, told by content: the model's inputs and the containers
they come in, the batch dimension, saved and loaded state (docs/design/DESIGN.md, "Evidence"; issues 26, 42). The
hashes are digests.py's (Note [A step is its data], Note [A sample is all its values]).

Note [Which dimension is the batch]
A batch is not always dimension 0: nn.LSTM, nn.GRU and nn.RNN without batch_first take (seq, batch, ...), and
so do nn.Transformer and its encoder and decoder layers without batch_first. The probe takes the batch
dimension from evidence, in this order: the DataLoader's batch (the number of indices its sampler gave for
the batch in hand: the first dimension of that size; `from: "loader"`); a recurrent or Transformer module
without batch_first inside the model (dimension 1; `from: "sequence_first"`); else dimension 0 (`from:
"first"`). A dimension whose size changes between forwards is no evidence (issue 42, class 4): it is the
sequence as often as the batch (dynamic padding; code that halves its sequence length and keeps its batch).
A model that transposes its input before a sequence-first layer is misread.

Note [A checkpoint is its content]
A path says little: the best code saves to `last.pt.tmp` and renames it, copies `last.pt` to `best.pt`,
saves to an in-memory stream and writes the bytes itself, saves by a relative path and loads by an absolute
one. So torch.save and torch.load report `digest`: a hash of what was saved or loaded, the tensors (by key
path, kind of values, shape and up to TENSOR_VALUES sampled values) and the plain values (ints, floats, strings)
that the object holds. The object loaded back from any copy of the bytes has the digest the save reported.
Beside it, at the first training forward of each model after one or more loads, the probe compares the
model's state_dict with the tensors of the objects loaded (`model_state`): each of the model's tensors is
looked up by its shape and sampled values among the loaded tensors, and the event says, for each set
of loaded objects that hold the same tensors, how many of the model's tensors they hold (`from`), how many no
loaded object holds though one has a tensor of that name (`unmatched`), and how many no loaded object names
(`unseen`: loaded by other means, such as safetensors). A resume that loaded the file but did not put it into the model,
or put an older or pretrained state into it, shows there. Values, not their width: a floating value is
hashed through float64, and the fingerprint names the kind of values (floating, complex, integer, boolean),
not the dtype, so a state saved in float16 and made float32 again (Ultralytics saves its EMA model as
`deepcopy(model).half()` and resumes with `.float()`), which holds exactly the same values, is the same
state; one rounded on the way (float32 saved, bfloat16 loaded) is not. Not seen: checkpoints written by
other means than torch.save (safetensors, numpy).
"""

import collections.abc
import contextlib
import dataclasses

from .digests import hex64, item_hash, mix, plain, tensor_hash, text_hash, walk_state

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


def sequence_first(torch, module):
    """Whether the model holds a module that takes (seq, batch, ...): a recurrent module or a Transformer (or
    one of its encoder or decoder layers) without batch_first. Note [Which dimension is the batch]."""
    kinds = []
    rnn = getattr(torch.nn.modules, "rnn", None)
    if getattr(rnn, "RNNBase", None) is not None:
        kinds.append(rnn.RNNBase)
    for name in ("Transformer", "TransformerEncoderLayer", "TransformerDecoderLayer"):
        if getattr(torch.nn, name, None) is not None:
            kinds.append(getattr(torch.nn, name))
    if not kinds:
        return False
    kinds = tuple(kinds)
    try:
        for m in module.modules():
            if isinstance(m, kinds) and not _batch_first(m):
                return True
    except Exception:
        return False
    return False


def _batch_first(m):
    # Recurrent modules and nn.Transformer keep batch_first themselves; its encoder and decoder layers keep it
    # on their attention (self_attn).
    return bool(getattr(m, "batch_first", getattr(getattr(m, "self_attn", None), "batch_first", False)))


def batch_dim(t, loader_count, seq_first):
    """(dimension, how it was found): Note [Which dimension is the batch]."""
    shape = tuple(t.shape)
    if loader_count is not None and loader_count > 0:
        for d, s in enumerate(shape):
            if s == loader_count:
                return d, "loader"
    if seq_first and len(shape) >= 2:
        return 1, "sequence_first"
    return 0, "first"


# ---- checkpoints ---------------------------------------------------------------------------------------

def state_digest(torch, obj):
    """(digest, {tensor fingerprint}, tensors, {tensor key path}): Note [A checkpoint is its content]."""
    h = text_hash(type(obj).__name__)
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
            f = text_hash(repr(leaf))
        h = mix(h ^ mix(text_hash(path) ^ f))
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


__all__ = ["call_kwargs", "has_tensor", "state_digest", "model_state", "batch_dim",
           "sequence_first", "first_tensor", "indices_text", "input_leaves", "off_books"]
