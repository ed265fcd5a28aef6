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
# # Detecting loss spikes in recorded runs
#
# A loss spike is easy to see on a plot after the fact and surprisingly easy to
# miss in a dashboard at 3 a.m. This notebook builds the simplest automatic
# detector that works, a **rolling z-score** of the loss and of the gradient
# norm, and runs it on six real training runs of a tiny transformer recorded by
# the book's `scripts/instabilities/loss_spike_experiment.py` (file
# `results/instabilities/loss_spike_experiment.json`; the command and the machine
# are in `results/instabilities/README.md`). The runs differ only in their
# training recipe; model initialisation and data order are the same.
#
# What you should take away:
#
# 1. A z-score against the recent past flags spikes caused by bad batches at the
#    step they happen, on the loss and even more clearly on the gradient norm.
# 2. It does **not** flag a slow divergence: the high learning-rate run never
#    spikes, it just stops learning while its attention logits explode. Watch
#    those separately.
# 3. Skipping the flagged batches removes their after-effect on the loss.
#
# Nothing here trains a model: the notebook only reads the recorded file, and
# runs in a few seconds.

# %%
import json
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


report = json.loads(book_file("results/instabilities/loss_spike_experiment.json"))
runs = report["runs"]
settings = report["settings"]
print("runs:", ", ".join(runs))
print(f"steps per run = {settings['steps']}, batch = {settings['batch_size']} x "
      f"{settings['seq_len']} tokens, model width = {settings['d_model']}, "
      f"layers = {settings['layers']}")
print(f"loss floor (entropy rate of the synthetic language) = {report['loss_floor']:.3f} nats/token")

# %% [markdown]
# ## The detector
#
# For step $t$ with value $x_t$ (the loss, or the gradient norm), take the
# previous $W$ values, their mean $\mu_t$ and standard deviation $\sigma_t$, and
#
# $$ z_t = \frac{x_t - \mu_t}{\sigma_t}. $$
#
# A spike starts where $z_t$ crosses a threshold $k$ from below. The window makes
# the detector follow the slow downward trend of the loss; the threshold sets how
# many false alarms you accept. The script's defaults are $W = 50$ steps and
# $k = 6$. If the loss noise were Gaussian with a known mean and standard
# deviation, $k = 6$ would be crossed by chance about once in 10⁹ steps
# ($P(Z > 6) \approx 10^{-9}$); estimating both from 50 steps, and the heavier
# tails of real losses, make chance crossings far more frequent than that, which
# is why the threshold sits well above 3.
#
# Below is a vectorised version (NumPy) of the script's `rolling_z`, checked
# against the z-scores the script stored.

# %%
def rolling_z(x, window):
    """z-score of x[t] against x[t-window:t] (sample std); 0 for the first `window` steps."""
    x = np.asarray(x, dtype=float)
    z = np.zeros_like(x)
    if len(x) <= window:
        return z
    past = np.lib.stride_tricks.sliding_window_view(x[:-1], window)
    mu, sd = past.mean(axis=1), past.std(axis=1, ddof=1)
    z[window:] = (x[window:] - mu) / np.maximum(sd, 1e-12)
    return z


def spike_starts(z, k):
    """Steps where z crosses k from below."""
    above = z > k
    return [int(t) for t in np.flatnonzero(above & ~np.r_[False, above[:-1]])]


W, K = settings["window"], settings["z_threshold"]
same = all(np.allclose(rolling_z(r["loss"], W), r["loss_z"]) for r in runs.values())
print("NumPy z-scores equal the script's:", same)

# %% [markdown]
# ## The runs at a glance
#
# `final loss` is the mean of the last 20 steps; `loss z` and `grad z` are the
# largest z-scores of the loss and of the gradient norm; `spikes` counts loss
# z-score crossings of k = 6; `attn logit` is the largest attention logit
# $|q \cdot k| / \sqrt{d_{head}}$ seen in the run.

# %%
print(f"{'run':21s}{'final loss':>11}{'loss z':>8}{'grad z':>8}{'spikes':>7}{'attn logit':>13}")
for name, r in runs.items():
    s = r["summary"]
    print(f"{name:21s}{s['final_loss']:11.3f}{s['max_loss_z']:8.1f}{s['max_grad_z']:8.1f}"
          f"{len(s['loss_spike_steps']):7d}{s['max_attn_logit']:13.1f}")

# %% [markdown]
# ## Spikes from bad batches
#
# In `bad_batches`, four consecutive batches at 35% and 60% of the run are
# replaced by garbage (one token repeated). The loss of those batches jumps, the
# gradient norm jumps far more, and both z-scores cross the threshold at the
# first bad batch. `bad_batches_skipped` uses the same detector online: a batch
# whose loss z-score exceeds 6 gets no optimizer step.

# %% alt=["Three stacked charts over 700 training steps for the baseline, the run with bad batches and the run that skips them. Top: loss (nats/token, cut at 3) falling from above 3 to about 1.4, with the bad-batches run spiking off the chart at about steps 245 and 420 (dotted red lines) and then sitting slightly above the baseline, while the skipping run stays on it. Middle: gradient norm on a log scale, jumping from about 0.6 to about 20 at the same steps. Bottom: the loss z-score over a 50-step window, flat near 0 except two spikes to about 165 and 185, far above the dashed threshold of 6."]
steps = np.arange(settings["steps"])
fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
for name, color in [("baseline", "gray"), ("bad_batches_skipped", "tab:blue"),
                    ("bad_batches", "tab:red")]:
    r = runs[name]
    axes[0].plot(steps, r["loss"], color=color, lw=0.8, label=name)
    axes[1].semilogy(steps, r["grad_norm"], color=color, lw=0.8, label=name)
    axes[2].plot(steps, np.clip(rolling_z(r["loss"], W), -10, 200), color=color, lw=0.8,
                 label=name)
for t in runs["bad_batches"]["summary"]["loss_spike_steps"]:
    axes[0].axvline(t, color="tab:red", ls=":", lw=0.8)
axes[0].set_ylim(1.2, 3.0)
axes[0].set_ylabel("loss (nats/token)")
axes[1].set_ylabel("gradient norm")
axes[2].axhline(K, color="black", lw=0.8, ls="--")
axes[2].set_ylabel(f"loss z-score (W={W})")
axes[2].set_xlabel("step")
axes[0].legend(loc="upper right")
axes[0].set_title("Bad batches: the spike, its after-effect, and skipping")
plt.show()

# %% [markdown]
# The loss axis is cut at 3 so that the after-effect is visible: after the bad
# batches the unprotected run sits above the baseline for a while, the run that
# skipped them does not. The table measures that: mean loss over the 50 steps
# after each group of bad batches, minus the baseline's over the same steps.

# %%
bad_steps = runs["bad_batches"]["summary"]["bad_steps"]
groups = [s for s in bad_steps if s - 1 not in bad_steps]
base = np.array(runs["baseline"]["loss"])
for name in ("bad_batches", "bad_batches_skipped"):
    loss = np.array(runs[name]["loss"])
    excess = [loss[g + 4:g + 54].mean() - base[g + 4:g + 54].mean() for g in groups]
    print(f"{name:22s} excess loss after each group: "
          + ", ".join(f"{e:+.3f}" for e in excess) + " nats/token")
print("skipped steps == bad steps:",
      runs["bad_batches_skipped"]["summary"]["skipped_steps"] == bad_steps)

# %% [markdown]
# ## What a z-score does not see: divergence by attention-logit growth
#
# `high_lr` uses a learning rate of 0.1 with no warmup and no clipping. Its loss
# never *spikes*: it drops, then stalls far above the other runs while the
# largest attention logit grows by orders of magnitude, the failure described by
# [Dehghani et al. 2023](https://arxiv.org/abs/2302.05442) and reproduced at small
# scale by [Wortsman et al. 2023](https://arxiv.org/abs/2309.14322). The same
# learning rate with QK-layernorm (and z-loss) trains; warmup plus clipping
# also trains here, but its attention logits still climb.

# %% alt=["Two charts over 700 steps for runs at a learning rate of 0.1 and the baseline. Left, loss (nats/token) with the floor dashed at about 1.3: high_lr stalls around 3.5 without any spike, while high_lr_warmup_clip and high_lr_qknorm_zloss level off near 1.6 and the baseline reaches about 1.4. Right, the largest attention logit on a log scale: about 3 \u00d7 10\u2074 for high_lr, climbing to about 2,000 with warmup and clipping, flat near 45 with QK-layernorm and near 4 for the baseline. Divergence by attention-logit growth shows in the logits, not as a loss spike."]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for name, color in [("high_lr", "tab:red"), ("high_lr_warmup_clip", "tab:orange"),
                    ("high_lr_qknorm_zloss", "tab:green"), ("baseline", "gray")]:
    r = runs[name]
    axes[0].plot(steps, r["loss"], color=color, lw=0.8, label=name)
    axes[1].semilogy(steps, r["max_attn_logit"], color=color, lw=0.8, label=name)
axes[0].axhline(report["loss_floor"], color="black", lw=0.8, ls="--")
axes[0].set_ylim(1.2, 4.5)
axes[0].set_xlabel("step")
axes[0].set_ylabel("loss (nats/token)")
axes[0].set_title("Loss (dashed: the floor)")
axes[1].set_xlabel("step")
axes[1].set_ylabel("max |attention logit|")
axes[1].set_title("Attention logits")
axes[1].legend(fontsize=8)
plt.show()

# %%
for name in ("high_lr", "high_lr_qknorm_zloss"):
    s = runs[name]["summary"]
    print(f"{name:22s} loss spikes flagged: {len(s['loss_spike_steps'])}, "
          f"final loss - floor = {s['final_loss'] - report['loss_floor']:.2f} nats/token")

# %% [markdown]
# ## Which layer? Per-block gradient norms around a spike
#
# The script also records the gradient norm of each transformer block. Around
# the first bad batch the norms of all blocks jump together, a sign that the
# cause is the input (the data), not one layer running away.

# %% alt=["Log-scale chart of the gradient norm of each of the two transformer blocks from step 234 to 258, with the four bad batches (steps 244 to 247) shaded red. Both blocks jump together from about 0.3 to 0.4 to about 10 during the bad batches and drop back right after: a cause in the data, not one layer running away."]
g0 = groups[0]
layer = np.array(runs["bad_batches"]["layer_grad_norms"])
window = slice(g0 - 10, g0 + 15)
fig, ax = plt.subplots(figsize=(7, 3.5))
for i in range(layer.shape[1]):
    ax.semilogy(steps[window], layer[window, i], marker=".", lw=0.8, label=f"block {i}")
ax.axvspan(g0 - 0.5, g0 + 3.5, color="tab:red", alpha=0.15, label="bad batches")
ax.set_xlabel("step")
ax.set_ylabel("gradient norm of the block")
ax.legend()
plt.show()

# %% [markdown]
# ## Choosing the threshold
#
# How many steps of the clean baseline run would be flagged at each threshold,
# on the loss and on the gradient norm, and is every group of bad batches still
# caught? The gradient norm is the noisier signal: at k = 3 it already raises
# false alarms on the clean run, while the loss does not. At k = 6 both are
# silent on the clean run and both catch every group.

# %%
def alarms(name, key, k):
    return spike_starts(rolling_z(runs[name][key], W), k)


print(f"{'k':>4} {'false alarms (loss)':>20} {'false alarms (grad)':>20} {'all groups caught':>18}")
for k in (2, 3, 6, 20):
    caught = all(g in alarms("bad_batches", "loss", k) and g in alarms("bad_batches", "grad_norm", k)
                 for g in groups)
    print(f"{k:4d} {len(alarms('baseline', 'loss', k)):20d} "
          f"{len(alarms('baseline', 'grad_norm', k)):20d} {str(caught):>18}")

# %% [markdown]
# The margin is wide here because the bad batches are extreme (z-scores in the
# hundreds). Real loss curves are noisier and their noise has heavier tails than
# this synthetic language's, so calibrate k on a stretch of your own run that you
# know to be healthy: count the alarms it would have raised, and raise k until
# that count is acceptable.
