"""The control block seen from Python: the probe's side of include/oomharness/control_block.h.

Note [Control block from Python]
The runner creates one sealed memfd per attempt and names it in OOMH_CONTROL by its path
("/proc/<runner pid>/fd/<n>"); a shim on its own creates a POSIX shared-memory segment ("/oomh-solo-<pid>"),
on Linux the file /dev/shm/<name without the slash>. The probe maps it with mmap and writes the
fields it owns (step, phase, batch size, OOM and empty_cache counters) at the fixed offsets that
control_block.h checks with static_asserts. Each field is written through a ctypes integer laid over the
mapping, so a write is one aligned store of the field's width and the shim, reading the same field from C++
in another thread, never sees half of it. The offsets below are checked against the C++ layout by
tests/runner/model/control_layout_test.cpp, which reads this file.

Note [Counters from Python]
ctypes has no atomic read-modify-write, so `value += 1` is a load and a store: an increment another writer
makes in between is lost. So the probe never adds to a counter another kind of writer adds to:
- events_written belongs to the shims (and the C++ probe), which add to it with fetch_add from any thread;
  the Python probe counts its event lines in its own field, probe_events_written (@112), and a block's
  events are the sum of the two;
- the Python probe's counters (probe_events_written, ooms_seen, ooms_caught, empty_cache_calls) can still
  have several Python writers: the processes of one job that share the block (a torchrun started by the
  job, DataLoader workers forked after the probe started). Their increments are serialised by a POSIX
  record lock (fcntl.lockf) on the block's file, which every Python probe takes around its add.
What is left: a C++ probe and a Python probe counting OOMs in the same block at the same instant (a job
that mixes both) may lose one; the counters are statistics (control_block.h), no check decides by them.
"""

import ctypes
import fcntl
import mmap
import os

MAGIC = 0x484D4F4F
VERSION = 1
UNKNOWN_STEP = -1

# Offsets of the fields the probe reads or writes (control_block.h).
_OFF_MAGIC = 0
_OFF_VERSION = 4
_OFF_SIZE = 8
_OFF_STEP = 24
_OFF_PHASE = 32
_OFF_BATCH_SIZE = 40
_OFF_EVENTS_WRITTEN = 56
_OFF_OOMS_SEEN = 64
_OFF_OOMS_CAUGHT = 72
_OFF_EMPTY_CACHE_CALLS = 80
_OFF_PROBE_EVENTS_WRITTEN = 112
_HEADER_BYTES = 128
# sizeof(oomh::ControlBlock): the header, 16 devices of 64 bytes, 256 process slots of 16 + 8 * 16 bytes,
# plan_size and its reserved word, the plan text (64 KiB).
CONTROL_BYTES = 128 + 64 * 16 + 256 * (16 + 8 * 16) + 8 + 64 * 1024

# Phase numbers are ABI (oomh::Phase).
PHASES = {"none": 0, "forward": 1, "backward": 2, "optimizer": 3, "eval": 4, "checkpoint": 5, "data": 6}
PHASE_NAMES = {v: k for k, v in PHASES.items()}


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
        self._step = ctypes.c_int64.from_buffer(mapping, _OFF_STEP)
        self._phase = ctypes.c_uint32.from_buffer(mapping, _OFF_PHASE)
        self._batch_size = ctypes.c_int64.from_buffer(mapping, _OFF_BATCH_SIZE)
        self._events_written = ctypes.c_uint64.from_buffer(mapping, _OFF_EVENTS_WRITTEN)
        self._probe_events_written = ctypes.c_uint64.from_buffer(mapping, _OFF_PROBE_EVENTS_WRITTEN)
        self._ooms_seen = ctypes.c_uint64.from_buffer(mapping, _OFF_OOMS_SEEN)
        self._ooms_caught = ctypes.c_uint64.from_buffer(mapping, _OFF_OOMS_CAUGHT)
        self._empty_cache_calls = ctypes.c_uint64.from_buffer(mapping, _OFF_EMPTY_CACHE_CALLS)

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
        magic = ctypes.c_uint32.from_buffer(mapping, _OFF_MAGIC).value
        version = ctypes.c_uint32.from_buffer(mapping, _OFF_VERSION).value
        declared = ctypes.c_uint32.from_buffer(mapping, _OFF_SIZE).value
        if magic != MAGIC or version != VERSION or declared > size or declared < _HEADER_BYTES:
            os.close(fd)
            return None
        return cls(mapping, fd)

    def _add(self, *counters):
        """Adds one to each counter, under the lock of Note [Counters from Python]."""
        locked = False
        if self._fd is not None:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX, 8, _OFF_PROBE_EVENTS_WRITTEN, os.SEEK_SET)
                locked = True
            except OSError:
                pass  # a file that takes no record locks: one writer is the usual case
        try:
            for c in counters:
                c.value += 1
        finally:
            if locked:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 8, _OFF_PROBE_EVENTS_WRITTEN, os.SEEK_SET)

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

    def count_event(self):
        self._add(self._probe_events_written)

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
        return {
            "events_written": self._events_written.value + self._probe_events_written.value,
            "probe_events_written": self._probe_events_written.value,
            "ooms_seen": self._ooms_seen.value,
            "ooms_caught": self._ooms_caught.value,
            "empty_cache_calls": self._empty_cache_calls.value,
        }
