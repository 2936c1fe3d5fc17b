"""What the runner does for a job, done by hand: a real control block in /dev/shm, an event log, the probe's
environment, and a child Python process to run a script in."""
import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("OOMH_SOURCE_DIR") or os.path.abspath(os.path.join(HERE, "..", ".."))
PROBE_DIR = os.path.join(SOURCE, "python")
EXAMPLES = os.path.join(SOURCE, "examples", "python")

# The layout is the probe's own (python/oomharness/_control.py, checked against control_block.h by
# tests/runner/model/control_layout_test.cpp), loaded by path so that the package's __init__ is not run.
_spec = importlib.util.spec_from_file_location("_oomh_control", os.path.join(PROBE_DIR, "oomharness", "_control.py"))
CB = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CB)
CONTROL_SIZE = CB.CONTROL_BYTES
LINE = re.compile(r'^\{"t":\d+\.\d{6},"pid":\d+,"src":"probe","kind":"[a-z_]+","fields":\{.*\}\}\n$')
PHASES = [CB.PHASE_NAMES[i] for i in range(len(CB.PHASE_NAMES))]


class Job:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="oomh-pytest-")
        self.events = os.path.join(self.dir, "events.jsonl")
        self.name = "/oomh-pytest-%s" % uuid.uuid4().hex[:12]
        self.shm = "/dev/shm" + self.name
        buf = bytearray(CONTROL_SIZE)
        struct.pack_into("<I", buf, CB._OFF_MAGIC, CB.MAGIC)
        struct.pack_into("<I", buf, CB._OFF_VERSION, CB.VERSION)
        struct.pack_into("<I", buf, CB._OFF_SIZE, CONTROL_SIZE)
        struct.pack_into("<q", buf, CB._OFF_STEP, CB.UNKNOWN_STEP)
        struct.pack_into("<q", buf, CB._OFF_BATCH_SIZE, -1)
        with open(self.shm, "wb") as f:
            f.write(buf)

    def close(self):
        try:
            os.unlink(self.shm)
        except OSError:
            pass

    def env(self, probe=True, extra=None):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("OOMH_") and k != "OOMH_SOURCE_DIR":
                del env[k]
        env["PYTHONPATH"] = PROBE_DIR + os.pathsep + env.get("PYTHONPATH", "")
        if probe:
            env.update({"OOMH_PROBE": "1", "OOMH_EVENTS": self.events, "OOMH_CONTROL": self.name})
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
            b = f.read(CB._HEADER_BYTES)
        (step,) = struct.unpack_from("<q", b, CB._OFF_STEP)
        (phase,) = struct.unpack_from("<I", b, CB._OFF_PHASE)
        (batch,) = struct.unpack_from("<q", b, CB._OFF_BATCH_SIZE)
        field = lambda off: struct.unpack_from("<Q", b, off)[0]
        # A block's events: the shims' and the Python probes' (Note [Counters from Python]).
        written = field(CB._OFF_EVENTS_WRITTEN) + field(CB._OFF_PROBE_EVENTS_WRITTEN)
        return {"step": step, "phase": PHASES[phase], "batch_size": batch, "events_written": written,
                "probe_events_written": field(CB._OFF_PROBE_EVENTS_WRITTEN),
                "ooms_seen": field(CB._OFF_OOMS_SEEN), "ooms_caught": field(CB._OFF_OOMS_CAUGHT),
                "empty_cache_calls": field(CB._OFF_EMPTY_CACHE_CALLS)}
