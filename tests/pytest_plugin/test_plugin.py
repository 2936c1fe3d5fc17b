"""The pip package and its pytest plugin, as a user meets them (run by run.py; see CMakeLists.txt).

The package is installed with `pip install --no-build-isolation` into a temporary folder; each check runs a
real `python3 -m pytest` on a user's test file (USER_TESTS) with that folder on PYTHONPATH, so the plugin
arrives through its `pytest11` entry point, and reads what pytest printed.
"""

import configparser
import json
import os
import re
import shutil
import subprocess
import sys
from xml.etree import ElementTree

import pytest

SOURCE = os.environ.get("OOMH_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("OOMH_BUILD_DIR", os.path.join(SOURCE, "build"))
BINARY = os.path.join(BUILD, "runner", "oomharness")
TRAIN = os.path.join(SOURCE, "examples", "python", "train.py")

# A user's tests, in proj/tests/ beside a copy of train.py, run from proj/elsewhere/: the fixture names
# `train.py` relative to the test file's folder, the marker's test body finds it beside its file.
USER_TESTS = '''
import os, runpy, sys
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# Under a 280 MiB cap the mlp at batch 4096 runs out in PyTorch's allocator (torch.OutOfMemoryError) after
# cuBLAS's two 64 MiB handles fit; under 256 MiB autograd's handle is refused first (CUBLAS_STATUS_ALLOC_FAILED,
# a RuntimeError), as on a GPU (Note [What libraries allocate outside the caching allocator] in virtual_device/libraries.py).
SMALL = ["--model", "mlp", "--steps", "4", "--batch", "4096"]
CHECKS = ["oom_visible", "batch_halving"]

def test_fixture_halving(oomharness):
    oomharness.exec([sys.executable, "train.py"] + SMALL + ["--recovery", "halve"], cap="280MiB", expect=CHECKS)

def test_fixture_no_halving(oomharness):
    oomharness.exec([sys.executable, "train.py"] + SMALL + ["--recovery", "none"], cap="280MiB", expect=CHECKS)

@pytest.mark.oom(cap="280MiB", expect=CHECKS)
def test_marker_halving():
    assert runpy.run_path(os.path.join(HERE, "train.py"))["main"](SMALL + ["--recovery", "halve"]) == 0

@pytest.mark.oom(cap="280MiB", expect=CHECKS)
def test_marker_no_halving():
    assert runpy.run_path(os.path.join(HERE, "train.py"))["main"](SMALL + ["--recovery", "none"]) == 0

def test_fixture_fault_never_fires(oomharness):
    # Nothing reaches a millionth allocation: no fault fires, so nothing was tested.
    oomharness.exec([sys.executable, "train.py"] + SMALL + ["--recovery", "halve"], fault="nth=1000000",
                    expect=["oom_visible"])

def test_fixture_command_missing(oomharness):
    oomharness.exec(["/nonexistent/trainer"], cap="280MiB", expect=CHECKS)

@pytest.mark.oom(faults="step=1", expect=CHECKS)
def test_marker_misspelt_argument():
    pass

@pytest.mark.oom(cap="128XB", expect=CHECKS)
def test_marker_bad_cap():
    pass

def test_fixture_cwd(oomharness):
    # cwd= relative to the test file's folder: the job runs in proj/tests/data and finds ../train.py.
    oomharness.exec([sys.executable, "../train.py"] + SMALL + ["--recovery", "halve"], cap="280MiB",
                    expect=CHECKS, cwd="data")
'''
ALL_TESTS = 9


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """The package, pip-installed offline from a copy of python/ (pip builds in the source folder): the
    Python part alone, as on a tree where the command is installed (python/pyproject.toml; the whole wheel
    is tests/install/check_wheel.sh's)."""
    root = tmp_path_factory.mktemp("pip")
    src = root / "src"
    shutil.copytree(os.path.join(SOURCE, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = root / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--quiet", "--target", str(target), str(src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    return target


@pytest.fixture
def user_dir(tmp_path):
    """proj/: tests/test_user.py and tests/train.py, tests/data/, and elsewhere/, the folder pytest runs in."""
    tests = tmp_path / "proj" / "tests"
    (tests / "data").mkdir(parents=True)
    (tests / "test_user.py").write_text(USER_TESTS)
    shutil.copy(TRAIN, str(tests / "train.py"))
    (tmp_path / "proj" / "elsewhere").mkdir()
    return tmp_path / "proj"


def run_pytest(proj, site, *args, binary=BINARY, path=None):
    """`python -m pytest ARGS ../tests` from proj/elsewhere."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith("OOMH_"):
            del env[name]
    env["PYTHONPATH"] = str(site)
    env["COLUMNS"] = "400"  # short summary lines are cut to the terminal's width
    if binary:
        env["OOMH_BINARY"] = binary
    if path is not None:
        env["PATH"] = path
    p = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *args, "../tests"],
                       cwd=str(proj / "elsewhere"), env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def folder(reports, test):
    """The one folder of `test` under an --oomh-out folder: tests-test_user.py-TEST-HASH where the id has a '/'
    (rootdir proj/), test_user.py-TEST where it has none (rootdir proj/tests/, which has a pytest.ini)."""
    found = [p for p in reports.iterdir()
             if re.fullmatch(r"(tests-test_user\.py-%s-[0-9a-f]{8}|test_user\.py-%s)" % (test, test), p.name)]
    assert len(found) == 1, (test, os.listdir(str(reports)))
    return found[0]


def outcomes(text):
    """{test name: PASSED/FAILED/ERROR/INCONCLUSIVE} from pytest's short summary (-rA) and the plugin's."""
    return {m.group(2): m.group(1)
            for m in re.finditer(r"^(PASSED|FAILED|ERROR|INCONCLUSIVE) \S+::(\w+)", text, re.M)}


def test_the_package_installs_offline_and_registers_the_plugin(installed, user_dir):
    rc, out = run_pytest(user_dir, installed, "--co", "-q")
    assert rc == 0, out
    assert "%d tests collected" % ALL_TESTS in out, out
    dist = [d for d in os.listdir(installed) if d.endswith(".dist-info")]
    entry_points = configparser.ConfigParser()
    entry_points.read(os.path.join(installed, dist[0], "entry_points.txt"))
    assert entry_points["pytest11"]["oomharness"] == "oomharness.pytest_plugin"
    assert {"probe", "recover.py", "virtual_device", "pytest_plugin.py", "harness.py", "__main__.py", "_abi.py"} <= set(
        os.listdir(os.path.join(installed, "oomharness")))
    assert {"__init__.py", "steps.py"} <= set(os.listdir(os.path.join(installed, "oomharness", "probe")))


def test_the_package_version_is_the_projects():
    """python/pyproject.toml spells the version; the wheel's pyproject.toml reads CMakeLists.txt's."""
    version = os.environ.get("OOMH_VERSION")
    text = open(os.path.join(SOURCE, "python", "pyproject.toml")).read()
    assert re.search(r'^version = "([^"]+)"', text, re.M).group(1) == (version or re.search(
        r'^version = "([^"]+)"', text, re.M).group(1))
    wheel = open(os.path.join(SOURCE, "pyproject.toml")).read()
    regex = re.search(r"^regex = '(.+)'$", wheel, re.M).group(1)
    found = re.search(regex, open(os.path.join(SOURCE, "CMakeLists.txt")).read())
    assert found, regex
    if version:
        assert found.group("value") == version


def test_verdicts_become_test_outcomes_with_the_reason_as_message(installed, user_dir):
    reports = user_dir / "reports"
    rc, out = run_pytest(user_dir, installed, "--oomh-out", str(reports), "--junitxml", str(user_dir / "junit.xml"))
    assert rc == 1, out
    got = outcomes(out)
    assert got == {
        "test_fixture_halving": "PASSED", "test_marker_halving": "PASSED", "test_fixture_cwd": "PASSED",
        "test_fixture_no_halving": "FAILED", "test_marker_no_halving": "FAILED",
        "test_fixture_fault_never_fires": "INCONCLUSIVE",  # tested nothing: never green
        "test_fixture_command_missing": "ERROR",           # the harness could not test it
        "test_marker_misspelt_argument": "ERROR", "test_marker_bad_cap": "ERROR",
    }, out
    # The one-sentence reason is the failure message, with the job's last lines and the report under it.
    assert "exec::test_fixture_no_halving failed: OOM at step 1 (batch 4096) ended attempt 1, but no step completed" in out, out
    # torch 2.x names the class torch.OutOfMemoryError (torch.cuda's is the same class); 1.x torch.cuda's.
    assert re.search(r"\| torch(\.cuda)?\.OutOfMemoryError: CUDA out of memory", out), out
    assert "report: %s" % (folder(reports, "test_fixture_no_halving") / "report.html") in out, out
    assert "exec::test_marker_no_halving failed: OOM at step" in out, out
    # Note [The inner pytest says nothing of its own]: the marker's failure shows the job's own last lines
    # (the test body's error, after the trainer's output), not the inner pytest's footer ("1 failed in 3.1s").
    assert re.search(r"^\| \S*test_user\.py::test_marker_no_halving failed: \S*OutOfMemoryError: CUDA out of memory",
                     out, re.M), out
    assert not re.search(r"^\|.*\b\d+ (passed|failed)\b.* in [\d.]+s", out, re.M), out
    assert not re.search(r"^\|.*short test summary info", out, re.M), out
    # Note [Where the tests ran]: the six jobs that ran (not the three the harness could not run) ran on the
    # virtual device.
    assert re.search(r"^oomharness: no GPU ran these tests: 6 ran on the virtual CUDA device \(your PyTorch code on "
                     r"the CPU", out, re.M), out
    assert re.search(r"^INCONCLUSIVE \S+::test_fixture_fault_never_fires - exec::test_fixture_fault_never_fires is "
                     r"inconclusive, so recovery was not tested: no fault was injected", out, re.M), out
    assert "oomharness could not test exec::test_fixture_command_missing" in out, out
    # Bad marker arguments: the test and the argument named, before anything ran.
    assert ("@pytest.mark.oom on tests/test_user.py::test_marker_misspelt_argument: unknown argument faults= "
            "(did you mean fault=?)") in out, out
    assert re.search(r"@pytest.mark.oom on tests/test_user.py::test_marker_bad_cap: cap= was refused: .*128XB", out), out
    assert re.search(r"2 failed, 3 passed, 3 errors, 1 inconclusive", out), out
    # ... and the reason in pytest's short summary and in JUnit's message.
    assert re.search(r"^FAILED \S+::test_fixture_no_halving - exec::test_fixture_no_halving failed: OOM at step 1", out,
                     re.M), out
    junit = ElementTree.parse(str(user_dir / "junit.xml"))
    messages = {case.get("name"): case.find("failure").get("message")
                for case in junit.iter("testcase") if case.find("failure") is not None}
    assert messages["test_marker_no_halving"].startswith("exec::test_marker_no_halving failed: OOM at step"), messages
    # --oomh-out: the usual reports, one folder per test.
    for name in ("test_fixture_halving", "test_marker_no_halving", "test_fixture_cwd"):
        assert (folder(reports, name) / "results.json").is_file(), os.listdir(reports)
        assert (folder(reports, name) / "report.html").is_file()


def test_inconclusive_alone_exits_5_and_strict_fails_it(installed, user_dir):
    rc, out = run_pytest(user_dir, installed, "-k", "fault_never_fires")
    assert rc == 5, out
    assert outcomes(out) == {"test_fixture_fault_never_fires": "INCONCLUSIVE"}, out
    assert "nothing was tested: every oomharness test was inconclusive" in out, out
    rc, out = run_pytest(user_dir, installed, "-k", "fault_never_fires", "--oomh-strict")
    assert rc == 1, out
    assert outcomes(out) == {"test_fixture_fault_never_fires": "FAILED"}, out
    # The same from the ini file, with the report folder relative to it.
    (user_dir / "tests" / "pytest.ini").write_text("[pytest]\noomh_strict = true\noomh_out = oomh-reports\n")
    rc, out = run_pytest(user_dir, installed, "-k", "fault_never_fires")
    assert rc == 1, out
    assert outcomes(out) == {"test_fixture_fault_never_fires": "FAILED"}, out
    assert (folder(user_dir / "tests" / "oomh-reports", "test_fixture_fault_never_fires") / "results.json").is_file()


def test_k_selects_and_xdist_spreads(installed, user_dir):
    try:
        import xdist  # noqa: F401
    except ImportError:
        pytest.fail("pytest-xdist is missing: scripts/deps.sh test installs python3-pytest-xdist")
    rc, out = run_pytest(user_dir, installed, "-n", "2", "-k", "halving and not fault")
    assert rc == 1, out
    assert outcomes(out) == {"test_fixture_halving": "PASSED", "test_marker_halving": "PASSED",
                             "test_fixture_no_halving": "FAILED", "test_marker_no_halving": "FAILED"}, out
    assert "2 failed, 2 passed" in out, out
    assert "exec::test_marker_no_halving failed: OOM at step" in out, out
    # Note [Where the tests ran]: the four jobs ran on the virtual device, and the summary says so (under
    # xdist, from the workers' reports).
    assert re.search(r"^oomharness: no GPU ran these tests: 4 ran on the virtual CUDA device \(your PyTorch code on "
                     r"the CPU", out, re.M), out


def test_without_the_binary_the_test_errs_saying_what_to_do(installed, user_dir):
    rc, out = run_pytest(user_dir, installed, "-k", "fixture_halving", binary=None, path="/usr/bin:/bin")
    assert rc == 1, out
    assert outcomes(out) == {"test_fixture_halving": "ERROR"}, out
    assert ("cannot find the oomharness command: this package was installed without it, it is not on PATH and "
            "OOMH_BINARY is not set") in out, out
    rc, out = run_pytest(user_dir, installed, "-k", "fixture_halving", binary="/nonexistent/oomharness")
    assert "OOMH_BINARY=/nonexistent/oomharness is not an executable file" in out, out


BAD_USES = '''
import sys
import pytest

@pytest.mark.oomharness(cap="280MiB")
def test_old_marker():
    pass

@pytest.mark.oom("128MiB")
def test_positional():
    pass

@pytest.mark.oom(cap=128, expect="batch_halving")
def test_cap_not_text():
    pass

def test_fixture_misspelt(oomharness):
    oomharness.exec([sys.executable, "-c", "pass"], expect="exit=0", timeot=30)

@pytest.mark.oom(step_base=2)
def test_step_base_two():
    pass

@pytest.mark.oom(env={"MODE=fast": "1"})
def test_env_name_with_equals():
    pass
'''


def test_malformed_uses_name_the_test_and_the_argument(installed, tmp_path):
    """Each refused before any job runs: the old marker name (which must not quietly run the test without the
    harness), a positional argument, a cap that is not a text, a misspelt fixture argument."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_bad.py").write_text(BAD_USES)
    (tmp_path / "elsewhere").mkdir()
    rc, out = run_pytest(tmp_path, installed, "--oomh-out", str(tmp_path / "reports"))
    assert rc == 1, out
    assert outcomes(out) == {"test_old_marker": "ERROR", "test_positional": "ERROR", "test_cap_not_text": "ERROR",
                             "test_fixture_misspelt": "FAILED", "test_step_base_two": "ERROR",
                             "test_env_name_with_equals": "ERROR"}, out
    assert "tests/test_bad.py::test_old_marker: @pytest.mark.oomharness is now @pytest.mark.oom" in out, out
    assert "@pytest.mark.oom on tests/test_bad.py::test_positional: takes keyword arguments only" in out, out
    assert ("@pytest.mark.oom on tests/test_bad.py::test_cap_not_text: cap=128 is not a size text, as --cap: "
            "'2GiB', '512MiB'") in out, out
    assert ("oomharness.exec() in tests/test_bad.py::test_fixture_misspelt: unknown argument timeot= (did you mean "
            "timeout=?)") in out, out
    assert ("@pytest.mark.oom on tests/test_bad.py::test_step_base_two: step_base=2 is not the number of the first "
            "training step in the code's own log: 0 or 1") in out, out
    # Issue 44: the job ran with MODE='fast=1'.
    assert ("@pytest.mark.oom on tests/test_bad.py::test_env_name_with_equals: env={'MODE=fast': '1'} is not a dict of "
            "the job's environment variables (names of letters, digits and _)") in out, out
    assert not (tmp_path / "reports").exists(), "a job ran: %s" % list((tmp_path / "reports").iterdir())


# The job-describing flags of `oomharness exec` that the plugin's arguments do not offer (a test passes them
# through the fixture's extra_args). A flag added to the job table lands here or in _ARGUMENT_OF_FLAG.
NOT_OFFERED = {"--name", "--cap-counts", "--clear-faults", "--device"}


def test_the_plugins_arguments_are_the_job_tables_flags():
    """The marker's and the fixture's arguments become `oomharness exec` flags (_ARGUMENT_OF_FLAG); each must
    be a flag of the runner's job table (Note [One table of job fields] in runner/src/suite/job_table.h),
    which `oomharness dev job-keys` prints, and every flag of the table must be offered or named above."""
    import json
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    from oomharness import pytest_plugin
    p = subprocess.run([BINARY, "dev", "job-keys"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    table = {f["flag"]: row["key"] for row in json.loads(p.stdout) for f in row["flags"]}
    offered = set(pytest_plugin._ARGUMENT_OF_FLAG)
    assert offered <= set(table), "flags the plugin passes that the job table lacks: %s" % (offered - set(table))
    assert set(table) - offered == NOT_OFFERED, set(table) - offered
    for flag, argument in pytest_plugin._ARGUMENT_OF_FLAG.items():
        assert argument in pytest_plugin._ARGUMENTS, (flag, argument)


def test_suggestions_use_the_command_lines_one_threshold():
    """A misspelt argument gets the suggestion the command line would give (Note [One typo threshold] in
    include/oomharness/names.h): case and a swap of neighbours are one edit each, a short word gets no
    far-fetched name, and a name that contains an argument is taken as the slip."""
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    from oomharness import pytest_plugin
    known = sorted(pytest_plugin._ARGUMENTS)
    assert pytest_plugin._closest("Tiemout", known) == "timeout"
    assert pytest_plugin._closest("faults", known) == "fault"
    assert pytest_plugin._closest("stepbase", known) == "step_base"
    assert pytest_plugin._closest("ab", known) is None
    assert pytest_plugin._closest("zzzzzzz", known) is None
    # The cases the runner's own picker answers in runner_suite_test (Names.SharedCases): the same answers.
    with open(os.path.join(SOURCE, "tests", "runner", "suite", "nearest_names.json")) as f:
        cases = json.load(f)["cases"]
    assert len(cases) >= 10
    for c in cases:
        assert (pytest_plugin._closest(c["name"], c["candidates"]) or "") == c["nearest"], c
