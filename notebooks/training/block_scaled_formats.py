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
# # Block-scaled formats: MXFP8, MXFP6, MXFP4 and NVFP4 on a real model
#
# The **Tensor precision** chapter describes the OCP Microscaling (MX) formats, where 32
# consecutive values share one power-of-two (E8M0) scale, and NVIDIA's NVFP4, where 16 values
# share an E4M3 scale and the tensor has one more fp32 scale. This notebook uses the chapter's
# emulation script, `mx_quantize.py`, to look at them:
#
# 1. the element grids, and the scale rule on single blocks worked by hand;
# 2. the error of every format on the weights and activations of the book's tiny model after
#    a short training, against bf16 and per-tensor fp8;
# 3. how the block size decides what an outlier costs;
# 4. the two ways of choosing an MX scale (round down as in the specification, round up as in
#    Transformer Engine).
#
# Everything runs on a CPU in a few seconds; the quantization is exact float64 arithmetic.

# %%
import os
import sys
import urllib.request
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
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


mx = book_module("scripts/training/mx_quantize.py", "mx_quantize")
tiny = book_module("scripts/debug/make_tiny_model.py", "make_tiny_model")

# %% [markdown]
# ## The element grids
#
# Each element type is a tiny floating-point format. E2M1 has eight magnitudes; the two FP6
# types trade range (E3M2) against resolution (E2M3); E4M3 is the fp8 of OFP8. None of the FP6
# and FP4 types has an infinity or a NaN: every code is a number.

# %% alt=["Dot plot, on a log2 axis, of the positive values each element type can represent, one row per type: E2M1 has 6 positive values from 0.5 to 6; E2M3 32 magnitudes from 0.125 to 7.5, densely packed; E3M2 from 0.0625 to 28, more spread out; E4M3 (fp8) from about 0.002 to 448. More exponent bits give range, more mantissa bits give resolution."]
for name in ("e2m1", "e2m3", "e3m2", "e4m3"):
    el, grid = mx.ELEMENTS[name], mx.element_grid(name)
    print(f"{el.name}: {len(grid)} magnitudes, smallest subnormal {grid[1]:g}, smallest normal "
          f"{el.min_normal:g}, largest {grid[-1]:g}, emax {el.emax}")
print("E2M1 grid:", mx.element_grid("e2m1"))

fig, ax = plt.subplots(figsize=(8, 2.6))
for row, name in enumerate(("e2m1", "e2m3", "e3m2", "e4m3")):
    grid = np.array(mx.element_grid(name)[1:])
    ax.scatter(grid, np.full_like(grid, row), s=10)
ax.set_xscale("log", base=2)
ax.set_yticks(range(4), ["E2M1", "E2M3", "E3M2", "E4M3"])
ax.set_xlabel("positive values of the element type (log2 scale)")
ax.set_title("Element grids: where the representable numbers lie")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## One block by hand
#
# The specification's scale is $X = 2^{\lfloor \log_2 \mathrm{amax} \rfloor - e_{\max}}$, with
# $e_{\max} = 2$ for E2M1. A block whose largest value is 6 gets $X = 1$, and every value is
# rounded to the nearest grid point, ties to the even code (5 lies between 4 and 6 and goes to
# 4, 2.5 goes to 2). A block whose largest value is 7 also gets $X = 1$, and 7 saturates to 6.
# Rounding the scale up instead ($X = 2$) keeps 7 in range, as 8, at the cost of halving the
# resolution of the rest of the block.

# %%
block = torch.tensor([6.0, 5.0, 2.5, 0.25, 0.75, 1.25, 3.5, -4.9])
r = mx.mx_quantize(block, "e2m1", block_size=8)
print(f"amax 6: scale 2^{r.scale_exponents.item()}, values", r.values.tolist())
for rule in ("floor", "ceil"):
    r = mx.mx_quantize(torch.tensor([7.0, 1.0, 0.3]), "e2m1", block_size=3, rule=rule)
    print(f"amax 7, rule {rule}: scale 2^{r.scale_exponents.item()}, values {r.values.tolist()}, "
          f"E8M0 byte {mx.e8m0_encode(r.scale_exponents).item()}")
r = mx.nvfp4_quantize(torch.tensor([1.3, 0.4, -0.1]), block_size=3, tensor_scale=1.0)
print(f"NVFP4, amax 1.3: block scale E4M3({1.3 / 6:.4f}) = {r.scales.item()}, values",
      [round(v, 4) for v in r.values.tolist()])

# %% [markdown]
# ## The tiny model, trained for a moment
#
# Random weights are uniform and well-behaved; a few training steps give them some structure.
# The model is the book's `make_tiny_model.py` transformer (2 layers, width 64), trained for
# 100 AdamW steps on its synthetic sentences. Then `model_tensors` collects the 10 weight
# matrices and the 7 activations that enter its matmuls in one forward pass.

# %%
texts = tiny.make_corpus(2000, seed=0)
tok = tiny.CharTokenizer.train(texts)
model = tiny.TinyLM({**tiny.DEFAULT_CONFIG, "vocab_size": len(tok)})
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = tiny.batches(tok, texts, batch_size=16, seq_len=64, seed=0)
for _ in range(100):
    x, y = next(data)
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss after 100 steps ≈ {loss.item():.2f} nats per character")

tensors = mx.model_tensors(model, batch=8, seq_len=64, seed=0)
tensors += mx.synthetic_tensors(seed=0, outlier_scale=100.0)
groups = ["weights", "activations", "synthetic"]
print({g: sum(1 for _, grp, _ in tensors if grp == g) for g in groups}, "tensors")

# %% [markdown]
# ## Error per format
#
# The signal-to-noise ratio $10 \log_{10}(\sum x^2 / \sum (q - x)^2)$ of each group of tensors,
# for every format. Each bit of an ideal uniform quantizer is worth about 6 dB.

# %% alt=["Grouped bar chart of the quantization signal-to-noise ratio (dB, higher is better) of the tiny model's weights, its activations and synthetic tensors in nine formats. bf16 reaches about 56 dB; the 8-bit formats and MXFP6 E2M3 about 25 to 31 dB; per-tensor fp4 E2M1 only 13 to 19 dB, lowest on the synthetic tensors with outliers; MXFP4 17 to 19 dB; NVFP4 about 20 dB, and 26 dB on the synthetic tensors, where its finer scales help most."]
formats = list(mx.FORMATS)
snr = {g: [] for g in groups}
for g in groups:
    for fmt in formats:
        stats = [mx.error_stats(x, mx.quantize(x, fmt)) for _, grp, x in tensors if grp == g]
        snr[g].append(mx.combine(stats)["snr_db"])
print(f"{'format':<11} {'bits':>5}  " + "  ".join(f"{g:>11}" for g in groups))
for i, fmt in enumerate(formats):
    print(f"{fmt:<11} {mx.bits_per_element(fmt):>5.2f}  "
          + "  ".join(f"≈ {snr[g][i]:>6.1f} dB" for g in groups))

fig, ax = plt.subplots(figsize=(9, 3.6))
width = 0.27
pos = np.arange(len(formats))
for k, g in enumerate(groups):
    ax.bar(pos + (k - 1) * width, snr[g], width, label=g)
ax.set_xticks(pos, [f"{f}\n{mx.bits_per_element(f):g} b" for f in formats], fontsize=8)
ax.set_ylabel("SNR (dB)")
ax.set_title("Quantization error of the tiny model's tensors (higher is better)")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# Three things stand out. At 8 bits, MX blocks gain nothing over a per-tensor fp8 scale here:
# E4M3's range already covers these tensors, and the specification's round-down scale even
# costs a little (see the last section). At 4 bits, one scale per tensor is unusable once there
# are outliers, and blocks are what recovers the signal. And NVFP4's finer scales are worth
# several dB over MXFP4, most of all on the matrices with outliers.

# %% [markdown]
# ## Block size against an outlier
#
# The matrix with outlier channels has 4 of its 1024 columns 100 times larger than the rest.
# Along a row, every block that contains one of them is scaled for the outlier, and the small
# values that share its block lose their resolution. Smaller blocks confine the damage.

# %% alt=["Line chart of the signal-to-noise ratio of the ordinary (non-outlier) values of a matrix with outlier columns against the number of elements per block, 8 to 1024 on a log2 axis. With E2M1 elements it falls from about 14.5 dB at 8 to 0 dB at 1024, where almost everything rounds to zero; with E4M3 elements it stays between 29 and 31.5 dB. NVFP4, a star at 16 elements, sits on the E2M1 curve at about 12.6 dB."]
x = dict((n, t) for n, _, t in tensors)["outlier_channels"]
small = torch.ones_like(x, dtype=torch.bool)
small[:, x.abs().amax(dim=0) > 50] = False          # the ordinary columns only
sizes = [8, 16, 32, 64, 128, 256, 1024]


def snr_small(values):
    err = (values.double() - x.double())[small]
    return 10 * np.log10(float((x.double()[small] ** 2).sum() / (err ** 2).sum()))


mx4 = [snr_small(mx.mx_quantize(x, "e2m1", block_size=b).values) for b in sizes]
mx8 = [snr_small(mx.mx_quantize(x, "e4m3", block_size=b).values) for b in sizes]
nv4 = snr_small(mx.nvfp4_quantize(x).values)
for b, a, c in zip(sizes, mx4, mx8, strict=True):
    print(f"block {b:>4}: SNR of the ordinary values ≈ {a:.1f} dB (E2M1), ≈ {c:.1f} dB (E4M3)")
print(f"NVFP4 (16, E4M3 scales): ≈ {nv4:.1f} dB")

fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(sizes, mx4, "o-", label="MX, E2M1 elements")
ax.plot(sizes, mx8, "s-", label="MX, E4M3 elements")
ax.plot([16], [nv4], "*", markersize=12, label="NVFP4")
ax.set_xscale("log", base=2)
ax.set_xlabel("elements per block")
ax.set_ylabel("SNR of the non-outlier values (dB)")
ax.set_title("What an outlier costs its neighbours")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# With E2M1 elements the SNR of the ordinary values falls steadily with the block size: at 1024
# the outliers set the scale of whole rows and almost everything else rounds to zero. With E4M3
# elements the block size hardly matters, since 18 binades hold both the outliers and the rest.
# NVFP4 sits with MX blocks of 16, as its block size says: its finer scale helps the outliers
# themselves, not their neighbours.

# %% [markdown]
# ## Rounding the MX scale down or up
#
# The specification's rule puts a block's largest value in the top binade of the element type,
# whose upper end (512 for E4M3, 8 for E2M1) lies above the largest representable value (448, 6):
# large block maxima saturate. Transformer Engine rounds the scale up instead, which never
# saturates and gives up at most one binade for the other values.

# %%
weights = [t for _, g, t in tensors if g == "weights"]
for name in ("e4m3", "e2m1"):
    for rule in ("floor", "ceil"):
        stats = mx.combine([mx.error_stats(w, mx.mx_quantize(w, name, rule=rule)) for w in weights])
        print(f"MX {mx.ELEMENTS[name].name}, rule {rule:<5}: saturated ≈ "
              f"{100 * stats['saturated_fraction']:.1f}% of the weights, SNR ≈ {stats['snr_db']:.1f} dB")

# %% [markdown]
# ## What to remember
#
# * A block-scaled value costs its element bits plus the scale's share: 8.25 bits for MXFP8,
#   4.25 for MXFP4, 4.5 for NVFP4.
# * Blocks matter most where the element type has little range: 4-bit formats need them, fp8
#   mostly does not.
# * How the scale is rounded changes the error as much as the block size does; compare
#   implementations on your own tensors with `mx_quantize.py --checkpoint` before trusting one.
