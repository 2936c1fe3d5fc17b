#!/usr/bin/env bash
# Issue 43: bench/python/op_memory.py on this GPU for the configurations whose predictions miss most
# (bench/RESULTS.md), one step each; the JSON files land packed in $OUT/op_memory.tgz.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/out/gpu}
w=$(mktemp -d)
p=$root/tests/public/programs
# OPM_ONLY=a,b: only those configurations
om() { local name=$1; shift; [ -z "${OPM_ONLY:-}" ] || [[ ",$OPM_ONLY," == *",$name,"* ]] || return 0; (cd "$w" && python3 "$root/bench/python/op_memory.py" --gpu --json "$w/$name.json" -- "$@" >"$w/$name.log" 2>&1); echo "$name rc=$?"; }
om nanogpt-char "$root/tests/python/predict_programs/gpt_memmap.py" --data "$w/tokens-65.bin" --vocab 65 --block 256 --d 384 --layers 6 --batch 64 --steps 1
om nanogpt-124m-bf16-accum "$root/tests/python/predict_programs/gpt_memmap.py" --data "$w/tokens-50304.bin" --vocab 50304 --block 1024 --d 768 --layers 12 --batch 4 --steps 1 --amp --accum 2
om resnet18-fakedata "$p/vision_loop.py" --arch torchvision:resnet18 -b 32 --steps 1 --image-size 224
om lstm-default "$p/lstm_lm.py" --batch_size 20 --steps 1
om lightning-transformer "$p/lightning_transformer.py" --default_root_dir "$w/pl" --batch_size 64 --max_steps 1 --save_every 100
om accelerate-loop "$p/accelerate_loop.py" --output_dir "$w/acc" --batch_size 32 --max_steps 1 --checkpointing_steps 100
tar czf "$out/op_memory.tgz" -C "$w" $(cd "$w" && ls *.json *.log)
