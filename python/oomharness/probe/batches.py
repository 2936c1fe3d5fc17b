"""The probe's batches part: the batch size of each top-level forward, the samples each step trained on and
what they were (Note [A step is its data] in digests.py), and the DataLoader's indices.

Note [The batch the code did not report]
The zero-code promise: a job that reports no batch size still gets one at each step and each OOM, inferred
from what the probe already sees, and every event says where its batch came from (`batch_from`): "inputs",
the batch dimension of the model's inputs at its top-level forward (positional or keyword: Note [Keyword
inputs] and Note [Which dimension is the batch] in evidence.py); "loader", the number of samples the
DataLoader handed out for the batch in hand, when the forward's inputs hold no tensor the probe can read;
"code", the batch_size the code passed to probe.step(). An OOM before the step's first forward (moving the
batch to the device) has the batch of the last forward. batch_halving says in its verdict when the batches
it compared were inferred.

Note [Distinct samples]
A sum of per-sample hashes says whether pieces add up to a batch, not whether a step's samples differ: a
failed batch of 128 redone as two micro-batches that are both its first half counts 128 samples
(effective_batch passed it, issue 42 class 3). So the step event's data also says how many of its samples
are `distinct` in content: the number of distinct per-sample hashes among the step's training forwards
(one hash per sample, of all its input tensors). Reported only where every forward of the step was hashed
per sample (not for a GPU batch read as a whole). Duplicates in the data set lower it too; effective_batch
compares it with the steps before the OOM.

Note [Micro-batches an OOM leaves]
A step's data is what its optimizer step trains on: the samples whose gradients are in the parameters when
it runs. With gradient accumulation, an OOM in micro-batch 3 of a step leaves micro-batches 1 and 2 in the
gradients; code that keeps them and redoes micro-batch 3 (whole or in halves) trains the step on every sample
of it, and code that zeroes the gradients and goes on with micro-batch 3 loses 1 and 2 (issue 42, class 10).
So the OOM event's data is every forward since the step began, and the step's data then goes on from the
forwards a completed backward had put into the gradients (`backward_done`); a zero_grad call (an optimizer's
or a module's: the `grads_cleared` hook of the grads part) drops those, as it drops their gradients, and keeps
a forward whose backward is still to come (`out = model(x); opt.zero_grad(); loss.backward()`). The samples
count the same way. Not seen: gradients cleared by hand (`p.grad = None` in a loop) between the OOM
and the redo: the dropped micro-batches still count, a false green for that code only.

Note [State the model returned is not data]
A recurrent model is called with its state beside the batch: `output, hidden = model(data, hidden)`, the
hidden state of the step before, detached (the word-language-model example's repackage_hidden), or a fresh
one of zeros (init_hidden) at the start and after a resume. It has the batch's dimension, so it was hashed as
the step's data, and a resume that went on at exactly the right tokens differed from the OOM's batch by its
state (lstm-resume: inconclusive, "a batch no earlier attempt trained on"). Beside a forward's first input
(always data), a tensor is not the step's data when it is (a) the storage of an output of the model's last
training forward, still alive (held by a weak reference of the storage, so no later storage can take its
address: never a coincidence), or (b) floating point and all zeros (a fresh state; a zero float input
carries no sample's identity). Integer tensors (labels, masks, token types) stay data whatever their values,
so that a half-batch and its whole are hashed over the same tensors (Note [Micro-batches an OOM leaves]).
"""

import collections
import sys
import weakref

from .._hooks import safely
from . import digests, evidence

WHO = "probe.batches"
MAX_PARTS = 64  # forwards of one step whose digests a step event lists (Note [A step is its data])
MAX_RETURNED = 64  # outputs of a forward kept by storage (Note [State the model returned is not data])


class _StorageRef:
    """A weak reference to a storage: while it lives, no other storage can have the storage's address."""
    __slots__ = ("cdata",)

    def __init__(self, storage):
        self.cdata = storage._weak_ref()

    def __del__(self):
        if sys.is_finalizing():
            return  # torch may be half torn down: the process's end frees everything anyway
        try:
            _free_weak_ref(self.cdata)
        except Exception:
            pass


def _free_weak_ref(cdata):
    import torch
    torch.UntypedStorage._free_weak_ref(cdata)


def storage_key(t):
    """The address of t's storage (compared with _StorageRef'ed ones only)."""
    try:
        return t.untyped_storage()._cdata
    except Exception:
        return None

# One training forward's data: samples, digest (the sum of its per-sample hashes), hashes (a tensor of them, or
# None), per_sample, whole, the first input's shape, its batch dimension and how it was found, the loader's indices.
Forward = collections.namedtuple("Forward", "samples digest hashes per_sample whole shape dim how loader")


class Batches:
    def __init__(self, ctx):
        self.ctx = ctx
        self.batch_size = -1              # leading dimension of the last training forward
        self.batch_from = ""              # where it came from (Note [The batch the code did not report])
        self.pending_samples = 0          # samples of training forwards since the last step
        self.backed_samples = 0           # ... when the last backward completed (Note [Micro-batches an OOM leaves])
        self.manual_samples = False       # the code reports samples itself (probe.samples)
        self.loader_indices = None        # the DataLoader batch handed out last (Note [The DataLoader's indices])
        self.loader_fresh = False         # ... and not used by a training forward yet
        self.seq_first = weakref.WeakKeyDictionary()    # model -> holds a sequence-first module
        self.wants_data = ctx.settings.wants("data")       # the samples' digests: only where a check compares them
        # Note [A step is its data]: the data of the training forwards since the last step, one record per
        # forward (gradient accumulation), and how many of them a completed backward put into the gradients
        # (Note [Micro-batches an OOM leaves]).
        self.forwards = []                # Forward records, in order
        self.backed = 0                   # the first `backed` records are in the gradients
        self.returned = {}                # storage key -> its weak reference: the last training forward's outputs
                                          # (Note [State the model returned is not data])

    def install(self, torch):
        """Note [The DataLoader's indices] (evidence.py): the indices each batch was made of, in the order the
        batches come out of the iterator."""
        patches = self.ctx.patches
        where = "torch.utils.data.dataloader._BaseDataLoaderIter"

        def next_index(original):
            def _next_index(it):
                indices = original(it)
                try:
                    q = it.__dict__.setdefault("_oomh_indices", collections.deque())
                    q.append(indices if isinstance(indices, (list, tuple)) else None)
                except Exception:
                    pass
                return indices
            return _next_index

        def next_batch(original):
            def __next__(it):
                batch = original(it)
                q = getattr(it, "_oomh_indices", None)
                safely(self.loader_batch, q.popleft() if q else None)
                return batch
            return __next__

        patches.replace(WHO, where, "_next_index", next_index)
        patches.replace(WHO, where, "__next__", next_batch)

    def loader_batch(self, indices):
        """The DataLoader handed out a batch."""
        self.loader_indices = list(indices) if indices is not None else None
        self.loader_fresh = self.loader_indices is not None

    # ---- each top-level forward
    def on_forward(self, module, args, kwargs, training, frame):
        ctx = self.ctx
        bs = safely(self.batch_of, module, args, kwargs, training)
        if bs is None:
            t, _ = evidence.first_tensor(ctx.torch, args, kwargs)
            bs = int(t.shape[0]) if t is not None and t.dim() > 0 else None
        how = "inputs"
        if bs is None and self.loader_fresh and self.loader_indices:
            bs, how = len(self.loader_indices), "loader"  # Note [The batch the code did not report]
        if bs is not None:
            ctx.clock.batch_size, ctx.clock.batch_from = bs, how
            if ctx.block is not None:
                ctx.block.batch_size = bs
        if training and bs is not None:
            self.batch_size, self.batch_from = bs, how
            if not self.manual_samples:
                self.pending_samples += bs

    def batch_of(self, module, args, kwargs, training):
        """The batch size of a top-level forward, from its batch dimension; for a training forward, its data
        is added to the step's."""
        torch = self.ctx.torch
        tensors, items = evidence.input_leaves(torch, args, kwargs)
        if not tensors:
            # Note [What a batch comes in]: a list of samples, each its own container.
            return self.items_of(items[0], training) if items else None
        t = tensors[0]
        if t.dim() == 0:
            return None
        shape = tuple(t.shape)
        seq_first = self.seq_first.get(module)
        if seq_first is None:
            seq_first = evidence.sequence_first(torch, module)
            safely(self.seq_first.__setitem__, module, seq_first)
        loader = len(self.loader_indices) if self.loader_fresh and self.loader_indices else None
        dim, how = evidence.batch_dim(t, loader, seq_first)
        count = int(shape[dim])
        if not training or not self.wants_data:
            return count
        with evidence.off_books(self.ctx.device):
            samples, digest, per_sample, whole, hashes = 0, 0, True, True, None
            for k, u in enumerate(tensors):
                if u.dim() <= dim or int(u.shape[dim]) != count:
                    continue
                if k and self.is_state(u):
                    continue
                got = digests.sample_hashes(torch, u, dim)
                if got is None:
                    continue
                if not samples:
                    samples = got[0]
                digest = (digest + got[1]) & digests.MASK
                per_sample = per_sample and got[2]
                whole = whole and got[4]
                if per_sample:  # one hash per sample, of all its tensors (Note [Distinct samples])
                    hashes = got[3] if hashes is None else hashes + got[3]
        self.add_forward(samples, digest, hashes if per_sample else None, per_sample, whole, list(shape), dim, how)
        return count

    def is_state(self, u):
        """Note [State the model returned is not data]: a tensor beside the first input that is the model's own
        earlier output, or a float tensor of zeros."""
        if self.returned and storage_key(u) in self.returned:
            return True
        return bool(u.is_floating_point()) and not bool(u.any())

    def on_exit(self, uncaught):
        self.returned = {}  # the weak references go while torch is whole (_StorageRef)

    def on_forward_done(self, module, result):
        """Note [State the model returned is not data]: the outputs of a training forward, by storage."""
        torch = self.ctx.torch
        if not self.wants_data or not (module.training and torch.is_grad_enabled()):
            return
        tensors, _ = evidence.input_leaves(torch, (result,), None)
        refs = {}
        for t in tensors[:MAX_RETURNED]:
            try:
                storage = t.untyped_storage()
                refs[storage._cdata] = _StorageRef(storage)
            except Exception:
                continue
        self.returned = refs

    def items_of(self, items, training):
        """A forward whose batch is a list of samples (Note [What a batch comes in]): its length, and, for a
        training forward, each item's hash."""
        count = len(items)
        if training and self.wants_data:
            torch = self.ctx.torch
            with evidence.off_books(self.ctx.device):
                got = [digests.item_hash(torch, item) for item in items]
                hashes = torch.tensor([digests.signed(h) for h in got if h is not None], dtype=torch.int64)
            if len(hashes) == count:
                digest = int(hashes.sum().item()) & digests.MASK
                self.add_forward(count, digest, hashes, True, True, [count], 0, "items")
        return count

    def add_forward(self, samples, digest, hashes, per_sample, whole, shape, dim, how):
        """A training forward's data joins the step's (Note [A step is its data])."""
        loader = ""
        if self.loader_fresh and self.loader_indices:
            loader = evidence.indices_text(self.loader_indices) or ""
        self.forwards.append(Forward(samples, digest, hashes, per_sample, whole, shape, dim, how, loader))
        self.loader_fresh = False

    def take_data(self, keep=0):
        """The `data` field of a step or OOM event (None when no training forward was fingerprinted); the
        count starts again from the first `keep` forwards."""
        data = None
        forwards = self.forwards
        if forwards:
            first = forwards[0]
            data = {"samples": sum(f.samples for f in forwards), "per_sample": all(f.per_sample for f in forwards),
                    "shape": first.shape, "dim": first.dim, "from": first.how}
            data["digest"] = digests.hex64(sum(f.digest for f in forwards) & digests.MASK)
            loader = "; ".join(f.loader for f in forwards if f.loader)
            if loader:
                data["loader"] = loader
            hashes = [f.hashes for f in forwards if f.hashes is not None]
            if data["per_sample"] and hashes:
                with evidence.off_books(self.ctx.device):
                    data["distinct"] = digests.distinct(self.ctx.torch, hashes)
            if not all(f.whole for f in forwards):
                data["whole"] = False
            if 1 < len(forwards) <= MAX_PARTS:
                data["parts"] = [digests.hex64(f.digest) for f in forwards]
        self.forwards = forwards[:keep]
        self.backed = len(self.forwards)
        return data

    # ---- the events
    def samples(self, k):
        """probe.samples(k): the code counts its samples itself from now on."""
        self.manual_samples = True
        self.pending_samples = 0
        self.ctx.emit("samples", count=int(k))

    def on_step_ending(self):
        if not self.manual_samples and self.pending_samples > 0:
            self.ctx.emit("samples", count=self.pending_samples)
        self.pending_samples = self.backed_samples = 0

    def on_step_fields(self, fields, batch_size, loss):
        bs = self.batch_size if batch_size is None else batch_size
        if bs is not None and bs >= 0:
            fields["batch_size"] = int(bs)
            fields["batch_from"] = "code" if batch_size is not None else (self.batch_from or "inputs")
        data = self.take_data()
        if data is not None:
            fields["data"] = data

    def on_backward_done(self):
        self.backed = len(self.forwards)
        self.backed_samples = self.pending_samples

    def on_grads_cleared(self):
        # What the forwards before the last completed backward put into the gradients is gone (Note [Micro-batches
        # an OOM leaves]); a forward whose backward is still to come (`out = model(x); opt.zero_grad();
        # loss.backward()`, the commonest loop) is not in them yet and stays.
        self.forwards = self.forwards[self.backed:]
        self.backed = 0
        self.pending_samples = max(0, self.pending_samples - self.backed_samples)
        self.backed_samples = 0

    def on_oom_fields(self, fields):
        # The OOM's data is every forward since the step began; the step goes on with those already in the
        # gradients (Note [Micro-batches an OOM leaves]).
        data = self.take_data(keep=self.backed)
        if data is not None:
            fields["data"] = data

    def on_oom_seen(self, fields):
        # The failed forward's work does not count: a redo reports its samples again. What completed
        # backwards put into the gradients still counts until they are cleared.
        self.pending_samples = self.backed_samples
