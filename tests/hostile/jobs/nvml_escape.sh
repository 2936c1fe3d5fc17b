#!/bin/sh
# Note [Processes outside the shim]: a process with neither the shim nor a probe that holds GPU memory is seen
# only by the driver. The fake NVML the runner loads (OOMH_NVML_LIBRARY) lists the pids in $FAKE_NVML_PIDS: a
# process of the job puts its own there (as the runner names it: the first field of /proc/self/stat, read by
# the shell itself) and sleeps, with the shim (HOSTILE_NVML=shim) or without it (anything else).
emulated_trainer --steps 1 --batch-size 1 --bytes-per-sample 1MiB --recovery none || exit $?
if [ "$HOSTILE_NVML" = shim ]; then
  sh -c 'read -r s < /proc/self/stat; echo "${s%% *} 134217728" >> "$FAKE_NVML_PIDS"; exec sleep 2'
else
  env -u LD_PRELOAD sh -c 'read -r s < /proc/self/stat; echo "${s%% *} 134217728" >> "$FAKE_NVML_PIDS"; exec sleep 2'
fi
