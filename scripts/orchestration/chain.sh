#!/bin/bash
# chain.sh: submit N copies of a job script that run one after another, each starting when the
# previous one has ended for any reason (afterany: completed, failed, timed out). With a
# training that resumes from its checkpoint, N jobs of a few hours each make one long training.
#
#   scripts/orchestration/chain.sh N [SBATCH_OPTIONS] JOB_SCRIPT [ARGS]
#   scripts/orchestration/chain.sh 10 scripts/orchestration/train-requeue.sbatch --steps 100000
#
# Prints the job ids, one per line. Everything after N is passed to every sbatch call:
# sbatch options, the job script, then the arguments of the job script.
# Alternative without ids: give every job the same name and --dependency=singleton (at most one
# job of that name and user runs at a time).
set -euo pipefail

n=${1:?usage: chain.sh N [SBATCH_OPTIONS] JOB_SCRIPT [ARGS...]}
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "chain.sh: error: N must be a positive integer (got $n)" >&2; exit 2; }
# More links than this is a typo: each is a pending job the scheduler must track.
(( ${#n} <= 4 && n <= 1000 )) || { echo "chain.sh: error: N must be at most 1000 (got $n)" >&2; exit 2; }
(( $# > 0 )) || { echo "chain.sh: error: no job script given (usage: chain.sh N [SBATCH_OPTIONS] JOB_SCRIPT [ARGS...])" >&2; exit 2; }

prev=""
for _ in $(seq "$n"); do
    if [[ -z $prev ]]; then
        prev=$(sbatch --parsable "$@")
    else
        prev=$(sbatch --parsable --dependency="afterany:$prev" "$@")
    fi
    echo "$prev"
done
