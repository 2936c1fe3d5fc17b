#!/usr/bin/env python3
"""The HTML report parses (html.parser), holds only the renderer's own elements even for hostile job
output, has exactly one script, and its Content-Security-Policy pins that script and the style by SHA-256.

usage: check_html.py RENDER_TOOL TESTS_REPORTS_DIR
"""
import base64
import hashlib
import html.parser
import os
import re
import subprocess
import sys
import tempfile

render, here = sys.argv[1:3]
failures = []


class Scan(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.scripts, self.styles, self.handlers, self.stack = [], [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.handlers += [(tag, a) for a, _ in attrs if a.startswith("on")]
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] == "script":
            self.scripts.append(data)
        if self.stack and self.stack[-1] == "style":
            self.styles.append(data)


def sha(text):
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


with tempfile.TemporaryDirectory() as tmp:
    for name in ("run.json", "hostile.json"):
        out = os.path.join(tmp, name + ".html")
        subprocess.run([render, "html", os.path.join(here, "data", name), out], check=True)
        page = open(out, encoding="utf-8").read()
        scan = Scan()
        scan.feed(page)
        bad = sorted(set(scan.tags) - {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span",
                                       "div", "table", "thead", "tbody", "tr", "th", "td", "a", "code", "dl", "dt",
                                       "dd", "section", "details", "summary", "pre", "br", "i", "b", "ul", "li", "svg", "line",
                                       "text", "path", "circle", "rect", "script", "title"})
        if bad:
            failures.append("%s: unexpected elements %s" % (name, bad))
        if scan.handlers:
            failures.append("%s: event handler attributes %s" % (name, scan.handlers))
        if scan.tags.count("script") != 1:
            failures.append("%s: %d script elements" % (name, scan.tags.count("script")))
        csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
        if not csp:
            failures.append(name + ": no Content-Security-Policy")
            continue
        policy = csp.group(1)
        if "default-src 'none'" not in policy:
            failures.append(name + ": CSP allows loads: " + policy)
        if "script-src " + sha("".join(scan.scripts)) not in policy:
            failures.append(name + ": CSP does not pin the script: " + policy)
        if "style-src " + sha("".join(scan.styles)) not in policy:
            failures.append(name + ": CSP does not pin the style: " + policy)

for f in failures:
    print(f)
print("html: " + ("FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
