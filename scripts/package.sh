#!/usr/bin/env bash
# Builds the Debian package: only the targets the installed tool needs (scripts/build.sh --demo), then CPack.
# The .deb lands in build/package/ (or $OOMH_BUILD_DIR/package/); `apt-get install ./oomharness_*.deb`
# installs it (docs/cli.md, "Installed layout"; docs/ci.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${OOMH_BUILD_DIR:-$root/build}
"$root/scripts/deps.sh" build
"$root/scripts/build.sh" --demo
command -v dpkg-deb >/dev/null 2>&1 || { echo "scripts/package.sh: dpkg-deb is missing (a Debian system builds the package)" >&2; exit 1; }
(cd "$build" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$build/package" >/dev/null)
ls "$build"/package/oomharness_*.deb
