#!/usr/bin/env bash
# check_install.sh BUILD SOURCE [PYTHON]: see CMakeLists.txt. Prints what it checks; exits non-zero at the first
# failure. PYTHON: a python3 with torch (the first of the test matrix), whose folder comes first on the clean PATH.
set -euo pipefail
build=$1
source=$2
python=${3:-}
work=$(mktemp -d /tmp/oomh-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }

# A clean environment: no OOMH_* variable, a PATH without the build (but with the Python that has torch, as
# a user's activated environment), an empty working folder.
clean_path=/usr/bin:/bin
[ -n "$python" ] && clean_path="$(dirname "$python"):$clean_path"
clean() { env -i PATH="$clean_path" HOME="$work" LANG=C.UTF-8 "$@"; }
# Where the tool must not look: the build and the source tree; the Python environments scripts/venv.sh makes
# in the checkout (.venv/) are the user's Python, not the tool's files.
uses_tree() { grep -rn -e "$build" -e "$source/" "$1" 2>/dev/null | grep -v -e "$source/.venv/" | head -5; }

# The demo from an installed tree ($1: its prefix), in an empty folder; its results must not name the
# build or source tree.
run_demo() {
  local prefix=$1 out=$2
  mkdir -p "$work/empty"
  (cd "$work/empty" && clean "$prefix/bin/oomharness" demo --out "$out" >"$out.log" 2>&1) ||
    { cat "$out.log"; fail "the demo from $prefix exited $?"; }
  grep -q "^==== .*passed" "$out.log" || { cat "$out.log"; fail "the demo from $prefix passed nothing"; }
  if [ -n "$(uses_tree "$out")" ]; then
    uses_tree "$out"
    fail "the demo from $prefix used the build or source tree"
  fi
  echo "ok: the demo from $prefix: $(grep '^====' "$out.log")"
}

echo "== cmake --install into a prefix"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
expected=(
  bin/oomharness
  lib/oomharness/liboomharness_inject.so lib/oomharness/oomh-reserve lib/oomharness/emulated_trainer
  lib/oomharness/cuda_double/libcuda.so.1
  share/oomharness/python/sitecustomize.py share/oomharness/python/oomharness/probe/__init__.py
  share/oomharness/python/oomharness/virtual_device/__init__.py share/oomharness/python/oomharness/_abi.py
  share/oomharness/python/oomharness/pytest_plugin.py
  share/oomharness/python/pyproject.toml
  share/oomharness/suites/demo.yaml share/oomharness/suites/demo-simulated.yaml
  share/oomharness/examples/python/train.py
  share/doc/oomharness/README.md share/doc/oomharness/cli.md share/doc/oomharness/ci.md
  share/man/man1/oomharness.1 share/bash-completion/completions/oomharness
)
for f in "${expected[@]}"; do [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"; done
echo "ok: ${#expected[@]} files where docs/cli.md says"
run_demo "$prefix" "$work/demo-prefix"

# The installed Python package on the virtual device: a trainer that halves passes, one that does not fails.
if clean python3 -c 'import torch' 2>/dev/null; then
  train="$prefix/share/oomharness/examples/python/train.py"
  for recovery in halve none; do
    rc=0
    (cd "$work/empty" && clean "$prefix/bin/oomharness" exec -q --simulate --cap 280MiB --expect oom_visible \
      --expect batch_halving --out "$work/exec-$recovery" -- python3 "$train" --model mlp --steps 4 \
      --batch 4096 --recovery $recovery >"$work/exec-$recovery.log" 2>&1) || rc=$?
    want=0; [ $recovery = none ] && want=1
    [ $rc = $want ] || { cat "$work/exec-$recovery.log"; fail "exec --recovery $recovery exited $rc, not $want"; }
    if [ -n "$(uses_tree "$work/exec-$recovery")" ]; then
      fail "exec --recovery $recovery used the build or source tree"
    fi
  done
  echo "ok: the installed package on the virtual device: halving passes, no halving fails"
else
  [ -z "$python" ] || fail "$python cannot import torch"
  echo "skipped: the virtual device run (no python3 with torch on $clean_path)"
fi

echo "== the man page and the completion offer every flag of every command's --help"
for cmd in run exec sweep budget predict validate report explain compare demo; do
  for flag in $("$prefix/bin/oomharness" $cmd --help | grep -oE -- '(^|[ ,])--?[a-z][a-z-]*' | sed 's/^[ ,]*//' | sort -u); do
    case $flag in -h|--help) continue ;; esac
    grep -qF -- "$(printf '%s' "$flag" | sed 's/-/\\-/g')" "$prefix/share/man/man1/oomharness.1" ||
      fail "the man page does not mention $cmd $flag"
    grep -qE -- "(^|[ \"])$flag( |\"|\$)" "$prefix/share/bash-completion/completions/oomharness" ||
      fail "the bash completion does not offer $cmd $flag"
  done
done
bash -c "shopt -s extglob; source '$prefix/share/bash-completion/completions/oomharness'
  COMP_WORDS=(oomharness run --maxf); COMP_CWORD=2; _oomharness; [ \"\${COMPREPLY[*]}\" = --maxfail ]" ||
  fail "completing 'oomharness run --maxf' did not give --maxfail"
# --backend's values are the installed command's own (oomharness dev backends: kBackends).
bash -c "source '$prefix/share/bash-completion/completions/oomharness'
  COMP_WORDS=('$prefix/bin/oomharness' run --backend ''); COMP_CWORD=3; _oomharness; [ \"\${COMPREPLY[*]}\" = 'local slurm' ]" ||
  fail "completing 'oomharness run --backend ' did not give local slurm"
if command -v man >/dev/null 2>&1; then
  MANWIDTH=100 man -l "$prefix/share/man/man1/oomharness.1" 2>&1 | grep -q "test whether GPU training code survives" ||
    fail "man -l could not render the man page"
fi
echo "ok: man page and completion"

if command -v cpack >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 && [ -f "$build/CPackConfig.cmake" ]; then
  echo "== the Debian package (CPack)"
  (cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
    { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
  deb=$(ls "$work"/pkg/oomharness_*.deb)
  dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./||' >"$work/contents"
  for f in "${expected[@]}"; do grep -qx "usr/$f" "$work/contents" || fail "$deb lacks /usr/$f"; done
  dpkg-deb -f "$deb" Depends | grep -q libyaml-cpp || fail "$deb does not depend on libyaml-cpp"
  dpkg-deb -x "$deb" "$work/root"
  run_demo "$work/root/usr" "$work/demo-deb"
  echo "ok: $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB): its files, its dependencies, the demo from it"
else
  echo "skipped: the Debian package (no cpack or dpkg-deb)"
fi
echo "== scripts/demo.sh builds only what the demo needs"
grep -q '"$root/scripts/build.sh" --demo' "$source/scripts/demo.sh" || fail "scripts/demo.sh does not build with --demo"
if command -v ninja >/dev/null 2>&1 && [ -f "$build/build.ninja" ]; then
  targets=$(bash "$source/scripts/build.sh" --demo --print-targets)
  ninja -C "$build" -t commands $targets | grep -oE -- ' -c [^ ]+' | sed 's/^ -c //' >"$work/demo-compiles"
  all=$(ninja -C "$build" -t commands | grep -cE -- ' -c ')
  extra=$(grep -E '/(tests|bench)/' "$work/demo-compiles" | grep -vE '/tests/(cuda_double|emulated_trainer)/' || true)
  [ -z "$extra" ] || fail "the demo's targets ($targets) compile tests or benchmarks: $extra"
  [ "$(wc -l <"$work/demo-compiles")" -lt "$all" ] || fail "the demo's targets compile everything"
  echo "ok: the demo's targets compile $(wc -l <"$work/demo-compiles") of the build's $all sources: no test, no benchmark"
  # The installed demo above ran on exactly these targets' files (and the Python package): they suffice.
fi
echo "check_install: all passed"
