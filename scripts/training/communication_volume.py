#!/usr/bin/env python
"""communication_volume.py: bytes one GPU sends per training step, per parallelism strategy.

For a transformer trained with data (DDP, ZeRO-1/2, ZeRO-3/FSDP; HSDP: shard in groups of S
ranks, replicate across them; ZeRO++: quantized weights qwZ, a secondary partition in each node
hpZ, quantized gradients qgZ), tensor (TP, with or without sequence parallelism), pipeline (PP),
context (CP: ring attention or Ulysses) and expert (EP) parallelism, it prints one row per
collective a step issues (group size, calls per step, message size, bytes one GPU sends per
step, time at a bus bandwidth) and the total. A collective of S bytes over n ranks sends, per
rank (ring, nccl-tests' busbw factors): all-reduce 2(n-1)/n S; all-gather, reduce-scatter and
all-to-all (n-1)/n S; send S. Time = bytes sent / busbw; the rows add up without overlap.
The Model parallelism and Sharding chapters give each strategy's formula and source.
Units: 1 GB = 1e9 bytes, busbw in GBps (1e9 bytes/s per GPU). Standard library only, no GPU::

    python communication_volume.py
    python communication_volume.py --params 7e9 --layers 32 --hidden 4096 --dp 64 --zero 3
    python communication_volume.py --tp 1 --pp 1 --dp 128 --zero 3 --zeropp qwz hpz qgz

``--json PATH`` (``-``: print it instead of the table) writes the inputs, the rows and the total.
Exit status: 0 ok, 2 usage (refused before any work, naming the option); ``--debug``: traceback.

Example output (the defaults: a 70B-class model on 512 GPUs, TP 8 at 360 GBps, PP 4 and DP 16
with ZeRO-1 at 40 GBps, 64 micro-batches per step; the chapter shows the whole output)::

    $ python scripts/training/communication_volume.py
    ...
    strategy  collective       ranks   count  message_GB   sent_GB  busbw_GBps       time  what
    ZeRO-1    reduce_scatter      16       1       4.375      4.10          40   102.5 ms  gradients
    ZeRO-1    all_gather          16       1       4.375      4.10          40   102.5 ms  parameters
    TP        all_reduce           8    5120     0.06711    601.30         360     1.67 s  activations
    ...
    total                                                   618.09                 2.09 s
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import traceback

PROG = "communication_volume.py"


# ---------------------------------------------------------------- computation (no I/O)

TOOL = "communication_volume"
GB = 1e9
ZERO_NAMES = {0: "DP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}
CP_ALGOS = ("ring", "ulysses")
DIMENSIONS = ("dp", "tp", "pp", "cp", "ep", "node")
ZEROPP_PARTS = ("qwz", "hpz", "qgz")
INT8, INT4 = 1.0, 0.5                            # bytes per element of ZeRO++'s quantized messages
SPANS = ("node", "nodes", "rail")
MAX_DEGREE = 1_000_000
MAX_COUNT = 10**9
MAX_PARAMS = 1e15
MAX_BYTES_PER_ELEMENT = 16
MAX_GBPS = 1e6


def send_factor(collective: str, ranks: int) -> float:
    """Bytes one rank sends in ``collective`` over ``ranks`` ranks, as a multiple of the message
    size S: all_reduce 2(n-1)/n, all_gather, reduce_scatter and all_to_all (n-1)/n (ring
    algorithm, the Network chapter's conventions; the same factors as nccl-tests' busbw,
    doc/PERFORMANCE.md), send 1 (point-to-point). Raises ValueError for an unknown collective
    or fewer than 2 ranks."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 2:
        raise ValueError(f"a collective needs an integer number of ranks >= 2, got {ranks!r}")
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if collective == "send":
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def _positive(name: str, value, integer: bool = False, zero_ok: bool = False):
    """``value`` if it is a finite number > 0 (>= 0 with ``zero_ok``; a whole int with
    ``integer``), else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    if integer and not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name} must be a finite number {'>=' if zero_ok else '>'} 0, "
                         f"not {value!r}")
    return value


def _row(strategy: str, what: str, collective: str, ranks: int, count: int,
         message_bytes: float, busbw_GBps: float, span: str = "") -> dict:
    """One collective of a step: bytes sent per GPU = count x message x factor; time = that
    over busbw. ``span``, for the data-parallel rows: "node" (the group is inside one node),
    "nodes" (a ring through several nodes) or "rail" (one rank per node); "" elsewhere."""
    factor = send_factor(collective, ranks)
    sent = count * message_bytes * factor
    return {"strategy": strategy, "what": what, "collective": collective, "ranks": ranks,
            "count": count, "message_bytes": float(message_bytes), "factor": factor,
            "sent_bytes": float(sent), "busbw_GBps": float(busbw_GBps),
            "time_s": sent / (busbw_GBps * GB), "span": span}


def check_layout(*, layers: int, hidden: int, seq_len: int, dp: int = 1, tp: int = 1,
                 pp: int = 1, cp: int = 1, ep: int = 1, heads: int | None = None,
                 kv_heads: int | None = None, moe_layers: int | None = None,
                 sequence_parallel: bool = False, cp_algo: str = "ring", zero: int = 0,
                 params: float | None = None, expert_params: float = 0.0,
                 experts_top_k: int | None = None, hsdp: int | None = None,
                 zeropp: tuple = (), node_ranks: int = 8) -> list[str]:
    """The reasons (each naming the option at fault) why a layout cannot run; [] when it can.

    Checks that each degree divides what it splits: t the hidden size and the heads (and the KV
    heads), p the layers (and the MoE layers), c the sequence (and with SP, s/c by t; Ulysses:
    the heads by t c), e the d c ranks that hold the same dense parameters; that SP has TP, ZeRO
    has more than one DP x CP rank, EP has MoE layers and k, that with TP > 1 EP has SP
    (Megatron-LM's requirement), and that HSDP and ZeRO++ have ZeRO-3 and groups that divide
    the DP x CP ranks."""
    problems = []
    if cp_algo not in CP_ALGOS:
        problems.append(f"--cp-algo {cp_algo!r}: choose from {', '.join(CP_ALGOS)}")
    if hidden % tp:
        problems.append(f"--tp {tp} does not divide --hidden {hidden}")
    problems += _head_problems(hidden, heads, kv_heads, tp, cp, cp_algo)
    if layers % pp:
        problems.append(f"--pp {pp} does not divide --layers {layers}: unequal stages")
    if seq_len % cp:
        problems.append(f"--cp {cp} does not divide --seq-len {seq_len}")
    elif sequence_parallel and (seq_len // cp) % tp:
        problems.append(f"--sequence-parallel: --tp {tp} does not divide the {seq_len // cp} "
                        "tokens of a CP rank")
    if sequence_parallel and tp == 1:
        problems.append("--sequence-parallel needs --tp > 1")
    if zero and dp * cp == 1:
        problems.append(f"--zero {zero} needs more than one DP x CP rank to shard over")
    if params is not None and expert_params >= params:
        problems.append(f"--expert-params {expert_params:g} must be below --params {params:g}")
    problems += _expert_problems(layers, dp, tp, pp, cp, ep, moe_layers, experts_top_k, sequence_parallel)
    problems += _sharding_problems(dp * cp, ep, zero, hsdp, tuple(zeropp), node_ranks)
    return problems


def _sharding_problems(n: int, ep: int, zero: int, hsdp: int | None, zeropp: tuple,
                       node_ranks: int) -> list[str]:
    """check_layout's checks of HSDP (a shard group S with 1 < S < n that divides the n = d c
    ranks) and ZeRO++ (its parts; hpZ and qgZ need nodes of ``node_ranks`` that divide n, and
    more than one node); both are ZeRO-3 variants of the dense parameters (no EP here)."""
    problems = [f"--zeropp {part!r}: choose from {', '.join(ZEROPP_PARTS)}"
                for part in zeropp if part not in ZEROPP_PARTS]
    for name, on in (("--hsdp", hsdp is not None), ("--zeropp", bool(zeropp))):
        if on and zero != 3:
            problems.append(f"{name} is a variant of ZeRO-3: give --zero 3")
        if on and ep > 1:
            problems.append(f"{name} with --ep is not modelled here: leave --ep at 1")
    if hsdp is not None and zeropp:
        problems.append("--hsdp and --zeropp are alternatives: choose one")
    if hsdp is not None and (hsdp < 2 or hsdp >= n or n % hsdp):
        problems.append(f"--hsdp {hsdp} must divide --dp x --cp = {n} and lie between 2 and "
                        f"{n // 2} (--hsdp {n} is plain ZeRO-3)")
    if {"hpz", "qgz"} & set(zeropp) and (node_ranks >= n or n % node_ranks):
        problems.append(f"--zeropp hpz/qgz: --node-ranks {node_ranks} must divide --dp x --cp = "
                        f"{n} and be smaller (they need more than one node)")
    return problems


def _head_problems(hidden: int, heads: int | None, kv_heads: int | None, tp: int, cp: int,
                   cp_algo: str) -> list[str]:
    """check_layout's checks of the attention heads: they divide the hidden size, and TP (and
    Ulysses CP x TP) divides them."""
    if heads is None:
        return [] if kv_heads is None else ["--kv-heads needs --heads"]
    problems = []
    if heads > hidden or hidden % heads:
        problems.append(f"--heads {heads} does not divide --hidden {hidden}")
    if heads % tp:
        problems.append(f"--tp {tp} does not divide --heads {heads}")
    if kv_heads is not None:
        if kv_heads > heads or heads % kv_heads:
            problems.append(f"--kv-heads {kv_heads} does not divide --heads {heads}")
        elif kv_heads % tp:
            problems.append(f"--tp {tp} does not divide --kv-heads {kv_heads}")
    if cp > 1 and cp_algo == "ulysses":
        for name, n in (("--heads", heads), ("--kv-heads", kv_heads)):
            if n is not None and n % (tp * cp):
                problems.append(f"--cp {cp} (ulysses) x --tp {tp} does not divide "
                                f"{name} {n}: each rank needs whole heads")
    return problems


def _expert_problems(layers: int, dp: int, tp: int, pp: int, cp: int, ep: int, moe_layers: int | None,
                     experts_top_k: int | None, sequence_parallel: bool) -> list[str]:
    """check_layout's checks of expert parallelism: EP divides the DP x CP ranks and has its MoE
    options (and SP with TP); without EP, no MoE option."""
    if ep <= 1:
        return [f"{name} needs --ep > 1" for name, value in
                (("--experts-top-k", experts_top_k), ("--moe-layers", moe_layers)) if value is not None]
    problems = []
    if (dp * cp) % ep:
        problems.append(f"--ep {ep} does not divide --dp x --cp = {dp * cp} (EP ranks are "
                        "taken from the DP x CP ranks)")
    if experts_top_k is None:
        problems.append(f"--ep {ep} needs --experts-top-k")
    if tp > 1 and not sequence_parallel:
        problems.append(f"--ep {ep} with --tp {tp} needs --sequence-parallel (as in "
                        "Megatron-LM)")
    if moe_layers is not None and (moe_layers > layers or moe_layers % pp):
        problems.append(f"--moe-layers {moe_layers} must be at most --layers {layers} and a "
                        f"multiple of --pp {pp}")
    return problems


def volumes(*, params: float, layers: int, hidden: int, seq_len: int, micro_batch: int = 1,
            grad_accum: int = 1, dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1,
            zero: int = 0, sequence_parallel: bool = False, cp_algo: str = "ring",
            heads: int | None = None, kv_heads: int | None = None, expert_params: float = 0.0,
            experts_top_k: int | None = None, moe_layers: int | None = None,
            grad_bytes: float = 2, param_bytes: float = 2, act_bytes: float = 2,
            hsdp: int | None = None, zeropp: tuple = (), node_ranks: int = 8,
            busbw_GBps: dict | None = None) -> list[dict]:
    """The collectives one GPU takes part in during one optimizer step, and what it sends.

    Args:
        params: Psi, all parameters of the model (count, > 0); expert_params: the part of it in
            MoE experts (>= 0, below params).
        layers, hidden, seq_len: L, h, s; heads, kv_heads: optional (checks, and h_kv = kv_heads
            x hidden / heads for CP; h without them).
        micro_batch, grad_accum: b sequences per micro-batch, m micro-batches per step.
        dp, tp, pp, cp, ep: degrees (ints >= 1); world size d t p c, EP inside DP x CP.
        zero: 0 (DDP), 1, 2 or 3 (FSDP full shard); sequence_parallel: Megatron SP (needs tp > 1);
            cp_algo: "ring" or "ulysses".
        experts_top_k, moe_layers: k and the MoE layers (default all) when ep > 1.
        grad_bytes, param_bytes, act_bytes: bytes per element of gradients (reduced),
            parameters (gathered) and activations.
        hsdp: with zero 3, shard over groups of this many of the d c ranks and replicate
            across the groups (HSDP; FSDP2's 2-D mesh); None: shard over all of them.
        zeropp: with zero 3, the ZeRO++ parts (Wang et al. 2023, arXiv:2306.10209) among
            "qwz" (forward all-gather in int8), "hpz" (backward all-gather inside a node, from
            a secondary partition) and "qgz" (gradients as int4 in an all-to-all in the node,
            then one across nodes).
        node_ranks: the d c ranks of one node (g): hpZ's secondary group, qgZ's first hop, and
            which groups use the "node" bandwidth (those inside a node).
        busbw_GBps: {"dp": ..., "tp": ..., "pp": ..., "cp": ..., "ep": ..., "node": ...}, bus
            bandwidth per GPU in 1e9 bytes/s for each dimension present ("node": a
            data-parallel group inside one node, with HSDP or ZeRO++).

    Returns one dict per collective (see ``_row``): ``strategy``, ``what``, ``collective``,
    ``ranks``, ``count`` (per step), ``message_bytes``, ``factor``, ``sent_bytes`` (per GPU per
    step: count x message x factor), ``busbw_GBps``, ``time_s`` and ``span``; [] when every
    degree is 1.
    The formulas and their sources are in the Model parallelism chapter. Raises ValueError on
    a bad number or a layout ``check_layout`` refuses.
    """
    _positive("params", params)
    _positive("expert_params", expert_params, zero_ok=True)
    for name, value in (("layers", layers), ("hidden", hidden), ("seq_len", seq_len),
                        ("micro_batch", micro_batch), ("grad_accum", grad_accum), ("dp", dp),
                        ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
        _positive(name, value, integer=True)
    _positive("node_ranks", node_ranks, integer=True)
    for name, value in (("heads", heads), ("kv_heads", kv_heads), ("hsdp", hsdp),
                        ("experts_top_k", experts_top_k), ("moe_layers", moe_layers)):
        if value is not None:
            _positive(name, value, integer=True)
    for name, value in (("grad_bytes", grad_bytes), ("param_bytes", param_bytes),
                        ("act_bytes", act_bytes)):
        _positive(name, value)
    if zero not in ZERO_NAMES:
        raise ValueError(f"zero must be 0, 1, 2 or 3, not {zero!r}")
    problems = check_layout(layers=layers, hidden=hidden, seq_len=seq_len, dp=dp, tp=tp, pp=pp,
                            cp=cp, ep=ep, heads=heads, kv_heads=kv_heads, moe_layers=moe_layers,
                            sequence_parallel=sequence_parallel, cp_algo=cp_algo, zero=zero,
                            params=params, expert_params=expert_params,
                            experts_top_k=experts_top_k, hsdp=hsdp, zeropp=zeropp,
                            node_ranks=node_ranks)
    if problems:
        raise ValueError(problems[0])
    bw = dict(busbw_GBps or {})
    degrees = {"dp": dp * cp, "tp": tp, "pp": pp, "cp": cp, "ep": ep}
    in_node = (hsdp is not None and node_ranks % hsdp == 0) or {"hpz", "qgz"} & set(zeropp)
    degrees["node"] = 2 if in_node else 1
    for dim in DIMENSIONS:
        if degrees[dim] > 1:
            _positive(f"busbw_GBps[{dim!r}]", bw.get(dim))
    m, b = grad_accum, micro_batch
    stage_layers = layers // pp
    tokens = b * (seq_len // cp)                  # tokens a CP rank holds per micro-batch
    act = tokens * hidden * act_bytes             # one b (s/c) h activation, bytes
    rows = _dp_rows(params, expert_params, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, zero=zero, m=m,
                    stage_units=(stage_layers, (moe_layers or layers) // pp), grad_bytes=grad_bytes,
                    param_bytes=param_bytes, bw_dp=bw.get("dp"),
                    sharding=(hsdp, tuple(zeropp), node_ranks, bw.get("node")))
    return rows + _model_parallel_rows(
        tp=tp, pp=pp, cp=cp, ep=ep, m=m, stage_layers=stage_layers,
        moe_stage_layers=(moe_layers or layers) // pp, tokens=tokens, act=act, hidden=hidden,
        heads=heads, kv_heads=kv_heads, act_bytes=act_bytes, sequence_parallel=sequence_parallel,
        cp_algo=cp_algo, experts_top_k=experts_top_k, bw=bw)


def _dp_rows(params, expert_params, *, dp, tp, pp, cp, ep, zero, m, stage_units, grad_bytes,
             param_bytes, bw_dp, sharding=(None, (), 8, None)) -> list[dict]:
    """DP / ZeRO over the d x c ranks holding the same parameters; experts over d c / e.
    ``stage_units``: the FSDP units (layers) of a stage, all of them and those with experts;
    ``sharding``: (hsdp, zeropp, node_ranks, node busbw), see ``volumes``."""
    rows = []
    groups = [("", params - expert_params, dp * cp, stage_units[0]),
              (" experts", expert_params, dp * cp // ep, stage_units[1])]
    for suffix, psi, n, units in groups:
        if psi == 0 or n == 1:
            continue
        local = psi / (tp * pp * (ep if suffix else 1))   # parameters one rank holds
        name = ZERO_NAMES[zero] + suffix
        grads, weights = local * grad_bytes, local * param_bytes
        if zero == 0:
            rows.append(_row(name, "gradients", "all_reduce", n, 1, grads, bw_dp, "nodes"))
        elif zero in (1, 2):
            rows.append(_row(name, "gradients", "reduce_scatter", n, 1 if zero == 1 else m,
                             grads, bw_dp, "nodes"))
            rows.append(_row(name, "parameters", "all_gather", n, 1, weights, bw_dp, "nodes"))
        elif sharding[0] or sharding[1]:
            rows += _sharded_rows(local, n, m * units, units, grad_bytes, param_bytes, bw_dp,
                                  *sharding)
        else:  # one FSDP unit per layer: gather for forward and backward, reduce-scatter
            rows.append(_row(name, "parameters, per layer", "all_gather", n, 2 * m * units,
                             weights / units, bw_dp, "nodes"))
            rows.append(_row(name, "gradients, per layer", "reduce_scatter", n, m * units,
                             grads / units, bw_dp, "nodes"))
    return rows


def _sharded_rows(local, n, passes, units, grad_bytes, param_bytes, bw_dp, hsdp, zeropp,
                  g, bw_node) -> list[dict]:
    """ZeRO-3's collectives as HSDP or ZeRO++ change them; ``local`` parameters per rank,
    ``passes`` = micro-batches x FSDP units per step, one unit = local / units parameters.

    HSDP (S = hsdp, R = n / S): all-gather twice and reduce-scatter once per unit over the S
    ranks of a shard group, then all-reduce the 1/S of the gradients a rank keeps over the R
    ranks that hold the same shard (FSDP2 does it per unit and micro-batch unless told to
    wait). ZeRO++ over n ranks in nodes of g: qwZ all-gathers the forward's weights in int8
    over all n; hpZ all-gathers the backward's from the secondary partition, over the g ranks
    of a node; qgZ sends the gradients as int4 in an all-to-all over the node, reduces, and
    sends the 1/g it keeps as int4 in an all-to-all over the n/g ranks with its local rank."""
    unit = local / units
    if hsdp:
        r = n // hsdp
        span = "node" if g % hsdp == 0 else "nodes"
        bw = bw_node if span == "node" else bw_dp
        return [_row("HSDP shard", "parameters, per layer", "all_gather", hsdp, 2 * passes,
                     unit * param_bytes, bw, span),
                _row("HSDP shard", "gradients, per layer", "reduce_scatter", hsdp, passes,
                     unit * grad_bytes, bw, span),
                _row("HSDP replicate", "gradient shards, per layer", "all_reduce", r, passes,
                     unit * grad_bytes / hsdp, bw_dp, "rail" if hsdp == g else "nodes")]
    rows = []
    if "qwz" in zeropp:
        rows.append(_row("ZeRO++ qwZ", "int8 parameters, forward", "all_gather", n, passes,
                         unit * INT8, bw_dp, "nodes"))
    else:
        rows.append(_row("ZeRO-3/FSDP", "parameters, forward", "all_gather", n, passes,
                         unit * param_bytes, bw_dp, "nodes"))
    if "hpz" in zeropp:
        rows.append(_row("ZeRO++ hpZ", "parameters, backward", "all_gather", g, passes,
                         unit * param_bytes, bw_node, "node"))
    else:
        rows.append(_row("ZeRO-3/FSDP", "parameters, backward", "all_gather", n, passes,
                         unit * param_bytes, bw_dp, "nodes"))
    if "qgz" in zeropp:
        rows.append(_row("ZeRO++ qgZ", "int4 gradients, in the node", "all_to_all", g, passes,
                         unit * INT4, bw_node, "node"))
        rows.append(_row("ZeRO++ qgZ", "int4 gradient slices, across nodes", "all_to_all",
                         n // g, passes, unit * INT4 / g, bw_dp, "rail"))
    else:
        rows.append(_row("ZeRO-3/FSDP", "gradients", "reduce_scatter", n, passes,
                         unit * grad_bytes, bw_dp, "nodes"))
    return rows


def cross_node_bytes(rows: list[dict], node_ranks: int) -> float:
    """Bytes that leave one node per step through the data-parallel rows, summed over its
    ``node_ranks`` GPUs: 0 for a group inside the node; for a ring through the nodes, what one
    rank sends (each ring passes a node's boundary once; NCCL's parallel rings split the
    message); for a group of one rank per node ("rail"), what all of the node's ranks send.
    The ZeRO++ paper's "cross-node volume" (3M for ZeRO-3, 0.75M with ZeRO++) counts this.
    Raises ValueError for a row without a span (the model-parallel ones)."""
    share = {"node": 0, "nodes": 1, "rail": node_ranks}
    if any(r["span"] not in share for r in rows):
        raise ValueError("cross_node_bytes counts data-parallel rows only (a row has no span)")
    return math.fsum(r["sent_bytes"] * share[r["span"]] for r in rows)


def _model_parallel_rows(*, tp, pp, cp, ep, m, stage_layers, moe_stage_layers, tokens, act,
                         hidden, heads, kv_heads, act_bytes, sequence_parallel, cp_algo,
                         experts_top_k, bw) -> list[dict]:
    """TP (+SP), PP, CP and EP: the collectives on activations, per micro-batch."""
    rows = []
    if tp > 1:
        calls = 4 * stage_layers * m              # 2 forward + 2 backward per layer
        if sequence_parallel:
            for collective in ("all_gather", "reduce_scatter"):
                rows.append(_row("TP+SP", "activations", collective, tp, calls, act, bw["tp"]))
        else:
            rows.append(_row("TP", "activations", "all_reduce", tp, calls, act, bw["tp"]))

    if pp > 1:
        per_micro_batch = 2 if pp > 2 else 1      # an inner stage sends forward and backward
        rows.append(_row("PP", "activations and their gradients", "send", pp,
                         per_micro_batch * m, act, bw["pp"]))

    if cp > 1:
        head_dim_share = hidden / heads if heads else None
        h_kv = kv_heads * head_dim_share if kv_heads else hidden
        kv = tokens * h_kv / tp * act_bytes       # one rank's keys or values, bytes
        calls = stage_layers * m
        if cp_algo == "ring":
            rows.append(_row("CP ring", "K, V forward", "send", cp, (cp - 1) * calls, 2 * kv,
                             bw["cp"]))
            rows.append(_row("CP ring", "K, V and gradients backward", "send", cp,
                             (cp - 1) * calls, 4 * kv, bw["cp"]))
        else:
            rows.append(_row("CP Ulysses", "Q, output (fwd + bwd)", "all_to_all", cp,
                             4 * calls, act / tp, bw["cp"]))
            rows.append(_row("CP Ulysses", "K, V (fwd + bwd)", "all_to_all", cp, 4 * calls,
                             kv, bw["cp"]))

    if ep > 1:
        routed = experts_top_k * act / (tp if sequence_parallel else 1)
        rows.append(_row("EP", "dispatch, combine (fwd + bwd)", "all_to_all", ep,
                         4 * moe_stage_layers * m, routed, bw["ep"]))
    return rows


def totals(rows: list[dict]) -> dict:
    """``{"sent_bytes", "time_s"}``: the sums over ``rows`` (time without any overlap)."""
    # math.fsum, not sum: sum() of floats is compensated from Python 3.12 on, so its last digit
    # would depend on the Python version (the browser's Pyodide is newer than most clusters')
    return {"sent_bytes": math.fsum(r["sent_bytes"] for r in rows),
            "time_s": math.fsum(r["time_s"] for r in rows)}


def compute(args: argparse.Namespace) -> list[dict]:
    return volumes(params=args.params, expert_params=args.expert_params, layers=args.layers,
                   hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
                   seq_len=args.seq_len, micro_batch=args.micro_batch,
                   grad_accum=args.grad_accum, dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp,
                   ep=args.ep, zero=args.zero, sequence_parallel=args.sequence_parallel,
                   cp_algo=args.cp_algo, experts_top_k=args.experts_top_k,
                   moe_layers=args.moe_layers, grad_bytes=args.grad_bytes,
                   param_bytes=args.param_bytes, act_bytes=args.act_bytes, hsdp=args.hsdp,
                   zeropp=tuple(args.zeropp or ()), node_ranks=args.node_ranks,
                   busbw_GBps=args.bandwidths)


# ---------------------------------------------------------------- report

def document(rows: list[dict], args: argparse.Namespace) -> dict:
    """The --json document: inputs, rows and total; nothing that varies between runs."""
    inputs = {key: getattr(args, key) for key in (
        "params", "expert_params", "layers", "hidden", "heads", "kv_heads", "seq_len",
        "micro_batch", "grad_accum", "experts_top_k", "moe_layers", "grad_bytes", "param_bytes",
        "act_bytes", "dp", "tp", "pp", "cp", "ep", "zero", "sequence_parallel", "cp_algo",
        "gpus", "busbw_GBps", "tp_busbw_GBps", "dp_busbw_GBps", "pp_busbw_GBps",
        "cp_busbw_GBps", "ep_busbw_GBps", "hsdp", "zeropp", "node_ranks", "node_busbw_GBps")}
    inputs["world_size"] = args.world
    inputs["busbw_GBps_by_dimension"] = dict(args.bandwidths)
    return {"tool": TOOL, "schema_version": 1, "inputs": inputs,
            "strategies": rows, "total": totals(rows)}


def _time(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def report(rows: list[dict], args: argparse.Namespace) -> str:
    """The text table: # header lines, one aligned row per collective, the total."""
    dims = [f"{d} {getattr(args, d)}" for d in ("dp", "tp", "pp", "cp") if getattr(args, d) > 1]
    extras = [ZERO_NAMES[args.zero] if args.dp * args.cp > 1 else None,
              "SP" if args.sequence_parallel else None,
              f"CP {args.cp_algo}" if args.cp > 1 else None,
              f"ep {args.ep} within dp x cp, top-{args.experts_top_k}" if args.ep > 1 else None,
              f"HSDP shard groups of {args.hsdp}" if args.hsdp else None,
              f"ZeRO++ {' '.join(args.zeropp)}, nodes of {args.node_ranks}" if args.zeropp else None]
    layout = " x ".join(dims) or "one GPU"
    lines = [
        f"# {PROG}: bytes one GPU sends per optimizer step (1 GB = 1e9 bytes)",
        f"# model: {args.params / 1e9:.4g} B params, {args.layers} layers, hidden {args.hidden}, "
        f"seq {args.seq_len}; {args.grad_accum} micro-batches of {args.micro_batch} per step",
        f"# layout: {layout} = {args.world} GPUs"
        + "".join(f", {e}" for e in extras if e),
        "# sent = count x message x factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, "
        "all_to_all (n-1)/n; send 1",
        "# time = sent / busbw (nccl-tests' busbw factors); busbw per GPU in GBps (1e9 bytes/s); "
        "rows add up, no overlap",
    ]
    w = max([len("strategy"), *(len(r["strategy"]) for r in rows)]) + 2
    head = (f"{'strategy':<{w}}{'collective':<16}{'ranks':>6}{'count':>8}{'message_GB':>12}"
            f"{'sent_GB':>10}{'busbw_GBps':>12}{'time':>11}  what")
    lines.append(head)
    for r in rows:
        lines.append(f"{r['strategy']:<{w}}{r['collective']:<16}{r['ranks']:>6}{r['count']:>8}"
                     f"{r['message_bytes'] / GB:>12.4g}{r['sent_bytes'] / GB:>10.2f}"
                     f"{r['busbw_GBps']:>12g}{_time(r['time_s']):>11}  {r['what']}")
    total = totals(rows)
    lines.append(f"{'total':<{w + 42}}{total['sent_bytes'] / GB:>10.2f}{'':>12}"
                 f"{_time(total['time_s']):>11}")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Bytes one GPU sends per training step for each parallelism (DP, ZeRO-1/2/3, "
                    "TP with or without SP, PP, CP, EP), and the time at a bus bandwidth "
                    "(time = bytes x busbw factor / busbw). Decimal units.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    pos = dict(kind=int, lo=1, hi=MAX_COUNT)
    m = p.add_argument_group("model")
    m.add_argument("--params", type=number(float, 0, MAX_PARAMS, lo_open=True), default=70e9,
                   help="Psi, all parameters (default 70e9)")
    m.add_argument("--expert-params", type=number(float, 0, MAX_PARAMS), default=0.0,
                   help="the part of --params in MoE experts (default 0)")
    m.add_argument("--layers", type=number(**pos), default=80, help="L (default 80)")
    m.add_argument("--hidden", type=number(**pos), default=8192, help="h (default 8192)")
    m.add_argument("--heads", type=number(**pos),
                   help="attention heads (optional: checks that TP and Ulysses split them)")
    m.add_argument("--kv-heads", type=number(**pos),
                   help="key/value heads with grouped-query attention (needs --heads; CP sends "
                        "K/V of this width)")
    m.add_argument("--seq-len", type=number(**pos), default=4096, help="s, tokens (default 4096)")
    m.add_argument("--micro-batch", type=number(**pos), default=1,
                   help="b, sequences per micro-batch per DP rank (default 1)")
    m.add_argument("--grad-accum", type=number(**pos), default=64,
                   help="m, micro-batches per optimizer step (default 64)")
    m.add_argument("--experts-top-k", type=number(int, 1, 1024),
                   help="k, experts per token (with --ep)")
    m.add_argument("--moe-layers", type=number(**pos),
                   help="layers with experts (with --ep; default all)")
    for name, what in (("grad", "gradients (reduced)"), ("param", "parameters (gathered)"),
                       ("act", "activations")):
        m.add_argument(f"--{name}-bytes", type=number(float, 0, MAX_BYTES_PER_ELEMENT,
                                                      lo_open=True),
                       default=2.0, help=f"bytes per element of {what} (default 2, bf16)")
    lay = p.add_argument_group("layout")
    for dim, default, what in (("dp", 16, "data"), ("tp", 8, "tensor"), ("pp", 4, "pipeline"),
                               ("cp", 1, "context"), ("ep", 1, "expert")):
        lay.add_argument(f"--{dim}", type=number(int, 1, MAX_DEGREE), default=default,
                         help=f"{what}-parallel degree (default {default})")
    lay.add_argument("--zero", type=int, choices=(0, 1, 2, 3),
                     help="0 DDP, 1/2 ZeRO, 3 ZeRO-3/FSDP full shard (default 1 when DP x CP "
                          "has more than one rank)")
    lay.add_argument("--sequence-parallel", action="store_true",
                     help="Megatron sequence parallelism with TP")
    lay.add_argument("--cp-algo", choices=CP_ALGOS, default="ring",
                     help="context parallelism: ring attention or Ulysses (default ring)")
    lay.add_argument("--hsdp", type=number(int, 2, MAX_DEGREE), metavar="S",
                     help="with --zero 3: HSDP, shard over groups of S DP x CP ranks (a node's) "
                          "and replicate across the groups")
    lay.add_argument("--zeropp", nargs="+", choices=ZEROPP_PARTS,
                     help="with --zero 3: ZeRO++ parts, qwz (int8 forward all-gather), hpz "
                          "(backward all-gather inside a node), qgz (int4 gradient all-to-alls)")
    lay.add_argument("--node-ranks", type=number(int, 1, MAX_DEGREE), default=8,
                     help="DP x CP ranks per node, for --hsdp and --zeropp (default 8)")
    lay.add_argument("--gpus", type=number(int, 1, MAX_DEGREE ** 2),
                     help="world size, checked against dp x tp x pp x cp (optional)")
    net = p.add_argument_group("bus bandwidth per GPU (1 GBps = 1e9 bytes/s), for the times")
    gbps = number(float, 0, MAX_GBPS, lo_open=True)
    net.add_argument("--busbw-GBps", type=gbps, default=40.0, metavar="GBPS",
                     help="for every dimension without its own (default 40: 80%% of a 400 Gbps "
                          "NIC per GPU)")
    net.add_argument("--tp-busbw-GBps", type=gbps, default=360.0, metavar="GBPS",
                     help="for TP (default 360: 80%% of H100 NVLink's 450 GBps)")
    for dim in ("dp", "pp", "cp", "ep"):
        net.add_argument(f"--{dim}-busbw-GBps", type=gbps, metavar="GBPS",
                         help=f"for {dim.upper()} (default --busbw-GBps)")
    net.add_argument("--node-busbw-GBps", type=gbps, metavar="GBPS",
                     help="for a data-parallel group inside a node, with --hsdp or --zeropp "
                          "(default --tp-busbw-GBps)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the results as JSON ('-': print it instead of the table)")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse and check everything before any work: usage errors exit 2 in one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    world = args.dp * args.tp * args.pp * args.cp
    if args.gpus is not None and args.gpus != world:
        parser.error(f"--gpus {args.gpus} is not --dp x --tp x --pp x --cp = {args.dp} x "
                     f"{args.tp} x {args.pp} x {args.cp} = {world}")
    problems = check_layout(layers=args.layers, hidden=args.hidden, seq_len=args.seq_len,
                            dp=args.dp, tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep,
                            heads=args.heads, kv_heads=args.kv_heads, moe_layers=args.moe_layers,
                            sequence_parallel=args.sequence_parallel, cp_algo=args.cp_algo,
                            zero=args.zero or 0, params=args.params,
                            expert_params=args.expert_params, experts_top_k=args.experts_top_k,
                            hsdp=args.hsdp, zeropp=tuple(args.zeropp or ()),
                            node_ranks=args.node_ranks)
    if problems:
        parser.error(problems[0])
    if args.expert_params and args.ep == 1:
        parser.error("--expert-params needs --ep > 1 (without EP, expert parameters are "
                     "ordinary DP parameters: leave them in --params)")
    if args.zero is None:
        args.zero = 1 if args.dp * args.cp > 1 else 0
    args.bandwidths = {dim: getattr(args, f"{dim}_busbw_GBps") or args.busbw_GBps
                       for dim in DIMENSIONS if dim != "node"}
    args.bandwidths["node"] = args.node_busbw_GBps or args.tp_busbw_GBps
    args.world = world
    if args.json and args.json != "-":
        check_output(args.json, "--json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows = compute(args)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    # The JSON file is written before the table is printed, so a closed pipe
    # (`| head`) cannot cost the reader the file.
    if args.json:
        text = json.dumps(document(rows, args), indent=2)
        if args.json == "-":
            print(text)
            return EXIT_OK
        write_atomic(args.json, text + "\n")
    print(report(rows, args))
    return EXIT_OK


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
