"""Reference recovery code: what the usual advice for CUDA out-of-memory errors says to do, done right.

    from oomharness import recover
    halving = recover.BatchHalving(model, optimizer, loss_fn, micro_batch=64)
    loss = halving.step(inputs, targets)          # one optimizer step over the whole batch, whatever it takes

    loss = recover.retry_after_empty_cache(train_step, batch, max_retries=3)

    recover.save_checkpoint(path, model, optimizer, step, data={"position": i})   # atomic
    state = recover.load_checkpoint(path, model, optimizer)                        # None: start afresh

Note [Releasing before the retry]
An OutOfMemoryError's traceback holds the frames of the failed forward and backward, and through them every
activation they made. Retrying inside the `except` block keeps all of that alive, so the retry runs with
the failed attempt's memory still held and fails again. The code here keeps only the message, leaves the
`except` block (which drops the exception and its traceback), zeroes the gradients of the failed attempt,
runs the garbage collector (reference cycles in autograd graphs) and only then empties PyTorch's cache
and retries.

Note [Halving without losing samples]
Halving the batch after an OOM must not drop the batch that failed, nor change what one optimizer step
means. BatchHalving redoes the failed batch from zeroed gradients as micro-batches of the new size, each
loss weighted by its share of the batch, so the accumulated gradient equals the full batch's (for a loss
that is a mean over samples) and the effective batch stays what the code asked for. The micro-batch stays
small afterwards: the memory that was missing once is still missing.
"""

import gc
import os
import random
import sys
import tempfile

import torch

from oomharness import oom_kinds, probe


def oom_error_types():
    """The out-of-memory exception classes of this PyTorch (torch.OutOfMemoryError from 2.1,
    torch.cuda.OutOfMemoryError from 1.13)."""
    return oom_kinds._oom_types(torch)


def is_oom(exc):
    """Whether `exc` is an out-of-memory error to recover from: one of the OOM table's (Note [Which errors are
    OOMs] in oom_kinds.h), also when it did not arrive as OutOfMemoryError (cuBLAS's handle, CUDA's code
    inside torch.AcceleratorError)."""
    return probe.is_oom(exc)


def oom_error(message):
    """An out-of-memory exception of this PyTorch's type, carrying `message`."""
    types = oom_error_types()
    return types[0](message) if types else RuntimeError("CUDA out of memory. " + message)


def release_memory():
    """Gives cached device memory back once the failed attempt's references are gone."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _split(tensors, start, stop):
    return tuple(t[start:stop] for t in tensors)


class BatchHalving:
    """One optimizer step over a batch, as micro-batches with gradient accumulation, halving the micro-batch on
    out-of-memory errors (Note [Halving without losing samples]).

    loss_fn(model, *piece) returns the mean loss over the piece. Reports steps, samples and caught OOMs to
    the probe itself."""

    def __init__(self, model, optimizer, loss_fn, micro_batch, min_batch=1, factor=0.5, step_count=0, on_halve=None):
        if micro_batch < 1 or min_batch < 1 or not 0 < factor < 1:
            raise ValueError("BatchHalving: micro_batch and min_batch must be >= 1 and 0 < factor < 1")
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.micro_batch = int(micro_batch)
        self.min_batch = int(min_batch)
        self.factor = factor
        self.step_count = int(step_count)
        self.on_halve = on_halve
        probe.manual_steps()

    def _accumulate(self, batch):
        n = int(batch[0].shape[0])
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for start in range(0, n, self.micro_batch):
            piece = _split(batch, start, min(n, start + self.micro_batch))
            loss = self.loss_fn(self.model, *piece) * (piece[0].shape[0] / n)
            loss.backward()
            total += float(loss.detach())
            del loss
        return total

    def step(self, *batch):
        """Runs one optimizer step over `batch` (tensors sharing their leading dimension). Returns the loss.
        Raises the out-of-memory error when even min_batch does not fit."""
        n = int(batch[0].shape[0])
        while True:
            failed = None
            try:
                loss = self._accumulate(batch)
                break
            except Exception as e:
                if not is_oom(e):
                    raise
                failed = str(e)  # only the message: the exception's traceback holds the activations
                probe.oom(caught=True, exc=e)
            # Outside the except block: the exception, its traceback and the failed attempt's tensors are gone.
            self.optimizer.zero_grad(set_to_none=True)
            release_memory()
            if self.micro_batch <= self.min_batch:
                raise oom_error("micro-batch %d (the minimum) does not fit: %s" % (self.micro_batch, failed))
            self.micro_batch = max(self.min_batch, int(self.micro_batch * self.factor))
            if self.on_halve is not None:
                self.on_halve(self.micro_batch)
        self.optimizer.step()
        self.step_count += 1
        probe.samples(n)
        probe.step(probe.numbered(self.step_count), batch_size=min(n, self.micro_batch), loss=loss)
        return loss


def retry_after_empty_cache(fn, *args, max_retries=3, before_retry=None, **kwargs):
    """Calls fn(*args, **kwargs); on an out-of-memory error releases memory and calls it again, at most
    max_retries times (Note [Releasing before the retry]). before_retry() runs before each retry (zero the
    gradients of the failed attempt there)."""
    attempt = 0
    while True:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if not is_oom(e) or attempt >= max_retries:
                raise
            probe.oom(caught=True, exc=e)
        attempt += 1
        if before_retry is not None:
            before_retry()
        release_memory()


# ---- checkpoints --------------------------------------------------------------------------------------------

def rng_state():
    """Every random generator a training loop may draw from: torch (CPU and CUDA), Python, NumPy."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        # As plain values, so that torch.load(weights_only=True) accepts the checkpoint.
        state["numpy"] = (name, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(cached))
    return state


def set_rng_state(state):
    torch.set_rng_state(state["torch"])
    random.setstate(_tuples(state["python"]))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    numpy = sys.modules.get("numpy")
    if numpy is not None and state.get("numpy") is not None:
        name, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((name, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def _tuples(x):
    """random.setstate wants tuples; a round trip through some serialisers gives lists."""
    return tuple(_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_save(obj, path):
    """torch.save to `path` so that a crash at any moment leaves either the old file or the new one, whole:
    write a temporary file in the same directory, flush and fsync it, rename it over `path`, fsync the
    directory."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            with probe.quiet():
                torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def save_checkpoint(path, model, optimizer, step, data=None, extra=None):
    """Saves everything a resumed run needs to continue as if never stopped: model, optimizer, `step` (the
    number of the last step it holds, in the job's numbering: with the default step_base of 1, the number
    of completed steps), every RNG, and the data position (`data`, whatever the loop needs to find its place)."""
    state = {
        "step": int(step),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": rng_state(),
        "data": data,
        "extra": extra,
    }
    atomic_save(state, path)
    probe.checkpoint_saved(path, step)


def _load(path):
    with probe.quiet():
        if int(torch.__version__.split(".")[0]) < 2:
            # 1.13's weights-only unpickler does not know floats yet; the file is our own.
            return torch.load(path, map_location="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(path, model, optimizer=None, restore_rng=True):
    """Restores a checkpoint written by save_checkpoint. Returns its state (`step`, `data`, `extra`), or None
    when there is none (start from scratch). A damaged file raises: resuming from it silently would be worse."""
    path = os.fspath(path)
    if not os.path.exists(path):
        return None
    state = _load(path)
    model.load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    if restore_rng and state.get("rng") is not None:
        set_rng_state(state["rng"])
    probe.checkpoint_loaded(path, state["step"])
    return state
