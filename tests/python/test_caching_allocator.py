"""The caching-allocator model of the virtual CUDA device (Note [The caching allocator, modelled] in
python/oomharness/virtual_device/allocator.py): PyTorch's rules, checked against hand-counted figures, and
its segments asked of the CPU driver double through the real shim."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

from oomharness.virtual_device.allocator import CachingAllocatorModel, MIN_BLOCK, round_size, segment_size
from oomharness.virtual_device.segments import BudgetSegments

MiB = 1 << 20


def model(total=1 << 30):
    return CachingAllocatorModel(BudgetSegments(total), oom_error=lambda m: MemoryError(m))


class Sizes(unittest.TestCase):
    def test_rounding_and_segments(self):
        self.assertEqual(round_size(1), 512)
        self.assertEqual(round_size(512), 512)
        self.assertEqual(round_size(513), 1024)
        self.assertEqual(segment_size(round_size(4)), 2 * MiB)         # small pool
        self.assertEqual(segment_size(MiB), 2 * MiB)                   # at most 1 MiB: small
        self.assertEqual(segment_size(MiB + 512), 20 * MiB)            # under 10 MiB: a 20 MiB segment
        self.assertEqual(segment_size(10 * MiB), 10 * MiB)             # 10 MiB and up: rounded to 2 MiB
        self.assertEqual(segment_size(11 * MiB), 12 * MiB)


class Pools(unittest.TestCase):
    def test_small_requests_share_a_2_mib_segment(self):
        m = model()
        blocks = [m.malloc(1000) for _ in range(100)]
        self.assertEqual(m.source.requests, [2 * MiB])
        self.assertEqual(m.allocated, 100 * 1024)
        self.assertEqual(m.reserved, 2 * MiB)
        for b in blocks:
            m.free(b)
        self.assertEqual(m.allocated, 0)
        self.assertEqual(m.reserved, 2 * MiB, "freed blocks stay cached")
        self.assertEqual(m.empty_cache(), 2 * MiB)
        self.assertEqual(m.reserved, 0)

    def test_best_fit_and_split_rules(self):
        m = model()
        a = m.malloc(4 * MiB)          # a 20 MiB segment, split: 16 MiB remain free
        self.assertEqual(m.source.requests, [20 * MiB])
        b = m.malloc(3 * MiB)          # best fit: the 16 MiB remainder, split again
        self.assertEqual(m.source.requests, [20 * MiB])
        self.assertEqual(a.segment, b.segment)
        c = m.malloc(12 * MiB + 1)     # 13 MiB remain of the segment: fits, remainder under 1 MiB is not split
        self.assertEqual(c.segment, a.segment)
        self.assertEqual(c.size, 13 * MiB, "a large-pool remainder of 1 MiB or less stays with the block")
        self.assertEqual(m.allocated, 4 * MiB + 3 * MiB + 13 * MiB)

    def test_freed_neighbours_coalesce(self):
        m = model()
        a, b, c = m.malloc(4 * MiB), m.malloc(4 * MiB), m.malloc(4 * MiB)
        m.free(a)
        m.free(c)
        self.assertEqual(m.empty_cache(), 0, "the segment still holds b")
        m.free(b)
        self.assertEqual(len(m.free_large), 1, "a, b, c and the tail merged into one block")
        self.assertEqual(m.free_large[0].size, 20 * MiB)
        self.assertEqual(m.empty_cache(), 20 * MiB)

    def test_a_closed_form_count(self):
        # An MLP's parameters and Adam state: each tensor rounded to 512 bytes, exactly.
        m = model()
        sizes = [256 * 1024 * 4, 1024 * 4, 1024 * 16 * 4, 16 * 4]  # weights and biases, float32
        for _ in range(4):  # parameters, gradients, exp_avg, exp_avg_sq
            for s in sizes:
                m.malloc(s)
        self.assertEqual(m.allocated, 4 * sum(round_size(s) for s in sizes))


class Faults(unittest.TestCase):
    def test_one_refused_segment_is_absorbed_by_the_allocators_retry(self):
        m = model()
        cached = m.malloc(30 * MiB)
        m.free(cached)                 # 30 MiB cached, wholly free
        m.source.refuse = 1
        block = m.malloc(40 * MiB)     # refused, the cache is emptied, asked again: granted
        self.assertEqual(m.num_alloc_retries, 1)
        self.assertEqual(m.num_ooms, 0)
        self.assertEqual(m.reserved, 40 * MiB)
        self.assertEqual(block.size, 40 * MiB)

    def test_two_refusals_raise_pytorchs_message(self):
        m = model()
        m.source.refuse = 2
        with self.assertRaises(MemoryError) as e:
            m.malloc(64 * MiB)
        self.assertIn("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 1.00 GiB",
                      str(e.exception))
        self.assertEqual(m.num_ooms, 1)

    def test_a_budget_and_a_fraction_act_as_caps(self):
        m = model(total=100 * MiB)
        m.malloc(60 * MiB)
        with self.assertRaises(MemoryError):
            m.malloc(60 * MiB)
        f = model()
        f.fraction_limit = 50 * MiB
        f.malloc(40 * MiB)
        with self.assertRaises(MemoryError) as e:
            f.malloc(20 * MiB)
        self.assertIn("total capacity of 50.00 MiB", str(e.exception))

    def test_stats_use_pytorchs_keys(self):
        m = model()
        b = m.malloc(3000)
        s = m.stats()
        self.assertEqual(s["allocated_bytes.all.current"], 3072)
        self.assertEqual(s["reserved_bytes.all.current"], 2 * MiB)
        m.free(b)
        self.assertEqual(m.stats()["allocated_bytes.all.peak"], 3072)


@unittest.skipUnless(os.environ.get("OOMH_BUILD_DIR"), "needs the build (OOMH_BUILD_DIR): run through ctest")
class ThroughTheShim(unittest.TestCase):
    """Segments asked of the CPU driver double with the real shim preloaded: the job's faults and caps are the
    shim's own, and so are its events (docs/design/DESIGN.md, "One rule engine")."""

    def run_model(self, env_extra, script):
        build = os.environ["OOMH_BUILD_DIR"]
        here = os.path.dirname(os.path.abspath(__file__))
        with tempfile.TemporaryDirectory() as tmp:
            events = os.path.join(tmp, "events.jsonl")
            env = dict(os.environ)
            env.update({
                "LD_PRELOAD": os.path.join(build, "injector", "liboomharness_inject.so"),
                "LD_LIBRARY_PATH": os.path.join(build, "cuda_double"),
                "OOMH_EVENTS": events,
                "CUDA_DOUBLE_MEMORY": "1GiB",
                "PYTHONPATH": os.path.join(here, "..", "..", "python"),
            })
            env.update(env_extra)
            proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
            lines = []
            if os.path.exists(events):
                with open(events) as f:
                    lines = [json.loads(l) for l in f if l.strip()]
            return proc, lines

    PROGRAM = """
from oomharness.virtual_device.allocator import CachingAllocatorModel
from oomharness.virtual_device.segments import DriverSegments
m = CachingAllocatorModel(DriverSegments(), oom_error=lambda msg: MemoryError(msg))
kept = [m.malloc(30 << 20)]
m.free(m.malloc(30 << 20))
try:
    m.malloc(100 << 20)
    print("granted", m.num_alloc_retries, m.reserved)
except MemoryError as e:
    print("oom", m.num_alloc_retries, str(e)[:60])
"""

    def test_one_injected_failure_is_absorbed_and_two_reach_the_code(self):
        once = {"OOMH_PLAN": json.dumps({"rules": [{"name": "third", "when": {"nth": 3}, "fail": {"times": 1}}]})}
        proc, events = self.run_model(once, self.PROGRAM)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout.split()[:2], ["granted", "1"], proc.stdout)
        injects = [e for e in events if e["kind"] == "inject"]
        self.assertEqual(len(injects), 1)
        self.assertEqual(injects[0]["fields"]["rule"], "third")
        self.assertEqual(injects[0]["fields"]["size"], 100 << 20)
        twice = {"OOMH_PLAN": json.dumps({"rules": [{"name": "third", "when": {"nth": 3}, "fail": {"times": 2}}]})}
        proc, events = self.run_model(twice, self.PROGRAM)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith("oom 1 CUDA out of memory. Tried to allocate 100.00 MiB"), proc.stdout)
        self.assertEqual(len([e for e in events if e["kind"] == "inject"]), 2)

    def test_a_cap_counts_the_models_segments(self):
        proc, events = self.run_model({"OOMH_CAP": "96MiB"}, self.PROGRAM)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # 30 MiB held and 30 MiB cached: the 100 MiB segment passes the cap even after the cache is emptied.
        self.assertTrue(proc.stdout.startswith("oom 1 CUDA out of memory. Tried to allocate 100.00 MiB"), proc.stdout)
        caps = [e for e in events if e["kind"] == "inject" and e["fields"].get("reason") == "cap"]
        self.assertEqual(len(caps), 2, "the first try and the retry after emptying the cache")
        starts = [e for e in events if e["kind"] == "shim_start"]
        self.assertEqual(starts[0]["fields"]["plan"], "accepted")
        self.assertTrue(any(e["kind"] == "driver_call" for e in events), "the armed record sees the model's calls")


if __name__ == "__main__":
    unittest.main()
