#!/bin/sh
# Issue 44 (1): a launcher makes a tiny GPU call under the shim, then runs its trainer without it (exec through
# `env -u LD_PRELOAD`: the trainer has the pid the shim started in, in `env`): 128 MiB a step under a 64 MiB
# cap, never refused. The job must be an error naming the trainer's process.
emulated_trainer --steps 1 --batch-size 1 --bytes-per-sample 1MiB --recovery none || exit $?
exec env -u LD_PRELOAD emulated_trainer --steps 4 --batch-size 8 --bytes-per-sample 16MiB --recovery none
