#!/bin/sh
# issue 16: a sweep of the emulated trainer with a broken retry (persistent faults it does not survive), and
# its sweep.html in headless Chromium (tests/reports/screenshot.sh --page): the page must load from disk
# and draw the coverage, and it must name a site not survived with its --fault. Exit 125 without Chromium.
#   sweep_screenshot.sh OOMHARNESS EMULATED_TRAINER SOURCE_DIR OUT_DIR
set -eu
bin=$1 trainer=$2 source=$3 out=$4
rm -rf "$out"
mkdir -p "$out"
rc=0
"$bin" sweep --simulate --step 2 --target-step 6 --jobs 2 --timeout 60s --out "$out/sweep" -- \
  "$trainer" --steps 6 --batch-size 8 --bytes-per-sample 65536 --leak-per-step 4096 --eval-every 2 --like-pytorch \
  --recovery retry --retry-without-freeing \
  >"$out/sweep.log" 2>&1 || rc=$?
if [ "$rc" != 1 ]; then
  cat "$out/sweep.log"
  echo "FAIL: the sweep of a broken retry exited $rc (1 expected: some site not survived)"
  exit 1
fi
grep -q "not survived" "$out/sweep/sweep.html" || { echo "FAIL: sweep.html names no site not survived"; exit 1; }
grep -q "until_freed=1" "$out/sweep/sweep.html" || { echo "FAIL: sweep.html gives no --fault to reproduce"; exit 1; }
sh "$source/tests/reports/screenshot.sh" --page "$out/sweep/sweep.html" "$out/screenshot"
