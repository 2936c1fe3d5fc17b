"""pytest plugin: test that training code survives running out of GPU memory, from an ordinary pytest test.

Registered through the `pytest11` entry point (python/pyproject.toml) when the package is installed, or
loaded with `pytest -p oomharness.pytest_plugin`. Two ways to use it:

The fixture runs a training command under the harness and fails the test with the harness's one-sentence
reason when the job did not pass:

    def test_trainer_halves_its_batch(oomharness):
        oomharness.exec([sys.executable, "train.py", "--batch", "4096"],
                        cap="128MiB", expect=["oom_visible", "batch_halving"])

The marker runs the test itself in a subprocess (`python -m pytest NODEID`) under the harness:

    @pytest.mark.oomharness(cap="128MiB", expect=["oom_visible", "batch_halving"])
    def test_training_loop():
        train.main(["--batch", "4096"])

Note [Verdicts as test outcomes]
A job that passed passes the test. A failed job fails it, with the first failing verdict's sentence as
the message ("OOM at step 1 (batch 4096) ended attempt 1, but no step completed afterwards") and the job's
last output lines under it. An inconclusive job (every fault absorbed, none fired) and a run that tested
nothing fail too: green means tested, and a test that did not test recovery must not pass. A job the
harness could not run or cannot show was tested (error), or the harness itself failing, is reported as an
ERROR of the test (pytest_report_teststatus below), as pytest reports a broken fixture.

Without a GPU (no `nvidia-smi -L`), or with --oomh-device=virtual, jobs run with `--simulate`: Python jobs
on the virtual CUDA device, the user's unchanged CUDA code on the CPU (docs/without-a-gpu.md).
--oomh-out DIR keeps each test's results.json, report.html and logs in DIR/<test>/; otherwise they go to
pytest's temporary folder, and a failure names its report.
"""

import os
import re
import sys
import types

import pytest

from oomharness import harness

# Set in the test's own subprocess (the marker's route), where the test must simply run.
INNER_VARIABLE = "OOMH_PYTEST_INNER"
_STATUS_KEY = "oomharness_status"


def pytest_addoption(parser):
    group = parser.getgroup("oomharness", "oomharness: out-of-memory recovery checks")
    group.addoption("--oomh-device", choices=("auto", "gpu", "virtual"), default="auto",
                    help="where jobs run: gpu, virtual (the CPU, Python jobs on the virtual CUDA device), or "
                         "auto (default: virtual when nvidia-smi lists no GPU)")
    group.addoption("--oomh-out", metavar="DIR", default=None,
                    help="keep each test's results.json, report.html and logs in DIR/<test>/")
    group.addoption("--oomh-binary", metavar="PATH", default=None,
                    help="the oomharness command (default: $OOMH_BINARY, else the first on PATH)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "oomharness(cap=None, faults=(), expect=(), timeout=None, exit=0): run this test in a subprocess under "
        "oomharness with this cap, these fault rules and recovery checks; the verdicts decide the outcome")


class _Session:
    """Settings shared by every test of a run: the binary, the device, the output folder."""

    def __init__(self, config):
        self.config = config
        self._binary = None
        self._simulate = None

    def binary(self):
        if self._binary is None:
            named = self.config.getoption("--oomh-binary")
            if named:
                os.environ[harness.BINARY_VARIABLE] = named
            self._binary = harness.find_binary()
        return self._binary

    def simulate(self):
        if self._simulate is None:
            device = self.config.getoption("--oomh-device")
            self._simulate = device == "virtual" or (device == "auto" and not harness.gpu_present())
        return self._simulate

    def out_dir(self, item, tmp_factory):
        name = _folder_name(item.nodeid)
        root = self.config.getoption("--oomh-out")
        if root:
            path = os.path.join(os.path.abspath(root), name)
            os.makedirs(path, exist_ok=True)
            return path
        return str(tmp_factory.mktemp("oomh-" + name[-40:], numbered=True))


def _safe_name(text):
    return re.sub(r"[^A-Za-z0-9_.\[\]-]+", "-", text).strip("-") or "test"


def _folder_name(text):
    """A test's own folder under --oomh-out: its safe name, and when that changed the test id otherwise than
    by its "::", 8 hex digits of the id's hash (FNV-1a, as the runner's Note [One job, one folder]), so that
    `test[a b]` and `test[a-b]` never share one."""
    safe = _safe_name(text)
    # pytest's own "::" kept readable as "-" when each "-" can only be one: no "-" of the id's own, nothing
    # else changed ("test_user.py::test_halving" is "test_user.py-test_halving").
    if safe == text or ("-" not in text and safe == text.replace("::", "-")):
        return safe
    h = 14695981039346656037
    for c in text.encode("utf-8", "surrogatepass"):
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "%s-%08x" % (safe, (h ^ (h >> 32)) & 0xFFFFFFFF)


def _session(config):
    s = getattr(config, "_oomharness", None)
    if s is None:
        s = config._oomharness = _Session(config)
    return s


def _judge(item, outcome):
    """Turns an Outcome into the test's outcome (Note [Verdicts as test outcomes])."""
    item.user_properties.append((_STATUS_KEY, outcome.status))
    if outcome.report:
        item.user_properties.append(("oomharness_report", outcome.report))
    if outcome.passed:
        return
    job = outcome.name
    if outcome.status == "failed":
        head = "%s failed: %s" % (job, outcome.message)
    elif outcome.status == "inconclusive":
        head = "%s is inconclusive, so recovery was not tested: %s" % (job, outcome.message)
    elif outcome.status == "error":
        head = "oomharness could not test %s: %s" % (job, outcome.message)
    elif outcome.returncode == harness.EXIT_NOTHING_TESTED:
        head = "%s: nothing was tested (%s)" % (job, outcome.message or outcome.status)
    else:
        head = "%s %s: %s" % (job, outcome.status, outcome.message)
    item._oomh_reason = head
    lines = [head]
    tail = outcome.output_tail
    if tail:
        lines.append("output of its last attempt, last lines:")
        lines += ["| " + line for line in tail[-10:]]
    if outcome.report:
        lines.append("report: %s" % outcome.report)
    pytest.fail("\n".join(lines), pytrace=False)


class OomHarness:
    """The `oomharness` fixture: runs commands under the harness for one test."""

    def __init__(self, item, session, tmp_factory):
        self._item = item
        self._session = session
        self._tmp = tmp_factory
        self._runs = 0

    def exec(self, command, cap=None, faults=(), expect=(), name=None, timeout=None, restart=None, env=None,
             extra_args=(), check=True):
        """Runs `command` (a list) under `oomharness exec` with this cap, fault rules (--fault syntax) and
        checks (--expect syntax). With check (the default) the test fails unless the job passed; returns
        the harness.Outcome either way."""
        self._runs += 1
        out = self._session.out_dir(self._item, self._tmp)
        if self._runs > 1:
            out = os.path.join(out, "run-%d" % self._runs)
        outcome = harness.exec_command(
            command, cap=cap, faults=faults, expect=expect, out_dir=out, simulate=self._session.simulate(),
            name=name or _safe_name(self._item.name), timeout=timeout, restart=restart, env=env,
            extra_args=extra_args, binary=self._session.binary())
        if check:
            _judge(self._item, outcome)
        return outcome


@pytest.fixture
def oomharness(request, tmp_path_factory):
    """Runs training commands under oomharness: `oomharness.exec([...], cap=..., expect=[...])`."""
    session = _session(request.config)
    session.binary()  # not found: the test errs here, in set-up, with the message that says what to do
    return OomHarness(request.node, session, tmp_path_factory)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """The marker's route: run this test in a subprocess under the harness instead of here."""
    marker = pyfuncitem.get_closest_marker("oomharness")
    if marker is None or os.environ.get(INNER_VARIABLE) == "1":
        return None
    if marker.args:
        raise pytest.UsageError("@pytest.mark.oomharness takes keyword arguments only (cap=, faults=, expect=, ...)")
    kw = dict(marker.kwargs)
    unknown = set(kw) - {"cap", "faults", "expect", "timeout", "exit", "restart", "env"}
    if unknown:
        raise pytest.UsageError("@pytest.mark.oomharness: unknown argument(s) %s" % ", ".join(sorted(unknown)))
    config = pyfuncitem.config
    session = _session(config)
    expect = list([kw["expect"]] if isinstance(kw.get("expect"), str) else kw.get("expect", ()))
    # The test's own assertions count: its process must exit 0 unless the marker says otherwise (exit=None).
    if kw.get("exit", 0) is not None:
        expect.append("exit=%d" % kw.get("exit", 0))
    # The job's sitecustomize imports oomharness before pytest could rewrite it: that warning says nothing.
    inner = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=",
             "-W", "ignore::pytest.PytestAssertRewriteWarning",
             "--rootdir", str(config.rootpath)]
    pm = config.pluginmanager
    if pm.has_plugin("oomharness.pytest_plugin") and not pm.has_plugin("oomharness"):
        inner += ["-p", "oomharness.pytest_plugin"]  # loaded with -p here, not through the entry point
    inner.append(pyfuncitem.nodeid)
    env = dict(kw.get("env") or {})
    env[INNER_VARIABLE] = "1"
    outcome = harness.exec_command(
        inner, cap=kw.get("cap"), faults=kw.get("faults", ()), expect=expect,
        out_dir=session.out_dir(pyfuncitem, pyfuncitem.config._tmp_path_factory),
        simulate=session.simulate(), name=_safe_name(pyfuncitem.name), timeout=kw.get("timeout"),
        restart=kw.get("restart"), env=env, binary=session.binary(), cwd=str(config.rootpath))
    _judge(pyfuncitem, outcome)
    return True


class _Explained:
    """A failure's report that also tells pytest its one-line reason (pytest's longrepr protocol: toterminal()
    prints it, reprcrash.message is what the short summary and JUnit's `message` show): pytest.fail(pytrace=
    False) alone shows the reason in neither. (Under xdist the report travels as text: the failure still
    shows it.)"""

    def __init__(self, original, reason, item):
        self._original = original
        path, lineno = str(item.path), (item.location[1] or 0) + 1
        self.reprcrash = types.SimpleNamespace(path=path, lineno=lineno, message=reason)

    def toterminal(self, tw):
        if hasattr(self._original, "toterminal"):
            self._original.toterminal(tw)
        else:
            for line in str(self._original).splitlines():
                tw.line(line)

    def __str__(self):
        return str(self._original)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    reason = getattr(item, "_oomh_reason", None)
    if reason and report.when == "call" and report.failed and report.longrepr is not None:
        report.longrepr = _Explained(report.longrepr, reason, item)


def pytest_report_teststatus(report, config):
    # Note [Verdicts as test outcomes]: a job the harness could not test is an error of the test.
    # (xdist sends user_properties back from its workers as lists, not tuples.)
    props = [tuple(p) for p in (report.user_properties or ())]
    if report.when == "call" and report.failed and (_STATUS_KEY, "error") in props:
        return "error", "E", "ERROR"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """In the marker's subprocess: an out-of-memory error that leaves the test is one the code did not catch.

    pytest catches it, so the probe, which learns of uncaught ones from sys.excepthook, would take it for
    one the code caught and went on from: tell it here (probe.uncaught)."""
    outcome = yield
    if os.environ.get(INNER_VARIABLE) != "1" or item.get_closest_marker("oomharness") is None:
        return
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is None:
        return
    from oomharness import probe
    probe.uncaught(exc)
