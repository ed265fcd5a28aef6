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
# # Memory breakdown: ZeRO stages, model size and activations
#
# This notebook draws the terms of the book's Memory anatomy page with the
# book's estimator, `scripts/training/memory_estimator.py`, imported as a module:
# the numbers come from the same functions the command line and the tests use.
#
# What you should take away:
#
# 1. With mixed-precision Adam, **optimizer states are three quarters** of the model
#    states (12 of 16 bytes per parameter), so ZeRO stage 1 gives most of the saving.
# 2. Only **ZeRO-3 / FSDP** makes the model states shrink without limit as GPUs are
#    added; stages 1 and 2 level off at 4 and 2 bytes per parameter.
# 3. **Activations** depend on the sequence, not on the parameter count: the
#    attention scores grow with its square and dominate at long sequences unless
#    selective recomputation or flash attention removes them.

# %%
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
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


est = book_module("scripts/training/memory_estimator.py", "memory_estimator")
GB, GIB = 1e9, 2**30

# %% [markdown]
# ## The ZeRO paper's example
#
# Figure 1 of [Rajbhandari et al. 2019](https://arxiv.org/abs/1910.02054): a 7.5B-parameter
# model, mixed-precision Adam ($2 + 2 + 12$ bytes per parameter), 64 data-parallel GPUs.
# Stage 1 shards the optimizer states, stage 2 also the gradients, stage 3 also the
# weights. The paper prints 120, 31.4, 16.6 and 1.9 GB per GPU.

# %% alt=["Stacked bar chart of the model states per GPU of a 7.5B model on 64 GPUs with mixed-precision Adam, split into weights, gradients and optimizer states: 120 GB for baseline data parallelism (90 GB of them optimizer states), 31.4 GB with ZeRO-1, 16.6 GB with ZeRO-2 and 1.9 GB with ZeRO-3, the numbers of the ZeRO paper."]
params, dp = 7.5e9, 64
terms = ("weights", "gradients", "optimizer_states")
rows = [est.model_state_bytes(params, "mixed", "adamw", zero=z, dp=dp) for z in range(4)]
for z, r in enumerate(rows):
    parts = ", ".join(f"{t.replace('_', ' ')} {r[t] / GB:.2f}" for t in terms)
    print(f"stage {z}: {r['model_states'] / GB:6.2f} GB/GPU ({parts})")

fig, ax = plt.subplots(figsize=(7, 3.6))
bottom = np.zeros(4)
for t, color in zip(terms, ("tab:blue", "tab:orange", "tab:green"), strict=True):
    vals = np.array([r[t] / GB for r in rows])
    ax.bar(["baseline DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"], vals, bottom=bottom,
           label=t.replace("_", " "), color=color)
    bottom += vals
for i, total in enumerate(bottom):
    ax.text(i, total + 2, f"{total:.1f}", ha="center")
ax.set_ylabel("GB per GPU (1 GB = 1e9 bytes)")
ax.set_title("Model states of a 7.5B model on 64 GPUs (mixed-precision Adam)")
ax.set_ylim(0, 135)
ax.legend()
plt.show()

# %% [markdown]
# ## Model size against ZeRO stage
#
# Model states per GPU for models from 1B to 1T parameters on 512 GPUs, against an
# 80 GiB GPU (the dashed line; activations and buffers need room too). Stage 1 and 2
# curves are straight lines of slope one: their unsharded weights (and gradients)
# grow with the model whatever the GPU count.

# %% alt=["Log-log chart of model states per GPU (GiB) against model size, 1B to 1T parameters, for mixed-precision Adam on 512 data-parallel GPUs, one straight line per ZeRO stage, with a dashed line at 80 GiB. Plain data parallelism crosses 80 GiB at about 5B parameters, stage 1 at about 20B and stage 2 at about 40B, while stage 3 stays below 80 GiB up to 1T, about 30 GiB there."]
sizes = np.logspace(9, 12, 31)
dp = 512
fig, ax = plt.subplots(figsize=(7, 4))
for z, style in zip(range(4), ("-", "--", "-.", ":"), strict=True):
    per_gpu = [est.model_state_bytes(n, "mixed", "adamw", zero=z, dp=dp)["model_states"] / GIB
               for n in sizes]
    ax.loglog(sizes, per_gpu, style, label=f"ZeRO stage {z}" if z else "plain DP")
ax.axhline(80, color="grey", ls="--", lw=1)
ax.text(1.1e9, 95, "80 GiB", color="grey")
ax.set_xlabel("parameters")
ax.set_ylabel("model states per GPU (GiB)")
ax.set_title(f"Mixed-precision Adam, {dp} data-parallel GPUs")
ax.legend()
plt.show()

for z in range(4):
    # the largest model whose model states alone fit in 80 GiB with 512 GPUs
    fits = [n for n in sizes
            if est.model_state_bytes(n, "mixed", "adamw", zero=z, dp=dp)["model_states"]
            <= 80 * GIB]
    print(f"stage {z}: largest size on the grid that fits = {max(fits) / 1e9:.0f}B parameters")

# %% [markdown]
# ## Activations per layer against sequence length
#
# [Korthikanti et al. 2022](https://arxiv.org/abs/2205.05198): a layer keeps
# $sbh(34 + 5as/h)$ bytes without recomputation; selective recomputation (or flash
# attention) removes the $5as/h$ term; full recomputation keeps only the layer input,
# $2sbh$; tensor parallelism with sequence parallelism divides everything by $t$.
# Shape of a 7B-class model: $h = 4096$, $a = 32$, micro-batch 1.

# %% alt=["Log-log chart of the activation memory of one transformer layer (GiB; h = 4096, 32 heads, micro-batch 1) against sequence length, 512 to 32,768 tokens. Without recomputation it grows faster than linearly, from about 0.1 GiB to about 176 GiB, because of the attention scores; selective recomputation makes it linear, up to about 4 GiB; tensor parallelism of 8 with sequence parallelism divides that by 8; full recomputation keeps only the layer input, the lowest line, about 0.25 GiB at 32,768 tokens."]
h, a, b = 4096, 32, 1
seqs = 2 ** np.arange(9, 16)
cases = [("no recomputation", dict()),
         ("selective recomputation", dict(recompute="selective")),
         ("full recomputation", dict(recompute="full")),
         ("TP 8 + SP, selective", dict(tp=8, sequence_parallel=True, recompute="selective"))]
fig, ax = plt.subplots(figsize=(7, 4))
for label, kw in cases:
    ax.loglog(seqs, [est.activation_bytes_per_layer(int(s), b, h, a, **kw) / GIB for s in seqs],
              "o-", label=label, base=2)
ax.set_xlabel("sequence length s (tokens)")
ax.set_ylabel("activations per layer (GiB)")
ax.set_title("One transformer layer, h = 4096, a = 32, b = 1")
ax.legend()
plt.show()

s = 4096
full = est.activation_bytes_per_layer(s, b, h, a)
sel = est.activation_bytes_per_layer(s, b, h, a, recompute="selective")
print(f"s = {s}: 5as/h = {5 * a * s / h:.0f} against 34; the attention scores are "
      f"{(full - sel) / full:.0%} of the layer's activations")

# %% [markdown]
# ## Everything on one GPU
#
# The whole budget of one GPU for a 7B-class model (32 layers, vocabulary 32000,
# sequence 4096, micro-batch 1, Megatron-style bf16 with fp32 gradients, 8 GPUs), as the
# ZeRO stage and the recomputation mode change. The ZeRO-3 bars include two gathered
# layers of bf16 weights ("temporary").

# %% alt=["Stacked bar chart of the memory per GPU (GiB) of a 7B-class model on 8 GPUs at a sequence length of 4,096, split into weights, gradients, optimizer states, activations and temporary buffers, for ZeRO stages 0, 1 and 3 without and with selective recomputation, with a dashed line at 80 GiB. Without recomputation activations dominate and every configuration exceeds 80 GiB (208, 144 and 112 GiB); with selective recomputation ZeRO-1 (64 GiB) and ZeRO-3 (32 GiB) fit."]
model = est.Model(layers=32, hidden=4096, heads=32, vocab=32000, seq=4096, micro_batch=1,
                  ffn=4 * 4096)
configs = [(z, r) for r in ("none", "selective") for z in (0, 1, 3)]
labels, stacks = [], []
for z, r in configs:
    e = est.estimate(model=model, recipe="bf16-fp32-grads", zero=z, dp=8, recompute=r)
    b_ = e["per_gpu_bytes"]
    labels.append(f"ZeRO-{z}\n{r}")
    stacks.append([b_[k] / GIB for k in ("weights", "gradients", "optimizer_states",
                                         "activations", "temporary")])
stacks = np.array(stacks)
fig, ax = plt.subplots(figsize=(8, 4))
bottom = np.zeros(len(configs))
names = ("weights", "gradients", "optimizer states", "activations", "temporary")
for i, name in enumerate(names):
    ax.bar(labels, stacks[:, i], bottom=bottom, label=name)
    bottom += stacks[:, i]
ax.axhline(80, color="grey", ls="--", lw=1)
ax.set_ylabel("GiB per GPU")
ax.set_title("7B-class model, 8 GPUs, s = 4096")
ax.legend(fontsize=8, ncol=2)
plt.show()
for label, total in zip(labels, bottom, strict=True):
    verdict = "fits" if total < 80 else "does not fit"
    print(f"{label.replace(chr(10), ', ')}: {total:.1f} GiB, {verdict} in 80 GiB")
