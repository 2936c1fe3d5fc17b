"""What the runner does for a job, done by hand: a real control block in /dev/shm, an event log, the probe's
environment, and a child Python process to run a script in."""
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("OOMH_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
PROBE_DIR = os.path.join(SOURCE, "python")
EXAMPLES = os.path.join(SOURCE, "examples", "python")

# The layout is the C++ one, as the generated python/oomharness/_abi.py holds it (Note [Generated, not checked] in
# runner/src/app/python_abi.cpp), loaded by path so that the package's __init__ is not run.
_spec = importlib.util.spec_from_file_location("_oomh_abi", os.path.join(PROBE_DIR, "oomharness", "_abi.py"))
ABI = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ABI)
CONTROL_SIZE = ABI.CONTROL_BYTES
LINE = re.compile(r'^\{"t":\d+\.\d{6},"pid":\d+,"src":"probe","kind":"[a-z_]+","fields":\{.*\}\}\n$')
PHASES = [name for name, _ in sorted(ABI.PHASES, key=lambda p: p[1])]
_FORMAT = {(4, False): "<I", (4, True): "<i", (8, False): "<Q", (8, True): "<q"}


def _pack(buf, name, value):
    offset, size, signed = ABI.CONTROL_FIELDS[name]
    struct.pack_into(_FORMAT[(size, signed)], buf, offset, value)


def _unpack(data, name):
    offset, size, signed = ABI.CONTROL_FIELDS[name]
    return struct.unpack_from(_FORMAT[(size, signed)], data, offset)[0]


class Job:
    def __init__(self, seal_key=None):
        self.dir = tempfile.mkdtemp(prefix="oomh-pytest-")
        self.events = os.path.join(self.dir, "events.jsonl")
        self.name = "/oomh-pytest-%s" % uuid.uuid4().hex[:12]
        self.shm = "/dev/shm" + self.name
        buf = bytearray(CONTROL_SIZE)
        _pack(buf, "magic", ABI.CONTROL_MAGIC)
        _pack(buf, "version", ABI.CONTROL_VERSION)
        _pack(buf, "size", CONTROL_SIZE)
        _pack(buf, "step", ABI.UNKNOWN_STEP)
        _pack(buf, "batch_size", -1)
        if seal_key is not None:  # as the runner gives an attempt (Note [Sealed event lines]): lines get a seal
            offset, size, _ = ABI.CONTROL_FIELDS["seal_key"]
            buf[offset:offset + size] = seal_key[:size].ljust(size, b"\0")
        with open(self.shm, "wb") as f:
            f.write(buf)

    def close(self):
        """The control block and the job's folder go: a test leaves nothing behind."""
        try:
            os.unlink(self.shm)
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self, probe=True, extra=None):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("OOMH_") and k != "OOMH_SOURCE_DIR":
                del env[k]
        env["PYTHONPATH"] = PROBE_DIR + os.pathsep + env.get("PYTHONPATH", "")
        if probe:
            env.update({"OOMH_PROBE": "1", "OOMH_EVENTS": self.events, "OOMH_CONTROL": self.name,
                        "OOMH_CHECK_EVENTS": "1"})
        env.update(extra or {})
        return env

    def run(self, code, probe=True, extra_env=None, args=(), timeout=240):
        script = os.path.join(self.dir, "job.py")
        with open(script, "w") as f:
            f.write(code)
        return subprocess.run([sys.executable, script, *args], env=self.env(probe, extra_env), cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout)

    def run_file(self, path, args, probe=True, timeout=240):
        return subprocess.run([sys.executable, path, *args], env=self.env(probe), cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout)

    def lines(self):
        if not os.path.exists(self.events):
            return []
        with open(self.events) as f:
            return f.readlines()

    def read_events(self):
        return [json.loads(line) for line in self.lines()]

    def kinds(self):
        return [e["kind"] for e in self.read_events()]

    def block(self):
        with open(self.shm, "rb") as f:
            b = f.read(ABI.CONTROL_HEADER_BYTES)
        # A block's events: the shims' and the Python probes' (Note [Counters from Python]).
        written = _unpack(b, "events_written") + _unpack(b, "probe_events_written")
        return {"step": _unpack(b, "step"), "phase": PHASES[_unpack(b, "phase")], "batch_size": _unpack(b, "batch_size"),
                "events_written": written, "probe_events_written": _unpack(b, "probe_events_written"),
                "ooms_seen": _unpack(b, "ooms_seen"), "ooms_caught": _unpack(b, "ooms_caught"),
                "empty_cache_calls": _unpack(b, "empty_cache_calls")}
