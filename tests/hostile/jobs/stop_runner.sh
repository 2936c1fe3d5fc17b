#!/bin/sh
# A job that stops its runner (issue 44): SIGSTOP cannot be caught, and a stopped runner's timeouts never
# fire. As root the job runs in the run's PID namespace and cannot reach the runner; otherwise the runner's
# watchdog continues it. Should the stop land, the job continues the runner itself after a while, so that a
# broken runner fails the test instead of hanging it.
read -r s < /proc/self/stat
set -- $s
runner=$4
echo "ppid $PPID runner $runner"
if kill -STOP "$runner" 2>/dev/null; then echo "stopped the runner"; sleep 2; kill -CONT "$runner"; fi
if [ "$PPID" != 0 ] && kill -TSTP "$PPID" 2>/dev/null; then echo "stopped the parent"; sleep 2; kill -CONT "$PPID"; fi
echo "still here"
exit 0
