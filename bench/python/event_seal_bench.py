"""The Python probe's cost of a seal per event line (Note [Sealed event lines] in include/oomharness/event_seal.h):
a probe `step` line written through EventLog to /dev/null, without a key and with one. bench/RESULTS.md has the
command and figures.

    PYTHONPATH=python python3 bench/python/event_seal_bench.py [LINES]
"""
import sys
import time

from oomharness._events import EventLog


def per_line_us(log, n):
    fields = {"step": 0, "batch_size": 64, "batch_from": "inputs", "loss": 1.2345, "allocated": 134217728,
              "reserved": 268435456}
    start = time.perf_counter()
    for i in range(n):
        fields["step"] = i
        log.write("step", fields)
    return (time.perf_counter() - start) / n * 1e6


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    plain, sealed = EventLog("/dev/null"), EventLog("/dev/null", key=bytes(range(1, 33)))
    for _ in range(2):  # the first round warms up
        a, b = per_line_us(plain, n), per_line_us(sealed, n)
    print("probe step line: %.2f us plain, %.2f us sealed (+%.2f us, %d lines each)" % (a, b, b - a, n))


if __name__ == "__main__":
    main()
