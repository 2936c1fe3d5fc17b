#!/usr/bin/env python3
"""Where the Python probe's per-step time goes: the training loop of probe_overhead.py run once under the
probe with cProfile, printing the probe's own functions by total time (and, with --all, everything).

    python3 bench/python/probe_profile.py --device cuda --model mlp --steps 500

cProfile adds its own cost to every Python call, so its times are for ranking, not for the per-step figure:
that is probe_overhead.py's (fresh processes, no profiler)."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
sys.path.insert(0, HERE)

from probe_overhead import LOOP  # noqa: E402 (the same model and step as the per-step figure)

WORKER = LOOP + r'''
import cProfile, pstats
show_all = sys.argv[5] == "1"
pr = cProfile.Profile()
pr.enable()
for _ in range(steps):
    step()
pr.disable()
st = pstats.Stats(pr)
st.sort_stats("tottime")
if show_all:
    st.print_stats(25)
else:
    st.print_stats("oomharness", 25)
st.sort_stats("cumulative")
st.print_stats("oomharness", 12)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", choices=("tiny", "mlp"), default="tiny")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--evidence", default="all", help="OOMH_EVIDENCE for the probe, as probe_overhead.py's")
    a = ap.parse_args()
    from harness import Job
    job = Job()
    try:
        env = job.env(probe=True)
        env.pop("OOMH_CHECK_EVENTS", None)
        env["OOMH_EVIDENCE"] = a.evidence
        r = subprocess.run([sys.executable, "-c", WORKER, str(a.steps), a.device, a.model, "0", "1" if a.all else "0"],
                           env=env, capture_output=True, text=True, timeout=600)
        print(r.stdout[-12000:])
        if r.returncode != 0:
            print(r.stderr[-4000:])
        return r.returncode
    finally:
        job.close()


if __name__ == "__main__":
    sys.exit(main())
