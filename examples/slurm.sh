#!/usr/bin/env bash
# pprun under SLURM: one task per rank, the rendezvous on the job's first node, a checkpoint every
# 50 steps, and a job that SLURM requeues (a node failure, `scontrol requeue`, preemption) going
# on from its latest checkpoint by itself (--resume auto). See docs/pprun.md, Clusters.
#
#   sbatch --nodes 2 --ntasks-per-node 2 examples/slurm.sh plan.json
#   sbatch --nodes 2 --ntasks-per-node 2 examples/slurm.sh plan.json --steps 500 --metrics m.jsonl
#
# Arguments after the plan replace the training flags below (the checkpoint flags stay).
# PPRUN: the pprun binary (default: pprun on PATH); CKPT: the checkpoint directory, on a file
# system every node sees (default: ckpt-JOBID in the submission directory); SAVE_EVERY: steps
# between checkpoints (default: 50); MASTER_ADDR, MASTER_PORT: the rendezvous on the first node
# (default: its NodeAddr, port 29500).
#SBATCH --job-name=pprun
#SBATCH --time=00:10:00
#SBATCH --requeue
#SBATCH --open-mode=append
set -euo pipefail
PLAN=${1:-plan.json}
shift || true
TRAIN=("$@")
[ ${#TRAIN[@]} -gt 0 ] || TRAIN=(--config examples/small-model.json --steps 100 --metrics metrics.jsonl)
# The first node, at the address SLURM itself reaches it by (its NodeAddr; often its host name).
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node "$first" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
export MASTER_ADDR=${MASTER_ADDR:-${addr:-$first}}
export MASTER_PORT=${MASTER_PORT:-29500}
# export GLOO_SOCKET_IFNAME=eth0   # the network interface between nodes, if the host name does not resolve to it
echo "pprun: job $SLURM_JOB_ID, attempt $((${SLURM_RESTART_COUNT:-0} + 1)), $SLURM_NTASKS ranks on $SLURM_JOB_NODELIST, rendezvous $MASTER_ADDR:$MASTER_PORT"
srun "${PPRUN:-pprun}" --plan "$PLAN" "${TRAIN[@]}" \
  --save "${CKPT:-ckpt-$SLURM_JOB_ID}" --save-every "${SAVE_EVERY:-50}" --save-async --resume auto
