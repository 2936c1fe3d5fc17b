#!/bin/sh
# A "training" that does its work on the CPU: it prints steps and exits 0, and never calls CUDA.
for step in 1 2 3 4; do echo "step $step loss 0.5"; done
