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
# # Pipeline schedules and the bubble
#
# Pipeline parallelism splits a model by depth into $p$ stages on $p$ GPUs and feeds
# them $m$ micro-batches. At the start and the end of every step some stages have
# nothing to do: the **pipeline bubble**. The Megatron-LM paper
# ([Narayanan et al. 2021](https://arxiv.org/abs/2104.04473), section 2.2) gives its
# size as a fraction of the ideal (bubble-free) time:
#
# $$ \frac{\text{bubble}}{\text{ideal}} = \frac{p-1}{m}\ \text{(GPipe and 1F1B)},\qquad
#    \frac{\text{bubble}}{\text{ideal}} = \frac{p-1}{v\,m}\ \text{(interleaved, } v \text{ chunks per GPU)}. $$
#
# Instead of trusting the formula, this notebook builds each schedule from its rules,
# simulates it, draws it as a timeline and measures the idle time. Nothing here is
# specific to a GPU; the times are in units of one micro-batch's forward pass through
# one stage.
#
# Schedules simulated:
#
# * **GPipe** ([Huang et al. 2018](https://arxiv.org/abs/1811.06965)): all forwards,
#   then all backwards.
# * **1F1B** (PipeDream-Flush, [Narayanan et al. 2021](https://arxiv.org/abs/2006.09503)):
#   stage $i$ runs $p-i-1$ warm-up forwards, then alternates one forward and one
#   backward, then drains.
# * **Interleaved 1F1B** ([Narayanan et al. 2021](https://arxiv.org/abs/2104.04473),
#   section 2.2.2): each GPU holds $v$ chunks of layers; GPU $d$ holds virtual stages
#   $d, d+p, \dots$. Micro-batches go through the chunks in groups of $p$.

# %%
import matplotlib.pyplot as plt
from matplotlib.patches import Patch
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})

# %% [markdown]
# ## The schedules as per-GPU operation lists
#
# A schedule is, for every GPU, the **order** in which it runs its operations. An
# operation is `(kind, micro-batch, chunk)` with kind `F` (forward) or `B` (backward).
# The order is all a schedule decides; the timing follows from the dependencies.

# %%
def gpipe(p, m, v=1):
    """All m forwards, then all m backwards, on every GPU."""
    return [[("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]
            for _ in range(p)]


def one_f_one_b(p, m, v=1):
    """PipeDream-Flush: p-d-1 warm-up forwards, then one forward / one backward, then drain."""
    orders = []
    for d in range(p):
        warm = min(p - d - 1, m)
        ops = [("F", mb, 0) for mb in range(warm)]
        f, b = warm, 0
        while f < m:
            ops += [("F", f, 0), ("B", b, 0)]
            f, b = f + 1, b + 1
        ops += [("B", mb, 0) for mb in range(b, m)]
        orders.append(ops)
    return orders


def interleaved(p, m, v):
    """Interleaved 1F1B with v chunks per GPU (m must be a multiple of p).

    The k-th forward of a GPU is micro-batch (k // (p v)) p + k % p on chunk (k // p) % v;
    backwards visit the chunks in reverse. Warm-up: 2(p - d - 1) + (v - 1) p forwards.
    """
    assert m % p == 0, "interleaving needs m to be a multiple of p"
    total = m * v

    def fwd(k):
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k):
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    orders = []
    for d in range(p):
        warm = min(2 * (p - d - 1) + (v - 1) * p, total)
        ops = [fwd(k) for k in range(warm)]
        f, b = warm, 0
        while f < total:
            ops += [fwd(f), bwd(b)]
            f, b = f + 1, b + 1
        ops += [bwd(k) for k in range(b, total)]
        orders.append(ops)
    return orders


# %% [markdown]
# ## The simulator
#
# Virtual stage $s = \text{chunk}\cdot p + d$. A forward of micro-batch $j$ on stage
# $s$ needs the forward of $j$ on stage $s-1$; a backward needs the backward of $j$ on
# stage $s+1$ (or, on the last stage, its own forward). Each GPU runs its list in
# order, starting each operation as soon as the GPU is free and the dependency is
# done. Forward takes $t_f/v$, backward $t_b/v$ (a chunk is $1/v$ of a stage), and
# communication is free. The simulator raises an error if a schedule deadlocks.

# %%
def simulate(orders, p, v, tf=1.0, tb=2.0):
    """Return a list of (gpu, kind, micro-batch, chunk, start, end) for the given orders."""
    last = p * v - 1
    done, free, pos, ops = {}, [0.0] * p, [0] * p, []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(p):
            if pos[d] == len(orders[d]):
                continue
            kind, mb, chunk = orders[d][pos[d]]
            s = chunk * p + d
            if kind == "F":
                dep = ("F", mb, s - 1) if s > 0 else None
            else:
                dep = ("B", mb, s + 1) if s < last else ("F", mb, s)
            if dep is not None and dep not in done:
                continue
            start = max(free[d], done[dep] if dep else 0.0)
            end = start + (tf if kind == "F" else tb) / v
            done[(kind, mb, s)] = free[d] = end
            ops.append((d, kind, mb, chunk, start, end))
            pos[d] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocks")
    return ops


def bubble_fraction(ops, m, tf=1.0, tb=2.0):
    """(bubble / ideal time, bubble / total time) for a simulated step."""
    total = max(o[5] for o in ops)
    ideal = m * (tf + tb)
    return (total - ideal) / ideal, (total - ideal) / total


def peak_in_flight(ops, gpu=0):
    """Largest number of forwards on `gpu` whose backward has not run yet (stored activations)."""
    level = peak = 0
    for o in sorted((o for o in ops if o[0] == gpu), key=lambda o: o[4]):
        level += 1 if o[1] == "F" else -1
        peak = max(peak, level)
    return peak


# %% [markdown]
# ## Timelines
#
# $p = 4$ GPUs, $m = 8$ micro-batches, backward twice as long as forward (the usual
# ratio: the backward pass computes two matrix products for every one of the forward
# pass). Blue boxes are forwards, orange boxes backwards, the number is the
# micro-batch; in the interleaved schedule the lighter shades are the second chunk.
# White space is the bubble.

# %% alt=["Three timelines of a pipeline step on 4 GPUs with 8 micro-batches, one row per GPU, forward passes as blue boxes and backward passes, twice as long, as orange boxes, numbered by micro-batch. GPipe runs all forwards and then all backwards, and 1F1B alternates them after a few forwards; both take 33 time units with a bubble of 0.375 of the ideal time, visible as white gaps at the start and end. Interleaved 1F1B with two chunks per GPU (lighter shades) takes 28.5 units and halves the bubble to 0.188."]
def draw(ax, ops, p, title):
    colors = {("F", 0): "#4c72b0", ("F", 1): "#8fb0de", ("B", 0): "#dd8452", ("B", 1): "#f2be9b"}
    for d, kind, mb, chunk, start, end in ops:
        ax.broken_barh([(start, end - start)], (p - 1 - d - 0.4, 0.8),
                       facecolors=colors[(kind, chunk % 2)], edgecolor="white", linewidth=0.5)
        ax.text((start + end) / 2, p - 1 - d, str(mb), ha="center", va="center", fontsize=7,
                color="white" if chunk % 2 == 0 else "black")
    ax.set_yticks(range(p), [f"GPU {p - 1 - i}" for i in range(p)])
    ax.set_title(title, loc="left")


P, M = 4, 8
cases = [("GPipe", gpipe(P, M), 1), ("1F1B", one_f_one_b(P, M), 1),
         ("interleaved 1F1B, v = 2", interleaved(P, M, 2), 2)]
fig, axes = plt.subplots(len(cases), 1, figsize=(10, 6.5), sharex=True)
for ax, (name, orders, v) in zip(axes, cases, strict=True):
    ops = simulate(orders, P, v)
    rel, _ = bubble_fraction(ops, M)
    draw(ax, ops, P, f"{name}: step = {max(o[5] for o in ops):g} time units, "
                     f"bubble = {rel:.3f} of ideal")
axes[-1].set_xlim(0, 34)
axes[-1].set_xlabel("time (units of one forward pass of one micro-batch through one stage)")
fig.legend(handles=[Patch(color="#4c72b0", label="forward"),
                    Patch(color="#dd8452", label="backward"),
                    Patch(color="#8fb0de", label="forward, chunk 2"),
                    Patch(color="#f2be9b", label="backward, chunk 2")],
           loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.02))
fig.tight_layout(rect=(0, 0.04, 1, 1))
plt.show()

# %% [markdown]
# GPipe and 1F1B take the same time: 1F1B changes the order, not the amount of idle
# time. Interleaving halves the bubble with $v = 2$.
#
# ## Checking the formulas
#
# For a grid of pipeline depths, micro-batch counts and chunk counts, compare the
# simulated bubble with $(p-1)/(vm)$ of the ideal time, and (for $v = 1$) with GPipe's
# form $(p-1)/(m+p-1)$ of the total. Both forward/backward ratios are tried: the
# formulas do not depend on it.

# %%
from fractions import Fraction

results = []
for p in (2, 4, 8):
    for m in (p, 2 * p, 4 * p, 8 * p):
        for tb in (1.0, 2.0):
            for name, fn, v in (("gpipe", gpipe, 1), ("1f1b", one_f_one_b, 1),
                                ("interleaved", interleaved, 2), ("interleaved", interleaved, 4)):
                ops = simulate(fn(p, m, v), p, v, tb=tb)
                rel, of_total = bubble_fraction(ops, m, tb=tb)
                ok = abs(rel - (p - 1) / (v * m)) < 1e-9
                if v == 1:
                    ok = ok and abs(of_total - (p - 1) / (m + p - 1)) < 1e-9
                results.append((name, p, m, v, tb, rel, ok))

print(f"{len(results)} simulated schedules")
print("bubble / ideal = (p-1)/(v m) in every case:", all(r[-1] for r in results))
for name, p, m, v in (("gpipe", 8, 16, 1), ("1f1b", 8, 16, 1), ("interleaved", 8, 16, 2),
                      ("interleaved", 8, 64, 4)):
    rel = next(r[5] for r in results if r[:4] == (name, p, m, v))
    print(f"{name:12s} p={p} m={m:2d} v={v}: bubble/ideal = {Fraction(rel).limit_denominator(1000)}"
          f" = {rel:.4f}")

# %% [markdown]
# ## Memory: micro-batches in flight
#
# A stage must keep a micro-batch's activations from its forward until its backward.
# GPipe keeps all $m$; 1F1B keeps at most $p$ on the first GPU (fewer on later ones),
# whatever $m$ is. That is the reason 1F1B replaced GPipe, and the reason $m$ can then
# be raised to shrink the bubble. The interleaved schedule stores chunk activations,
# each $1/v$ of a stage's; the count below is in chunks.

# %%
for m in (8, 16, 32):
    g = peak_in_flight(simulate(gpipe(4, m), 4, 1))
    f = peak_in_flight(simulate(one_f_one_b(4, m), 4, 1))
    i = peak_in_flight(simulate(interleaved(4, m, 2), 4, 2))
    print(f"p=4, m={m:2d}: GPipe {g:2d} micro-batches, 1F1B {f} micro-batches, "
          f"interleaved v=2 {i:2d} chunks (= {i / 2:g} stage-equivalents)")
print("1F1B keeps at most p micro-batches in flight on every GPU:",
      all(peak_in_flight(simulate(one_f_one_b(p, m), p, 1), d) <= p
          for p in (2, 4, 8) for m in (p, 4 * p) for d in range(p)))

# %% [markdown]
# ## How many micro-batches are enough?
#
# The bubble falls as $1/m$. With $p = 8$ stages, $m = 32$ micro-batches still waste
# 22% of the ideal time without interleaving; with $v = 4$ chunks the same $m$ wastes
# 5.5%. Since the global batch is (data-parallel degree) × $m$ × (micro-batch size),
# more micro-batches per pipeline means fewer data-parallel replicas for the same
# batch: pipeline depth, interleaving and data parallelism are chosen together.

# %% alt=["Chart of the pipeline bubble as a percentage of the ideal step time against micro-batches per step, 8 to 128, for 8 stages and 1, 2 or 4 chunks per GPU: lines for the formula (p \u2212 1)/(v m) and dots from the simulation, which lie on them. Without interleaving the bubble falls from about 88% at 8 micro-batches to about 5% at 128; two chunks halve it and four chunks quarter it."]
fig, ax = plt.subplots(figsize=(7, 4))
ms = list(range(8, 129, 8))
for v, style in ((1, "-"), (2, "--"), (4, ":")):
    sim = [bubble_fraction(simulate((one_f_one_b if v == 1 else interleaved)(8, m, v), 8, v),
                           m)[0] for m in ms]
    ax.plot(ms, [100 * x for x in sim], "o", ms=3, color="black" if v == 1 else None)
    ax.plot(ms, [100 * 7 / (v * m) for m in ms], style, label=f"(p-1)/(v m), v = {v}")
ax.set_xlabel("micro-batches per step m")
ax.set_ylabel("bubble, % of ideal step time")
ax.set_title("p = 8 stages: formula (lines) and simulation (dots)")
ax.set_ylim(0, 100)
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# ## What to remember
#
# * GPipe and 1F1B have the same bubble, $(p-1)/m$ of the ideal step time; 1F1B
#   bounds stored activations by $p$ micro-batches instead of $m$.
# * Interleaving with $v$ chunks per GPU divides the bubble by $v$, for $v$ times
#   more point-to-point messages.
# * Keep $m \ge 4p$, or interleave, or both; the simulation here assumes free
#   communication and perfectly balanced stages, so real bubbles are larger.
