#!/usr/bin/env bash
# Issue 33, on a machine with 2 or more GPUs (tests/gpu/run_all.sh multigpu; docs/distributed.md):
#   nccl-oom      an OOM inside NCCL's own allocations (cuMemCreate, the `vmm` entry group: NCCL's buffers
#                 come through the driver's VMM calls, PyTorch's tensors through cuMemAlloc), at start-up on
#                 rank 1, and at step 3 on every rank: what each rank saw, and that the run ends with a verdict
#   resume        all ranks restarting together from a DDP checkpoint after rank 1's OOM (restart scope all);
#                 a broken twin where rank 1 never loads must fail checkpoint_resume
#   ranksN        one rank per GPU over every GPU: rank N-1's OOM, recovery together, a real NCCL hang found
#   public        public trainers (Lightning's and Accelerate's DDP over NCCL) under a rank fault, restarted from
#                 their own checkpoints
#   packing       8 capped jobs over the GPUs with --jobs 8 against --jobs 1, and over a subset of GPUs
#                 (--gpus 1..N-1): no job on a GPU it was not given (each job prints its GPU's PCI bus id)
# Judged by tests/gpu/multigpu.py, which prints RESULT lines; logs under OUT_DIR.
#
#   tests/gpu/multigpu.sh BUILD_DIR OUT_DIR [--simulate]
# With --simulate, the suites run on the virtual device with gloo (a CPU machine; no packing part).
# MULTIGPU_ONLY=EXPR runs only the jobs `-k EXPR` selects, and no packing part.
set -u
build=$(cd "$1" && pwd)
out=$2
sim=${3:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$build/runner/oomharness
mkdir -p "$out"
if [ -n "$sim" ]; then
  ngpu=2
  gpus=""
else
  ngpu=$(nvidia-smi -L | wc -l)
  gpus="--gpus $(seq -s, 0 $((ngpu - 1)))"
  nvidia-smi --query-gpu=index,pci.bus_id --format=csv,noheader >"$out/gpus.csv"
fi
last=$((ngpu - 1))
export NCCL_NVLS_ENABLE=0
# Hostile to a hang: NCCL's own watchdog would take 10 minutes; the harness's stall limit must act first.

cat >"$out/multigpu.yaml" <<YAML
version: 1
name: multigpu
defaults:
  timeout: 4m
  ranks: 2
  env: {PYTHONUNBUFFERED: "1", NCCL_NVLS_ENABLE: "0"}
  observe: {step: '^step (\d+) ', batch_size: 'bs=(\d+)', loss: 'loss=([0-9.e+-]+)'}
jobs:
  # NCCL's communicator buffers refused on rank 1: every allocation through cuMemCreate fails there.
  - name: nccl-oom-init
    run: python3 $root/examples/python/ddp_train.py --steps 6 --batch 1024 --recovery consistent --collective-timeout 60
    faults:
      - {name: nccl-buffers-rank1, when: {rank: 1, entry: [vmm]}, fail: {forever: true}}
    expect:
      - no_hang: {stall: 30s}
  # The same at step 3, on every rank: NCCL allocates little after its start, so this may never fire;
  # the report must then say the fault was not reached, not pass.
  - name: nccl-oom-step3
    run: python3 $root/examples/python/ddp_train.py --steps 6 --batch 1024 --recovery consistent --collective-timeout 60
    faults:
      - {name: nccl-buffers-step3, when: {step: 3, entry: [vmm]}, fail: {forever: true}}
    expect:
      - no_hang: {stall: 30s}
  # DDP with a checkpoint every 2 steps on rank 0, rank 1 dies of an OOM at step 5 (not caught); every rank
  # restarts and resumes. The fault persists in the first attempt only (clear_faults). Activations of 32 MiB:
  # on an H200, batch 256 x 512 (512 KiB) came from a 2 MiB block the allocator already held, so a forward
  # fault never fired there (the virtual device's model did fire it).
  - name: resume-all-ranks
    run: python3 $root/tests/gpu/ddp_checkpoint.py --ckpt {workdir}/last.pt --steps 10 --batch-size 2048 --hidden 4096
    restart: {max: 2, on: [oom], scope: all, clear_faults: true}
    faults:
      - {name: oom-rank1-step5, when: {step: 5, phase: forward, rank: 1}, fail: {forever: true}}
    expect:
      - oom_visible
      - checkpoint_resume
      - completes: 10
      - no_hang: {stall: 60s}
  - name: resume-rank1-never-loads
    run: python3 $root/tests/gpu/ddp_checkpoint.py --ckpt {workdir}/last.pt --steps 10 --batch-size 2048 --hidden 4096 --no-load-rank 1
    restart: {max: 2, on: [oom], scope: all, clear_faults: true}
    faults:
      - {name: oom-rank1-step5, when: {step: 5, phase: forward, rank: 1}, fail: {forever: true}}
    expect:
      - checkpoint_resume:
        must_fail: true
  # One rank per GPU over all of them: the last rank faulted at step 5, every rank halves together.
  - name: ranks-all-consistent
    ranks: $ngpu
    run: python3 $root/examples/python/ddp_train.py --steps 8 --batch 4096 --recovery consistent
    memory: {limit: 4GiB}
    faults:
      - {name: oom-last-rank-step5, when: {step: 5, phase: forward, rank: $last}, fail: {times: 2}}
    expect:
      - exit: 0
      - oom_visible
      - completes: 8
      - ranks_recover_together
      - no_hang: {stall: 30s}
  - name: ranks-all-hang
    ranks: $ngpu
    run: python3 $root/examples/python/ddp_train.py --steps 8 --batch 4096 --recovery none --keepalive
    memory: {limit: 4GiB}
    faults:
      - {name: oom-last-rank-step5, when: {step: 5, phase: forward, rank: $last}, fail: {times: 2}}
    expect:
      - no_hang: {stall: 10s}
        must_fail: true
      - completes: 8
        must_fail: true
YAML
# Issue 46 item 4: public trainers with their own DDP over NCCL on 2 GPUs, started by the harness's `ranks: 2`
# (torchelastic's environment, which both find), rank 1 faulted at step 5 (4 refusals: past PyTorch's retry),
# every rank restarted once (tests/public/programs/, the libraries unchanged). Only on GPUs: the virtual device
# has one device per process, and these programs ask for two.
# - lightning-ddp-resume: Lightning's demo Transformer, DDPStrategy, ModelCheckpoint every 2 steps. Written
#   before the first run: the OOM kills rank 1, every rank restarts from last.ckpt, no hang. What the H200s
#   showed (2026-11-28): rank 1 does not die. The OOM goes out of fit (trainer/call.py
#   _call_and_handle_interrupt tears down and re-raises), and at the process's exit the atexit handler Lightning
#   registered when it made the process group (lightning/fabric/utilities/distributed.py,
#   _destroy_dist_connection) waits in torch.distributed.destroy_process_group (rank 1's stack) while rank 0
#   waits in its step's all_reduce: a real hang, which under torchrun lasts until the process group's timeout
#   (30 min in Lightning). So no_hang must fail, naming it; the attempt is ended as hung, and a hung attempt is not
#   restarted (the hang would come back), so completes fails with it.
# - accelerate-ddp-resume: Accelerate's checkpointing example pattern (save_state every 2 steps, load_state and
#   skip_first_batches). Written before the run: the OOM propagates out of the training function and rank 1
#   exits; rank 0's NCCL wait is ended by the runner's restart (Note [A restart of every rank]), no hang; 8
#   steps complete; checkpoint_resume cannot be passed, as on one GPU (tests/public/corpus_check.py KNOWN:
#   load_state restores step 4's RNG state, so the shuffled epoch's order differs and the data cannot be matched).
#   What the H200s showed (2026-11-28), after the probe read Accelerate's save right: checkpoint_resume passes,
#   on the data, and the harness is right. With more than one process accelerate/data_loader.py
#   prepare_data_loader gives the RandomSampler a generator of its own, seeded once by a draw from the global
#   RNG at prepare() (after set_seed(0): the same seed in both attempts), so the resumed epoch has attempt 1's
#   order and skip_first_batches(4) lands on step 5's batch; with one process the sampler draws from the global
#   RNG, which load_state put at step 4's state. The expected verdict below is the run's.
if [ -z "$sim" ] && python3 -c "import lightning" 2>/dev/null; then
  cat >>"$out/multigpu.yaml" <<YAML
  - name: lightning-ddp-resume
    run: python3 $root/tests/public/programs/lightning_transformer.py --default_root_dir {workdir}/out --batch_size 16 --max_steps 8 --devices 2
    env: {PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1", WANDB_MODE: "disabled", NCCL_NVLS_ENABLE: "0"}
    restart: {max: 1, on: [oom], clear_faults: true}
    faults:
      - {name: die-at-5-rank1, when: {step: 5, rank: 1, min_size: 256KiB}, fail: {times: 4}}
    expect:
      - oom_visible
      - no_hang: {stall: 30s}
        must_fail: true
YAML
fi
if [ -z "$sim" ] && python3 -c "import accelerate, transformers" 2>/dev/null; then
  cat >>"$out/multigpu.yaml" <<YAML
  - name: accelerate-ddp-resume
    run: python3 $root/tests/public/programs/accelerate_loop.py --output_dir {workdir}/out --batch_size 8 --max_steps 8 --resume
    env: {PYTHONUNBUFFERED: "1", OMP_NUM_THREADS: "1", TOKENIZERS_PARALLELISM: "false", HF_HUB_OFFLINE: "1", NCCL_NVLS_ENABLE: "0"}
    restart: {max: 1, on: [oom], clear_faults: true}
    faults:
      - {name: die-at-5-rank1, when: {step: 5, rank: 1, min_size: 256KiB}, fail: {times: 4}}
    expect:
      - oom_visible
      - completes: 8
      - no_hang: {stall: 60s}
      - checkpoint_resume
YAML
fi
only=()
[ -n "${MULTIGPU_ONLY:-}" ] && only=(-k "$MULTIGPU_ONLY")  # some jobs only, and no packing part
t0=$(date +%s)
if [ -n "$sim" ]; then
  "$bin" run "$out/multigpu.yaml" "${only[@]}" --simulate --out "$out/run" >"$out/run.log" 2>&1
else
  # shellcheck disable=SC2086
  "$bin" run "$out/multigpu.yaml" "${only[@]}" $gpus --out "$out/run" >"$out/run.log" 2>&1
fi
echo "multigpu suite: exit $? in $(( $(date +%s) - t0 )) s"
tail -40 "$out/run.log"

if [ -z "$sim" ] && [ -z "${MULTIGPU_ONLY:-}" ]; then
  # Packing over the GPUs: each job prints the PCI bus id of the one GPU it sees.
  pack=$out/packing.yaml
  {
    echo "version: 1"
    echo "name: packing"
    echo "defaults: {timeout: 5m, probe: none, memory: {limit: 2GiB}, env: {PYTHONUNBUFFERED: \"1\"}}"
    echo "jobs:"
    for i in 1 2 3 4 5 6 7 8; do
      echo "  - {name: mlp-$i, shell: true, run: 'python3 $root/tests/gpu/which_gpu.py && python3 $root/examples/python/train.py --model mlp --steps 60 --batch 512 --seed $i', expect: [{exit: 0}]}"
    done
  } >"$pack"
  timed() {  # timed NAME ARGS...
    local name=$1 t0 t1; shift
    t0=$(date +%s.%N)
    "$bin" run "$pack" "$@" --out "$out/$name" >"$out/$name.log" 2>&1
    echo "$name exit $?" >&2
    t1=$(date +%s.%N)
    python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$t1"
  }
  all=$(seq -s, 0 $last)
  sub=$(seq -s, 1 $last)
  t_one=skipped
  [ -z "${MULTIGPU_SKIP_SERIAL:-}" ] && t_one=$(timed pack-jobs1 --jobs 1 --gpus 0)  # the baseline, 8 jobs one by one
  t_all=$(timed pack-all --jobs 8 --gpus "$all")
  t_sub=$(timed pack-sub --jobs 8 --gpus "$sub")
  echo "PACKING one_gpu_jobs1=$t_one all_gpus_jobs8=$t_all subset_jobs8=$t_sub gpus_all=$all gpus_sub=$sub"
fi
python3 "$root/tests/gpu/multigpu.py" "$out" ${sim:+--simulate}
