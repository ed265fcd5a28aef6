# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 4312b6765607fa0663053604cb91355fa25579742d18e02e7b543d0380458b57
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
# # 投机解码：期望加速比随接受率和草稿长度的变化
#
# 本部分的**投机解码**一页依据 Leviathan、Kalman 和 Matias（2023，[arXiv:2211.17192](https://arxiv.org/abs/2211.17192)）推导出两个公式。若草稿（draft）的每个 token 被目标模型（target model）接受的概率都为 $\alpha$ 且相互独立，每轮起草 $k$ 个 token，则目标模型每次前向传播（pass）平均产出
#
# $$E(\alpha, k) = \frac{1-\alpha^{k+1}}{1-\alpha}$$
#
# 个 token；若草稿模型一步的代价是目标模型一步的 $c$ 倍，则速度是普通解码的
#
# $$S(\alpha, k, c) = \frac{1-\alpha^{k+1}}{(1-\alpha)(kc+1)}$$
#
# 倍。本 notebook 画出这两个量，用对接受过程的模拟检验第一个公式，展示各轮接受率（acceptance rate）不相同时会发生什么，并标出 `scripts/inference/speculative_decoding.py` 在 CPU 上实测的点。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u6bcf\u6b21\u76ee\u6807\u524d\u5411\u4f20\u64ad\u7684\u671f\u671b token \u6570 E(\u03b1, k) \u968f\u8349\u7a3f\u957f\u5ea6 k\uff081 \u5230 16\uff09\u7684\u53d8\u5316\uff0c\u6bcf\u4e2a\u63a5\u53d7\u7387 \u03b1\uff080.5 \u5230 0.95\uff09\u4e00\u6761\u66f2\u7ebf\u3002\u6bcf\u6761\u66f2\u7ebf\u5148\u4e0a\u5347\u518d\u8d8b\u4e8e\u5e73\u7f13\uff0c\u903c\u8fd1 1/(1 \u2212 \u03b1)\uff1a\u03b1 = 0.5 \u65f6\u4e3a 2 \u4e2a token\uff08k = 6 \u5c31\u5df2\u8fbe\u5230\uff09\uff0c\u03b1 = 0.8 \u65f6\u4e3a 5 \u4e2a\uff0c\u03b1 = 0.95 \u65f6\u5230 k = 16 \u4ecd\u5728\u4e0a\u5347\uff0c\u7ea6\u4e3a 11.6\u3002"]
import json
import os
import urllib.request
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})

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
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)


def tokens_per_pass(alpha, k):
    """E(alpha, k)：每次目标前向传播产出的期望 token 数（Leviathan 等人 2023，公式 1）。"""
    alpha = np.asarray(alpha, dtype=float)
    return np.where(alpha < 1, (1 - alpha ** (k + 1)) / np.where(alpha < 1, 1 - alpha, 1), k + 1)


def speedup(alpha, k, c):
    """S(alpha, k, c)：相对普通解码的期望加速比，草稿一步的代价为目标一步的 c 倍。"""
    return tokens_per_pass(alpha, k) / (k * c + 1)


ks = np.arange(1, 17)
fig, ax = plt.subplots(figsize=(7, 4))
for alpha in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
    ax.plot(ks, tokens_per_pass(alpha, ks), "o-", ms=3, label=f"α = {alpha}")
ax.set_xlabel("草稿长度 k")
ax.set_ylabel("每次目标前向传播的 token 数 E(α, k)")
ax.legend(frameon=False, ncol=2)
fig.tight_layout()
plt.show()
for alpha in (0.5, 0.8, 0.9):
    print(f"alpha {alpha}：极限 1/(1-alpha) = {1 / (1 - alpha):.1f} 个 token；"
          + "，".join(f"k={k}：{float(tokens_per_pass(alpha, k)):.2f}" for k in (1, 2, 4, 8)))

# %% [markdown]
# 每条曲线都在 $1/(1-\alpha)$ 处饱和：$\alpha = 0.5$ 时，无论草稿多长，每次前向传播都产出不了超过 2 个 token；$\alpha = 0.9$ 时最多 10 个。草稿超过少数几个 token 之后，下一个 token 就很少能轮到，因为它之前的所有 token 都必须先被接受。
#
# ## 加速比与最优草稿长度
#
# 起草并不免费。对两种草稿代价 $c$（草稿一步的代价为目标一步的 5% 和 20%），下图给出加速比随 $\alpha$ 和 $k$ 的变化，并标出每个 $\alpha$ 下最优的 $k$：

# %% alt=["\u4e24\u5f20\u70ed\u56fe\uff1a\u52a0\u901f\u6bd4 S(\u03b1, k, c) \u968f\u63a5\u53d7\u7387 \u03b1\uff08\u6a2a\u8f74 0.3 \u5230 0.98\uff09\u548c\u8349\u7a3f\u957f\u5ea6 k\uff08\u7eb5\u8f74 1 \u5230 16\uff09\u7684\u53d8\u5316\uff0c\u5de6\u56fe\u8349\u7a3f\u4e00\u6b65\u7684\u4ee3\u4ef7\u4e3a\u76ee\u6807\u4e00\u6b65\u7684 5%\uff0c\u53f3\u56fe\u4e3a 20%\uff0c\u989c\u8272\u4ece 0.5 \u5230 5\u3002\u767d\u7ebf\u6807\u51fa\u52a0\u901f\u6bd4\u4e3a 1\uff1a\u5176\u5de6\u4e0a\u65b9\uff08\u03b1 \u4f4e\u3001\u8349\u7a3f\u957f\uff09\u6bd4\u666e\u901a\u89e3\u7801\u66f4\u6162\uff0cc = 0.2 \u65f6\u8fd9\u7247\u533a\u57df\u5927\u5f97\u591a\u3002\u7ea2\u8272\u9636\u68af\u7ebf\u6807\u51fa\u6bcf\u4e2a \u03b1 \u7684\u6700\u4f18 k\uff1a\u8349\u7a3f\u4fbf\u5b9c\u65f6\u4ece 2 \u5347\u5230 16\uff0c\u8349\u7a3f\u6602\u8d35\u65f6\u4ece 1 \u5347\u5230 \u03b1 = 0.9 \u65f6\u7684\u7ea6 7\u3002"]
alphas = np.linspace(0.3, 0.98, 69)
fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, c in zip(axes, (0.05, 0.2), strict=True):
    grid = np.array([[speedup(a, k, c) for a in alphas] for k in ks])
    mesh = ax.pcolormesh(alphas, ks, grid, shading="nearest", cmap="viridis", vmin=0.5, vmax=5)
    ax.contour(alphas, ks, grid, levels=[1.0], colors="white", linewidths=1.5)
    best = ks[np.argmax(grid, axis=0)]
    ax.plot(alphas, best, "r-", lw=1.5, label="最优 k")
    ax.set_title(f"加速比 S(α, k, c = {c})")
    ax.set_xlabel("接受率 α")
    ax.legend(frameon=False, loc="upper left")
axes[0].set_ylabel("草稿长度 k")
fig.colorbar(mesh, ax=axes, label="加速比（白线：1，没有收益）")
plt.show()
print(f"{'alpha':>6}{'最优 k, c=0.05':>16}{'S':>6}{'最优 k, c=0.2':>15}{'S':>6}")
for a in (0.5, 0.6, 0.7, 0.8, 0.9):
    row = [(ks[np.argmax(speedup(a, ks, c))], speedup(a, ks, c).max()) for c in (0.05, 0.2)]
    print(f"{a:>6}{row[0][0]:>16}{row[0][1]:>6.2f}{row[1][0]:>15}{row[1][1]:>6.2f}")

# %% [markdown]
# 廉价的草稿模型（draft model）能承受长草稿，接受率一般时也能带来收益；昂贵的草稿模型（一步的代价为目标模型的五分之一）需要 $\alpha$ 明显高于一半才会有帮助，而且它的最优草稿很短。在白线以下，投机反而让解码变慢。
#
# ## 检验公式及其假设
#
# 公式假设每个草稿 token 都以相同的概率被接受，且相互独立。直接模拟这一过程：逐个抽取是否接受，直到第一次拒绝或接受满 $k$ 个为止，统计产出的 token 数（被接受的 token，再加上来自目标模型的一个）。

# %%
rng = np.random.default_rng(0)


def simulate_rounds(alphas_per_round, k):
    """第 i 轮以概率 alphas_per_round[i] 接受每个草稿 token 时，每轮平均产出的 token 数。"""
    accepted = rng.random((len(alphas_per_round), k)) < np.asarray(alphas_per_round)[:, None]
    run = np.cumprod(accepted, axis=1).sum(axis=1)  # 第一次拒绝之前被接受的个数
    return float(np.mean(run + 1))


rounds = 200_000
print(f"{'k':>3}{'alpha':>7}{'公式':>9}{'模拟':>11}")
for k in (1, 4, 8):
    for a in (0.6, 0.9):
        print(f"{k:>3}{a:>7}{float(tokens_per_pass(a, k)):>9.3f}"
              f"{simulate_rounds(np.full(rounds, a), k):>11.3f}")

# %% [markdown]
# $\alpha$ 恒定时，模拟结果与公式之差在 0.005 个 token 以内。真实的接受率并不恒定：草稿模型几乎能完美地预测样板文本（boilerplate），对真正有意思的 token 却预测得很差。让 $\alpha$ 逐轮变化而均值不变，这里从均值为 0.7 的 Beta 分布中抽取：

# %%
mean_alpha = 0.7
print(f"{'分布':>22}{'k':>3}{'公式(均值 α)':>19}{'模拟':>11}")
for label, a, b in (("恒定", None, None), ("Beta(7, 3)", 7, 3), ("Beta(1.4, 0.6)", 1.4, 0.6)):
    per_round = np.full(rounds, mean_alpha) if a is None else rng.beta(a, b, rounds)
    for k in (2, 8):
        print(f"{label:>22}{k:>3}{float(tokens_per_pass(mean_alpha, k)):>19.3f}"
              f"{simulate_rounds(per_round, k):>11.3f}")

# %% [markdown]
# 各轮之间的接受率变化越大，对长草稿而言，用平均 $\alpha$ 代入公式就越*低估*每次前向传播产出的 token 数：$\alpha$ 接近 1 的轮次会跑完整段草稿，它们多得到的比 $\alpha$ 低的轮次少得到的更多。实测的接受率（被接受的草稿 token 数除以被检验的草稿 token 数，即直到第一次拒绝为止的那些）本身也偏向检验 token 最多的那些轮次。因此，把实测值与公式相比较只能作为合理性检查（sanity check），不能当作恒等式；脚本把两者都打印出来。
#
# ## 在 CPU 上的实测
#
# `scripts/inference/speculative_decoding.py` 在本书的语料上训练一个目标模型和一个更小的草稿模型，并用每种草稿长度解码留出的提示词（prompt）；它记录下来的一次运行：

# %% alt=["\u4e24\u5f20\u56fe\uff1aCPU \u4e0a\u7684\u5b9e\u6d4b\u8fd0\u884c\u4e0e\u516c\u5f0f\u7684\u5bf9\u6bd4\uff0c\u8349\u7a3f\u957f\u5ea6 k \u4ece 1 \u5230 16\uff08\u5bf9\u6570\u5750\u6807\uff09\u3002\u5de6\u56fe\uff1ak = 1\u30012\u30014\u30018 \u65f6\u5b9e\u6d4b\u7684\u6bcf\u6b21\u76ee\u6807\u524d\u5411\u4f20\u64ad token \u6570\uff081.6 \u5230 2.9\uff09\u6cbf\u7740\u53d6\u5b9e\u6d4b \u03b1 \u5747\u503c\u7684\u66f2\u7ebf E(\u03b1, k)\uff0c\u8349\u7a3f\u957f\u65f6\u7565\u4f4e\u4e8e\u5b83\u3002\u53f3\u56fe\uff1aS(\u03b1, k, c) \u9884\u6d4b\u7684\u76f8\u5bf9\u53ea\u7528\u76ee\u6807\u6a21\u578b\u7684\u52a0\u901f\u6bd4\u5728\u7ea6 1.25 \u5904\u8fbe\u5230\u5cf0\u503c\uff0ck = 4 \u4e4b\u540e\u4f4e\u4e8e 1\uff1b\u5b9e\u6d4b\u7684\u5899\u949f\u52a0\u901f\u6bd4\u5728 k = 1 \u548c 2 \u65f6\u7ea6\u4e3a 1.0\uff0ck = 4 \u548c 8 \u65f6\u964d\u5230 0.9 \u548c 0.7\uff0c\u63a5\u8fd1\u4ee3\u5165\u5b9e\u6d4b\u9a8c\u8bc1\u524d\u5411\u4f20\u64ad\u5f00\u9500\u7684\u9884\u6d4b\u3002"]
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


measured = json.loads(book_file("results/inference/speculative_decoding-cpu.json"))
c = measured["baseline"]["c"]
runs = measured["results"]
print(f"目标模型 {measured['models']['target']['parameters']:,} 个参数，草稿模型 "
      f"{measured['models']['draft']['parameters']:,} 个；解码方式 {measured['settings']['mode']}；"
      f"草稿一步的代价为 c ≈ {c:.2f} 个目标步")
print(f"{'k':>3}{'alpha':>9}{'token/前向':>14}{'E(alpha, k)':>14}{'加速比':>10}"
      f"{'S(alpha, k, c)':>17}{'输出相同':>13}")
for r in runs:
    print(f"{r['k']:>3} ≈ {r['alpha']:>6.2f} ≈ {r['tokens_per_target_pass']:>11.2f} "
          f"≈ {r['formula_tokens_per_pass']:>11.2f} ≈ {r['speedup']:>7.2f} "
          f"≈ {r['predicted_speedup']:>14.2f}{r['identical_to_target']:>9}/{r['prompts']}")

fig, (ax_e, ax_s) = plt.subplots(1, 2, figsize=(10, 4))
k_measured = np.array([r["k"] for r in runs])
alpha_mean = float(np.mean([r["alpha"] for r in runs]))
ax_e.plot(ks, tokens_per_pass(alpha_mean, ks), "-", label="E(α, k)，α 取实测均值")
ax_e.plot(k_measured, [r["tokens_per_target_pass"] for r in runs], "o", label="实测")
ax_e.set_xlabel("草稿长度 k")
ax_e.set_ylabel("每次目标前向传播的 token 数")
ax_s.plot(ks, speedup(alpha_mean, ks, c), "-", label="S(α, k, c)，取实测的 α 和 c")
ax_s.plot(k_measured, [r["predicted_speedup_v"] for r in runs], "s", mfc="none",
          label="S，代入实测的验证前向传播开销")
ax_s.plot(k_measured, [r["speedup"] for r in runs], "o", label="实测（墙钟时间）")
ax_s.axhline(1, color="grey", lw=1)
ax_s.set_xlabel("草稿长度 k")
ax_s.set_ylabel("相对只用目标模型的加速比")
for ax in (ax_e, ax_s):
    ax.set_xscale("log", base=2)
    ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# 可以看出三点。每次目标前向传播产出的 token 数符合公式的形状，对长草稿略低于公式，而公式假设 $\alpha$ 是一个恒定且相互独立的值，这一假设恰恰在长草稿上影响最大（见上文）。贪心（greedy）投机解码在每个提示词上都精确地返回目标模型自己的输出，正如**投机解码**一页所证明的。而墙钟（wall-clock）加速很小，甚至低于 1（比只用目标模型还慢）：这里草稿模型的代价是目标模型的三分之一，而不是上面的曲面所要求的百分之几；而且在 CPU 上，对 $k+1$ 个位置做一次验证前向传播明显比解码一步更贵（方形标记把这一实测开销代入公式，使预测更接近墙钟时间）。在 GPU 上，小批量的解码一步受显存带宽限制（memory-bound），因此验证 $k+1$ 个 token 的代价与一个 token 几乎相同，这正是公式所做的假设。
