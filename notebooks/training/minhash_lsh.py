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
# # MinHash and LSH: how near-duplicate detection behaves
#
# Fuzzy deduplication of a pre-training corpus rests on two approximations.
# **MinHash** replaces each document's set of shingles by a short signature whose
# agreement rate estimates the Jaccard similarity of two documents, and **LSH
# banding** turns those signatures into a cheap candidate search whose probability
# of pairing two documents is an S-shaped function of their similarity. This
# notebook measures both, using the functions of the book's own tool,
# `scripts/training/minhash_dedup.py`, so that what you see here is what the tool
# does.
#
# What you should take away:
#
# 1. The MinHash estimate is unbiased and its error shrinks like
#    $1/\sqrt{k}$ with the number of hash functions $k$: four times the
#    signature for half the error.
# 2. Banding with $b$ bands of $r$ rows makes a pair a candidate with probability
#    $1-(1-s^r)^b$; the curve is steepest near $t=(1/b)^{1/r}$, and for a
#    fixed $k=br$ more rows per band make it steeper but move it right.
# 3. On the corpus the book ships, planted near-duplicates and unrelated
#    documents are far apart in Jaccard, so the threshold choice is easy there;
#    on real web data it is not, which is why you inspect pairs near the
#    threshold.
#
# Runs in a few seconds on a CPU.

# %%
import json
import random
import sys
from itertools import combinations
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib_inline.backend_inline import set_matplotlib_formats

# PNG (not SVG) plots: the PDF is built from the stored PNGs and SVG text
# differs from machine to machine.
set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})


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


def book_module(rel, name):
    """The book's Python file `rel` (found as by book_file) imported as the module `name`."""
    import types
    module = types.ModuleType(name)
    module.__file__ = rel
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(book_file(rel), rel, "exec"), module.__dict__)
    return module


mh = book_module("scripts/training/minhash_dedup.py", "minhash_dedup")

# %% [markdown]
# ## Jaccard similarity and the MinHash estimate
#
# A document becomes a set $A$ of shingles (here word 5-grams). Two documents
# are compared by their Jaccard similarity
#
# $$ J(A,B) = \frac{|A \cap B|}{|A \cup B|}. $$
#
# MinHash applies a random hash function $h$ to every shingle and keeps the
# smallest value. The smallest hash over $A \cup B$ is equally likely to
# belong to any of its elements, and the two minima agree exactly when it
# belongs to $A \cap B$, so
#
# $$ P\left[\min_{x\in A} h(x) = \min_{x\in B} h(x)\right] = J(A,B) $$
#
# ([Broder 1997](https://doi.org/10.1109/SEQUEN.1997.666900)). With $k$
# independent hash functions the fraction of agreeing positions $\hat J$ is a
# binomial proportion: unbiased, with standard error
# $\sqrt{J(1-J)/k}$. The tool uses the universal hashes
# $h_i(x) = (a_i x + b_i) \bmod (2^{61}-1)$, which are only approximately
# min-wise independent, so the check below is worth doing.
#
# We build pairs of sets with a chosen overlap (random strings, so nothing else
# is shared) and compare the estimate with the exact value.

# %%
K_MAX = 512
PARAMS = mh.hash_params(K_MAX, seed=1)


def pair_with_jaccard(rng: random.Random, j: float, size: int = 120):
    """Two sets of `size` random shingles sharing s of them, s/(2 size - s) ~ j."""
    shared = round(2 * size * j / (1 + j))
    common = {f"c{rng.random()}" for _ in range(shared)}
    a = common | {f"a{rng.random()}" for _ in range(size - shared)}
    b = common | {f"b{rng.random()}" for _ in range(size - shared)}
    return a, b


rng = random.Random(2026)
targets = np.linspace(0.0, 1.0, 41)
pairs = [pair_with_jaccard(rng, j) for j in targets for _ in range(2)]
exact = np.array([mh.jaccard(a, b) for a, b in pairs])
sigs = [(mh.signature(a, PARAMS), mh.signature(b, PARAMS)) for a, b in pairs]


def estimates(k: int) -> np.ndarray:
    """MinHash estimates with the first k of the K_MAX hash functions."""
    return np.array([mh.estimate_jaccard(sa[:k], sb[:k]) for sa, sb in sigs])


K = 128
est = estimates(K)
se = np.sqrt(exact * (1 - exact) / K)
inside = np.mean(np.abs(est - exact) <= 2 * se + 1e-12)
print(f"{len(pairs)} pairs, k = {K}")
print(f"share of estimates within 2 standard errors: {inside:.2f}")
print(f"mean error (estimate - exact): {np.mean(est - exact):+.4f}")

# %% alt=["Scatter plot of the MinHash estimate (k = 128) against the exact Jaccard similarity for 82 document pairs spanning 0 to 1, with the diagonal and a shaded band of \u00b12 standard errors, widest near 0.5 and narrowing to zero at 0 and 1. The points follow the diagonal and all but one lie inside the band."]
fig, ax = plt.subplots(figsize=(5.5, 5))
grid = np.linspace(0, 1, 200)
band = 2 * np.sqrt(grid * (1 - grid) / K)
ax.fill_between(grid, grid - band, grid + band, color="tab:blue", alpha=0.15,
                label=r"$\pm 2\sqrt{J(1-J)/k}$")
ax.plot(grid, grid, color="tab:blue", lw=1)
ax.scatter(exact, est, s=12, color="tab:red", label=f"MinHash estimate, k = {K}")
ax.set_xlabel("exact Jaccard similarity")
ax.set_ylabel("MinHash estimate")
ax.set_title("MinHash estimate vs exact Jaccard")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# ## Error against the number of hash functions
#
# The signature length $k$ sets both the memory (one 8-byte value per hash
# function per document, in the tool) and the error. Taking the first $k$
# values of the same 512-long signatures, the root-mean-square error over the
# pairs above follows the binomial prediction
# $\sqrt{\overline{J(1-J)}/k}$.

# %%
ks = np.array([8, 16, 32, 64, 128, 256, 512])
rmse = np.array([np.sqrt(np.mean((estimates(k) - exact) ** 2)) for k in ks])
predicted = np.sqrt(np.mean(exact * (1 - exact)) / ks)
for k, r, p in zip(ks, rmse, predicted, strict=True):
    print(f"k = {k:3d}: RMSE = {r:.4f}, binomial prediction = {p:.4f}")
slope = np.polyfit(np.log(ks), np.log(rmse), 1)[0]
print(f"log-log slope of RMSE vs k: {slope:.2f} (theory: -0.5)")

# %% alt=["Log-log chart of the root-mean-square error of the Jaccard estimate against the number of hash functions k, 8 to 512: the measured error falls from about 0.14 to about 0.018 along the dashed binomial prediction sqrt(mean J(1 \u2212 J)/k), slightly below it, with a slope of \u22120.5: four times the hash functions halve the error."]
fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(ks, rmse, "o-", color="tab:red", label="measured RMSE")
ax.loglog(ks, predicted, "--", color="tab:blue", label=r"$\sqrt{\overline{J(1-J)}/k}$")
ax.set_xticks(ks)
ax.set_xticklabels([str(k) for k in ks])
ax.set_xlabel("hash functions k (signature length)")
ax.set_ylabel("RMSE of the Jaccard estimate")
ax.set_title("MinHash error shrinks like 1/sqrt(k)")
ax.legend()
plt.show()

# %% [markdown]
# ## The LSH banding S-curve
#
# Comparing every pair of signatures is quadratic in the number of documents.
# LSH cuts each signature into $b$ bands of $r$ rows and only compares two
# documents that agree on all rows of at least one band. One band agrees with
# probability $s^r$, so
#
# $$ P(\text{candidate}) = 1 - (1 - s^r)^b , $$
#
# an S-curve whose steepest part lies near $t = (1/b)^{1/r}$
# ([Leskovec, Rajaraman and Ullman, *Mining of Massive Datasets*, section 3.4](http://www.mmds.org/)).
# Below, three ways of spending the same $k=128$ values, plus the
# $14 \times 8 = 112$ of FineWeb's pipeline
# ([datatrove `examples/fineweb.py`](https://github.com/huggingface/datatrove/blob/main/examples/fineweb.py)).
# The dots are measured: the share of our synthetic pairs that the tool's
# `lsh_candidates` actually pairs, for 16 bands of 8 rows.

# %% alt=["Chart of the probability that a pair becomes an LSH candidate against its Jaccard similarity for four band layouts: S curves whose steep part sits at the threshold (1/b)^(1/r), marked by dotted lines, 0.42 for 32 bands of 4 rows, 0.71 for 16 of 8, 0.72 for 14 of 8 (FineWeb's) and 0.88 for 8 of 16. Red dots, measured on the synthetic pairs for 16 bands of 8 rows, follow that layout's curve."]
configs = [(32, 4), (16, 8), (8, 16), (14, 8)]
s = np.linspace(0, 1, 400)
fig, ax = plt.subplots(figsize=(7, 4.5))
for (b, r), color in zip(configs, ["tab:green", "tab:red", "tab:purple", "tab:gray"], strict=True):
    t = mh.lsh_threshold(b, r)
    ax.plot(s, [mh.candidate_probability(x, b, r) for x in s], color=color,
            label=f"b={b}, r={r} (k={b * r}), t={t:.2f}")
    ax.axvline(t, color=color, ls=":", lw=1)
    print(f"b = {b:2d}, r = {r:2d}: threshold (1/b)^(1/r) = {t:.3f}; "
          f"P(candidate) at s=0.5: {mh.candidate_probability(0.5, b, r):.3f}, "
          f"at s=0.8: {mh.candidate_probability(0.8, b, r):.3f}")

# Measured candidate rate for b=16, r=8, in bins of exact similarity.
flat = [sig[:128] for pair in sigs for sig in pair]
cands = mh.lsh_candidates(flat, 16, 8)
hit = np.array([(2 * i, 2 * i + 1) in cands for i in range(len(pairs))], dtype=float)
bins = np.linspace(0, 1, 11)
which = np.clip(np.digitize(exact, bins) - 1, 0, 9)
centres = [(exact[which == i].mean(), hit[which == i].mean())
           for i in range(10) if np.any(which == i)]
ax.plot(*zip(*centres, strict=True), "o", color="tab:red", label="measured, b=16, r=8")
ax.set_xlabel("Jaccard similarity s")
ax.set_ylabel("P(pair becomes a candidate)")
ax.set_title("LSH banding: 1 - (1 - s^r)^b")
ax.legend(loc="upper left", fontsize=8)
plt.show()

# %% [markdown]
# Reading the curves (the printed values): with 32 bands of 4 rows, 87% of the
# pairs at $s=0.5$ become candidates (many candidates to verify, more work),
# while with 8 bands of 16 rows only 20% of the pairs at $s=0.8$ do (lost
# recall). 16 bands of 8 rows, the tool's default, pairs 6% at $s=0.5$ and 95%
# at $s=0.8$.
# The verification step (estimated or exact Jaccard against a threshold) removes
# false candidates but cannot recover missed ones, so choose $b$ and $r$ with
# the threshold a little to the left of the similarity you want to catch.

# %% [markdown]
# ## The shipped corpus
#
# The book ships a small synthetic corpus with planted near-duplicates
# (`data/training/corpus.jsonl`, see its README). Its exact pairwise Jaccard
# similarities show why the tool finds them easily: planted pairs sit between
# 0.6 and 1, everything else below 0.3.

# %%
docs = [json.loads(line) for line in
        book_file("data/training/corpus.jsonl").decode().splitlines()]
sets = [mh.shingles(d["text"]) for d in docs]
planted, other = [], []
for i, j in combinations(range(len(docs)), 2):
    g = docs[i]["truth_dup_group"]
    (planted if g is not None and g == docs[j]["truth_dup_group"] else other).append(
        mh.jaccard(sets[i], sets[j]))
planted, other = np.array(planted), np.array(other)
print(f"{len(docs)} documents, {len(planted) + len(other)} pairs")
print(f"planted duplicate pairs: {len(planted)}, Jaccard {planted.min():.2f} to "
      f"{planted.max():.2f}")
print(f"all other pairs: {len(other)}, Jaccard at most {other.max():.2f}")
print(f"other pairs with Jaccard > 0: {np.mean(other > 0):.3f}")

# %% alt=["Histogram, with a log count axis, of the exact Jaccard similarity (word 5-grams) of every pair of documents in the book's training corpus, with the tool's threshold of 0.7 dashed. About 21,000 other pairs lie between 0 and 0.3, most near 0; the 58 planted near-duplicates lie between about 0.6 and 1.0, most above the threshold and a few just below it."]
fig, ax = plt.subplots(figsize=(7, 3.8))
edges = np.linspace(0, 1, 51)
ax.hist(other, bins=edges, color="tab:gray", label="other pairs")
ax.hist(planted, bins=edges, color="tab:red", label="planted near-duplicates")
ax.axvline(0.7, color="k", ls="--", lw=1, label="tool threshold 0.7")
ax.set_yscale("log")
ax.set_xlabel("exact Jaccard similarity (word 5-grams)")
ax.set_ylabel("pairs (log scale)")
ax.set_title("Pairwise similarity in data/training/corpus.jsonl")
ax.legend()
plt.show()
