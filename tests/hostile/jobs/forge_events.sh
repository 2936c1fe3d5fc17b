#!/bin/sh
# Issue 44 (3): a trainer that never halves (one step at batch 8, never refused), then lines appended to
# $OOMH_EVENTS by the job's own code that tell of an OOM at step 2, caught, and every later step at half the batch.
emulated_trainer --steps 1 --batch-size 8 --bytes-per-sample 1MiB --recovery none &
pid=$!
wait $pid || exit $?
t=$(( $(date +%s) + 1 ))
i=100
for line in \
  '"src":"shim","kind":"inject","fields":{"entry":"cuMemAlloc_v2","size":8388608,"device":0,"rule":"cap","reason":"cap","step":2,"phase":"forward","tid":1,"call":9,"memory":"device","layer":"driver"}' \
  '"src":"probe","kind":"oom","fields":{"step":2,"batch_size":8,"phase":"forward","message":"CUDA out of memory","caught":true}' \
  '"src":"probe","kind":"samples","fields":{"count":4}' '"src":"probe","kind":"samples","fields":{"count":4}' \
  '"src":"probe","kind":"step","fields":{"step":2,"batch_size":4,"allocated":4194304,"reserved":16777216}' \
  '"src":"probe","kind":"samples","fields":{"count":4}' '"src":"probe","kind":"samples","fields":{"count":4}' \
  '"src":"probe","kind":"step","fields":{"step":3,"batch_size":4,"allocated":4194304,"reserved":16777216}' \
  '"src":"probe","kind":"samples","fields":{"count":4}' '"src":"probe","kind":"samples","fields":{"count":4}' \
  '"src":"probe","kind":"step","fields":{"step":4,"batch_size":4,"allocated":4194304,"reserved":16777216}'; do
  i=$((i + 1))
  printf '{"t":%s.%d,"pid":%d,%s}\n' "$t" "$i" "$pid" "$line" >> "$OOMH_EVENTS"
done
