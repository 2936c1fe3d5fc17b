# bash completion for oomharness. Installed as share/bash-completion/completions/oomharness.
# tests/install checks that every flag of `oomharness COMMAND --help` is offered here.

_oomharness() {
  local cur prev cmd i
  COMPREPLY=()
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD-1]}
  cmd=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      run|exec|sweep|budget|predict|validate|report|explain|compare|demo) cmd=${COMP_WORDS[i]}; break ;;
      --) return 0 ;;
    esac
  done
  # After `exec ... --` (or sweep's, budget's) the words are the job's command: complete commands and files.
  if [ "$cmd" = exec ] || [ "$cmd" = sweep ] || [ "$cmd" = budget ] || [ "$cmd" = predict ]; then
    for ((i = 1; i < COMP_CWORD; i++)); do
      if [ "${COMP_WORDS[i]}" = -- ]; then
        COMPREPLY=($(compgen -c -f -- "$cur"))
        return 0
      fi
    done
  fi

  local reports="--junit --json --html --markdown --perfetto"
  case $prev in
    -o|--out) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    --junit|--json|--html|--markdown|--perfetto) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --device) COMPREPLY=($(compgen -W "auto gpu virtual" -- "$cur")); return 0 ;;
    # The backends come from the command's own table (kBackends), asked of the oomharness being completed.
    --backend) COMPREPLY=($(compgen -W "$("${COMP_WORDS[0]}" dev backends 2>/dev/null)" -- "$cur")); return 0 ;;
    --cap-counts) COMPREPLY=($(compgen -W "allocations footprint" -- "$cur")); return 0 ;;
    --threads-per-job) COMPREPLY=($(compgen -W "auto off" -- "$cur")); return 0 ;;
    --restart-on) COMPREPLY=($(compgen -W "oom nonzero signal any" -- "$cur")); return 0 ;;
    --expect) COMPREPLY=($(compgen -W "exit completes oom_visible batch_halving empty_cache_retry checkpoint_resume graceful_exit memory_stable peak_below no_hang zero_grad eval_no_grad effective_batch" -- "$cur")); return 0 ;;
    --modes) COMPREPLY=($(compgen -W "transient persistent transient,persistent" -- "$cur")); return 0 ;;
    --fail-on) COMPREPLY=($(compgen -W "verdict removed peak: recovery: faults_visible:" -- "$cur")); return 0 ;;
    -k|-j|--jobs|--gpus|--max-jobs|--maxfail|--cap|--fault|--timeout|--restart|--target-step|--step-base|--name|--env|--step|--transient-times|--low|--high|--tolerance|--batch-under|--max-batch) return 0 ;;
  esac

  local flags
  case $cmd in
    "") COMPREPLY=($(compgen -W "run exec sweep budget predict validate report explain compare demo --help --version" -- "$cur")); return 0 ;;
    run) flags="-k -x --exitfirst --maxfail --lf --last-failed --collect-only -q --quiet -v --verbose -j --jobs --threads-per-job
                --gpus $reports --summary -o --out --simulate --strict --device --max-jobs --backend --slurm-partition --slurm-gres --slurm-cpus --slurm-mem --slurm-arg --slurm-poll --slurm-agent --help" ;;
    exec) flags="--threads-per-job --cap --cap-counts --fault --expect --timeout --restart --restart-on --clear-faults --target-step --step-base
                 --name --env $reports --summary -o --out --simulate --strict --device -q --quiet -v --verbose --help" ;;
    sweep) flags="-k --step -j --jobs --threads-per-job --modes --transient-times --cap --cap-counts --expect --timeout
                  --restart --restart-on --clear-faults --target-step --step-base --name --env $reports --summary -o --out --simulate
                  --strict --device -q --quiet -v --verbose --help" ;;
    budget) flags="--low --high --tolerance --batch-under --max-batch --cap --cap-counts --expect --timeout --restart
                   --restart-on --clear-faults --target-step --step-base --name --env $reports --summary -o --out --simulate --strict
                   --device -q --quiet -v --verbose --help" ;;
    predict) flags="--steps --batch --batch-under --max-batch --cap --cap-counts --env --name --timeout --step-base --json
                    -o --out --strict --help" ;;
    validate) flags="--max-jobs --help" ;;
    report) flags="$reports --max-file-size --help" ;;
    explain) flags="-k --max-file-size --help" ;;
    compare) flags="--fail-on --markdown --max-file-size --help" ;;
    demo) flags="-o --out --help" ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
  elif [ "$cmd" = run ] || [ "$cmd" = validate ]; then
    COMPREPLY=($(compgen -f -X '!*.@(yaml|yml)' -- "$cur") $(compgen -d -- "$cur"))
  elif [ "$cmd" = report ] || [ "$cmd" = explain ] || [ "$cmd" = compare ]; then
    COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur"))
  fi
}
complete -F _oomharness oomharness
