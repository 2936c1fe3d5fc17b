"""pytest plugin: test that training code survives running out of GPU memory, from an ordinary pytest test.

`pip install .` in a checkout of oomharness installs the wheel: the `oomharness` command, its shim and this
plugin, registered through the `pytest11` entry point (or load it with `pytest -p oomharness.pytest_plugin`).
Two ways to use it, as pytest-memray's `limit_memory` marker and its fixture-free habit suggest:

The marker runs the test itself under the harness, in a subprocess (`python -m pytest TEST`); the test's
body is the training code, its assertions still count:

    @pytest.mark.oom(cap="128MiB", expect=["oom_visible", "batch_halving"])
    def test_training_loop():
        train.main(["--batch", "4096"])

The fixture runs a training command under the harness. The command runs in the test file's folder (a
relative `cwd=` is taken from there too), so `train.py` beside the test works from any folder:

    def test_trainer_halves_its_batch(oomharness):
        oomharness.exec([sys.executable, "train.py", "--batch", "4096"],
                        cap="128MiB", fault="step=3,times=2", expect=["oom_visible", "batch_halving"])

Both take the same arguments (_ARGUMENTS below, the one table), spelled as `oomharness exec`'s flags: cap,
fault (one rule or a list), expect (one check or a list), timeout, restart, restart_on, target_step,
step_base (0 when the code's log counts steps from 0: fault steps and messages then use its numbers), env,
cwd; the marker also exit (the code the test's process must end with; None: any), the fixture also name,
extra_args and check. A misspelt or mistyped argument errs the test, naming it and the argument.

Note [Verdicts as test outcomes]
A job that passed passes the test. A failed job fails it; the message is the first failing verdict's
sentence ("OOM at step 1 (batch 4096) ended attempt 1, but no step completed afterwards"), the job's
findings (what held the memory: docs/diagnosis.md), its last output lines (the marker's: the test body's own,
Note [The inner pytest says nothing of its own]) and the report's path. The terminal summary says where the
jobs ran when no GPU ran them (Note [Where the tests ran]). A job the
harness could not run or cannot show was tested (an error), or the harness itself failing, is an ERROR of
the test (pytest_report_teststatus below), as pytest reports a broken fixture.
An inconclusive job (every fault absorbed, or none fired) tested nothing: as `oomharness run` does without
--strict, the test is reported INCONCLUSIVE (a skip, with its reason in the summary), never passed, and a
session in which every oomharness test was inconclusive exits 5, pytest's "nothing was tested", rather than
0: green means tested. --oomh-strict fails inconclusive tests, as `run --strict` fails inconclusive jobs.

Options (each also an ini setting, oomh_device, oomh_out, oomh_strict): --oomh-device auto|gpu|virtual
(default auto: virtual, the CPU, when `nvidia-smi -L` lists no GPU; Python jobs then run on the virtual CUDA
device, docs/without-a-gpu.md); --oomh-out DIR keeps each test's results.json, report.html and logs in
DIR/<test>/ (default: pytest's temporary folder; a failure names its report either way); --oomh-strict;
--oomh-binary PATH (default: $OOMH_BINARY, else the command the wheel carries, else the first on PATH).
Under `pytest -n N` (pytest-xdist) each job gets OMP_NUM_THREADS = its share of the cores unless it is set
(_Session.threads_per_job).
"""

import os
import re
import sys
import types

import pytest

from oomharness import _abi, harness

MARKER = "oom"
# The marker's name before it was `oom`: a test marked with it must not quietly run without the harness.
OLD_MARKER = "oomharness"
# Set in the test's own subprocess (the marker's route), where the test must simply run.
INNER_VARIABLE = "OOMH_PYTEST_INNER"
_STATUS_KEY = "oomharness_status"
_REASON_KEY = "oomharness_reason"
_DEVICE_KEY = "oomharness_device"


# Note [The marker's and the fixture's arguments]
# One table of what a test may ask of its job, read by the marker's check, the fixture's check and the
# plugin's docs alike: each argument's kind and what it means in words. The values are handed to
# harness.exec_command, which passes them to `oomharness exec` as its flags; the harness checks the texts
# themselves (a size, a fault rule, a check) with the same parser as the command line, and the plugin names
# the argument when it refuses one (_ARGUMENT_OF_FLAG).
def _text(value):
    return isinstance(value, str) and value.strip() != ""


def _texts(value):
    return _text(value) or (isinstance(value, (list, tuple)) and all(_text(v) for v in value))


def _duration(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0) or _text(value)


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _step_base(value):
    return value in (0, 1) and not isinstance(value, bool)


_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _mapping(value):
    # A name as a suite's `env:` and `--env` take it (is_variable_name in runner/src/suite/items.h): never one
    # holding '=', which `--env MODE=fast=1` would read as MODE='fast=1'. A value cannot hold a NUL (an
    # environment string ends there).
    return isinstance(value, dict) and all(
        isinstance(k, str) and _VARIABLE_NAME.match(k) and "\0" not in str(v) for k, v in value.items())


def _exit_code(value):
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _folder(value):
    return isinstance(value, (str, os.PathLike)) and str(value) != ""


def _any(value):
    return True


_ARGUMENTS = {
    # name: (check, what it takes, who takes it: "both", "marker" or "fixture")
    "cap": (_text, "a size text, as --cap: '2GiB', '512MiB'", "both"),
    "fault": (_texts, "a fault rule, as --fault, or a list of them: 'step=3,times=2'", "both"),
    "expect": (_texts, "a check, as --expect, or a list of them: 'batch_halving'", "both"),
    "timeout": (_duration, "seconds, or a duration text as --timeout: '30s', '10m'", "both"),
    "restart": (_count, "how many times the job may be restarted (an int, 0 or more)", "both"),
    "restart_on": (_text, "what restarts it, as --restart-on: 'oom', 'nonzero,signal'", "both"),
    "target_step": (_count, "the step training must reach (an int)", "both"),
    "step_base": (_step_base, "the number of the first training step in the code's own log: 0 or 1 (default 1)", "both"),
    "env": (_mapping, "a dict of the job's environment variables (names of letters, digits and _)", "both"),
    "cwd": (_folder, "the job's working folder; a relative one is taken from the test file's folder", "both"),
    "exit": (_exit_code, "the exit code the test's process must end with (an int), or None for any", "marker"),
    "name": (_text, "the job's name in reports", "fixture"),
    "extra_args": (_any, "more `oomharness exec` flags (a list)", "fixture"),
    "check": (_any, "whether the test fails unless the job passed (default True)", "fixture"),
}

_ARGUMENT_OF_FLAG = {"--cap": "cap", "--fault": "fault", "--expect": "expect", "--timeout": "timeout",
                     "--restart": "restart", "--restart-on": "restart_on", "--target-step": "target_step",
                     "--step-base": "step_base", "--env": "env"}


def _edit_distance(a, b):
    """Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`, ignoring case: edit_distance()
    of include/oomharness/names.h."""
    a, b = a.lower(), b.lower()
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


def _closest(word, known):
    """The nearest of `known` when it is close enough to be a typo, else None: nearest_name() of
    include/oomharness/names.h with its one threshold (Note [One typo threshold]), so that the plugin
    suggests what the command line would."""
    allowed = max(1, min(3, (len(word) + 1) // 3))
    best, best_distance = None, allowed + 1
    for k in known:
        dist = _edit_distance(word, k)
        if dist < best_distance:
            best, best_distance = k, dist
    if best is None:
        for k in known:  # a name that contains a candidate, or is contained in one, is taken as the slip
            if len(k) >= 3 and len(word) >= 3 and (k in word or word in k):
                return k
    return best


class BadArgument(ValueError):
    """An argument of the marker or of the fixture's exec() that the plugin refuses."""


def check_arguments(kwargs, who, where):
    """Checks the arguments of the marker (who="marker") or of exec() (who="fixture") against _ARGUMENTS;
    raises BadArgument naming `where` (the test, the call) and the argument."""
    known = sorted(n for n, (_, _, w) in _ARGUMENTS.items() if w in ("both", who))
    for name, value in kwargs.items():
        if name not in known:
            near = _closest(name, known)
            hint = " (did you mean %s=?)" % near if near else ""
            raise BadArgument("%s: unknown argument %s=%s; it takes %s" % (where, name, hint, ", ".join(known)))
        check, what, _ = _ARGUMENTS[name]
        if not check(value):
            raise BadArgument("%s: %s=%r is not %s" % (where, name, value, what))


def _list(value):
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def pytest_addoption(parser):
    group = parser.getgroup("oomharness", "oomharness: out-of-memory recovery checks")
    group.addoption("--oomh-device", choices=_abi.DEVICES, default=None,
                    help="where jobs run: gpu, virtual (the CPU, Python jobs on the virtual CUDA device), or "
                         "auto (default: virtual when nvidia-smi lists no GPU)")
    group.addoption("--oomh-out", metavar="DIR", default=None,
                    help="keep each test's results.json, report.html and logs in DIR/<test>/")
    group.addoption("--oomh-strict", action="store_true", default=None,
                    help="an inconclusive job (its faults absorbed or never fired) fails its test instead of "
                         "being reported INCONCLUSIVE")
    group.addoption("--oomh-binary", metavar="PATH", default=None,
                    help="the oomharness command (default: $OOMH_BINARY, else the one the wheel carries, else "
                         "the first on PATH)")
    parser.addini("oomh_device", "as --oomh-device", default="auto")
    parser.addini("oomh_out", "as --oomh-out (relative to the ini file's folder)", default="")
    parser.addini("oomh_strict", "as --oomh-strict", type="bool", default=False)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "%s(cap=None, fault=(), expect=(), timeout=None, exit=0, ...): run this test in a subprocess under "
        "oomharness with this cap, these fault rules and recovery checks; the verdicts decide the outcome "
        "(oomharness.pytest_plugin)" % MARKER)
    config.addinivalue_line("markers", "%s: the old name of @pytest.mark.%s, refused" % (OLD_MARKER, MARKER))


class _Session:
    """Settings shared by every test of a run: the binary, the device, the output folder, strictness; and
    what the oomharness tests came to (pytest_sessionfinish)."""

    def __init__(self, config):
        self.config = config
        self._binary = None
        self._simulate = None
        self.statuses = []

    def binary(self):
        if self._binary is None:
            named = self.config.getoption("--oomh-binary")
            if named:
                os.environ[harness.BINARY_VARIABLE] = named
            self._binary = harness.find_binary()
        return self._binary

    def device(self):
        device = self.config.getoption("--oomh-device") or self.config.getini("oomh_device") or "auto"
        if device not in ("auto", "gpu", "virtual"):
            raise pytest.UsageError("oomh_device = %s: it is auto, gpu or virtual" % device)
        return device

    def simulate(self):
        if self._simulate is None:
            device = self.device()
            self._simulate = device == "virtual" or (device == "auto" and not harness.gpu_present())
        return self._simulate

    def threads_per_job(self):
        """Note [CPU share of packed jobs] (runner/src/exec/cpu_share.h), for `pytest -n N`: each xdist
        worker runs its tests' jobs one at a time, so N jobs run at once; each gets OMP_NUM_THREADS = its
        share of the cores, as `oomharness run -j N` gives its jobs, unless OMP_NUM_THREADS is already set
        (the runner then keeps it). None: one worker, or none, and the job may have every core."""
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
        if workers <= 1 or os.environ.get("OMP_NUM_THREADS"):
            return None
        return max(1, len(os.sched_getaffinity(0)) // workers)

    def strict(self):
        option = self.config.getoption("--oomh-strict")
        return bool(option) if option is not None else bool(self.config.getini("oomh_strict"))

    def out_root(self):
        root = self.config.getoption("--oomh-out")
        if root:
            return os.path.abspath(root)
        ini = self.config.getini("oomh_out")
        if ini:
            base = os.path.dirname(str(self.config.inipath)) if self.config.inipath else str(self.config.rootpath)
            return os.path.join(base, ini)
        return None

    def out_dir(self, item, tmp_factory):
        name = _folder_name(item.nodeid)
        root = self.out_root()
        if root:
            path = os.path.join(root, name)
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


def _test_folder(item):
    return os.path.dirname(str(item.path))


def _resolve_cwd(item, cwd):
    """The job's working folder: the test file's folder, or `cwd` taken from there."""
    folder = _test_folder(item)
    return folder if cwd is None else os.path.normpath(os.path.join(folder, os.fspath(cwd)))


def _judge(item, session, outcome, where):
    """Turns an Outcome into the test's outcome (Note [Verdicts as test outcomes])."""
    item.user_properties.append((_STATUS_KEY, outcome.status))
    if outcome.device and outcome.status in ("passed", "failed", "inconclusive"):  # a job that ran somewhere
        item.user_properties.append((_DEVICE_KEY, outcome.device))
    if outcome.report:
        item.user_properties.append(("oomharness_report", outcome.report))
    if outcome.passed:
        return
    job = outcome.name
    message = outcome.message
    if outcome.status == "failed":
        head = "%s failed: %s" % (job, message)
    elif outcome.status == "inconclusive":
        head = "%s is inconclusive, so recovery was not tested: %s" % (job, message)
    elif outcome.status == "skipped":
        head = "%s was skipped: %s" % (job, message or "the harness skipped it")
    elif outcome.status == "error" and outcome.returncode == harness.EXIT_USAGE:
        head = _name_the_argument(message, where)  # the test asked for something the harness refuses
    elif outcome.status == "error":
        head = "oomharness could not test %s: %s" % (job, message)
    elif outcome.returncode == harness.EXIT_NOTHING_TESTED:
        head = "%s: nothing was tested (%s)" % (job, message or outcome.status)
    else:
        head = "%s %s: %s" % (job, outcome.status, message)
    item._oomh_reason = head
    item.user_properties.append((_REASON_KEY, head))
    report = outcome.report if outcome.report and os.path.isfile(outcome.report) else None
    if outcome.status == "skipped" or (outcome.status == "inconclusive" and not session.strict()):
        pytest.skip(head + (" | report: %s" % report if report else ""))
    lines = [head]
    for finding in outcome.findings:
        lines.append(finding)
    if outcome.step_numbering and any("step" in line for line in lines):
        lines.append("(%s)" % outcome.step_numbering)
    tail = outcome.output_tail
    if tail:
        lines.append("output of its last attempt, last lines:")
        lines += ["| " + line for line in tail[-10:]]
    if report:
        lines.append("report: %s" % report)
    pytest.fail("\n".join(lines), pytrace=False)


def _name_the_argument(message, where):
    """The command's usage error names its flag (--cap, --fault): name the test's argument instead."""
    for flag, name in _ARGUMENT_OF_FLAG.items():
        if re.search(r"(^|[\s'\"(])%s([\s:='\"]|$)" % re.escape(flag), message):
            return "%s: %s= was refused: %s" % (where, name, message)
    return "%s: %s" % (where, message)


class OomHarness:
    """The `oomharness` fixture: runs commands under the harness for one test."""

    def __init__(self, item, session, tmp_factory):
        self._item = item
        self._session = session
        self._tmp = tmp_factory
        self._runs = 0

    def exec(self, command, **kwargs):
        """Runs `command` (a list) under `oomharness exec` with the arguments of _ARGUMENTS: cap=, fault=
        (--fault syntax; one rule or a list), expect= (--expect syntax), timeout=, restart=, restart_on=,
        target_step=, env=, cwd= (default: the test file's folder; a relative one is taken from there),
        name=, extra_args=, check=. With check (the default) the test fails unless the job passed; returns
        the harness.Outcome either way."""
        where = "oomharness.exec() in %s" % self._item.nodeid
        check_arguments(kwargs, "fixture", where)
        if not isinstance(command, (list, tuple)) or not command:
            raise BadArgument("%s: the command is a non-empty list of words, not %r" % (where, command))
        self._runs += 1
        out = self._session.out_dir(self._item, self._tmp)
        if self._runs > 1:
            out = os.path.join(out, "run-%d" % self._runs)
        outcome = harness.exec_command(
            command, cap=kwargs.get("cap"), fault=_list(kwargs.get("fault")), expect=_list(kwargs.get("expect")),
            out_dir=out, simulate=self._session.simulate(), name=kwargs.get("name") or _safe_name(self._item.name),
            timeout=kwargs.get("timeout"), restart=kwargs.get("restart"), restart_on=kwargs.get("restart_on"),
            target_step=kwargs.get("target_step"), step_base=kwargs.get("step_base"), env=kwargs.get("env"), extra_args=kwargs.get("extra_args", ()),
            binary=self._session.binary(), cwd=_resolve_cwd(self._item, kwargs.get("cwd")),
            threads_per_job=self._session.threads_per_job())
        if kwargs.get("check", True):
            _judge(self._item, self._session, outcome, where)
        return outcome


@pytest.fixture
def oomharness(request, tmp_path_factory):
    """Runs training commands under oomharness: `oomharness.exec([...], cap=..., expect=[...])`."""
    session = _session(request.config)
    session.binary()  # not found: the test errs here, in set-up, with the message that says what to do
    request.node.user_properties.append(("oomharness_uses", "fixture"))
    return OomHarness(request.node, session, tmp_path_factory)


def _marker(item):
    return item.get_closest_marker(MARKER)


def _marker_where(item):
    return "@pytest.mark.%s on %s" % (MARKER, item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Bad marker arguments err the test in set-up, naming it and the argument, before anything runs."""
    if item.get_closest_marker(OLD_MARKER) is not None:
        pytest.fail("%s: @pytest.mark.%s is now @pytest.mark.%s (same arguments, but fault= for faults=)"
                    % (item.nodeid, OLD_MARKER, MARKER), pytrace=False)
    marker = _marker(item)
    if marker is None or os.environ.get(INNER_VARIABLE) == "1":
        return
    if marker.args:
        pytest.fail("%s: takes keyword arguments only (cap=, fault=, expect=, ...), not %r"
                    % (_marker_where(item), marker.args), pytrace=False)
    problem = None
    try:
        check_arguments(marker.kwargs, "marker", _marker_where(item))
        _session(item.config).binary()
    except BadArgument as e:
        problem = str(e)
    except harness.HarnessNotFound as e:
        problem = "%s: %s" % (_marker_where(item), e)
    if problem:  # outside the except: pytest would show the BadArgument too, as its cause
        pytest.fail(problem, pytrace=False)


def _inner_test_id(item):
    """The test's id for the subprocess: its file's absolute path and the rest of its node id, so that it is
    found whatever folder pytest ran from."""
    _, _, rest = item.nodeid.partition("::")
    return str(item.path) + ("::" + rest if rest else "")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """The marker's route: run this test in a subprocess under the harness instead of here."""
    marker = _marker(pyfuncitem)
    if marker is None or os.environ.get(INNER_VARIABLE) == "1":
        return None
    kw = dict(marker.kwargs)
    config = pyfuncitem.config
    session = _session(config)
    pyfuncitem.user_properties.append(("oomharness_uses", "marker"))
    expect = _list(kw.get("expect"))
    # The test's own assertions count: its process must exit 0 unless the marker says otherwise (exit=None).
    if kw.get("exit", 0) is not None:
        expect.append("exit=%d" % kw.get("exit", 0))
    # The job's sitecustomize imports oomharness before pytest could rewrite it: that warning says nothing.
    # Note [The inner pytest says nothing of its own]: no terminal reporter in the subprocess.
    inner = [sys.executable, "-m", "pytest", "-s", "-p", "no:terminal", "-p", "no:cacheprovider", "-p", "no:xdist",
             "-o", "addopts=", "-W", "ignore::pytest.PytestAssertRewriteWarning", "--rootdir", str(config.rootpath)]
    if config.inipath:
        inner += ["-c", str(config.inipath)]
    pm = config.pluginmanager
    if pm.has_plugin("oomharness.pytest_plugin") and not pm.has_plugin("oomharness"):
        inner += ["-p", "oomharness.pytest_plugin"]  # loaded with -p here, not through the entry point
    inner.append(_inner_test_id(pyfuncitem))
    env = dict(kw.get("env") or {})
    env[INNER_VARIABLE] = "1"
    # The test's body runs where pytest runs it (its invocation folder), unless cwd= says otherwise.
    cwd = str(config.invocation_params.dir) if kw.get("cwd") is None else _resolve_cwd(pyfuncitem, kw["cwd"])
    outcome = harness.exec_command(
        inner, cap=kw.get("cap"), fault=_list(kw.get("fault")), expect=expect,
        out_dir=session.out_dir(pyfuncitem, config._tmp_path_factory),
        simulate=session.simulate(), name=_safe_name(pyfuncitem.name), timeout=kw.get("timeout"),
        restart=kw.get("restart"), restart_on=kw.get("restart_on"), target_step=kw.get("target_step"),
        step_base=kw.get("step_base"), env=env,
        binary=session.binary(), cwd=cwd, threads_per_job=session.threads_per_job())
    _judge(pyfuncitem, session, outcome, _marker_where(pyfuncitem))
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


def _props(report):
    # (xdist sends user_properties back from its workers as lists, not tuples.)
    return dict(tuple(p) for p in (report.user_properties or ()) if len(p) == 2)


def pytest_report_teststatus(report, config):
    # Note [Verdicts as test outcomes]: a job the harness could not test is an error of the test; an
    # inconclusive one is INCONCLUSIVE, not a plain skip.
    if report.when != "call":
        return None
    status = _props(report).get(_STATUS_KEY)
    if report.failed and status == "error":
        return "error", "E", "ERROR"
    if report.skipped and status == "inconclusive":
        return "inconclusive", "i", "INCONCLUSIVE"
    return None


# Note [The inner pytest says nothing of its own]
# The marker's test runs in `python -m pytest` under the harness, and what that process prints is the job's
# output: a failed test shows its last lines. pytest's own lines (the progress dots, the warnings summary,
# "1 passed, 2 warnings in 3.1s") filled them and pushed the trainer's out (issue 40), so the inner pytest
# runs without its terminal reporter (-p no:terminal), and this plugin prints, in its place, the one line
# that says how the test's body failed, if it did: "tests/test_x.py::test_loop failed: OutOfMemoryError: ...",
# after the trainer's own output. The outer test shows the verdict's sentence above them.
def _say_inner_failure(report):
    if not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else (str(report.longrepr or "").strip().splitlines() or [""])[-1]
    how = "failed" if report.when == "call" else "errored in its %s" % report.when
    sys.stdout.flush()
    sys.stderr.write("%s %s: %s\n" % (report.nodeid, how, message))
    sys.stderr.flush()


def pytest_collectreport(report):
    if os.environ.get(INNER_VARIABLE) == "1" and report.failed:
        _say_inner_failure(report)


def pytest_runtest_logreport(report):
    if os.environ.get(INNER_VARIABLE) == "1":
        _say_inner_failure(report)
    if report.when != "call":
        return
    props = _props(report)
    if _STATUS_KEY in props:
        _SESSION_TALLY.append((report.nodeid, props[_STATUS_KEY], props.get(_REASON_KEY, ""), props.get(_DEVICE_KEY)))


# What the oomharness tests of this process's session came to (the controller's, under xdist, from the
# workers' reports): for the summary and the exit status.
_SESSION_TALLY = []


def pytest_sessionstart(session):
    del _SESSION_TALLY[:]


# Note [Where the tests ran]
# A green run on a CPU-only runner must not read as a GPU's (issue 40): the command says on every report which
# device ran its jobs (Note [Saying what was simulated] in reports/include/oomharness/reports/result.h), and the
# terminal summary says it for the session's oomharness tests, in the same words, from each job's results.json.
_DEVICE_WORDS = {
    "virtual": "on the virtual CUDA device (your PyTorch code on the CPU, its GPU memory modelled): recovery "
               "verdicts are meaningful, absolute memory figures are modelled; confirm on a GPU before a long "
               "training (docs/without-a-gpu.md)",
    "double": "on the CPU driver double: they show the harness, not a GPU",
}


def _device_lines():
    counts = {}
    for _, _, _, device in _SESSION_TALLY:
        if device in _DEVICE_WORDS:
            counts[device] = counts.get(device, 0) + 1
    return ["oomharness: no GPU ran these tests: %d ran %s" % (counts[d], _DEVICE_WORDS[d])
            for d in ("virtual", "double") if counts.get(d)]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    inconclusive = [(n, r) for n, s, r, _ in _SESSION_TALLY if s == "inconclusive"]
    if inconclusive:
        terminalreporter.section("oomharness: inconclusive (recovery was not tested)", sep="-")
        for nodeid, reason in inconclusive:
            terminalreporter.line("INCONCLUSIVE %s - %s" % (nodeid, reason))
        if not _tested_anything():
            terminalreporter.line("oomharness: nothing was tested: every oomharness test was inconclusive (exit 5); "
                                  "--oomh-strict fails them instead")
    for line in _device_lines():
        terminalreporter.line(line)


def _tested_anything():
    return any(s in ("passed", "failed") for _, s, _, _ in _SESSION_TALLY)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # Green means tested: a session whose oomharness tests were all inconclusive exits 5, as the command does.
    if _SESSION_TALLY and not _tested_anything() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """In the marker's subprocess: an out-of-memory error that leaves the test is one the code did not catch.

    pytest catches it, so the probe, which learns of uncaught ones from sys.excepthook, would take it for
    one the code caught and went on from: tell it here (probe.uncaught)."""
    outcome = yield
    if os.environ.get(INNER_VARIABLE) != "1" or _marker(item) is None:
        return
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is None:
        return
    from oomharness import probe
    probe.uncaught(exc)
