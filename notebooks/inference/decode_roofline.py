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
# # Decode roofline: the batch that makes decode compute-bound, and the latency floor
#
# The **Prefill and decode** page of this part shows that the weight matmuls of a decode step
# have an arithmetic intensity of $2B / b_w$ FLOP per byte for a batch of $B$ sequences with
# weights of $b_w$ bytes: the batch *is* the intensity in bf16. A device stops being limited by
# its memory bandwidth once that intensity passes its ridge point, peak FLOP/s over bandwidth.
# This notebook computes, from the book's data files:
#
# 1. the ridge batch of every accelerator in the Compute part's table, in bf16 and in fp8;
# 2. the latency floor of one decode step for real models (every byte read once);
# 3. a simple roofline model of decode throughput against the batch, with the KV cache's reads
#    and its memory limit;
# 4. the same quantities measured on this book's CPU by `scripts/inference/decode_bench.py`.
#
# All accelerator figures are vendor peaks (see the table's sources); real kernels reach a
# fraction of them, so read the results as bounds.

# %%
import json
import os
import sys
import urllib.request
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import yaml
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

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


accelerators = yaml.safe_load(book_file("data/compute/accelerators.yml"))["rows"]
calc = book_module("scripts/models/model_calculator.py", "model_calculator")
models = {m["name"]: m for m in calc.parse_models(
    book_file("data/models/architectures.yml").decode("utf-8"))}


def figure(row, key):
    """A numeric column of an accelerator row, or None where the table has no figure ("—")."""
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) else None


devices = [r for r in accelerators if figure(r, "bf16_dense") and figure(r, "mem_TBps")]
print(f"{len(devices)} accelerators with a bf16 peak and a memory bandwidth")

# %% [markdown]
# ## The ridge batch
#
# Ridge point = peak TFLOPS / bandwidth in TBps, in FLOP per byte. With bf16 weights and bf16
# arithmetic the decode batch that reaches it equals the ridge point; with fp8 weights and fp8
# arithmetic the intensity is $2B$ per byte, so the batch is half the fp8 ridge point.

# %% alt=["Horizontal bar chart of the bf16 decode batch at the ridge point (peak TFLOPS over memory bandwidth, in sequences) for about 30 accelerators, sorted: from about 120 for the AMD MI250X and 150 to 160 for the A100s up to about 560 for the Google TPU v6e, with most current GPUs between 200 and 320. Every accelerator needs a decode batch of one to several hundred sequences before the weight matmuls stop waiting for memory."]
print(f"{'accelerator':<26}{'bf16 TFLOPS':>12}{'TBps':>7}{'batch, bf16':>12}{'fp8':>6}")
ridge = {}
for r in devices:
    bf16, bw, fp8 = figure(r, "bf16_dense"), figure(r, "mem_TBps"), figure(r, "fp8_dense")
    ridge[r["name"]] = bf16 / bw
    fp8_batch = f"{fp8 / bw / 2:>6.0f}" if fp8 else f"{'—':>6}"
    print(f"{r['name']:<26}{bf16:>12g}{bw:>7g}{bf16 / bw:>12.0f}{fp8_batch}")

fig, ax = plt.subplots(figsize=(8, 5))
names = sorted(ridge, key=ridge.get)
ax.barh(names, [ridge[n] for n in names], color="tab:blue")
ax.set_xlabel("decode batch at the ridge point, bf16 (sequences)")
fig.tight_layout()
plt.show()

# %% [markdown]
# Every current accelerator needs a decode batch of one to several hundred sequences before
# the weight matmuls stop waiting for memory, and the generations after the A100 need more,
# because their peak FLOP/s grew faster than their bandwidth. Below that batch, more sequences are
# nearly free; above it, each one adds its full share of FLOPs.
#
# ## The latency floor of one decode step
#
# At batch 1 a decode step must read every weight the token uses (for a mixture-of-experts
# model, the active ones) at least once; the floor is those bytes over the bandwidth, and its
# inverse bounds the tokens per second one sequence can get. Models split over $n$ GPUs with
# tensor parallelism divide the bytes by $n$ (the communication adds to this).

# %%
SHOWN = ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200 (HGX)",
         "AMD MI300X"]
shown = [r for r in devices if r["name"] in SHOWN]
MODELS = ["Llama 3.1 8B", "Llama 3.1 70B", "Mixtral 8x7B", "Llama 3.1 405B", "DeepSeek-V3"]
print("ceiling on tokens/s of one sequence at batch 1, bf16 weights, one GPU's bandwidth "
      "(weights only; divide the step by n GPUs with tensor parallelism)")
print(f"{'model':<16}{'active B':>9}{'GB read':>9}" + "".join(f"{r['name'][:14]:>16}" for r in shown))
for name in MODELS:
    active = calc.count_params(models[name])["active"]
    gbytes = 2 * active / 1e9
    print(f"{name:<16}{active / 1e9:>9.1f}{gbytes:>9.1f}"
          + "".join(f"{1e3 * figure(r, 'mem_TBps') / gbytes:>16.0f}" for r in shown))

# %% [markdown]
# A 70B dense model cannot exceed a few tens of tokens per second on one device's bandwidth even
# if it fitted; that is the main reason it is served with tensor parallelism over a node (each
# GPU reads an eighth) and why fp8 weights, which halve the bytes, nearly double small-batch
# decode speed. A mixture-of-experts model at batch 1 reads only its active experts, so
# DeepSeek-V3 (671B in total) has the floor of a 37B dense model, once its weights are spread
# over enough GPUs to hold them.
#
# ## Throughput against batch
#
# A simple model of one decode step of a batch of $B$ sequences at context $c$:
#
# $$t(B) = \max\left(\frac{N b_w + B\,c\,m_{kv}}{\text{bandwidth}},\ \frac{2NB + 4 L h d\, c B}{\text{peak}}\right)$$
#
# with $N$ the parameters (all of them for the bytes read, the matmul ones for the FLOPs),
# $b_w$ the bytes per weight, $L$ the layers, $h d$ the attention width (heads times head
# size) and $m_{kv}$ the KV bytes per token. Throughput is $B / t(B)$, and the batch is capped by
# the memory left for the cache (as `kv_cache_calculator.py` counts it: 90% of the GPU's
# memory usable, minus the weights). For Llama 3.1 8B in bf16 on one GPU at a context of 4,096
# tokens:

# %% alt=["Log-log chart of the upper bound on decode tokens per second against batch size for Llama 3.1 8B in bf16 at a 4,096-token context on the A100 SXM, H100 SXM, H200 SXM, B200 and MI300X. Each curve rises almost in proportion to the batch at first, then bends as the per-sequence cache reads grow, and ends where the KV cache fills the memory (batch about 100 on the 80 GB GPUs, 200 to 290 on the others), at about 3,000 tokens/s for the A100 up to about 13,000 for the B200, before reaching the compute knee."]
model = models["Llama 3.1 8B"]
n_matmul = calc.flops_per_token(model, 1)["matmul_params"]
total = calc.count_params(model)["total"]
kv_token = calc.kv_bytes_per_token(model, 2)
kv_calc = book_module("scripts/inference/kv_cache_calculator.py", "kv_cache_calculator")
shape = model  # the two calculators read a model with the same architecture()
layers, width = model["num_hidden_layers"], model["num_attention_heads"] * model["head_dim"]
context = 4096
batches = np.unique(np.round(np.logspace(0, 11, 200, base=2)).astype(int))

fig, ax = plt.subplots(figsize=(8, 4.5))
print(f"{'accelerator':<24}{'max batch (memory)':>19}{'knee batch':>11}{'tok/s there':>12}")
for r in shown:
    bw, peak = figure(r, "mem_TBps") * 1e12, figure(r, "bf16_dense") * 1e12
    memory_time = (2 * total + batches * context * kv_token) / bw
    compute_time = (2 * n_matmul + 4 * layers * width * context) * batches / peak
    step = np.maximum(memory_time, compute_time)
    cap = kv_calc.capacity(shape, params=total, context=context, kv_dtype="bf16",
                           weight_dtype="bf16", gpu_memory_gb=figure(r, "mem_GB"))["sequences"]
    ok = batches <= cap
    ax.loglog(batches[ok], (batches / step)[ok], label=r["name"])
    knee = batches[np.argmax(compute_time >= memory_time)] if (compute_time >= memory_time).any() else None
    knee_text = f"{knee:>11}" if knee and knee <= cap else f"{'> cap':>11}"
    at = min(knee or cap, cap)
    print(f"{r['name']:<24}{cap:>19}{knee_text}{at / step[batches <= at][-1]:>12,.0f}")
ax.set_xlabel("batch (sequences)")
ax.set_ylabel("decode tokens/s (bound)")
ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# "tok/s there": the bound at the knee, or at the largest batch that fits when the knee lies
# beyond it. At a context of 4,096 tokens the memory for the cache runs out (the end of each line) before
# the batch reaches the compute knee on every device shown: the cache, read once per step by
# every sequence, keeps decode memory-bound. The throughput still grows with the batch because
# the weights are read once for all sequences; long contexts flatten it, because each sequence
# adds its own cache reads. Shorter contexts, fp8 caches and GQA or MLA move the lines up and to
# the right.

# %% [markdown]
# ## Measured on a CPU
#
# `scripts/inference/decode_bench.py` builds a small decoder, fills its KV cache with a prompt
# (prefill), then decodes 32 tokens for every sequence of the batch, over several batch sizes and
# prompt lengths. Its recorded run in `results/inference/` is in fp32 on one CPU thread, so its
# intensity is $2B/4$ FLOP per byte: half the batch. The FLOP per byte column below is computed
# from the model's shape (weights plus the cache read in a step); the times are measured.

# %%
bench = json.loads(book_file("results/inference/decode_bench-cpu.json"))
rows = bench["results"]
weight_bytes = bench["model"]["weight_bytes"]
print(f"{bench['model']['parameters'] / 1e6:.1f}M parameters, {bench['dtype']}, "
      f"{weight_bytes / 1e6:.1f} MB of weights, {bench['threads']} CPU thread")
print(f"{'context':>8}{'batch':>6}{'FLOP/byte':>10}{'TPOT (ms)':>13}{'decode tok/s':>15}"
      f"{'prefill tok/s':>16}")
for r in rows:
    intensity = r["flops_per_step"] / r["bytes_per_step"]
    print(f"{r['context']:>8}{r['batch']:>6}{intensity:>10.2f} ≈ {r['tpot_ms']:>10.2f} "
          f"≈ {r['decode_tokens_per_s']:>12.0f} ≈ {r['prefill_tokens_per_s']:>13.0f}")

# %% [markdown]
# Prefill handles all the prompt's tokens in one pass per layer, so it turns many more tokens
# per second into cache than decode produces: the contrast the **Prefill and decode** page
# starts from. For decode, the roofline model above predicts a step time of a fixed part (the
# weights, read once whatever the batch) plus a part per sequence (its FLOPs and its cache). A
# straight line through the measured step times estimates both: the fixed part gives the rate
# at which the step reads the weights, and their ratio is the batch at which the sequences cost
# as much as the weights, the measured counterpart of the ridge batch.

# %% alt=["Two charts of decode measured on one CPU thread for contexts of 128 and 512 tokens. Left: step time (TPOT, ms) against batch 1 to 16 with a fitted straight line per context; the step grows from about 7 ms to 16 to 21 ms, much more slowly than the batch. Right, log-log: decode tokens/s against batch, rising with the batch but staying below a dashed line that shows the rate if the step stayed as at batch 1."]
fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
for context in sorted({r["context"] for r in rows}):
    points = [r for r in rows if r["context"] == context]
    batch = np.array([r["batch"] for r in points])
    tpot = np.array([r["tpot_ms"] for r in points])
    per_sequence, fixed = np.polyfit(batch, tpot, 1)
    print(f"context {context}: step ≈ {fixed:.2f} ms + ≈ {per_sequence:.2f} ms per sequence; "
          f"weights read at ≈ {weight_bytes / fixed / 1e6:.1f} GB/s; "
          f"sequences cost as much as the weights at batch ≈ {fixed / per_sequence:.0f}")
    line, = ax_t.plot(batch, tpot, "o", label=f"context {context}")
    ax_t.plot(batch, fixed + per_sequence * batch, "-", color=line.get_color(), lw=1)
    ax_r.loglog(batch, batch / tpot * 1e3, "o-", base=2, color=line.get_color(),
                label=f"context {context}")
ax_r.loglog(batch, batch / rows[0]["tpot_ms"] * 1e3, "k--", base=2, lw=1,
            label="if the step stayed as at batch 1")
ax_t.set_xlabel("batch (sequences)")
ax_t.set_ylabel("decode step, TPOT (ms)")
ax_t.set_ylim(bottom=0)
ax_t.legend(frameon=False)
ax_r.set_xlabel("batch (sequences)")
ax_r.set_ylabel("decode tokens/s")
ax_r.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The step grows much more slowly than the batch, so the tokens per second rise with it, as on
# a GPU; they stay below the dashed line because every sequence adds work that one CPU thread
# does at a modest rate (its FLOPs, its attention over its cache, the framework's per-step
# overheads), while on an accelerator with a short context the model above keeps the step
# nearly flat until the batch nears the ridge point (at long contexts the cache reads grow it
# first, as the previous section showed). A longer context makes every sequence read more
# cache per step and bends the curve earlier. The points are noisy (a shared virtual machine,
# each TPOT a mean over 32 steps of 3 repeats): read the fit as an order of magnitude.
# `decode_bench.py --device cuda` measures the
# same table on a GPU.
