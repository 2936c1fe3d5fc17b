"""Event lines from Python (python/oomharness/_events.py): sealed under the attempt's key (Note [Sealed event
lines] in include/oomharness/event_seal.h), and a process outside the shim that holds device memory says so
(Note [Processes outside the shim] in runner/src/exec/escapes.h)."""
import hashlib
import json
import os
import re
import unittest

from harness import ABI, Job

from oomharness import _events

KEY = bytes(range(1, 33))
SEALED = re.compile(rb'^(\{.*),"seal":"([0-9a-f]{32})"\}\n$')

# One job process: its job context writes a samples event, then a step that holds device memory, twice.
EMIT = """
from oomharness import _job
ctx = _job.current()
ctx.emit("samples", count=3)
ctx.emit("step", step=1, batch_size=4, allocated=4096, reserved=8192)
ctx.emit("step", step=2, batch_size=4, allocated=4096, reserved=8192)
"""


def unseal(line, key):
    """What was sealed, or None when the seal is missing or not `key`'s (the runner's check, in Python)."""
    m = SEALED.match(line)
    if not m:
        return None
    text = m.group(1) + b"}"
    mac = hashlib.blake2b(text, key=key, digest_size=16).hexdigest().encode()
    return text if mac == m.group(2) else None


class Lines(unittest.TestCase):
    def test_a_line_written_by_hand_is_the_one_json_writes(self):
        # Note [An event line without the encoder] (_events.py): flat fields by hand, the rest through json;
        # either way the line json.dumps would write.
        values = [0, -5, 2 ** 70, True, False, None, 1.5, 1 / 3, -0.0, 1e300, float("nan"), float("inf"), "inputs",
                  'a"b', "a\\b", "\u00e9", "\x7f", "tab\t", "x" * 1001, [1, 2.5, "q", float("nan")], {"samples": 4}]
        for i, v in enumerate(values):
            fields = {"step": i, "value": v}
            line = _events.format_line("step", fields, now_ns=1_700_000_000_123_456_000, pid=42)
            clean = {k: _events._clean(x) for k, x in fields.items()}
            body = json.dumps(clean, separators=(",", ":"), allow_nan=False).encode()
            self.assertEqual(line, b'{"t":1700000000.123456,"pid":42,"src":"probe","kind":"step","fields":' + body
                             + b"}\n", repr(v))

    def test_a_forked_child_writes_its_own_pid(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, _events.format_line("step", {"step": 1}))
            os._exit(0)
        os.waitpid(pid, 0)
        child = json.loads(os.read(r, 4096))
        os.close(r)
        os.close(w)
        self.assertEqual(child["pid"], pid)
        self.assertEqual(json.loads(_events.format_line("step", {"step": 1}))["pid"], os.getpid())


class Seals(unittest.TestCase):
    def test_a_sealed_line_is_the_line_and_its_keyed_blake2b(self):
        line = _events.format_line("step", {"step": 5, "batch_size": 64}, now_ns=1_700_000_000_123_456_000, pid=42)
        sealed = _events.seal_line(line, KEY)
        self.assertEqual(unseal(sealed, KEY), line[:-1])
        self.assertIsNone(unseal(sealed, bytes(32)), "another key verifies the seal")
        self.assertEqual(json.loads(unseal(sealed, KEY))["fields"], {"step": 5, "batch_size": 64})
        # The same function the C++ side computes (tests/abi/events_test.cpp holds the same vector).
        self.assertEqual(hashlib.blake2b(b"abc", key=KEY, digest_size=16).hexdigest(), "463d1373fbee2ab6b33c16b31b5f4889")
        # Any change of the sealed text breaks it.
        self.assertIsNone(unseal(sealed.replace(b'"step":5', b'"step":6'), KEY))

    def test_a_job_seals_with_its_blocks_key_and_without_a_key_seals_nothing(self):
        job = Job()
        try:
            r = job.run(EMIT)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [line.encode() for line in job.lines()]
            self.assertEqual(len(lines), 3, lines)
            self.assertTrue(all(b'"seal"' not in line for line in lines), lines)
            os.truncate(job.events, 0)
            offset, size, _ = ABI.CONTROL_FIELDS["seal_key"]
            self.assertEqual(size, len(KEY))
            with open(job.shm, "r+b") as f:
                f.seek(offset)
                f.write(KEY)
            r = job.run(EMIT)
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = [line.encode() for line in job.lines()]
            texts = [unseal(line, KEY) for line in lines]
            self.assertTrue(all(texts), lines)
            kinds = [json.loads(t)["kind"] for t in texts]
            # This process has no shim: the first memory figure makes it say so, once.
            self.assertEqual(kinds, ["samples", "outside_shim", "step", "step"])
            outside = json.loads(texts[1])["fields"]
            self.assertEqual(outside["shim"], "absent")
            self.assertEqual(outside["via"], "probe")
            self.assertEqual((outside["allocated"], outside["reserved"]), (4096, 8192))
            self.assertIn("job.py", outside["command"])
        finally:
            job.close()


if __name__ == "__main__":
    unittest.main()
