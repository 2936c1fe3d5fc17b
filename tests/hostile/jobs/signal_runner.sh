#!/bin/sh
# A job that signals its runner (issue 28): every signal a job can send that does not stop or kill
# outright. The runner must go on, and the job's result must say what it tried.
# The runner's pid as /proc names it: the 4th field of the shell's own stat (its parent). As root the job
# runs in the run's PID namespace (issue 44, Note [A runner its jobs cannot signal]), where $PPID is 0 and
# that number names no process of the job's: every kill below fails.
read -r s < /proc/self/stat
set -- $s
runner=$4
echo "ppid $PPID runner $runner"
# Its own session and group, not the runner's: it cannot address the runner by group or through a terminal.
echo "job session $(cut -d' ' -f6 /proc/self/stat) group $(cut -d' ' -f5 /proc/self/stat)"
echo "runner session $(cut -d' ' -f6 /proc/$runner/stat) group $(cut -d' ' -f5 /proc/$runner/stat)"
for sig in HUP USR1 USR2 ALRM PIPE QUIT XCPU TERM INT SEGV BUS ABRT; do
  if kill -s "$sig" "$runner" 2>/dev/null; then echo "sent SIG$sig"; else echo "could not send SIG$sig"; fi
  sleep 0.05
done
sleep 0.2
echo "still here"
exit 0
