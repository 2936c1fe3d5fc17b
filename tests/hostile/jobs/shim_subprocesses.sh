#!/bin/sh
# The correct counterpart of escape_shim.sh: a launcher whose trainers all run under the shim, two at once in
# the background, one through Python's subprocess and one through `env` (which keeps LD_PRELOAD). It must pass.
emulated_trainer --steps 2 --batch-size 1 --bytes-per-sample 4MiB --recovery none &
a=$!
emulated_trainer --steps 2 --batch-size 1 --bytes-per-sample 4MiB --recovery none &
b=$!
wait $a || exit 1
wait $b || exit 1
python3 -c 'import subprocess, sys; sys.exit(subprocess.run(["emulated_trainer", "--steps", "2", "--batch-size", "2", "--bytes-per-sample", "4MiB"]).returncode)' || exit 1
exec env MODE=fast emulated_trainer --steps 2 --batch-size 2 --bytes-per-sample 4MiB --recovery none
