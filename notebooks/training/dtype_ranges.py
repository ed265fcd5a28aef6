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
# # Floating-point formats with real tensors: range, rounding, loss scaling
#
# Every claim of the book's Tensor precision page, checked with PyTorch tensors on a
# CPU: torch supports fp32, bf16, fp16 and both fp8 formats (E4M3 and E5M2) as storage
# types, so conversions and their rounding are exact here even without a GPU.
#
# What you should take away:
#
# 1. **fp16 overflows at 65504 and flushes to zero below 6e-8**; bf16 keeps fp32's
#    range and loses digits instead.
# 2. **Small updates vanish when added to large weights** in 16 bits, which is why
#    master weights and long sums stay in fp32.
# 3. **Loss scaling** moves small fp16 gradients back into range; bf16 does not need it.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
FORMATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp8 E4M3": torch.float8_e4m3fn, "fp8 E5M2": torch.float8_e5m2}


def cast(values, dtype):
    """Round float64 values to ``dtype`` and back: what the format stores."""
    return torch.tensor(values, dtype=torch.float64).to(dtype).to(torch.float64).tolist()


# %% [markdown]
# ## The formats as torch sees them
#
# `torch.finfo` gives the bits, the largest value, the smallest normal value and the
# machine epsilon (the gap after 1.0, $2^{-m}$ for $m$ mantissa bits). The smallest
# subnormal is the smallest normal times epsilon.

# %%
print(f"{'format':<10}{'bits':>5}{'max':>12}{'min normal':>13}{'min subnormal':>15}{'eps':>11}")
for name, dt in FORMATS.items():
    fi = torch.finfo(dt)
    print(f"{name:<10}{fi.bits:>5}{fi.max:>12.4g}{fi.smallest_normal:>13.4g}"
          f"{fi.smallest_normal * fi.eps:>15.4g}{fi.eps:>11.4g}")

# %% [markdown]
# Bit patterns of a few numbers: sign | exponent | mantissa. 1.0 has a zero mantissa
# and the exponent field equal to the bias (127 for bf16, 15 for fp16, 7 for E4M3).

# %%
LAYOUT = {torch.bfloat16: (8, 7, torch.int16), torch.float16: (5, 10, torch.int16),
          torch.float8_e4m3fn: (4, 3, torch.int8), torch.float8_e5m2: (5, 2, torch.int8)}


def bits(x, dt):
    e, m, itype = LAYOUT[dt]
    n = 1 + e + m
    raw = torch.tensor([x], dtype=dt).view(itype).item() & ((1 << n) - 1)
    s = format(raw, f"0{n}b")
    return f"{s[0]} {s[1:1 + e]} {s[1 + e:]}"


for x in (1.0, -2.0, 0.1):
    print(f"{x:>5}: " + " | ".join(f"{n} {bits(x, dt)}" for n, dt in
                                     (("bf16", torch.bfloat16), ("fp16", torch.float16),
                                      ("E4M3", torch.float8_e4m3fn))))

# %% [markdown]
# ## What survives a cast
#
# The same values stored in each format. fp16 turns 70000 into `inf` and 1e-9 into 0;
# bf16 keeps both, the first rounded to 70144 (its neighbours near 65536 are 512 apart).
# E4M3 has no infinity: torch saturates it at 448. E5M2 reaches further (57344) with
# fewer digits: 300 becomes 320.

# %%
values = [1e-9, 1e-7, 1e-5, 3e-3, 1.0, 300.0, 500.0, 65504.0, 70000.0, 1e5]
print(f"{'value':>9}" + "".join(f"{n:>12}" for n in FORMATS))
columns = {n: cast(values, dt) for n, dt in FORMATS.items()}
for i, v in enumerate(values):
    print(f"{v:>9.3g}" + "".join(f"{columns[n][i]:>12.5g}" for n in FORMATS))

# %% [markdown]
# ## Rounding: relative error against magnitude
#
# Inside the normal range the relative rounding error of a format is at most half its
# epsilon, whatever the magnitude; below the smallest normal number (the subnormals) it
# grows until everything rounds to zero. The plot casts a million log-spaced values.

# %% alt=["Log-log scatter of the relative rounding error of one cast against the value, 1e-12 to 1e6, for bf16, fp16, fp8 E4M3 and fp8 E5M2. Within each format's normal range the error stays under a fixed ceiling of half its epsilon: about 4e-3 for bf16 over the whole range, about 5e-4 for fp16 above about 6e-5, and around 0.06 to 0.125 for the fp8 formats. Below the normal range the error climbs to 1 as values round to zero, at about 1e-7 for fp16 and about 1e-5 and 1e-3 for E5M2 and E4M3; E4M3 also errs by nearly 100% above its maximum of 448."]
x = np.logspace(-12, 6, 1_000_000)
fig, ax = plt.subplots(figsize=(7, 4))
for name in ("bf16", "fp16", "fp8 E4M3", "fp8 E5M2"):
    y = np.array(cast(x, FORMATS[name]))
    rel = np.abs(y - x) / x
    ok = np.isfinite(rel)
    ax.loglog(x[ok][::50], np.maximum(rel[ok][::50], 1e-9), ".", ms=1, label=name)
ax.set_xlabel("value")
ax.set_ylabel("relative rounding error")
ax.set_ylim(1e-6, 2)
ax.set_title("Relative error of one cast (errors below 1e-6 clipped; inf/NaN not drawn)")
ax.legend(markerscale=8)
plt.show()
for name in ("bf16", "fp16"):
    y = np.array(cast(x, FORMATS[name]))
    normal = (x >= torch.finfo(FORMATS[name]).smallest_normal) & (x <= torch.finfo(FORMATS[name]).max)
    worst = float(np.max(np.abs(y[normal] - x[normal]) / x[normal]))
    print(f"{name}: worst relative error in the normal range = {worst:.3g}, "
          f"eps/2 = {torch.finfo(FORMATS[name]).eps / 2:.3g}")

# %% [markdown]
# ## Updates that vanish: why master weights stay in fp32
#
# A weight of 1.0 in bf16 has neighbours $1 - 2^{-8}$ and $1 + 2^{-7}$. An update smaller
# than half the gap rounds back to 1.0. With a learning rate of 1e-4 and an Adam update of
# size about 1, every step of a bf16 weight is lost; the fp32 master weight moves.

# %%
w16 = torch.tensor(1.0, dtype=torch.bfloat16)
w32 = torch.tensor(1.0, dtype=torch.float32)
for _ in range(1000):
    w16 = w16 - 1e-4
    w32 = w32 - 1e-4
print(f"after 1000 updates of -1e-4: bf16 weight = {w16.item():.6f}, fp32 weight = {w32.item():.6f}")
print(f"bf16 copy of the fp32 master = {w32.to(torch.bfloat16).item():.6f}")

# %% [markdown]
# The same effect in a long sum. Adding 1e-4 ten thousand times, one addition at a time,
# stalls in bf16 at 0.03125: there the gap between neighbours is $2^{-12} \approx 2.4
# \times 10^{-4}$ and half of it exceeds the increment. torch's `sum` over a bf16 tensor
# accumulates in fp32 internally and gets it right.

# %% alt=["Line chart of a running sum against the number of additions of 1e-4, up to 10,000: accumulated in fp32 the sum rises in a straight line to 1.0, while accumulated in bf16 it stalls at about 0.03 after a few hundred additions, because each increment is then smaller than half the gap between neighbouring bf16 numbers."]
inc = torch.tensor(1e-4, dtype=torch.bfloat16)
acc16, acc32, trace16, trace32 = torch.zeros((), dtype=torch.bfloat16), 0.0, [], []
for _ in range(10_000):
    acc16 = acc16 + inc
    acc32 += inc.item()
    trace16.append(acc16.item())
    trace32.append(acc32)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(trace32, label="accumulated in fp32")
ax.plot(trace16, label="accumulated in bf16")
ax.set_xlabel("additions of 1e-4")
ax.set_ylabel("running sum")
ax.legend()
plt.show()
print(f"bf16 running sum = {acc16.item()}, fp32 running sum = {acc32:.4f}, "
      f"torch.sum of the bf16 tensor = {torch.full((10_000,), 1e-4, dtype=torch.bfloat16).sum().item():.4f}")

# %% [markdown]
# ## Loss scaling
#
# Gradients are small. Take a synthetic set whose magnitudes are spread log-normally
# around 1e-6 (a stand-in for the activation-gradient histograms of Micikevicius et al.
# 2017). In fp16 a share of them falls below the smallest subnormal, $2^{-24}$, and becomes
# zero. Multiplying the loss, and so every gradient, by $S = 2^{16}$ (PyTorch
# GradScaler's initial scale) shifts them into range; the optimizer divides by $S$ in fp32.

# %% alt=["Histogram, on a log x axis, of 200,000 synthetic gradient magnitudes centred near 1e-6, and of the same gradients multiplied by 2^16, centred near 0.07. A dashed line marks fp16's smallest subnormal (about 6e-8), which cuts off the left tail of the unscaled gradients (8% of them become zero), and a dotted line fp16's maximum of 65504. Scaled by 2^16 the whole distribution fits between the two lines."]
rng = np.random.default_rng(0)
grads = np.exp(rng.normal(np.log(1e-6), 2.5, 200_000))
for scale in (1.0, 2.0**16):
    in16 = np.array(cast(grads * scale, torch.float16)) / scale
    zero = np.mean(in16 == 0)
    inf = np.mean(~np.isfinite(in16))
    print(f"scale {scale:>7g}: {zero:.1%} of gradients become 0 in fp16, {inf:.1%} overflow")
in_bf16 = np.array(cast(grads, torch.bfloat16))
print(f"bf16, no scaling: {np.mean(in_bf16 == 0):.1%} become 0")

fig, ax = plt.subplots(figsize=(7, 3.5))
bins = np.logspace(-14, 2, 80)
ax.hist(grads, bins=bins, alpha=0.5, label="gradients")
ax.hist(grads * 2.0**16, bins=bins, alpha=0.5, label="gradients x 2^16")
ax.axvline(2.0**-24, color="k", ls="--", lw=1)
ax.axvline(65504, color="k", ls=":", lw=1)
ax.text(2.0**-24 * 1.5, ax.get_ylim()[1] * 0.85, "fp16 smallest\nsubnormal", fontsize=8)
ax.text(65504 / 1e3, ax.get_ylim()[1] * 0.85, "fp16 max", fontsize=8)
ax.set_xscale("log")
ax.set_xlabel("gradient magnitude")
ax.set_ylabel("count")
ax.legend(loc="center left")
plt.show()
