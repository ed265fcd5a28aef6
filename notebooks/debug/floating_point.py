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
# # Floating-point overflow and underflow in training
#
# Most NaN and Inf hunts in mixed-precision training end at one of four
# mechanisms: a value grows past the largest finite number of its dtype
# (**overflow** to Inf, and Inf − Inf or 0 × Inf then gives NaN), a value shrinks
# below the smallest one (**underflow** to 0), an intermediate such as a sum of
# squares overflows although the inputs and the result would fit, or a small
# update is **swallowed** by rounding when it is added to a large number. This
# notebook shows each with real `torch` tensors on the CPU, with the limits taken
# from `torch.finfo`. It runs in a few seconds.
#
# The formats are IEEE 754 binary32 (float32) and binary16 (float16), Google's
# bfloat16 (float32's 8 exponent bits with 7 mantissa bits,
# [Google Cloud: bfloat16](https://cloud.google.com/tpu/docs/bfloat16)) and the two
# FP8 formats E4M3 and E5M2 of
# [Micikevicius et al. 2022, "FP8 formats for deep learning"](https://arxiv.org/abs/2209.05433).

# %%
import math

import matplotlib.pyplot as plt
import torch
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
torch.manual_seed(0)

# %% [markdown]
# ## The limits
#
# `max` is the largest finite value, `tiny` the smallest *normal* value (below
# it, subnormals keep fewer and fewer significant bits), `smallest subnormal`
# the last value before 0, and `eps` the gap between 1 and the next number: the
# relative precision.

# %%
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
          torch.float8_e5m2]


def smallest_subnormal(dtype):
    """The smallest positive value of ``dtype``: halve ``tiny`` until one more halving,
    rounded to ``dtype``, gives 0."""
    x = torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)
    while (x / 2).to(dtype).item() != 0:
        x = x / 2
    return x.to(dtype).item()


print(f"{'dtype':>14} {'bits':>4} {'max':>10} {'tiny':>10} {'subnormal':>10} {'eps':>10}")
for dt in DTYPES:
    fi = torch.finfo(dt)
    print(f"{str(dt).replace('torch.', ''):>14} {fi.bits:>4} {fi.max:>10.4g} {fi.tiny:>10.4g} "
          f"{smallest_subnormal(dt):>10.4g} {fi.eps:>10.4g}")

# %% [markdown]
# float16 is the odd one out: its largest value, 65504, is small enough to be
# reached by ordinary activations, attention scores and sums of squares, and its
# smallest normal value, about 6e-5, is large enough that many gradients fall
# below it. bfloat16 has float32's range and gives up precision instead: its eps
# is 8 times float16's. The FP8 formats trade one for the other: E4M3 for
# precision (weights and activations), E5M2 for range (gradients).
#
# ## Overflow: a value past `max`

# %%
x = torch.tensor([60000.0, 65504.0], dtype=torch.float16)
print("65504 * 2 in float16  =", (x[1:] * 2).item())
print("60000 + 10000 in fp16 =", (x[:1] + 10000).item())
print("exp(11.0), exp(11.1)  =", torch.exp(torch.tensor([11.0, 11.1], dtype=torch.float16)).tolist())
print("Inf - Inf             =", (torch.tensor(math.inf) - torch.tensor(math.inf)).item())

# %% [markdown]
# `exp` overflows float16 just above 11 (ln 65504 ≈ 11.09). That is why a softmax
# must subtract the row's maximum before exponentiating: the naive version turns
# moderately large attention scores into Inf / Inf = NaN, the stable one cannot
# overflow because every exponent is ≤ 0. `torch.softmax` does the subtraction.

# %%
scores = torch.tensor([[2.0, 8.0, 12.0]], dtype=torch.float16)   # attention logits
naive = scores.exp() / scores.exp().sum(-1, keepdim=True)
print("naive softmax :", naive.tolist())
print("torch.softmax :", [[round(v, 4) for v in torch.softmax(scores, -1)[0].tolist()]])

# %% [markdown]
# ## Overflow in an intermediate: a sum of squares
#
# The result can be representable while an intermediate is not. The variance in
# a LayerNorm or RMSNorm, or the L2 norm used for gradient clipping, squares the
# values first: activations of a few hundred are harmless, their squares are
# not. Libraries accumulate such reductions in float32 for this reason; code that
# does it by hand in float16 breaks.

# %%
h = torch.full((1024,), 300.0, dtype=torch.float16)     # activations of 300
var_fp16 = (h * h).mean()                                # squares: 90000 > 65504
var_fp32 = (h.float() * h.float()).mean()
print("mean of squares, float16:", var_fp16.item())
print("mean of squares, float32:", var_fp32.item())
print("torch.linalg.vector_norm of a float16 tensor:",
      torch.linalg.vector_norm(h).item(), "(fp32 accumulation inside)")
print("by hand in float16:", torch.sqrt((h * h).sum()).item())

# %% [markdown]
# ## Underflow: gradients below `tiny`
#
# Gradients of a large model are small: many are 1e-6 to 1e-9. Cast to float16
# they lose precision below 6.1e-5 and become exactly 0 below about 6e-8. The
# fix used with float16 is **loss scaling**
# ([Micikevicius et al. 2018, "Mixed precision training"](https://arxiv.org/abs/1710.03740)):
# multiply the loss by a factor S (e.g. 2¹⁶), so every gradient is S times
# larger in the backward pass, then divide by S in float32 before the optimizer
# step. bfloat16 needs no scaling: its range is float32's.
#
# Below, a synthetic but realistic spread of gradient magnitudes (log-uniform
# between 1e-10 and 1e-2) is cast to each format.

# %%
g = 10 ** torch.empty(100_000).uniform_(-10, -2)          # |gradient| values, float32


def lost_to_zero(values, dtype, scale=1.0):
    """Fraction of non-zero values that become exactly 0 when cast (after scaling)."""
    return ((values * scale).to(dtype) == 0).float().mean().item()


def below_normal(values, dtype, scale=1.0):
    """Fraction that fall below the smallest normal number (reduced precision)."""
    return ((values * scale).abs() < torch.finfo(dtype).tiny).float().mean().item()


for name, dt, scale in [("float16", torch.float16, 1.0),
                        ("float16, loss scale 2^16", torch.float16, 2.0**16),
                        ("bfloat16", torch.bfloat16, 1.0)]:
    print(f"{name:26s} zero: {lost_to_zero(g, dt, scale):6.1%}   "
          f"subnormal or zero: {below_normal(g, dt, scale):6.1%}")
print("largest scaled value stays finite in float16:",
      bool(torch.isfinite((g.max() * 2.0**16).to(torch.float16))))

# %% [markdown]
# A loss scale that is too large overflows the *largest* gradients instead:
# that is why dynamic loss scaling (`torch.amp.GradScaler`) halves the scale and
# skips the step when it finds an Inf, and grows it again after a run of good
# steps. A training log full of skipped steps means the scale keeps colliding
# with the top of float16's range.
#
# ## Swallowed updates: the precision limit
#
# Adding a number smaller than half the gap between representable values does
# nothing. In bfloat16 the gap at 1.0 is 2⁻⁷ = 0.0078, so a weight of 1.0 that
# receives an update of 1e-3 stays 1.0 forever, and a running sum in bfloat16
# stops growing at 256, where the gap between numbers reaches 2. This is why
# optimizers keep float32 master weights and why reductions accumulate in float32.

# %%
w = torch.tensor(1.0, dtype=torch.bfloat16)
print("1.0 + 1e-3 in bfloat16 =", (w + 1e-3).item(), "  in float32 =", 1.0 + 1e-3)
acc = torch.tensor(0.0, dtype=torch.bfloat16)
for _ in range(1000):
    acc = acc + 1.0
print("sum of 1000 ones, bfloat16 accumulator =", acc.item())
print("sum of 1000 ones, torch.sum of bfloat16 =",
      torch.ones(1000, dtype=torch.bfloat16).sum().item(), "(fp32 accumulation inside)")

# %% [markdown]
# The gap between neighbouring numbers grows with the magnitude. For a normal
# number x it is 2^⌊log₂ x⌋ × eps; the cell checks that formula against
# `torch.nextafter` in float32 and plots it for the three formats up to each
# one's `max`.

# %% alt=["Log-log chart of the gap between a number and the next representable one against its magnitude, over each format's normal range: three parallel straight lines, float32 lowest and spanning about 1e-38 to 3e38, bfloat16 over the same range but about 65,000 times coarser, and float16 a short segment from about 6e-5 up to its maximum of 65504 (marked by a vertical line), between the two. The gap grows in proportion to the magnitude."]
def gap(x, dtype):
    """Distance from x (float64 tensor of normal values of dtype) to the next number."""
    return torch.exp2(torch.floor(torch.log2(x))) * torch.finfo(dtype).eps


probe = torch.tensor([1e-3, 1.0, 3.0, 1e4, 6e30])
exact = torch.nextafter(probe, torch.tensor(math.inf)) - probe
print("formula matches torch.nextafter in float32:",
      torch.equal(gap(probe.double(), torch.float32).float(), exact))

fig, ax = plt.subplots(figsize=(7, 4))
for dt, style in [(torch.float32, "-"), (torch.float16, "--"), (torch.bfloat16, ":")]:
    fi = torch.finfo(dt)
    x = torch.logspace(math.log10(fi.tiny), math.log10(fi.max), 400, dtype=torch.float64)
    ax.loglog(x, gap(x, dt), style, label=str(dt).replace("torch.", ""))
ax.axvline(65504, color="gray", lw=0.8)
ax.text(65504 * 1.5, 1e-30, "float16 max", fontsize=8, color="gray")
ax.set_xlabel("magnitude |x|")
ax.set_ylabel("gap to the next representable number")
ax.set_title("Spacing of representable numbers (normal range)")
ax.legend()
plt.show()

# %% [markdown]
# ## What to take away
#
# * Inf/NaN in float16 usually start at one module whose output passes 65504:
#   find it with forward hooks (the book's
#   `scripts/debug/underflow_overflow_detector.py`), not by staring at the loss.
# * Sums of squares (norms, variances) overflow first; accumulate them in float32.
# * float16 needs loss scaling for gradients; bfloat16 does not, but swallows
#   small updates, so keep master weights and reductions in float32.
