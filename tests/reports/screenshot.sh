#!/bin/sh
# Renders a results file to HTML and takes a screenshot of it in headless Chromium: the page must load
# from disk with no network and draw something substantial. Exit 125 (skipped) without Chromium.
#   screenshot.sh RENDER_TOOL RESULTS.json OUT_DIR
#   screenshot.sh --page PAGE.html OUT_DIR       a page already written (sweep.html)
set -eu
if [ "$1" = --page ]; then
  page=$2 out=$3
else
  render=$1 results=$2 out=$3 page=
fi
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "chromium not found (apt-get install chromium): skipped"
  exit 125
fi
rm -rf "$out"
mkdir -p "$out"
if [ -n "$page" ]; then cp "$page" "$out/report.html"; else "$render" html "$results" "$out/report.html"; fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# No network: the page must not need it (its CSP forbids loads anyway).
timeout 90 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
  --hide-scrollbars --user-data-dir="$profile" --screenshot="$out/report.png" --window-size=1280,2000 \
  "file://$out/report.html" >"$out/chromium.log" 2>&1 || { cat "$out/chromium.log"; exit 1; }
size=$(wc -c <"$out/report.png")
echo "screenshot $out/report.png: $size bytes"
if [ "$size" -le 10240 ]; then
  echo "screenshot too small: the page drew (almost) nothing"
  exit 1
fi
