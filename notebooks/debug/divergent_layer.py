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
# # Finding the layer where two runs part ways
#
# The **Debugging** chapter's `activation_diff.py` records, for every module call of a forward
# and backward pass, a few statistics of the output and of the gradient that reaches it, and
# names the first record where two runs differ by more than a tolerance. This notebook looks at
# the whole curve rather than its first point: the difference between two runs, record by
# record, in execution order, for three pairs of runs of the same small model:
#
# 1. one weight matrix changed by 0.1% (a bug in one layer);
# 2. the second run in bfloat16 (a precision change);
# 3. the input perturbed by one part in 10⁷ (the run-to-run noise of a GPU whose reductions
#    are not deterministic, imitated on a CPU).
#
# The first shows what a single culprit looks like, the second what a precision change looks
# like, and the third how to choose `--rtol`. Everything runs on a CPU in a few seconds.

# %%
import os
import sys
import urllib.request
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
torch.set_num_threads(1)

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


ad = book_module("scripts/debug/activation_diff.py", "activation_diff")

# %% [markdown]
# ## The model and the three pairs of runs
#
# Twelve residual blocks (LayerNorm, a Linear to four times the width, GELU, a Linear back),
# then a Linear head and a mean squared error. Each run builds the model from the same seed,
# records one forward and backward pass with `ActivationRecorder`, and returns the records.

# %%
BLOCKS, WIDTH, BATCH = 12, 64, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def run(change=None, dtype=torch.float32, input_noise=0.0):
    """Records of one forward and backward pass; `change(model)` edits the model first."""
    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(BLOCKS)], nn.Linear(WIDTH, 1))
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    x = x * (1 + input_noise * torch.randn(BATCH, WIDTH))
    if change:
        change(model)
    model, x, y = model.to(dtype), x.to(dtype), y.to(dtype)
    recorder = ad.ActivationRecorder(model)
    ((model(x) - y) ** 2).mean().backward()
    recorder.remove()
    return recorder.records


def scale_weight(name, factor):
    def change(model):
        with torch.no_grad():
            model.get_submodule(name).weight.mul_(factor)
    return change


reference = run()
pairs = {
    "0.1% change in 5.fc1": run(scale_weight("5.fc1", 1.001)),
    "run B in bfloat16": run(dtype=torch.bfloat16),
    "input noise 1e-7": run(input_noise=1e-7),
}
RTOL = 1e-3
results = {name: ad.compare(reference, records, RTOL) for name, records in pairs.items()}
for name, result in results.items():
    first = result["first"]
    where = (f"{first['phase']} record {first['index']}, module '{first['a']['module']}'"
             if first else "none")
    print(f"{name:<22} first divergence above rtol {RTOL:g}: {where}")

# %% [markdown]
# ## The difference along the forward pass
#
# Each point is one recorded output, in the order the modules ran; the y axis is the
# difference `activation_diff` computes (the largest change of mean, rms, largest magnitude
# and probe, over the tensor's rms). A difference of exactly 0 is drawn at the bottom of the
# axis.

# %% alt=["Two log-scale charts, forward pass on top and backward pass below, of the relative difference from the reference run at each recorded module output (about 60 records in execution order), with the rtol of 0.001 as a dashed line. With 5.fc1 changed by 0.1%, the forward difference is zero up to record 26, where a vertical line marks 5.fc1, then jumps above the tolerance and stays near 1e-4 to 1e-3; the bfloat16 run lies around 1e-2 from the first record on; input noise of 1e-7 stays around 1e-7 to 1e-6, far below the tolerance. In the backward pass the changed-weight run differs everywhere, near the tolerance."]
FLOOR = 1e-12


def curve(result, phase):
    rows = result["phases"][phase]["rows"]
    return np.array([max(row["difference"], FLOOR) for row in rows])


fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
for ax, phase in zip(axes, ("forward", "backward"), strict=True):
    for name, result in results.items():
        ax.semilogy(curve(result, phase), ".-", ms=3, lw=0.8, label=name)
    ax.axhline(RTOL, color="k", ls="--", lw=1, label=f"rtol {RTOL:g}")
    ax.set_ylim(FLOOR / 3, 1)
    ax.set_ylabel(f"difference, {phase}")
injected = next(row["index"] for row in results["0.1% change in 5.fc1"]["phases"]["forward"]["rows"]
                if row["a"]["module"] == "5.fc1")
axes[0].axvline(injected, color="tab:blue", lw=0.6)
axes[1].set_xlabel("record (execution order; the backward pass runs from the loss back)")
axes[0].legend(frameon=False, fontsize=8, ncol=2, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# The three shapes are what to look for in a real comparison:
#
# * **One culprit**: zero difference up to the changed module, a jump there, and a difference
#   that every later module carries (residual connections keep it roughly constant). The first
#   point above the dashed line is the answer. In the backward pass every gradient differs:
#   those of the modules after the change because the change altered what they computed,
#   those before it because their gradients flow back through it. The backward curve
#   locates a bug only when the forward curve is flat (a wrong custom backward, for instance).
# * **A precision change**: nonzero from the very first record (the input is rounded), then a
#   level set by the format's rounding. The first divergence is then meaningless; what matters
#   is whether and where the curve *rises* well above that level.
# * **Noise**: a floor far below the tolerance. Measure it with two runs of the same
#   configuration before hunting, and set `--rtol` comfortably above it.
#
# The levels, printed:

# %%
for name, result in results.items():
    forward = curve(result, "forward")
    nonzero = forward[forward > FLOOR]
    print(f"{name:<22} forward: first nonzero at record "
          f"{int(np.argmax(forward > FLOOR)) if nonzero.size else '-'}; "
          f"median ≈ {np.median(nonzero) if nonzero.size else 0:.2g}, "
          f"max ≈ {forward.max():.2g}")
