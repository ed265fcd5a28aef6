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
# # Checkpoint planning: size, save time and interval
#
# Three questions decide how a training job checkpoints:
#
# 1. **How big is a checkpoint?** Bytes per parameter, from the dtypes of the
#    weights and of the optimizer state.
# 2. **How long does a save block training?** Size divided by the write
#    bandwidth the job gets, or only the copy to host memory if the save is
#    asynchronous.
# 3. **How often should we checkpoint?** Often enough that a failure does not
#    throw away much work, rarely enough that writing does not eat the run.
#    Young's and Daly's formulas give the optimum from the blocking time and the
#    job's mean time between failures (MTBF).
#
# Every number here is computed from the formulas and the cited figures, except
# one measured bandwidth read from this book's results, and a small simulation
# that checks the formulas. Change the inputs to plan your own job. The notebook
# runs in a second or two on a CPU.

# %%
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib_inline.backend_inline import set_matplotlib_formats

# PNG (not SVG) plots: the PDF is built from the stored PNGs.
set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

# %% [markdown]
# ## 1. Checkpoint size
#
# A resumable checkpoint holds the weights and the optimizer state (plus small
# things: scheduler, data loader position, random states). With Adam in mixed
# precision the optimizer keeps an fp32 master copy of the weights and two fp32
# moments, 12 bytes per parameter, the $K = 12$ of the ZeRO paper
# ([Rajbhandari et al. 2019, section 3.1](https://arxiv.org/abs/1910.02054)).
# Gradients are not saved: they are recomputed after a restart. Decimal units:
# 1 GB = $10^9$ bytes.

# %%
BYTES_PER_PARAM = {
    "bf16 weights only": 2,
    "fp32 weights + SGD momentum": 4 + 4,
    "Adam, mixed precision (fp32 master + 2 moments)": 4 + 4 + 4,
    "Adam, mixed precision + bf16 weights": 2 + 4 + 4 + 4,
}
MODELS = {"1B": 1e9, "7B": 7e9, "70B": 70e9, "405B": 405e9}


def checkpoint_bytes(params: float, bytes_per_param: float) -> float:
    """Checkpoint size in bytes: parameters x bytes per parameter."""
    return params * bytes_per_param


def fmt_bytes(n: float) -> str:
    """Decimal GB or TB, 3 significant digits."""
    return f"{n / 1e12:.3g} TB" if n >= 1e12 else f"{n / 1e9:.3g} GB"


for name, bpp in BYTES_PER_PARAM.items():
    print(f"{bpp:>2} B/param: {name}")
print()
print(f"{'model':<6}" + "".join(f"{f'{bpp} B/param':>12}" for bpp in BYTES_PER_PARAM.values()))
for label, params in MODELS.items():
    print(f"{label:<6}" + "".join(f"{fmt_bytes(checkpoint_bytes(params, bpp)):>12}"
                                  for bpp in BYTES_PER_PARAM.values()))

# %% [markdown]
# ## 2. Save time
#
# To first order a save takes the checkpoint size divided by the bandwidth of
# the slowest part of the path: the file system's aggregate write bandwidth, or
# the number of writing nodes times what one node can push, whichever is
# smaller.
#
# $$ t_{\mathrm{save}} = \frac{\text{bytes}}{\min(B_{\mathrm{fs}},\ N_{\mathrm{nodes}} B_{\mathrm{node}})} $$

# %%
def save_seconds(nbytes: float, fs_GBps: float, nodes: int = 1,
                 node_GBps: float = float("inf")) -> float:
    """Seconds to write ``nbytes`` at min(file-system, nodes x per-node) bandwidth (GBps)."""
    return nbytes / (min(fs_GBps, nodes * node_GBps) * 1e9)


size_70b = checkpoint_bytes(70e9, 14)
for bw in (5, 20, 50, 100):
    print(f"70B, 14 B/param ({fmt_bytes(size_70b)}) at {bw:>3} GBps: "
          f"{save_seconds(size_70b, bw):6.1f} s")
# 128 nodes that can each write 2 GBps cap a 500 GBps file system at 256 GBps
print("128 nodes x 2 GBps on a 500 GBps file system:",
      f"{save_seconds(size_70b, 500, nodes=128, node_GBps=2):.2f} s")

# %% alt=["Log-log chart of synchronous checkpoint save time (s) against the write bandwidth the job gets, 1 GBps to 1 TBps, for models of 1B, 7B, 70B and 405B parameters at 14 bytes per parameter (14 GB to 5.67 TB), with a dotted line at one minute. Each line falls in proportion to the bandwidth; the 70B checkpoint (980 GB) needs about 20 GBps and the 405B one about 100 GBps to save in under a minute."]
bandwidths = np.logspace(0, 3, 50)  # 1 GBps .. 1 TBps
fig, ax = plt.subplots(figsize=(7, 4.2))
for label, params in MODELS.items():
    nbytes = checkpoint_bytes(params, 14)
    ax.loglog(bandwidths, nbytes / (bandwidths * 1e9), label=f"{label} ({fmt_bytes(nbytes)})")
ax.axhline(60, color="grey", ls=":", lw=1)
ax.text(300, 70, "1 minute", color="grey")
ax.set_xlabel("write bandwidth the job gets (GBps, 1 GBps = 1e9 B/s)")
ax.set_ylabel("save time (s)")
ax.set_title("Synchronous save time, Adam mixed precision (14 bytes/param)")
ax.legend(title="model")
plt.show()

# %% [markdown]
# ### What our benchmark measured
#
# `scripts/storage/checkpoint_io_bench.py` writes a checkpoint with
# `torch.save` and with `torch.distributed.checkpoint` and reports GBps. The
# committed run (2 CPU processes on the 2-core machine that builds this book,
# local virtual disk) is far from a cluster's file system; the cell shows how
# to turn a measured bandwidth into a save-time estimate.

# %%
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


bench = json.loads(book_file("results/storage/checkpoint_io_bench-cpu-2proc.json"))
by_op = {(r["method"], r["op"]): r for r in bench["results"]}
dcp_save = by_op[("dcp", "save")]["GBps"]
print("measured dcp save bandwidth ≈", round(dcp_save, 2), "GBps")
print("a 7B checkpoint (98 GB) at that bandwidth would take ≈",
      round(save_seconds(checkpoint_bytes(7e9, 14), dcp_save) / 60), "minutes")
blocked = by_op.get(("dcp_async", "save_blocking"))
if blocked:
    print("dcp.async_save blocked training for ≈", round(blocked["time_s"], 1),
          "s; a synchronous dcp.save blocked it for ≈", round(by_op[("dcp", "save")]["time_s"], 1), "s")

# %% [markdown]
# ## 3. How often to checkpoint
#
# Let $\delta$ be the time a checkpoint blocks training, $\tau$ the compute time
# between checkpoints, $M$ the job's MTBF and $R$ the restart time. Each interval
# loses $\delta$ to writing; each failure loses on average half an interval plus
# $R$. With $\tau \ll M$ the fraction of time lost is about
#
# $$ f(\tau) = \frac{\delta}{\tau} + \frac{\tau}{2M} + \frac{R}{M}, $$
#
# smallest at **Young's** interval
# ([Young 1974](https://doi.org/10.1145/361147.361115))
# $\tau_{\mathrm{opt}} = \sqrt{2\delta M}$, where $f = \sqrt{2\delta/M} + R/M$.
# **Daly** ([2006](https://doi.org/10.1016/j.future.2004.11.016)) gives a
# higher-order estimate that stays accurate when $\delta$ is not small compared
# with $M$:
#
# $$ \tau_{\mathrm{opt}} = \sqrt{2\delta M}\left[1 + \tfrac13\sqrt{\tfrac{\delta}{2M}}
#    + \tfrac19\,\tfrac{\delta}{2M}\right] - \delta \quad (\delta < 2M), \qquad
#    \tau_{\mathrm{opt}} = M \text{ otherwise.} $$

# %%
def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): optimal compute time between checkpoints, sqrt(2 delta M), in seconds."""
    return math.sqrt(2 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher-order estimate of the optimal interval, in seconds."""
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    x = delta_s / (2 * mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


def lost_fraction(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """First-order fraction of wall-clock time lost: writing + recomputation + restarts."""
    return delta_s / tau_s + tau_s / (2 * mtbf_s) + restart_s / mtbf_s


# %% [markdown]
# ### The failure rate of a large job
#
# The Llama 3 405B run had 419 unexpected interruptions in a 54-day snapshot on
# up to 16,384 H100 GPUs, about 78% attributed to confirmed or suspected hardware
# issues ([The Llama 3 Herd of Models, section 3.3.4](https://arxiv.org/abs/2407.21783)).
# If GPUs (with their share of hosts, network and software) fail independently,
# a job's MTBF is the per-GPU MTBF divided by its number of GPUs. Using the
# whole 16,384 GPUs for the whole 54 days makes this an optimistic per-GPU
# figure (fewer GPU-hours would mean a shorter per-GPU MTBF).

# %%
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_FAILURES = 16_384, 54, 419
GPU_HOURS_PER_FAILURE = LLAMA3_GPUS * LLAMA3_DAYS * 24 / LLAMA3_FAILURES
print(f"Llama 3 job MTBF = {LLAMA3_DAYS * 24 / LLAMA3_FAILURES:.1f} h; "
      f"GPU-hours per failure = {GPU_HOURS_PER_FAILURE:,.0f}")


def job_mtbf_s(gpus: int) -> float:
    """Job MTBF in seconds at the Llama 3 failure rate per GPU-hour."""
    return GPU_HOURS_PER_FAILURE / gpus * 3600


# %% [markdown]
# ### Worked example
#
# A 70B model, Adam in mixed precision (14 bytes/param, 980 GB), on 1,024 GPUs,
# writing to a file system that gives the job 50 GBps.

# %%
delta = save_seconds(size_70b, 50)
for gpus, d, label in ((1024, delta, "sync, 50 GBps"), (16_384, delta, "sync, 50 GBps"),
                       (16_384, 2.0, "async, 2 s blocked")):
    M = job_mtbf_s(gpus)
    ty, td = young_interval(d, M), daly_interval(d, M)
    print(f"{gpus:>6} GPUs, {label}: delta = {d:.1f} s, MTBF = {M / 3600:.1f} h\n"
          f"       Young = {ty / 60:.1f} min, Daly = {td / 60:.1f} min, "
          f"lost = {100 * lost_fraction(ty, d, M):.1f}%")

# %% [markdown]
# The loss curve is flat near the optimum: checkpointing at half or at twice
# the optimal interval costs $\tfrac12(\tfrac12 + 2) = 1.25$ times the minimum
# loss. That is why rounding the interval to a convenient number of steps is
# fine, and why erring on the frequent side (failures cluster in practice) costs
# little.

# %% alt=["Chart of the share of time lost (%) against the interval between checkpoints, 5 to 240 minutes, for a 70B model on 1,024 GPUs (\u03b4 = 19.6 s, MTBF = 49.5 h): a dashed curve for writing (\u03b4/\u03c4) that falls with the interval, a dashed rising line for recomputation after failures (\u03c4/2M), and their sum, a flat-bottomed curve whose minimum of about 1.5% lies at the optimum of 44 minutes (vertical line). Near the optimum the total changes slowly, so the interval need not be exact."]
M = job_mtbf_s(1024)
taus = np.linspace(5 * 60, 4 * 3600, 400)
fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(taus / 60, 100 * (delta / taus), ls="--", label="writing: δ/τ")
ax.plot(taus / 60, 100 * taus / (2 * M), ls="--", label="recomputation: τ/2M")
ax.plot(taus / 60, 100 * (delta / taus + taus / (2 * M)), lw=2, label="total")
t_opt = young_interval(delta, M)
ax.axvline(t_opt / 60, color="k", lw=1)
ax.annotate(f"optimum {t_opt / 60:.0f} min", (t_opt / 60, 4), xytext=(t_opt / 60 + 10, 4.5))
ax.set_ylim(0, 6)
ax.set_xlabel("interval between checkpoints τ (min)")
ax.set_ylabel("time lost (%)")
ax.set_title("70B model, 1,024 GPUs, δ = 19.6 s, MTBF = 49.5 h")
ax.legend()
plt.show()

# %% [markdown]
# ### Interval and loss against cluster size
#
# The same 980 GB checkpoint, written synchronously at 5 or 50 GBps, or
# asynchronously with 2 s of blocking, on 256 to 32,768 GPUs at the Llama 3
# failure rate.

# %% alt=["Two charts against the number of GPUs in the job, 256 to 32,768, at the Llama 3 failure rate, for a 980 GB checkpoint saved synchronously at 5 GBps (\u03b4 = 196 s) or 50 GBps (\u03b4 = 19.6 s), or asynchronously with 2 s of blocking. Left, the optimal interval (Daly) on a log scale falls as the cluster grows: from about 280 to 22 minutes at 5 GBps and from about 28 to 2.5 minutes for async. Right, the time lost at the optimum rises: at 32,768 GPUs about 27% at 5 GBps, 8% at 50 GBps and under 3% for async."]
gpus = np.array([256, 512, 1024, 2048, 4096, 8192, 16384, 32768])
cases = {"sync, 5 GBps (δ = 196 s)": save_seconds(size_70b, 5),
         "sync, 50 GBps (δ = 19.6 s)": save_seconds(size_70b, 50),
         "async (δ = 2 s)": 2.0}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for label, d in cases.items():
    taus_opt = [daly_interval(d, job_mtbf_s(g)) for g in gpus]
    lost = [lost_fraction(t, d, job_mtbf_s(g)) for t, g in zip(taus_opt, gpus, strict=True)]
    ax1.loglog(gpus, np.array(taus_opt) / 60, marker="o", label=label)
    ax2.semilogx(gpus, 100 * np.array(lost), marker="o", label=label)
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs in the job")
ax1.set_ylabel("optimal interval (min, Daly)")
ax2.set_ylabel("time lost at the optimum (%)")
ax1.legend(fontsize=8)
fig.suptitle("Checkpoint interval vs cluster size (Llama 3 failure rate)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Checking the formula with a simulation
#
# Young's formula rests on approximations (failures are a Poisson process,
# $\tau \ll M$). A small simulation with exponential times between failures
# checks it: run 1,000 hours of work in intervals of $\tau$, each followed by a
# checkpoint of $\delta$; a failure loses everything since the last completed
# checkpoint. The simulated loss should match $f(\tau)$ to within a few percent
# of itself near the optimum.

# %%
def simulate_lost_fraction(tau_s, delta_s, mtbf_s, work_s, rng):
    """Fraction of wall-clock time not spent on useful work, by simulation (R = 0)."""
    done, wall = 0.0, 0.0
    next_failure = rng.exponential(mtbf_s)
    while done < work_s:
        segment = tau_s + delta_s  # compute, then write the checkpoint
        if wall + segment <= next_failure:
            wall += segment
            done += tau_s
        else:  # lose the partial segment, restart from the last checkpoint
            wall = next_failure
            next_failure = wall + rng.exponential(mtbf_s)
    return 1 - work_s / wall


rng = np.random.default_rng(0)
M = job_mtbf_s(4096)
d = save_seconds(size_70b, 50)
ok = []
for factor in (0.5, 1.0, 2.0):
    tau = factor * young_interval(d, M)
    sim = np.mean([simulate_lost_fraction(tau, d, M, 1000 * 3600, rng) for _ in range(20)])
    model = lost_fraction(tau, d, M)
    ok.append(abs(sim - model) / model < 0.15)
    print(f"tau = {factor:>3} x optimum: model = {100 * model:.2f}%, simulated ≈ {100 * sim:.2f}%")
print("simulation within 15% of the model:", all(ok))
