#!/usr/bin/env python3
"""Runs one case of the false-green corpus (tests/false_green/README.md) and checks what it expects.

A case is a suite (NAME.yaml) or a command alone (NAME.case) whose leading comment lines say how to run
it and what must come out:
  # oomharness: ARGS           the command line after `oomharness` ({suite} is this file; a NAME.yaml of
                               the corpus named in ARGS is passed by its absolute path)
  # exit: N                    the exit code
  # status: SUITE::JOB=STATUS  a job's status in results.json
  # message: SUITE::JOB=TEXT   text its one-line message must contain
  # attempts: SUITE::JOB=N     how many attempts it made
  # stdout: TEXT / stderr: TEXT  text the terminal output must contain
  # needs: torch               the jobs train with PyTorch: `python3` (from --python-dir, when given, else
                               PATH) must import torch, or the case is skipped (exit 125)
The command runs from an empty folder elsewhere (the default output folder is then relative to it), with
the emulated trainer on PATH. Exit 0 when everything expected came out; otherwise each difference is
printed and the exit is 1.
"""
import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile


def read_header(path):
    header = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            text = line[1:].strip()
            key, sep, value = text.partition(":")
            if sep and key.strip() in ("oomharness", "exit", "status", "message", "attempts", "stdout", "stderr", "needs"):
                header.append((key.strip(), value.strip()))
    return header


def find_job(results, name):
    suite_name, _, job_name = name.partition("::")
    for suite in results.get("suites", []):
        if suite.get("name") != suite_name:
            continue
        for job in suite.get("jobs", []):
            if job.get("name") == job_name:
                return job
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--trainer-dir", required=True)
    parser.add_argument("--python-dir", default="", help="put this folder first on PATH for the jobs' python3")
    parser.add_argument("--keep", help="run in this folder and keep what the run wrote (default: a temporary one)")
    parser.add_argument("case")
    args = parser.parse_args()
    case = os.path.abspath(args.case)
    corpus = os.path.dirname(case)
    header = read_header(case)
    commands = [v for k, v in header if k == "oomharness"]
    if len(commands) != 1:
        print(f"{case}: needs exactly one '# oomharness:' line")
        return 1
    argv = [args.bin]
    for word in shlex.split(commands[0]):
        if word == "{suite}":
            word = case
        elif word.endswith(".yaml") and os.path.exists(os.path.join(corpus, word)):
            word = os.path.join(corpus, word)
        argv.append(word)

    env = dict(os.environ)
    env["PATH"] = args.trainer_dir + os.pathsep + env.get("PATH", "")
    if args.python_dir:
        env["PATH"] = args.python_dir + os.pathsep + env["PATH"]
    if ("needs", "torch") in header:
        probe = subprocess.run(["python3", "-c", "import torch"], env=env, capture_output=True, text=True)
        if probe.returncode != 0:
            print(f"{os.path.basename(case)}: skipped, the jobs' python3 cannot import torch")
            return 125
    for k in ("CI", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):
        env.pop(k, None)
    problems = []
    with (contextlib.nullcontext(args.keep) if args.keep else tempfile.TemporaryDirectory(prefix="oomh-false-green-")) as cwd:
        os.makedirs(cwd, exist_ok=True)
        proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=600)
        # exec writes its own default folder (oomh-exec), run and the others oomh-out.
        default_out = "oomh-exec" if len(argv) > 1 and argv[1] == "exec" else "oomh-out"
        results_path = os.path.join(cwd, default_out, "results.json")
        results = None
        if os.path.exists(results_path):
            with open(results_path, encoding="utf-8") as f:
                results = json.load(f)
        for key, value in header:
            if key == "exit" and proc.returncode != int(value):
                problems.append(f"exit code {proc.returncode}, expected {value}")
            elif key in ("stdout", "stderr"):
                text = proc.stdout if key == "stdout" else proc.stderr
                if value not in text:
                    problems.append(f"{key} does not contain {value!r}")
            elif key in ("status", "message", "attempts"):
                name, _, want = value.partition("=")
                job = find_job(results, name) if results else None
                if job is None:
                    problems.append(f"no job {name} in {results_path}")
                    continue
                if key == "status" and job.get("status") != want:
                    problems.append(f"{name}: status {job.get('status')}, expected {want} ({job.get('message')})")
                elif key == "message" and want not in job.get("message", ""):
                    problems.append(f"{name}: message {job.get('message')!r} does not contain {want!r}")
                elif key == "attempts" and len(job.get("attempts", [])) != int(want):
                    problems.append(f"{name}: {len(job.get('attempts', []))} attempts, expected {want}")
    if problems:
        print(f"{os.path.basename(case)}: ran {' '.join(shlex.quote(a) for a in argv)}")
        for p in problems:
            print("  " + p)
        print("--- stdout\n" + proc.stdout[-4000:] + "\n--- stderr\n" + proc.stderr[-4000:])
        return 1
    print(f"{os.path.basename(case)}: as expected (exit {proc.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
