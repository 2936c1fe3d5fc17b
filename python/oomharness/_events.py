"""Event lines, exactly as include/oomharness/events.h writes them (docs/events.md).

    {"t":1763780000.123456,"pid":4242,"src":"probe","kind":"step","fields":{"step":5,"batch_size":64}}

Each line goes out in one os.write on a descriptor opened with O_APPEND, so lines of the job's several
processes (and of the shim, in this same process) never interleave. The kinds and the fields each may carry
are the C++ table's (Note [Event fields] in include/oomharness/events.h), which this package gets through
the generated _abi.py; with check on (OOMH_CHECK_EVENTS=1, which the project's tests set), writing a kind or
a field the table lacks raises SchemaError, which the parts do not swallow, so the test fails.
"""

import hashlib
import json
import math
import os
import time

from . import _abi

SRC = "probe"
# A line is at most this long, like EventLine::kCapacity; long strings are cut to keep under it.
_MAX_STRING = 1000
_ALLOWED = {kind: frozenset(fields) | frozenset(_abi.ANY_PROBE_FIELDS) | frozenset(_abi.ANY_FIELDS)
            for kind, (_, fields) in _abi.EVENT_KINDS.items()}


class SchemaError(Exception):
    """A kind or a field the C++ event table lacks (only raised with check on)."""


def check_fields(kind, fields):
    """Raises SchemaError when `kind` is not a kind, or `fields` holds a field it does not carry."""
    allowed = _ALLOWED.get(kind)
    if allowed is None:
        raise SchemaError("oomharness: the probe wrote the event kind %r, which include/oomharness/events.h lacks" % kind)
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise SchemaError("oomharness: the probe wrote field(s) %s of %r, which kEventFields in "
                          "include/oomharness/events.h does not list" % (", ".join(unknown), kind))


def _clean(value):
    """A JSON-safe copy of a field value: NaN and infinities become null, long strings are cut."""
    kind = type(value)
    if kind is int or kind is bool or value is None:  # the common case first: steps, sizes, flags
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value if len(value) <= _MAX_STRING else value[:_MAX_STRING]
    if isinstance(value, (list, tuple)):  # a breakdown's largest tensors (docs/events.md)
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    try:  # numpy and torch scalars
        return _clean(value.item())
    except Exception:
        return _clean(str(value))


_KIND_TEXT = {}  # kind -> its JSON string (a handful of kinds: each is dumped once)
_KEY_TEXT = {}   # field name -> '"name":' (the fields of the table: each is dumped once)
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _plain(s):
    """Whether json writes `s` as it is, between quotes (no escape, no \\u), and whole."""
    return len(s) <= _MAX_STRING and s.isascii() and s.isprintable() and '"' not in s and "\\" not in s


def _body(fields):
    """The JSON text of `fields`. Note [An event line without the encoder]."""
    parts = []
    for k, v in fields.items():
        key = _KEY_TEXT.get(k)
        if key is None:
            key = json.dumps(str(k)) + ":"
            if len(_KEY_TEXT) < 1024:
                _KEY_TEXT[k] = key
        kind = type(v)
        if kind is int:
            parts.append(key + int.__repr__(v))
        elif kind is bool:
            parts.append(key + ("true" if v else "false"))
        elif kind is str and _plain(v):
            parts.append(key + '"' + v + '"')
        elif v is None:
            parts.append(key + "null")
        elif kind is float:
            parts.append(key + (float.__repr__(v) if math.isfinite(v) else "null"))
        else:
            parts.append(key + _COMPACT.encode(_clean(v)))
    return "{" + ",".join(parts) + "}"


# Note [An event line without the encoder]
# The step event is written at every step, and on a small step its line was most of what the probe cost:
# json's encoder costs more than ten microseconds a line inside a training loop, though a few alone. A flat
# field (an int, a bool, None, a float, a string json writes as it is) is written by hand, as json would
# write it; anything else (a string to escape or cut, a list, a dict: a breakdown) goes through json. The
# pid is read once, and again in a forked child (a DataLoader worker), not with a system call per line.
_pid = os.getpid()


def _forked():
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def format_line(kind, fields, now_ns=None, pid=None):
    """The event line (with its newline) for `kind` with `fields`, as bytes."""
    ns = time.time_ns() if now_ns is None else now_ns
    kind_text = _KIND_TEXT.get(kind)
    if kind_text is None:
        kind_text = _KIND_TEXT.setdefault(kind, json.dumps(kind))
    return ('{"t":%d.%06d,"pid":%d,"src":"%s","kind":%s,"fields":%s}\n' % (
        ns // 1_000_000_000, (ns // 1000) % 1_000_000, _pid if pid is None else pid, SRC, kind_text,
        _body(fields))).encode("utf-8")


_SEAL_PREFIX = b',"seal":"'


def sealer(key):
    """The keyed hash every seal under `key` starts from (copied per line: the key's block is hashed once)."""
    return hashlib.blake2b(key=key, digest_size=16)


def seal_line(line, key):
    """The line (bytes ending in "}\n", as format_line makes it) with its seal (Note [Sealed event lines] in
    include/oomharness/event_seal.h): a keyed BLAKE2b-128 of the line without its newline, put before the
    closing brace. `key` is the key's bytes, or what sealer() made of them."""
    text = line[:-1]
    mac = key.copy() if not isinstance(key, bytes) else hashlib.blake2b(key=key, digest_size=16)
    mac.update(text)
    return text[:-1] + _SEAL_PREFIX + mac.hexdigest().encode("ascii") + b'"}\n'


class EventLog:
    """An event log opened for appending; write() never raises, but for SchemaError under check. With `key`
    (the attempt's, from the control block) each line is sealed."""

    def __init__(self, path, check=False, key=None):
        self.fd = -1
        self.check = check
        self.key = key
        self._sealer = sealer(key) if key is not None else None
        if path:
            try:
                self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except OSError:
                self.fd = -1

    def write(self, kind, fields):
        """Appends one event. Returns True when the whole line was written."""
        if self.check:
            check_fields(kind, fields)
        if self.fd < 0:
            return False
        try:
            line = format_line(kind, fields)
            if self._sealer is not None:
                line = seal_line(line, self._sealer)
            return os.write(self.fd, line) == len(line)
        except Exception:
            return False
