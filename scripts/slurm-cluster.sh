#!/usr/bin/env bash
# A SLURM cluster of one node on this machine, from Debian's packages (slurmctld, slurmd,
# slurm-client, munge: scripts/install-deps.sh installs them), for trying pprun under SLURM and
# for the test suite (docs/pprun.md, Clusters). Needs root.
#
#   scripts/slurm-cluster.sh up DIR     writes DIR/slurm.conf and a munge key, starts munged,
#                                       slurmctld and slurmd, waits until the node is idle and
#                                       prints the line to export (SLURM_CONF=DIR/slurm.conf)
#   scripts/slurm-cluster.sh down DIR   cancels the cluster's jobs, stops its daemons (by the pids
#                                       they wrote under DIR) and removes DIR; safe to repeat
#
# Everything the cluster has lives under DIR (configuration, munge's key and socket, state, spool,
# logs, pid files): it neither reads nor changes /etc/slurm, /etc/munge or a munged the machine
# runs. The node is this machine (its short host name, at 127.0.0.1, with its CPUs), in one
# partition `debug` that takes up to 4 tasks per CPU with --overcommit. Ports: SLURM's own (6817
# and 6818) unless SLURMCTLD_PORT and SLURMD_PORT say otherwise; the test suite runs each cluster
# in a network namespace of its own (scripts/test-hosts.sh), where they are free.
#
# Then, for example:
#   export SLURM_CONF=DIR/slurm.conf MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
#   srun -n 4 --overcommit build/tools/pprun/pprun --plan plan.json
#   sbatch -n 4 --overcommit examples/slurm.sh plan.json
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -eq 2 ] || usage
cmd=$1
dir=$2
if [ "$(id -u)" -ne 0 ]; then
  echo "slurm-cluster: needs root (the daemons run as root)" >&2
  exit 2
fi

# The daemon whose pid file is $1, if it runs.
running() {
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop() {
  local f=$1
  running "$f" || return 0
  local pid
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 30); do
    kill -0 "$pid" 2>/dev/null || return 0
    # (a zombie no one reaps counts as stopped)
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

case $cmd in
up)
  for tool in munged slurmctld slurmd sinfo; do
    command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin
    command -v "$tool" >/dev/null ||
      { echo "slurm-cluster: $tool is missing: run scripts/install-deps.sh" >&2; exit 2; }
  done
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -e "$dir/slurm.conf" ]; then
    echo "slurm-cluster: $dir already holds a cluster (scripts/slurm-cluster.sh down $dir)" >&2
    exit 2
  fi
  # munged checks its files: the key readable by its user alone, the socket's directory open to
  # every user, neither writable by others.
  mkdir -p "$dir/munge-key" "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 755 "$dir" "$dir/munge"
  chmod 700 "$dir/munge-key"
  dd if=/dev/urandom of="$dir/munge-key/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge-key/munge.key"
  munged --socket="$dir/munge/munge.sock" --key-file="$dir/munge-key/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  node=$(hostname -s)
  cat >"$dir/slurm.conf" <<EOF
# A one-node cluster made by scripts/slurm-cluster.sh; everything under $dir.
ClusterName=pprun
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job starts again after it (SLURM's default: 2 minutes)
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# the scheduler looks at pending jobs every second (SLURM's default: a minute)
SchedulerParameters=sched_interval=1
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ReturnToService=2
KillWait=5
MinJobAge=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld
  slurmd
  for _ in $(seq 300); do
    state=$(sinfo -h -o %t 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.1
  done
  if [ "$state" != idle ]; then
    echo "slurm-cluster: the node did not become idle within 30 s (state '$state'); logs:" >&2
    tail -n 5 "$dir"/log/*.log >&2 || true
    exit 1
  fi
  echo "export SLURM_CONF=$dir/slurm.conf"
  ;;
down)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/slurm.conf" ] && running "$dir/slurmctld.pid"; then
    export SLURM_CONF=$dir/slurm.conf
    timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
    for _ in $(seq 100); do # the jobs' processes end (slurmd's KillWait: SIGKILL after 5 s)
      [ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  stop "$dir/slurmd.pid"
  stop "$dir/slurmctld.pid"
  stop "$dir/munge/munged.pid"
  rm -rf "$dir"
  ;;
*)
  usage
  ;;
esac
