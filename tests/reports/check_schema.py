#!/usr/bin/env python3
"""The results files agree with docs/results-schema.json: the fixtures, the golden JSON, and each fixture
after a round trip through the writer. A file with another schema_version fails the schema.

usage: check_schema.py RENDER_TOOL SCHEMA TESTS_REPORTS_DIR   (exit 125: jsonschema missing, 1 under TEST_TOOLS_REQUIRED=1)
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import jsonschema
except ImportError:
    if os.environ.get("TEST_TOOLS_REQUIRED") == "1":  # scripts/test.sh's environments have it
        print("FAILED: jsonschema cannot be imported in %s (python/requirements/test.txt has it)" % sys.executable)
        sys.exit(1)
    print("jsonschema is not installed (scripts/venv.sh installs it): skipped")
    sys.exit(125)

render, schema_path, here = sys.argv[1:4]
schema = json.load(open(schema_path))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
failures = 0


def check(path, doc=None):
    global failures
    doc = json.load(open(path)) if doc is None else doc
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    for e in errors[:5]:
        print("%s: %s: %s" % (path, "/".join(str(p) for p in e.path), e.message))
    failures += bool(errors)
    return doc


fixtures = [os.path.join(here, "data", f) for f in sorted(os.listdir(os.path.join(here, "data"))) if f.endswith(".json")]
for f in fixtures:
    check(f)
check(os.path.join(here, "golden", "run.json"))
with tempfile.TemporaryDirectory() as tmp:
    for f in fixtures:
        out = os.path.join(tmp, os.path.basename(f))
        subprocess.run([render, "json", f, out], check=True)
        check(out)
        # Round trip twice: the second rendering must equal the first.
        out2 = out + ".2"
        subprocess.run([render, "json", out, out2], check=True)
        if open(out).read() != open(out2).read():
            print("%s: not stable under a second round trip" % f)
            failures += 1

doc = json.load(open(fixtures[0]))
doc["schema_version"] = 2
if validator.is_valid(doc):
    print("schema accepts schema_version 2")
    failures += 1

print("checked %d fixtures: %s" % (len(fixtures), "FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
