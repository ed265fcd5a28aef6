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
# # KV cache paging: how many requests fit
#
# The **KV cache** page of this part explains why servers stopped reserving one contiguous
# cache buffer per request and moved to paged allocation (PagedAttention, Kwon et al. 2023,
# [arXiv:2309.06180](https://arxiv.org/abs/2309.06180)). This notebook measures the difference
# on a simulated server:
#
# 1. the memory each scheme wastes for a spread of request lengths, and how the page
#    (block) size changes it;
# 2. how many requests run at once when requests arrive, grow one token per step and leave,
#    under a fixed memory budget;
# 3. what sharing a common prompt between parallel samples saves.
#
# Everything is counted in tokens of cache: multiply by a model's KV bytes per token (the
# page's table, or `scripts/inference/kv_cache_calculator.py`) to get bytes. The lengths are
# drawn from log-normal distributions with a fixed seed; they stand for a chat-like workload,
# not for a measured trace.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

rng = np.random.default_rng(0)
MAX_LEN = 4096  # the longest sequence the server accepts (prompt + output)


def lengths(n, median, sigma, rng):
    """n log-normal token counts with the given median, clipped to [1, MAX_LEN]."""
    return np.clip(np.round(rng.lognormal(math.log(median), sigma, n)), 1, MAX_LEN).astype(int)


N = 20_000
prompt = lengths(N, 300, 1.0, rng)
output = lengths(N, 200, 0.9, rng)
total = np.minimum(prompt + output, MAX_LEN)
print(f"{N} requests: prompt median {np.median(prompt):.0f}, mean {prompt.mean():.0f}; "
      f"output median {np.median(output):.0f}, mean {output.mean():.0f}; "
      f"total mean {total.mean():.0f}, p99 {np.percentile(total, 99):.0f} tokens")

# %% [markdown]
# ## Waste at the final length
#
# Suppose every request holds its cache at its final length. A **contiguous** server that
# reserves `MAX_LEN` tokens per request uses only `length / MAX_LEN` of what it reserved. A
# **paged** server allocates blocks of `b` tokens as the sequence grows, so it wastes only the
# unfilled part of the last block: on average about `b / 2` tokens per sequence.

# %% alt=["Line chart of the share of the KV cache that holds tokens (%) against the block size of a paged cache, 1 to 512 tokens on a log scale, with a dashed line for a contiguous cache that reserves 4,096 tokens per request. Paged allocation stays above 95% up to 64-token blocks and falls to about 76% at 512, while the contiguous cache holds tokens in only about 19% of what it reserves."]
def paged_tokens(length, block):
    """Tokens of cache a sequence of `length` tokens occupies in blocks of `block` tokens."""
    return -(-length // block) * block


print(f"contiguous, reserving {MAX_LEN} per request: {100 * total.mean() / MAX_LEN:5.1f}% of the "
      "reserved cache holds tokens")
blocks = [1, 8, 16, 32, 64, 128, 256, 512]
used = [total.sum() / paged_tokens(total, b).sum() for b in blocks]
for b, u in zip(blocks, used, strict=True):
    print(f"paged, block {b:>3} tokens: {100 * u:5.1f}% holds tokens; "
          f"waste {paged_tokens(total, b).mean() - total.mean():6.1f} tokens per request")

fig, ax = plt.subplots(figsize=(7, 3.8))
ax.semilogx(blocks, [100 * u for u in used], "o-", base=2, label="paged")
ax.axhline(100 * total.mean() / MAX_LEN, color="tab:red", ls="--",
           label=f"contiguous, {MAX_LEN} reserved")
ax.set_xlabel("block size (tokens)")
ax.set_ylabel("cache holding tokens (%)")
ax.set_ylim(0, 105)
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# With a few hundred tokens per request and a 4,096-token limit, the contiguous scheme fills
# only a small fraction of its reservation. Paged allocation keeps the waste to half a block per
# sequence, one to two percent of the cache for blocks of 16 to 32 tokens (vLLM's default
# block is 16 tokens);
# larger blocks make the kernels' work easier but waste more. Reserving less than `MAX_LEN`
# (a per-request output cap) helps the contiguous scheme, but any cap either cuts long answers
# or keeps most of the waste.

# %% [markdown]
# ## A server over time
#
# Now a simple continuous-batching server. Requests wait in a first-come-first-served queue;
# before each decode step the server admits requests from the head of the queue while memory
# allows; each step adds one token to every running sequence (the prompt's tokens are counted
# as written at admission); a finished sequence frees its memory at once. The memory budget is
# `BUDGET` tokens of cache.
#
# * **Contiguous**: admission reserves `MAX_LEN` tokens; nothing else can go wrong.
# * **Paged**: admission needs the blocks that hold the prompt and one more token; a sequence
#   takes a new block when it fills its last one. If no block is free, the most recently
#   admitted sequence is preempted: its blocks are freed and it goes back to the head of the
#   queue, to be recomputed from scratch later (vLLM's recomputation, paper section 4.5).
#
# Requests arrive faster than the server can serve them, so the queue never empties and the
# number of running sequences measures what the memory allows.

# %%
BUDGET = 200_000
BLOCK = 16


def simulate(policy, reserve=0.0, steps=3000, seed=1):
    """Mean running sequences and preemptions per 1,000 steps for `policy` ("contiguous" or
    "paged") on an always-full queue of requests drawn as above; a paged server admits a request
    only if a fraction `reserve` of the budget stays free afterwards."""
    rng = np.random.default_rng(seed)
    queue, running, free = [], [], BUDGET
    running_counts, preemptions = [], 0
    for _ in range(steps):
        while len(queue) < 64:  # an endless backlog
            p, o = int(lengths(1, 300, 1.0, rng)[0]), int(lengths(1, 200, 0.9, rng)[0])
            queue.append([min(p, MAX_LEN - 1), max(1, min(o, MAX_LEN - p))])
        while queue:  # admit from the head while memory allows
            p, o = queue[0]
            need = MAX_LEN if policy == "contiguous" else paged_tokens(p + 1, BLOCK)
            if need > free - reserve * BUDGET:
                break
            queue.pop(0)
            free -= need
            running.append({"p": p, "o": o, "len": p, "held": need})
        for s in list(running):  # one decode step
            if s.get("preempted"):
                continue  # evicted earlier in this step
            s["len"] += 1
            if policy == "paged" and s["len"] > s["held"]:
                while free < BLOCK:  # preempt the newest until a block is free
                    victim = running.pop()
                    victim["preempted"] = True
                    free += victim["held"]
                    queue.insert(0, [victim["p"], victim["o"]])
                    preemptions += 1
                if s.get("preempted"):
                    continue
                free -= BLOCK
                s["held"] += BLOCK
            if s["len"] >= s["p"] + s["o"]:
                running.remove(s)
                free += s["held"]
        running_counts.append(len(running))
    return np.mean(running_counts[steps // 3:]), 1000 * preemptions / steps


results = {"contiguous": simulate("contiguous")}
for reserve in (0.0, 0.05, 0.1, 0.2):
    results[f"paged, reserve {reserve:.0%}"] = simulate("paged", reserve)
for name, (mean_running, preempt) in results.items():
    print(f"{name:>20}: {mean_running:6.1f} sequences running on average, "
          f"{preempt:5.1f} preemptions per 1,000 steps")
best = results["paged, reserve 0%"][0] / results["contiguous"][0]
print(f"paged with no reserve runs {best:.1f}x as many sequences as contiguous")

# %% [markdown]
# The contiguous server is capped at `BUDGET / MAX_LEN` sequences whatever their real length;
# the paged one runs about five times as many from the same memory, and since a decode step
# costs far less than proportionally more for more sequences (the **Prefill and decode**
# page), its throughput grows with them. The price is preemption: a paged server that
# admits greedily does not know the final lengths, runs out of blocks, and must evict and later
# recompute sequences, here about one every three steps. Keeping a few percent of the blocks
# free at admission removes the preemptions of this workload for a small loss of
# concurrency; the right reserve depends on how long the answers run.

# %% [markdown]
# ## Sharing a prompt
#
# Parallel sampling (`n` answers to one prompt) and beam search start every sequence with the
# same prompt. With paging, the prompt's full blocks are stored once and shared (its last,
# partly filled block is copied when a sequence first writes to it: copy-on-write).

# %%
p, o = 1000, 300
print(f"prompt {p} tokens, {o} generated per sample, blocks of {BLOCK}")
print(f"{'samples':>8}{'separate (tokens)':>19}{'shared (tokens)':>17}{'saved':>8}")
for n in (1, 2, 4, 8, 16):
    separate = n * paged_tokens(p + o, BLOCK)
    full_blocks = (p // BLOCK) * BLOCK  # whole prompt blocks, stored once
    shared = full_blocks + n * paged_tokens(p + o - full_blocks, BLOCK)
    print(f"{n:>8}{separate:>19,}{shared:>17,}{100 * (1 - shared / separate):>7.1f}%")

# %% [markdown]
# With 8 samples of a 1,000-token prompt the cache shrinks by more than half; the longer the
# prompt compared with the answers, the larger the saving. Prefix caching across *requests*
# (the page's section on it) applies the same sharing to prompts that different users send.
