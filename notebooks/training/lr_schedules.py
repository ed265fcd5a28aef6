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
# # Learning-rate schedules, batch-size ramp-up and compute-optimal sizing
#
# The formulas of the book's Hyper-parameters page, written once as functions of the
# step, checked against PyTorch's own schedulers, and plotted.
#
# What you should take away:
#
# 1. All common LLM schedules share a **linear warmup**; they differ in how they decay:
#    cosine and linear decay spend the whole run decaying, **warmup-stable-decay** holds
#    the peak and decays only at the end, inverse square root never finishes.
# 2. A cosine cycle must **end with the run**; a cycle planned for a longer run leaves the
#    learning rate high when training stops.
# 3. Compute-optimal sizing follows from $C = 6ND$ and $D = 20N$: $N = \sqrt{C/120}$.

# %%
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

# %% [markdown]
# ## The schedules
#
# Peak $\eta_{\max}$, final $\eta_{\min}$, $W$ warmup steps, $T$ steps in total,
# $\tau = (t - W)/(T - W)$ the fraction of the decay done. Each function returns the
# learning rate at step $t$.

# %% alt=["Line chart of four learning-rate schedules over 10,000 steps, all warming up linearly to a peak of 3e-4 in 500 steps. Cosine decays along an S curve and linear decay along a straight line, both to 3e-5 at the end; warmup-stable-decay holds the peak until step 9,000 and then drops linearly to 3e-5; inverse square root falls fast at first and slowly after, ending near 6.7e-5. Warmup-stable-decay keeps the highest mean learning rate."]
def warmup(t, peak, W):
    return peak * (t + 1) / W          # step 0 already gets a small non-zero rate


def cosine(t, peak, final, W, T):
    """Linear warmup, then cosine decay to ``final`` at step T (Loshchilov & Hutter 2016)."""
    if t < W:
        return warmup(t, peak, W)
    tau = min(1.0, (t - W) / (T - W))
    return final + 0.5 * (peak - final) * (1 + math.cos(math.pi * tau))


def linear(t, peak, final, W, T):
    if t < W:
        return warmup(t, peak, W)
    return peak - (peak - final) * min(1.0, (t - W) / (T - W))


def wsd(t, peak, final, W, T, decay_frac=0.1):
    """Warmup-stable-decay (Hu et al. 2024): hold the peak, decay linearly over the last
    ``decay_frac`` of the steps."""
    if t < W:
        return warmup(t, peak, W)
    start = T - int(decay_frac * T)
    if t < start:
        return peak
    return peak - (peak - final) * min(1.0, (t - start) / (T - start))


def inverse_sqrt(t, peak, W):
    """Vaswani et al. 2017: linear warmup, then proportional to 1/sqrt(step)."""
    return warmup(t, peak, W) if t < W else peak * math.sqrt(W / (t + 1))


T, W, peak, final = 10_000, 500, 3e-4, 3e-5
steps = np.arange(T)
curves = {
    "cosine": [cosine(t, peak, final, W, T) for t in steps],
    "linear decay": [linear(t, peak, final, W, T) for t in steps],
    "warmup-stable-decay (10%)": [wsd(t, peak, final, W, T) for t in steps],
    "inverse sqrt": [inverse_sqrt(t, peak, W) for t in steps],
}
fig, ax = plt.subplots(figsize=(7.5, 4))
for label, y in curves.items():
    ax.plot(steps, np.array(y) * 1e4, label=label)
ax.set_xlabel("step")
ax.set_ylabel("learning rate (x 1e-4)")
ax.set_title(f"Peak {peak:g}, final {final:g}, warmup {W} of {T} steps")
ax.legend()
plt.show()
for label, y in curves.items():
    print(f"{label:<27} lr at the last step = {y[-1]:.2e}, mean lr = {np.mean(y):.2e}")

# %% [markdown]
# ## The same schedules in PyTorch
#
# A schedule is a function of the step handed to `torch.optim.lr_scheduler.LambdaLR`,
# which multiplies the optimizer's base learning rate by it. Our cosine after warmup must
# equal PyTorch's `CosineAnnealingLR` (which has no warmup), step for step.

# %%
def torch_lrs(make_scheduler, n):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.array(lrs)


T2, W2 = 1000, 50                                                  # a short run is enough
ours = np.array([cosine(t, peak, final, 0, T2) for t in range(T2)])   # no warmup
theirs = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=T2, eta_min=final), T2)
print("our cosine equals CosineAnnealingLR:", np.allclose(ours, theirs, rtol=1e-6, atol=0))
via_lambda = torch_lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(
    o, lambda t: wsd(t, peak, final, W2, T2) / peak), T2)
print("LambdaLR reproduces the WSD function:",
      np.allclose(via_lambda, [wsd(t, peak, final, W2, T2) for t in range(T2)], rtol=1e-9))

# %% [markdown]
# ## A cosine cycle that does not match the run
#
# Hoffmann et al. (2022, Appendix B) found that setting the cosine cycle more than about
# 25% longer than the run gives a clearly worse model. The reason is visible: the run stops
# while the learning rate is still high.

# %% alt=["Line chart of the learning rate over a 10,000-step run for cosine cycles of 1, 1.25 and 2 times the run's length, after the same 500-step warmup to 3e-4. With a matching cycle the rate reaches its final value of 3e-5 (10% of the peak) at the last step; with a 1.25\u00d7 cycle it ends at 19% of the peak and with a 2\u00d7 cycle at 57%: the run stops while the learning rate is still high."]
fig, ax = plt.subplots(figsize=(7.5, 3.5))
for cycle in (T, int(1.25 * T), 2 * T):
    y = [cosine(t, peak, final, W, cycle) for t in steps]
    ax.plot(steps, np.array(y) * 1e4, label=f"cycle = {cycle / T:g} x run")
    print(f"cycle {cycle / T:g} x run: lr at the last step = {y[-1] / peak:.0%} of the peak")
ax.set_xlabel("step (the run ends at the right edge)")
ax.set_ylabel("learning rate (x 1e-4)")
ax.legend()
plt.show()

# %% [markdown]
# ## Batch-size ramp-up
#
# GPT-3 (Brown et al. 2020, Appendix B) grew its batch linearly from 32K tokens to the full
# 3.2M over the first 4 to 12 billion tokens, depending on model size. Below, 175B-style:
# 32K to 3.2M over 12B tokens, in whole multiples of 32K as a framework would round it
# (Megatron-LM's `--rampup-batch-size start increment samples` does the same in samples).
# Because steps are short while the batch is small, the ramp covers many steps.

# %% alt=["Line chart of the global batch size (millions of tokens) against the tokens seen (billions), 0 to 20: a fine staircase rising linearly from 32K tokens to 3.2M over the first 12 billion tokens, then flat at 3.2M. Because the early batches are small, the ramp takes 19,473 steps, where a fixed 3.2M batch would need 3,737 for the same tokens."]
start, full, ramp_tokens, inc = 32_768, 3_211_264, 12e9, 32_768
tokens, batch, seen = [], [], 0.0
while seen < 20e9:
    b = start + (full - start) * min(1.0, seen / ramp_tokens)
    b = max(start, int(b // inc) * inc)
    tokens.append(seen)
    batch.append(b)
    seen += b
tokens, batch = np.array(tokens), np.array(batch)
ramp_steps = int(np.argmax(batch >= full))
fig, ax = plt.subplots(figsize=(7.5, 3.5))
ax.plot(tokens / 1e9, batch / 1e6)
ax.set_xlabel("tokens seen (billions)")
ax.set_ylabel("global batch (M tokens)")
plt.show()
print(f"steps to reach the full batch: {ramp_steps}; a fixed 3.2M batch would need "
      f"{math.ceil(ramp_tokens / full)} steps for the same 12B tokens")

# %% [markdown]
# ## Compute-optimal model size
#
# Hoffmann et al. (2022) Table 3, read from the book's data file, against the rule
# $N = \sqrt{C/120}$, $D = 20N$ that follows from $C = 6ND$ and 20 tokens per parameter.

# %% alt=["Log-log chart of the parameters and training tokens of compute-optimal models against training compute, 1e18 to 1e29 FLOPs: dots and squares for the values of Table 3 of Hoffmann et al. 2022 and straight lines for the rule N = sqrt(C/120) and D = 20 N. The table's points lie on the two lines, parameters from 0.4B to 10T and tokens about 20 times as many."]
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


SUFFIX = {"M": 1e6, "B": 1e9, "T": 1e12}
rows = yaml.safe_load(book_file("data/training/chinchilla_optimal.yml"))["rows"]
N = np.array([float(r["params"][:-1]) * SUFFIX[r["params"][-1]] for r in rows])
D = np.array([float(r["tokens"][:-1]) * SUFFIX[r["tokens"][-1]] for r in rows])
C = np.array([float(r["flops"]) for r in rows])
c_grid = np.logspace(18, 29, 50)
fig, ax = plt.subplots(figsize=(7, 4))
ax.loglog(c_grid, np.sqrt(c_grid / 120), "-", color="tab:blue", label="N = sqrt(C/120)")
ax.loglog(c_grid, 20 * np.sqrt(c_grid / 120), "-", color="tab:orange", label="D = 20 N")
ax.loglog(C, N, "o", color="tab:blue", label="parameters (Table 3)")
ax.loglog(C, D, "s", color="tab:orange", label="tokens (Table 3)")
ax.set_xlabel("training compute C (FLOPs)")
ax.set_ylabel("parameters / tokens")
ax.legend()
plt.show()
for n, d, c in zip(N, D, C, strict=True):
    print(f"C = {c:.2e}: table N = {n / 1e9:7.1f}B, rule N = {math.sqrt(c / 120) / 1e9:7.1f}B, "
          f"tokens per parameter = {d / n:.1f}")
budget = 1e23
n_opt = math.sqrt(budget / 120)
print(f"budget 1e23 FLOPs: N = {n_opt / 1e9:.1f}B parameters, D = {20 * n_opt / 1e9:.0f}B tokens")
