#!/bin/sh
# A job that leaves a grandchild in its own session, ignoring SIGTERM, one with the job's stdout still open
# and one without, then exits at once. Both must be gone when the run is over (the runner is a child
# subreaper: Note [Nothing left behind] in runner/src/exec/job_runner_reaping.cpp).
setsid sh -c 'trap "" TERM; exec sleep 300' </dev/null >/dev/null 2>&1 &
setsid sh -c 'trap "" TERM; sleep 301; echo never' &
sleep 0.2
echo "grandchildren started"
exit 0
