#!/usr/bin/env bash
# Creates (or reuses) one of the project's Python environments, from the pinned files in
# python/requirements/, and prints the path of its python3. Nothing goes into the system's site-packages.
#
#   scripts/venv.sh torch-2.13.0-cpu     # PyTorch 2.13.0, CPU build, + the test tools and the ecosystem
#   scripts/venv.sh torch-2.14.1-cuda    # PyTorch 2.14.1, the CUDA build `pip install torch` gives (no GPU needed)
#   scripts/venv.sh public-torch-2.14.1-cuda  # the public training programs of tests/public beside that torch
#   scripts/venv.sh --list               # the environments there are
#
# A test environment (torch-*) is python/requirements/NAME.txt plus test.txt; any other (public-*) is its
# file alone, which takes shared pins with `-r FILE` lines. Each is installed into $OOMH_VENV_DIR/NAME
# (default: .venv/NAME in the checkout). A stamp holds the digest of the files it was made from (the `-r`
# files included): an environment whose files changed is made anew, one whose files did not is reused as it
# is. The Python is the first python3 on PATH (3.10 or newer), or $OOMH_PYTHON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
reqs="$root/python/requirements"
if [ "${1:-}" = --list ] || [ -z "${1:-}" ]; then
  for f in "$reqs"/torch-*.txt "$reqs"/public-*.txt; do [ -f "$f" ] && basename "$f" .txt; done
  [ -n "${1:-}" ] || { echo "usage: scripts/venv.sh NAME (one of the above)" >&2; exit 2; }
  exit 0
fi
name=$1
if [ ! -f "$reqs/$name.txt" ]; then
  echo "scripts/venv.sh: no environment '$name': python/requirements/$name.txt does not exist (scripts/venv.sh --list)" >&2
  exit 2
fi
dir=${OOMH_VENV_DIR:-$root/.venv}/$name
py=${OOMH_PYTHON:-python3}
if ! command -v "$py" >/dev/null 2>&1; then
  echo "scripts/venv.sh: no $py on PATH: install Python 3.10 or newer with venv (Debian: apt-get install python3-venv)" >&2
  exit 1
fi
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "scripts/venv.sh: $("$py" -V 2>&1) found at $(command -v "$py"); PyTorch 2.13 and newer need Python 3.10 or newer (set OOMH_PYTHON)" >&2
  exit 1
fi
given=("$reqs/$name.txt")
case $name in torch-*) given+=("$reqs/test.txt") ;; esac
# The stamp's files: those given to pip and those they take in with `-r` (one level: none takes in another).
files=("${given[@]}")
for f in $(sed -n 's/^-r[[:space:]]*//p' "${given[@]}"); do files+=("$reqs/$f"); done
stamp=$(cat "${files[@]}" | sha256sum | cut -c1-16)-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$dir/bin/python3" ] && [ "$(cat "$dir/.oomh-stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$dir/bin/python3"
  exit 0
fi
start=$(date +%s)
echo "scripts/venv.sh: making $dir (${files[*]#$reqs/})" >&2
rm -rf "$dir"
"$py" -m venv "$dir"
# --no-deps: the files pin every package; pip check below proves nothing is missing or in conflict.
# (pip's notes about index folders that lack a package are dropped: they say nothing about the install.)
"$dir/bin/python3" -m pip install -q --no-deps $(printf -- '-r %s ' "${given[@]}") 2>&1 \
  | { grep -v 'is ignored: it is neither a file nor a directory' || true; } >&2
"$dir/bin/python3" -m pip check >&2
echo "$stamp" >"$dir/.oomh-stamp"
echo "scripts/venv.sh: $name ready in $(( $(date +%s) - start )) s ($(du -sh "$dir" | cut -f1))" >&2
echo "$dir/bin/python3"
