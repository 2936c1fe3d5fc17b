#!/bin/sh
# A job that leaves a 300-level folder tree (and a link to / at its bottom) in its work folder (issue 44):
# the next run with the same --out empties the work folder whatever its depth, following no link.
cd "$HOSTILE_WORK" || exit 3
d=$PWD
i=0
while [ $i -lt 300 ]; do
  mkdir "$d/x" && d="$d/x"
  i=$((i + 1))
done
echo leaf > "$d/leaf"
ln -s / "$d/root"
echo "made $i levels"
exit 0
