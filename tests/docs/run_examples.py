#!/usr/bin/env python3
"""Runs the examples of README.md and docs/*.md as they are written, and checks each ends as the text says
(issue 40: the README's "No GPU?" example was inconclusive and its pytest example failed, as written).

    tests/docs/run_examples.py                 # every example; exit 1 when one fails
    tests/docs/run_examples.py --list          # what would run, and what is not run and why
    tests/docs/run_examples.py README.md:59    # the example whose fence opens at that line

Note [Examples that run]
An example is a fenced block tagged `sh` (or bash, shell). Each command in it (a line, with its `\\`
continuations) runs with bash in a scratch folder that stands for the checkout (its folders linked there, so
`build/runner/oomharness`, `examples/python/train.py` and `suites/...` resolve as in the README, and what the
commands write stays out of the checkout), one folder per Markdown file, so that a later example of a file
reads what an earlier one wrote (`report oomh-out/results.json` after `run`). `oomharness` on PATH is the
build's command, and `python3` (or `python`) the Python this script runs under (one with torch), its folder
on PATH as in an activated virtual environment. Where
no GPU is found (`nvidia-smi -L`), `--simulate` is added after `oomharness exec|run|sweep|budget`, as the
README tells a reader without a GPU to do. A command must exit 0; a comment line right under a command
(`# largest batch under 960.00 KiB: 6 ...`) is output it must print.

An HTML comment on the line above a fence, invisible on the rendered page, says more (several separated by
`;`):
    <!-- example: exit 1 -->                     the block's last command must exit 1 (a failing verdict shown)
    <!-- example: before: CMD -->                 run CMD first (what the prose has the reader do)
    <!-- example: file suite.yaml with examples/python/train.py -->
                                                  a yaml (or other) block: written as suite.yaml in the scratch
                                                  folder, beside copies of the files named, for the examples after it
    <!-- example: pytest test_readme.py with examples/python/train.py -->
                                                  a python block: written as that test file (beside copies of the
                                                  files named) and run by `python3 -m pytest` with the plugin, as
                                                  after `pip install .`; it must pass
    <!-- example: gpu -->                         runs only where a GPU is (it needs one; CI has none)
    <!-- example: not run: REASON -->             never run: installs system packages, needs a Slurm cluster,
                                                  or is the CI run itself. Used sparingly: each says why, and
                                                  --list shows them.
An untagged block whose first line is a command (`oomharness ...`, `python3 ...`) is an error: tag it `sh`
(an example, run here) or `text` (a synopsis or an output, not run), so that no example escapes by accident.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("OOMH_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("OOMH_BUILD_DIR") or os.path.join(SOURCE, "build")
SHELL_TAGS = ("sh", "bash", "shell")
# The first words of a command in an untagged block (Note [Examples that run]): such a block must be tagged.
COMMAND_WORDS = re.compile(r"^\s*(oomharness\s|build/runner/oomharness\s|python3?\s|bash\s|pip\s|cmake\s)")
DIRECTIVE = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")
SIMULATED = re.compile(r"(^|[\s;&|(])((?:\S*/)?oomharness)(\s+)(exec|run|sweep|budget)(?=\s|$)")
LINKED = ("build", "examples", "python", "suites", "scripts", "bench", "tests", "include", "docs")
COMMAND_TIMEOUT = 600

# Whether a GPU is here, asked as the pytest plugin and the runner ask (nvidia-smi -L).
sys.path.insert(0, os.path.join(SOURCE, "python"))
from oomharness.harness import gpu_present  # noqa: E402


class Example:
    def __init__(self, path, line, tag, body, directives):
        self.path, self.line, self.tag, self.body = path, line, tag, body
        self.directives = directives  # list of (name, value)
        self.problem = None           # a malformed block or directive

    @property
    def where(self):
        return "%s:%d" % (os.path.relpath(self.path, SOURCE), self.line)

    def directive(self, name):
        for n, v in self.directives:
            if n == name:
                return v
        return None

    def commands(self):
        """[(command text, [output lines it must print])] of a shell block."""
        out, pending, joined = [], None, ""
        for raw in self.body:
            line = raw.rstrip()
            if joined:
                joined += "\n" + line
                if not line.endswith("\\"):
                    out.append((joined, []))
                    pending, joined = out[-1], ""
                continue
            if not line.strip():
                pending = None
                continue
            if line.lstrip().startswith("#"):
                if pending is not None:
                    pending[1].append(line.lstrip()[1:].strip())
                continue
            if line.endswith("\\"):
                joined = line
                continue
            out.append((line, []))
            pending = out[-1]
        if joined:
            out.append((joined, []))
        return out


def parse_directives(text):
    """`exit 1; before: cmd` -> [("exit", "1"), ("before", "cmd")]; raises ValueError naming a bad one.
    `not run: REASON` comes last and takes the rest of the comment, `;` and all."""
    out = []
    text, said, reason = text.partition("not run:")
    if said:
        if not reason.strip():
            raise ValueError("`not run:` without a reason: say why it cannot run here")
        out.append(("not run", reason.strip()))
    for part in [p.strip() for p in text.split(";") if p.strip()]:
        m = re.match(r"^before:\s*(.+)$", part)
        if m:
            out.append(("before", m.group(1).strip()))
        elif re.match(r"^(file|pytest)\s+\S+", part):
            name, _, rest = part.partition(" ")
            out.append((name, rest.strip()))
        elif re.match(r"^exit\s+\d+$", part):
            out.append(("exit", part.split()[1]))
        elif part == "gpu":
            out.append(("gpu", ""))
        else:
            raise ValueError("unknown example directive '%s' (exit N, before: CMD, file NAME [with FILES], "
                             "pytest NAME [with FILES], gpu, not run: REASON)" % part)
    return out


def parse(path):
    """Every fenced block of a Markdown file that is an example, a file for the examples, or a mistake."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, tag = m.group(1), m.group(2), m.group(3).lower()
        start, body, i = i, [], i + 1
        while i < len(lines) and not (lines[i].strip() == fence and lines[i].startswith(indent)):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        closed = i < len(lines)
        i += 1
        d = DIRECTIVE.match(lines[start - 1]) if start > 0 else None
        ex = Example(path, start + 1, tag, body, [])
        if not closed:  # a closing fence with text after it is no fence: the block swallowed the page
            ex.problem = "its fence is never closed (a line of only %s)" % fence
            found.append(ex)
            continue
        if d:
            try:
                ex.directives = parse_directives(d.group(1))
            except ValueError as e:
                ex.problem = str(e)
        if tag in SHELL_TAGS or d:
            found.append(ex)
        elif not tag and body and COMMAND_WORDS.match(body[0]):
            ex.problem = ("an untagged block that starts with a command: tag it `sh` (an example, run by CI) or "
                          "`text` (a synopsis or an output, not run)")
            found.append(ex)
    return found


def markdown_files():
    docs = os.path.join(SOURCE, "docs")
    return [os.path.join(SOURCE, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def simulated(command):
    """`oomharness exec ...` -> `oomharness exec --simulate ...`, unless it says --simulate already."""
    if "--simulate" in command:
        return command
    return SIMULATED.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + m.group(4) + " --simulate", command)


class Scratch:
    """The stand-in checkout of one Markdown file's examples (Note [Examples that run])."""

    def __init__(self, root, name):
        self.dir = os.path.join(root, re.sub(r"[^\w.-]+", "-", name))
        os.makedirs(self.dir)
        for leaf in LINKED:
            target = BUILD if leaf == "build" else os.path.join(SOURCE, leaf)
            if os.path.exists(target):
                os.symlink(target, os.path.join(self.dir, leaf))
        self.bin = os.path.join(root, "bin")
        if not os.path.isdir(self.bin):
            os.makedirs(self.bin)
            os.symlink(os.path.join(BUILD, "runner", "oomharness"), os.path.join(self.bin, "oomharness"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OOMH_") and k != "PYTHONPATH"}
        # This Python's own folder next (as in an activated virtual environment: `python3`, `python` and
        # `pytest` are its; a link to its python3 elsewhere would not find the environment's packages).
        self.env["PATH"] = os.pathsep.join([self.bin, os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        self.env["OOMH_BINARY"] = os.path.join(BUILD, "runner", "oomharness")

    def copy_beside(self, name, files):
        """Copies `files` (checkout paths) into the folder where `name` goes."""
        folder = os.path.dirname(os.path.join(self.dir, name))
        os.makedirs(folder, exist_ok=True)
        for f in files:
            shutil.copy(os.path.join(SOURCE, f), folder)


def split_with(value):
    """`test_readme.py with examples/python/train.py` -> ("test_readme.py", ["examples/python/train.py"])."""
    name, _, rest = value.partition(" with ")
    return name.strip(), [f.strip() for f in re.split(r"[,\s]+", rest) if f.strip()]


def run_command(command, scratch, log):
    start = time.time()
    log.write("$ %s\n" % command)
    try:
        p = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=scratch.dir, env=scratch.env,
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        code, output = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        code, output = None, "%s%s\n(stopped after %d s)" % (e.stdout or "", e.stderr or "", COMMAND_TIMEOUT)
    log.write(output if isinstance(output, str) else output.decode(errors="replace"))
    log.write("\n(exit %s, %.1f s)\n\n" % (code, time.time() - start))
    log.flush()
    return code, output


def check(example, scratch, simulate, log):
    """Runs one example; returns None when it did as the text says, else why not."""
    for name, value in example.directives:
        if name == "before":
            code, output = run_command(value, scratch, log)
            if code != 0:
                return "its `before:` command exited %s: %s" % (code, output.strip()[-400:])
    if example.directive("file") is not None:
        name, files = split_with(example.directive("file"))
        scratch.copy_beside(name, files)
        with open(os.path.join(scratch.dir, name), "w") as f:
            f.write("\n".join(example.body) + "\n")
        return None
    expected_exit = int(example.directive("exit") or 0)
    if example.directive("pytest") is not None:
        name, files = split_with(example.directive("pytest"))
        scratch.copy_beside(name, files)
        with open(os.path.join(scratch.dir, name), "w") as f:
            f.write("\n".join(example.body) + "\n")
        # As after `pip install .`: the package importable and its plugin loaded, the command found.
        command = "PYTHONPATH=%s python3 -m pytest -p oomharness.pytest_plugin -p no:cacheprovider -rA %s" % (
            shlex.quote(os.path.join(SOURCE, "python")), shlex.quote(name))
        code, output = run_command(command, scratch, log)
        if code != expected_exit:
            return "pytest exited %s, not %d:\n%s" % (code, expected_exit, output.strip()[-2000:])
        return None
    commands = example.commands()
    if not commands:
        return "a shell block with no command"
    for n, (command, expected) in enumerate(commands):
        text = simulated(command) if simulate else command
        code, output = run_command(text, scratch, log)
        want = expected_exit if n == len(commands) - 1 else 0
        if code != want:
            return "`%s` exited %s, not %d:\n%s" % (text, code, want, output.strip()[-2000:])
        for line in expected:
            if line not in output:
                return "`%s` did not print `%s`:\n%s" % (text, line, output.strip()[-2000:])
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("only", nargs="*", help="FILE:LINE of the examples to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the examples and what is not run, run nothing")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR (kept) instead of a temporary folder")
    args = parser.parse_args(argv)
    gpu = gpu_present()
    examples = [ex for path in markdown_files() for ex in parse(path)]
    if args.only:
        examples = [ex for ex in examples if ex.where in args.only]
        missing = set(args.only) - {ex.where for ex in examples}
        if missing:
            print("no example opens at %s" % ", ".join(sorted(missing)))
            return 4
    problems = [ex for ex in examples if ex.problem]
    for ex in problems:
        print("%s: %s" % (ex.where, ex.problem))
    if problems:
        return 1
    if not os.access(os.path.join(BUILD, "runner", "oomharness"), os.X_OK) and not args.list:
        print("%s/runner/oomharness is not built" % BUILD)
        return 1
    root = args.keep or tempfile.mkdtemp(prefix="oomh-examples-")
    os.makedirs(root, exist_ok=True)
    log_path = os.path.join(root, "examples.log")
    scratches, failed, ran, skipped = {}, [], 0, 0
    began = time.time()
    with open(log_path, "w") as log:
        for ex in examples:
            reason = ex.directive("not run")
            if reason is None and ex.directive("gpu") is not None and not gpu:
                reason = "needs a GPU, and none is here"
            if reason is not None:
                skipped += 1
                print("%-28s not run: %s" % (ex.where, reason))
                continue
            if args.list:
                print("%-28s %s" % (ex.where, "file " + ex.directive("file") if ex.directive("file") else
                                    "pytest " + ex.directive("pytest") if ex.directive("pytest") else
                                    "; ".join(c for c, _ in ex.commands()).replace("\n", " ")))
                continue
            key = ex.path
            if key not in scratches:
                scratches[key] = Scratch(root, os.path.relpath(ex.path, SOURCE))
            log.write("=== %s\n" % ex.where)
            start = time.time()
            why = check(ex, scratches[key], not gpu, log)
            ran += 1
            took = time.time() - start
            if why:
                failed.append(ex)
                print("%-28s FAILED (%.1f s): %s" % (ex.where, took, why))
            else:
                print("%-28s passed (%.1f s)" % (ex.where, took))
            sys.stdout.flush()
    if args.list:
        return 0
    print("%d examples run, %d failed, %d not run, in %.0f s%s; log: %s" % (
        ran, len(failed), skipped, time.time() - began, "" if gpu else " (no GPU: --simulate added)", log_path))
    if not failed and not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
