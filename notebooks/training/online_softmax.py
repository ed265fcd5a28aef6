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
# # The online softmax behind flash attention and ring attention
#
# Flash attention ([Dao et al. 2022](https://arxiv.org/abs/2205.14135)) never stores the
# $s \times s$ attention matrix: it walks over blocks of keys and values and keeps, for
# every query row, three running quantities (the maximum score $m$, the normalizer
# $\ell$ and the unnormalized output $\tilde o$). The update rule, from
# [Milakov and Gimelshein 2018](https://arxiv.org/abs/1805.02867) and derived on the
# *Performance and MFU* page (section "Flash attention and the online softmax"), is
#
# $$ m' = \max(m, \max_{j \in \mathcal{B}} x_j),\quad
#    \ell' = e^{m-m'}\ell + \sum_{j \in \mathcal{B}} e^{x_j - m'},\quad
#    \tilde o\,' = e^{m-m'}\tilde o + \sum_{j \in \mathcal{B}} e^{x_j - m'} v_j . $$
#
# This notebook implements it with real torch tensors and checks, against PyTorch's own
# attention, that it gives the same result block by block, in any block order (which
# is what ring attention relies on when K/V blocks arrive from other GPUs), and with a
# causal mask. It runs on a CPU in a few seconds.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})
torch.manual_seed(0)

# %% [markdown]
# ## One row, one block at a time
#
# Start with one query row: scores $x_1..x_s$ and value rows $v_j$. The reference is
# `softmax(x) @ V`. The online version sees the scores 8 at a time and never holds
# more than one block.

# %%
def online_softmax_row(x, v, block):
    """softmax(x) @ v for one row, reading x and v in blocks; also returns m's history."""
    m = torch.tensor(float("-inf"), dtype=x.dtype)
    ell = torch.tensor(0.0, dtype=x.dtype)
    o = torch.zeros(v.shape[1], dtype=x.dtype)
    history = []
    for start in range(0, x.numel(), block):
        xb, vb = x[start:start + block], v[start:start + block]
        m_new = torch.maximum(m, xb.max())
        scale = torch.exp(m - m_new)            # rescales what was summed against the old max
        p = torch.exp(xb - m_new)
        ell = scale * ell + p.sum()
        o = scale * o + p @ vb
        m = m_new
        history.append((start + block, m.item(), ell.item()))
    return o / ell, history


s, dv = 64, 16
x = torch.randn(s, dtype=torch.float64) * 3
v = torch.randn(s, dv, dtype=torch.float64)
reference = torch.softmax(x, dim=0) @ v
online, history = online_softmax_row(x, v, block=8)
print("online result equals softmax(x) @ v:", torch.allclose(online, reference, atol=1e-12))
print("blocks read:", len(history), "of 8 scores each")

# %% [markdown]
# The running maximum only grows; every time it does, the normalizer accumulated so
# far is multiplied by $e^{m - m'} < 1$, which is why the curve of $\ell$ can drop
# even though every term added is positive.

# %% alt=["Two charts of one row of 64 attention scores read in blocks of 8. Left: the running maximum m against the scores seen, a staircase that only rises (from about \u22127 to about 8.5), with the value after each block as a dot. Right: the normalizer \u2113 after each block, relative to the current m: it grows from about 1 to about 2.4 while the maximum holds, and drops to about 1.25 when a new maximum rescales what was summed, although every term added is positive."]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
seen = [h[0] for h in history]
ax1.plot(range(1, s + 1), torch.cummax(x, 0).values, ".", ms=3, color="gray",
         label="max of the scores seen so far")
ax1.plot(seen, [h[1] for h in history], "o", color="tab:blue", label="m after each block")
ax1.set_xlabel("scores seen")
ax1.set_ylabel("running max m")
ax1.legend()
ax2.plot(seen, [h[2] for h in history], "o-", color="tab:orange")
ax2.set_xlabel("scores seen")
ax2.set_ylabel("normalizer ℓ (relative to current m)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Whole attention, blockwise
#
# Now the full computation for a batch of heads: queries against blocks of keys and
# values, each block applying the update to every query row at once. The result is
# compared with `torch.nn.functional.scaled_dot_product_attention`, with and without a
# causal mask. For the causal case, a block entirely above the diagonal contributes
# nothing and a real kernel skips it; here the mask is applied to every block, which
# gives the same numbers.

# %%
def blockwise_attention(q, k, v, block, causal=False, order=None):
    """Attention over (batch, heads, s, d) tensors, reading K/V in blocks of `block` rows.

    `order` is the sequence of block indices to visit (default: left to right).
    Keeps only (s, d) accumulators plus one (s, block) score tile per step.
    """
    *_, s_q, d = q.shape
    s_k = k.shape[-2]
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    ell = torch.zeros(q.shape[:-1], dtype=q.dtype)
    o = torch.zeros_like(q)
    starts = list(range(0, s_k, block))
    for i in (order if order is not None else range(len(starts))):
        j0 = starts[i]
        scores = q @ k[..., j0:j0 + block, :].transpose(-1, -2) / d**0.5
        if causal:
            rows = torch.arange(s_q)[:, None]
            cols = torch.arange(j0, min(j0 + block, s_k))[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, scores.amax(-1))
        scale = torch.exp(m - m_new)
        scale = torch.where(torch.isnan(scale), torch.zeros_like(scale), scale)  # -inf - -inf
        p = torch.exp(scores - m_new[..., None])
        ell = scale * ell + p.sum(-1)
        o = scale[..., None] * o + p @ v[..., j0:j0 + block, :]
        m = m_new
    return o / ell[..., None]


b, heads, s, d = 2, 4, 128, 32
q, k, v = (torch.randn(b, heads, s, d, dtype=torch.float64) for _ in range(3))
for causal in (False, True):
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for block in (16, 32, 128):
        out = blockwise_attention(q, k, v, block, causal=causal)
        print(f"causal={causal!s:5s} block={block:3d}: equals SDPA:",
              torch.allclose(out, ref, atol=1e-10))

# %% [markdown]
# ## Any block order: ring attention
#
# In ring attention each GPU holds the queries of its own chunk of the sequence and
# receives the other chunks' keys and values one after another, starting from a
# different chunk on every GPU. The update does not care about the order: the running
# maximum and the rescaling make the final $\tilde o / \ell$ independent of it. Here
# 4 simulated ranks each visit the K/V blocks in their ring order.

# %%
c = 4
chunk = s // c
for rank in range(c):
    ring_order = [(rank - step) % c for step in range(c)]  # own block first, then the ring
    out = blockwise_attention(q, k, v, chunk, order=ring_order)
    print(f"rank {rank}: visits K/V blocks {ring_order}; equals SDPA:",
          torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-10))

# %% [markdown]
# ## Why it matters: memory
#
# Standard attention materializes a score matrix and a probability matrix of
# $s \times s$ per head; the blockwise version keeps $s \times \text{block}$ scores at a
# time plus $O(s)$ statistics. In bf16 (2 bytes), per head and per sequence:

# %%
for s_len in (2048, 8192, 32768, 131072):
    full = 2 * s_len * s_len * 2
    tiled = 2 * s_len * 128 * 2 + 2 * s_len * 4   # one 128-wide tile + m and ℓ in fp32
    print(f"s = {s_len:6d}: full scores + probabilities {full / 2**20:10.1f} MiB, "
          f"one 128-wide tile {tiled / 2**20:6.2f} MiB")

# %% [markdown]
# Flash attention does exactly this on the GPU, with the tiles in on-chip SRAM, and
# recomputes the scores in the backward pass from $Q$, $K$ and the saved $m$ and
# $\ell$ rather than storing them: more FLOPs, much less memory traffic.
