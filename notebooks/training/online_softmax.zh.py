# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 1a870a502348e2556667bf2f83f3122edbef34fd1456add4857be76624fdbf02
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: book
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
# # flash attention 与 ring attention 背后的在线 softmax（online softmax）
#
# Flash attention（[Dao 等 2022](https://arxiv.org/abs/2205.14135)）从不保存 $s \times s$ 的注意力矩阵：它逐块遍历键和值，并为每个查询行维护三个滚动量（最大得分 $m$、归一化因子 $\ell$ 和未归一化的输出 $\tilde o$）。更新规则来自 [Milakov 和 Gimelshein 2018](https://arxiv.org/abs/1805.02867)，推导见《性能与 MFU》一页的"flash attention 与在线 softmax"一节：
#
# $$ m' = \max(m, \max_{j \in \mathcal{B}} x_j),\quad
#    \ell' = e^{m-m'}\ell + \sum_{j \in \mathcal{B}} e^{x_j - m'},\quad
#    \tilde o\,' = e^{m-m'}\tilde o + \sum_{j \in \mathcal{B}} e^{x_j - m'} v_j . $$
#
# 本笔记本用真实的 torch 张量实现它，并与 PyTorch 自己的注意力对照，检验它逐块计算、以任意块顺序计算（这正是 K/V 块从其他 GPU 到来时 ring attention 所依赖的）以及带因果掩码时都给出相同的结果。它在 CPU 上几秒钟就能跑完。

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})
torch.manual_seed(0)

# 中文标签需要 CJK 字体（Debian/Ubuntu：apt-get install fonts-noto-cjk）。
CJK_FONT = "Noto Sans CJK SC"
if not any(f.name == CJK_FONT for f in font_manager.fontManager.ttflist):
    # matplotlib 的字体缓存可能建于字体安装之前：到系统字体目录里找一次。
    for font_file in font_manager.findSystemFonts():
        if "NotoSansCJK" in font_file:
            font_manager.fontManager.addfont(font_file)
if any(f.name == CJK_FONT for f in font_manager.fontManager.ttflist):
    plt.rcParams["font.sans-serif"] = [CJK_FONT, *plt.rcParams["font.sans-serif"]]
    plt.rcParams["font.family"] = "sans-serif"
else:
    import warnings
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)

# %% [markdown]
# ## 一行，一次一块
#
# 从一个查询行开始：得分 $x_1..x_s$ 和值的各行 $v_j$。参考结果是 `softmax(x) @ V`。在线版本每次看 8 个得分，任何时候都只持有一块。

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
print("在线结果等于 softmax(x) @ v：", torch.allclose(online, reference, atol=1e-12))
print("读取的块数：", len(history), "，每块 8 个得分")

# %% [markdown]
# 滚动最大值只增不减；每当它增大，之前累积的归一化因子就要乘以 $e^{m - m'} < 1$，所以尽管加进去的每一项都是正的，$\ell$ 的曲线仍可能下降。

# %% alt=["\u4e24\u5f20\u56fe\uff1a\u4e00\u884c 64 \u4e2a\u6ce8\u610f\u529b\u5f97\u5206\uff0c\u6bcf\u5757 8 \u4e2a\u5730\u8bfb\u5165\u3002\u5de6\u56fe\uff1a\u6eda\u52a8\u6700\u5927\u503c m \u968f\u5df2\u770b\u5230\u7684\u5f97\u5206\u6570\u7684\u53d8\u5316\uff0c\u662f\u53ea\u5347\u4e0d\u964d\u7684\u9636\u68af\uff08\u4ece\u7ea6 \u22127 \u5230\u7ea6 8.5\uff09\uff0c\u6bcf\u5757\u4e4b\u540e\u7684\u503c\u7528\u5706\u70b9\u6807\u51fa\u3002\u53f3\u56fe\uff1a\u6bcf\u5757\u4e4b\u540e\u7684\u5f52\u4e00\u5316\u56e0\u5b50 \u2113\uff08\u76f8\u5bf9\u4e8e\u5f53\u524d\u7684 m\uff09\uff1a\u6700\u5927\u503c\u4e0d\u53d8\u65f6\u5b83\u4ece\u7ea6 1 \u589e\u957f\u5230\u7ea6 2.4\uff0c\u51fa\u73b0\u65b0\u7684\u6700\u5927\u503c\u65f6\uff0c\u5df2\u7d2f\u52a0\u7684\u90e8\u5206\u88ab\u91cd\u65b0\u7f29\u653e\uff0c\u5b83\u964d\u5230\u7ea6 1.25\uff0c\u5c3d\u7ba1\u6bcf\u6b21\u52a0\u4e0a\u7684\u9879\u90fd\u662f\u6b63\u6570\u3002"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3))
seen = [h[0] for h in history]
ax1.plot(range(1, s + 1), torch.cummax(x, 0).values, ".", ms=3, color="gray",
         label="已看到得分的最大值")
ax1.plot(seen, [h[1] for h in history], "o", color="tab:blue", label="每块之后的 m")
ax1.set_xlabel("已看到的得分数")
ax1.set_ylabel("滚动最大值 m")
ax1.legend()
ax2.plot(seen, [h[2] for h in history], "o-", color="tab:orange")
ax2.set_xlabel("已看到的得分数")
ax2.set_ylabel("归一化因子 ℓ（相对于当前的 m）")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 整个注意力，逐块计算
#
# 现在对一批头做完整的计算：查询对键和值的各块，每一块都对所有查询行同时应用更新。结果与 `torch.nn.functional.scaled_dot_product_attention` 比较，带与不带因果掩码两种情况。在因果情况下，完全位于对角线上方的块没有贡献，真实的 kernel 会跳过它；这里对每一块都施加掩码，得到的数字相同。

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
        print(f"causal={causal!s:5s} block={block:3d}：等于 SDPA：",
              torch.allclose(out, ref, atol=1e-10))

# %% [markdown]
# ## 任意块顺序：ring attention
#
# 在 ring attention 中，每块 GPU 持有自己那段序列的查询，依次接收其他段的键和值，而每块 GPU 的起始段各不相同。更新与顺序无关：滚动最大值和重新缩放使最终的 $\tilde o / \ell$ 与顺序无关。这里模拟 4 个 rank，每个按自己的环顺序访问 K/V 块。

# %%
c = 4
chunk = s // c
for rank in range(c):
    ring_order = [(rank - step) % c for step in range(c)]  # own block first, then the ring
    out = blockwise_attention(q, k, v, chunk, order=ring_order)
    print(f"rank {rank}：访问 K/V 块 {ring_order}；等于 SDPA：",
          torch.allclose(out, F.scaled_dot_product_attention(q, k, v), atol=1e-10))

# %% [markdown]
# ## 为什么重要：显存
#
# 标准注意力为每个头物化一个 $s \times s$ 的得分矩阵和一个概率矩阵；逐块版本每次只保留 $s \times \text{block}$ 个得分，外加 $O(s)$ 的统计量。以 bf16（2 字节）计，每个头、每条序列：

# %%
for s_len in (2048, 8192, 32768, 131072):
    full = 2 * s_len * s_len * 2
    tiled = 2 * s_len * 128 * 2 + 2 * s_len * 4   # one 128-wide tile + m and ℓ in fp32
    print(f"s = {s_len:6d}：完整得分 + 概率 {full / 2**20:10.1f} MiB，"
          f"一个宽 128 的分块 {tiled / 2**20:6.2f} MiB")

# %% [markdown]
# Flash attention 在 GPU 上做的正是这件事，分块放在片上 SRAM 中；反向传播时它根据 $Q$、$K$ 和保存的 $m$、$\ell$ 重算得分，而不是把得分存下来：FLOPs 更多，访存流量少得多。
