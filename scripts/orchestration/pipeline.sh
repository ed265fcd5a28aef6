#!/bin/bash
# pipeline.sh: submit a small pipeline whose jobs wait for each other:
#
#   sweep  (array.sbatch, a job array)
#   best   afterok:sweep    picks the lowest loss; runs only if every array task succeeded,
#                           and is cancelled (not left pending forever) if one failed
#   report afterany:best    always runs once the others have ended, whatever their outcome
#
#   OUT_DIR=$PWD/sweep-1 scripts/orchestration/pipeline.sh     # prints the three job ids
#
# Run from the repository root with your Python environment active. Extra arguments are
# passed to sbatch for the sweep (e.g. --array=0-2).
set -euo pipefail

OUT_DIR=${OUT_DIR:-$PWD/sweep-$(date +%Y%m%d-%H%M%S)}
# mkdir -p alone answers "File exists" when OUT_DIR or one of its parents is a file.
parent=$OUT_DIR
while [[ ! -e $parent ]]; do parent=$(dirname "$parent"); done
[[ -d $parent ]] || { echo "pipeline.sh: error: OUT_DIR=$OUT_DIR: $parent is a file, not a folder" >&2; exit 2; }
mkdir -p "$OUT_DIR"
export OUT_DIR
# The --wrap commands below are shell text: the folder goes in quoted (spaces, [ ], * and all).
out=$(printf %q "$OUT_DIR")

sweep=$(sbatch --parsable --output="$OUT_DIR/sweep-%A_%a.out" "$@" \
        scripts/orchestration/array.sbatch)

# afterok on an array id waits for every task. --kill-on-invalid-dep=yes cancels this job when
# the dependency can never be satisfied (a task failed); without it the job would stay
# pending with reason DependencyNeverSatisfied.
best=$(sbatch --parsable --job-name=pick-best --dependency="afterok:$sweep" \
       --kill-on-invalid-dep=yes --time=00:05:00 --output="$OUT_DIR/pick-best-%j.out" \
       --wrap="sort -g -k 2 $out/task-*.txt | head -n 1 > $out/best.txt")

# afterany: start once the job has ended, whether it completed, failed or was cancelled.
report=$(sbatch --parsable --job-name=report --dependency="afterany:$sweep:$best" \
         --time=00:05:00 --output="$OUT_DIR/report-%j.out" \
         --wrap="echo \"\$(cat $out/task-*.txt 2>/dev/null | wc -l) results; best (lr loss):\" \
                 \"\$(cat $out/best.txt 2>/dev/null || echo none)\" > $out/report.txt")

echo "$sweep $best $report"
