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
# # Training metrics: reading a run's log
#
# This notebook reads the metrics log that the book's training example,
# `scripts/training/train_example.py`, wrote with `--metrics-jsonl` during a recorded run
# (200 DDP steps of a tiny transformer on two CPU processes, warmup plus cosine schedule,
# gradient clipping at 1.0; the command is in `results/training/README.md`) and plots what
# the **Training metrics** page asks you to watch. The file is committed, so every
# printed number is fixed.
#
# What you should take away:
#
# 1. The **loss** falls to the entropy floor of the synthetic data, which we can compute, and
#    then only fluctuates around it: a plateau at a known floor is success, not a stall.
# 2. The **gradient norm** drops by a factor of about four once the model has learnt the data's
#    structure; per-block norms move together, with the first block the largest.
# 3. The **update-to-weight ratio** tracks the learning rate: it rises during warmup and falls
#    with the cosine decay.
# 4. **Throughput** varies with the load of the shared machine that recorded the run, but the
#    **data-loading share** stays under 4% of the step: the input pipeline does not limit it.

# %%
import json
import math
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


RUN = "results/training/train_example-cpu-metrics.jsonl"
records = [json.loads(line) for line in book_file(RUN).decode("utf-8").splitlines()]
steps = np.array([r["step"] for r in records])


def column(key):
    return np.array([r[key] for r in records], dtype=float)


print(f"{len(records)} logged steps, from step {steps[0]} to {steps[-1]}")
print("keys:", ", ".join(records[0]))

# %% [markdown]
# ## Loss against the entropy floor
#
# The example's data are synthetic: each token is followed by a fixed successor with
# probability 0.9 and by a uniformly random token otherwise (vocabulary $V = 256$). A perfect
# model predicts the successor with probability $p = 0.9 + 0.1/V$ and any other token with
# $q = 0.1/V$, so no model can go below the conditional entropy
#
# $$ H = -p \ln p - (V - 1)\, q \ln q . $$
#
# The loss starts at $\ln V$ (a uniform guess) and the interesting question is how fast it
# reaches $H$.

# %% alt=["Line chart of the recorded run's cross-entropy loss (nats, mean over ranks) over 200 steps: it starts at about 5.7, near ln V = 5.55 (a uniform guess, dotted line), falls steeply to within 10% of the entropy floor of 0.88 (dashed line) by step 30, and then stays just above the floor, about 0.93 on average."]
V = 256
q = 0.1 / V
p = 0.9 + q
floor = -p * math.log(p) - (V - 1) * q * math.log(q)
loss = column("loss")
print(f"ln V = {math.log(V):.3f} nats; first logged loss = {loss[0]:.3f}")
print(f"entropy floor H = {floor:.3f} nats")
near = steps[np.argmax(loss < 1.1 * floor)]
print(f"first logged step within 10% of the floor: {near}")
print(f"mean loss over the last 100 steps = {loss[steps > 100].mean():.3f} "
      f"({loss[steps > 100].mean() / floor:.3f} x the floor)")

fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot(steps, loss, marker=".", label="loss (mean over ranks)")
ax.axhline(floor, color="grey", ls="--", lw=1, label=f"entropy floor {floor:.2f}")
ax.axhline(math.log(V), color="grey", ls=":", lw=1, label=f"ln V = {math.log(V):.2f}")
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy (nats)")
ax.set_title("Loss of the recorded run")
ax.legend()
plt.show()

# %% [markdown]
# ## Learning rate, gradient norms and update-to-weight ratios
#
# The learning rate is logged as the optimizer used it. The gradient norm is the global L2
# norm before clipping, split into one norm per transformer block and one for everything else
# (embeddings, final norm, output head); the squares of the parts add up to the square of the
# whole. The update-to-weight ratio is $\lVert \Delta w \rVert / \lVert w \rVert$ per block
# for the optimizer step of the logged step; the dashed line marks $10^{-3}$, the rule of
# thumb discussed on the page.

# %% alt=["Three charts over 200 steps of the recorded run. Left: the learning rate warms up to 3e-3 at step 20 and follows a cosine down to 3e-4. Middle, log scale: the global gradient norm before clipping falls from about 0.6 to about 0.16 by step 35 and stays there, with the per-block norms (about 0.04 to 0.07) and the embeddings-and-head norm (about 0.12) below it. Right, log scale: the update-to-weight ratio of every block peaks at about 0.024 at step 20 and then falls with the learning rate, crossing the dashed 1e-3 line near the end."]
lr = column("lr")
gnorm = column("grad_norm")
blocks = np.array([r["grad_norm_blocks"] for r in records])
other = column("grad_norm_other")
ratio = np.array([r["update_ratio_blocks"] for r in records])
parts = np.sqrt((blocks ** 2).sum(axis=1) + other ** 2)
print(f"peak learning rate {lr.max():.1e} at step {steps[lr.argmax()]}; "
      f"last {lr[-1]:.1e} ({lr[-1] / lr.max():.2f} x the peak)")
print("global norm equals the norm of its parts:", bool(np.allclose(parts, gnorm, rtol=1e-5)))
print(f"largest gradient norm {column('grad_norm_max').max():.3f}; "
      f"steps clipped at 1.0: {records[-1]['clipped_steps']}; "
      f"loss spikes counted: {records[-1]['loss_spikes']}")
late = steps > 100
print(f"gradient norm, first log {gnorm[0]:.3f}, mean after step 100 {gnorm[late].mean():.3f}")
print("block gradient norms after step 100 (mean):",
      ", ".join(f"{v:.3f}" for v in blocks[late].mean(axis=0)))
r_mean = ratio.mean(axis=1)
print(f"update/weight ratio: max {r_mean.max():.4f} at step {steps[r_mean.argmax()]}, "
      f"last {r_mean[-1]:.4f}")
print(f"correlation of the mean ratio with the learning rate = "
      f"{np.corrcoef(r_mean, lr)[0, 1]:.2f}")

fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
axes[0].plot(steps, lr * 1e3)
axes[0].set_ylabel("learning rate (x 1e-3)")
axes[0].set_title("Warmup + cosine schedule")
axes[1].semilogy(steps, gnorm, color="black", lw=2, label="global")
for i in range(blocks.shape[1]):
    axes[1].semilogy(steps, blocks[:, i], lw=1, label=f"block {i}")
axes[1].semilogy(steps, other, lw=1, ls="--", label="embeddings + head")
axes[1].set_title("Gradient norm (before clipping)")
axes[1].legend(fontsize=8)
for i in range(ratio.shape[1]):
    axes[2].semilogy(steps, ratio[:, i], lw=1, label=f"block {i}")
axes[2].axhline(1e-3, color="grey", ls="--", lw=1)
axes[2].set_title("Update / weight ratio per block")
axes[2].legend(fontsize=8)
for ax in axes:
    ax.set_xlabel("step")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Throughput and data-loading time
#
# `tokens_per_s` is global (both ranks) and `step_ms`/`data_ms` are means over the steps
# since the previous log line. The run shared a 2-core machine with other jobs, so these
# numbers are noisy; what matters is that the data share stays small and flat.

# %% alt=["Two charts over 200 steps of the recorded run on a shared 2-core machine. Left: throughput in thousands of tokens per second for both ranks, noisy between about 12 and 22 thousand. Right: the share of each step spent loading data, flat between about 1.3% and 3.2%: data loading is not the bottleneck."]
tok_s = column("tokens_per_s")
step_ms = column("step_ms")
data_ms = column("data_ms")
share = 100 * data_ms / step_ms
print(f"median tokens/s (steps after the first) = {np.median(tok_s[1:]):.0f}")
print(f"median data-loading share = {np.median(share[1:]):.1f}% of the step; "
      f"max {share[1:].max():.1f}%")
print(f"peak RSS at the end = {records[-1]['peak_rss_mib']:.0f} MiB per process")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
axes[0].plot(steps[1:], tok_s[1:] / 1e3)
axes[0].set_ylabel("tokens/s (thousands, both ranks)")
axes[0].set_title("Throughput")
axes[1].plot(steps[1:], share[1:], color="tab:red")
axes[1].set_ylabel("data time (% of step)")
axes[1].set_ylim(0, max(10, share[1:].max() * 1.2))
axes[1].set_title("Data-loading share")
for ax in axes:
    ax.set_xlabel("step")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to try
#
# Re-run the example with a learning rate ten times higher (`--lr 3e-2`) or without warmup
# and compare the gradient-norm and update-ratio panels; add `--tensorboard tb/` to watch the
# same tags live with `tensorboard --logdir tb/`. On a GPU the log also holds the caching
# allocator's counters (`active_mib`, `reserved_mib`, `max_allocated_mib`, `alloc_retries`,
# `ooms`).
