#!/bin/sh
# A job that tries to take its control block down: shrink it to nothing, then fill it with garbage, and
# give the runner time to sample it. The runner must neither die of SIGBUS nor trust the garbage.
case "$OOMH_CONTROL" in
  /proc/*) block="$OOMH_CONTROL" ;;
  *) block="/dev/shm$OOMH_CONTROL" ;;
esac
truncate -s 0 "$block" 2>/dev/null && echo "truncated" || echo "could not truncate"
dd if=/dev/urandom of="$block" bs=4096 count=80 conv=notrunc 2>/dev/null && echo "garbage written"
sleep 0.5
truncate -s 1 "$block" 2>/dev/null
sleep 0.3
exit 0
