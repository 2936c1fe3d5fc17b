#!/usr/bin/env bash
# A one-node Slurm on this machine, with fake GPUs, for CI and for trying `oomharness run --backend slurm`
# (docs/slurm.md). Idempotent: `up` on a running cluster only checks it, `down` on a stopped one does nothing.
#
#   scripts/slurm-local.sh up       # start slurmctld + slurmd (state in $OOMH_SLURM_DIR, default /tmp/oomh-slurm)
#   scripts/slurm-local.sh status   # exit 0 when the node answers, 1 when not
#   scripts/slurm-local.sh down     # stop both daemons (the state folder stays, for the logs)
#   scripts/slurm-local.sh env      # prints `export SLURM_CONF=...`: eval "$(scripts/slurm-local.sh env)"
#
# Needs root and Debian's slurmctld, slurmd and slurm-client (scripts/deps.sh test installs them). Exit 77
# when Slurm is not installed or cannot start here (tests skip on it), 1 on other errors.
#
# Note [A one-node Slurm without systemd]
# What docs/design/slurm.md found, applied (22.05, Debian 12):
# - auth/none + cred/none: no munge daemon to start; the cluster listens on loopback only.
# - fake GPUs: gres.conf with AutoDetect=off and character devices made with mknod (regular files are
#   rejected, and a count without files marks the node invalid). 4 GPUs, each split into 2 shards.
# - select/cons_tres + CR_Core_Memory runs only as many jobs as cores: the partition oversubscribes
#   (OverSubscribe=FORCE:16) and DefMemPerNode keeps a job from taking all the node's memory.
# - ConstrainDevices is off (it makes jobs unable to open /dev/null); proctrack/linuxproc, since the cgroup
#   v2 plugin needs systemd in 22.05.
# - the daemons exit 0 even when they die right after start: we watch their pids and logs, and a zombie
#   (a slow-reaping PID 1) counts as gone.
# - finished jobs stay visible to squeue/scontrol for MinJobAge seconds: set high, since without slurmdbd
#   there is no sacct to ask afterwards.
set -uo pipefail

dir=${OOMH_SLURM_DIR:-/tmp/oomh-slurm}
conf=$dir/slurm.conf
node=$(hostname -s 2>/dev/null || hostname)
ctld_port=${OOMH_SLURM_PORT:-6817}
slurmd_port=$((ctld_port + 1))
export SLURM_CONF=$conf

say() { echo "slurm-local: $*" >&2; }

alive() {  # alive PIDFILE: the pid in it runs and is not a zombie
  local pid state
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

node_state() { sinfo -h -n "$node" -o %T 2>/dev/null | head -1; }

answering() {
  alive "$dir/slurmctld.pid" && alive "$dir/slurmd.pid" || return 1
  local s
  s=$(node_state)
  case "$s" in idle*|mixed*|allocated*|completing*) return 0 ;; esac
  return 1
}

write_config() {
  local cpus mem_mb
  cpus=$(nproc)
  # Half of the machine's memory: RealMemory above what slurmd finds would mark the node invalid.
  mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024 / 2)}' /proc/meminfo)
  mkdir -p "$dir/state" "$dir/spool" "$dir/dev" "$dir/log"
  for i in 0 1 2 3; do
    [ -c "$dir/dev/nvidia$i" ] || { rm -f "$dir/dev/nvidia$i"; mknod "$dir/dev/nvidia$i" c 1 3; }
  done
  cat >"$conf.tmp" <<EOF
# Written by scripts/slurm-local.sh (Note [A one-node Slurm without systemd]); rewritten on every \`up\`.
ClusterName=oomh-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerNode=256
GresTypes=gpu,shard
ReturnToService=2
MinJobAge=65000
MaxJobCount=50000
KillWait=10
SlurmdTimeout=300
InactiveLimit=0
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:4,shard:8 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16
EOF
  mv "$conf.tmp" "$conf"
  {
    echo "AutoDetect=off"
    for i in 0 1 2 3; do echo "Name=gpu File=$dir/dev/nvidia$i"; done
    for i in 0 1 2 3; do echo "Name=shard Count=2 File=$dir/dev/nvidia$i"; done
  } >"$dir/gres.conf.tmp"
  mv "$dir/gres.conf.tmp" "$dir/gres.conf"
}

stop_daemon() {  # stop_daemon NAME
  local pidfile=$dir/$1.pid pid
  [ -s "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if alive "$pidfile"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do alive "$pidfile" || break; sleep 0.1; done
    alive "$pidfile" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}

up() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null || {
    say "Slurm is not installed (Debian: apt-get install slurmctld slurmd slurm-client; scripts/deps.sh test does it)"
    exit 77
  }
  [ "$(id -u)" = 0 ] || { say "needs root (the daemons run as root here)"; exit 77; }
  if answering; then
    say "already up (node $node: $(node_state); SLURM_CONF=$conf)"
    return 0
  fi
  stop_daemon slurmd
  stop_daemon slurmctld
  write_config
  local t0=$SECONDS
  # -c: a clean start (no jobs from an earlier cluster); -D in the background, so that we hold the pid.
  setsid slurmctld -D -c -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  setsid slurmd -D -c -f "$conf" </dev/null >>"$dir/log/slurmd.out" 2>&1 &
  echo $! >"$dir/slurmd.pid"
  for _ in $(seq 300); do
    for d in slurmctld slurmd; do
      alive "$dir/$d.pid" || {
        say "$d died right after start; the end of its log:"
        tail -n 15 "$dir/log/$d.log" "$dir/log/$d.out" 2>/dev/null >&2
        stop_daemon slurmd; stop_daemon slurmctld
        exit 77
      }
    done
    case "$(node_state)" in
      idle*) say "up in $((SECONDS - t0)) s: node $node idle, 4 fake GPUs (gpu:4, shard:8); SLURM_CONF=$conf"; return 0 ;;
      down*|drain*) scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 ;;
    esac
    sleep 0.1
  done
  say "the node did not become idle in 30 s (state: $(node_state)); logs in $dir/log"
  tail -n 15 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2
  exit 77
}

down() {
  if [ -s "$dir/slurmctld.pid" ] && alive "$dir/slurmctld.pid"; then
    # Jobs first, so that no job's processes outlive the cluster.
    scancel --quiet --full --signal=KILL -p debug >/dev/null 2>&1 || true
    scancel --quiet -p debug >/dev/null 2>&1 || true
  fi
  stop_daemon slurmd
  stop_daemon slurmctld
  say "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    if answering; then echo "up: node $node $(node_state); SLURM_CONF=$conf"; exit 0; fi
    echo "down"; exit 1 ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
