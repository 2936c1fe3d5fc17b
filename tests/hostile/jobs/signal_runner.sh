#!/bin/sh
# A job that signals its runner by pid (issue 28): every signal a job can send that does not stop or kill
# outright. The runner must go on, and the job's result must say what it tried.
for sig in HUP USR1 USR2 ALRM PIPE QUIT XCPU TERM INT SEGV BUS ABRT; do
  kill -s "$sig" "$PPID" 2>/dev/null && echo "sent SIG$sig"
  sleep 0.05
done
sleep 0.2
echo "still here"
exit 0
