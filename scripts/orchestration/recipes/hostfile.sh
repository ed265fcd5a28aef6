#!/bin/bash
# hostfile.sh: write the hostfile that DeepSpeed, Open MPI and pdsh-based launchers read, from
# inside a SLURM job: one line per allocated node, "NAME slots=N", in allocation order.
#
#   scripts/orchestration/recipes/hostfile.sh [SLOTS] > hostfile    # in a batch script or salloc
#
# SLOTS is the number of processes per node; by default the GPUs SLURM allocated on the node
# (SLURM_GPUS_ON_NODE), else --ntasks-per-node (SLURM_NTASKS_PER_NODE), else 1.
# SLURM_JOB_NODELIST is compressed (node[1-2,7]); `scontrol show hostnames` expands it.
set -euo pipefail

[[ -n ${SLURM_JOB_NODELIST:-} ]] || { echo "hostfile.sh: error: SLURM_JOB_NODELIST is not set: run it inside a job (sbatch, salloc, srun)" >&2; exit 2; }
slots=${1:-${SLURM_GPUS_ON_NODE:-${SLURM_NTASKS_PER_NODE:-1}}}
[[ $slots =~ ^[1-9][0-9]{0,3}$ ]] || { echo "hostfile.sh: error: SLOTS must be a positive integer below 10000 (got $slots)" >&2; exit 2; }

scontrol show hostnames "$SLURM_JOB_NODELIST" | while read -r node; do
    echo "$node slots=$slots"
done
