"""Issue 44 (1), from Python: the launcher clears LD_PRELOAD in os.environ before it starts its trainer."""
import os
import subprocess
import sys

subprocess.run(["emulated_trainer", "--steps", "1", "--batch-size", "1", "--bytes-per-sample", "1MiB"], check=True)
os.environ.pop("LD_PRELOAD", None)
sys.exit(subprocess.run(["emulated_trainer", "--steps", "4", "--batch-size", "8", "--bytes-per-sample", "16MiB",
                         "--recovery", "none"]).returncode)
