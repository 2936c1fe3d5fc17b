"""What the runner does for a job, done by hand: a real control block in /dev/shm, an event log, the probe's
environment, and a child Python process to run a script in."""
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

# sizeof(oomh::ControlBlock): header, 16 devices, 256 process slots, plan size + reserved, plan text.
CONTROL_SIZE = 128 + 64 * 16 + 256 * (16 + 8 * 16) + 8 + 64 * 1024
LINE = re.compile(r'^\{"t":\d+\.\d{6},"pid":\d+,"src":"probe","kind":"[a-z_]+","fields":\{.*\}\}\n$')
PHASES = ["none", "forward", "backward", "optimizer", "eval", "checkpoint", "data"]


class Job:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="oomh-pytest-")
        self.events = os.path.join(self.dir, "events.jsonl")
        self.name = "/oomh-pytest-%s" % uuid.uuid4().hex[:12]
        self.shm = "/dev/shm" + self.name
        buf = bytearray(CONTROL_SIZE)
        struct.pack_into("<IIII", buf, 0, 0x484D4F4F, 1, CONTROL_SIZE, 0)
        struct.pack_into("<q", buf, 24, -1)
        struct.pack_into("<q", buf, 40, -1)
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
            b = f.read(128)
        step, phase = struct.unpack_from("<qI", b, 24)
        (batch,) = struct.unpack_from("<q", b, 40)
        written, seen, caught, empty = struct.unpack_from("<QQQQ", b, 56)
        return {"step": step, "phase": PHASES[phase], "batch_size": batch, "events_written": written,
                "ooms_seen": seen, "ooms_caught": caught, "empty_cache_calls": empty}
