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
# # Architecture comparison: where the parameters and the KV cache go
#
# This notebook runs the book's calculator, `scripts/models/model_calculator.py`, over every
# model of `data/models/architectures.yml` (open models' `config.json` values, each with its
# source) and shows three things the **Architecture** page of this part derives:
#
# 1. **Where the parameters sit**: embeddings, attention, MLP or experts. Small models with
#    large vocabularies spend a tenth of their parameters or more on embeddings; in a
#    mixture-of-experts (MoE) model the experts are almost everything.
# 2. **Total against active parameters**: memory pays for the total, FLOPs per token for the
#    active count.
# 3. **KV cache per token**: what multi-head, grouped-query and latent attention and sliding
#    windows do to it, and the context at which one sequence's cache outweighs the weights.
#
# Every number is arithmetic on published configs, so it is printed exactly.

# %%
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib_inline.backend_inline import set_matplotlib_formats

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


calc = book_module("scripts/models/model_calculator.py", "model_calculator")
models = calc.parse_models(book_file("data/models/architectures.yml").decode("utf-8"))
counts = {m["name"]: calc.count_params(m) for m in models}
names = [m["name"] for m in models]
print(f"{len(models)} models:", ", ".join(names))

# %% [markdown]
# ## Where the parameters sit
#
# The calculator splits each model into the input embedding, the output projection (zero
# when it is tied to the embedding, as in Gemma 2), attention, the dense MLP, the routed and
# shared experts (with their routers) and the norms. The shares below are of the total.

# %% alt=["Stacked horizontal bar chart of where the parameters sit in 17 models, as shares of the total: embeddings, attention, MLP and experts. In the dense models the MLP holds most parameters, about two thirds in Llama 2 7B and 13B and 60 to 86% in the others, attention most of the rest; embeddings reach 10 to 14% only in the 7B to 9B models with large vocabularies. In the mixture-of-experts models (Mixtral, Qwen3-30B-A3B, OLMoE, DeepSeek-V3) the experts hold 93 to 98%."]
GROUPS = {"embeddings": ("embedding", "output"), "attention": ("attention",),
          "MLP": ("mlp",), "experts": ("experts", "shared_experts", "router")}
share = {g: np.array([sum(counts[n][k] for k in keys) / counts[n]["total"] for n in names])
         for g, keys in GROUPS.items()}

largest_norms = max(counts[n]["norms"] / counts[n]["total"] for n in names)
print(f"norm weights: at most {100 * largest_norms:.3f}% of a model, left out below")
print(f"{'model':<16}{'total B':>9}" + "".join(f"{g:>12}" for g in GROUPS))
for i, n in enumerate(names):
    print(f"{n:<16}{counts[n]['total'] / 1e9:>9.2f}"
          + "".join(f"{100 * share[g][i]:>11.1f}%" for g in GROUPS))

fig, ax = plt.subplots(figsize=(8, 5.5))
left = np.zeros(len(names))
for g, color in zip(GROUPS, ("tab:gray", "tab:blue", "tab:orange", "tab:green"), strict=True):
    ax.barh(names, 100 * share[g], left=left, label=g, color=color)
    left += 100 * share[g]
ax.invert_yaxis()
ax.set_xlabel("share of total parameters (%)")
ax.set_xlim(0, 100)
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Read it from the top. The Llama 2 models give about 2/3 of each layer to the MLP
# ($3hf$ with $f \approx 2.7h$) and 1/3 to attention ($4h^2$); grouped-query attention in
# Llama 2 70B, Llama 3.1 and Qwen2.5 shrinks the K and V projections and their MLPs are wider,
# so attention falls to a sixth or less. Vocabularies of 128k to 256k tokens make embeddings
# a tenth of an 8B or 9B model (Gemma 2 ties input and output, so it pays once); at 405B the
# same vocabulary is 1%. In the MoE models the experts hold 93% to 98% of the parameters.

# %% [markdown]
# ## Total against active parameters
#
# A token passes through `num_experts_per_tok` routed experts (and the shared ones), so the
# FLOPs per token follow the active count, while every expert must sit in memory. The
# publishers' figures are printed next to ours (the tests check every one).

# %%
print(f"{'model':<16}{'total B':>9}{'active B':>10}{'active/total':>14}{'published':>16}")
for m in models:
    if not m["num_experts"]:
        continue
    c = counts[m["name"]]
    published = f"{m['published_total']} / {m['published_active']}"
    print(f"{m['name']:<16}{c['total'] / 1e9:>9.2f}{c['active'] / 1e9:>10.2f}"
          f"{c['active'] / c['total']:>14.3f}{published:>16}")

# %% [markdown]
# DeepSeek-V3 runs a token through 5.6% of its weights, Qwen3-30B-A3B through 11%, Mixtral
# through more than a quarter (2 of 8 experts, plus attention). The FLOPs per token of
# DeepSeek-V3 are those of a dense model of about 37B parameters, but serving it takes the
# memory of 671B.
#
# Two published active counts need a word. DeepSeek's "37B activated" matches the config only
# without the input embedding (36.6B; with it, 37.6B): publishers differ on whether a table
# lookup counts. Qwen's model card prints "3.3B activated" for Qwen3-30B-A3B; the config gives
# 3.35B with the embedding and 3.04B without, so the data file leaves that figure out.

# %% [markdown]
# ## KV cache per token
#
# In bf16 (2 bytes per value). Multi-head attention caches a key and a value for every head;
# grouped-query attention one per group; multi-head latent attention (MLA) one latent vector
# of `kv_lora_rank` values plus a shared rotary key per layer. The last column is the context
# at which one sequence's cache weighs as much as the model's weights in bf16: beyond it a
# single long request needs more memory for its cache than for the model ("never" when every
# layer keeps only a sliding window).

# %% alt=["Horizontal bar chart of the KV cache per token in KiB (bf16) for 17 models, coloured by attention type: multi-head attention (red) in Llama 2 7B and OLMo 2 7B at 512 KiB and Llama 2 13B at 800 KiB; grouped-query attention (blue) mostly 56 to 370 KiB, up to 504 KiB for Llama 3.1 405B; DeepSeek-V3's multi-head latent attention (green) about 69 KiB. The attention design sets the cache size far more than the model size."]
kv = {m["name"]: calc.kv_bytes_per_token(m, 2) for m in models}


def context_equal_to_weights(m):
    """The smallest context whose cache (bf16) reaches the weights (bf16), or None."""
    weights, low, high = 2 * counts[m["name"]]["total"], 1, 10**9
    if calc.kv_bytes(m, high, 2) < weights:
        return None
    while low < high:  # the cache grows with the context: bisect
        mid = (low + high) // 2
        low, high = (mid + 1, high) if calc.kv_bytes(m, mid, 2) < weights else (low, mid)
    return low



print(f"{'model':<16}{'attention':>10}{'KV bytes/token':>16}{'GB at 32k':>11}{'equal to weights at':>22}")
for m in models:
    n = m["name"]
    at_32k = calc.kv_bytes(m, 32768, 2) / 1e9
    breakeven = context_equal_to_weights(m)
    shown = "never" if breakeven is None else f"{breakeven:,} tok"
    print(f"{n:<16}{m['attention']:>10}{kv[n]:>16,}{at_32k:>11.2f}"
          f"{shown:>22}")

fig, ax = plt.subplots(figsize=(8, 5))
colors = {"MHA": "tab:red", "GQA": "tab:blue", "MLA": "tab:green"}
ax.barh(names, [kv[n] / 1024 for n in names],
        color=[colors[m["attention"]] for m in models])
ax.invert_yaxis()
ax.set_xlabel("KV cache per token, KiB (bf16)")
ax.legend(handles=[Patch(color=color, label=label) for label, color in colors.items()],
          frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Two things stand out. The cache per token is set by the attention design far more than by
# model size: Llama 2 7B (MHA) caches 512 KiB per token, more than Llama 3.1 405B (GQA with 8
# KV heads, 504 KiB), and DeepSeek-V3 (MLA) about 69 KiB. And the sliding windows of Mistral 7B
# and Gemma 2 cap part of the cache: at 32k tokens Mistral keeps only its 4,096-token window,
# Gemma 2 keeps the window in every other layer, so its cache grows at half the rate past
# 4,096 tokens.
