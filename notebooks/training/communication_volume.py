# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Communication volume per parallelism strategy
#
# The *Model parallelism* page of the Training part gives, for every way of
# splitting a transformer, the bytes each GPU sends per step. This notebook does two
# things with those formulas:
#
# 1. it checks each closed form against a **brute-force count**: list every
#    collective a step issues, with its size, and add up the bytes each one sends per
#    rank using the conventions of the Network chapter (all-reduce $2\frac{n-1}{n}S$,
#    reduce-scatter, all-gather and all-to-all $\frac{n-1}{n}S$);
# 2. it evaluates them for a 70B-class model on 512 GPUs and turns bytes into seconds
#    with assumed bus bandwidths, to show which layouts hide their communication and
#    which do not.
#
# All inputs below are **assumptions**, stated where they are made; change them to
# your model and your measured bandwidths.

# %%
import math

import matplotlib.pyplot as plt
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})

GB = 1e9  # decimal units throughout, as in the Network chapter

# %% [markdown]
# ## Bytes per collective
#
# Per-rank bytes sent by one collective over $n$ ranks, $S$ being the full buffer
# (for reduce-scatter the input, for all-gather the output, for all-to-all each
# rank's buffer). Point-to-point send: $S$.

# %%
def sent(kind, size, n):
    """Bytes one rank sends in a collective of `size` bytes over `n` ranks."""
    factor = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n, "send": 1.0}
    return factor[kind] * size


# %% [markdown]
# ## The closed forms
#
# Symbols as on the Model parallelism page: $\Psi$ parameters, $L$ layers, $h$
# hidden size, $b$ micro-batch, $s$ sequence length, $B$ bytes per element, degrees
# $d, t, p, c, e$, $m$ micro-batches per step, $k$ experts per token.

# %%
def v_ddp(psi, d, B=2):
    return 2 * (d - 1) / d * psi * B


def v_zero3(psi, d, B=2):
    return 3 * (d - 1) / d * psi * B


def v_tp_layer(b, s, h, t, B=2):
    """TP (with or without SP), one layer, one micro-batch, forward + backward."""
    return 8 * (t - 1) / t * b * s * h * B


def v_pp_microbatch(b, s, h, B=2):
    """One stage boundary, one micro-batch: activation forward + gradient backward."""
    return 2 * b * s * h * B


def v_ep_layer(b, s, h, k, e, B=2):
    """One MoE layer, one micro-batch: dispatch + combine, forward and backward."""
    return 4 * k * (e - 1) / e * b * s * h * B


# %% [markdown]
# ## Brute force: enumerate the collectives of one step
#
# For each strategy, write down the collectives exactly as the implementation issues
# them and add up `sent(...)`:
#
# * **DDP**: one all-reduce of all bf16 gradients (bucketing splits it but does not
#   change the sum).
# * **ZeRO-3 / FSDP**: per unit (a layer), all-gather of its parameters in forward,
#   again in backward, reduce-scatter of its gradients.
# * **TP** (Megatron): per layer, forward all-reduce after attention and after the
#   MLP; backward all-reduce for the input gradient of attention and of the MLP.
# * **TP + SP**: each of those all-reduces becomes a reduce-scatter and an all-gather
#   (forward: all-gather before each column-parallel block, reduce-scatter after each
#   row-parallel block; backward the reverse).
# * **PP**: per micro-batch, send the activation forward and the gradient backward.
# * **EP**: per MoE layer, all-to-all dispatch and combine, forward and backward.

# %%
def enumerate_ddp(psi, d, B=2):
    return [("all_reduce", psi * B, d)]


def enumerate_zero3(layer_params, d, B=2):
    calls = []
    for n_par in layer_params:
        calls += [("all_gather", n_par * B, d), ("all_gather", n_par * B, d),
                  ("reduce_scatter", n_par * B, d)]
    return calls


def enumerate_tp(layers, b, s, h, t, sp=False, B=2):
    act = b * s * h * B
    calls = []
    for _ in range(layers):
        for _block in ("attention", "mlp"):
            if sp:  # forward AG + RS, backward RS + AG
                calls += [("all_gather", act, t), ("reduce_scatter", act, t)] * 2
            else:   # forward g all-reduce, backward f all-reduce
                calls += [("all_reduce", act, t)] * 2
    return calls


def enumerate_pp(m, b, s, h, B=2):
    return [("send", b * s * h * B, 2)] * (2 * m)


def enumerate_ep(b, s, h, k, e, B=2):
    routed = k * b * s * h * B  # every token's vector, k copies
    return [("all_to_all", routed, e)] * 4


def total(calls):
    return sum(sent(kind, size, n) for kind, size, n in calls)


psi, L, h, b, s = 1_200_000, 6, 512, 2, 1024
layer_params = [psi // L] * L
checks = {
    "DDP = 2(d-1)/d * 2 Psi": math.isclose(total(enumerate_ddp(psi, 16)), v_ddp(psi, 16)),
    "ZeRO-3 = 3(d-1)/d * 2 Psi": math.isclose(total(enumerate_zero3(layer_params, 16)),
                                              v_zero3(psi, 16)),
    "ZeRO-3 / DDP = 1.5": math.isclose(v_zero3(psi, 16) / v_ddp(psi, 16), 1.5),
    "TP = 8(t-1)/t b s h B per layer": math.isclose(total(enumerate_tp(L, b, s, h, 8)),
                                                   L * v_tp_layer(b, s, h, 8)),
    "TP + SP sends the same bytes as TP": math.isclose(
        total(enumerate_tp(L, b, s, h, 8, sp=True)), total(enumerate_tp(L, b, s, h, 8))),
    "PP = 2 b s h B per micro-batch": math.isclose(total(enumerate_pp(32, b, s, h)),
                                                  32 * v_pp_microbatch(b, s, h)),
    "EP = 4k(e-1)/e b s h B per MoE layer": math.isclose(total(enumerate_ep(b, s, h, 2, 8)),
                                                        v_ep_layer(b, s, h, 2, 8)),
}
for name, ok in checks.items():
    print(f"{name:40s} {ok}")
print("all closed forms agree with the enumeration:", all(checks.values()))

# %% [markdown]
# ## A 70B-class model on 512 GPUs
#
# **Model (assumed, shaped like Llama 2 70B,
# [Touvron et al. 2023](https://arxiv.org/abs/2307.09288)):** 80 layers, hidden size
# 8192, 64 query heads and 8 key/value heads (grouped-query attention), SwiGLU MLP of
# width 28672, vocabulary 32000, sequences of 4096 tokens, bf16 activations and
# gradients.
#
# **Cluster (assumed):** 64 nodes of 8 H100 GPUs. Bus bandwidths as in the Network
# chapter's estimate: 40 GBps per GPU between nodes (80% of a 400 Gbps NIC) for a group
# with one GPU per node, 320 GBps for a group that spans every GPU of each node (its rings
# leave the node through all eight NICs), and 360 GBps inside a node (80% of NVLink 4's
# 450 GBps per direction). Achieved
# compute 40% of the dense bf16 peak of 989 TFLOPS.
#
# **Batch:** 1024 sequences per step (4.2M tokens), micro-batch 1.

# %%
L, h, heads, kv_heads, ffn, V, s = 80, 8192, 64, 8, 28672, 32000, 4096
head_dim = h // heads
layer_psi = 2 * h * h + 2 * h * kv_heads * head_dim + 3 * h * ffn
PSI = L * layer_psi + 2 * V * h          # input embedding + output projection
N_MATMUL = L * layer_psi + V * h         # parameters in matmuls (6N)
GPUS, PER_NODE = 512, 8
BW_NVLINK, BW_NET = 360 * GB, 40 * GB
BW_NET_NODE = PER_NODE * BW_NET   # a group with every GPU of each node uses all its NICs
F = 0.40 * 989e12
SEQS, b = 1024, 1

flops_token = 6 * N_MATMUL + 12 * L * h * s   # PaLM appendix B (see the Performance page)
compute_s = flops_token * SEQS * s / GPUS / F
print(f"parameters Psi = {PSI / 1e9:.1f} B; FLOPs per token = {flops_token / 1e9:.0f} GFLOP")
print(f"compute per GPU per step = {compute_s:.2f} s at {F / 1e12:.0f} TFLOPS")

# %% [markdown]
# Three layouts of the same 512 GPUs:
#
# * **A, FSDP only**: $d = 512$.
# * **B, 3D**: TP $t = 8$ inside each node, PP $p = 4$ across nodes, DP $d = 16$ with
#   ZeRO-1 (same bytes as DDP). Each pipeline gets $m = 1024/16 = 64$ micro-batches.
# * **C, 3D with TP across nodes** (a mistake, for comparison): same degrees, but the
#   8 TP ranks sit on 8 different nodes.
#
# For each, the bytes one GPU sends per step in each dimension, the time at the
# dimension's bandwidth, and whether that time sits on the critical path.

# %%
def layout_rows(name):
    rows = []
    if name == "A":
        rows.append(("FSDP (d=512)", v_zero3(PSI, 512), BW_NET_NODE, "mostly overlapped"))
    else:
        t, p, d = 8, 4, 16
        m = SEQS // d
        psi_local = PSI / (t * p)
        tp_bw = BW_NVLINK if name == "B" else BW_NET
        rows.append(("DP, ZeRO-1 (d=16)", v_ddp(psi_local, d), BW_NET, "overlapped with backward"))
        rows.append((f"TP (t=8, {'NVLink' if name == 'B' else 'network'})",
                     v_tp_layer(b, s, h, t) * (L // p) * m, tp_bw, "critical path"))
        rows.append(("PP (p=4)", v_pp_microbatch(b, s, h) * m, BW_NET, "point-to-point"))
    return rows


summary = {}
for name in ("A", "B", "C"):
    print(f"layout {name}:")
    comm = {}
    for label, volume, bw, where in layout_rows(name):
        comm[label] = volume / bw
        print(f"  {label:22s} {volume / GB:8.1f} GB/step  {volume / bw:6.2f} s  ({where})")
    summary[name] = comm
    if name != "A":
        print(f"  pipeline bubble (p-1)/m = 3/64 = {3 / 64:.1%} of the ideal step time")

# %% [markdown]
# The plot puts each layout's communication time per step next to the compute time.
# Communication overlapped with compute costs nothing until it is longer than the
# compute it hides behind; communication on the critical path costs its full time.

# %% alt=["Horizontal bar chart of seconds per step per GPU for a 70B-class model on 512 H100s with 4.2M tokens per step, three layouts, each with a gray compute bar of about 9.2 s and a coloured communication bar. Layout A (FSDP only): about 1.3 s of FSDP traffic, hidden behind the compute. Layout B (TP inside nodes, PP and DP across them): about 2.1 s, mostly TP over NVLink. Layout C (TP across nodes): about 15.4 s, mostly TP over the network, longer than the compute itself and on the critical path."]
fig, ax = plt.subplots(figsize=(9, 3.6))
labels, y = [], 0
colors = {"FSDP": "tab:blue", "DP": "tab:blue", "TP": "tab:red", "PP": "tab:green"}
for name in ("A", "B", "C"):
    ax.barh(y + 0.2, compute_s, height=0.35, color="lightgray",
            label="compute" if name == "A" else None)
    left = 0.0
    for label, secs in summary[name].items():
        kind = label.split()[0].rstrip(",")
        ax.barh(y - 0.2, secs, left=left, height=0.35, color=colors[kind],
                label=kind if name in ("A", "B") else None)
        left += secs
    labels.append(f"layout {name}")
    y += 1
ax.set_yticks(range(3), labels)
ax.invert_yaxis()
ax.set_xlabel("seconds per step per GPU (gray: compute; colored: communication)")
ax.set_title("70B-class model, 512 H100s, 4.2M tokens per step")
handles, names = ax.get_legend_handles_labels()
ax.legend(dict(zip(names, handles, strict=True)).values(), dict(zip(names, handles, strict=True)).keys(),
          loc="center left", bbox_to_anchor=(1.0, 0.5))
ax.grid(axis="x", alpha=0.3)
plt.show()

# %% [markdown]
# What the numbers say:
#
# * **A (FSDP only).** The 1.5 × 2Ψ volume per step does not depend on $d$, while
#   the compute per GPU falls as $1/d$. The FSDP group holds every GPU of every node, so
#   its rings use all eight NICs of a node (320 GBps): with 8192 tokens per GPU per step
#   the traffic takes about a seventh of the compute and hides behind it. The Network
#   chapter's rule gives the margin: $F/B_{\mathrm{bus}} \approx 1{,}240$ tokens per GPU
#   hide it, where a group with one GPU per node (40 GBps) would need about 9,900.
# * **B (3D).** DP traffic shrinks by $t \cdot p = 32$ because each DP rank holds
#   $1/32$ of the model; PP traffic is small; TP moves the most bytes but over
#   NVLink, about a fifth of the compute time, on the critical path unless the
#   implementation overlaps it with the matmuls.
# * **C.** The same TP traffic over the inter-node network takes longer than the
#   whole compute: TP belongs inside the NVLink domain.

# %%
tp_b = summary["B"]["TP (t=8, NVLink)"]
tp_c = summary["C"]["TP (t=8, network)"]
print(f"A: FSDP communication / compute = {summary['A']['FSDP (d=512)'] / compute_s:.2f}")
print(f"B: TP on NVLink / compute = {tp_b / compute_s:.2f}")
print(f"C: TP across nodes / compute = {tp_c / compute_s:.2f}")
print("TP across nodes is slower than the compute it serves:", tp_c > compute_s)

# %% [markdown]
# ## Long context: when does ring attention hide its transfers?
#
# With context parallelism over $c$ ranks, each ring step moves one block of keys and
# values, $2\,b\,\frac{s}{c}\,h_{kv}\,B$ bytes, while the rank computes attention of
# its $\frac{s}{c}$ queries against that block: $4\,b\,(\frac{s}{c})^2\,a$ FLOPs in the
# forward pass ($a$ = query width, full block, no causal skipping). The transfer hides
# behind the compute when
#
# $$ \frac{4\,b\,(s/c)^2\,a}{F} \ \ge\ \frac{2\,b\,(s/c)\,h_{kv}\,B}{B_{\mathrm{bus}}}
#    \quad\Longleftrightarrow\quad
#    \frac{s}{c} \ \ge\ \frac{F}{B_{\mathrm{bus}}}\cdot\frac{h_{kv}\,B}{2\,a}. $$
#
# Grouped-query attention helps twice: fewer KV heads mean smaller blocks to send.

# %%
h_kv = kv_heads * head_dim
for bw_name, bw in (("NVLink", BW_NVLINK), ("network", BW_NET)):
    threshold = F / bw * h_kv * 2 / (2 * h)
    print(f"{bw_name:8s}: transfers hidden when s/c >= {threshold:6.0f} tokens per rank")
# Check the threshold against the two times directly, at the threshold itself.
chunk = F / BW_NET * h_kv * 2 / (2 * h)
t_compute = 4 * b * chunk**2 * h / F
t_transfer = 2 * b * chunk * h_kv * 2 / BW_NET
print("at the threshold, compute time = transfer time:", math.isclose(t_compute, t_transfer))
for s_long, c in ((131072, 8), (131072, 16), (131072, 64)):
    print(f"s = {s_long}, c = {c:2d}: s/c = {s_long // c:6d} tokens per rank")

# %% [markdown]
# With this model and the assumed bandwidths, ring attention over 128K tokens hides
# its transfers across nodes until each rank holds only about a thousand tokens;
# below that, the ring steps become communication-bound (and the backward pass,
# which sends the K/V gradients too, reaches that point earlier).
#
# ## What to remember
#
# * Every strategy's traffic is a sum of the Network chapter's per-collective
#   costs; when in doubt, enumerate the collectives and add them up.
# * DP volume depends on the parameters a rank holds, not on the batch; TP, CP and
#   EP volumes scale with the tokens of a micro-batch and sit on the critical path;
#   PP volume is small but brings a bubble.
# * Put the dimension that moves the most bytes per FLOP on the fastest links: TP
#   (and Ulysses CP, and EP) inside NVLink, PP and DP across nodes.
