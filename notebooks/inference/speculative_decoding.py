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
# # Speculative decoding: expected speedup against acceptance rate and draft length
#
# The **Speculative decoding** page of this part derives two formulas from Leviathan, Kalman and
# Matias (2023, [arXiv:2211.17192](https://arxiv.org/abs/2211.17192)). With a draft whose
# tokens the target accepts with probability $\alpha$, independently, and $k$ drafted tokens
# per round:
#
# $$E(\alpha, k) = \frac{1-\alpha^{k+1}}{1-\alpha}$$
#
# tokens per pass of the target model, and, if one draft step costs $c$ target steps,
#
# $$S(\alpha, k, c) = \frac{1-\alpha^{k+1}}{(1-\alpha)(kc+1)}$$
#
# times the speed of plain decoding. This notebook draws both, checks the first against a
# simulation of the acceptance process, shows what happens when acceptance is not the same in
# every round, and places the points measured by `scripts/inference/speculative_decoding.py`
# on the CPU.

# %% alt=["Line chart of the expected tokens per target pass E(\u03b1, k) against the draft length k from 1 to 16, one curve per acceptance rate \u03b1 from 0.5 to 0.95. Every curve rises and then flattens toward 1/(1 \u2212 \u03b1): 2 tokens at \u03b1 = 0.5 (reached by k = 6), 5 at \u03b1 = 0.8, while at \u03b1 = 0.95 it is still rising at about 11.6 when k = 16."]
import json
import os
import urllib.request
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})


def tokens_per_pass(alpha, k):
    """E(alpha, k): expected tokens per target pass (Leviathan et al. 2023, Equation 1)."""
    alpha = np.asarray(alpha, dtype=float)
    return np.where(alpha < 1, (1 - alpha ** (k + 1)) / np.where(alpha < 1, 1 - alpha, 1), k + 1)


def speedup(alpha, k, c):
    """S(alpha, k, c): expected speedup over plain decoding, a draft step costing c target steps."""
    return tokens_per_pass(alpha, k) / (k * c + 1)


ks = np.arange(1, 17)
fig, ax = plt.subplots(figsize=(7, 4))
for alpha in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
    ax.plot(ks, tokens_per_pass(alpha, ks), "o-", ms=3, label=f"α = {alpha}")
ax.set_xlabel("draft length k")
ax.set_ylabel("tokens per target pass E(α, k)")
ax.legend(frameon=False, ncol=2)
fig.tight_layout()
plt.show()
for alpha in (0.5, 0.8, 0.9):
    print(f"alpha {alpha}: limit 1/(1-alpha) = {1 / (1 - alpha):.1f} tokens; "
          + ", ".join(f"k={k}: {float(tokens_per_pass(alpha, k)):.2f}" for k in (1, 2, 4, 8)))

# %% [markdown]
# Every curve saturates at $1/(1-\alpha)$: at $\alpha = 0.5$ no draft length gives more than 2
# tokens per pass, at $\alpha = 0.9$ up to 10. Beyond a handful of drafted tokens the next one
# is rarely reached, since all the ones before it must be accepted first.
#
# ## The speedup, and the best draft length
#
# Drafting is not free. For two draft costs $c$ (a draft step at 5% and at 20% of a target
# step), the speedup over $\alpha$ and $k$, with the best $k$ for each $\alpha$ marked:

# %% alt=["Two heat maps of the speedup S(\u03b1, k, c) over acceptance rate \u03b1 (0.3 to 0.98, x axis) and draft length k (1 to 16, y axis), for a draft step costing 5% (left) and 20% (right) of a target step, colour from 0.5 to 5. A white contour marks a speedup of 1: long drafts at low \u03b1, to its upper left, are slower than plain decoding, a region much larger at c = 0.2. A red staircase marks the best k for each \u03b1, rising from 2 to 16 with the cheap draft and from 1 to about 7 at \u03b1 = 0.9 with the expensive one."]
alphas = np.linspace(0.3, 0.98, 69)
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, c in zip(axes, (0.05, 0.2), strict=True):
    grid = np.array([[speedup(a, k, c) for a in alphas] for k in ks])
    mesh = ax.pcolormesh(alphas, ks, grid, shading="nearest", cmap="viridis", vmin=0.5, vmax=5)
    ax.contour(alphas, ks, grid, levels=[1.0], colors="white", linewidths=1.5)
    best = ks[np.argmax(grid, axis=0)]
    ax.plot(alphas, best, "r-", lw=1.5, label="best k")
    ax.set_title(f"speedup S(α, k, c = {c})")
    ax.set_xlabel("acceptance rate α")
    ax.legend(frameon=False, loc="upper left")
axes[0].set_ylabel("draft length k")
fig.colorbar(mesh, ax=axes, label="speedup (white line: 1, no gain)")
plt.show()
print(f"{'alpha':>6}{'best k, c=0.05':>16}{'S':>6}{'best k, c=0.2':>15}{'S':>6}")
for a in (0.5, 0.6, 0.7, 0.8, 0.9):
    row = [(ks[np.argmax(speedup(a, ks, c))], speedup(a, ks, c).max()) for c in (0.05, 0.2)]
    print(f"{a:>6}{row[0][0]:>16}{row[0][1]:>6.2f}{row[1][0]:>15}{row[1][1]:>6.2f}")

# %% [markdown]
# A cheap draft tolerates long drafts and pays off even at modest acceptance; an expensive one
# (a fifth of the target's step) needs $\alpha$ well above one half to help at all, and its
# best draft is short. Below the white line speculation makes decoding slower.
#
# ## Checking the formula, and its assumption
#
# The formula assumes every drafted token is accepted with the same probability, independently.
# A direct simulation of that process: draw acceptances until the first rejection or $k$
# acceptances, count the tokens emitted (accepted ones, plus one from the target).

# %%
rng = np.random.default_rng(0)


def simulate_rounds(alphas_per_round, k):
    """Mean tokens per round when round i accepts each drafted token with alphas_per_round[i]."""
    accepted = rng.random((len(alphas_per_round), k)) < np.asarray(alphas_per_round)[:, None]
    run = np.cumprod(accepted, axis=1).sum(axis=1)  # accepted before the first rejection
    return float(np.mean(run + 1))


rounds = 200_000
print(f"{'k':>3}{'alpha':>7}{'formula':>9}{'simulated':>11}")
for k in (1, 4, 8):
    for a in (0.6, 0.9):
        print(f"{k:>3}{a:>7}{float(tokens_per_pass(a, k)):>9.3f}"
              f"{simulate_rounds(np.full(rounds, a), k):>11.3f}")

# %% [markdown]
# With a constant $\alpha$ the simulation agrees within 0.005 tokens. Real acceptance is not
# constant: a draft predicts boilerplate almost perfectly and the interesting tokens poorly. Let
# $\alpha$ vary from round to round with the same mean, here drawn from a Beta distribution
# with mean 0.7:

# %%
mean_alpha = 0.7
print(f"{'spread':>22}{'k':>3}{'formula at mean α':>19}{'simulated':>11}")
for label, a, b in (("constant", None, None), ("Beta(7, 3)", 7, 3), ("Beta(1.4, 0.6)", 1.4, 0.6)):
    per_round = np.full(rounds, mean_alpha) if a is None else rng.beta(a, b, rounds)
    for k in (2, 8):
        print(f"{label:>22}{k:>3}{float(tokens_per_pass(mean_alpha, k)):>19.3f}"
              f"{simulate_rounds(per_round, k):>11.3f}")

# %% [markdown]
# The more acceptance varies between rounds, the more the formula at the mean $\alpha$
# *underestimates* the tokens per pass for long drafts: rounds with $\alpha$ near 1 run through
# the whole draft, and they gain more than the rounds with low $\alpha$ lose. The measured
# acceptance rate (accepted over tested drafts, those up to the first rejection) is itself
# biased toward the rounds that tested the most tokens. Compare a measurement with the formula,
# then, as a sanity check, not as an
# identity; the script prints both.
#
# ## Measured on a CPU
#
# `scripts/inference/speculative_decoding.py` trains a target and a smaller draft on the book's
# corpus and decodes held-out prompts with each draft length; its recorded run:

# %% alt=["Two charts of the measured CPU run against the formulas, draft length k from 1 to 16 on a log scale. Left: tokens per target pass measured at k = 1, 2, 4, 8 (1.6 to 2.9) follow the curve E(\u03b1, k) for the mean measured \u03b1, a little below it for long drafts. Right: the speedup over the target alone predicted by S(\u03b1, k, c) peaks near 1.25 and falls below 1 after k = 4; the measured wall-clock speedup is about 1.0 at k = 1 and 2 and drops to 0.9 and 0.7 at k = 4 and 8, close to the prediction that uses the measured cost of a verify pass."]
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


measured = json.loads(book_file("results/inference/speculative_decoding-cpu.json"))
c = measured["baseline"]["c"]
runs = measured["results"]
print(f"target {measured['models']['target']['parameters']:,} parameters, draft "
      f"{measured['models']['draft']['parameters']:,}; {measured['settings']['mode']} decoding; "
      f"a draft step costs c ≈ {c:.2f} target steps")
print(f"{'k':>3}{'alpha':>9}{'tokens/pass':>14}{'E(alpha, k)':>14}{'speedup':>10}"
      f"{'S(alpha, k, c)':>17}{'same output':>13}")
for r in runs:
    print(f"{r['k']:>3} ≈ {r['alpha']:>6.2f} ≈ {r['tokens_per_target_pass']:>11.2f} "
          f"≈ {r['formula_tokens_per_pass']:>11.2f} ≈ {r['speedup']:>7.2f} "
          f"≈ {r['predicted_speedup']:>14.2f}{r['identical_to_target']:>9}/{r['prompts']}")

fig, (ax_e, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
k_measured = np.array([r["k"] for r in runs])
alpha_mean = float(np.mean([r["alpha"] for r in runs]))
ax_e.plot(ks, tokens_per_pass(alpha_mean, ks), "-", label="E(α, k), α = mean measured")
ax_e.plot(k_measured, [r["tokens_per_target_pass"] for r in runs], "o", label="measured")
ax_e.set_xlabel("draft length k")
ax_e.set_ylabel("tokens per target pass")
ax_s.plot(ks, speedup(alpha_mean, ks, c), "-", label="S(α, k, c), measured α and c")
ax_s.plot(k_measured, [r["predicted_speedup_v"] for r in runs], "s", mfc="none",
          label="S with the measured cost of a verify pass")
ax_s.plot(k_measured, [r["speedup"] for r in runs], "o", label="measured (wall clock)")
ax_s.axhline(1, color="grey", lw=1)
ax_s.set_xlabel("draft length k")
ax_s.set_ylabel("speedup over the target alone")
for ax in (ax_e, ax_s):
    ax.set_xscale("log", base=2)
    ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# Three things show. The tokens per target pass follow the formula's shape, a little below it
# for long drafts, where the formula's assumption of one constant, independent $\alpha$
# matters most (see above). Greedy speculative decoding returns exactly the target's
# own output on every prompt, as the **Speculative decoding** page proves. And the wall-clock
# speedup is small, or below 1 (slower than the target alone): the draft here is a third of the
# target's cost, not the few
# percent the surface above needs, and on a CPU a verify pass over $k+1$ positions costs
# noticeably more than one decode step (the square markers put that measured cost into the
# formula, which brings it closer to the wall clock). On a GPU a small batch's decode step is
# memory-bound, so verifying $k+1$ tokens costs nearly the same as one, the assumption the
# formula makes.
