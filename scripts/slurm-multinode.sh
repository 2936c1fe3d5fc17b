#!/usr/bin/env bash
# A multi-node Slurm on this one machine, for CI and for trying multi-node jobs (`nodes:` and
# `ranks_per_node:`, docs/slurm.md "Jobs on several nodes"). One slurmctld, and N slurmd daemons, each in
# its own network and UTS namespace: its own host name (oomh-n1, oomh-n2, ...) and its own address on a
# private bridge, reached through a veth pair. The filesystem is the machine's (no mount namespace): every
# folder is "shared" by the nodes, as a cluster's shared filesystem is.
#
#   scripts/slurm-multinode.sh up       # bring it up (state in $OOMH_SLURM_DIR, default /tmp/oomh-slurm-mn)
#   scripts/slurm-multinode.sh status   # exit 0 when every node answers, 1 when not
#   scripts/slurm-multinode.sh down     # stop every daemon, remove the namespaces, the veths and the bridge
#   scripts/slurm-multinode.sh env      # prints `export SLURM_CONF=...`
#   scripts/slurm-multinode.sh kill-node NAME   # a node that disappears: every process in its namespace SIGKILLed
#   scripts/slurm-multinode.sh exec NAME CMD... # run CMD inside node NAME's namespaces (its network, its host name)
#
# Settings: OOMH_SLURM_NODES (default 2), OOMH_SLURM_PORT (slurmctld's port, default 6837; slurmd's is one
# more; it also names the bridge, the namespaces and the subnet, so that two clusters can coexist),
# OOMH_SLURM_NODE_CPUS (CPUs each node offers, default this machine's).
# Needs root, Debian's slurmctld, slurmd and slurm-client, iproute2 and util-linux (unshare, nsenter). Exit 77
# when any is missing or the namespaces cannot be made (tests skip on it), 1 on other errors.
#
# Note [Nodes as namespaces]
# - What a node has of its own: a network namespace (ip netns, so `ip netns pids` finds every process that
#   lives there, which is how kill-node finds them) and a UTS namespace (its host name), made by a keeper
#   process (`unshare --uts` inside the netns, sleeping) that slurmd is started beside with nsenter. Jobs
#   started by a slurmd inherit both, so a job on oomh-n2 sees host name oomh-n2 and address .12.
# - The veth inside each namespace is named oomh0 on every node: a job that must name its interface (gloo's
#   GLOO_SOCKET_IFNAME, since a node's host name resolves nowhere) can give the same name everywhere.
# - slurmctld stays in the machine's namespaces and listens on the bridge's address (.1), with the
#   machine's host name (it checks SlurmctldHost against its own). Client commands run from the machine.
# - Node names are given with their addresses (NodeAddr), so nothing needs /etc/hosts.
# - A folder not shared: the last node (of 2 or more) also has its own mount namespace, in which
#   $OOMH_SLURM_DIR/unshared is a tmpfs of its own; every other node (and the machine) sees the machine's
#   folder there. An output folder under it is one "not mounted on every node" (tests/slurm: bad input).
# - The rest is Note [A one-node Slurm without systemd] in scripts/slurm-local.sh: auth/none, linuxproc,
#   daemons watched by pid (a zombie counts as gone), MinJobAge high. No fake GPUs here. SlurmdTimeout is
#   short (30 s) so that a killed node is seen DOWN soon; ReturnToService=2 brings it back on the next `up`.
set -uo pipefail

dir=${OOMH_SLURM_DIR:-/tmp/oomh-slurm-mn}
nodes=${OOMH_SLURM_NODES:-2}
ctld_port=${OOMH_SLURM_PORT:-6837}
slurmd_port=$((ctld_port + 1))
conf=$dir/slurm.conf
export SLURM_CONF=$conf
tag=$ctld_port
bridge=oomhbr$tag
net=10.213.$((ctld_port % 250))
ctl_host=$(hostname -s 2>/dev/null || hostname)

say() { echo "slurm-multinode: $*" >&2; }
node_name() { echo "oomh-n$1"; }
ns_name() { echo "oomh$tag-n$1"; }

alive() {  # alive PIDFILE: the pid in it runs and is not a zombie
  local pid state
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

node_states() { sinfo -h -N -o '%N %T' 2>/dev/null; }

answering() {
  alive "$dir/slurmctld.pid" || return 1
  local i s
  for i in $(seq "$nodes"); do
    alive "$dir/$(node_name "$i").pid" || return 1
    s=$(sinfo -h -n "$(node_name "$i")" -o %T 2>/dev/null | head -1)
    case "$s" in idle*|mixed*|allocated*|completing*) ;; *) return 1 ;; esac
  done
}

write_config() {
  local cpus mem_mb i
  cpus=${OOMH_SLURM_NODE_CPUS:-$(nproc)}
  # Each node offers a share of the machine's memory: RealMemory above what slurmd finds marks it invalid.
  mem_mb=$(awk -v n="$nodes" '/^MemTotal:/ {print int($2 / 1024 / 2 / n)}' /proc/meminfo)
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  {
    cat <<EOF
# Written by scripts/slurm-multinode.sh (Note [Nodes as namespaces]); rewritten on every \`up\`.
ClusterName=oomh-mn$tag
SlurmctldHost=$ctl_host($net.1)
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
ReturnToService=2
MinJobAge=65000
MaxJobCount=50000
KillWait=5
SlurmdTimeout=30
InactiveLimit=0
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/spool/%n.slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/%n.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
    local names=""
    for i in $(seq "$nodes"); do
      echo "NodeName=$(node_name "$i") NodeAddr=$net.$((10 + i)) CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
      names+="${names:+,}$(node_name "$i")"
    done
    echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:16"
  } >"$conf.tmp"
  mv "$conf.tmp" "$conf"
  for i in $(seq "$nodes"); do mkdir -p "$dir/spool/$(node_name "$i")"; done
}

stop_pidfile() {  # stop_pidfile PIDFILE
  local pid
  [ -s "$1" ] || return 0
  pid=$(cat "$1")
  if alive "$1"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do alive "$1" || break; sleep 0.1; done
    alive "$1" && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$1"
}

kill_namespace() {  # every process that lives in network namespace $1
  local pids
  pids=$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  for _ in $(seq 30); do
    [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
}

make_network() {
  ip link show "$bridge" >/dev/null 2>&1 || {
    ip link add "$bridge" type bridge || return 1
    ip addr add "$net.1/24" dev "$bridge" || return 1
  }
  ip link set "$bridge" up || return 1
  local i ns
  for i in $(seq "$nodes"); do
    ns=$(ns_name "$i")
    ip netns list | grep -qw "^$ns" || ip netns add "$ns" || return 1
    if ! ip link show "oomhv$tag-$i" >/dev/null 2>&1; then
      ip link add "oomhv$tag-$i" type veth peer name "oomhp$tag-$i" || return 1
      ip link set "oomhp$tag-$i" netns "$ns" || return 1
      ip -n "$ns" link set "oomhp$tag-$i" name oomh0 || return 1
      ip -n "$ns" addr add "$net.$((10 + i))/24" dev oomh0 || return 1
      ip link set "oomhv$tag-$i" master "$bridge" || return 1
    fi
    ip link set "oomhv$tag-$i" up || return 1
    ip -n "$ns" link set oomh0 up || return 1
    ip -n "$ns" link set lo up || return 1
  done
}

remove_network() {
  local i ns
  for i in $(seq "$nodes"); do
    ns=$(ns_name "$i")
    kill_namespace "$ns"
    ip link del "oomhv$tag-$i" 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$bridge" 2>/dev/null
  return 0
}

own_mounts() { [ "$1" = "$nodes" ] && [ "$nodes" -ge 2 ]; }  # the last node: Note [Nodes as namespaces]

start_node() {  # start_node I: the keeper of its UTS namespace, then slurmd inside both namespaces
  local i=$1 name ns keeper unshare_args="--uts" setup=""
  name=$(node_name "$i")
  ns=$(ns_name "$i")
  keeper=$dir/spool/$name.keeper.pid
  if own_mounts "$i"; then
    unshare_args="--uts --mount --propagation slave"
    mkdir -p "$dir/unshared"
    setup="mount -t tmpfs oomh-unshared $dir/unshared && "
  fi
  if ! alive "$keeper"; then
    setsid nsenter --net="/run/netns/$ns" unshare $unshare_args sh -c "${setup}hostname $name && exec sleep infinity" </dev/null >/dev/null 2>&1 &
    echo $! >"$keeper"
    # nsenter and unshare exec in place: the pid is the keeper's once its host name is set.
    for _ in $(seq 50); do
      [ "$(nsenter --uts --target "$(cat "$keeper")" hostname 2>/dev/null)" = "$name" ] && break
      sleep 0.05
    done
  fi
  local enter="--uts"
  own_mounts "$i" && enter="--uts --mount"
  setsid nsenter --net="/run/netns/$ns" $enter --target "$(cat "$keeper")" \
    slurmd -D -c -N "$name" -f "$conf" </dev/null >>"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/$name.pid"
}

up() {
  for tool in slurmctld slurmd sbatch ip nsenter unshare; do
    command -v "$tool" >/dev/null || {
      say "$tool is not installed (Debian: apt-get install slurmctld slurmd slurm-client iproute2 util-linux; scripts/deps.sh test)"
      exit 77
    }
  done
  [ "$(id -u)" = 0 ] || { say "needs root (namespaces, and the daemons run as root here)"; exit 77; }
  if answering; then
    say "already up ($nodes nodes; SLURM_CONF=$conf)"
    return 0
  fi
  local t0 i
  t0=$(date +%s.%N)
  down quiet
  write_config
  make_network || { say "cannot make the bridge, the veth pairs or the network namespaces here"; remove_network; exit 77; }
  setsid slurmctld -D -c -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
  echo $! >"$dir/slurmctld.pid"
  for i in $(seq "$nodes"); do start_node "$i"; done
  for _ in $(seq 300); do
    alive "$dir/slurmctld.pid" || { say "slurmctld died right after start:"; tail -n 15 "$dir/log/slurmctld.log" >&2; down quiet; exit 77; }
    for i in $(seq "$nodes"); do
      alive "$dir/$(node_name "$i").pid" || {
        say "slurmd of $(node_name "$i") died right after start:"
        tail -n 15 "$dir/log/$(node_name "$i").log" "$dir/log/$(node_name "$i").out" >&2 2>/dev/null
        down quiet
        exit 77
      }
    done
    if answering; then
      say "up in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s: $nodes nodes ($(node_states | tr '\n' ' ')); SLURM_CONF=$conf"
      return 0
    fi
    for i in $(seq "$nodes"); do
      case "$(sinfo -h -n "$(node_name "$i")" -o %T 2>/dev/null | head -1)" in
        down*|drain*) scontrol update NodeName="$(node_name "$i")" State=RESUME >/dev/null 2>&1 ;;
      esac
    done
    sleep 0.1
  done
  say "the nodes did not become idle in 30 s ($(node_states | tr '\n' ' ')); logs in $dir/log"
  tail -n 15 "$dir/log/slurmctld.log" >&2
  down quiet
  exit 77
}

down() {
  local t0 i
  t0=$(date +%s.%N)
  if [ -s "$dir/slurmctld.pid" ] && alive "$dir/slurmctld.pid"; then
    scancel --quiet --full --signal=KILL -p debug >/dev/null 2>&1 || true
  fi
  for i in $(seq "$nodes"); do
    stop_pidfile "$dir/$(node_name "$i").pid"
    stop_pidfile "$dir/spool/$(node_name "$i").keeper.pid"
  done
  stop_pidfile "$dir/slurmctld.pid"
  remove_network  # and with the namespaces, any job process left in them
  [ "${1:-}" = quiet ] || say "down in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
}

node_index() {  # node_index NAME -> I
  local i
  for i in $(seq "$nodes"); do [ "$(node_name "$i")" = "$1" ] && { echo "$i"; return 0; }; done
  say "no node named $1 (oomh-n1 .. oomh-n$nodes)"
  exit 2
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status)
    if answering; then echo "up: $(node_states | tr '\n' ' '); SLURM_CONF=$conf"; exit 0; fi
    echo "down"; exit 1 ;;
  env) echo "export SLURM_CONF=$conf" ;;
  kill-node)
    i=$(node_index "${2:?kill-node NAME}")
    # The node disappears: slurmd, its step daemons and every job process there, at once.
    kill_namespace "$(ns_name "$i")"
    say "killed every process of $(node_name "$i")" ;;
  exec)
    i=$(node_index "${2:?exec NAME CMD...}")
    shift 2
    enter="--uts"
    own_mounts "$i" && enter="--uts --mount"
    exec nsenter --net="/run/netns/$(ns_name "$i")" $enter --target "$(cat "$dir/spool/$(node_name "$i").keeper.pid")" "$@" ;;
  *) echo "usage: $0 up|down|status|env|kill-node NAME|exec NAME CMD..." >&2; exit 2 ;;
esac
