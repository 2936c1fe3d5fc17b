#!/bin/sh
# A job that runs until it is killed; it says where it is so the test can kill the runner under it.
echo "$$" > "$HOSTILE_PIDFILE"
exec sleep 300
