#!/bin/bash
# on-every-node.sh: run a command once on every node of a running job, beside what the job is
# already running there (nvidia-smi, py-spy dump, df, a log tail); each output line starts
# with the node's name.
#
#   scripts/orchestration/recipes/on-every-node.sh JOBID COMMAND [ARGS...]
#   scripts/orchestration/recipes/on-every-node.sh 4242 nvidia-smi --query-gpu=index,memory.used --format=csv
#
# srun --jobid attaches a new step to the job's allocation; --overlap lets that step share the
# CPUs (and GPUs) the job's running steps hold, without which it waits for them to end.
set -euo pipefail

job=${1:-}
[[ $job =~ ^[0-9]+$ ]] || { echo "on-every-node.sh: error: JOBID must be a job number (got '$job'; usage: on-every-node.sh JOBID COMMAND [ARGS...])" >&2; exit 2; }
shift
(( $# > 0 )) || { echo "on-every-node.sh: error: no command given (usage: on-every-node.sh JOBID COMMAND [ARGS...])" >&2; exit 2; }

read -r state nodes <<< "$(squeue -h -j "$job" -o '%T %D' 2>/dev/null || true)"
[[ ${state:-} == RUNNING ]] || { echo "on-every-node.sh: error: job $job is not running (squeue says: ${state:-not in the queue})" >&2; exit 1; }

# Each line of output starts with the node's name; the exit status is the command's.
# shellcheck disable=SC2016
exec srun --jobid="$job" --overlap --nodes="$nodes" --ntasks-per-node=1 bash -c \
    'set -o pipefail; "$@" 2>&1 | sed "s/^/$SLURMD_NODENAME: /"' bash "$@"
