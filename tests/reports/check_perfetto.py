#!/usr/bin/env python3
"""The Perfetto trace is Trace Event Format JSON: the events the viewers need are there and well formed.

usage: check_perfetto.py RENDER_TOOL TESTS_REPORTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

render, here = sys.argv[1:3]
failures = []
with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "trace.json")
    src = os.path.join(here, "data", "run.json")
    subprocess.run([render, "perfetto", src, out], check=True)
    trace = json.load(open(out))
    results = json.load(open(src))
    events = trace["traceEvents"]
    if trace.get("displayTimeUnit") != "ms":
        failures.append("displayTimeUnit")
    jobs = [j for s in results["suites"] for j in s["jobs"]]
    names = [e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    if len(names) != len(jobs):
        failures.append("one process per job: %d != %d" % (len(names), len(jobs)))
    for e in events:
        if e["ph"] in ("X", "i", "C") and not (isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0):
            failures.append("bad ts: %s" % e)
        if e["ph"] == "X" and e.get("dur", -1) < 0:
            failures.append("bad dur: %s" % e)
        if e["ph"] == "i" and e.get("s") not in ("t", "p", "g"):
            failures.append("bad instant scope: %s" % e)
    attempts = sum(len(j["attempts"]) for j in jobs)
    if sum(1 for e in events if e["ph"] == "X" and e.get("cat") == "attempt") != attempts:
        failures.append("one slice per attempt")
    faults = sum(len(j["faults"]) for j in jobs)
    if sum(1 for e in events if e["ph"] == "i" and e.get("cat") == "inject") != faults:
        failures.append("one instant per injected fault")
    points = sum(len(p) for j in jobs for p in j["timeline"].values())
    if sum(1 for e in events if e["ph"] == "C") != points:
        failures.append("one counter sample per timeline point")
    steps = sum(1 for j in jobs for m in j["markers"] if m["kind"] == "step")
    if sum(1 for e in events if e["ph"] == "X" and e.get("cat") == "step") != steps:
        failures.append("one slice per step")
for f in failures:
    print(f)
print("perfetto: " + ("FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
