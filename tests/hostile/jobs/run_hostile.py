#!/usr/bin/env python3
"""Runs one hostile job (issue 12) through the real `oomharness run --simulate` and checks that the runner
survived it: exit 0 or 1, a valid results.json with the job in it, and nothing left behind (no process
whose environment carries this run's mark, no /dev/shm/oomh-<runner pid>-* block).

  run_hostile.py --bin OOMHARNESS CASE     CASE: setsid | truncate | bigout | killed | streamed | stale
                                                | signals | closedpipe | terminal | links | observe | files
                                                | compare | values

The cases after `stale` are issue 28's classes, one each: a job that signals its runner; a closed stdout pipe;
escape sequences from a job and from a results file; symbolic links planted in the run folder; a flood of
observe: matches; files given to report/explain/compare that are not results files; compare's thresholds and
a job listed twice; values exec and validate must refuse.

Issue 44's: a job that deletes the run's output folder (`removed`), one that stops its runner (`stopper`),
one that leaves a 300-level tree in its work folder (`deep`), and inputs the commands accepted or reported
wrongly (`inputs`). Its last two classes need the emulated trainer (--trainer-dir) and run it under the shim
and the driver double: a job that writes its own evidence into the event log (`forger`); a job whose trainer
runs outside the shim, through `env -u LD_PRELOAD` (`escaper`), through Python's os.environ (`escaper_py`), or
seen only by the driver's process list (`nvml`, with the fake NVML of tests/runner/exec, --fake-nvml); and the
correct counterparts that must still pass: trainers in subprocesses that all stay under the shim
(`subprocesses`), and a process on the GPU under the shim (`nvml`'s second run).
"""
import argparse
import glob
import hashlib
import resource
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def marked_processes(mark):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"HOSTILE_MARK={mark}".encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            pass
    return found


def blocks_of(pid):
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"oomh-{pid}-")]


def write_suite(folder, script, mark, extra_env=None, timeout="1m", extra="", more_jobs=""):
    env = {"HOSTILE_MARK": mark}
    env.update(extra_env or {})
    suite = os.path.join(folder, "suite.yaml")
    with open(suite, "w") as f:
        f.write("version: 1\nname: hostile\n")
        f.write(f"defaults: {{timeout: {timeout}, probe: none}}\n")
        f.write("jobs:\n  - name: job\n")
        f.write(f"    run: sh {os.path.join(HERE, script)}\n")
        f.write("    env: {" + ", ".join(f'{k}: "{v}"' for k, v in env.items()) + "}\n")
        f.write("    expect: [exit: 0]\n")
        f.write(extra)
        f.write(more_jobs)
    return suite


def tool(args, *argv, timeout=30):
    """One short command of the real binary: (exit code, stdout, stderr); a hang is a failure, not a hang."""
    try:
        r = subprocess.run([args.bin, *argv], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{argv} did not end within {timeout} s")
        return None, b"", b""
    return r.returncode, r.stdout, r.stderr


def snapshot(folder):
    """Every path under `folder` with what it is and holds (links as their target), to show nothing changed."""
    state = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                state[rel] = "link:" + os.readlink(path)
            elif os.path.isdir(path):
                state[rel] = "dir"
            else:
                with open(path, "rb") as f:
                    state[rel] = hashlib.sha256(f.read()).hexdigest()
    return state


def job_warnings(out):
    job = results_job(out)
    return (job or {}).get("warnings", [])


def run(args, folder, suite):
    out = os.path.join(folder, "out")
    p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", out], cwd=folder,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = p.communicate(timeout=300)
    return p.pid, p.returncode, stdout, stderr, out


def attempt_log(out):
    """The job's first attempt log, wherever the run puts job folders under `out`."""
    found = glob.glob(os.path.join(out, "**", "attempt-0.log"), recursive=True)
    check(len(found) == 1, f"attempt-0.log under {out}: {found}")
    return found[0] if found else os.path.join(out, "missing")


def results_job(out):
    try:
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"results.json is missing or not valid JSON: {e}")
        return None
    for suite in results.get("suites", []):
        for job in suite.get("jobs", []):
            if job.get("name") == "job":
                return job
    check(False, "results.json has no job named 'job'")
    return None


def common(pid, code, stdout, stderr, out, mark):
    check(code in (0, 1), f"the runner exited {code} (0 or 1 expected); stderr: {stderr[-2000:]}")
    job = results_job(out)
    time.sleep(0.1)
    check(not marked_processes(mark), f"processes left behind: {marked_processes(mark)}")
    check(not blocks_of(pid), f"control blocks left behind: {blocks_of(pid)}")
    return job


def run_trainer_suite(args, folder, mark, run, cap="64MiB", expect="[exit: 0]", env=None, runner_env=None):
    """One job named `job` that runs `run` under a cap, with the emulated trainer on PATH, through the real
    binary: (runner pid, exit code, stdout, stderr, out folder)."""
    if not args.trainer_dir:
        check(False, "this case needs --trainer-dir (the emulated trainer's folder)")
        return None, None, "", "", folder
    suite = os.path.join(folder, "suite.yaml")
    job_env = {"HOSTILE_MARK": mark}
    job_env.update(env or {})
    with open(suite, "w") as f:
        f.write("version: 1\nname: hostile\ndefaults: {timeout: 1m, probe: none}\njobs:\n  - name: job\n")
        f.write(f"    run: {run}\n")
        f.write("    env: {" + ", ".join(f'{k}: "{v}"' for k, v in job_env.items()) + "}\n")
        f.write(f"    memory: {{limit: {cap}}}\n    expect: {expect}\n")
    out = os.path.join(folder, "out")
    environ = dict(os.environ)
    environ["PATH"] = args.trainer_dir + os.pathsep + environ.get("PATH", "/usr/bin:/bin")
    environ.update(runner_env or {})
    p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", out], cwd=folder, env=environ,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = p.communicate(timeout=300)
    return p.pid, p.returncode, stdout, stderr, out


def expect_error(job, code, stdout, *parts):
    """The job is an error (the run exits 1) whose message holds every one of `parts`."""
    message = (job or {}).get("message", "") or (job or {}).get("error", "")
    check(code == 1, f"the run exited {code}, not 1; stdout: {stdout[-1500:]}")
    check((job or {}).get("status") == "error", f"the job is {(job or {}).get('status')}, not an error: {message!r}")
    for part in parts:
        check(part in message, f"the job's message lacks {part!r}: {message!r}")


def expect_pass(job, code, stdout):
    check(code == 0, f"the run exited {code}, not 0; stdout: {stdout[-2000:]}")
    check((job or {}).get("status") == "passed",
          f"the job is {(job or {}).get('status')}, not passed: {(job or {}).get('message')!r}; {stdout[-2000:]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--trainer-dir", default="")
    parser.add_argument("--fake-nvml", default="")
    parser.add_argument("case")
    args = parser.parse_args()
    mark = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="oomh-hostile-") as folder:
        if args.case == "setsid":
            suite = write_suite(folder, "setsid_grandchild.sh", mark)
            start = time.monotonic()
            pid, code, so, se, out = run(args, folder, suite)
            common(pid, code, so, se, out, mark)
            # The grandchild holding stdout is killed with the job: no wait for the 5 s drain timeout.
            check(time.monotonic() - start < 4.5, f"the run took {time.monotonic() - start:.1f} s")
        elif args.case == "truncate":
            suite = write_suite(folder, "truncate_control.sh", mark)
            pid, code, so, se, out = run(args, folder, suite)
            job = common(pid, code, so, se, out, mark)
            path = attempt_log(out)
            log = open(path, errors="replace").read() if os.path.exists(path) else ""
            check("could not truncate" in log, f"the job could shrink its control block: {log!r}")
            check(job is not None and job.get("status"), "the job has no status")
        elif args.case == "bigout":
            cap = 64 << 20
            suite = write_suite(folder, "big_stdout.sh", mark)
            pid, code, so, se, out = run(args, folder, suite)
            job = common(pid, code, so, se, out, mark)
            path = attempt_log(out)
            size = os.path.getsize(path)
            check(size <= cap + 4096, f"the log holds {size} bytes, over the cap {cap}")
            with open(path, "rb") as f:
                text = f.read()
            check(text.startswith(b"first line of the job"), f"the log lost its first line; it starts {text[:600]!r}")
            check(b"last line of the job" in text[-100000:], "the log lost its last line")
            check(b"of output cut here" in text, "the log does not state the cut")
            warnings = (job or {}).get("warnings", [])
            check(any("was cut" in w for w in warnings), f"results.json does not warn of the cut: {warnings}")
            check("was cut" in so, "the terminal does not warn of the cut")
        elif args.case == "killed":
            pidfile = os.path.join(folder, "job.pid")
            suite = write_suite(folder, "runner_killed.sh", mark, {"HOSTILE_PIDFILE": pidfile}, timeout="5m")
            p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", os.path.join(folder, "out")],
                                 cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while not os.path.exists(pidfile) and time.monotonic() < deadline:
                time.sleep(0.05)
            check(os.path.exists(pidfile), "the job never started")
            time.sleep(0.2)
            p.send_signal(signal.SIGKILL)
            p.wait()
            deadline = time.monotonic() + 5
            while marked_processes(mark) and time.monotonic() < deadline:
                time.sleep(0.05)
            check(not marked_processes(mark), f"the job outlived its runner: {marked_processes(mark)}")
            check(not blocks_of(p.pid), f"control blocks of the killed runner: {blocks_of(p.pid)}")
        elif args.case == "streamed":
            # Note [Results as they come]: a runner killed by SIGKILL loses no finished job's result.
            suite = os.path.join(folder, "suite.yaml")
            with open(suite, "w") as f:
                f.write("version: 1\nname: streamed\ndefaults: {timeout: 1m, probe: none}\njobs:\n")
                f.write(f"  - name: quick\n    run: 'true'\n    env: {{HOSTILE_MARK: \"{mark}\"}}\n    expect: [exit: 0]\n")
                f.write(f"  - name: slow\n    run: sleep 30\n    env: {{HOSTILE_MARK: \"{mark}\"}}\n    expect: [exit: 0]\n")
            out = os.path.join(folder, "out")
            stream = os.path.join(out, "jobs.jsonl")
            p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", out], cwd=folder,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if os.path.exists(stream) and open(stream).read().count("\n") >= 2:
                    break
                time.sleep(0.05)
            p.send_signal(signal.SIGKILL)
            p.wait()
            check(not os.path.exists(os.path.join(out, "results.json")), "results.json exists although the run was killed")
            r = subprocess.run([args.bin, "report", stream, "--json", os.path.join(folder, "rebuilt.json")],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"report from the stream exited {r.returncode}: {r.stderr}")
            try:
                rebuilt = json.load(open(os.path.join(folder, "rebuilt.json")))
                jobs = [j for s in rebuilt["suites"] for j in s["jobs"]]
                check([(j["name"], j["status"]) for j in jobs] == [("quick", "passed")], f"rebuilt jobs: {jobs}")
                check(rebuilt.get("interrupted") is True, "the rebuilt run does not say it was interrupted")
            except (OSError, ValueError, KeyError) as e:
                check(False, f"the rebuilt results: {e}")
            # A stream cut in the middle of a line (the kill came during a write) still reads.
            with open(stream, "a") as f:
                f.write('{"suite": "streamed", "job": {"na')
            r = subprocess.run([args.bin, "report", stream, "--json", os.path.join(folder, "cut.json")],
                               capture_output=True, text=True)
            check(r.returncode == 0, f"report from a cut stream exited {r.returncode}: {r.stderr}")
            # ... but a bad line in its middle is an error naming the line.
            with open(stream, "a") as f:
                f.write('\n{"end": true}\n')
            r = subprocess.run([args.bin, "report", stream, "--json", os.path.join(folder, "bad.json")],
                               capture_output=True, text=True)
            check(r.returncode == 4 and "jobs.jsonl:3:" in r.stderr, f"a bad line: exit {r.returncode}, {r.stderr!r}")
            for pid in marked_processes(mark):
                os.kill(pid, signal.SIGKILL)
        elif args.case == "stale":
            # A block of a runner that died without removing it (older runners named them /dev/shm/oomh-<pid>-...).
            dead = subprocess.Popen(["true"])
            dead.wait()
            stale = f"/dev/shm/oomh-{dead.pid}-0-0"
            with open(stale, "wb") as f:
                f.write(b"\0" * 4096)
            suite = write_suite(folder, "setsid_grandchild.sh", mark)
            pid, code, so, se, out = run(args, folder, suite)
            common(pid, code, so, se, out, mark)
            check(not os.path.exists(stale), f"the stale block {stale} is still there")
            if os.path.exists(stale):
                os.unlink(stale)
        elif args.case == "signals":
            # Issue 28 (2): signals sent by pid do not end the run; the job's result says what it sent. Issue 44:
            # as root the job runs in the run's PID namespace and cannot reach the runner at all.
            suite = write_suite(folder, "signal_runner.sh", mark)
            pid, code, so, se, out = run(args, folder, suite)
            job = common(pid, code, so, se, out, mark)
            check(code == 0, f"the run exited {code}, not 0 (the job passed); stderr: {se[-2000:]}")
            check((job or {}).get("status") == "passed", f"the job is {(job or {}).get('status')}, not passed")
            with open(attempt_log(out), errors="replace") as f:
                log = f.read()
            check(f"runner {pid}" in log, f"the job did not find the runner's pid {pid}: {log[:500]}")
            ids = dict((w[0], (w[2], w[4])) for w in (l.split() for l in log.splitlines()) if len(w) == 5 and w[1] == "session")
            check("job" in ids and "runner" in ids and ids["job"][0] != ids["runner"][0] and ids["job"][1] != ids["runner"][1],
                  f"the job shares the runner's session or group: {ids}")
            warnings = " ".join(job_warnings(out))
            signals = ["SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE", "SIGQUIT", "SIGXCPU", "SIGTERM", "SIGINT",
                       "SIGSEGV", "SIGBUS", "SIGABRT"]
            if os.geteuid() == 0:
                check("ppid 0 " in log, f"the job sees its runner as its parent: {log[:300]}")
                for sig in signals:
                    check(f"could not send {sig}" in log, f"the job reached the runner with {sig}: {log[-1500:]}")
                check("to the runner" not in warnings, f"the runner received a signal from the job: {warnings[:2000]}")
            else:
                for sig in signals:
                    check(f"sent {sig} to the runner" in warnings, f"the result does not say the job sent {sig}: {warnings[:2000]}")
        elif args.case == "stopper":
            # Issue 44 (5): `kill -STOP` on the runner stopped it until something sent SIGCONT.
            suite = write_suite(folder, "stop_runner.sh", mark)
            out = os.path.join(folder, "out")
            p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", out], cwd=folder,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            stopped_for = 0.0
            while p.poll() is None:  # how long the runner stays stopped, as /proc says
                time.sleep(0.05)
                try:
                    with open(f"/proc/{p.pid}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    break
                if state == "T":
                    stopped_for += 0.05
            stdout, stderr = p.communicate(timeout=300)
            job = common(p.pid, p.returncode, stdout, stderr, out, mark)
            check(p.returncode == 0 and (job or {}).get("status") == "passed", f"exit {p.returncode}, job {job and job.get('status')}")
            with open(attempt_log(out), errors="replace") as f:
                log = f.read()
            check("still here" in log, f"the job did not finish: {log[-500:]}")
            if os.geteuid() == 0:
                check("stopped the runner" not in log and "stopped the parent" not in log, f"the job stopped its runner: {log}")
                check(stopped_for == 0, f"the runner was stopped for {stopped_for:.2f} s")
            else:
                # The watchdog continues it within its 50 ms period.
                check(stopped_for < 0.5, f"the runner was stopped for {stopped_for:.2f} s")
                warnings = " ".join(job_warnings(out))
                check("its watchdog continued it" in warnings, f"no warning of the stop: {warnings[:1000]}")
        elif args.case == "removed":
            # Issue 44 (4): a job that deleted the output folder made the runner end with exit 3 and no job in results.
            suite = write_suite(folder, "remove_out.sh", mark,
                                more_jobs=f"  - name: next\n    run: 'true'\n    env: {{HOSTILE_MARK: \"{mark}\"}}\n"
                                          "    expect: [exit: 0]\n")
            pid, code, so, se, out = run(args, folder, suite)
            job = common(pid, code, so, se, out, mark)
            check(code == 0, f"the run exited {code} (0 expected: both jobs pass); stderr: {se[-2000:]}")
            check("was removed during the run" in se, f"the terminal does not say the folder was removed: {se[-2000:]}")
            try:
                with open(os.path.join(out, "results.json")) as f:
                    results = json.load(f)
                jobs = {j["name"]: j["status"] for s in results["suites"] for j in s["jobs"]}
                check(jobs == {"job": "passed", "next": "passed"}, f"results.json has {jobs}")
            except (OSError, ValueError, KeyError) as e:
                check(False, f"results.json: {e}")
            for name in ("report.html", "jobs.jsonl"):
                check(os.path.isfile(os.path.join(out, name)), f"{name} was not written again")
            with open(os.path.join(out, "jobs.jsonl")) as f:
                lines = f.read().splitlines()
            check(len(lines) == 4, f"jobs.jsonl has {len(lines)} lines (a header, two jobs, the end)")
            warnings = " ".join(job_warnings(out))
            check("was removed while this attempt ran" in warnings, f"the job's result does not say: {warnings[:1000]}")
            with open(os.path.join(out, "jobs", "hostile__job", "attempt-0.log"), errors="replace") as f:
                log = f.read()
            check("first line" in log and "last line" in log, f"the log was not written back: {log!r}")
        elif args.case == "deep":
            # Issue 44 (6): a 300-level tree in the work folder made the next run with the same --out fail with
            # "Too many levels of symbolic links".
            suite = write_suite(folder, "deep_tree.sh", mark, {"HOSTILE_WORK": "{workdir}"})
            for round_ in range(2):
                pid, code, so, se, out = run(args, folder, suite)
                job = common(pid, code, so, se, out, mark)
                check(code == 0 and (job or {}).get("status") == "passed",
                      f"run {round_ + 1}: exit {code}, job {job and job.get('status')}: {(job or {}).get('message')} {se[-1000:]}")
            check(os.path.exists("/proc/self"), "the link to / was followed")
        elif args.case == "inputs":
            # Issue 44: inputs accepted or reported wrongly.
            code, so, se = tool(args, "predict", "--batch", "99999999999999999999", "--", "echo", "{batch}")
            check(code == 4 and b"99999999999999999999" in se, f"predict --batch 9999...: exit {code}, {se!r}")
            code, so, se = tool(args, "exec", "--simulate", "--restart", "99999999999999999999", "--", "true")
            check(code == 4 and b"99999999999999999999" in se and b"9223372036854775807" not in se,
                  f"exec --restart 9999...: exit {code}, {se!r}")
            out = os.path.join(folder, "out")
            code, so, se = tool(args, "exec", "--simulate", "-o", out, "--fault", "step=0", "--", "true")
            check(code == 4 and b"before the first training step" in se, f"--fault step=0: exit {code}, {se!r}")
            code, so, se = tool(args, "exec", "--simulate", "-o", out, "--step-base", "0", "--fault", "step=0",
                                "--expect", "exit=0", "--", "true", timeout=120)
            check(code != 4, f"--step-base 0 --fault step=0 was refused: {se!r}")
            code, so, se = tool(args, "exec", "--simulate", "-o", out, "--expect", "exit=256", "--", "true")
            check(code == 4 and b"0 to 255" in se, f"--expect exit=256: exit {code}, {se!r}")
            # A suite renamed between two runs: a job that passed and now fails is a regression, not "1 removed + 1 new".
            def results_file(name, suite_name, status, peak):
                path = os.path.join(folder, name)
                with open(path, "w") as f:
                    json.dump({"schema_version": 1, "suites": [{"name": suite_name, "jobs": [
                        {"name": "train", "status": status, "peak": {"0": peak}}]}]}, f)
                return path
            base, now = results_file("base.json", "old", "passed", 1 << 30), results_file("now.json", "new", "failed", 1 << 30)
            code, so, se = tool(args, "compare", base, now)
            check(code == 1 and b"REGRESSION new::train" in so and b"removed" not in so.split(b"\n\n")[0],
                  f"compare across a rename: exit {code}, {so!r}")
            # A peak from 0 B to 10 GiB was "+0.0%".
            zero, ten = results_file("zero.json", "s", "passed", 0), results_file("ten.json", "s", "passed", 10 << 30)
            code, so, se = tool(args, "compare", zero, ten, "--fail-on", "peak:+5%")
            check(code == 1 and b"+0.0%" not in so and b"from 0" in so, f"a peak from 0 B: exit {code}, {so!r}")
            # A right-to-left override in a job's name reaches no terminal raw.
            bidi = os.path.join(folder, "bidi.yaml")
            with open(bidi, "w", encoding="utf-8") as f:
                f.write(f"version: 1\nname: s\ndefaults: {{probe: none}}\njobs:\n  - name: \"a\u202eb\"\n    run: 'true'\n"
                        f"    env: {{HOSTILE_MARK: \"{mark}\"}}\n")
            for argv in (["validate", bidi], ["run", "--collect-only", bidi], ["run", "--simulate", bidi, "-o", out]):
                code, so, se = tool(args, *argv, timeout=120)
                check(code == 0, f"{argv[:2]}: exit {code}, {se!r}")
                check("\u202e".encode() not in so + se and b"\\u{202E}" in so, f"{argv[:2]} printed the override raw: {so!r}")
            # An environment variable whose name holds '=' (the suite's form of the marker's env={"MODE=fast": "1"}).
            env_eq = os.path.join(folder, "env.yaml")
            with open(env_eq, "w") as f:
                f.write("version: 1\njobs:\n  - name: j\n    run: 'true'\n    env: {\"MODE=fast\": \"1\"}\n")
            code, so, se = tool(args, "validate", env_eq)
            check(code == 4 and b"MODE=fast" in se, f"env name with '=': exit {code}, {se!r}")
        elif args.case == "closedpipe":
            # Issue 28 (3): `oomharness run ... | head -1` ends the printing, not the run.
            suite = write_suite(folder, "setsid_grandchild.sh", mark)
            out = os.path.join(folder, "out")
            p = subprocess.Popen([args.bin, "run", "--simulate", suite, "-o", out], cwd=folder,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            first = p.stdout.readline()
            p.stdout.close()  # as `head -1` does
            _, stderr = p.communicate(timeout=300)
            check(first.startswith(b"oomharness "), f"the first line: {first!r}")
            check(p.returncode == 0, f"the runner exited {p.returncode} (0, the run's own code, expected): {stderr[-2000:]!r}")
            check(os.path.exists(os.path.join(out, "results.json")), "no results.json after the pipe closed")
            check(os.path.exists(os.path.join(out, "report.html")), "no report.html after the pipe closed")
            check(results_job(out) is not None, "results.json has no job")
            r = subprocess.run(f"'{args.bin}' validate '{suite}' | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}",
                               shell=True, executable="/bin/bash", capture_output=True, text=True)
            check(r.stdout.strip() in ("0",), f"validate into a closed pipe exited {r.stdout.strip()}")
        elif args.case == "terminal":
            # Issue 28 (4): nothing a job prints or a file says reaches the terminal as an escape sequence.
            suite = write_suite(folder, "escapes.sh", mark)
            pid, code, so, se, out = run(args, folder, suite)
            common(pid, code, so, se, out, mark)
            check("\x1b" not in so and "\x1b" not in se, f"a raw ESC reached the terminal: {so[-1500:]!r}")
            check("\u202e" not in so and "\x9b" not in so, f"a bidi override or C1 reached the terminal: {so[-1500:]!r}")
            # The summary quotes the job's output (its escapes shown visibly or dropped, never sent).
            check("title" in so and " done" in so, f"the summary does not quote the job's output: {so[-1500:]!r}")
            # The message that quotes the job's output ("it printed: ..."), as budget says it.
            code, so_b, se_b = tool(args, "budget", "--simulate", "--target-step", "1", "--out",
                                    os.path.join(folder, "budget"), "--", "sh", os.path.join(HERE, "escapes.sh"), timeout=120)
            check(b"it printed:" in se_b, f"budget does not quote the job's output: {se_b[-1500:]!r}")
            check(b"\x1b" not in so_b + se_b and b"\xc2\x9b" not in so_b + se_b, f"budget printed raw escapes: {se_b[-1500:]!r}")
            check(b"\\x1B]0;pwned" in se_b, f"budget does not show the escape visibly: {se_b[-1500:]!r}")
            # Names and messages read back from a results file.
            bad = os.path.join(folder, "bad.json")
            with open(bad, "w") as f:
                json.dump({"schema_version": 1, "suites": [{"name": "s\x1b]0;pwned\x07", "jobs": [
                    {"name": "j\x1b[2J", "status": "failed", "message": "m \x1b[31mred\u202e"}]}]}, f)
            code, so2, se2 = tool(args, "explain", bad)
            check(code == 0, f"explain exited {code}: {se2!r}")
            check(b"\x1b" not in so2 + se2 and "\u202e".encode() not in so2, f"explain printed raw escapes: {so2!r}")
            check(b"\\x1B[2J" in so2, f"explain does not show the escape visibly: {so2!r}")
            code, so3, se3 = tool(args, "compare", bad, bad)
            check(b"\x1b" not in so3 + se3, f"compare printed raw escapes: {so3!r} {se3!r}")
        elif args.case == "links":
            # Issue 28 (1): links a job plants in the run folder never make the runner write or delete elsewhere.
            victim = os.path.join(folder, "victim")
            for sub in ["next/work", "work"]:
                os.makedirs(os.path.join(victim, sub))
            for name in ["next/work/keep", "next/attempt-0.log", "work/keep", "log.txt", "results.json",
                         "report.html", "jobs.jsonl"]:
                with open(os.path.join(victim, name), "w") as f:
                    f.write(f"the victim's own {name}\n")
            before = snapshot(victim)
            suite = write_suite(folder, "plant_links.sh", mark, {"HOSTILE_VICTIM": victim},
                                more_jobs=f"  - name: next\n    run: 'true'\n    env: {{HOSTILE_MARK: \"{mark}\"}}\n"
                                          "    expect: [exit: 0]\n")
            for round_ in range(2):  # the second run meets the links the first one's job left
                pid, code, so, se, out = run(args, folder, suite)
                check(code in (0, 1), f"run {round_ + 1} exited {code}: {se[-2000:]}")
                after = snapshot(victim)
                changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
                check(not changed, f"run {round_ + 1} changed the victim folder: {sorted(changed)}")
            for name in ["results.json", "report.html"]:
                path = os.path.join(out, name)
                check(os.path.isfile(path) and not os.path.islink(path), f"{name} is not a file of the run folder")
            check(not os.path.islink(os.path.join(out, "jobs", "hostile__next")), "the next job's folder is still a link")
        elif args.case == "observe":
            # Issue 28 (5): a flood of observe: matches is bounded like event lines.
            lines = 400000
            suite = write_suite(folder, "observe_flood.sh", mark, {"HOSTILE_LINES": str(lines)},
                                extra="    observe: {loss: 'loss=([0-9]+)'}\n")
            pid, code, so, se, out = run(args, folder, suite)
            common(pid, code, so, se, out, mark)
            peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            check(peak_mib < 120, f"the runner peaked at {peak_mib:.0f} MiB for {lines} observed lines")
            warnings = " ".join(job_warnings(out))
            check("observed value(s) were dropped" in warnings, f"no warning of the dropped values: {warnings[:1000]}")
        elif args.case == "files":
            # Issue 28 (6): report, explain and compare read regular files only, bounded, schema checked.
            fifo = os.path.join(folder, "fifo")
            os.mkfifo(fifo)
            cases = [("/dev/zero", b"character device"), (fifo, b"FIFO"), (folder, b"directory")]
            for path, what in cases:
                for argv in (["report", path], ["explain", path], ["compare", path, path]):
                    code, so, se = tool(args, *argv, timeout=20)
                    check(code == 4 and what in se, f"{argv}: exit {code}, {se[-300:]!r} (4 and '{what.decode()}' expected)")
            partial = os.path.join(folder, "partial.json")
            with open(partial, "w") as f:
                f.write('{"schema_version": 1}')
            code, so, se = tool(args, "report", partial, "--json", os.path.join(folder, "p.json"))
            check(code == 4 and b"'suites'" in se, f"a file without suites: exit {code}, {se!r}")
            check(not os.path.exists(os.path.join(folder, "p.json")), "a report was written from a file without suites")
            nameless = os.path.join(folder, "nameless.json")
            with open(nameless, "w") as f:
                json.dump({"schema_version": 1, "suites": [{"name": "s", "jobs": [{"status": "passed"}]}]}, f)
            code, so, se = tool(args, "explain", nameless)
            check(code == 4 and b"suites[0].jobs[0]" in se and b"'name'" in se, f"a job without a name: exit {code}, {se!r}")
            big = os.path.join(folder, "big.json")
            with open(big, "w") as f:
                f.write('{"schema_version": 1, "suites": [], "pad": "' + "x" * (2 << 20) + '"}')
            code, so, se = tool(args, "report", big, "--json", os.path.join(folder, "b.json"), "--max-file-size", "1MiB")
            check(code == 4 and b"--max-file-size" in se, f"a file over the limit: exit {code}, {se!r}")
            code, so, se = tool(args, "report", big, "--json", os.path.join(folder, "b.json"), "--max-file-size", "4MiB")
            check(code == 0, f"a file within a raised limit: exit {code}, {se!r}")
        elif args.case == "compare":
            # Issue 28 (7): thresholds that never fire, and a job listed twice, are refused.
            good = os.path.join(folder, "good.json")
            twice = os.path.join(folder, "twice.json")
            with open(good, "w") as f:
                json.dump({"schema_version": 1, "suites": [{"name": "s", "jobs": [{"name": "j", "status": "passed"}]}]}, f)
            with open(twice, "w") as f:
                json.dump({"schema_version": 1, "suites": [{"name": "s", "jobs": [
                    {"name": "j", "status": "passed"}, {"name": "j", "status": "failed"}]}]}, f)
            for rule in ["peak:+nan%", "peak:+inf%", "recovery:+nan%", "recovery:+inf%", "peak:+NAN%"]:
                code, so, se = tool(args, "compare", good, good, "--fail-on", rule)
                check(code == 4, f"--fail-on {rule}: exit {code} (4 expected), {se!r}")
            code, so, se = tool(args, "compare", good, twice)
            check(code == 4 and b"s::j" in se and b"twice" in se, f"a job listed twice: exit {code}, {se!r}")
            code, so, se = tool(args, "compare", good, good, "--fail-on", "peak:+5%")
            check(code == 0, f"a good comparison: exit {code}, {se!r}")
        elif args.case == "values":
            # Issue 28 (8): exec's flags have a suite's limits; sizes rounding to 0 and too-long folder names are refused.
            out = os.path.join(folder, "out")
            for flags in (["--target-step", "-1"], ["--cap", "0.4B"], ["--name", "x" * 300]):
                code, so, se = tool(args, "exec", "--simulate", "-o", out, *flags, "--", "true")
                check(code == 4, f"exec {flags[0]} {flags[1][:20]}: exit {code} (4 expected), {se[-300:]!r}")
            capped = os.path.join(folder, "capped.yaml")
            with open(capped, "w") as f:
                f.write("version: 1\njobs:\n  - name: j\n    run: 'true'\n    memory: {limit: 0.4B}\n")
            code, so, se = tool(args, "validate", capped)
            check(code == 4 and b"rounds down to 0 bytes" in se, f"limit 0.4B: exit {code}, {se!r}")
            long_names = os.path.join(folder, "long.yaml")
            with open(long_names, "w") as f:
                f.write("version: 1\nname: " + "s" * 150 + "\njobs:\n  - name: " + "j" * 150 + "\n    run: 'true'\n")
            code, so, se = tool(args, "validate", long_names)
            check(code == 4 and f"{long_names}:4:".encode() in se and b"folder's name" in se,
                  f"names too long for a file name: exit {code}, {se!r}")
        elif args.case == "forger":
            # Issue 44 (3), Note [Sealed event lines] in include/oomharness/event_seal.h: lines the job's own code
            # appended to $OOMH_EVENTS made a trainer that never halves pass batch_halving.
            pid, code, so, se, out = run_trainer_suite(
                args, folder, mark, "sh " + os.path.join(HERE, "forge_events.sh"), cap="200MiB",
                expect="[exit: 0, oom_visible, {batch_halving: {factor: 0.5, min: 1}}, completes: 4]")
            job = common(pid, code, so, se, out, mark)
            expect_error(job, code, so, "the job changed what is tested", "11 event line(s) of ",
                         "did not come from the harness", "the first: a `inject` line (src shim, pid ")
            with open(glob.glob(os.path.join(out, "**", "attempt-0.events.jsonl"), recursive=True)[0]) as f:
                lines = f.read().splitlines()
            check(sum('"seal":"' in line for line in lines) >= 5 and sum('"seal":"' not in line for line in lines) == 11,
                  f"the log does not hold the harness's sealed lines and the job's 11: {lines[-3:]}")
        elif args.case in ("escaper", "escaper_py"):
            # Issue 44 (1), Note [Processes outside the shim] in runner/src/exec/escapes.h.
            script = "sh escape_shim.sh" if args.case == "escaper" else "python3 escape_shim.py"
            interpreter, name = script.split()
            pid, code, so, se, out = run_trainer_suite(args, folder, mark, interpreter + " " + os.path.join(HERE, name),
                                                       expect="[exit: 0, completes: 4]")
            command = "emulated_trainer --steps 4 --batch-size 8"
            job = common(pid, code, so, se, out, mark)
            expect_error(job, code, so, "used device memory outside the shim", command, "its probe found no shim in it",
                         "no fault or cap applied to it")
        elif args.case == "subprocesses":
            # No false red: every trainer of the launcher runs under the shim.
            pid, code, so, se, out = run_trainer_suite(args, folder, mark, "sh " + os.path.join(HERE, "shim_subprocesses.sh"))
            job = common(pid, code, so, se, out, mark)
            expect_pass(job, code, so)
        elif args.case == "nvml":
            if not args.fake_nvml:
                check(False, "this case needs --fake-nvml (tests/runner/exec's fake NVML library)")
            else:
                for variant in ("escape", "shim"):
                    sub = os.path.join(folder, variant)
                    os.makedirs(sub)
                    pids = os.path.join(sub, "pids")
                    open(pids, "w").close()
                    runner_env = {"OOMH_NVML_LIBRARY": args.fake_nvml, "FAKE_NVML_PIDS": pids}
                    pid, code, so, se, out = run_trainer_suite(args, sub, mark, "sh " + os.path.join(HERE, "nvml_escape.sh"),
                                                               env={"HOSTILE_NVML": variant}, runner_env=runner_env)
                    job = common(pid, code, so, se, out, mark)
                    listed = open(pids).read().split()
                    check(len(listed) == 2, f"{variant}: the job did not list its process for the fake NVML: {listed}")
                    if variant == "escape":
                        expect_error(job, code, so, f"process {listed[0] if listed else '?'} (sleep 2) used device memory "
                                     "outside the shim (it held 128.00 MiB): the driver (NVML) lists it using the GPU")
                    else:
                        expect_pass(job, code, so)
        else:
            print("unknown case", args.case)
            return 2
    for pid in marked_processes(mark):  # never leave them to the next test either
        os.kill(pid, signal.SIGKILL)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
