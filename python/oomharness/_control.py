"""The control block seen from Python: the probe's side of include/oomharness/control_block.h.

Note [Control block from Python]
The runner creates one sealed memfd per attempt and names it in OOMH_CONTROL by its path
("/proc/<runner pid>/fd/<n>"); a shim on its own creates a POSIX shared-memory segment ("/oomh-solo-<pid>"),
on Linux the file /dev/shm/<name without the slash>. The probe maps it with mmap and writes the
fields it owns (step, phase, batch size, OOM and empty_cache counters) at the fixed offsets that
control_block.h checks with static_asserts. Each field is written through a ctypes integer laid over the
mapping, so a write is one aligned store of the field's width and the shim, reading the same field from C++
in another thread, never sees half of it.

Note [Counters from Python]
ctypes has no atomic read-modify-write, so `value += 1` is a load and a store: an increment another writer
makes in between is lost. So the probe never adds to a counter another kind of writer adds to:
- events_written belongs to the shims (and the C++ probe), which add to it with fetch_add from any thread;
  the Python probe counts its event lines in its own field, probe_events_written (@112), and a block's
  events are the sum of the two;
- the Python probe's counters (probe_events_written, ooms_seen, ooms_caught, empty_cache_calls) can still
  have several Python writers: the processes of one job that share the block (a torchrun started by the
  job, DataLoader workers forked after the probe started). Their adds are serialised by a POSIX record lock
  (fcntl.lockf) on the block's file, which every Python probe takes around its add;
- a lock is two system calls, which every step's event line would pay: the event lines are counted in the
  process and added to probe_events_written EVENT_BATCH at a time, and the rest at the process's exit
  (flush(), which the job context registers with atexit), so the figure lags by fewer than EVENT_BATCH lines
  while a process runs, and a process killed by a signal (or ended by os._exit) leaves its last lines
  uncounted; a forked child starts its own count.
What is left: a C++ probe and a Python probe counting OOMs in the same block at the same instant (a job
that mixes both) may lose one; the counters are statistics (control_block.h), no check decides by them.
"""

import ctypes
import fcntl
import mmap
import os

from . import _abi

MAGIC = _abi.CONTROL_MAGIC
VERSION = _abi.CONTROL_VERSION
UNKNOWN_STEP = _abi.UNKNOWN_STEP
CONTROL_BYTES = _abi.CONTROL_BYTES
_HEADER_BYTES = _abi.CONTROL_HEADER_BYTES
# Phase numbers are ABI (oomh::Phase).
PHASES = dict(_abi.PHASES)
PHASE_NAMES = {v: k for k, v in PHASES.items()}
_CTYPES = {(4, False): ctypes.c_uint32, (4, True): ctypes.c_int32, (8, False): ctypes.c_uint64, (8, True): ctypes.c_int64}


# The bytes every Python probe's add locks (Note [Counters from Python]): probe_events_written's.
_LOCKED = _abi.CONTROL_FIELDS["probe_events_written"][0]


EVENT_BATCH = 64  # Note [Counters from Python]


def _field(mapping, name):
    """The ctypes integer laid over field `name` of the block (_abi.CONTROL_FIELDS: offset, width, signed)."""
    offset, size, signed = _abi.CONTROL_FIELDS[name]
    return _CTYPES[(size, signed)].from_buffer(mapping, offset)


def shm_path(name):
    """The file behind the POSIX shared-memory name `name` ("/oomh-1" -> "/dev/shm/oomh-1"); a path
    ("/proc/<runner pid>/fd/<n>": the runner's sealed memfd, Note [A block the job cannot take down] in
    control_block.h) is the file itself."""
    if "/" in name.lstrip("/"):
        return name
    return os.path.join("/dev/shm", name.lstrip("/"))


class ControlBlock:
    """A mapped control block. open() returns None when the segment is missing or not one we understand."""

    def __init__(self, mapping, fd=None):
        self._map = mapping
        self._fd = fd  # kept open for the lock of Note [Counters from Python]; None: no lock (one writer)
        self._uncounted = 0  # event lines not added to probe_events_written yet
        # A forked child (a DataLoader worker) starts its own count: its parent adds the lines it wrote.
        os.register_at_fork(after_in_child=self._forked)
        self._step = _field(mapping, "step")
        self._phase = _field(mapping, "phase")
        self._batch_size = _field(mapping, "batch_size")
        self._events_written = _field(mapping, "events_written")
        self._probe_events_written = _field(mapping, "probe_events_written")
        self._ooms_seen = _field(mapping, "ooms_seen")
        self._ooms_caught = _field(mapping, "ooms_caught")
        self._empty_cache_calls = _field(mapping, "empty_cache_calls")

    @classmethod
    def open(cls, name):
        if not name:
            return None
        try:
            fd = os.open(shm_path(name), os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            size = os.fstat(fd).st_size
            if size < _HEADER_BYTES:
                os.close(fd)
                return None
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError):
            os.close(fd)
            return None
        magic = _field(mapping, "magic").value
        version = _field(mapping, "version").value
        declared = _field(mapping, "size").value
        if magic != MAGIC or version != VERSION or declared > size or declared < _HEADER_BYTES:
            os.close(fd)
            return None
        return cls(mapping, fd)

    def _add(self, *counters, by=1):
        """Adds `by` to each counter, under the lock of Note [Counters from Python]."""
        locked = False
        if self._fd is not None:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX, 8, _LOCKED, os.SEEK_SET)
                locked = True
            except OSError:
                pass  # a file that takes no record locks: one writer is the usual case
        try:
            for c in counters:
                c.value += by
        finally:
            if locked:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 8, _LOCKED, os.SEEK_SET)

    # Fields the probe owns.
    @property
    def step(self):
        return self._step.value

    @step.setter
    def step(self, value):
        self._step.value = int(value)

    @property
    def phase(self):
        return PHASE_NAMES.get(self._phase.value, "none")

    @phase.setter
    def phase(self, name):
        self._phase.value = PHASES[name]

    @property
    def batch_size(self):
        return self._batch_size.value

    @batch_size.setter
    def batch_size(self, value):
        self._batch_size.value = int(value)

    def seal_key(self):
        """The attempt's key for sealing event lines (Note [Sealed event lines] in include/oomharness/event_seal.h),
        or None where the block holds none (all zero: a shim on its own)."""
        field = _abi.CONTROL_FIELDS.get("seal_key")
        if field is None:
            return None
        offset, size, _ = field
        key = bytes(self._map[offset:offset + size])
        return key if any(key) else None

    def count_event(self):
        self._uncounted += 1
        if self._uncounted >= EVENT_BATCH:
            self.flush()

    def _forked(self):
        self._uncounted = 0

    def flush(self):
        """Adds the event lines not counted yet (Note [Counters from Python])."""
        if self._uncounted:
            n, self._uncounted = self._uncounted, 0
            self._add(self._probe_events_written, by=n)

    def count_oom(self, caught):
        if caught:
            self._add(self._ooms_seen, self._ooms_caught)
        else:
            self._add(self._ooms_seen)

    def count_caught(self):
        self._add(self._ooms_caught)

    def count_empty_cache(self):
        self._add(self._empty_cache_calls)

    def counters(self):
        """The probe's counters, for tests and debugging."""
        self.flush()
        return {
            "events_written": self._events_written.value + self._probe_events_written.value,
            "probe_events_written": self._probe_events_written.value,
            "ooms_seen": self._ooms_seen.value,
            "ooms_caught": self._ooms_caught.value,
            "empty_cache_calls": self._empty_cache_calls.value,
        }
