"""Runs the `oomharness` command from Python: find it, run one command under it (`oomharness exec`), and
read what it judged. The pytest plugin (oomharness.pytest_plugin) is built on this; scripts may use it too:

    from oomharness import harness
    outcome = harness.exec_command([sys.executable, "train.py"], cap="1GiB", expect=["batch_halving"])
    if not outcome.passed:
        print(outcome.message)

Importing this module imports nothing heavy (no torch): the plugin loads it in every pytest run.
"""

import json
import os
import shutil
import subprocess
import tempfile

from oomharness import _abi

# Exit codes of the command (docs/cli.md, "Exit codes"): as pytest's; kExitCodes through the generated _abi.py.
_EXIT = dict(_abi.EXIT_CODES)
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = _EXIT["ok"], _EXIT["tests_failed"], _EXIT["interrupted"]
EXIT_INTERNAL, EXIT_USAGE, EXIT_NOTHING_TESTED = _EXIT["internal_error"], _EXIT["usage_error"], _EXIT["nothing_tested"]

BINARY_VARIABLE = "OOMH_BINARY"
# The Python the wheel's console script runs under, tried first for the demo's PyTorch jobs (__main__.py).
TORCH_PYTHON_VARIABLE = "OOMH_TORCH_PYTHON"
# Where the wheel keeps the C++ command and its pieces: CMake's installed layout under the package.
NATIVE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


class HarnessNotFound(RuntimeError):
    """The `oomharness` command is neither where OOMH_BINARY says nor on PATH."""


def packaged_binary():
    """The C++ command the wheel carries beside this package (oomharness/_native/bin/oomharness), or None
    when the package was installed without it (from python/ alone)."""
    path = os.path.join(NATIVE_DIR, "bin", "oomharness")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def find_binary():
    """The path of the `oomharness` command: $OOMH_BINARY when set, else the one the wheel carries beside
    this package, else the first on PATH (the Debian package, `cmake --install`).

    Raises HarnessNotFound with a message that says where it looked and what to do."""
    named = os.environ.get(BINARY_VARIABLE)
    if named:
        if os.path.isfile(named) and os.access(named, os.X_OK):
            return os.path.abspath(named)
        raise HarnessNotFound(
            "%s=%s is not an executable file: point it at the oomharness command (a build's "
            "build/runner/oomharness, or an installed bin/oomharness)" % (BINARY_VARIABLE, named))
    packaged = packaged_binary()
    if packaged:
        return packaged
    found = shutil.which("oomharness")
    if found:
        return found
    raise HarnessNotFound(
        "cannot find the oomharness command: this package was installed without it, it is not on PATH and "
        "%s is not set. Install the wheel (`pip install .` in a checkout of oomharness), or the Debian "
        "package, or set %s to build/runner/oomharness" % (BINARY_VARIABLE, BINARY_VARIABLE))


def gpu_present():
    """Whether this machine shows an NVIDIA GPU (nvidia-smi lists one). The runner asks the same way."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        p = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


class Outcome:
    """What `oomharness exec` said about one job.

    name: the job's full name, suite::job (exec::NAME). status: passed, failed, error, inconclusive, interrupted or skipped (results.json's), or "error" when
    the command itself failed (exit 3 or 4: the message is its error output). message: the one sentence
    that explains a status other than passed. output_tail: the last lines the job printed."""

    def __init__(self, returncode, status, message, job=None, out_dir=None, stdout="", stderr="", name=None,
                 environment=None):
        self.returncode = returncode
        self.environment = environment or {}  # results.json's `environment`: the device, the versions
        self.name = name or "the job"  # suite::job, as every command names it
        self.status = status
        self.message = message
        self.job = job or {}
        self.out_dir = out_dir
        self.stdout = stdout
        self.stderr = stderr

    @property
    def passed(self):
        # Green means tested: exit 0 and the job's own status passed (an inconclusive job beside nothing
        # else exits 5, never 0).
        return self.returncode == EXIT_OK and self.status == "passed"

    @property
    def report(self):
        return os.path.join(self.out_dir, "report.html") if self.out_dir else None

    @property
    def findings(self):
        """The job's findings, what held the memory (docs/diagnosis.md), as `explain` words them:
        "finding (kept_with_graph): tensors made at train.py:80 ... stay alive step after step ..."."""
        return ["finding (%s): %s" % (f.get("rule", "?"), f.get("sentence", ""))
                for f in (self.job.get("findings") or []) if isinstance(f, dict)]

    @property
    def step_numbering(self):
        """Which numbering the steps its messages name are in, as every report says it (results.json's
        words: "steps counted from 1: ...", Note [Step numbering] in runner/src/suite/job_fields.cpp)."""
        return self.job.get("step_numbering") or ""

    @property
    def device(self):
        """Where the job ran, in results.json's words (Note [Saying what was simulated] in
        reports/include/oomharness/reports/result.h): "virtual" (the virtual CUDA device: PyTorch on the CPU),
        "double" (the CPU driver double: no PyTorch model, the harness alone), "gpu", or None when the
        harness wrote no results."""
        if not self.job:
            return None
        if self.job.get("virtual_device"):
            return "virtual"
        return "double" if self.environment.get("simulated_device") else "gpu"

    @property
    def output_tail(self):
        attempts = self.job.get("attempts") or []
        tail = attempts[-1].get("output_tail") or "" if attempts else ""
        return tail.splitlines() if isinstance(tail, str) else list(tail)

    def __repr__(self):
        return "Outcome(%s, %r)" % (self.status, self.message)


def exec_command(command, cap=None, fault=(), expect=(), name=None, out_dir=None, simulate=None, device=None,
                 timeout=None, restart=None, env=None, extra_args=(), binary=None, cwd=None, restart_on=None,
                 target_step=None, step_base=None, threads_per_job=None):
    """Runs `oomharness exec [flags] -- command` and returns its Outcome.

    fault, expect: one rule or check (--fault, --expect syntax) or a list of them. cwd: the job's working
    folder (default: this process's).

    simulate: True runs on the CPU (Python jobs on the virtual CUDA device), False on the GPU, None: on the
    CPU when this machine has no GPU. out_dir: where results.json, report.html and the logs go (default: a
    new temporary folder, kept)."""
    binary = binary or find_binary()
    if out_dir is None:
        out_dir = tempfile.mkdtemp(prefix="oomh-")
    if simulate is None:
        simulate = not gpu_present()
    argv = [binary, "exec", "--out", out_dir]
    if simulate:
        argv.append("--simulate")
    if device:
        argv += ["--device", device]
    if cap:
        argv += ["--cap", str(cap)]
    for f in ([fault] if isinstance(fault, str) else fault):
        argv += ["--fault", f]
    for e in ([expect] if isinstance(expect, str) else expect):
        argv += ["--expect", e]
    if name:
        argv += ["--name", name]
    if timeout:
        # A number is seconds; a text is the command's duration syntax ("30s", "10m").
        argv += ["--timeout", "%gs" % timeout if isinstance(timeout, (int, float)) else str(timeout)]
    if restart:
        argv += ["--restart", str(restart)]
    if restart_on:
        argv += ["--restart-on", str(restart_on)]
    if target_step is not None:
        argv += ["--target-step", str(target_step)]
    if step_base is not None:
        argv += ["--step-base", str(step_base)]
    if threads_per_job is not None:
        argv += ["--threads-per-job", str(threads_per_job)]
    for k, v in (env or {}).items():
        # `--env NAME=VALUE` splits at the first '=': a name holding one would set another variable.
        if not isinstance(k, str) or not k or "=" in k or "\0" in k or "\0" in str(v):
            raise ValueError("env: %r is not an environment variable's name and value (a name has no '=', "
                             "neither has a NUL)" % ({k: v},))
        argv += ["--env", "%s=%s" % (k, v)]
    argv += list(extra_args)
    argv += ["--"] + [str(c) for c in command]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    return outcome_from(proc.returncode, out_dir, proc.stdout, proc.stderr)


def outcome_from(returncode, out_dir, stdout="", stderr=""):
    """Reads the one job of out_dir/results.json into an Outcome."""
    if returncode in (EXIT_INTERNAL, EXIT_USAGE):
        return Outcome(returncode, "error", (stderr.strip() or stdout.strip() or "oomharness exited %d" % returncode),
                       out_dir=out_dir, stdout=stdout, stderr=stderr)
    try:
        with open(os.path.join(out_dir, "results.json")) as f:
            results = json.load(f)
        suite = results["suites"][0]
        job = suite["jobs"][0]
        environment = results.get("environment") or {}
    except (OSError, ValueError, KeyError, IndexError) as e:
        return Outcome(returncode, "error", "oomharness exited %d and wrote no readable results (%s): %s"
                       % (returncode, e, stderr.strip()), out_dir=out_dir, stdout=stdout, stderr=stderr)
    status = job.get("status", "error")
    message = job.get("message") or ""
    if status == "passed" and returncode != EXIT_OK:
        status, message = "error", "oomharness exited %d for a passed job: %s" % (returncode, stderr.strip())
    return Outcome(returncode, status, message, job=job, out_dir=out_dir, stdout=stdout, stderr=stderr,
                   name="%s::%s" % (suite.get("name", "exec"), job.get("name", "")),
                   environment=environment if isinstance(environment, dict) else {})
