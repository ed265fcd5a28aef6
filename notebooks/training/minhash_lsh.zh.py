# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 8a6424ffddbfba4576517b036cd6a16b6d570f845f97416378da98e1c4d4e719
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
# # MinHash 与 LSH：近重复检测的行为
#
# 预训练语料的模糊去重（fuzzy deduplication）依赖两层近似。**MinHash** 把每篇文档的 shingle 集合换成一个短签名，两个签名的一致率就是两篇文档 Jaccard 相似度的估计；**LSH 分带（banding）** 再把签名变成一种廉价的候选搜索，两篇文档被配成候选对的概率是它们相似度的 S 形函数。本 notebook 对这两者都做测量，使用的是本书自己的工具 `scripts/training/minhash_dedup.py` 里的函数，所以这里看到的就是工具实际的行为。
#
# 读完后应当记住：
#
# 1. MinHash 估计是无偏的，误差随哈希函数个数 $k$ 按 $1/\sqrt{k}$ 缩小：签名长度翻四倍，误差减半。
# 2. 用 $b$ 个 band、每个 band $r$ 行做分带时，一对文档成为候选对的概率是 $1-(1-s^r)^b$；曲线在 $t=(1/b)^{1/r}$ 附近最陡，在 $k=br$ 固定时，每个 band 的行数越多，曲线越陡，但也越向右移。
# 3. 在本书附带的语料上，植入的近重复文档与无关文档在 Jaccard 上相距很远，所以阈值很好选；在真实网页数据上并非如此，这正是要人工检查阈值附近文档对的原因。
#
# 在 CPU 上几秒钟就能跑完。

# %%
import json
import random
import sys
import warnings
from itertools import combinations
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
    plt.rcParams["axes.unicode_minus"] = False
else:
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)


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


def book_module(rel, name):
    """The book's Python file `rel` (found as by book_file) imported as the module `name`."""
    import types
    module = types.ModuleType(name)
    module.__file__ = rel
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(book_file(rel), rel, "exec"), module.__dict__)
    return module


mh = book_module("scripts/training/minhash_dedup.py", "minhash_dedup")

# %% [markdown]
# ## Jaccard 相似度与 MinHash 估计
#
# 一篇文档被表示成 shingle（这里是词 5-gram）的集合 $A$。两篇文档用 Jaccard 相似度比较：
#
# $$ J(A,B) = \frac{|A \cap B|}{|A \cup B|}. $$
#
# MinHash 对每个 shingle 施加一个随机哈希函数 $h$，只保留最小值。$A \cup B$ 上的最小哈希值落在其中任何一个元素上的可能性相同，而两个最小值相等当且仅当它落在 $A \cap B$ 中，因此
#
# $$ P\left[\min_{x\in A} h(x) = \min_{x\in B} h(x)\right] = J(A,B) $$
#
# （[Broder 1997](https://doi.org/10.1109/SEQUEN.1997.666900)）。用 $k$ 个相互独立的哈希函数时，一致位置所占的比例 $\hat J$ 是一个二项比例：无偏，标准误差为 $\sqrt{J(1-J)/k}$。工具使用的是全域哈希（universal hash）$h_i(x) = (a_i x + b_i) \bmod (2^{61}-1)$，它只是近似地满足最小值独立（min-wise independent），所以下面的检查值得一做。
#
# 我们构造重叠程度可控的集合对（元素是随机字符串，除此之外不共享任何东西），比较估计值与精确值。

# %%
K_MAX = 512
PARAMS = mh.hash_params(K_MAX, seed=1)


def pair_with_jaccard(rng: random.Random, j: float, size: int = 120):
    """两个各含 size 个随机 shingle 的集合，共享 s 个，使 s/(2 size - s) 约等于 j。"""
    shared = round(2 * size * j / (1 + j))
    common = {f"c{rng.random()}" for _ in range(shared)}
    a = common | {f"a{rng.random()}" for _ in range(size - shared)}
    b = common | {f"b{rng.random()}" for _ in range(size - shared)}
    return a, b


rng = random.Random(2026)
targets = np.linspace(0.0, 1.0, 41)
pairs = [pair_with_jaccard(rng, j) for j in targets for _ in range(2)]
exact = np.array([mh.jaccard(a, b) for a, b in pairs])
sigs = [(mh.signature(a, PARAMS), mh.signature(b, PARAMS)) for a, b in pairs]


def estimates(k: int) -> np.ndarray:
    """用 K_MAX 个哈希函数中的前 k 个得到的 MinHash 估计。"""
    return np.array([mh.estimate_jaccard(sa[:k], sb[:k]) for sa, sb in sigs])


K = 128
est = estimates(K)
se = np.sqrt(exact * (1 - exact) / K)
inside = np.mean(np.abs(est - exact) <= 2 * se + 1e-12)
print(f"{len(pairs)} 对集合，k = {K}")
print(f"落在 2 个标准误差以内的估计所占比例：{inside:.2f}")
print(f"平均误差（估计 - 精确）：{np.mean(est - exact):+.4f}")

# %% alt=["\u6563\u70b9\u56fe\uff1a82 \u5bf9\u6587\u6863\u7684 MinHash \u4f30\u8ba1\uff08k = 128\uff09\u4e0e\u7cbe\u786e Jaccard \u76f8\u4f3c\u5ea6\u7684\u5bf9\u6bd4\uff0c\u76f8\u4f3c\u5ea6\u8986\u76d6 0 \u5230 1\uff0c\u753b\u6709\u5bf9\u89d2\u7ebf\u548c \u00b12 \u4e2a\u6807\u51c6\u8bef\u5dee\u7684\u9634\u5f71\u5e26\uff0c\u9634\u5f71\u5e26\u5728 0.5 \u9644\u8fd1\u6700\u5bbd\uff0c\u5728 0 \u548c 1 \u5904\u6536\u7a84\u4e3a\u96f6\u3002\u70b9\u6cbf\u5bf9\u89d2\u7ebf\u5206\u5e03\uff0c\u9664\u4e00\u4e2a\u5916\u90fd\u5728\u9634\u5f71\u5e26\u5185\u3002"]
fig, ax = plt.subplots(figsize=(5.5, 5))
grid = np.linspace(0, 1, 200)
band = 2 * np.sqrt(grid * (1 - grid) / K)
ax.fill_between(grid, grid - band, grid + band, color="tab:blue", alpha=0.15,
                label=r"$\pm 2\sqrt{J(1-J)/k}$")
ax.plot(grid, grid, color="tab:blue", lw=1)
ax.scatter(exact, est, s=12, color="tab:red", label=f"MinHash 估计，k = {K}")
ax.set_xlabel("精确 Jaccard 相似度")
ax.set_ylabel("MinHash 估计")
ax.set_title("MinHash 估计与精确 Jaccard 的对比")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# ## 误差与哈希函数个数的关系
#
# 签名长度 $k$ 同时决定内存（在本工具中，每篇文档每个哈希函数存一个 8 字节的值）和误差。取同一组长度为 512 的签名的前 $k$ 个值，上面这些集合对的均方根误差（RMSE）符合二项分布的预测 $\sqrt{\overline{J(1-J)}/k}$。

# %%
ks = np.array([8, 16, 32, 64, 128, 256, 512])
rmse = np.array([np.sqrt(np.mean((estimates(k) - exact) ** 2)) for k in ks])
predicted = np.sqrt(np.mean(exact * (1 - exact)) / ks)
for k, r, p in zip(ks, rmse, predicted, strict=True):
    print(f"k = {k:3d}：RMSE = {r:.4f}，二项分布预测 = {p:.4f}")
slope = np.polyfit(np.log(ks), np.log(rmse), 1)[0]
print(f"RMSE 对 k 的双对数斜率：{slope:.2f}（理论值 -0.5）")

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1aJaccard \u4f30\u8ba1\u7684\u5747\u65b9\u6839\u8bef\u5dee\u968f\u54c8\u5e0c\u51fd\u6570\u4e2a\u6570 k\uff088 \u5230 512\uff09\u7684\u53d8\u5316\uff1a\u5b9e\u6d4b\u8bef\u5dee\u4ece\u7ea6 0.14 \u964d\u5230\u7ea6 0.018\uff0c\u6cbf\u7740\u865a\u7ebf\u6240\u793a\u7684\u4e8c\u9879\u5206\u5e03\u9884\u6d4b sqrt(mean J(1 \u2212 J)/k)\uff0c\u7565\u4f4e\u4e8e\u5b83\uff0c\u659c\u7387\u4e3a \u22120.5\uff1a\u54c8\u5e0c\u51fd\u6570\u591a\u56db\u500d\uff0c\u8bef\u5dee\u51cf\u534a\u3002"]
fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(ks, rmse, "o-", color="tab:red", label="实测 RMSE")
ax.loglog(ks, predicted, "--", color="tab:blue", label=r"$\sqrt{\overline{J(1-J)}/k}$")
ax.set_xticks(ks)
ax.set_xticklabels([str(k) for k in ks])
ax.set_xlabel("哈希函数个数 k（签名长度）")
ax.set_ylabel("Jaccard 估计的 RMSE")
ax.set_title("MinHash 误差按 1/sqrt(k) 缩小")
ax.legend()
plt.show()

# %% [markdown]
# ## LSH 分带的 S 形曲线
#
# 两两比较所有签名的代价是文档数的平方。LSH 把每个签名切成 $b$ 个 band，每个 band $r$ 行，只比较至少有一个 band 所有行都相同的两篇文档。一个 band 相同的概率是 $s^r$，因此
#
# $$ P(\text{candidate}) = 1 - (1 - s^r)^b , $$
#
# 这是一条 S 形曲线，最陡的部分在 $t = (1/b)^{1/r}$ 附近（[Leskovec、Rajaraman 与 Ullman，《Mining of Massive Datasets》第 3.4 节](http://www.mmds.org/)）。下图画出同样 $k=128$ 个值的三种分法，外加 FineWeb 流水线使用的 $14 \times 8 = 112$（[datatrove `examples/fineweb.py`](https://github.com/huggingface/datatrove/blob/main/examples/fineweb.py)）。圆点是实测值：在 16 个 band、每个 band 8 行时，工具的 `lsh_candidates` 实际配成候选对的合成集合对所占的比例。

# %% alt=["\u56fe\uff1a\u6587\u6863\u5bf9\u6210\u4e3a LSH \u5019\u9009\u5bf9\u7684\u6982\u7387\u968f\u5176 Jaccard \u76f8\u4f3c\u5ea6\u7684\u53d8\u5316\uff0c\u56db\u79cd\u5206\u5e26\u65b9\u5f0f\uff1aS \u5f62\u66f2\u7ebf\u7684\u9661\u5ced\u90e8\u5206\u4f4d\u4e8e\u9608\u503c (1/b)^(1/r)\uff0c\u7528\u70b9\u7ebf\u6807\u51fa\uff1a32 \u5e26 4 \u884c\u4e3a 0.42\uff0c16 \u5e26 8 \u884c\u4e3a 0.71\uff0c14 \u5e26 8 \u884c\uff08FineWeb \u6240\u7528\uff09\u4e3a 0.72\uff0c8 \u5e26 16 \u884c\u4e3a 0.88\u3002\u7ea2\u70b9\u662f 16 \u5e26 8 \u884c\u65f6\u5728\u5408\u6210\u6587\u6863\u5bf9\u4e0a\u7684\u5b9e\u6d4b\u503c\uff0c\u6cbf\u7740\u8be5\u65b9\u5f0f\u7684\u66f2\u7ebf\u5206\u5e03\u3002"]
configs = [(32, 4), (16, 8), (8, 16), (14, 8)]
s = np.linspace(0, 1, 400)
fig, ax = plt.subplots(figsize=(7, 4.5))
for (b, r), color in zip(configs, ["tab:green", "tab:red", "tab:purple", "tab:gray"], strict=True):
    t = mh.lsh_threshold(b, r)
    ax.plot(s, [mh.candidate_probability(x, b, r) for x in s], color=color,
            label=f"b={b}，r={r}（k={b * r}），t={t:.2f}")
    ax.axvline(t, color=color, ls=":", lw=1)
    print(f"b = {b:2d}，r = {r:2d}：阈值 (1/b)^(1/r) = {t:.3f}；"
          f"s=0.5 时候选概率 {mh.candidate_probability(0.5, b, r):.3f}，"
          f"s=0.8 时 {mh.candidate_probability(0.8, b, r):.3f}")

# b=16、r=8 时按精确相似度分箱的实测候选率。
flat = [sig[:128] for pair in sigs for sig in pair]
cands = mh.lsh_candidates(flat, 16, 8)
hit = np.array([(2 * i, 2 * i + 1) in cands for i in range(len(pairs))], dtype=float)
bins = np.linspace(0, 1, 11)
which = np.clip(np.digitize(exact, bins) - 1, 0, 9)
centres = [(exact[which == i].mean(), hit[which == i].mean())
           for i in range(10) if np.any(which == i)]
ax.plot(*zip(*centres, strict=True), "o", color="tab:red", label="实测，b=16，r=8")
ax.set_xlabel("Jaccard 相似度 s")
ax.set_ylabel("成为候选对的概率")
ax.set_title("LSH 分带：1 - (1 - s^r)^b")
ax.legend(loc="upper left", fontsize=8)
plt.show()

# %% [markdown]
# 怎样读这些曲线（看打印出的数值）：32 个 band、每个 4 行时，$s=0.5$ 的文档对有 87% 成为候选对（要复核的候选对很多，工作量更大）；8 个 band、每个 16 行时，$s=0.8$ 的文档对只有 20% 成为候选对（召回率损失）。工具的默认值 16 个 band、每个 8 行，在 $s=0.5$ 时配对 6%，在 $s=0.8$ 时配对 95%。复核步骤（用估计的或精确的 Jaccard 与阈值比较）能去掉错误的候选对，却找不回漏掉的候选对，所以选择 $b$ 和 $r$ 时，应让阈值 $t$ 略低于你想捕获的相似度。

# %% [markdown]
# ## 本书附带的语料
#
# 本书附带一个植入了近重复文档的小型合成语料（`data/training/corpus.jsonl`，说明见同目录的 README）。它的两两精确 Jaccard 相似度说明了工具为什么能轻松找到这些重复：植入的文档对位于 0.6 到 1 之间，其余全部低于 0.3。

# %%
docs = [json.loads(line) for line in
        book_file("data/training/corpus.jsonl").decode().splitlines()]
sets = [mh.shingles(d["text"]) for d in docs]
planted, other = [], []
for i, j in combinations(range(len(docs)), 2):
    g = docs[i]["truth_dup_group"]
    (planted if g is not None and g == docs[j]["truth_dup_group"] else other).append(
        mh.jaccard(sets[i], sets[j]))
planted, other = np.array(planted), np.array(other)
print(f"{len(docs)} 篇文档，{len(planted) + len(other)} 个文档对")
print(f"植入的重复文档对：{len(planted)} 个，Jaccard 从 {planted.min():.2f} 到 "
      f"{planted.max():.2f}")
print(f"其余文档对：{len(other)} 个，Jaccard 最大 {other.max():.2f}")
print(f"其余文档对中 Jaccard > 0 的比例：{np.mean(other > 0):.3f}")

# %% alt=["\u76f4\u65b9\u56fe\uff08\u4e2a\u6570\u8f74\u4e3a\u5bf9\u6570\u523b\u5ea6\uff09\uff1a\u672c\u4e66\u8bad\u7ec3\u8bed\u6599\u4e2d\u6bcf\u5bf9\u6587\u6863\u7684\u7cbe\u786e Jaccard \u76f8\u4f3c\u5ea6\uff08\u8bcd 5-gram\uff09\uff0c\u865a\u7ebf\u4e3a\u5de5\u5177\u9608\u503c 0.7\u3002\u7ea6 21000 \u5bf9\u5176\u4f59\u6587\u6863\u5bf9\u843d\u5728 0 \u5230 0.3 \u4e4b\u95f4\uff0c\u5927\u591a\u63a5\u8fd1 0\uff1b58 \u5bf9\u690d\u5165\u7684\u8fd1\u91cd\u590d\u843d\u5728\u7ea6 0.6 \u5230 1.0 \u4e4b\u95f4\uff0c\u5927\u591a\u9ad8\u4e8e\u9608\u503c\uff0c\u5c11\u6570\u521a\u597d\u4f4e\u4e8e\u9608\u503c\u3002"]
fig, ax = plt.subplots(figsize=(7, 3.8))
edges = np.linspace(0, 1, 51)
ax.hist(other, bins=edges, color="tab:gray", label="其余文档对")
ax.hist(planted, bins=edges, color="tab:red", label="植入的近重复")
ax.axvline(0.7, color="k", ls="--", lw=1, label="工具阈值 0.7")
ax.set_yscale("log")
ax.set_xlabel("精确 Jaccard 相似度（词 5-gram）")
ax.set_ylabel("文档对数（对数刻度）")
ax.set_title("data/training/corpus.jsonl 中的两两相似度")
ax.legend()
plt.show()
