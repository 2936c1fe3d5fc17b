#!/usr/bin/env bash
# Everything that needs a GPU, in one command that fits one call of the device machine (600 s):
#   build   the project, LibTorch trainer included, tests configured with this machine's python3 (PyTorch)
#   wave 1  at once: ctest (every test but the Python ones), the injector's framework checks (caps, faults),
#           LibTorch, the Python probe against the GPU, and the fidelity benchmark's three caps (limits
#           inside a process, so they may share the GPU)
#   wave 2  at once: the self-test suite, the demo, and the armed record (tests/gpu/armed.yaml: real PyTorch
#           arms the shim and is judged; CPU-only and crashing jobs are errors, never passes)
#   alone   the reservation checks, a suite beside a reservation, the fidelity benchmark's reservation
#           (each holds nearly all of the GPU's memory)
#   compat  docs/compatibility.md regenerated from all of the above (before the timing phases, so that a
#           phase the budget skips at the end never costs the matrix)
#   timing  alone, one after the other, shortest first: driver calls, shim engine, runner, packing, throughput
#   virtual only when named: the virtual CUDA device against this GPU, same PyTorch (bench/python/
#           virtual_fidelity.py --device both), and the device's cost on this machine's quiet CPUs
#           (bench/python/virtual_device_cost.py); both informative, figures into bench/RESULTS.md
#   ecosystem only when named: Accelerate's, Transformers' and Lightning's own OOM helpers under a cap and a
#           step fault, judged (tests/gpu/ecosystem.yaml; findings in docs/ecosystem.md); its verdicts are
#           findings, so the phase fails only when the run could not judge them (exit 3, 4 or 5)
#   realworld only when named (issue 27): the corpus of training styles (tests/realworld/corpus.yaml) on this
#           GPU and on the virtual device (CUDA_VISIBLE_DEVICES=, this machine's python3 and PyTorch), compared
#           job by job into $OUT/realworld-compare.txt (tests/realworld/corpus_check.py --compare), and the GPU's
#           verdicts against the corpus's expected ones (--results --gpu); like ecosystem, it fails only when a
#           run could not judge its jobs (exit 3, 4 or 5)
#   fragment only when named: the reservation sidecar's fragmentation mode (reserve_chunk) against a whole
#           reservation of the same size, and what PyTorch can allocate at once beside each (issue 19)
#   probecost only when named: the Python probe's cost per step on the GPU, its .item() wait told apart
#           (bench/python/probe_overhead.py --device cuda), with every part and with none (--evidence)
#   stepfaults only when named (issue 40): tests/gpu/step_faults_gpu.yaml, ten runs of a steady trainer
#           faulted at 13 steps and phases, judged by tests/python/step_faults.py --gpu
#   ranks2gpu only when named, on a machine with 2 GPUs or more: tests/gpu/ranks2gpu.yaml with --gpus 0,1 (one
#           GPU per rank, NCCL, a real hang), judged by tests/gpu/ranks2gpu.py (docs/distributed.md)
#   multigpu only when named, on a machine with 2 GPUs or more (issue 33): tests/gpu/multigpu.sh: faults in
#           NCCL's own buffers, all ranks resuming from a DDP checkpoint (and a broken twin), one rank per GPU
#           over every GPU, 8 capped jobs packed over the GPUs and over a subset; judged by tests/gpu/multigpu.py
#   public  only when named (issues 41, 46): the public programs (tests/public/corpus.yaml) whose libraries this
#           machine's python3 imports (corpus_check.py --importable), on this GPU and on the virtual device, compared
#           job by job into $OUT/public-compare.txt, and the GPU's verdicts against the expected ones
#   anatomy only when named (issue 43): bench/predict_public.py's configurations on this GPU, each under PyTorch's
#           allocator history: the live blocks at the peak by who made them, $OUT/anatomy/NAME.json (ANATOMY_ONLY=a,b)
#   probeinproc only when named (issue 39): the probe's cost per step in one process, installed and taken away
#           between blocks of steps (bench/python/probe_overhead.py --interleaved), tiny and mlp
#   convws  only when named (issue 43): cuDNN's convolution workspaces beyond their results, ResNet shapes and a
#           random grid, $OUT/conv_workspace.jsonl (tests/gpu/conv_workspace.py)
#   rnn escape predictpublic gpuenv only when named (issues 41, 44, 43, 45): cuDNN's RNN memory against the native
#           kernels (tests/gpu/rnn_memory.py), a trainer outside the shim named by NVML (tests/gpu/escape_gpu.sh),
#           bench/predict_public.py's configurations on this GPU without the harness, and what the machine offers
#           (the public corpus's libraries, Slurm's daemons)
#   pytests only when named: the Python probe's and recovery code's unit tests with this machine's PyTorch,
#           on the CPU, in the background until the timing phases (CI runs them on every change with
#           Debian's PyTorch; here they took 177-279 s and held the timing phases back by 35-90 s)
#
#   tests/gpu/run_all.sh [PHASE...]
#   predict only when named (issues 31, 32 item 3): tests/gpu/predict_check.py: `oomharness predict` on this
#           machine's CPU against the GPU's max_memory_reserved() for an MLP, a GPT-style transformer and a CNN
#           at three batch sizes each, and the largest batch under a cap both ways; predict.json and predict.md
#           land in $OUT (RESULT lines say PASS within 10%, MISS otherwise: findings, not failures)
#   explaingpu only when named (issue 14): tests/gpu/explain_check.py: breakdowns beside memory_stats(),
#           memory_summary() and the memory history at OOMs of a leaky and an oversized trainer, with the
#           history on and off, and the history's per-step cost; its log also lands in $OUT/explaingpu.log
#
#   PHASE: build pytests virtual ecosystem realworld ctest injector libtorch probe fidelity-caps selftest demo armed reservation reservesuite
#          fidelity-reserve compat drivercalls shimbench runnerbench packing throughput ranks2gpu
#   (no PHASE: all but pytests, in that order; named phases of one wave still run at once)
#
# Measured on the H100 (2026-11-22): the whole run took 523 s in one call (build 58 s, waves 26 s and 47 s,
# reservations 63 s, throughput 138 s, packing 95 s). On a lease about 1.5 times slower the same run
# reached throughput at 382 s, and the budget then skipped what followed: `run_all.sh build packing
# drivercalls shimbench runnerbench` in a second call, while the machine is warm, reuses the build.
#
# Before each phase the script checks that the phase's usual time (EST below) still fits the time budget
# (RUN_ALL_BUDGET, 575 s by default): a phase that would not is skipped and reported (rc=skipped), so that
# what ran always comes back within the device call's 600 s.
#
# Logs and reports go under $OUT (the device tool's output folder) or out/gpu; the whole tree is also packed
# into $OUT/gpu-run.tar.gz, since only a few files come back from the device machine. Exit status: 0 when
# every phase ran and passed, 1 otherwise, 125 without a GPU. RUN_ALL_DRY=S replaces every phase by a sleep
# of S seconds (to check the schedule and the budget without a build).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/out/gpu}
work=$out/run
mkdir -p "$work"
export OOMH_BUILD_DIR=${OOMH_BUILD_DIR:-$root/build}
export OOMH_JOBS=${OOMH_JOBS:-$(nproc)}
build=$OOMH_BUILD_DIR
bin=$build/runner/oomharness
inject=$build/injector/liboomharness_inject.so
summary=$work/summary.txt
budget=${RUN_ALL_BUDGET:-575}
all_phases="build pytests virtual ecosystem realworld ctest injector libtorch probe fidelity-caps selftest demo armed reservation reservesuite fidelity-reserve
            compat drivercalls shimbench runnerbench packing throughput scale virtualsuite sweep budget explain fragment probecost stepfaults explaingpu ranks2gpu multigpu predict libooms probeprofile ecosystemboth public
            rnn escape predictpublic anatomy gpuenv probeinproc convws"
phases=${*:-${all_phases/pytests virtual ecosystem realworld /}}
[ $# -eq 0 ] && phases=${phases/ scale virtualsuite sweep budget explain fragment probecost stepfaults explaingpu ranks2gpu multigpu predict libooms probeprofile ecosystemboth public rnn escape predictpublic anatomy gpuenv probeinproc convws/}  # by name only
wave1="ctest injector libtorch probe fidelity-caps"
wave2="selftest demo armed"
timing="drivercalls shimbench runnerbench packing throughput scale"

# Seconds each phase usually takes on the H100 (measured, 2026-11-22; bench/RESULTS.md's GPU section), a
# little over; the budget check uses them.
declare -A EST=([build]=80 [pytests]=200 [virtual]=240 [ecosystem]=200 [realworld]=240 [ctest]=60 [injector]=30 [libtorch]=30 [probe]=40 [fidelity-caps]=30
                [selftest]=60 [demo]=60 [armed]=60 [reservation]=55 [reservesuite]=30 [fidelity-reserve]=20 [throughput]=145
                [packing]=150 [drivercalls]=35 [shimbench]=30 [runnerbench]=10 [compat]=5 [scale]=200 [virtualsuite]=120 [sweep]=120 [budget]=120 [explain]=5 [fragment]=60 [probecost]=330 [stepfaults]=150 [explaingpu]=150 [ranks2gpu]=120 [multigpu]=420 [predict]=420 [libooms]=60 [probeprofile]=90 [ecosystemboth]=300 [public]=420
                [rnn]=60 [escape]=60 [predictpublic]=420 [anatomy]=300 [gpuenv]=15 [probeinproc]=200 [convws]=200)

# RE2 (Debian's libre2-dev) is not on the GPU machine, where nothing can be installed: carry Debian's two
# packages in .re2/ (`apt-get download libre2-9 libre2-dev`, name .re2 in the device call's carry) and they
# are unpacked here for the build and the runs.
if [ ! -e /usr/include/re2/re2.h ] && ls "$root"/.re2/*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/re2
  for f in "$root"/.re2/*.deb; do dpkg -x "$f" /tmp/re2; done
  re2_lib=$(dirname "$(ls /tmp/re2/usr/lib/*/libre2.so | head -1)")
  export CPLUS_INCLUDE_PATH=/tmp/re2/usr/include${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
  export LIBRARY_PATH=$re2_lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$re2_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export CMAKE_PREFIX_PATH=/tmp/re2/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
fi
# Python packages the GPU machine lacks (a public trainer's), carried as wheels in .gpuwheels/ (`pip download
# --no-deps --only-binary=:all: --python-version 3.12 ...`, name .gpuwheels in the device call's carry): unpacked
# into a folder of this run and put on PYTHONPATH, as .re2's packages are (nothing is installed on the machine).
if ls "$root"/.gpuwheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install --quiet --no-deps --no-index --target "$work/gpuwheels" "$root"/.gpuwheels/*.whl &&
    export PYTHONPATH=$work/gpuwheels${PYTHONPATH:+:$PYTHONPATH}
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run_all.sh: no GPU here (nvidia-smi -L failed)" >&2
  exit 125
fi
for p in $phases; do
  [ -n "${EST[$p]:-}" ] || { echo "tests/gpu/run_all.sh: unknown phase '$p' (phases: $(echo $all_phases))" >&2; exit 2; }
done

# A suite whose job runs beside the reservation sidecar: it holds all of the GPU but 3 GiB (memory.leave,
# measured once the sidecar's own context exists), and the halving trainer must find a batch that fits
# what is left.
reservation_suite() {
  local suite=$work/reservation-suite.yaml
  cat >"$suite" <<YAML
version: 1
name: reservation
jobs:
  - name: halve-beside-a-reservation
    run: python3 $root/examples/python/train.py --model transformer --steps 8 --batch 4096 --recovery halve --min-batch 8
    env: {PYTHONUNBUFFERED: "1"}
    timeout: 3m
    memory: {leave: 3GiB}
    expect:                   # no oom_visible: it speaks of injected faults, and a reservation injects none
      - exit: 0
      - batch_halving: {factor: 0.5, min: 8, no_sample_loss: true}
      - completes: 8
YAML
  "$bin" run "$suite" --out "$work/reservation-suite"
}

# Issue 19: the sidecar's fragmentation mode, measured: the same 24 GiB held whole and in 512 MiB pieces with
# a hole after each (reserve_chunk), and what PyTorch can then allocate at once (tests/gpu/fragmentation_probe.py).
fragment_suite() {
  local suite=$work/fragment-suite.yaml
  cat >"$suite" <<YAML
version: 1
name: fragment
jobs:
  - name: reserved-whole
    run: python3 $root/tests/gpu/fragmentation_probe.py reserved-whole
    timeout: 3m
    memory: {reserve: 24GiB}
    expect: [{exit: 0}]
  - name: reserved-in-pieces
    run: python3 $root/tests/gpu/fragmentation_probe.py reserved-in-pieces
    timeout: 3m
    memory: {reserve: 24GiB, reserve_chunk: 512MiB}
    expect: [{exit: 0}]
YAML
  # No fault is injected, so the harness may call the jobs inconclusive: what counts is what they print.
  "$bin" run "$suite" --out "$work/fragment" >"$work/fragment.run.log" 2>&1
  find "$work/fragment/jobs" -name '*.log' -exec grep -h '^FRAGMENT \|: free ' {} + 2>/dev/null
  [ "$(find "$work/fragment/jobs" -name '*.log' -exec grep -h '^FRAGMENT ' {} + 2>/dev/null | wc -l)" -eq 2 ]
}

# The Python probe, the recovery code and the example trainers against this machine's PyTorch on the GPU.
probe_checks() {
  python3 "$root/tests/python/gpu_probe_check.py" "$work/probe"
}

# A suite on this GPU, then on the virtual device (this machine's python3 and PyTorch on its CPU), compared job
# by job into $out/TAG-compare.txt, each side's results into $out/TAG-{gpu,virtual}-results.json (issue 32).
# Fails only when a run could not judge its jobs (exit 3, 4 or 5): the verdicts are findings.
gpu_and_virtual() {  # gpu_and_virtual SUITE TAG
  local suite=$1 tag=$2 side rc=0
  "$bin" run "$suite" --jobs 3 --out "$work/$tag-gpu" || [ $? -le 1 ] || rc=1
  CUDA_VISIBLE_DEVICES= "$bin" run "$suite" --simulate --jobs 4 --out "$work/$tag-virtual" || [ $? -le 1 ] || rc=1
  python3 "$root/tests/realworld/corpus_check.py" --compare "$work/$tag-gpu/results.json" \
    "$work/$tag-virtual/results.json" | tee "$out/$tag-compare.txt"
  for side in gpu virtual; do cp "$work/$tag-$side/results.json" "$out/$tag-$side-results.json" 2>/dev/null; done
  return $rc
}

run_phase() {  # run_phase NAME: the phase's command, its output to stdout
  if [ -n "${RUN_ALL_DRY:-}" ]; then  # tests the schedule itself: each phase only sleeps RUN_ALL_DRY seconds
    sleep "$RUN_ALL_DRY"
    echo "dry $1"
    return 0
  fi
  case $1 in
    build) bash "$root/scripts/build.sh" -DOOMH_WITH_TORCH=AUTO -DOOMH_TEST_PYTHON_EXE="$(command -v python3)" ;;
    pytests) CUDA_VISIBLE_DEVICES= ctest --test-dir "$build" -L python --output-on-failure -j3 --timeout 400 ;;
    ecosystem) "$bin" run "$root/tests/gpu/ecosystem.yaml" --jobs 3 --out "$work/ecosystem"
               local rc=$?; [ $rc -le 1 ] ;;
    realworld)  # issue 27: the corpus on the GPU, then on the virtual device, compared job by job
      gpu_and_virtual "$root/tests/realworld/corpus.yaml" realworld
      local rc=$?
      echo "== the GPU's verdicts against the corpus's expected ones" | tee -a "$out/realworld-compare.txt"
      python3 "$root/tests/realworld/corpus_check.py" --results "$work/realworld-gpu/results.json" --gpu \
        | tee -a "$out/realworld-compare.txt"
      return $rc ;;
    public)  # issues 41, 46: the public programs this machine's python3 can import, on the GPU and on the virtual
             # device with the same PyTorch, compared job by job; the GPU's verdicts against the expected ones
      # PUBLIC_ONLY: a -k expression of the jobs to run (default: every job whose programs import here)
      local sel; sel=${PUBLIC_ONLY:-$(python3 "$root/tests/public/corpus_check.py" --importable)} || { echo "no public program imports here"; return 3; }
      echo "jobs: $sel"
      local rc=0
      "$bin" run "$root/tests/public/corpus.yaml" -k "$sel" --jobs 4 --out "$work/public-gpu" || [ $? -le 1 ] || rc=1
      CUDA_VISIBLE_DEVICES= "$bin" run "$root/tests/public/corpus.yaml" -k "$sel" --simulate --jobs 6 \
        --out "$work/public-virtual" || [ $? -le 1 ] || rc=1
      python3 "$root/tests/realworld/corpus_check.py" --compare "$work/public-gpu/results.json" \
        "$work/public-virtual/results.json" | tee "$out/public-compare.txt"
      for side in gpu virtual; do cp "$work/public-$side/results.json" "$out/public-$side-results.json" 2>/dev/null; done
      echo "== the GPU's verdicts against the expected ones" | tee -a "$out/public-compare.txt"
      python3 "$root/tests/public/corpus_check.py" --results "$work/public-gpu/results.json" --gpu | tee -a "$out/public-compare.txt"
      return $rc ;;
    virtual) python3 "$root/bench/python/virtual_fidelity.py" --device both --json-out "$work/virtual_fidelity.json" &&
             CUDA_VISIBLE_DEVICES= python3 "$root/bench/python/virtual_device_cost.py" --rounds 5 > "$work/virtual_cost.json";
             local rc=$?; cat "$work/virtual_cost.json"; return $rc ;;
    ctest) ctest --test-dir "$build" -LE python --output-on-failure -j8 --timeout 300 ;;
    injector) bash "$root/tests/gpu/injector/run.sh" "$build" "$work/injector" ;;
    libtorch) bash "$root/tests/gpu/libtorch_checks.sh" "$build" "$work/libtorch" ;;
    probe) probe_checks ;;
    fidelity-caps) python3 "$root/bench/gpu/fidelity.py" --inject "$inject" --reserve "$build/runner/oomh-reserve" \
                     --limit 8GiB --modes caps --json-out "$work/fidelity.json" ;;
    selftest) "$bin" run "$root/suites/self-test.yaml" --jobs 6 --out "$work/self-test" ;;
    virtualsuite)  # issue 19: the self-test again on the virtual device (CPU), compared job by job with selftest's
      CUDA_VISIBLE_DEVICES= "$bin" run "$root/suites/self-test.yaml" --simulate -k "not libtorch" --jobs 6 \
        --out "$work/self-test-virtual"
      local rc=$?
      [ -f "$work/self-test/results.json" ] || { echo "no GPU self-test results (run the selftest phase first)"; return 3; }
      python3 "$root/tests/gpu/virtual_vs_gpu.py" "$work/self-test/results.json" "$work/self-test-virtual/results.json" \
        "$work/virtual-vs-gpu.md" && cp "$work/virtual-vs-gpu.md" "$out/" && [ $rc -le 1 ] ;;
    demo) "$bin" demo --out "$work/demo" ;;
    armed)  # the corpus runner checks statuses; the driver_call events show the ways in real PyTorch used
      python3 "$root/tests/false_green/run_case.py" --bin "$bin" --trainer-dir "$build/tests/emulated_trainer" \
        --keep "$work/armed" "$root/tests/gpu/armed.yaml"
      local rc=$?
      grep -h '"driver_call"' "$work"/armed/oomh-out/jobs/*/attempt-*.events.jsonl | head -20
      return $rc ;;
    reservation) RUNTIME_ALLOC="$work/injector/runtime_alloc" bash "$root/tests/gpu/reservation_checks.sh" "$build" "$work/reservation" ;;
    reservesuite) reservation_suite ;;
    fidelity-reserve) python3 "$root/bench/gpu/fidelity.py" --inject "$inject" --reserve "$build/runner/oomh-reserve" \
                        --limit 8GiB --modes reserve --json-out "$work/fidelity.json" ;;
    throughput) python3 "$root/bench/gpu/throughput.py" --inject "$inject" --reps 2 --steps 30 ;;
    packing) COMPARE_OFF=1 bash "$root/bench/gpu/packing.sh" "$build" "$work/packing" ;;
    drivercalls) python3 "$root/bench/gpu/driver_calls.py" --bench "$build/bench/driver_call_bench" --inject "$inject" \
                   --runs 3 --footprint ;;
    shimbench)  # bench/RESULTS.md's two commands, shorter: the engine alone, then the hooks over the double
      [ -x "$build/bench/shim_bench" ] || { echo "shim_bench was not built (no Google Benchmark here)"; return 3; }
      "$build/bench/shim_bench" --benchmark_filter='Engine|Floor' --benchmark_min_time=0.3 --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true &&
      LD_PRELOAD="$inject" LD_LIBRARY_PATH="$build/cuda_double" CUDA_DOUBLE_MEMORY=64GiB OOMH_CAP=1TiB \
        "$build/bench/shim_bench" --benchmark_filter=Driver --benchmark_min_time=0.3 --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true ;;
    runnerbench) "$build/bench/runner_bench" ;;
    sweep)  # issue 19: a persistent and a transient sweep of step 3 under each of PyTorch's three allocators
      local conf name rc=0
      for conf in "" expandable_segments:True backend:cudaMallocAsync; do
        name=${conf%%:*}; name=${name:-native}
        local t0=$SECONDS
        "$bin" sweep --step 3 --target-step 6 --jobs 8 --timeout 180s \
          --env "PYTORCH_CUDA_ALLOC_CONF=$conf" --name "sweep-$name" --out "$work/sweep-$name" -- \
          python3 "$root/examples/python/train.py" --model mlp --steps 6 --batch 4096 --recovery retry || rc=1
        echo "sweep $name: $((SECONDS - t0)) s"
        python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('RESULT sweep_$name', 'PASS' if s['sites'] else 'FAIL', len(s['sites']), 'sites,', s['calls_recorded'], 'calls,', s['survived'], 'survived')" \
          "$work/sweep-$name/sweep.json" || rc=1
      done
      return $rc ;;
    budget)  # issue 19: the largest batch under 8 GiB (footprint) against bench/gpu/fidelity.py's 22
      "$bin" budget --batch-under 8GiB --cap-counts footprint --max-batch 64 --target-step 2 --timeout 180s \
        --name fidelity-step --out "$work/budget" -- python3 "$root/bench/gpu/fidelity_step.py" --batch '{batch}'
      local rc=$?; cat "$work/budget/budget.json" 2>/dev/null | head -c 3000; return $rc ;;
    ranks2gpu)  # issue 15: one GPU per rank; exit 1 from the run is expected (too-many-ranks is an error)
      "$bin" run "$root/tests/gpu/ranks2gpu.yaml" --gpus 0,1 --out "$work/ranks2gpu"
      echo "oomharness run exited $?"
      cp "$work/ranks2gpu/results.json" "$out/ranks2gpu-results.json" 2>/dev/null
      python3 "$root/tests/gpu/ranks2gpu.py" "$work/ranks2gpu/results.json" ;;
    multigpu) bash "$root/tests/gpu/multigpu.sh" "$build" "$work/multigpu"
              local rc=$?; cp "$work/multigpu/run/results.json" "$out/multigpu-results.json" 2>/dev/null; return $rc ;;
    explain) "$bin" explain "$work/self-test/results.json" ;;  # issue 19: the findings of the GPU self-test
    fragment) fragment_suite ;;
    libooms)  # issues 27/32: what libraries allocate outside the caching allocator, and pinned host faults
      python3 "$root/tests/gpu/library_ooms.py" measure | tee "$out/library_ooms.json"
      local rc=${PIPESTATUS[0]}
      # The same under the shim: what it saw (held, peak, calls) against the driver's figures above
      "$bin" exec --out "$work/libooms-measure" -- python3 "$root/tests/gpu/library_ooms.py" measure >/dev/null
      grep -h '"shim_exit"' "$work/libooms-measure"/jobs/*/attempt-0.events.jsonl | tee "$out/library_ooms_shim.txt"
      tail -40 "$work/libooms-measure"/jobs/*/attempt-0.log > "$out/library_ooms_under_shim.json"
      # Which of those bytes the shim sees: a fault for one size at a time (cuBLAS 64 MiB, cuDNN 8 MiB, 2 MiB)
      for size in 64MiB 8MiB 2MiB; do
        "$bin" exec --out "$work/libooms-which-$size" --fault min_size=$size,max_size=$size,after=12s,forever \
          -- python3 "$root/tests/gpu/library_ooms.py" which 15 >/dev/null
        echo "== a fault on every allocation of $size:"; grep -h "RESULT" "$work/libooms-which-$size"/jobs/*/attempt-0.log
        grep -h '"inject"' "$work/libooms-which-$size"/jobs/*/attempt-0.events.jsonl | head -4
      done | tee "$out/library_which.txt"
      for dev in gpu virtual; do
        local vis=(); [ $dev = virtual ] && vis=(env CUDA_VISIBLE_DEVICES=)
        "${vis[@]}" "$bin" exec --device $dev --fault memory=host,forever --out "$work/libooms-pin-$dev" \
          -- python3 "$root/tests/gpu/library_ooms.py" pin
        echo "== pin under a host fault, $dev:"; grep -h "RESULT\|Error" "$work/libooms-pin-$dev"/jobs/*/attempt-0.log
        grep -h '"memory":"host"' "$work/libooms-pin-$dev"/jobs/*/attempt-0.events.jsonl | head -3
      done | tee "$out/library_pin.txt"
      return $rc ;;
    probeprofile)  # issue 32 item 4: where the probe's per-step time goes on the GPU (cProfile ranks, not figures)
      python3 "$root/bench/python/probe_profile.py" --device cuda --model mlp --steps 500 | tee "$out/probe_profile.txt" ;;
    ecosystemboth)  # issue 32 item 5: the CPU-sized ecosystem suite on this GPU and on the virtual device, job by job
      gpu_and_virtual "$root/tests/python/ecosystem_virtual.yaml" ecosystem ;;
    probecost)  # issue 19: the probe's cost per step on the GPU, its .item() wait told apart
      # Note [Memory figures per step] (probe/memory.py): the nested stats the probe reads give the public figures
      python3 -c 'import torch; x = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (1, 3, 40)]; del x[1]
s = torch._C._cuda_memoryStats(0); a, r = s["allocated_bytes"]["all"]["current"], s["reserved_bytes"]["all"]["current"]
ok = (a, r) == (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
print("RESULT probe_memory_fields", "PASS" if ok else "FAIL", a, r, torch.cuda.memory_allocated(), torch.cuda.memory_reserved())' &&
      python3 "$root/tests/gpu/library_ooms.py" spaced &&
      # Note [A probe that pays for what is checked] (include/oomharness/evidence.h): every part, and none.
      # Side by side in each repetition: none, what every job gathers for its findings, and every part.
      python3 "$root/bench/python/probe_overhead.py" --device cuda --model tiny --steps 2000 --reps 5 \
        --evidence '' --evidence batches,grads,evaluation --evidence all &&
      python3 "$root/bench/python/probe_overhead.py" --device cuda --model mlp --steps 500 --reps 5 \
        --evidence '' --evidence batches,grads,evaluation --evidence all ;;
    probeinproc)  # issue 39: the probe's cost per step in one process, installed and taken away between blocks
      # (Note [The probe's cost in one process] in bench/python/probe_overhead.py): none, every job's default, all
      # and ':aa', two blocks without the probe against each other: the method's noise floor on this host
      python3 "$root/bench/python/probe_overhead.py" --device cuda --model tiny --steps 50 --interleaved 300 \
        --evidence '' --evidence ':aa' --evidence ':no:write' --evidence batches,grads,evaluation &&
      python3 "$root/bench/python/probe_overhead.py" --device cuda --model mlp --steps 30 --interleaved 100 \
        --evidence '' --evidence ':aa' ;;
    convws)  # issue 43: what cuDNN's convolutions ask beyond their results (tests/gpu/conv_workspace.py)
      python3 "$root/tests/gpu/conv_workspace.py" --out "$out/conv_workspace.jsonl" && tail -1 "$out/conv_workspace.jsonl" ;;
    rnn)  # issue 41: what cuDNN's RNNs hold beside the tensors (tests/gpu/rnn_memory.py), for the virtual device
      python3 "$root/tests/gpu/rnn_memory.py" | tee "$out/rnn_memory.jsonl" ;;
    escape)  # issue 44 (1): a process of the job outside the shim, seen by the driver's process list (NVML)
      bash "$root/tests/gpu/escape_gpu.sh" "$build" "$work/escape" ;;
    predictpublic)  # issue 43: the public configurations of bench/predict_public.py on this GPU, no harness
      python3 "$root/bench/predict_public.py" --gpu --python python3 --programs "$root/tests/public/programs" \
        --batch-under --json "$out/predict_public_gpu.json" ;;
    anatomy)  # issue 43: what the GPU holds at its peak for each configuration, by who made it (no harness)
      python3 "$root/bench/predict_public.py" --gpu --python python3 --programs "$root/tests/public/programs" \
        ${ANATOMY_ONLY:+--only "$ANATOMY_ONLY"} --anatomy "$work/anatomy" --json "$out/anatomy_gpu.json" &&
      tar czf "$out/anatomy.tgz" -C "$work/anatomy" . ;;  # one file: the device tool brings back only a few
    gpuenv)  # what the machine offers: the public corpus's libraries, Slurm (issue 45), NVML
      for m in torch torchvision timm transformers accelerate lightning peft trl litgpt datasets safetensors deepspeed \
               ultralytics mmengine torchtitan; do
        python3 -c "import $m; print('import $m', getattr($m, '__version__', '?'))" 2>/dev/null || echo "import $m: no"
      done
      for b in srun slurmd slurmctld munged; do echo "$b: $(command -v $b || echo no)"; done
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ;;
    stepfaults)  # issue 40: a step fault fires at its step every time, through the probe's request layer
      OOMH_SOURCE_DIR=$root python3 "$root/tests/python/step_faults.py" "$work/stepfaults" --gpu ;;
    predict)  # issues 31/32: shape-only predictions (this CPU) against the GPU's max_memory_reserved and largest batch
      python3 "$root/tests/gpu/predict_check.py" "$build" "$work/predict" &&
      cp "$work/predict/predict.json" "$work/predict/predict.md" "$out/" ;;
    explaingpu)  # issue 14: breakdown vs memory_stats, memory_summary, the memory history and its per-step cost
      python3 "$root/tests/gpu/explain_check.py" "$build" "$work/explaingpu" ;;
    scale) python3 "$root/bench/runner_scale.py" --bin "$bin" -n 10000 --nofile 256 ;;  # issue 12, a quiet machine
    compat) python3 "$root/tests/gpu/compatibility.py" "$work" "$work/compatibility.md" ;;
  esac
}

phase() {  # phase NAME: runs it if it fits the budget, logs to $work/NAME.log, records rc and time
  local name=$1 t0=$SECONDS rc
  if (( SECONDS + ${EST[$name]} > budget )); then
    echo "$name rc=skipped 0s (${SECONDS}s used, ~${EST[$name]}s needed, budget ${budget}s)" | tee -a "$summary"
    return 0
  fi
  echo "== $name (at ${SECONDS}s)"
  run_phase "$name" >"$work/$name.log" 2>&1
  rc=$?
  # A check script prints RESULT lines; a FAIL among them fails the phase whatever the script's status.
  if (( rc == 0 )) && grep -q '^RESULT .* FAIL' "$work/$name.log"; then rc=1; fi
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$summary"
  tail -4 "$work/$name.log" | sed "s/^/   $name | /"
}

wave() {  # wave PHASE...: the named phases that were asked for, at once
  local pids=() p
  for p in "$@"; do
    [[ " $phases " == *" $p "* ]] || continue
    phase "$p" & pids+=($!)
  done
  (( ${#pids[@]} )) && wait "${pids[@]}"
  return 0
}

in_wave() { [[ " $1 " == *" $2 "* ]]; }
background=""
join_background() {  # waits for the phase running in the background, if any
  [ -n "$background" ] && wait "$background"
  background=""
}
done_waves=""
for p in $phases; do
  in_wave "$timing" "$p" && join_background
  if [ "$p" = pytests ] && [ "$phases" != pytests ]; then
    phase pytests & background=$!
  elif in_wave "$wave1" "$p"; then
    in_wave "$done_waves" 1 || { wave $wave1; done_waves+=" 1"; }
  elif in_wave "$wave2" "$p"; then
    in_wave "$done_waves" 2 || { wave $wave2; done_waves+=" 2"; }
  else
    phase "$p"
  fi
done
join_background
echo "total ${SECONDS}s" | tee -a "$summary"

cp "$summary" "$out/summary.txt" 2>/dev/null
[ -f "$work/compatibility.md" ] && cp "$work/compatibility.md" "$out/compatibility.md"
[ -f "$work/demo/report.html" ] && cp "$work/demo/report.html" "$out/demo-report.html"
[ -f "$work/explaingpu.log" ] && cp "$work/explaingpu.log" "$out/explaingpu.log"
tar -C "$out" -czf "$out/gpu-run.tar.gz" --exclude='*.pt' --exclude='*.bin' --exclude='*.pickle' run 2>/dev/null
rm -rf "$work"
cat "$out/summary.txt"
! grep -v -e ' rc=0 ' -e '^total ' "$out/summary.txt" | grep -q .
