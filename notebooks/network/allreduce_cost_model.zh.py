# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: a0120ba2d7679829248d20237e1175d5e299949bee047062d14b2eb68bce315e
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
# # all-reduce 的 α–β 代价模型
#
# 数据并行（data parallelism）训练的每一步都以一次梯度（gradient）的 all-reduce
# 结束。因此，能在租用集群之前就预估一次 all-reduce 要花多长时间，并判断测得的数字是好是坏，是很有价值的。本 notebook 搭建一个仍然实用的最简模型——
# **α–β 模型**（延迟（latency）–带宽（bandwidth）模型，又称 Hockney 模型），把它用到 NCCL 做 all-reduce
# 的两种算法（环形 ring 与树形 tree）上，最后用本书基准测试的真实测量数据来拟合它。
#
# 读完后应当记住：
#
# 1. 小的 all-reduce 受**延迟**限制：耗时几乎与消息大小（message size）无关，报告出来的带宽远低于链路带宽。
# 2. 大的 all-reduce 受**带宽**限制；无论有多少个 rank，与链路带宽作比较的都应该是
#    **总线带宽（busbw）**，而不是算法带宽（algbw）。
# 3. 环形算法的延迟随 rank 数**线性**增长，树形算法则按**对数**增长；这就是为什么在大规模下，对中小消息来说树形算法很重要。
#
# 本 notebook 在 CPU 上几秒钟就能跑完，不需要 GPU。

# %%
import json
import math
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

# 图用 PNG（不用 SVG）：PDF 由保存下来的 PNG 生成，而 SVG 文本在不同机器上会不同。
set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

# 中文标签需要 CJK 字体（Debian/Ubuntu：apt-get install fonts-noto-cjk）。
# 缺少字体时照常运行，但汉字会显示成方框。
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
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)

# %% [markdown]
# ## 模型
#
# 在两个 rank 之间发送 $m$ 字节的消息耗时
#
# $$ t(m) = \alpha + \frac{m}{\beta} $$
#
# 其中 $\alpha$（秒）是每条消息的固定开销（软件开销、同步、线路延迟），$\beta$
# （字节/秒）是单个 rank 的链路在一个方向上的带宽。每个 rank 可以同时收发（全双工），并假设网络中没有争用。我们还忽略了做加法的时间（下文论文中的 $\gamma$ 项）：在 GPU 上，归约计算比链路快得多。
#
# 关于记号：Thakur、Rabenseifner 和 Gropp 用 $\beta$ 表示*每字节的传输时间*；我们用它的倒数，即*带宽*，这样 $\beta$ 就能直接与 busbw 比较。
#
# 设有 $n$ 个 rank，每个 rank 持有 $S$ 字节的缓冲区：
#
# | 算法 | 延迟项 | 带宽项 |
# |---|---|---|
# | 环形（reduce-scatter + all-gather） | $2(n-1)\,\alpha$ | $2\frac{n-1}{n}\,\frac{S}{\beta}$ |
# | 双二叉树（double binary tree，流水线） | $2\lceil\log_2 n\rceil\,\alpha$ | $2\,\frac{S}{\beta}$ |
# | 递归倍增（recursive doubling） | $\lceil\log_2 n\rceil\,\alpha$ | $\lceil\log_2 n\rceil\,\frac{S}{\beta}$ |
# | Rabenseifner（递归减半 + 递归倍增；$n$ 为 2 的幂） | $2\log_2 n\,\alpha$ | $2\frac{n-1}{n}\,\frac{S}{\beta}$ |
#
# 出处：环形、递归倍增和 Rabenseifner 算法见 [Thakur 等 2005][thakur]，环形另见 [Patarasuk & Yuan 2009][patarasuk]；双二叉树是我们对 [NCCL 2.4 树形算法][nccl24]的理想化。
#
# **环形。** 环形 all-reduce 就是一次 reduce-scatter 加一次 all-gather。每个阶段有 $n-1$ 步，每一步中每个 rank 向邻居发送一块 $S/n$ 的数据，所以耗时为
# $2(n-1)\,(\alpha + \frac{S}{n\beta})$。Thakur 等人为他们的环形 all-gather 和长消息 reduce-scatter 给出的代价相同，都是 $(n-1)\alpha + \frac{n-1}{n}\frac{S}{\beta}$
# （reduce-scatter 另加 $\gamma$ 项）。
# Patarasuk 和 Yuan 证明了带宽项——每个 rank 发送 $2\frac{n-1}{n}S$ 字节——是任何
# all-reduce 都必须发送的最少数据量；[nccl-tests 的 PERFORMANCE.md][perf] 也用同样的论证来定义 busbw。
#
# **树形。** NCCL 2.4 引入了*双二叉树*：在同一组 rank 上建两棵二叉树，每棵树各承载一半数据，并且每个 rank 至多在其中一棵树里是内部节点，在另一棵里是叶子。数据被切成小块，以流水线方式沿树向上（归约）再向下（广播）流动。我们这样建模：
#
# * 延迟：一块数据向上经过 $\lceil\log_2 n\rceil$ 层，再向下经过同样多层，所以是 $2\lceil\log_2 n\rceil\,\alpha$；
# * 带宽：每个 rank 在每棵树中向父节点发送 $S/2$（合计 $S$），并在它作为内部节点的那棵树中向两个子节点各发送 $S/2$（再加 $S$），共发送 $2S$ 字节：$2S/\beta$。
#
# 这里忽略了流水线的填充与排空（几个数据块的时间）和每块的额外开销，所以结果偏乐观；这是*我们*的简化，不是 NVIDIA 给出的公式。
#
# **模型哪里不对。** 它没有拓扑（topology）。纸面上 Rabenseifner 算法处处优于环形（带宽项相同，延迟是对数级），但它相距很远的通信伙伴在真实网络中会共享链路并发生争用；而环形只与邻居通信，能很干净地映射到 NVLink 和轨道优化（rail-optimized）网络上。用这个模型来推断趋势和数量级，真实数字还是要靠测量。
#
# [thakur]: https://doi.org/10.1177/1094342005051521
# [patarasuk]: https://doi.org/10.1016/j.jpdc.2008.09.002
# [nccl24]: https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/
# [perf]: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md

# %%
def t_ring(n, size, alpha, beta):
    """Ring all-reduce time (s) for n ranks and a buffer of `size` bytes."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * np.asarray(size, dtype=float) / beta


def t_tree(n, size, alpha, beta):
    """Idealised pipelined double-binary-tree all-reduce time (s)."""
    depth = np.ceil(np.log2(np.asarray(n, dtype=float)))
    return 2 * depth * alpha + 2 * np.asarray(size, dtype=float) / beta


def algbw(size, t):
    """Algorithm bandwidth (bytes/s), as nccl-tests defines it: size / time."""
    return np.asarray(size, dtype=float) / t


def busbw(n, size, t):
    """Bus bandwidth (bytes/s) of an all-reduce: algbw * 2(n-1)/n (nccl-tests)."""
    return algbw(size, t) * 2 * (n - 1) / n


def fmt_bytes(x):
    """Human-readable decimal size, 3 significant figures: 250000 -> '250 kB'."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} B"


# 示意参数，大致相当于一块 GPU 的节点间链路：
ALPHA = 5e-6   # 每条消息 5 µs
BETA = 50e9    # 每个方向 50 GB/s（一块 400 Gbit/s 网卡）
print(f"模型参数：α = {ALPHA * 1e6:g} µs，β = {BETA / 1e9:g} GB/s，"
      f"α·β = {fmt_bytes(ALPHA * BETA)}")

# %% [markdown]
# 画图之前，先检查后文依赖的代数关系。把环形算法的 busbw 展开，可以得到一个简洁的形式：
#
# $$ \text{busbw}_\text{ring}(S) = \frac{S}{T_\text{ring}}\cdot\frac{2(n-1)}{n}
#    = \beta\,\frac{S}{S + n\,\alpha\beta}, $$
#
# 所以对大消息，环形的 busbw 趋于 $\beta$，并在 $S_{1/2} = n\,\alpha\beta$ 处达到
# $\beta$ 的*一半*。树形的 busbw 趋于 $\beta\,(n-1)/n$；两种算法在
# $S^* = n\,(n-1-\lceil\log_2 n\rceil)\,\alpha\beta$ 处耗时相同。代码与这些公式一致时，下面的检查会输出 `True`。

# %%
sizes = np.logspace(3, 11, 161)  # 1 kB .. 100 GB
checks = {}
for n in (2, 8, 64, 512, 4096):
    bb = busbw(n, sizes, t_ring(n, sizes, ALPHA, BETA))
    checks[f"n={n}: busbw_ring = β·S/(S + nαβ)"] = np.allclose(
        bb, BETA * sizes / (sizes + n * ALPHA * BETA), rtol=1e-12)
    half = n * ALPHA * BETA
    checks[f"n={n}: busbw_ring(nαβ) = β/2"] = math.isclose(
        float(busbw(n, half, t_ring(n, half, ALPHA, BETA))), BETA / 2, rel_tol=1e-12)
    huge = 1e18
    checks[f"n={n}: busbw_tree → β(n-1)/n"] = math.isclose(
        float(busbw(n, huge, t_tree(n, huge, ALPHA, BETA))), BETA * (n - 1) / n, rel_tol=1e-6)
for name, ok in checks.items():
    print(f"{name:40s} {ok}")
print("全部检查通过：", all(checks.values()))

# %% [markdown]
# ## 1. 耗时与消息大小
#
# 在双对数坐标图上，模型有两条直线渐近线：一条水平线（延迟项，耗时与大小无关）和一条斜率为 1 的直线（带宽项）。对环形算法，两者之间的拐点大约在 $S \approx n\alpha\beta$：在它之下，消息加倍几乎不增加耗时；在它之上，耗时随消息一起加倍。
#
# 在 $n$ 很大时，树形的延迟低得多，但它的带宽项比环形大 $n/(n-1)$ 倍，所以对非常大的消息，环形又会胜出。图中的圆点标出交叉点 $S^*$。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a\u03b1\u2013\u03b2 \u6a21\u578b\uff08\u03b1 = 5 \u00b5s\uff0c\u03b2 = 50 GB/s\uff09\u4e0b all-reduce \u8017\u65f6\uff08\u79d2\uff09\u968f\u6bcf\u4e2a rank \u7684\u6d88\u606f\u5927\u5c0f\uff081 kB \u5230 100 GB\uff09\u7684\u53d8\u5316\uff0c\u5b9e\u7ebf\u4e3a\u73af\u5f62\u3001\u865a\u7ebf\u4e3a\u6811\u5f62\uff0crank \u6570\u4e3a 8\u300164 \u548c 512\u3002\u6bcf\u6761\u66f2\u7ebf\u5728\u6d88\u606f\u5c0f\u65f6\u5e73\u5766\uff08\u5ef6\u8fdf\u9879\uff09\uff0c\u4e4b\u540e\u4ee5\u659c\u7387 1 \u4e0a\u5347\uff08\u5e26\u5bbd\u9879\uff09\uff0c\u6d88\u606f\u5f88\u5927\u65f6\u5f7c\u6b64\u6c47\u5408\u3002\u73af\u5f62\u7684\u5e73\u5766\u90e8\u5206\u968f rank \u6570\u5347\u9ad8\uff0c512 \u4e2a rank \u65f6\u7ea6 5 ms\uff0c\u6811\u5f62\u5219\u4fdd\u6301\u5728 0.1 ms \u4ee5\u4e0b\uff1b\u5706\u70b9\u6807\u51fa\u73af\u5f62\u91cd\u65b0\u53d8\u5feb\u7684\u4f4d\u7f6e\uff0c\u7ea6\u4e3a 8 MB\u3001900 MB \u548c 64 GB\u3002"]
WORLD_SIZES = (8, 64, 512)
COLORS = dict(zip(WORLD_SIZES, ("tab:blue", "tab:orange", "tab:green"), strict=True))


def crossover(n, alpha, beta):
    """Message size (bytes) at which ring and tree take the same time."""
    return n * (n - 1 - math.ceil(math.log2(n))) * alpha * beta


fig, ax = plt.subplots(figsize=(8, 5))
for n in WORLD_SIZES:
    c = COLORS[n]
    ax.loglog(sizes, t_ring(n, sizes, ALPHA, BETA), color=c, label=f"环形，n={n}")
    ax.loglog(sizes, t_tree(n, sizes, ALPHA, BETA), color=c, ls="--", label=f"树形，n={n}")
    s_star = crossover(n, ALPHA, BETA)
    if s_star <= sizes[-1]:
        ax.plot(s_star, t_ring(n, s_star, ALPHA, BETA), "o", color=c)
ax.set_xlabel("每个 rank 的消息大小 S（字节）")
ax.set_ylabel("all-reduce 耗时（秒）")
ax.set_title(f"α–β 模型，α = {ALPHA * 1e6:g} µs，β = {BETA / 1e9:g} GB/s")
ax.legend(ncol=3, fontsize=8)
plt.show()

for n in WORLD_SIZES:
    s_star = crossover(n, ALPHA, BETA)
    same = math.isclose(float(t_ring(n, s_star, ALPHA, BETA)),
                        float(t_tree(n, s_star, ALPHA, BETA)), rel_tol=1e-12)
    print(f"n={n:4d}：消息小于 S* = {fmt_bytes(s_star):>8s} 时树形更快（S* 处环形 = 树形：{same}）")

# %% [markdown]
# ## 2. 总线带宽与消息大小
#
# nccl-tests 以表格形式输出的就是这条曲线。**algbw** $= S/T$ 是应用程序实际感受到的带宽，但对环形算法它趋于 $\beta\,n/(2(n-1))$，这个数随 rank 数变化。**busbw**
# 把它乘以 $2(n-1)/n$——每个 rank 至少要发送的那部分缓冲区——于是无论 $n$ 是多少，平台值都等于每个 rank 的链路带宽 $\beta$。这就是为什么应当拿 busbw 与硬件带宽比较：
# busbw 的平台值远低于链路速度，说明存在问题（链路变慢、拓扑不佳、算法选错），而不是 GPU 数量造成的。
#
# 每条曲线的左段都是受延迟限制的区间。环形在 $S_{1/2} = n\alpha\beta$ 处达到平台值的一半，而这个值随 $n$ 增长：rank 越多，要用好网络所需的消息就越大。这也是各框架把许多小梯度合并成一次大 all-reduce（分桶，bucketing）的原因之一。

# %% alt=["busbw\uff08GB/s\uff0c0 \u5230 55\uff09\u968f\u6bcf\u4e2a rank \u7684\u6d88\u606f\u5927\u5c0f\uff08\u5bf9\u6570\u5750\u6807\uff09\u53d8\u5316\u7684\u56fe\uff0c8\u300164 \u548c 512 \u4e2a rank\uff0c\u5b9e\u7ebf\u4e3a\u73af\u5f62\u3001\u865a\u7ebf\u4e3a\u6811\u5f62\uff0c\u70b9\u7ebf\u662f 50 GB/s \u7684\u94fe\u8def\u5e26\u5bbd \u03b2\u3002\u6bcf\u6761\u66f2\u7ebf\u90fd\u662f\u4ece\u96f6\u5230\u5e73\u53f0\u7684 S \u5f62\uff1a\u73af\u5f62\u7684\u5e73\u53f0\u503c\u4e0d\u8bba rank \u6570\u591a\u5c11\u90fd\u7b49\u4e8e \u03b2\uff0c\u6811\u5f62\u7565\u4f4e\uff088 \u4e2a rank \u65f6\u7ea6 44 GB/s\uff09\u3002\u73af\u5f62\u5728\u7ea6 2 MB\u300116 MB \u548c 128 MB \u5904\u8fbe\u5230 \u03b2 \u7684\u4e00\u534a\uff08\u5706\u70b9\uff09\uff1arank \u8d8a\u591a\uff0c\u7528\u597d\u7f51\u7edc\u6240\u9700\u7684\u6d88\u606f\u8d8a\u5927\u3002"]
fig, ax = plt.subplots(figsize=(8, 5))
for n in WORLD_SIZES:
    c = COLORS[n]
    ax.semilogx(sizes, busbw(n, sizes, t_ring(n, sizes, ALPHA, BETA)) / 1e9,
                color=c, label=f"环形，n={n}")
    ax.semilogx(sizes, busbw(n, sizes, t_tree(n, sizes, ALPHA, BETA)) / 1e9,
                color=c, ls="--", label=f"树形，n={n}")
    ax.plot(n * ALPHA * BETA, BETA / 2 / 1e9, "o", color=c)
ax.axhline(BETA / 1e9, color="black", lw=1, ls=":", label="链路带宽 β")
ax.set_xlabel("每个 rank 的消息大小 S（字节）")
ax.set_ylabel("busbw（GB/s）")
ax.set_ylim(0, BETA / 1e9 * 1.1)
ax.set_title("busbw = algbw · 2(n−1)/n；圆点：环形达到 β 的一半")
ax.legend(ncol=2, fontsize=8, loc="upper left")
plt.show()

for n in WORLD_SIZES:
    print(f"n={n:4d}：环形 busbw 在 S = nαβ = {fmt_bytes(n * ALPHA * BETA):>8s} 处达到 β/2；"
          f"树形平台值 = {BETA * (n - 1) / n / 1e9:.2f} GB/s")

# %% [markdown]
# ## 3. 耗时与 rank 数
#
# 固定消息大小，让作业规模增长。对小消息（1 MB，例如一个小层的单个梯度桶），环形的
# $2(n-1)\alpha$ 项占主导并线性增长：到几千个 rank 时要花几十毫秒，而树形仍低于
# 0.2 毫秒。对大消息（1 GB），带宽项占主导，几乎与 $n$ 无关，两种算法都约为
# $2S/\beta$，直到 $n$ 非常大时环形的延迟才追上来。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a\u6d88\u606f\u4e3a 1 MB \u548c 1 GB \u65f6\uff0call-reduce \u8017\u65f6\uff08\u79d2\uff09\u968f rank \u6570\uff082 \u5230 8192\uff09\u7684\u53d8\u5316\uff0c\u5b9e\u7ebf\u4e3a\u73af\u5f62\u3001\u865a\u7ebf\u4e3a\u6811\u5f62\u30021 MB \u65f6\u73af\u5f62\u7684\u8017\u65f6\u968f rank \u6570\u7ebf\u6027\u589e\u957f\uff0c\u4ece\u7ea6 30 \u00b5s \u5230\u7ea6 80 ms\uff0c\u6811\u5f62\u6309\u5bf9\u6570\u589e\u957f\uff0c\u59cb\u7ec8\u4f4e\u4e8e 0.2 ms\u30021 GB \u65f6\u4e24\u8005\u90fd\u4fdd\u6301\u5728\u7ea6 40 ms\uff0c\u76f4\u5230\u7ea6 1000 \u4e2a rank \u4ee5\u4e0a\u73af\u5f62\u7684\u5ef6\u8fdf\u7d2f\u79ef\u8d77\u6765\uff0c8192 \u4e2a rank \u65f6\u8fbe\u5230\u7ea6 120 ms\u3002"]
ranks = 2 ** np.arange(1, 14)  # 2 .. 8192
fig, ax = plt.subplots(figsize=(8, 5))
for size, c in ((1e6, "tab:purple"), (1e9, "tab:red")):
    ax.loglog(ranks, t_ring(ranks, size, ALPHA, BETA), color=c, marker=".",
              label=f"环形，S = {fmt_bytes(size)}")
    ax.loglog(ranks, t_tree(ranks, size, ALPHA, BETA), color=c, ls="--", marker=".",
              label=f"树形，S = {fmt_bytes(size)}")
ax.set_xscale("log", base=2)
ax.set_xlabel("rank 数 n")
ax.set_ylabel("all-reduce 耗时（秒）")
ax.set_title("环形延迟随 n 线性增长，树形延迟按对数增长")
ax.legend(fontsize=8)
plt.show()

for n in (8, 1024, 8192):
    print(f"n={n:5d}，S = 1 MB：环形 {float(t_ring(n, 1e6, ALPHA, BETA)) * 1e3:7.3f} ms，"
          f"树形 {float(t_tree(n, 1e6, ALPHA, BETA)) * 1e3:7.3f} ms")

# %% [markdown]
# ## 4. 用测量数据拟合模型
#
# 本书的 all-reduce 基准测试（`scripts/network/`）把结果以 JSON 格式保存在
# `results/network/` 下。这里用的是在一台 CPU 机器上以 `gloo` 后端、2 个进程（process）跑出的结果：不是 GPU 集群，但物理规律相同，只是规模更小，而且任何人都能复现。
#
# 固定 $n$ 时，环形模型对两个未知量 $\alpha$ 和 $1/\beta$ 是线性的：
#
# $$ T(S) = \underbrace{2(n-1)}_{c_1}\,\alpha + \underbrace{2\tfrac{n-1}{n}S}_{c_2(S)}\cdot\frac{1}{\beta}, $$
#
# 因此对所有测得的消息大小做一次线性最小二乘拟合，就能同时得到两者。测得的耗时跨越好几个数量级，所以我们最小化的是*相对*误差（每一行都除以它的测量耗时）；否则最大的几条消息会决定一切，$\alpha$ 只会拟合出噪声。当 $n = 2$ 时，所有 all-reduce 算法做的事情都一样（每个 rank 发出一半缓冲区、收到另一半，然后反过来），所以 gloo 选用哪种算法并不重要。
#
# 下面输出的数字取决于运行基准测试的机器（测试 notebook 输出时会把它们屏蔽掉，见 `notebooks/README.md`）。

# %%
RESULTS = "results/network/all_reduce_bench-cpu-gloo-2proc.json"


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


def fit_alpha_beta(n, size, t):
    """Least-squares fit of t = 2(n-1)·α + 2(n-1)/n·S/β, minimising relative error.

    Returns (alpha in s, beta in bytes/s).
    """
    size = np.asarray(size, dtype=float)
    t = np.asarray(t, dtype=float)
    a = np.column_stack([np.full_like(size, 2 * (n - 1)), 2 * (n - 1) / n * size])
    coef, *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    return coef[0], 1 / coef[1]


def sig2(x):
    """x rounded to 2 significant figures, without an exponent when possible."""
    return f"{float(f'{x:.2g}'):g}"


bench = json.loads(book_file(RESULTS))
n_meas = bench["world_size"]
rows = sorted(bench["results"], key=lambda r: r["size_bytes"])
s_meas = np.array([r["size_bytes"] for r in rows], dtype=float)
t_meas = np.array([r["time_us"] for r in rows]) * 1e-6
bb_meas = np.array([r["busbw_GBps"] for r in rows]) * 1e9

alpha_fit, beta_fit = fit_alpha_beta(n_meas, s_meas, t_meas)
rel_err = np.abs(t_ring(n_meas, s_meas, alpha_fit, beta_fit) / t_meas - 1)

print(f"基准测试：{bench['benchmark']}，后端 {bench['backend']}，设备 {bench['device']}，"
      f"{n_meas} 个 rank，{bench['dtype']}，{len(rows)} 种消息大小，从 "
      f"{fmt_bytes(s_meas[0])} 到 {fmt_bytes(s_meas[-1])}")
print(f"拟合结果：α ≈ {sig2(alpha_fit * 1e6)} µs，β ≈ {sig2(beta_fit / 1e9)} GB/s，"
      f"α·β ≈ {sig2(alpha_fit * beta_fit / 1e3)} kB")
print(f"拟合的相对误差：中位数 ≈ {sig2(np.median(rel_err) * 100)} %，"
      f"最大值 ≈ {sig2(rel_err.max() * 100)} %")
print("busbw 一列 = algbw · 2(n−1)/n：",
      np.allclose(bb_meas, busbw(n_meas, s_meas, t_meas), rtol=0.05, atol=0.01e9))

# %% [markdown]
# 左图是测得的耗时、拟合出的模型及其两条渐近线；右图是测得的 busbw 与模型曲线
# $\beta\,S/(S + n\alpha\beta)$ 的对比。如果模型拟合得好，测量点会在两条渐近线的交点 $S \approx n\alpha\beta$ 附近拐弯，busbw 会稳定在拟合出的 $\beta$ 附近。偏差本身也有信息量：中等消息处出现的凸起通常说明库切换了算法或协议；最大几档消息的 busbw
# 下降，往往说明缓冲区已经放不进缓存了。

# %% alt=["\u4e24\u5f20\u56fe\uff1a\u5b9e\u6d4b\u7684 all-reduce \u57fa\u51c6\uff08CPU \u4e0a\u7684 gloo\uff0c2 \u4e2a rank\uff09\u4e0e\u62df\u5408\u7684\u73af\u5f62\u6a21\u578b\u7684\u5bf9\u6bd4\uff0c\u6d88\u606f\u5927\u5c0f 1 kB \u5230 268 MB\uff08\u5bf9\u6570\u5750\u6807\uff09\u3002\u5de6\u56fe\u4e3a\u5bf9\u6570\u5750\u6807\u7684\u8017\u65f6\uff08\u00b5s\uff09\uff1a\u7ea6 1 MB \u4ee5\u4e0b\u7684\u6d4b\u91cf\u503c\u6563\u5e03\u5728\u7ea6 400 \u5230 1700 \u00b5s \u4e4b\u95f4\uff0c\u56f4\u7ed5\u62df\u5408\u7684\u5e73\u5766\u5ef6\u8fdf\u9879\uff0c\u4e4b\u540e\u6cbf\u659c\u7387\u4e3a 1 \u7684\u5e26\u5bbd\u9879\u4e0a\u5347\u3002\u53f3\u56fe\u4e3a busbw\uff08GB/s\uff09\uff1a\u6d4b\u91cf\u503c\u6cbf\u6a21\u578b\u7684 S \u5f62\u66f2\u7ebf\uff0c\u4ece 100 kB \u4ee5\u4e0b\u63a5\u8fd1\u96f6\u4e0a\u5347\u5230\u7ea6 1.5 GB/s \u7684\u5e73\u53f0\uff0c\u63a5\u8fd1\u62df\u5408\u7684 \u03b2\uff08\u7ea6 1.6 GB/s\uff09\u3002"]
s_line = np.logspace(np.log10(s_meas[0]) - 0.3, np.log10(s_meas[-1]) + 0.3, 200)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
ax1.loglog(s_meas, t_meas * 1e6, "o", color="tab:blue", label="测量值")
ax1.loglog(s_line, t_ring(n_meas, s_line, alpha_fit, beta_fit) * 1e6, color="black",
           label="拟合的环形模型")
ax1.loglog(s_line, np.full_like(s_line, 2 * (n_meas - 1) * alpha_fit * 1e6), ":",
           color="gray", label="延迟项 2(n−1)α")
ax1.loglog(s_line, 2 * (n_meas - 1) / n_meas * s_line / beta_fit * 1e6, "--",
           color="gray", label="带宽项 2(n−1)/n·S/β")
ax1.set_ylim(t_meas.min() * 1e6 / 3, t_meas.max() * 1e6 * 3)
ax1.set_xlabel("每个 rank 的消息大小 S（字节）")
ax1.set_ylabel("耗时（µs）")
ax1.set_title(f"all-reduce，{bench['backend']}，{bench['device']}，n = {n_meas}")
ax1.legend(fontsize=8)

ax2.semilogx(s_meas, bb_meas / 1e9, "o", color="tab:blue", label="测得的 busbw")
ax2.semilogx(s_line, busbw(n_meas, s_line, t_ring(n_meas, s_line, alpha_fit, beta_fit)) / 1e9,
             color="black", label="模型 busbw")
ax2.axhline(beta_fit / 1e9, color="gray", ls=":", label="拟合的 β")
ax2.set_ylim(0, max(bb_meas.max(), beta_fit) / 1e9 * 1.15)
ax2.set_xlabel("每个 rank 的消息大小 S（字节）")
ax2.set_ylabel("busbw（GB/s）")
ax2.set_title("busbw：测量值与拟合模型")
ax2.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 要点
#
# * 耗时 $\approx$ 延迟项 + 带宽项。当 $S$ 小于约 $n\alpha\beta$ 时，all-reduce 受延迟限制；解决办法是把小张量合并到一起（分桶）。
# * 拿 **busbw** 与链路带宽比较。对环形算法它趋近 $\beta$；如果大 all-reduce 的
#   busbw 远低于链路速度，就该到硬件、拓扑或配置中去找问题。
# * 环形的延迟按 $2(n-1)\alpha$ 增长。到几百上千个 rank 时，每次 all-reduce 要多花几毫秒，这就是 NCCL 还提供树形算法（$2\lceil\log_2 n\rceil\alpha$）、并按消息大小和规模在两者之间选择的原因。
# * 模型里没有拓扑、争用和协议切换：把它当作合理性检查和推断趋势的工具，真实性能还是要实测。
