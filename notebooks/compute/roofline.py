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
# # Roofline: which operations can use the TFLOPS you pay for
#
# An accelerator has two speeds: how fast it computes (peak FLOPS) and how fast
# it can feed the computation from its memory (HBM bandwidth). An operation that
# does few FLOPs per byte it reads and writes never reaches the first speed, however
# fast the tensor cores are. The **roofline model** turns this into one picture
# ([Williams, Waterman and Patterson, 2009](https://doi.org/10.1145/1498765.1498785)):
#
# $$ \text{attainable FLOPS} = \min\left(\text{peak FLOPS},\ I \times \text{memory bandwidth}\right) $$
#
# where the **arithmetic intensity** $I$ is FLOPs per byte of memory traffic. The two
# lines meet at the **ridge point** $I^* = \text{peak} / \text{bandwidth}$: below it an
# operation is memory-bound, above it compute-bound.
#
# This notebook reads the peak bf16 TFLOPS and HBM bandwidth of several accelerators
# from the book's spec file (`data/compute/accelerators.yml`), computes the
# arithmetic intensity of the operations of a transformer layer, and then looks at
# a second reason matmuls fall short of the peak, tile and wave quantization, with a
# model and a small CPU measurement. It runs on a CPU in a few seconds.

# %%
import json
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml
from matplotlib_inline.backend_inline import set_matplotlib_formats

# PNG (not SVG) plots: the PDF is built from the stored PNGs.
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


specs = yaml.safe_load(book_file("data/compute/accelerators.yml"))
DEVICES = ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200 (HGX)",
           "AMD MI300X", "AMD MI355X", "Intel Gaudi 3", "Google TPU v6e (Trillium)", "AWS Trainium2"]
rows = {r["name"]: r for r in specs["rows"]}
devices = {name: (rows[name]["bf16_dense"] * 1e12, rows[name]["mem_TBps"] * 1e12)
           for name in DEVICES}

print(f"{'accelerator':<27} {'bf16 TFLOPS':>12} {'HBM TBps':>9} {'ridge (FLOPs/byte)':>19}")
for name, (peak, bw) in devices.items():
    print(f"{name:<27} {peak / 1e12:>12.1f} {bw / 1e12:>9.3f} {peak / bw:>19.0f}")

# %% [markdown]
# The ridge points are in the hundreds: on every one of these accelerators an
# operation must do a few hundred bf16 FLOPs for every byte it moves to or from HBM
# to be limited by compute rather than by memory. Newer devices have added FLOPS
# faster than bandwidth, so their ridge points are higher.
#
# ## Arithmetic intensity of transformer operations
#
# Counting FLOPs and bytes (bf16, 2 bytes per element, each tensor read or written
# once from HBM, caches ignored):
#
# * **matmul** of an $M \times K$ by a $K \times N$ matrix: $2MNK$ FLOPs on
#   $2(MK + KN + MN)$ bytes. For a square $n \times n$ matmul that is $n/3$ FLOPs
#   per byte: large matmuls are compute-bound, thin ones are not.
# * **attention scores**, unfused: per head, $QK^\top$ is a matmul of an $s \times d$ by a
#   $d \times s$ matrix that writes an $s \times s$ score matrix to HBM, then softmax reads it
#   back. A **fused** kernel (FlashAttention,
#   [Dao et al. 2022](https://arxiv.org/abs/2205.14135)) keeps the scores on chip and only
#   reads $Q, K, V$ and writes the output: $4 s^2 d$ FLOPs on $8 s d$ bytes.
# * **layer norm** over a row of $h$ elements: about 8 FLOPs per element (mean,
#   variance, normalize, scale, shift; our rough count) on 4 bytes per element (read
#   and write).
# * **elementwise** ops (a residual add: read two tensors, write one): 1 FLOP per 6
#   bytes.

# %%
BF16 = 2  # bytes per element


def matmul_intensity(m, n, k, nbytes=BF16):
    """FLOPs per byte of an (m x k) @ (k x n) matmul, each operand moved once."""
    return 2 * m * n * k / (nbytes * (m * k + k * n + m * n))


def attention_unfused_intensity(s, d):
    """QK^T for one head, writing the s x s scores to memory."""
    return matmul_intensity(s, s, d)


def attention_fused_intensity(s, d):
    """Fused attention: 4 s^2 d FLOPs (QK^T and PV) on Q, K, V read and O written."""
    return 4 * s * s * d / (4 * s * d * BF16)


h, d, s, tokens = 8192, 128, 4096, 8 * 4096  # hidden size, head dim, sequence, tokens per step
ops = {
    "MLP matmul (tokens x h x 4h)": matmul_intensity(tokens, 4 * h, h),
    "QKV projection, 1 sequence": matmul_intensity(s, 3 * h, h),
    "matmul, 16 tokens (decoding)": matmul_intensity(16, h, h),
    "attention QK^T, unfused": attention_unfused_intensity(s, d),
    "attention, fused": attention_fused_intensity(s, d),
    "layer norm": 8 / 4,
    "residual add": 1 / 6,
}
peak, bw = devices["NVIDIA H100 SXM"]
print(f"H100 SXM, ridge = {peak / bw:.0f} FLOPs/byte")
print(f"{'operation':<31} {'FLOPs/byte':>10} {'bound':>8} {'attainable TFLOPS':>18}")
for op, intensity in ops.items():
    attainable = min(peak, intensity * bw)
    bound = "compute" if intensity >= peak / bw else "memory"
    print(f"{op:<31} {intensity:>10.2f} {bound:>8} {attainable / 1e12:>18.1f}")

# %% alt=["Log-log roofline chart of attainable dense bf16 TFLOPS against arithmetic intensity (FLOPs per byte of HBM traffic) for the A100, H100, B200, MI300X and TPU v6e: each roof rises along its memory-bandwidth slope and flattens at its compute peak, from about 300 TFLOPS (A100) to about 2,250 (B200). Of seven transformer operations placed on the H100's roof, residual add, layer norm, the 16-token matmul and unfused attention sit on the memory-bound slope, while fused attention, the QKV projection and the MLP matmul sit on the flat compute-bound part."]
fig, ax = plt.subplots(figsize=(8, 5))
x = np.logspace(-1, 4, 400)
for name in ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA B200 (HGX)", "AMD MI300X",
             "Google TPU v6e (Trillium)"]:
    peak_d, bw_d = devices[name]
    ax.loglog(x, np.minimum(peak_d, x * bw_d) / 1e12, label=name)
peak, bw = devices["NVIDIA H100 SXM"]
# each dot gets a number, the key lists them in the empty upper left; numbers of neighbouring dots on
# the roof alternate above and below it
ranked = sorted(ops, key=ops.get)
for number, op in enumerate(ranked, 1):
    intensity = ops[op]
    y = min(peak, intensity * bw) / 1e12
    ax.plot(intensity, y, "o", color="black", ms=4)
    above = intensity * bw < peak or number % 2
    ax.annotate(str(number), (intensity, y), textcoords="offset points", xytext=(-3, 5 if above else -12),
                fontsize=7, fontweight="bold")
ax.text(0.02, 0.97, "\n".join(f"{number}  {op}" for number, op in enumerate(ranked, 1)), transform=ax.transAxes,
        va="top", fontsize=7, bbox={"facecolor": "white", "edgecolor": "0.8", "boxstyle": "round"})
ax.set_xlabel("arithmetic intensity (bf16 FLOPs per byte of HBM traffic)")
ax.set_ylabel("attainable TFLOPS (dense bf16)")
ax.set_title("Roofline from vendor peaks; dots: transformer ops on an H100 SXM")
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# Large matmuls sit far to the right of every ridge point; layer norms, residual
# adds and unfused softmax sit far to the left and run at memory speed, a few TFLOPS
# at best. Fusing attention moves it from the memory side to the compute side, which
# is most of why fused attention kernels are faster. A matmul with few tokens (16
# rows, as in decoding) is memory-bound even though it is a matmul.
#
# ## Tile and wave quantization
#
# Even a compute-bound matmul does not reach the roof. A GPU splits the $M \times N$
# output into tiles and runs them in **waves** of one tile per SM
# ([NVIDIA, Matrix Multiplication Background](https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html)).
# Partly filled tiles (tile quantization) and a partly filled last wave (wave
# quantization) cost as much as full ones. The model below assumes 128 × 128 tiles
# on an H100 SXM's 132 SMs and returns the fraction of the work the hardware does
# that is useful; real libraries choose among several tile shapes, which smooths
# the curve but keeps its steps.

# %% alt=["Line chart of the useful fraction of work (0.25 to 1.0) against M from 128 to 8192, for N = 4096 with 128 \u00d7 128 tiles on 132 SMs: a sawtooth that climbs to about 0.97 and drops each time another wave of tiles begins (to 0.5 just after M = 512), with smaller drops as M grows; M = 4224 reaches exactly 1.0. A slightly larger matmul can waste much more of the GPU."]
SMS = 132   # H100 SXM
TILE = 128


def quantization_efficiency(m, n, tile=TILE, sms=SMS):
    """Useful fraction of the work when the m x n output runs as tile x tile blocks,
    one per SM per wave: (m*n) / (waves * sms * tile**2)."""
    tiles = -(-m // tile) * -(-n // tile)
    waves = -(-tiles // sms)
    return m * n / (waves * sms * tile * tile)


for m in (4096, 4097, 4224, 4352):
    print(f"M = {m}, N = 4096: efficiency = {quantization_efficiency(m, 4096):.3f}")

ms = np.arange(128, 8193, 16)
eff = [quantization_efficiency(int(m), 4096) for m in ms]
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(ms, eff, lw=1)
ax.set_xlabel("M (N = 4096, 128 x 128 tiles, 132 SMs)")
ax.set_ylabel("useful fraction of work")
ax.set_title("Tile and wave quantization model")
plt.show()

# %% [markdown]
# At $M = 4096$ the eighth wave is three quarters full. At $4097$ the waves come out
# even, but a 33rd row of tiles holds a single useful row, so the efficiency stays the
# same for a different reason. $4224$ fills both tiles and waves exactly, and $4352$
# needs a ninth wave that is almost empty: a larger matmul can be slower per FLOP. This is why
# model dimensions are chosen as multiples of 64 or 128 and why
# `mamf_finder.py` (on the Accelerators page of this chapter) sweeps shapes.
#
# ### A small measurement on this machine
#
# A CPU has no SMs, but its matmul library also works in blocks of registers and
# cache lines, so shapes that are multiples of the block size should do a little
# better. We time fp32 matmuls of $M \times 512$ by $512 \times 512$ for $M$ from 480 to
# 576. Timings on a shared machine are noisy, so each shape takes the best of several
# runs; the printed values are measured (marked ≈) and change from run to run.

# %% alt=["Line chart of measured fp32 matmul speed on the CPU that ran the notebook (GFLOPS, best of 5 runs) for M from 480 to 576 in steps of 4 (M \u00d7 512 by 512 \u00d7 512), with the multiples of 32 marked by red squares. The speed zigzags by several percent from one M to the next and the multiples of 32 are not consistently faster: on a CPU the alignment effect is lost in the noise."]
torch.manual_seed(0)
b = torch.randn(512, 512)
cpu_ms = list(range(480, 577, 4))
best_tflops = []
for m in cpu_ms:
    a = torch.randn(m, 512)
    torch.mm(a, b)  # warmup
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    best_tflops.append(2 * m * 512 * 512 / min(times) / 1e12)

aligned = [t for m, t in zip(cpu_ms, best_tflops, strict=True) if m % 32 == 0]
other = [t for m, t in zip(cpu_ms, best_tflops, strict=True) if m % 32]
print(f"median over M that are multiples of 32: ≈ {np.median(aligned) * 1e3:.1f} GFLOPS")
print(f"median over the other M: ≈ {np.median(other) * 1e3:.1f} GFLOPS")
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(cpu_ms, np.array(best_tflops) * 1e3, "o-", ms=3)
ax.plot([m for m in cpu_ms if m % 32 == 0], np.array(aligned) * 1e3, "s", color="C3",
        label="M multiple of 32")
ax.set_xlabel("M (matmul M x 512 by 512 x 512, fp32, CPU)")
ax.set_ylabel("GFLOPS (best of 5)")
ax.set_title("Measured on the machine that ran this notebook")
ax.legend()
plt.show()

# %% [markdown]
# On CPUs the effect is usually small and easily drowned by noise; on GPUs it is
# the staircase of the model above.
#
# ## Measured MAMF from the results files
#
# The book's results folder holds `--json` outputs of `mamf_finder.py`. Where a GPU
# run exists, its best shape is compared with the dense datasheet peak of its
# row in the spec file; the CPU run is always there and shows the gap between the
# mean and the best iteration on a shared machine. The plot keeps, for each M,
# the fastest of the N and K that were swept.

# %% alt=["Log-log chart of the mamf_finder.py results files: TFLOPS (best over N and K) against M, a solid line for the best iteration and a dashed one for the mean of each run and dtype. The CPU's fp32 and bf16 lines lie between about 0.05 and 1.4 TFLOPS for M from 256 to 1024, with the mean well below the best; the H100's bf16 and fp8 lines lie near 800 and 1,400 TFLOPS for M from 4096 to 16384, three orders of magnitude higher, with mean and best nearly equal."]
# The mamf_finder.py results in results/compute/ (a downloaded notebook cannot list a folder).
MAMF_RESULTS = ["results/compute/mamf_finder-cpu.json",
                "results/compute/mamf_finder-h100.json"]
runs = [json.loads(book_file(rel)) for rel in MAMF_RESULTS]
gpu_runs = [r for r in runs if r["device_type"] == "cuda"]
print(f"mamf_finder results files: {len(runs)}, of them GPU runs: {len(gpu_runs)}")
# The name CUDA reports for a device, and its row in data/compute/accelerators.yml.
SPEC_ROW = {"NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM"}
for run in runs:
    for dtype, best in run["best"].items():
        # The best shape varies from run to run on a busy machine, so only the value is printed.
        line = f"{run['device']} {dtype}: best ≈ {best['max_tflops']:.3f} TFLOPS"
        row = rows.get(SPEC_ROW.get(run["device"], ""))
        if row and isinstance(row.get(f"{dtype}_dense"), (int, float)):
            peak = row[f"{dtype}_dense"]
            line += f", {best['max_tflops'] / peak:.0%} of the {peak:g} TFLOPS dense peak"
        print(line)
if not gpu_runs:
    print("no GPU results file in results/compute/ yet: run mamf_finder.py on a GPU and "
          "add its --json output")

fig, ax = plt.subplots(figsize=(8, 3.5))
for run in runs:
    for dtype in run["dtypes"]:
        ms = sorted({r["m"] for r in run["results"] if r["dtype"] == dtype})
        best_max = [max(r["max_tflops"] for r in run["results"]
                        if r["dtype"] == dtype and r["m"] == m) for m in ms]
        best_mean = [max(r["mean_tflops"] for r in run["results"]
                         if r["dtype"] == dtype and r["m"] == m) for m in ms]
        label = f"{run['device']} {dtype}"
        ax.plot(ms, best_max, "o-", label=label + " max")
        ax.plot(ms, best_mean, "x--", label=label + " mean")
ax.set_xlabel("M")
ax.set_xscale("log", base=2)
ax.set_ylabel("TFLOPS, best over N and K")
ax.set_yscale("log")
ax.set_title("mamf_finder.py results (results/compute/)")
ax.legend(fontsize=7)
plt.show()
