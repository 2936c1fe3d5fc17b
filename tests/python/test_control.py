"""The control block from Python (python/oomharness/_control.py, Note [Counters from Python]): several
Python writers of one block lose no count, and the probe never adds to the shim's events_written."""
import multiprocessing
import os
import struct
import unittest

from harness import ABI, Job

from oomharness import _control as CB

EVENTS_WRITTEN = ABI.CONTROL_FIELDS["events_written"][0]

N = 20000


def bump(name, n):
    cb = CB.ControlBlock.open(name)
    for _ in range(n):
        cb.count_event()
        cb.count_oom(caught=True)
    cb.flush()  # os._exit runs no atexit (Note [Counters from Python]: the lines are counted in batches)
    os._exit(0)


class Counters(unittest.TestCase):
    def setUp(self):
        self.job = Job()

    def tearDown(self):
        self.job.close()

    def test_writers_sharing_a_block_lose_no_count(self):
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=bump, args=(self.job.name, N)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            self.assertEqual(p.exitcode, 0)
        block = self.job.block()
        self.assertEqual(block["probe_events_written"], 3 * N)
        self.assertEqual(block["ooms_seen"], 3 * N)
        self.assertEqual(block["ooms_caught"], 3 * N)

    def test_the_shims_counter_is_left_to_the_shim(self):
        with open(self.job.shm, "r+b") as f:  # what a shim appended: 7 lines
            f.seek(EVENTS_WRITTEN)
            f.write(struct.pack("<Q", 7))
        cb = CB.ControlBlock.open(self.job.name)
        for _ in range(5):
            cb.count_event()
        with open(self.job.shm, "rb") as f:
            f.seek(EVENTS_WRITTEN)
            (shim,) = struct.unpack("<Q", f.read(8))
        self.assertEqual(shim, 7)
        self.assertEqual(cb.counters()["events_written"], 12)
        self.assertEqual(self.job.block()["events_written"], 12)


if __name__ == "__main__":
    unittest.main()
