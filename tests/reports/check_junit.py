#!/usr/bin/env python3
"""The JUnit XML parses (xml.etree) and its counts agree with the results file it was rendered from.

usage: check_junit.py RENDER_TOOL TESTS_REPORTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

render, here = sys.argv[1:3]
KIND = {"passed": None, "failed": "failure", "error": "error", "interrupted": "error", "skipped": "skipped",
        "inconclusive": "skipped"}
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    for name in ("run.json", "hostile.json", "base.json", "new.json"):
        src = os.path.join(here, "data", name)
        out = os.path.join(tmp, name + ".xml")
        subprocess.run([render, "junit", src, out], check=True)
        root = ET.parse(out).getroot()
        results = json.load(open(src))
        expect(root.tag == "testsuites", name + ": root is " + root.tag)
        suites = root.findall("testsuite")
        expect(len(suites) == len(results["suites"]), name + ": testsuite count")
        total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for xs, rs in zip(suites, results["suites"]):
            expect(xs.get("name") == rs["name"], name + ": suite name " + repr(xs.get("name")))
            cases = xs.findall("testcase")
            expect(len(cases) == len(rs["jobs"]), name + ": testcase count")
            counts = {"tests": len(cases), "failures": 0, "errors": 0, "skipped": 0}
            for case, job in zip(cases, rs["jobs"]):
                expect(case.get("name") == job["name"], name + ": testcase name " + repr(case.get("name")))
                expect(case.get("classname") == rs["name"], name + ": classname")
                expect(case.get("file") == rs["file"], name + ": file")
                kind = KIND[job["status"]]
                children = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
                expect(children == ([kind] if kind else []), name + ": %s has %s" % (job["name"], children))
                if kind == "failure":
                    counts["failures"] += 1
                    expect(case.find("failure").get("message") == job["message"], name + ": failure message")
                elif kind == "error":
                    counts["errors"] += 1
                elif kind == "skipped":
                    counts["skipped"] += 1
                # An expected failure (a must_fail check that failed) passes and says so in its output.
                if job["status"] == "passed" and any(v.get("must_fail") and v["status"] == "fail" for v in job["verdicts"]):
                    out = case.find("system-out")
                    expect(out is not None and "failed as expected" in (out.text or ""),
                           name + ": %s: XFAIL without its reason in system-out" % job["name"])
            for k, v in counts.items():
                expect(int(xs.get(k)) == v, "%s: suite %s %s=%s, expected %d" % (name, rs["name"], k, xs.get(k), v))
                total[k] += v
            expect(float(xs.get("time")) == round(rs["duration"], 3), name + ": time")
        for k, v in total.items():
            expect(int(root.get(k)) == v, "%s: testsuites %s" % (name, k))

for f in failures:
    print(f)
print("junit: " + ("FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
