#!/usr/bin/env bash
# pprun under SLURM: one task per rank, the rendezvous on the first node.
#   sbatch --nodes 2 --ntasks-per-node 2 examples/slurm.sh plan.json
#SBATCH --job-name=pprun
#SBATCH --time=00:10:00
set -euo pipefail
PLAN=${1:-plan.json}
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=${MASTER_PORT:-29500}
# export GLOO_SOCKET_IFNAME=eth0   # the network interface between nodes, if the host name does not resolve to it
srun pprun --plan "$PLAN" --config examples/small-model.json --steps 100 --metrics metrics.jsonl
