#!/bin/sh
# A job that signals its runner by pid (issue 28): every signal a job can send that does not stop or kill
# outright. The runner must go on, and the job's result must say what it tried.
# Its own session and group, not the runner's: it cannot address the runner by group or through a terminal.
echo "job session $(cut -d' ' -f6 /proc/$$/stat) group $(cut -d' ' -f5 /proc/$$/stat)"
echo "runner session $(cut -d' ' -f6 /proc/$PPID/stat) group $(cut -d' ' -f5 /proc/$PPID/stat)"
for sig in HUP USR1 USR2 ALRM PIPE QUIT XCPU TERM INT SEGV BUS ABRT; do
  kill -s "$sig" "$PPID" 2>/dev/null && echo "sent SIG$sig"
  sleep 0.05
done
sleep 0.2
echo "still here"
exit 0
