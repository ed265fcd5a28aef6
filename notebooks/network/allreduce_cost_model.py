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
# # An alpha–beta cost model of all-reduce
#
# Every data-parallel training step ends with an all-reduce of the gradients, so
# it pays to be able to predict how long one takes *before* renting a cluster,
# and to tell whether a measured number is good. This notebook builds the
# simplest model that is still useful, the **alpha–beta** (latency–bandwidth,
# also called Hockney) model, applies it to the two algorithms NCCL uses for
# all-reduce (ring and tree), and then fits it to a real measurement from this
# book's benchmark.
#
# What you should take away:
#
# 1. Small all-reduces are **latency-bound**: their time barely depends on the
#    message size, and the reported bandwidth is far below the link's.
# 2. Large all-reduces are **bandwidth-bound**, and **busbw** (not algbw) is the
#    number to compare with the link bandwidth, whatever the number of ranks.
# 3. A ring's latency grows **linearly** with the number of ranks, a tree's
#    **logarithmically**; that is why trees matter at scale for small and
#    medium messages.
#
# The notebook runs in a few seconds on a CPU; nothing here needs a GPU.

# %%
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib_inline.backend_inline import set_matplotlib_formats

# PNG (not SVG) plots: the PDF is built from the stored PNGs and SVG text
# differs from machine to machine.
set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

# %% [markdown]
# ## The model
#
# Sending a message of $m$ bytes between two ranks takes
#
# $$ t(m) = \alpha + \frac{m}{\beta} $$
#
# where $\alpha$ (seconds) is the fixed per-message cost (software overhead,
# synchronisation, wire latency) and $\beta$ (bytes/s) is the bandwidth of one
# rank's link in one direction. Each rank can send and receive at the same time
# (full duplex), and the network is assumed to have no contention. We also ignore
# the time to add the numbers (the $\gamma$ term of the papers below): on GPUs the
# reduction is much faster than the link.
#
# Note on notation: Thakur, Rabenseifner and Gropp write $\beta$ for the
# *time per byte*; we use its reciprocal, a *bandwidth*, so that $\beta$ can be
# compared directly with busbw.
#
# With $n$ ranks each holding a buffer of $S$ bytes:
#
# | algorithm | latency term | bandwidth term |
# |---|---|---|
# | ring (reduce-scatter + all-gather) | $2(n-1)\,\alpha$ | $2\frac{n-1}{n}\,\frac{S}{\beta}$ |
# | double binary tree (pipelined) | $2\lceil\log_2 n\rceil\,\alpha$ | $2\,\frac{S}{\beta}$ |
# | recursive doubling | $\lceil\log_2 n\rceil\,\alpha$ | $\lceil\log_2 n\rceil\,\frac{S}{\beta}$ |
# | Rabenseifner (halving + doubling; $n$ a power of two) | $2\log_2 n\,\alpha$ | $2\frac{n-1}{n}\,\frac{S}{\beta}$ |
#
# Sources: [Thakur et al. 2005][thakur] for the ring, recursive doubling and Rabenseifner's
# algorithm, and [Patarasuk & Yuan 2009][patarasuk] for the ring; the tree is our idealisation
# of [NCCL 2.4's trees][nccl24].
#
# **Ring.** A ring all-reduce is a reduce-scatter followed by an all-gather. Each
# phase takes $n-1$ steps, and in each step every rank sends one $S/n$ chunk to
# its neighbour, so the time is $2(n-1)\,(\alpha + \frac{S}{n\beta})$. Thakur et
# al. give the same cost, $(n-1)\alpha + \frac{n-1}{n}\frac{S}{\beta}$, for their ring
# all-gather and for their long-message reduce-scatter (plus the $\gamma$ term for
# the reduce-scatter). Patarasuk and Yuan show
# that the bandwidth term, $2\frac{n-1}{n}S$ bytes sent per rank, is the minimum
# any all-reduce must send; the same argument defines busbw in
# [nccl-tests' PERFORMANCE.md][perf].
#
# **Tree.** NCCL 2.4 introduced *double binary trees*: two binary trees over the
# same ranks, each carrying half of the data, built so that every rank is an inner
# node in at most one of them and a leaf in the other. The data is split into
# chunks that flow up the trees (reduce) and back down (broadcast) in a pipeline.
# We model it as follows:
#
# * latency: a chunk travels $\lceil\log_2 n\rceil$ levels up and as many down,
#   so $2\lceil\log_2 n\rceil\,\alpha$;
# * bandwidth: each rank sends $S/2$ to its parent in each tree ($S$ in total) and,
#   in the tree where it is an inner node, $S/2$ to each of its two children
#   ($S$ more), so it sends $2S$ bytes: $2S/\beta$.
#
# This ignores the pipeline's fill and drain (a few chunk times) and per-chunk
# overheads, so it is optimistic; it is *our* simplification, not a formula from
# NVIDIA.
#
# **Where the model is wrong.** It has no topology. On paper Rabenseifner's
# algorithm beats the ring everywhere (same bandwidth term, logarithmic
# latency), but its far-apart partners share links and contend on real networks,
# while a ring only talks to its neighbours, which maps cleanly onto NVLink and
# rail-optimised fabrics. Use the model to reason about trends and orders of
# magnitude, and measure for the real numbers.
#
# [thakur]: https://doi.org/10.1177/1094342005051521
# [patarasuk]: https://doi.org/10.1016/j.jpdc.2008.09.002
# [nccl24]: https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/
# [perf]: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md

# %%
def t_ring(n, size, alpha, beta):
    """Ring all-reduce time (s) for n ranks and a buffer of `size` bytes."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * np.asarray(size, dtype=float) / beta


def t_tree(n, size, alpha, beta):
    """Idealised pipelined double-binary-tree all-reduce time (s)."""
    depth = np.ceil(np.log2(np.asarray(n, dtype=float)))
    return 2 * depth * alpha + 2 * np.asarray(size, dtype=float) / beta


def algbw(size, t):
    """Algorithm bandwidth (bytes/s), as nccl-tests defines it: size / time."""
    return np.asarray(size, dtype=float) / t


def busbw(n, size, t):
    """Bus bandwidth (bytes/s) of an all-reduce: algbw * 2(n-1)/n (nccl-tests)."""
    return algbw(size, t) * 2 * (n - 1) / n


def fmt_bytes(x):
    """Human-readable decimal size, 3 significant figures: 250000 -> '250 kB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B"


# Illustrative parameters, roughly an inter-node link of one GPU:
ALPHA = 5e-6   # 5 µs per message
BETA = 50e9    # 50 GB/s per direction (a 400 Gbit/s NIC)
print(f"model parameters: α = {ALPHA * 1e6:g} µs, β = {BETA / 1e9:g} GB/s, "
      f"α·β = {fmt_bytes(ALPHA * BETA)}")

# %% [markdown]
# Before plotting, let us check the algebra that the rest of the notebook relies
# on. Dividing the ring's bus bandwidth out gives a compact form,
#
# $$ \text{busbw}_\text{ring}(S) = \frac{S}{T_\text{ring}}\cdot\frac{2(n-1)}{n}
#    = \beta\,\frac{S}{S + n\,\alpha\beta}, $$
#
# so the ring's busbw tends to $\beta$ for large messages and reaches *half* of
# $\beta$ at $S_{1/2} = n\,\alpha\beta$. The tree's busbw tends to
# $\beta\,(n-1)/n$, and the two algorithms take the same time at
# $S^* = n\,(n-1-\lceil\log_2 n\rceil)\,\alpha\beta$. The checks below print
# `True` when the code agrees with these formulas.

# %%
sizes = np.logspace(3, 11, 161)  # 1 kB .. 100 GB
checks = {}
for n in (2, 8, 64, 512, 4096):
    bb = busbw(n, sizes, t_ring(n, sizes, ALPHA, BETA))
    checks[f"n={n}: busbw_ring = β·S/(S + nαβ)"] = np.allclose(
        bb, BETA * sizes / (sizes + n * ALPHA * BETA), rtol=1e-12)
    half = n * ALPHA * BETA
    checks[f"n={n}: busbw_ring(nαβ) = β/2"] = math.isclose(
        float(busbw(n, half, t_ring(n, half, ALPHA, BETA))), BETA / 2, rel_tol=1e-12)
    huge = 1e18
    checks[f"n={n}: busbw_tree → β(n-1)/n"] = math.isclose(
        float(busbw(n, huge, t_tree(n, huge, ALPHA, BETA))), BETA * (n - 1) / n, rel_tol=1e-6)
for name, ok in checks.items():
    print(f"{name:40s} {ok}")
print("all checks pass:", all(checks.values()))

# %% [markdown]
# ## 1. Time against message size
#
# On a log–log plot the model has two straight asymptotes: a flat line (the
# latency term; time does not depend on size) and a line of slope one (the
# bandwidth term). The bend between them sits around $S \approx n\alpha\beta$ for
# the ring: below it, doubling the message costs almost nothing; above it, time
# doubles with the message.
#
# The tree's latency is much lower at large $n$, but its bandwidth term is a
# factor $n/(n-1)$ larger than the ring's, so the ring wins again for very large
# messages. The dots mark the crossover $S^*$.

# %% alt=["Log-log chart of all-reduce time (s) against message size per rank, 1 kB to 100 GB, in the alpha-beta model with \u03b1 = 5 \u00b5s and \u03b2 = 50 GB/s: solid lines for the ring and dashed for the tree at 8, 64 and 512 ranks. Each curve is flat at small sizes (the latency term) and then rises with slope one (the bandwidth term), all converging at large sizes. The ring's flat part rises with the number of ranks, to about 5 ms at 512, while the tree's stays below 0.1 ms; dots mark where the ring becomes faster again, at about 8 MB, 900 MB and 64 GB."]
WORLD_SIZES = (8, 64, 512)
COLORS = dict(zip(WORLD_SIZES, ("tab:blue", "tab:orange", "tab:green"), strict=True))


def crossover(n, alpha, beta):
    """Message size (bytes) at which ring and tree take the same time."""
    return n * (n - 1 - math.ceil(math.log2(n))) * alpha * beta


fig, ax = plt.subplots(figsize=(8, 5))
for n in WORLD_SIZES:
    c = COLORS[n]
    ax.loglog(sizes, t_ring(n, sizes, ALPHA, BETA), color=c, label=f"ring, n={n}")
    ax.loglog(sizes, t_tree(n, sizes, ALPHA, BETA), color=c, ls="--", label=f"tree, n={n}")
    s_star = crossover(n, ALPHA, BETA)
    if s_star <= sizes[-1]:
        ax.plot(s_star, t_ring(n, s_star, ALPHA, BETA), "o", color=c)
ax.set_xlabel("message size S per rank (bytes)")
ax.set_ylabel("all-reduce time (s)")
ax.set_title(f"Alpha–beta model, α = {ALPHA * 1e6:g} µs, β = {BETA / 1e9:g} GB/s")
ax.legend(ncol=3, fontsize=8)
plt.show()

for n in WORLD_SIZES:
    s_star = crossover(n, ALPHA, BETA)
    same = math.isclose(float(t_ring(n, s_star, ALPHA, BETA)),
                        float(t_tree(n, s_star, ALPHA, BETA)), rel_tol=1e-12)
    print(f"n={n:4d}: tree faster below S* = {fmt_bytes(s_star):>8s}  (ring = tree at S*: {same})")

# %% [markdown]
# ## 2. Bus bandwidth against message size
#
# This is the plot nccl-tests prints as a table. **algbw** $= S/T$ is what an
# application sees, but for a ring it tends to $\beta\,n/(2(n-1))$, a number that
# changes with the number of ranks. **busbw** multiplies it by $2(n-1)/n$, the
# share of the buffer that every rank must send at least, so that the plateau
# equals the per-rank link bandwidth $\beta$ whatever $n$ is. That is why busbw is
# the figure to compare with the hardware's bandwidth: a busbw plateau well below
# the link's speed points at a problem (a slow link, a bad topology, the wrong
# algorithm), not at the number of GPUs.
#
# The left part of every curve is the latency-bound regime. The ring reaches half
# of its plateau at $S_{1/2} = n\alpha\beta$, which grows with $n$: the more ranks,
# the larger the message needed to use the network well. That is one reason
# frameworks bucket many small gradients into one large all-reduce.

# %% alt=["Chart of busbw (GB/s, 0 to 55) against message size per rank on a log axis for the ring (solid) and the tree (dashed) at 8, 64 and 512 ranks, with the link bandwidth \u03b2 of 50 GB/s as a dotted line. Every curve is an S shape from zero to a plateau: the ring's plateau is \u03b2 whatever the number of ranks, the tree's is slightly lower (about 44 GB/s at 8 ranks). The ring reaches half of \u03b2 (dots) at about 2 MB, 16 MB and 128 MB: the more ranks, the larger the message needed to use the network well."]
fig, ax = plt.subplots(figsize=(8, 5))
for n in WORLD_SIZES:
    c = COLORS[n]
    ax.semilogx(sizes, busbw(n, sizes, t_ring(n, sizes, ALPHA, BETA)) / 1e9,
                color=c, label=f"ring, n={n}")
    ax.semilogx(sizes, busbw(n, sizes, t_tree(n, sizes, ALPHA, BETA)) / 1e9,
                color=c, ls="--", label=f"tree, n={n}")
    ax.plot(n * ALPHA * BETA, BETA / 2 / 1e9, "o", color=c)
ax.axhline(BETA / 1e9, color="black", lw=1, ls=":", label="link bandwidth β")
ax.set_xlabel("message size S per rank (bytes)")
ax.set_ylabel("busbw (GB/s)")
ax.set_ylim(0, BETA / 1e9 * 1.1)
ax.set_title("busbw = algbw · 2(n−1)/n; dots: ring at half of β")
ax.legend(ncol=2, fontsize=8, loc="upper left")
plt.show()

for n in WORLD_SIZES:
    print(f"n={n:4d}: ring busbw reaches β/2 at S = nαβ = {fmt_bytes(n * ALPHA * BETA):>8s}; "
          f"tree plateau = {BETA * (n - 1) / n / 1e9:.2f} GB/s")

# %% [markdown]
# ## 3. Time against the number of ranks
#
# Fix the message size and grow the job. For a small message (1 MB, e.g. a single
# gradient bucket of a small layer) the ring's $2(n-1)\alpha$ term dominates and
# grows linearly: at thousands of ranks it costs tens of milliseconds, while the
# tree stays below 0.2 ms. For a large message (1 GB) the bandwidth
# term dominates, it hardly depends on $n$, and both algorithms cost about
# $2S/\beta$ until the ring's latency catches up at very large $n$.

# %% alt=["Log-log chart of all-reduce time (s) against the number of ranks, 2 to 8192, for messages of 1 MB and 1 GB, ring solid and tree dashed. For 1 MB the ring's time grows linearly with the ranks, from about 30 \u00b5s to about 80 ms, while the tree's grows logarithmically and stays below 0.2 ms. For 1 GB both stay near 40 ms until the ring's latency adds up beyond about 1,000 ranks, reaching about 120 ms at 8192."]
ranks = 2 ** np.arange(1, 14)  # 2 .. 8192
fig, ax = plt.subplots(figsize=(8, 5))
for size, c in ((1e6, "tab:purple"), (1e9, "tab:red")):
    ax.loglog(ranks, t_ring(ranks, size, ALPHA, BETA), color=c, marker=".",
              label=f"ring, S = {fmt_bytes(size)}")
    ax.loglog(ranks, t_tree(ranks, size, ALPHA, BETA), color=c, ls="--", marker=".",
              label=f"tree, S = {fmt_bytes(size)}")
ax.set_xscale("log", base=2)
ax.set_xlabel("number of ranks n")
ax.set_ylabel("all-reduce time (s)")
ax.set_title("Ring latency grows linearly with n, tree latency logarithmically")
ax.legend(fontsize=8)
plt.show()

for n in (8, 1024, 8192):
    print(f"n={n:5d}, S = 1 MB: ring {float(t_ring(n, 1e6, ALPHA, BETA)) * 1e3:7.3f} ms, "
          f"tree {float(t_tree(n, 1e6, ALPHA, BETA)) * 1e3:7.3f} ms")

# %% [markdown]
# ## 4. Fitting the model to a measurement
#
# The book's all-reduce benchmark (`scripts/network/`) stores its results as JSON
# under `results/network/`. Here we use a run of the `gloo` backend with 2
# processes on one CPU machine: not a GPU cluster, but the same physics at a
# smaller scale, and anyone can reproduce it.
#
# With $n$ fixed, the ring model is linear in the two unknowns $\alpha$ and
# $1/\beta$:
#
# $$ T(S) = \underbrace{2(n-1)}_{c_1}\,\alpha + \underbrace{2\tfrac{n-1}{n}S}_{c_2(S)}\cdot\frac{1}{\beta}, $$
#
# so a linear least-squares fit over all measured sizes gives both. The times
# span several orders of magnitude, so we minimise the *relative* error (each row
# divided by its measured time); otherwise the largest messages would decide
# everything and $\alpha$ would come out as noise. For $n = 2$ every all-reduce
# algorithm does the same thing (each rank sends half of the buffer and receives
# the other half, then the reverse), so the algorithm gloo picks does not matter.
#
# The numbers printed below depend on the machine that ran the benchmark (they
# are masked when the notebook's outputs are tested; see `notebooks/README.md`).

# %%
RESULTS = "results/network/all_reduce_bench-cpu-gloo-2proc.json"


import os
import urllib.request

BOOK_SITE = os.environ.get("BOOK_SITE_URL", "http://127.0.0.1:8000/")


def book_file(rel):
    """The bytes of the book's file `rel` (a path such as "data/compute/accelerators.yml"): taken
    from next to this notebook, else from the book's repository when the notebook runs inside a
    clone, else downloaded from the book's website (BOOK_SITE; set BOOK_SITE_URL to change it)."""
    here = Path.cwd()
    for path in (here / Path(rel).name, *(folder / rel for folder in (here, *here.parents))):
        if path.is_file():
            return path.read_bytes()
    url = BOOK_SITE.rstrip("/") + "/" + rel
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.read()
    except OSError as err:
        raise FileNotFoundError(f"{rel} is not next to this notebook nor in a clone of the book, "
                                f"and {url} failed: {err}") from None


def fit_alpha_beta(n, size, t):
    """Least-squares fit of t = 2(n-1)·α + 2(n-1)/n·S/β, minimising relative error.

    Returns (alpha in s, beta in bytes/s).
    """
    size = np.asarray(size, dtype=float)
    t = np.asarray(t, dtype=float)
    a = np.column_stack([np.full_like(size, 2 * (n - 1)), 2 * (n - 1) / n * size])
    coef, *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    return coef[0], 1 / coef[1]


def sig2(x):
    """x rounded to 2 significant figures, without an exponent when possible."""
    return f"{float(f'{x:.2g}'):g}"


bench = json.loads(book_file(RESULTS))
n_meas = bench["world_size"]
rows = sorted(bench["results"], key=lambda r: r["size_bytes"])
s_meas = np.array([r["size_bytes"] for r in rows], dtype=float)
t_meas = np.array([r["time_us"] for r in rows]) * 1e-6
bb_meas = np.array([r["busbw_GBps"] for r in rows]) * 1e9

alpha_fit, beta_fit = fit_alpha_beta(n_meas, s_meas, t_meas)
rel_err = np.abs(t_ring(n_meas, s_meas, alpha_fit, beta_fit) / t_meas - 1)

print(f"benchmark: {bench['benchmark']}, backend {bench['backend']} on {bench['device']}, "
      f"{n_meas} ranks, {bench['dtype']}, {len(rows)} sizes from "
      f"{fmt_bytes(s_meas[0])} to {fmt_bytes(s_meas[-1])}")
print(f"fitted: α ≈ {sig2(alpha_fit * 1e6)} µs, β ≈ {sig2(beta_fit / 1e9)} GB/s, "
      f"α·β ≈ {sig2(alpha_fit * beta_fit / 1e3)} kB")
print(f"relative error of the fit: median ≈ {sig2(np.median(rel_err) * 100)} %, "
      f"max ≈ {sig2(rel_err.max() * 100)} %")
print("busbw column = algbw · 2(n−1)/n:",
      np.allclose(bb_meas, busbw(n_meas, s_meas, t_meas), rtol=0.05, atol=0.01e9))

# %% [markdown]
# The left panel shows the measured times with the fitted model and its two
# asymptotes; the right panel shows the measured busbw against the model's curve
# $\beta\,S/(S + n\alpha\beta)$. If the model fits, the measured points bend where
# the asymptotes cross, at $S \approx n\alpha\beta$, and busbw levels off near the
# fitted $\beta$. Deviations are informative: a bump at medium sizes usually means
# the library switched algorithm or protocol, and a busbw that falls at the
# largest sizes often means the buffers no longer fit in a cache.

# %% alt=["Two charts of the measured all-reduce benchmark (gloo on a CPU, 2 ranks) against the fitted ring model, message sizes 1 kB to 268 MB on a log axis. Left, time in \u00b5s on a log scale: the measured points scatter between about 400 and 1,700 \u00b5s up to about 1 MB, around the fitted flat latency term, then follow the bandwidth line of slope one. Right, busbw in GB/s: the measured points rise along the model's S curve from near zero below 100 kB to a plateau of about 1.5 GB/s, close to the fitted \u03b2 of about 1.6 GB/s."]
s_line = np.logspace(np.log10(s_meas[0]) - 0.3, np.log10(s_meas[-1]) + 0.3, 200)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
ax1.loglog(s_meas, t_meas * 1e6, "o", color="tab:blue", label="measured")
ax1.loglog(s_line, t_ring(n_meas, s_line, alpha_fit, beta_fit) * 1e6, color="black",
           label="fitted ring model")
ax1.loglog(s_line, np.full_like(s_line, 2 * (n_meas - 1) * alpha_fit * 1e6), ":",
           color="gray", label="latency term 2(n−1)α")
ax1.loglog(s_line, 2 * (n_meas - 1) / n_meas * s_line / beta_fit * 1e6, "--",
           color="gray", label="bandwidth term 2(n−1)/n·S/β")
ax1.set_ylim(t_meas.min() * 1e6 / 3, t_meas.max() * 1e6 * 3)
ax1.set_xlabel("message size S per rank (bytes)")
ax1.set_ylabel("time (µs)")
ax1.set_title(f"all-reduce, {bench['backend']} on {bench['device']}, n = {n_meas}")
ax1.legend(fontsize=8)

ax2.semilogx(s_meas, bb_meas / 1e9, "o", color="tab:blue", label="measured busbw")
ax2.semilogx(s_line, busbw(n_meas, s_line, t_ring(n_meas, s_line, alpha_fit, beta_fit)) / 1e9,
             color="black", label="model busbw")
ax2.axhline(beta_fit / 1e9, color="gray", ls=":", label="fitted β")
ax2.set_ylim(0, max(bb_meas.max(), beta_fit) / 1e9 * 1.15)
ax2.set_xlabel("message size S per rank (bytes)")
ax2.set_ylabel("busbw (GB/s)")
ax2.set_title("busbw: measured and fitted model")
ax2.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to remember
#
# * Time $\approx$ latency term + bandwidth term. Below $S \approx n\alpha\beta$
#   an all-reduce is latency-bound; bucketing small tensors together is the cure.
# * Compare **busbw** with the link bandwidth. For a ring it approaches $\beta$;
#   if a large all-reduce's busbw is far below the link's speed, look for a
#   problem in the hardware, the topology or the configuration.
# * A ring's latency grows as $2(n-1)\alpha$. At hundreds or thousands of ranks
#   that is milliseconds per all-reduce, which is why NCCL also has trees
#   ($2\lceil\log_2 n\rceil\alpha$) and picks between them by message size and
#   scale.
# * The model has no topology, contention or protocol switches: treat it as a
#   sanity check and a way to reason about trends, and measure the real thing.
