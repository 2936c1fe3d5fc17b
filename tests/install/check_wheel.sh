#!/usr/bin/env bash
# check_wheel.sh SOURCE BUILD WHEEL_BUILD: what a user does with the wheel (pyproject.toml, Note [One wheel] in
# CMakeLists.txt), nothing more: build it with pip from the checkout, install it into a fresh virtual
# environment (no --system-site-packages) beside the PyTorch CI pins, and from an empty folder outside the
# checkout, with a clean environment (no OOMH_* variable, no LD_LIBRARY_PATH, a PATH of the venv and the
# system), run `oomharness demo` and a pytest test that uses the plugin's marker and fixture. Prints the time
# of each step and what the installed programs link (`ldd`); exits non-zero at the first failure.
#
# The build goes to WHEEL_BUILD (scikit-build-core's build-dir), a sibling of the main build BUILD at the same
# depth: when BUILD was compiled through ccache (scripts/test.sh), the wheel's compiler commands are the same
# (only paths.cpp differs: no source path compiled in) and come from the cache.
set -euo pipefail
source=$1
build=$2
wheel_build=$3
python=${OOMH_WHEEL_PYTHON:-python3}
work=$(mktemp -d /tmp/oomh-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_wheel: FAILED: $*" >&2; exit 1; }
now() { date +%s.%N; }
took() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f s", a - b }'; }

if ! "$python" -c 'import scikit_build_core' 2>/dev/null; then
  echo "check_wheel: skipped: $(command -v "$python") has no scikit-build-core (pip install scikit-build-core==1.1.2)"
  exit 125
fi
echo "== pip wheel . (scikit-build-core, build-dir $wheel_build)"
args=(-C "build-dir=$wheel_build")
cached() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null || true; }
launcher=$(cached CMAKE_CXX_COMPILER_LAUNCHER)
if [ -n "$launcher" ]; then
  # The same compiler commands as the main build's, the compiler's path included (ccache hashes it;
  # scikit-build-core would pick g++ where CMake alone picks c++).
  args+=(-C "cmake.define.CMAKE_CXX_COMPILER=$(cached CMAKE_CXX_COMPILER)" -C "cmake.define.CMAKE_C_COMPILER=$(cached CMAKE_C_COMPILER)")
  args+=(-C "cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=$launcher" -C "cmake.define.CMAKE_C_COMPILER_LAUNCHER=$launcher")
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(dirname "$source")} CCACHE_NOHASHDIR=1
fi
start=$(now)
(cd "$source" && "$python" -m pip wheel . --no-deps --no-build-isolation -q -w "$work/dist" "${args[@]}" \
  >"$work/wheel.log" 2>&1) || { tail -40 "$work/wheel.log"; fail "pip wheel . failed"; }
wheel=$(ls "$work"/dist/oomharness-*.whl)
echo "ok: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $(took "$start")"
"$python" -m zipfile -l "$wheel" | awk '{print $1}' >"$work/contents"
for f in oomharness/_native/bin/oomharness oomharness/_native/lib/oomharness/liboomharness_inject.so \
  oomharness/_native/lib/oomharness/oomh-reserve oomharness/_native/lib/oomharness/emulated_trainer \
  oomharness/_native/lib/oomharness/cuda_double/libcuda.so.1 \
  oomharness/_native/lib/oomharness/cuda_double/nvml/libnvidia-ml.so.1 \
  oomharness/_native/share/oomharness/python/sitecustomize.py \
  oomharness/_native/share/oomharness/suites/demo-simulated.yaml \
  oomharness/pytest_plugin.py oomharness/__main__.py oomharness/probe/__init__.py oomharness/probe/steps.py \
  oomharness/virtual_device/__init__.py oomharness/virtual_device/shape_only.py oomharness/_abi.py; do
  grep -qx "$f" "$work/contents" || fail "the wheel lacks $f"
done
! grep -E '^oomharness/_native/share/(doc|man)/' "$work/contents" || fail "the wheel carries the docs component"
! grep -E '(^|/)tests?/|_test$|bench' "$work/contents" | grep -v 'emulated_trainer\|cuda_double' ||
  fail "the wheel carries tests or benchmarks"
"$python" -m zipfile -e "$wheel" "$work/unzipped"
grep -A3 '^\[pytest11\]' "$work"/unzipped/*.dist-info/entry_points.txt | grep -q '^oomharness = oomharness.pytest_plugin$' ||
  fail "the wheel does not register the plugin (pytest11)"
grep -A3 '^\[console_scripts\]' "$work"/unzipped/*.dist-info/entry_points.txt | grep -q '^oomharness = oomharness.__main__:main$' ||
  fail "the wheel does not make the oomharness command"

echo "== a fresh virtual environment: the wheel, the pinned CPU torch, pytest"
start=$(now)
"$python" -m venv "$work/venv"
venv_py="$work/venv/bin/python"
"$venv_py" -c 'import sys; assert sys.prefix != sys.base_prefix' || fail "not a virtual environment"
! "$venv_py" -c 'import torch' 2>/dev/null || fail "the fresh environment sees a torch before anything was installed"
"$venv_py" -m pip install -q "$wheel" -r "$source/python/requirements/torch-2.13.0-cpu.txt" pytest \
  -c "$source/python/requirements/test.txt" >"$work/pip.log" 2>&1 || { tail -20 "$work/pip.log"; fail "pip install failed"; }
echo "ok: installed in $(took "$start")"

# A clean environment, as a user's shell with the venv activated: nothing of the build, no OOMH_*.
clean() { env -i PATH="$work/venv/bin:/usr/bin:/bin" HOME="$work" LANG=C.UTF-8 VIRTUAL_ENV="$work/venv" "$@"; }
user="$work/user"
mkdir -p "$user"
site=$("$venv_py" -c 'import oomharness, os; print(os.path.dirname(oomharness.__file__))')
native="$site/_native"
[ "$(cd "$user" && clean sh -c 'command -v oomharness')" = "$work/venv/bin/oomharness" ] ||
  fail "oomharness is not the venv's console command"

echo "== what the installed programs link (ldd)"
for f in "$native/bin/oomharness" "$native/lib/oomharness/liboomharness_inject.so" "$native/lib/oomharness/oomh-reserve"; do
  clean ldd "$f" >"$work/ldd" 2>&1 || true
  ! grep -q "not found" "$work/ldd" || { cat "$work/ldd"; fail "$f needs a library that is not found"; }
  # Only the C and C++ runtimes every Python with PyTorch has, and what the wheel itself bundles.
  other=$(grep '=>' "$work/ldd" | awk '{print $1}' |
    grep -vE '^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so' || true)
  for lib in $other; do
    grep -q "$lib => $native/" "$work/ldd" || { cat "$work/ldd"; fail "$f links $lib from outside the wheel"; }
  done
  echo "ok: ${f#$site/}: $(awk '{print $1}' "$work/ldd" | grep -v linux-vdso | paste -sd' ')"
done

echo "== oomharness --version and demo, from an empty folder outside the checkout"
version=$(cd "$user" && clean oomharness --version)
wheel_version=$(basename "$wheel" | cut -d- -f2)
[ "$version" = "oomharness $wheel_version" ] || fail "oomharness --version says '$version', the wheel is $wheel_version"
start=$(now)
rc=0
(cd "$user" && clean oomharness demo --out demo-out >"$work/demo.log" 2>&1) || rc=$?
[ $rc = 0 ] || { tail -40 "$work/demo.log"; fail "oomharness demo exited $rc"; }
grep -q "^==== .*passed" "$work/demo.log" || { cat "$work/demo.log"; fail "the demo passed nothing"; }
! grep -q "left out" "$work/demo.log" || { cat "$work/demo.log"; fail "the demo left jobs out"; }
if grep -rqn -e "$source/" -e "$build/" -e "$wheel_build" "$user/demo-out"; then
  grep -rn -e "$source/" -e "$build/" -e "$wheel_build" "$user/demo-out" | head -5
  fail "the demo used the checkout or a build tree"
fi
echo "ok: the demo in $(took "$start"): $(grep '^====' "$work/demo.log")"

echo "== a pytest test with the plugin (marker and fixture), from the same folder"
mkdir -p "$user/tests"
cp "$source/examples/python/train.py" "$user/tests/train.py"
cat >"$user/tests/test_oom.py" <<'EOF'
import os, runpy, sys
import pytest

SMALL = ["--model", "mlp", "--steps", "4", "--batch", "4096"]

def test_halves(oomharness):
    oomharness.exec([sys.executable, "train.py"] + SMALL + ["--recovery", "halve"], cap="280MiB",
                    expect=["oom_visible", "batch_halving"])

@pytest.mark.oom(cap="280MiB", expect=["oom_visible", "batch_halving"])
def test_does_not_halve():
    here = os.path.dirname(os.path.abspath(__file__))
    assert runpy.run_path(os.path.join(here, "train.py"))["main"](SMALL + ["--recovery", "none"]) == 0
EOF
start=$(now)
rc=0
# (COLUMNS: pytest cuts its short summary's lines to the terminal's width.)
(cd "$user" && clean env COLUMNS=400 python -m pytest -p no:cacheprovider -rA tests >"$work/pytest.log" 2>&1) || rc=$?
[ $rc = 1 ] || { cat "$work/pytest.log"; fail "pytest exited $rc, not 1 (one test passes, one fails)"; }
grep -qE "^PASSED \S*test_oom.py::test_halves" "$work/pytest.log" || { cat "$work/pytest.log"; fail "test_halves did not pass"; }
grep -qE "^FAILED \S*test_oom.py::test_does_not_halve - exec::test_does_not_halve failed: OOM at step" "$work/pytest.log" ||
  { cat "$work/pytest.log"; fail "test_does_not_halve did not fail with the verdict's sentence"; }
grep -qE "^report: /.*/report.html" "$work/pytest.log" || { cat "$work/pytest.log"; fail "the failure names no report"; }
echo "ok: pytest in $(took "$start"): $(tail -1 "$work/pytest.log")"
echo "check_wheel: all passed"
