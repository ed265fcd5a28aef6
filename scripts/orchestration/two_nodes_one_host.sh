#!/bin/bash
# two_nodes_one_host.sh: emulate a 2-node torchrun job on one machine: two torchrun agents,
# each told it is one node of two (--nnodes 2, --node-rank 0 / 1), meeting at 127.0.0.1. It
# runs the same multi-node code path (node ranks, rendezvous, RANK = node_rank * nproc +
# local_rank) as a real 2-node job, without a cluster. CPU processes use gloo.
#
#   scripts/orchestration/two_nodes_one_host.sh scripts/network/all_reduce_bench.py --max-bytes 1M
#
# NPROC_PER_NODE (default 1) workers per emulated node; MASTER_PORT (default 29500).
# Output lines are prefixed with the node rank. Exit status: the first failing node's status.
set -euo pipefail

script=${1:?usage: two_nodes_one_host.sh SCRIPT [ARGS...]}
shift
port=${MASTER_PORT:-29500}
nproc=${NPROC_PER_NODE:-1}
fail() { echo "two_nodes_one_host.sh: error: $*" >&2; exit 2; }
[[ -f $script ]] || fail "no such script: $script"
if ! [[ $port =~ ^[1-9][0-9]{0,4}$ ]] || (( port > 65535 )); then
    fail "MASTER_PORT=$port is not a TCP port (1-65535)"
fi
[[ $nproc =~ ^[1-9][0-9]{0,2}$ ]] || fail "NPROC_PER_NODE=$nproc is not an integer from 1 to 999"
pids=()
for node_rank in 0 1; do
    torchrun --nnodes 2 --nproc-per-node "$nproc" --node-rank "$node_rank" \
        --master-addr 127.0.0.1 --master-port "$port" "$script" "$@" 2>&1 \
        | sed -u "s/^/[node $node_rank] /" &
    pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do
    wait "$pid" || { s=$?; [[ $status -ne 0 ]] || status=$s; }
done
exit "$status"
