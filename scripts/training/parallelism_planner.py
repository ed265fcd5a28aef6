#!/usr/bin/env python
"""parallelism_planner.py: rank the ways to lay a transformer's training out on a GPU cluster.

Given a model (a row of the book's data/models/architectures.yml, a Hugging Face ``config.json``,
or a GPT shape), a cluster (a GPU of the table below, GPUs per node, nodes, and the bus bandwidth
per GPU inside a node and between nodes), a global batch and a sequence length, it

1. enumerates the layouts: data parallel (DDP, ZeRO-1, FSDP = ZeRO-3, or HSDP: ZeRO-3 inside a
   node, replicas across nodes) x tensor (TP, inside a node, with sequence parallelism) x
   pipeline (PP, 1F1B) x context (CP, ring) x expert (EP) parallelism, with the micro-batch size
   and activation recomputation (none, selective, full);
2. drops those that do not fit in memory: memory_estimator.py's formulas (ZeRO paper bytes per
   parameter; Korthikanti et al. 2022 activations, on the first stage that holds ``pp``
   micro-batches, Narayanan et al. 2021);
3. estimates a step: compute at the GPU's MAMF (the best matmul rate measured by mamf_finder.py;
   published figures), the exposed communication of each axis over its link (TP, CP, EP and
   pipeline sends per micro-batch, not overlapped; the gradient reduction once per step,
   overlapped with the last micro-batch's backward; FSDP's gathers per micro-batch, overlapped
   with its compute), and the pipeline bubble, (p - 1) micro-batch slots (Narayanan et al. 2021);
4. ranks the degree tuples (dp, tp, pp, cp, ep), each with its fastest fitting choice of
   sharding, micro-batch and recomputation, by step time, and prints the top ones with memory,
   communication, bubble and MFU (model FLOPs, 6N plus attention, over the peak).

Not modelled: the optimizer step, data loading, non-matmul kernels, interleaved or zero-bubble
schedules, overlap of TP/EP communication with compute, FP8. The estimate is therefore an upper
bound on MFU; the Parallelism chapter compares it with published runs. Units: bytes (GB = 1e9),
seconds, TFLOPS = 1e12 FLOP/s; bandwidths are bus bandwidths in GB/s per GPU. The model comes
from ``--model`` (read from ``--data PATH`` if given, else from the copy built into this
script), ``--config`` or ``--layers/--hidden/--heads/--vocab``. Plain ``python``, no GPU::

    python parallelism_planner.py --model "Llama 3.1 70B" --gpu h100-sxm --nodes 64 \\
        --global-batch 512 --seq 8192
    python parallelism_planner.py --layers 128 --hidden 25600 --heads 160 --vocab 51200 \\
        --gpu a100-80gb --nodes 384 --global-batch 3072 --seq 2048 --inter-GBps 20 --json -

Example output::

    $ python scripts/training/parallelism_planner.py --model "Llama 3.1 70B" --gpu h100-sxm \\
          --nodes 64 --global-batch 512 --seq 8192 --top 3
    # parallelism_planner.py: Llama 3.1 70B, 70.6 B parameters, batch 512 x 8192 tokens
    # 64 x 8 h100-sxm: MAMF 794.5 of 989.4 TFLOPS; bus GB/s per GPU 360 in a node, 40 between
    # 55 degree tuples of 2,148 layouts fit in 90% of 80 GB; step s = compute + comm + bubble
     #    dp shard tp  pp cp  ep mb    m    recomp mem GB  step s comm s bubble    MFU
     1     8   ddp  4   8  2   1  1   64      none   61.5    6.54   0.95   9.6%  60.9%
     2     4   ddp  4  16  2   1  1  128      none   43.8    6.56   0.92  10.4%  60.8%
     3    16 zero1  4   4  2   1  1   32      none   45.5    6.59   1.09   8.2%  60.5%

Exit status: 0 ok, 2 usage (an unknown model or GPU, a batch the layout cannot divide, a search
space above ``--max-layouts``, a model that fits in no layout: one line naming the smallest
layout and how far over memory it is); ``--debug`` adds the traceback.
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
from dataclasses import dataclass

PROG = "parallelism_planner.py"
MAX_COUNT = 10**7          # caps of counts (GPUs, nodes, batch, sequence, model sizes)
MAX_GBPS = 1e5             # no link carries 100 TB/s per GPU
SHARDINGS = ("ddp", "zero1", "fsdp", "hsdp")
MICRO_BATCHES = (1, 2, 4, 8)
# CP only where each rank keeps at least this many tokens of a sequence: shorter, its matmuls run
# well below MAMF (mamf_finder.py's sweeps start at 4096 rows for that reason), and a short
# sequence needs no CP for memory. Llama 3 used CP for its 128K-token stage only.
MIN_CP_TOKENS = 4096

# The GPUs --gpu offers: its row of the book's catalogue, data/compute/accelerators.yml (dense bf16
# peak, memory, scale-up bandwidth), and its device in the published mamf_finder.py results (MAMF,
# the best bf16 matmul rate measured). Both tables are built in below (ACCELERATOR_ROWS, MAMF_ROWS).
GPUS = {
    "a100-80gb": ("NVIDIA A100 SXM 80GB", "NVIDIA A100 SXM"),
    "h100-sxm": ("NVIDIA H100 SXM", "NVIDIA H100 SXM"),
    "b200": ("NVIDIA B200 (HGX)", "NVIDIA B200 SXM"),
    "gb200": ("NVIDIA GB200 (per GPU)", "NVIDIA GB200 SXM"),
    "mi300x": ("AMD MI300X", "AMD MI300X"),
    "mi355x": ("AMD MI355X", "AMD MI355X"),
}


def gpu_figures(key: str) -> dict:
    """GPU ``key`` (of GPUS): peak_tflops (dense bf16), mem_GB, scaleup_GBps (both directions) and
    mamf_tflops. Raises KeyError for a key or row that is not built in."""
    row, device = GPUS[key]
    spec = row_named(ACCELERATOR_ROWS, row)
    return {"peak_tflops": float(spec["bf16_dense"]), "mem_GB": spec["mem_GB"],
            "scaleup_GBps": spec["scaleup_GBps"],
            "mamf_tflops": row_named(MAMF_ROWS, device, key="device")["mean_tflops"]}


# Bus bandwidth a collective reaches, as a fraction of the link's rate per direction (the
# Network chapter's all-reduce measurements reach 75-85% of NVLink's); used for the defaults.
LINK_EFFICIENCY = 0.8


# ---------------------------------------------------------------------------------------------
# The model: what the planner needs of it, from an architecture (model_calculator's counting,
# shared) or from a GPT shape (Narayanan et al. 2021, Section 5.1).

def net_from_arch(a: dict, seq: int) -> dict:
    """The planner's view of model ``a`` (``architecture()``'s dict) at ``seq`` tokens: sizes,
    parameter counts and training FLOPs per token (model_calculator's ``count_params`` and
    ``arch_flops_per_token``: 6N plus the attention matmuls)."""
    counts = count_params(a)
    flops = arch_flops_per_token(a, seq)
    layers, h = a["num_hidden_layers"], a["hidden_size"]
    if a["mla"]:
        kv_values = a["num_attention_heads"] * (a["qk_nope_head_dim"] + a["qk_rope_head_dim"]
                                                 + a["v_head_dim"])
    else:
        kv_values = 2 * a["num_key_value_heads"] * a["head_dim"]
    moe_layers = layers - a["first_k_dense_replace"] if a["num_experts"] else 0
    # Activations of a gated MLP: three tensors of its width (a fused SwiGLU kernel keeps its
    # 2f-wide input, the down projection its f-wide input), where a GeLU MLP keeps two.
    dense_ffn = 1.5 * (a["intermediate_size"] or 0)
    moe_ffn = 1.5 * (a["num_experts_per_tok"] + a["n_shared_experts"]) * a["moe_intermediate_size"]
    body = counts["total"] - counts["embedding"] - counts["output"]
    return {"name": a["name"], "layers": layers, "hidden": h, "heads": a["num_attention_heads"],
            "vocab": a["vocab_size"], "kv_values": kv_values,
            "ffn_activations": max(dense_ffn if moe_layers < layers else 0, moe_ffn),
            "params": counts["total"], "expert_params": counts["experts"],
            "layer_params": body / layers, "experts": a["num_experts"],
            "top_k": a["num_experts_per_tok"], "moe_layers": moe_layers,
            "flops_per_token": flops["training"],
            "attention_flops_per_token": flops["training"] - flops["training_6n"]}


def net_from_gpt(layers: int, hidden: int, heads: int, vocab: int, seq: int, ffn: int | None,
                 name: str = "GPT") -> dict:
    """A GPT-3-style model (learned positions, tied embeddings, a plain MLP of width ``ffn``,
    default 4h): parameters 12Lh^2 + 13Lh + (V + s)h for ffn = 4h, FLOPs per token
    6(L(4h^2 + 2h*ffn) + Vh) + 12Lhs (Narayanan et al. 2021, Eq. 3 without recomputation)."""
    f = ffn or 4 * hidden
    layer = 4 * hidden * hidden + 2 * hidden * f + 9 * hidden + f
    matmul = layers * (4 * hidden * hidden + 2 * hidden * f) + vocab * hidden
    attention = 12 * layers * hidden * seq
    return {"name": name, "layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab,
            "kv_values": 2 * hidden, "ffn_activations": f,
            "params": layers * layer + (vocab + seq + 2) * hidden, "expert_params": 0,
            "layer_params": layer, "experts": 0, "top_k": 0, "moe_layers": 0,
            "flops_per_token": 6 * matmul + attention, "attention_flops_per_token": attention}


@dataclass(frozen=True)
class Cluster:
    """GPU (a key of GPUS), GPUs per node, nodes, bus bandwidth per GPU inside a node and
    between nodes (GB/s), the fraction of memory a layout may fill, precision recipe and
    optimizer (memory_estimator's)."""
    gpu: str
    gpus_per_node: int
    nodes: int
    intra_GBps: float
    inter_GBps: float
    mem_fraction: float = 0.9
    recipe: str = "mixed"
    optimizer: str = "adamw"

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Layout:
    """Degrees dp x tp x pp x cp = GPUs (ep divides dp*cp), the data-parallel sharding, the
    micro-batch size in sequences and the recomputation mode."""
    dp: int
    tp: int
    pp: int
    cp: int = 1
    ep: int = 1
    sharding: str = "ddp"
    micro_batch: int = 1
    recompute: str = "none"


# ---------------------------------------------------------------------------------------------
# 1. Enumerate

def _powers_of_two(limit: int) -> list[int]:
    return [2**i for i in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def degree_tuples(net: dict, cluster: Cluster, batch: int, seq: int, fixed: dict) -> list[tuple]:
    """The (dp, tp, pp, cp, ep) tuples to try: TP a power of 2 inside a node dividing the heads,
    CP a power of 2 with 2*cp dividing the sequence (zigzag chunks) and at least MIN_CP_TOKENS
    tokens per rank, PP any divisor of what
    remains up to the layers (the first stage takes ceil(L/pp) layers), dp dividing the batch,
    EP (MoE only) dividing the experts and dp*cp. ``fixed`` pins degrees by name."""
    n, out = cluster.gpus, []
    for tp in _powers_of_two(cluster.gpus_per_node):
        if net["heads"] % tp or fixed.get("tp", tp) != tp:
            continue
        for cp in _powers_of_two(min(64, n // tp)):
            if (cp > 1 and (seq % (2 * cp) or seq // cp < MIN_CP_TOKENS)) or fixed.get("cp", cp) != cp:
                continue
            rest = n // (tp * cp) if n % (tp * cp) == 0 else 0
            for pp in range(1, min(rest, net["layers"]) + 1):
                dp = rest // pp if rest % pp == 0 else 0
                if not dp or batch % dp or fixed.get("pp", pp) != pp or fixed.get("dp", dp) != dp:
                    continue
                eps = [e for e in range(1, net["experts"] + 1)
                       if net["experts"] % e == 0 and (dp * cp) % e == 0] if net["experts"] else [1]
                out += [(dp, tp, pp, cp, ep) for ep in eps if fixed.get("ep", ep) == ep]
    return out


def layouts_of(degrees: tuple, cluster: Cluster, batch: int) -> list[Layout]:
    """Every sharding, micro-batch and recomputation choice of one degree tuple."""
    dp, tp, pp, cp, ep = degrees
    out = []
    for sharding in SHARDINGS:
        if sharding == "hsdp" and not 1 < _hsdp_group(dp, tp, cp, cluster) < dp:
            continue
        if sharding != "ddp" and dp * cp == 1:
            continue
        for b in MICRO_BATCHES:
            if (batch // dp) % b == 0:
                out += [Layout(dp, tp, pp, cp, ep, sharding, b, r) for r in RECOMPUTE]
    return out


def _hsdp_group(dp: int, tp: int, cp: int, cluster: Cluster) -> int:
    """HSDP shards over the data-parallel ranks of one node (tp*cp ranks apart)."""
    group = max(1, cluster.gpus_per_node // (tp * cp))
    return group if dp % group == 0 else 1


# ---------------------------------------------------------------------------------------------
# 2. Memory per GPU (the first pipeline stage, which holds the most activations)

def memory(net: dict, cluster: Cluster, layout: Layout, batch: int, seq: int) -> dict:
    """Bytes per GPU: weights, gradients and optimizer states (``state_bytes_per_param``,
    divided by the ZeRO stage's shards), activations (``activation_bytes_per_layer`` with
    sequence parallelism when tp > 1 and attention that keeps no s x s scores, times the first
    stage's layers and its min(pp, micro-batches) in flight) and FSDP's two gathered layers."""
    L = layout
    per = state_bytes_per_param(cluster.recipe, cluster.optimizer)
    dense = (net["params"] - net["expert_params"]) / (L.tp * L.pp)
    experts = net["expert_params"] / (L.ep * L.tp * L.pp)
    stage = {"ddp": 0, "zero1": 1, "fsdp": 3, "hsdp": 3}[L.sharding]
    shards = _hsdp_group(L.dp, L.tp, L.cp, cluster) if L.sharding == "hsdp" else L.dp * L.cp
    expert_shards = max(1, shards // L.ep)
    states = {}
    for key, kind, from_stage in (("weights", "weights", 3), ("gradients", "gradients", 2),
                                  ("optimizer_states", "optimizer_states", 1)):
        split = stage >= from_stage
        states[key] = (dense * per[kind] / (shards if split else 1)
                       + experts * per[kind] / (expert_shards if split else 1))
    micro_batches = batch // (L.dp * L.micro_batch)
    layers = -(-net["layers"] // L.pp)
    per_layer = activation_bytes_per_layer(seq // L.cp, L.micro_batch, net["hidden"], net["heads"],
                                           L.tp, L.tp > 1, L.recompute, True,
                                           round(net["ffn_activations"]))
    activations = per_layer * layers * min(L.pp, micro_batches)
    if L.pp == 1:  # the output layer's input and fp32 logits (Korthikanti et al. 2022, 4.3)
        tokens = seq // L.cp * L.micro_batch
        activations += 4 * tokens * net["hidden"] / L.tp + 4 * tokens * net["vocab"] / L.tp
    gathered = 2 * net["layer_params"] / L.tp * per["weights"] if stage == 3 else 0.0
    total = math.fsum([*states.values(), activations, gathered])
    return {**states, "activations": activations, "gathered": gathered, "total": total}


# ---------------------------------------------------------------------------------------------
# 3. Step time

def _link(span: int, cluster: Cluster) -> float:
    """Bus bandwidth (bytes/s) of a group whose ranks span ``span`` consecutive GPUs."""
    return (cluster.intra_GBps if span <= cluster.gpus_per_node else cluster.inter_GBps) * 1e9


def step_time(net: dict, cluster: Cluster, layout: Layout, batch: int, seq: int) -> dict:
    """Seconds of one step and its parts. Rank order (fastest-varying first): tp, cp, dp
    (with ep inside it), pp, as in Megatron-LM; a group spanning more GPUs than a node uses the
    inter-node bandwidth. Per micro-batch and stage: compute (hardware FLOPs at MAMF; full
    recomputation runs the forward again, selective its attention), TP (with sequence
    parallelism 8 all-gathers/reduce-scatters of the b*s*h activations per layer, 12 with full
    recomputation), CP (a ring pass of K and V forward, twice backward), EP (4 all-to-alls of
    the top-k routed tokens per MoE layer), pipeline sends (forward and backward), FSDP gathers
    beyond the micro-batch's compute. The pipeline runs m + p - 1 slots; the gradient
    reduction (all-reduce, or reduce-scatter + all-gather for ZeRO-1, across nodes for HSDP)
    is exposed beyond the last backward."""
    L, gpu = layout, gpu_figures(cluster.gpu)
    m = batch // (L.dp * L.micro_batch)
    layers = -(-net["layers"] // L.pp)
    share = layers / net["layers"]           # the slowest stage's part of the model
    extra = {"none": 0.0, "selective": net["attention_flops_per_token"] / 3,
             "full": net["flops_per_token"] / 3}[L.recompute]
    hw_flops = net["flops_per_token"] + extra
    tokens_mb = L.micro_batch * seq                         # per micro-batch, whole sequences
    compute = hw_flops * tokens_mb * share / (L.tp * L.cp) / (gpu["mamf_tflops"] * 1e12)
    act = tokens_mb / L.cp * net["hidden"] * 2              # bf16 activations of one stage input
    full = L.recompute == "full"
    tp = (8 + 4 * full) * (L.tp - 1) / L.tp * act * layers / _link(L.tp, cluster) if L.tp > 1 else 0.0
    kv = tokens_mb / L.cp * net["kv_values"] * 2 / L.tp
    cp = (3 + full) * (L.cp - 1) * kv * layers / _link(L.tp * L.cp, cluster) if L.cp > 1 else 0.0
    moe_layers = math.ceil(net["moe_layers"] * share)
    routed = act / L.tp * net["top_k"] * (L.ep - 1) / L.ep
    ep = (4 + 2 * full) * routed * moe_layers / _link(L.tp * L.cp * L.ep, cluster) if L.ep > 1 else 0.0
    p2p = 2 * act / L.tp / _link(L.tp * L.cp * L.dp + 1, cluster) if L.pp > 1 else 0.0
    per = state_bytes_per_param(cluster.recipe, cluster.optimizer)
    dense = (net["params"] - net["expert_params"]) / (L.tp * L.pp)
    experts = net["expert_params"] / (L.ep * L.tp * L.pp)
    d, span = L.dp * L.cp, L.tp * L.cp * L.dp
    fsdp, dp = 0.0, 0.0
    if L.sharding in ("fsdp", "hsdp"):
        g = _hsdp_group(L.dp, L.tp, L.cp, cluster) if L.sharding == "hsdp" else d
        ge = max(1, g // L.ep)
        gather = 3 * ((g - 1) / g * dense + (ge - 1) / ge * experts) * per["weights"]
        fsdp = max(0.0, gather / _link(L.tp * L.cp * g, cluster) - compute)
        if L.sharding == "hsdp":
            r = L.dp // g
            dp = 2 * (r - 1) / r * (dense + experts) / g * per["gradients"] / _link(span, cluster)
    elif d > 1:
        moved = 2 * per["gradients"] if L.sharding == "ddp" else per["gradients"] + per["weights"]
        de = max(1, d // L.ep)
        dp = ((d - 1) / d * dense + (de - 1) / de * experts) * moved / _link(span, cluster)
    dp_exposed = max(0.0, dp - 2 / 3 * compute)
    slot = compute + tp + cp + ep + p2p + fsdp
    total = (m + L.pp - 1) * slot + dp_exposed
    model_flops = net["flops_per_token"] * batch * seq
    peak = cluster.gpus * gpu["peak_tflops"] * 1e12
    return {"step_s": total, "micro_batches": m, "compute_s": m * compute,
            "bubble_s": (L.pp - 1) * slot, "tp_s": m * tp, "cp_s": m * cp, "ep_s": m * ep,
            "pp_s": m * p2p, "fsdp_s": m * fsdp, "dp_s": dp_exposed,
            "mfu": model_flops / (total * peak),
            "hfu": hw_flops * batch * seq / (total * peak)}


# ---------------------------------------------------------------------------------------------
# 4. Rank

def usable_bytes(cluster: Cluster) -> float:
    """The memory a layout may fill: --mem-fraction of the GPU's (the rest is for the CUDA
    context, NCCL's buffers and the allocator's fragmentation, which the formulas leave out)."""
    return gpu_figures(cluster.gpu)["mem_GB"] * 1e9 * cluster.mem_fraction


def evaluate(net: dict, cluster: Cluster, layout: Layout, batch: int, seq: int) -> dict:
    """Memory and step time of one layout, and whether it fits."""
    mem = memory(net, cluster, layout, batch, seq)
    usable = usable_bytes(cluster)
    return {"layout": layout, "memory": mem, "fits": mem["total"] <= usable, "usable_bytes": usable,
            **step_time(net, cluster, layout, batch, seq)}


def plan(net: dict, cluster: Cluster, batch: int, seq: int, fixed: dict | None = None,
         max_layouts: int = 200_000) -> dict:
    """Every degree tuple's fastest fitting layout, fastest first (``ranked``), and the layout
    with the least memory (``smallest``) for the message when nothing fits. Raises ValueError
    when the search space exceeds ``max_layouts`` or no degree tuple divides the batch."""
    tuples = degree_tuples(net, cluster, batch, seq, fixed or {})
    if not tuples:
        raise ValueError(f"no layout of {cluster.gpus} GPUs divides the global batch {batch} "
                         f"and the model's {net['layers']} layers and {net['heads']} heads")
    candidates = {t: layouts_of(t, cluster, batch) for t in tuples}
    count = sum(len(v) for v in candidates.values())
    if count > max_layouts:
        raise ValueError(f"{count:,} layouts to try, above --max-layouts {max_layouts:,}: "
                         "pin a degree (--tp, --pp, --cp, --ep)")
    ranked, smallest = [], None
    usable = usable_bytes(cluster)
    for layouts in candidates.values():
        best = None
        for layout in layouts:
            mem = memory(net, cluster, layout, batch, seq)
            if smallest is None or mem["total"] < smallest["memory"]["total"]:
                smallest = {"layout": layout, "memory": mem, "usable_bytes": usable}
            if mem["total"] > usable:
                continue  # the step time of a layout that does not fit is never needed
            r = {"layout": layout, "memory": mem, "fits": True, "usable_bytes": usable,
                 **step_time(net, cluster, layout, batch, seq)}
            if best is None or r["step_s"] < best["step_s"]:
                best = r
        if best:
            ranked.append(best)
    ranked.sort(key=lambda r: (r["step_s"], astuple(r["layout"])))
    return {"ranked": ranked, "smallest": smallest, "layouts_tried": count}


def astuple(layout: Layout) -> tuple:
    return (layout.dp, layout.tp, layout.pp, layout.cp, layout.ep, layout.sharding,
            layout.micro_batch, layout.recompute)


def describe(layout: Layout) -> str:
    return (f"dp {layout.dp} ({layout.sharding}) x tp {layout.tp} x pp {layout.pp} x cp {layout.cp}"
            + (f" x ep {layout.ep}" if layout.ep > 1 else "")
            + f", micro-batch {layout.micro_batch}, recompute {layout.recompute}")


# ---------------------------------------------------------------------------------------------
# Report and command line

def report(net: dict, cluster: Cluster, result: dict, batch: int, seq: int, top: int) -> str:
    gpu = gpu_figures(cluster.gpu)
    lines = [f"# {PROG}: {net['name']}, {net['params'] / 1e9:.1f} B parameters, batch {batch} x "
             f"{seq} tokens",
             f"# {cluster.nodes} x {cluster.gpus_per_node} {cluster.gpu}: MAMF {gpu['mamf_tflops']:g} of "
             f"{gpu['peak_tflops']:g} TFLOPS; bus GB/s per GPU {cluster.intra_GBps:g} in a node, "
             f"{cluster.inter_GBps:g} between",
             f"# {len(result['ranked'])} degree tuples of {result['layouts_tried']:,} layouts fit in "
             f"{cluster.mem_fraction:.0%} of {gpu['mem_GB']} GB; step s = compute + comm + bubble",
             f"{'#':>2} {'dp':>5} {'shard':>5} {'tp':>2} {'pp':>3} {'cp':>2} {'ep':>3} {'mb':>2} "
             f"{'m':>4} {'recomp':>9} {'mem GB':>6} {'step s':>7} {'comm s':>6} {'bubble':>6} "
             f"{'MFU':>6}"]
    for i, r in enumerate(result["ranked"][:top], 1):
        L = r["layout"]
        comm = math.fsum([r["tp_s"], r["cp_s"], r["ep_s"], r["pp_s"], r["fsdp_s"], r["dp_s"]])
        lines.append(f"{i:>2} {L.dp:>5} {L.sharding:>5} {L.tp:>2} {L.pp:>3} {L.cp:>2} {L.ep:>3} "
                     f"{L.micro_batch:>2} {r['micro_batches']:>4} {L.recompute:>9} "
                     f"{r['memory']['total'] / 1e9:>6.1f} {r['step_s']:>7.2f} {comm:>6.2f} "
                     f"{r['bubble_s'] / r['step_s']:>6.1%} {r['mfu']:>6.1%}")
    return "\n".join(lines)


def json_row(r: dict) -> dict:
    L = r["layout"]
    return {"dp": L.dp, "tp": L.tp, "pp": L.pp, "cp": L.cp, "ep": L.ep, "sharding": L.sharding,
            "micro_batch": L.micro_batch, "recompute": L.recompute,
            "micro_batches": r["micro_batches"], "memory_bytes": r["memory"]["total"],
            "step_s": r["step_s"], "compute_s": r["compute_s"], "bubble_s": r["bubble_s"],
            "tp_s": r["tp_s"], "cp_s": r["cp_s"], "ep_s": r["ep_s"], "pp_s": r["pp_s"],
            "fsdp_s": r["fsdp_s"], "dp_s": r["dp_s"], "mfu": r["mfu"], "hfu": r["hfu"]}


def build_parser() -> argparse.ArgumentParser:
    count = number(int, 1, MAX_COUNT)
    p = argparse.ArgumentParser(
        prog=PROG, description="Rank data/tensor/pipeline/context/expert-parallel layouts of a "
        "transformer's training by estimated step time, after a memory check.")
    m = p.add_argument_group("model (one of --model, --config, or --layers/--hidden/--heads/--vocab)")
    m.add_argument("--model", type=nonempty, metavar="NAME",
                   help="a model of the data file (see --list)")
    m.add_argument("--config", type=nonempty, metavar="PATH", help="a Hugging Face config.json")
    m.add_argument("--data", type=nonempty, metavar="PATH",
                   help="a data file in the format of data/models/architectures.yml (default: "
                   "the copy built into this script)")
    m.add_argument("--list", action="store_true", help="list the data file's models and exit")
    m.add_argument("--layers", type=count, help="GPT shape: layers")
    m.add_argument("--hidden", type=count, help="GPT shape: hidden size")
    m.add_argument("--heads", type=count, help="GPT shape: attention heads")
    m.add_argument("--vocab", type=count, help="GPT shape: vocabulary")
    m.add_argument("--ffn-hidden", type=count, help="GPT shape: MLP width (default 4 x hidden)")
    c = p.add_argument_group("cluster")
    c.add_argument("--gpu", choices=sorted(GPUS), default="h100-sxm", help="default h100-sxm")
    c.add_argument("--gpus-per-node", type=number(int, 1, 1024), default=8, help="default 8")
    c.add_argument("--nodes", type=count, default=1, help="default 1")
    c.add_argument("--intra-GBps", type=number(float, 0, MAX_GBPS, lo_open=True),
                   help="bus bandwidth per GPU inside a node (default: 80%% of the GPU's "
                   "scale-up bandwidth per direction)")
    c.add_argument("--inter-GBps", type=number(float, 0, MAX_GBPS, lo_open=True), default=40.0,
                   help="bus bandwidth per GPU between nodes (default 40: 80%% of a 400 Gb/s NIC)")
    c.add_argument("--mem-fraction", type=number(float, 0, 1, lo_open=True), default=0.9,
                   help="fraction of the GPU's memory a layout may fill (default 0.9)")
    t = p.add_argument_group("training")
    t.add_argument("--global-batch", type=count, help="sequences per step (required)")
    t.add_argument("--seq", type=count, help="sequence length in tokens (required)")
    t.add_argument("--recipe", choices=sorted(RECIPES), default="mixed",
                   help="precision recipe (memory_estimator.py's; default mixed, 16 B/param)")
    t.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw")
    for axis in ("dp", "tp", "pp", "cp", "ep"):
        t.add_argument(f"--{axis}", type=count, help=f"try only this {axis.upper()} degree")
    p.add_argument("--top", type=number(int, 1, 1000), default=5, help="layouts to print (default 5)")
    p.add_argument("--max-layouts", type=number(int, 1, 10**7), default=200_000,
                   help="refuse a search space above this many layouts (default 200000)")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the results as JSON ('-': print)")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    shape = [k for k in ("layers", "hidden", "heads", "vocab") if getattr(args, k) is not None]
    chosen = [o for o, on in (("--model", args.model), ("--config", args.config),
                              ("--list", args.list), ("--layers/--hidden/--heads/--vocab", shape)) if on]
    if len(chosen) != 1:
        parser.error("give one of --model NAME, --config PATH, --list or --layers/--hidden/"
                     "--heads/--vocab" + (f" (got {' and '.join(chosen)})" if chosen else ""))
    if not args.list and (args.global_batch is None or args.seq is None):
        parser.error("give --global-batch and --seq")
    if shape and len(shape) < 4:
        parser.error("a GPT shape needs all of --layers, --hidden, --heads and --vocab")
    if args.ffn_hidden and not shape:
        parser.error("--ffn-hidden is for a GPT shape (--layers ...)")
    if shape and args.hidden % args.heads:
        parser.error(f"--heads ({args.heads}) must divide --hidden ({args.hidden})")
    if args.config and args.data:
        parser.error("--data is for --model and --list; --config reads its own file")
    if args.nodes * args.gpus_per_node > MAX_COUNT:
        parser.error(f"--nodes x --gpus-per-node is above {MAX_COUNT:,} GPUs")
    if args.intra_GBps is None:
        args.intra_GBps = LINK_EFFICIENCY * gpu_figures(args.gpu)["scaleup_GBps"] / 2
    if args.json and args.json != "-":
        check_output(args.json, "--json", [q for q in (args.config, args.data) if q])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.layers:
        net = net_from_gpt(args.layers, args.hidden, args.heads, args.vocab, args.seq,
                           args.ffn_hidden)
    else:
        if args.model is None and not args.config:
            args.model = "all"
        models = select_models(args)
        if args.list:
            for a in models:
                print(f"{a['name']:<16} {a['model_type']:<12} {a.get('kind', '')}")
            return 0
        net = net_from_arch(models[0], args.seq)
    cluster = Cluster(args.gpu, args.gpus_per_node, args.nodes, args.intra_GBps, args.inter_GBps,
                      args.mem_fraction, args.recipe, args.optimizer)
    fixed = {k: getattr(args, k) for k in ("dp", "tp", "pp", "cp", "ep") if getattr(args, k)}
    try:
        result = plan(net, cluster, args.global_batch, args.seq, fixed, args.max_layouts)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    if not result["ranked"]:
        s = result["smallest"]
        over = s["memory"]["total"] - s["usable_bytes"]
        raise ScriptError(f"{net['name']} fits in no layout of {cluster.gpus} {cluster.gpu} GPUs: "
                          f"the smallest, {describe(s['layout'])}, needs "
                          f"{s['memory']['total'] / 1e9:.1f} GB per GPU, {over / 1e9:.1f} GB "
                          f"({over / s['usable_bytes']:.0%}) over the {s['usable_bytes'] / 1e9:.1f} GB "
                          "usable", EXIT_USAGE)
    print(report(net, cluster, result, args.global_batch, args.seq, args.top))
    if args.json:
        doc = {"tool": "parallelism_planner", "schema_version": 1,
               "units": {"memory": "bytes", "time": "s"},
               "inputs": {"model": net["name"], "params": net["params"],
                          "cluster": {k: getattr(cluster, k) for k in Cluster.__dataclass_fields__},
                          "global_batch": args.global_batch, "seq": args.seq, "fixed": fixed},
               "layouts_tried": result["layouts_tried"],
               "results": [json_row(r) for r in result["ranked"][:args.top]]}
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
        else:
            write_atomic(args.json, text + "\n")
    return 0


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


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


def parse_json(data: bytes, option: str, path: str):
    """``data`` parsed as JSON; ScriptError (usage) naming the option and the path when it is not
    UTF-8, not JSON, nested too deep, or holds a number Python refuses (over 4300 digits)."""
    import json
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptError(f"{option} {path}: not UTF-8 text", EXIT_USAGE) from None
    except RecursionError:
        raise ScriptError(f"{option} {path}: nested too deeply to be JSON data", EXIT_USAGE) from None
    except ValueError as err:  # json.JSONDecodeError, and int() of a 5,000-digit number
        raise ScriptError(f"{option} {path}: not valid JSON ({str(err).splitlines()[0]})", EXIT_USAGE) from None


# The families whose parameters model_calculator counts (their biases, norms and experts differ);
# the KV cache needs only the attention's shape, so kv_cache_calculator reads any family.
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "olmo2",
            "olmoe", "deepseek_v2", "deepseek_v3")


MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")  # multi-head latent attention, whatever else the config says


QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "olmo2": "full", "olmoe": "full"}


NORMS_PER_LAYER = {"gemma2": 4}  # every other family: one before attention, one before the MLP


# Sliding windows without layer_types: every p-th layer (1-based) is global, the others slide
# (Gemma 2 and 3; sliding_window_pattern, else this default), or every layer slides (these).
SLIDING_PATTERN = {"gemma2": 2}


ALL_LAYERS_SLIDE = ("mistral", "mixtral")


MAX_SIZE = 2**31 - 1  # config.json sizes are int32 in every framework that reads them


# Fields of a data-file row beside the config.json ones: (key, the type it must have, in words).
ROW_LABELS = (("kind", str, "a string"), ("attention", str, "a string"),
              ("published_total", str, "a count as printed, such as '6.74B'"),
              ("published_active", str, "a count as printed, such as '6.74B', or '—'"),
              ("published_active_excludes_input_embedding", bool, "true or false"))


def _shown(value) -> str:
    """``value`` for an error line, cut short when long (a hostile file may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _int(config: dict, key: str, where: str, default=None, lo: int = 1) -> int | None:
    value = config.get(key)
    if value is None:  # absent, or null: transformers then uses the default too
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_SIZE:
        raise ValueError(f"{where}: {key} must be an integer >= {lo}"
                         + (f" and <= {MAX_SIZE}" if isinstance(value, int) and value > MAX_SIZE else "")
                         + f", got {_shown(value)}")
    return value


def _bool(config: dict, key: str, where: str, default: bool | None) -> bool | None:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {key} must be true or false, got {_shown(value)}")
    return value


def architecture(config: dict, name: str | None = None, where: str = "config",
                 counts: bool = True) -> dict:
    """The model ``config`` describes (a parsed Hugging Face config.json, a multimodal one's
    ``text_config``, or a row of data/models/architectures.yml), each family's spelling mapped
    onto one: a dict of sizes (ints: counts of layers, heads or values, never bytes):

    name, model_type          ``name``, else the config's name or _name_or_path, else model_type
    num_hidden_layers, num_attention_heads, hidden_size, vocab_size (None when absent)
    num_key_value_heads, head_dim    per-head keys and values; None with ``mla``
    mla                       multi-head latent attention (DeepSeek-V2/V3, or a kv_lora_rank):
                              kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim,
                              q_lora_rank (None: a full q projection)
    values_per_layer          values one token adds to one layer's KV cache: 2 x
                              num_key_value_heads x head_dim, or kv_lora_rank + qk_rope_head_dim
    sliding_window, sliding_layers   a window in tokens (or None) and how many layers keep it

    With ``counts`` (model_calculator: parameters and FLOPs) the family must be one of
    FAMILIES, hidden_size, vocab_size and MLA's four sizes are required, and the dict also
    holds tie_word_embeddings, qkv_bias, attention_bias, mlp_bias, qk_norm, norms_per_layer,
    intermediate_size and the experts' num_experts (num_local_experts, n_routed_experts),
    num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace and
    router_bias (zeros for a dense model). Without (kv_cache_calculator: the cache alone) any
    family is read and only the attention's shape is required.

    Keys, spellings and defaults (a key absent or null takes transformers' default) are those of
    Hugging Face transformers' configuration_<model_type>.py; the formulas that use them, and
    their sources: book/en/models/architecture.md and book/en/inference/kv-cache.md.

    Raises ValueError naming ``where`` and the key for an unknown family (with ``counts``), a
    missing or non-integer size (or one above 2^31 - 1), sizes that do not fit together, a
    window whose layers the config does not say, or what the calculators cannot count."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    if "text_config" in config and "num_hidden_layers" not in config:
        config = config["text_config"]  # a multimodal wrapper: the language model's part
        if not isinstance(config, dict):
            raise ValueError(f"{where}: text_config is not a JSON object")
    family = config.get("model_type")
    if counts and (not isinstance(family, str) or family not in FAMILIES):
        raise ValueError(f"{where}: model_type {_shown(family)} is not one the calculator knows "
                         f"({', '.join(FAMILIES)})")
    label = name or config.get("name") or config.get("_name_or_path")
    arch = {"name": label if isinstance(label, str) and label.strip() else str(family),
            "model_type": family}
    use_window = _bool(config, "use_sliding_window", where, None)
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size") if counts \
        else ("num_hidden_layers", "num_attention_heads")
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        arch[key] = _int(config, key, where)
        if arch[key] is None and key in required:
            raise ValueError(f"{where}: {key} is missing")
    family = family if isinstance(family, str) else ""  # for the tables below
    _attention_fields(config, arch, family, where, counts)
    _window_fields(config, arch, family, use_window, where)
    if counts:
        _count_fields(config, arch, family, where)
    return arch


def _attention_fields(config: dict, arch: dict, family: str, where: str, counts: bool) -> None:
    """The keys and values a token adds to the cache, into ``arch``: per head (MHA, MQA, GQA) or
    a latent (MLA, whose ranks and head sizes ``counts`` needs all of)."""
    heads, hidden = arch["num_attention_heads"], arch["hidden_size"]
    kv_heads = _int(config, "num_key_value_heads", where, heads)
    head_dim = _int(config, "head_dim", where)
    arch["mla"] = family in MLA_FAMILIES or config.get("kv_lora_rank") is not None
    if arch["mla"]:
        needed = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if counts \
            else ("kv_lora_rank", "qk_rope_head_dim")
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank"):
            arch[key] = _int(config, key, where)
            if arch[key] is None and key in needed:
                raise ValueError(f"{where}: {key} is missing (multi-head latent attention)")
        arch.update(num_key_value_heads=None, head_dim=None,
                    values_per_layer=arch["kv_lora_rank"] + arch["qk_rope_head_dim"])
        return
    if head_dim is None:
        if hidden is None:
            raise ValueError(f"{where}: hidden_size is missing (and there is no head_dim)")
        if hidden % heads:
            raise ValueError(f"{where}: hidden_size {hidden} is not a multiple of "
                             f"num_attention_heads {heads} and there is no head_dim")
        head_dim = hidden // heads
    if heads % kv_heads:
        raise ValueError(f"{where}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv_heads}")
    arch.update(num_key_value_heads=kv_heads, head_dim=head_dim, values_per_layer=2 * kv_heads * head_dim)


def _window_fields(config: dict, arch: dict, family: str, use_window: bool | None, where: str) -> None:
    """Sliding windows: which layers keep only the last ``sliding_window`` tokens, into ``arch``
    (``sliding_window``, ``sliding_layers``). ``use_sliding_window: false`` turns the window off
    (Qwen2's configs give one anyway); with max_window_layers it applies to some layers only,
    which is not supported."""
    if use_window and config.get("max_window_layers") is not None:
        raise ValueError(f"{where}: use_sliding_window with max_window_layers is not supported")
    window = None if use_window is False else config.get("sliding_window")
    arch["sliding_window"] = _int({"sliding_window": window}, "sliding_window", where)
    arch["sliding_layers"] = 0
    if not arch["sliding_window"]:
        return
    layers = arch["num_hidden_layers"]
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise ValueError(f"{where}: layer_types must list one string per layer "
                             f"({layers}), got {_shown(types)}")
        arch["sliding_layers"] = sum(t == "sliding_attention" for t in types)
        return
    pattern = _int(config, "sliding_window_pattern", where, SLIDING_PATTERN.get(family))
    if pattern:  # every pattern-th layer (1-based) is global, the others slide
        arch["sliding_layers"] = layers - layers // pattern
    elif family in ALL_LAYERS_SLIDE:
        arch["sliding_layers"] = layers
    else:
        raise ValueError(f"{where}: sliding_window {arch['sliding_window']} without layer_types or "
                         f"sliding_window_pattern: which layers slide is not known for model_type "
                         f"{config.get('model_type')!r}")


def _count_fields(config: dict, arch: dict, family: str, where: str) -> None:
    """What the parameter count needs beyond the attention's shape, into ``arch``: tied
    embeddings, biases, norms, the dense MLP's width and the experts."""
    arch["tie_word_embeddings"] = _bool(config, "tie_word_embeddings", where, family == "gemma2")
    # Biases: Qwen2 hard-codes them on q, k, v; others may set attention_bias (q, k, v and o).
    arch["qkv_bias"] = _bool(config, "qkv_bias", where, family == "qwen2")
    arch["attention_bias"] = _bool(config, "attention_bias", where, False) and family != "qwen2"
    if arch["mla"] and (arch["qkv_bias"] or arch["attention_bias"]):
        raise ValueError(f"{where}: attention biases with multi-head latent attention are not supported")
    # Llama's mlp_bias: biases on the dense MLP's gate, up and down projections.
    arch["mlp_bias"] = _bool(config, "mlp_bias", where, False)
    arch["qk_norm"] = QK_NORM.get(family)
    arch["norms_per_layer"] = NORMS_PER_LAYER.get(family, 2)
    _moe_fields(config, arch, where)
    arch["intermediate_size"] = _int(config, "intermediate_size", where)
    if arch["first_k_dense_replace"] and arch["intermediate_size"] is None:
        raise ValueError(f"{where}: intermediate_size is missing")


def _moe_fields(config: dict, arch: dict, where: str) -> None:
    """Mixture of experts: the number of experts (whichever the family calls it), the experts per
    token, their width, the shared experts and the dense layers before the first MoE layer, into
    ``arch``; zeros for a dense model. Raises ValueError for what the calculator cannot count."""
    spelling = next((k for k in ("num_experts", "num_local_experts", "n_routed_experts")
                     if config.get(k)), "num_experts")
    arch["num_experts"] = _int(config, spelling, where) if config.get(spelling) else 0
    if not arch["num_experts"]:
        arch.update(num_experts_per_tok=0, moe_intermediate_size=0, n_shared_experts=0,
                    first_k_dense_replace=arch["num_hidden_layers"], router_bias=False)
        return
    arch["num_experts_per_tok"] = _int(config, "num_experts_per_tok", where)
    if arch["num_experts_per_tok"] is None or arch["num_experts_per_tok"] > arch["num_experts"]:
        raise ValueError(f"{where}: num_experts_per_tok must be between 1 and num_experts "
                         f"({arch['num_experts']}), got {config.get('num_experts_per_tok')!r}")
    spelling = "moe_intermediate_size" if config.get("moe_intermediate_size") else "intermediate_size"
    arch["moe_intermediate_size"] = _int(config, spelling, where)
    if arch["moe_intermediate_size"] is None:
        raise ValueError(f"{where}: moe_intermediate_size is missing")
    arch["n_shared_experts"] = _int(config, "n_shared_experts", where, 0, lo=0)
    arch["first_k_dense_replace"] = _int(config, "first_k_dense_replace", where, 0, lo=0)
    if arch["first_k_dense_replace"] >= arch["num_hidden_layers"]:
        raise ValueError(f"{where}: first_k_dense_replace {arch['first_k_dense_replace']} "
                         f"leaves no MoE layer in {arch['num_hidden_layers']}")
    for key, plain in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if config.get(key, plain) != plain:
            raise ValueError(f"{where}: {key} = {_shown(config[key])} (MoE only in some layers) "
                             "is not supported")
    if config.get("mlp_only_layers"):
        raise ValueError(f"{where}: mlp_only_layers is not supported")
    if arch["mlp_bias"]:
        raise ValueError(f"{where}: mlp_bias with experts is not supported")
    if config.get("shared_expert_intermediate_size"):
        raise ValueError(f"{where}: shared_expert_intermediate_size (Qwen2-MoE's gated "
                         "shared expert) is not supported")
    # DeepSeek-V3's auxiliary-loss-free balancing keeps a learnt bias per expert.
    arch["router_bias"] = config.get("topk_method") == "noaux_tc"
    if not isinstance(config.get("topk_method", ""), str):
        raise ValueError(f"{where}: topk_method must be a string, got {_shown(config['topk_method'])}")


def tokens_per_layer(arch: dict, context: int) -> list[int]:
    """The tokens each layer of ``arch`` attends to (and caches) in a sequence of ``context``
    tokens: the sliding layers at most their window."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    window = min(context, arch["sliding_window"] or context)
    sliding = arch["sliding_layers"]
    return [window] * sliding + [context] * (arch["num_hidden_layers"] - sliding)


def _layer_attention(a: dict) -> tuple[int, int]:
    """(weights and biases, norm weights) of one layer's attention block."""
    h, heads, kv, d = a["hidden_size"], a["num_attention_heads"], a["num_key_value_heads"], a["head_dim"]
    if a["mla"]:
        qk = a["qk_nope_head_dim"] + a["qk_rope_head_dim"]
        if a["q_lora_rank"]:
            q = h * a["q_lora_rank"] + a["q_lora_rank"] * heads * qk
            norms = a["q_lora_rank"]  # q_a_layernorm
        else:
            q, norms = h * heads * qk, 0
        kv_down = h * (a["kv_lora_rank"] + a["qk_rope_head_dim"])
        kv_up = a["kv_lora_rank"] * heads * (a["qk_nope_head_dim"] + a["v_head_dim"])
        out = heads * a["v_head_dim"] * h
        return q + kv_down + kv_up + out, norms + a["kv_lora_rank"]  # + kv_a_layernorm
    weights = h * heads * d + 2 * h * kv * d + heads * d * h
    if a["qkv_bias"] or a["attention_bias"]:
        weights += heads * d + 2 * kv * d + (h if a["attention_bias"] else 0)
    norms = {"head": 2 * d, "full": heads * d + kv * d, None: 0}[a["qk_norm"]]
    return weights, norms


def _attention_widths(a: dict) -> tuple[int, int]:
    """(query/key width, value width) summed over the heads: the sizes of the two attention
    matmuls of one token."""
    heads = a["num_attention_heads"]
    if a["mla"]:
        return heads * (a["qk_nope_head_dim"] + a["qk_rope_head_dim"]), heads * a["v_head_dim"]
    return heads * a["head_dim"], heads * a["head_dim"]


def count_params(a: dict) -> dict:
    """Parameters of model ``a`` (from ``architecture``) by component, as ints: embedding,
    output, attention, mlp, experts, shared_experts, router, norms, total, active,
    active_without_input_embedding and matmul_active (book/en/models/architecture.md)."""
    h, layers = a["hidden_size"], a["num_hidden_layers"]
    attention, qk_norms = _layer_attention(a)
    dense = a["first_k_dense_replace"]
    moe = layers - dense
    mlp = dense * 3 * h * (a["intermediate_size"] or 0)
    mlp_biases = dense * (2 * (a["intermediate_size"] or 0) + h) if a.get("mlp_bias") else 0
    mlp += mlp_biases
    one_expert = 3 * h * a["moe_intermediate_size"]
    experts = moe * a["num_experts"] * one_expert
    shared = moe * a["n_shared_experts"] * one_expert
    router = moe * (h * a["num_experts"] + (a["num_experts"] if a["router_bias"] else 0))
    embedding = a["vocab_size"] * h
    output = 0 if a["tie_word_embeddings"] else embedding
    norms = layers * (a["norms_per_layer"] * h + qk_norms) + h  # + the final norm
    counts = {"embedding": embedding, "output": output, "attention": layers * attention,
              "mlp": mlp, "experts": experts, "shared_experts": shared, "router": router,
              "norms": norms}
    counts["total"] = sum(counts.values())
    unused = moe * (a["num_experts"] - a["num_experts_per_tok"]) * one_expert
    counts["active"] = counts["total"] - unused
    counts["active_without_input_embedding"] = counts["active"] - embedding
    biases = 0
    if a["qkv_bias"] or a["attention_bias"]:
        d, heads, kv = a["head_dim"], a["num_attention_heads"], a["num_key_value_heads"]
        biases = layers * (heads * d + 2 * kv * d + (h if a["attention_bias"] else 0))
    counts["matmul_active"] = (counts["attention"] - biases + mlp - mlp_biases + experts - unused + shared
                               + moe * h * a["num_experts"] + embedding)  # output projection
    return counts


def arch_flops_per_token(a: dict, context: int) -> dict:
    """FLOPs per token of model ``a`` for a sequence (or cache) of ``context`` tokens:
    ``training`` (6N plus the attention matmuls forward and backward over the full T x T
    matrix), ``training_6n`` (6N alone), ``forward`` (one generated token attending to
    ``context`` cached tokens), ``matmul_params`` (N). Formulas: book/en/models/architecture.md."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    n = count_params(a)["matmul_active"]
    qk, v = _attention_widths(a)
    attended = sum(tokens_per_layer(a, context))
    return {"matmul_params": n, "training_6n": 6 * n,
            "training": 6 * n + 6 * (qk + v) * attended,
            "forward": 2 * n + 2 * (qk + v) * attended}


def parse_count(text: str) -> float:
    """A parameter count as printed: ``70.6B``, ``405b``, ``7.24e9``, ``850M``. Raises
    ValueError for anything else, for a non-finite value or for one not above 0."""
    import re
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not match:
        raise ValueError(f"not a parameter count: {text!r} (give e.g. 70.6B or 7.24e9)")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9,
                                      "t": 1e12}[match.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"not a parameter count: {text!r} (must be finite and > 0)")
    return value


def models_from_rows(rows, where: str, counts: bool = True) -> list[dict]:
    """The models of a data file's ``rows`` (data/models/architectures.yml's format), each
    ``architecture`` with the row's labels kept (``kind``, ``attention``, ``published_total``,
    ``published_active``, ``source``, ...) and ``params``, the published total as a number.
    Raises ValueError naming ``where``, the row and the field for a malformed row (a name that
    is not a string, a missing or non-integer size, a published count that is a number, inf,
    nan or no count, ...)."""
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}: no 'rows' list")
    models = []
    for number, row in enumerate(rows, 1):
        label = f"{where}: row {number}"
        if not isinstance(row, dict) or row.get("name") is None:
            raise ValueError(f"{label}: needs a name")
        name = row["name"]
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{label}: name must be a non-empty string, got {_shown(name)}")
        label = f"{label} ({name})"
        for key, kind, words in ROW_LABELS:
            if key in row and not isinstance(row[key], kind):
                raise ValueError(f"{label}: {key} must be {words}, got {_shown(row[key])}")
        arch = architecture(row, name, label, counts)
        arch.update({k: row[k] for k in [k for k, _, _ in ROW_LABELS] + ["source"] if k in row})
        if "published_total" in row:
            try:
                arch["params"] = parse_count(row["published_total"])
            except ValueError:
                raise ValueError(f"{label}: published_total must be {ROW_LABELS[2][2]}, got "
                                 f"{_shown(row['published_total'])}") from None
        models.append(arch)
    return models


def load_models(path: str, option: str = "--data", counts: bool = True) -> list[dict]:
    """The models of the data file ``path`` (``parse_models``), read bounded (``read_input``: a
    regular file or a pipe, at most 64 MiB, never /dev/zero or a FIFO without a writer). Raises
    ScriptError (usage) naming ``option`` and the file when it cannot be read, ValueError naming
    the file (the row and the field) when it is not UTF-8, JSON or YAML, or malformed."""
    try:
        raw = read_input(path, option)
    except ScriptError as err:
        why = str(err).removeprefix(f"{option} {path}: ")
        raise ScriptError(f"{option} {path}: cannot read it ({why})", EXIT_USAGE) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_models(text, path, counts)


def parse_models(text: str, where: str = "architectures.yml", counts: bool = True) -> list[dict]:
    """The models of a data file's ``text`` (``models_from_rows``): YAML (needs PyYAML), or the
    same data as JSON (what the book's calculator pages hold). Raises ValueError naming ``where``
    (the row and the field) when it is neither, or malformed."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a data file") from None
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # JSON, but int() of a 5,000-digit number
            raise ValueError(f"{where}: not valid JSON ({str(err).splitlines()[0]})") from None
        data = _yaml(text, where)
    return models_from_rows(data.get("rows") if isinstance(data, dict) else None, where, counts)


def _yaml(text: str, path: str):
    try:
        import yaml
    except ImportError:
        raise ValueError(f"{path}: reading a YAML data file needs PyYAML (pip install pyyaml); "
                         "or give it as JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a data file") from None
    except ValueError as err:  # int() of a 5,000-digit number
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None


def read_config(path: str) -> dict:
    """The parsed config.json at ``path``; ScriptError (usage) naming the file otherwise."""
    return parse_json(read_input(path, "--config"), "--config", path)


def _model_key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def select_models(args, counts: bool = True) -> list[dict]:
    """The models a calculator's command line asks for (``architecture``): ``--config``'s, or
    ``--model``'s (a name, in any case and spacing, or "all") or ``--list``'s, from ``--data``
    when given, else from MODEL_ROWS, the copy of data/models/architectures.yml built into the
    script. Raises ScriptError (usage) naming the option, the file, the row and the field."""
    if args.config:
        config = read_config(args.config)
        try:
            return [architecture(config, where=f"--config {args.config}", counts=counts)]
        except ValueError as err:
            raise ScriptError(str(err), EXIT_USAGE) from None
    where = args.data or "the built-in copy of data/models/architectures.yml"
    try:
        models = load_models(args.data, counts=counts) if args.data else \
            models_from_rows(MODEL_ROWS, where, counts)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    if args.list or _model_key(args.model) == "all":
        return models
    wanted = [m for m in models if _model_key(m["name"]) == _model_key(args.model)]
    if not wanted:
        raise ScriptError(f"--model {args.model!r}: not in {where} (see --list)", EXIT_USAGE)
    return wanted


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter of each model-state tensor in a precision recipe.

    ``weights``/``grads``: the model's parameters and the gradients backward writes into;
    ``main_grads``: a separate fp32 gradient copy the optimizer reads (0 if none);
    ``master``: fp32 master weights (0 if the optimizer updates ``weights`` directly);
    ``state``: bytes of each optimizer statistic (Adam has two) unless the optimizer fixes it.
    """
    weights: int
    grads: int
    main_grads: int
    master: int
    state: int
    description: str


RECIPES = {
    # ZeRO paper, Section 3.1: fp16 weights and gradients, fp32 master weights, momentum and
    # variance: 2 + 2 + 12 = 16 bytes per parameter with Adam. bf16 in place of fp16 is the same.
    "mixed": Recipe(2, 2, 0, 4, 4, "16-bit weights and gradients, fp32 master weights and "
                    "optimizer states (ZeRO paper, 16 B/param with Adam)"),
    # Megatron-LM with fp16: the optimizer also keeps fp32 main gradients: 20 B/param with Adam.
    "mixed-fp32-main-grads": Recipe(2, 2, 4, 4, 4, "16-bit weights and gradients plus fp32 "
                                    "main gradients, master weights and states (Megatron-LM fp16, "
                                    "20 B/param)"),
    # Megatron-LM with bf16: gradients accumulated (and reduced) in fp32 and used directly as the
    # optimizer's main gradients: 2 + 4 + 12 = 18 B/param with Adam.
    "bf16-fp32-grads": Recipe(2, 4, 0, 4, 4, "bf16 weights, fp32 gradient accumulation, fp32 "
                              "master weights and states (Megatron-LM bf16, 18 B/param)"),
    # Everything in fp32 (also PyTorch FSDP's MixedPrecision, which keeps fp32 sharded parameters
    # and computes with bf16 copies gathered on the fly): 4 + 4 + 8 = 16 B/param with Adam.
    "fp32": Recipe(4, 4, 0, 0, 4, "fp32 weights, gradients and optimizer states (16 B/param)"),
    # Pure bf16: no master copy, optimizer states in bf16: 2 + 2 + 4 = 8 B/param with Adam.
    "bf16": Recipe(2, 2, 0, 0, 2, "bf16 weights, gradients and optimizer states, no master "
                   "copy (8 B/param)"),
}


# optimizer -> (number of per-parameter statistics, bytes of each or None for the recipe's)
OPTIMIZERS = {
    "adamw": (2, None),        # exp_avg and exp_avg_sq (Kingma & Ba 2014; Loshchilov & Hutter 2017)
    "adam": (2, None),
    "adamw-8bit": (2, 1),      # block-wise quantized states, 1 byte each (Dettmers et al. 2021);
                               # the per-block scales add well under 1% and are ignored
    "sgd-momentum": (1, None),  # the momentum buffer
    "sgd": (0, None),
}


RECOMPUTE = ("none", "selective", "full")


def state_bytes_per_param(recipe: str, optimizer: str) -> dict[str, float]:
    """Bytes per parameter of each model-state term, before any sharding.

    Returns keys weights, gradients, master, main_grads, states and optimizer_states (the sum of
    the last three, the ZeRO paper's K). Raises KeyError for an unknown recipe or optimizer.
    """
    r = RECIPES[recipe]
    n_states, state_bytes = OPTIMIZERS[optimizer]
    states = n_states * (r.state if state_bytes is None else state_bytes)
    return {"weights": r.weights, "gradients": r.grads, "master": r.master,
            "main_grads": r.main_grads, "states": states,
            "optimizer_states": r.master + r.main_grads + states}


def activation_bytes_per_layer(seq: int, micro_batch: int, hidden: int, heads: int,
                               tp: int = 1, sequence_parallel: bool = False,
                               recompute: str = "none", flash_attention: bool = False,
                               ffn: int | None = None) -> float:
    """Bytes of activations one transformer layer keeps for the backward pass, per micro-batch.

    Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198): Eq. 1 (sbh(34 + 5as/h)), Eq. 2
    (tensor parallel: sbh(10 + 24/t + 5as/(ht))), Eq. 4 (tensor + sequence parallel:
    sbh(34 + 5as/h)/t), selective recomputation (drops the 5as/h term) and full recomputation
    (2sbh: only the layer input is stored; 2sbh/t with sequence parallelism). 16-bit activations,
    1-byte dropout masks. ``ffn`` (default 4h) replaces 34 by 18 + 4*ffn/h. ``flash_attention``
    replaces the 5as/h term by an fp32 log-sum-exp per row and head (sbh * 4a/h bytes).
    Raises ValueError for an unknown ``recompute`` or non-positive sizes.
    """
    for name, value in (("seq", seq), ("micro_batch", micro_batch), ("hidden", hidden),
                        ("heads", heads), ("tp", tp)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1 (got {value})")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)} (got {recompute!r})")
    s, b, h, a, t = seq, micro_batch, hidden, heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    f = 4 * h if ffn is None else ffn
    linear = 18 + 4 * f / h           # 34 for ffn = 4h: 11 (attention) + 19 (MLP) + 4 (norms)
    replicated = 10                   # norms 4, two dropout masks 2, QKV and MLP inputs 4
    if recompute == "selective":
        score = 0.0
    elif flash_attention:
        score = 4 * a / h             # fp32 log-sum-exp: 4 bytes per (row, head) = 4*a*s*b
    else:
        score = 5 * a * s / h         # softmax output 2, dropout mask 1, dropout output 2
    if t == 1 or sequence_parallel:
        return sbh * (linear + score) / t
    return sbh * (replicated + (linear - replicated) / t + score / t)


# data/models/architectures.yml, without its sources and the context lengths no script reads.
MODEL_ROWS = [
    {'name': 'Llama 2 7B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'llama', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 32, 'intermediate_size': 11008,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '6.74B'},
    {'name': 'Llama 2 13B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'llama', 'num_hidden_layers': 40,
     'hidden_size': 5120, 'num_attention_heads': 40, 'num_key_value_heads': 40, 'intermediate_size': 13824,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '13B'},
    {'name': 'Llama 2 70B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 28672,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '69B'},
    {'name': 'Llama 3.1 8B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '8.03B'},
    {'name': 'Llama 3.1 70B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 28672,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '70.6B'},
    {'name': 'Llama 3.1 405B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 126,
     'hidden_size': 16384, 'num_attention_heads': 128, 'num_key_value_heads': 8, 'intermediate_size': 53248,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '406B'},
    {'name': 'Mistral 7B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'mistral', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'sliding_window': 4096, 'published_total': '7.24B'},
    {'name': 'Mixtral 8x7B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'mixtral', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'num_experts': 8, 'num_experts_per_tok': 2,
     'n_shared_experts': 0, 'moe_intermediate_size': 14336, 'published_total': '46.7B', 'published_active': '12.9B'},
    {'name': 'Mixtral 8x22B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'mixtral', 'num_hidden_layers': 56,
     'hidden_size': 6144, 'num_attention_heads': 48, 'num_key_value_heads': 8, 'intermediate_size': 16384,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'num_experts': 8, 'num_experts_per_tok': 2,
     'n_shared_experts': 0, 'moe_intermediate_size': 16384, 'published_total': '141B', 'published_active': '39B'},
    {'name': 'Qwen2.5 7B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'qwen2', 'num_hidden_layers': 28,
     'hidden_size': 3584, 'num_attention_heads': 28, 'num_key_value_heads': 4, 'intermediate_size': 18944,
     'vocab_size': 152064, 'tie_word_embeddings': False, 'qkv_bias': True, 'published_total': '7.61B'},
    {'name': 'Qwen2.5 72B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'qwen2', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 29568,
     'vocab_size': 152064, 'tie_word_embeddings': False, 'qkv_bias': True, 'published_total': '72.7B'},
    {'name': 'Qwen3-30B-A3B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'qwen3_moe', 'num_hidden_layers': 48,
     'hidden_size': 2048, 'num_attention_heads': 32, 'num_key_value_heads': 4, 'head_dim': 128,
     'intermediate_size': 6144, 'vocab_size': 151936, 'tie_word_embeddings': False, 'num_experts': 128,
     'num_experts_per_tok': 8, 'n_shared_experts': 0, 'moe_intermediate_size': 768, 'published_total': '30.5B',
     'published_active': '—'},
    {'name': 'Gemma 2 9B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'gemma2', 'num_hidden_layers': 42,
     'hidden_size': 3584, 'num_attention_heads': 16, 'num_key_value_heads': 8, 'head_dim': 256,
     'intermediate_size': 14336, 'vocab_size': 256000, 'tie_word_embeddings': True, 'sliding_window': 4096,
     'sliding_window_pattern': 2, 'published_total': '9.24B'},
    {'name': 'Gemma 2 27B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'gemma2', 'num_hidden_layers': 46,
     'hidden_size': 4608, 'num_attention_heads': 32, 'num_key_value_heads': 16, 'head_dim': 128,
     'intermediate_size': 36864, 'vocab_size': 256000, 'tie_word_embeddings': True, 'sliding_window': 4096,
     'sliding_window_pattern': 2, 'published_total': '27.2B'},
    {'name': 'OLMo 2 7B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'olmo2', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 32, 'intermediate_size': 11008,
     'vocab_size': 100352, 'tie_word_embeddings': False, 'published_total': '7.3B'},
    {'name': 'OLMoE-1B-7B', 'kind': 'MoE', 'attention': 'MHA', 'model_type': 'olmoe', 'num_hidden_layers': 16,
     'hidden_size': 2048, 'num_attention_heads': 16, 'num_key_value_heads': 16, 'intermediate_size': 1024,
     'vocab_size': 50304, 'tie_word_embeddings': False, 'num_experts': 64, 'num_experts_per_tok': 8,
     'n_shared_experts': 0, 'moe_intermediate_size': 1024, 'published_total': '6.9B', 'published_active': '1.3B'},
    {'name': 'DeepSeek-V3', 'kind': 'MoE', 'attention': 'MLA', 'model_type': 'deepseek_v3', 'num_hidden_layers': 61,
     'hidden_size': 7168, 'num_attention_heads': 128, 'num_key_value_heads': 128, 'intermediate_size': 18432,
     'vocab_size': 129280, 'tie_word_embeddings': False, 'q_lora_rank': 1536, 'kv_lora_rank': 512,
     'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64, 'v_head_dim': 128, 'first_k_dense_replace': 3, 'num_experts': 256,
     'num_experts_per_tok': 8, 'n_shared_experts': 1, 'moe_intermediate_size': 2048, 'topk_method': 'noaux_tc',
     'published_total': '671B', 'published_active': '37B', 'published_active_excludes_input_embedding': True},
]


# data/compute/accelerators.yml: the figures scripts compute with, for the devices they offer by
# name: dense bf16 peak (TFLOPS), memory (GB), scale-up links over both directions (GBps).
ACCELERATOR_ROWS = [
    {'name': 'NVIDIA A100 SXM 80GB', 'bf16_dense': 312, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H100 SXM', 'bf16_dense': 989.4, 'mem_GB': 80, 'scaleup_GBps': 900},
    {'name': 'NVIDIA H100 PCIe', 'bf16_dense': 756, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H200 SXM', 'bf16_dense': 989.4, 'mem_GB': 141, 'scaleup_GBps': 900},
    {'name': 'NVIDIA B200 (HGX)', 'bf16_dense': 2250, 'mem_GB': 180, 'scaleup_GBps': 1800},
    {'name': 'NVIDIA GB200 (per GPU)', 'bf16_dense': 2500, 'mem_GB': 186, 'scaleup_GBps': 1800},
    {'name': 'AMD MI300X', 'bf16_dense': 1307.4, 'mem_GB': 192, 'scaleup_GBps': 896},
    {'name': 'AMD MI355X', 'bf16_dense': 2500, 'mem_GB': 288, 'scaleup_GBps': 1075.2},
    {'name': 'Google TPU v4', 'bf16_dense': 275, 'mem_GB': 34.4, 'scaleup_GBps': '—'},
    {'name': 'Google TPU v5p', 'bf16_dense': 459, 'mem_GB': 102, 'scaleup_GBps': 1200},
]


# results/compute/: the published bf16 MAMF (mamf_finder's mean TFLOPS) per device.
MAMF_ROWS = [
    {'device': 'Intel Gaudi 2', 'mean_tflops': 418.7},
    {'device': 'NVIDIA A100 SXM', 'mean_tflops': 271.2},
    {'device': 'NVIDIA GH200 SXM', 'mean_tflops': 828.6},
    {'device': 'NVIDIA A100 PCIe', 'mean_tflops': 252.9},
    {'device': 'NVIDIA H100 SXM', 'mean_tflops': 794.5},
    {'device': 'NVIDIA B300 SXM', 'mean_tflops': 1769.0},
    {'device': 'NVIDIA B200 SXM', 'mean_tflops': 1745.0},
    {'device': 'Intel Gaudi 3', 'mean_tflops': 1243.0},
    {'device': 'NVIDIA GB200 SXM', 'mean_tflops': 1822.0},
    {'device': 'AMD MI355X', 'mean_tflops': 1565.0},
    {'device': 'AMD MI325X', 'mean_tflops': 784.9},
    {'device': 'AMD MI300X', 'mean_tflops': 668.4},
]


def row_named(rows: list[dict], value: str, key: str = "name") -> dict:
    """The row of ``rows`` (a ``data_rows`` table) whose ``key`` is ``value``. Raises KeyError
    naming the value when no row has it (a device the table was not built with)."""
    for row in rows:
        if row.get(key) == value:
            return row
    raise KeyError(f"no row with {key} {value!r} in the built-in table")
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
