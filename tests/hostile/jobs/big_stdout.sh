#!/bin/sh
# A job that writes more output than the log cap (HOSTILE_BYTES, default 100 MB, lines of 1,000 bytes),
# with a line to find at its start and at its end.
echo "first line of the job"
head -c "${HOSTILE_BYTES:-100000000}" /dev/zero | tr '\0' 'x' | fold -w 1000
echo
echo "last line of the job"
