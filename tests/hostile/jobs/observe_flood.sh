#!/bin/sh
# A job that prints many lines an observe: pattern matches (issue 28).
seq 1 "${HOSTILE_LINES:-300000}" | sed 's/^/loss=/'
exit 0
