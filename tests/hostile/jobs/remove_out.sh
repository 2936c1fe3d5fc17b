#!/bin/sh
# A job that deletes the run's whole output folder (issue 44): the runner must still write what it knows.
# OOMH_EVENTS is OUT/jobs/SUITE__JOB/attempt-0.events.jsonl.
out=$(dirname "$(dirname "$(dirname "$OOMH_EVENTS")")")
echo "first line, written before the folder goes"
rm -rf "$out" && echo "removed $out"
echo "last line"
exit 0
