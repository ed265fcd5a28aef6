# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 6e113bfcd281a9d2461585e9731eda58703bd8aa8ce9d53ac1c5dd6c099bc427
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
# # 显存构成：ZeRO 阶段、模型大小与激活值
#
# 本 notebook 用本书的估算器 `scripts/training/memory_estimator.py`（作为模块导入）画出本书"显存剖析"一页中的各项：数字来自命令行和测试所用的同一组函数。
#
# 读完后应当记住：
#
# 1. 对混合精度（mixed precision）Adam，**优化器状态（optimizer state）占模型状态的四分之三**（每参数 16 字节中的 12 字节），所以 ZeRO 阶段 1 带来了大部分节省。
# 2. 只有 **ZeRO-3 / FSDP** 能让模型状态随 GPU 增加而无限缩小；阶段 1 和 2 分别停在每参数 4 字节和 2 字节。
# 3. **激活值（activations）**取决于序列而不是参数量：注意力分数随序列长度的平方增长，在长序列下占主导，除非用选择性重计算或 flash attention 去掉它们。

# %%
import sys
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


est = book_module("scripts/training/memory_estimator.py", "memory_estimator")
GB, GIB = 1e9, 2**30

# %% [markdown]
# ## ZeRO 论文的例子
#
# [Rajbhandari 等人 2019](https://arxiv.org/abs/1910.02054) 的图 1：一个 75 亿参数的模型，混合精度 Adam（每参数 $2 + 2 + 12$ 字节），64 块数据并行（data parallelism）GPU。阶段 1 切分优化器状态，阶段 2 再切分梯度（gradient），阶段 3 再切分权重（weights）。论文给出的每块 GPU 显存为 120、31.4、16.6 和 1.9 GB。

# %% alt=["\u5806\u53e0\u6761\u5f62\u56fe\uff1a7.5B \u6a21\u578b\u5728 64 \u5757 GPU \u4e0a\u4ee5\u6df7\u5408\u7cbe\u5ea6 Adam \u8bad\u7ec3\u65f6\u6bcf\u5757 GPU \u7684\u6a21\u578b\u72b6\u6001\uff0c\u5206\u4e3a\u6743\u91cd\u3001\u68af\u5ea6\u548c\u4f18\u5316\u5668\u72b6\u6001\uff1a\u666e\u901a\u6570\u636e\u5e76\u884c 120 GB\uff08\u5176\u4e2d 90 GB \u662f\u4f18\u5316\u5668\u72b6\u6001\uff09\uff0cZeRO-1 \u4e3a 31.4 GB\uff0cZeRO-2 \u4e3a 16.6 GB\uff0cZeRO-3 \u4e3a 1.9 GB\uff0c\u4e0e ZeRO \u8bba\u6587\u7684\u6570\u5b57\u4e00\u81f4\u3002"]
params, dp = 7.5e9, 64
terms = ("weights", "gradients", "optimizer_states")
names_zh = {"weights": "权重", "gradients": "梯度", "optimizer_states": "优化器状态"}
rows = [est.model_state_bytes(params, "mixed", "adamw", zero=z, dp=dp) for z in range(4)]
for z, r in enumerate(rows):
    parts = "，".join(f"{names_zh[t]} {r[t] / GB:.2f}" for t in terms)
    print(f"阶段 {z}：每块 GPU {r['model_states'] / GB:6.2f} GB（{parts}）")

fig, ax = plt.subplots(figsize=(7, 3.6))
bottom = np.zeros(4)
for t, color in zip(terms, ("tab:blue", "tab:orange", "tab:green"), strict=True):
    vals = np.array([r[t] / GB for r in rows])
    ax.bar(["普通 DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"], vals, bottom=bottom,
           label=names_zh[t], color=color)
    bottom += vals
for i, total in enumerate(bottom):
    ax.text(i, total + 2, f"{total:.1f}", ha="center")
ax.set_ylabel("每块 GPU 的 GB（1 GB = 1e9 字节）")
ax.set_title("7.5B 模型在 64 块 GPU 上的模型状态（混合精度 Adam）")
ax.set_ylim(0, 135)
ax.legend()
plt.show()

# %% [markdown]
# ## 模型大小与 ZeRO 阶段
#
# 在 512 块 GPU 上，1B 到 1T 参数的模型每块 GPU 的模型状态，对照一块 80 GiB 的 GPU（虚线；激活值和缓冲区也需要空间）。阶段 1 和 2 的曲线是斜率为 1 的直线：无论 GPU 有多少，它们未切分的权重（和梯度）都随模型增长。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a512 \u5757\u6570\u636e\u5e76\u884c GPU\u3001\u6df7\u5408\u7cbe\u5ea6 Adam \u65f6\u6bcf\u5757 GPU \u7684\u6a21\u578b\u72b6\u6001\uff08GiB\uff09\u968f\u6a21\u578b\u5927\u5c0f\uff081B \u5230 1T \u53c2\u6570\uff09\u7684\u53d8\u5316\uff0c\u6bcf\u4e2a ZeRO \u9636\u6bb5\u4e00\u6761\u76f4\u7ebf\uff0c\u865a\u7ebf\u4e3a 80 GiB\u3002\u666e\u901a\u6570\u636e\u5e76\u884c\u5728\u7ea6 5B \u53c2\u6570\u65f6\u8d85\u8fc7 80 GiB\uff0c\u9636\u6bb5 1 \u7ea6 20B\uff0c\u9636\u6bb5 2 \u7ea6 40B\uff1b\u9636\u6bb5 3 \u5230 1T \u4ecd\u4f4e\u4e8e 80 GiB\uff0c\u90a3\u65f6\u7ea6 30 GiB\u3002"]
sizes = np.logspace(9, 12, 31)
dp = 512
fig, ax = plt.subplots(figsize=(7, 4))
for z, style in zip(range(4), ("-", "--", "-.", ":"), strict=True):
    per_gpu = [est.model_state_bytes(n, "mixed", "adamw", zero=z, dp=dp)["model_states"] / GIB
               for n in sizes]
    ax.loglog(sizes, per_gpu, style, label=f"ZeRO 阶段 {z}" if z else "普通 DP")
ax.axhline(80, color="grey", ls="--", lw=1)
ax.text(1.1e9, 95, "80 GiB", color="grey")
ax.set_xlabel("参数量")
ax.set_ylabel("每块 GPU 的模型状态（GiB）")
ax.set_title(f"混合精度 Adam，{dp} 块数据并行 GPU")
ax.legend()
plt.show()

for z in range(4):
    # 在 512 块 GPU 上，仅模型状态就能放进 80 GiB 的最大模型
    fits = [n for n in sizes
            if est.model_state_bytes(n, "mixed", "adamw", zero=z, dp=dp)["model_states"]
            <= 80 * GIB]
    print(f"阶段 {z}：网格上能放下的最大规模 = {max(fits) / 1e9:.0f}B 参数")

# %% [markdown]
# ## 每层激活值与序列长度
#
# [Korthikanti 等人 2022](https://arxiv.org/abs/2205.05198)：不做重计算时一层保留 $sbh(34 + 5as/h)$ 字节；选择性重计算（或 flash attention）去掉 $5as/h$ 项；完全重计算只保留层的输入 $2sbh$；张量并行（tensor parallelism）加序列并行把所有项除以 $t$。形状取 7B 级别模型：$h = 4096$，$a = 32$，微批次（micro-batch）为 1。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a\u4e00\u4e2a Transformer \u5c42\uff08h = 4096\uff0c32 \u4e2a\u5934\uff0c\u5fae\u6279\u5927\u5c0f 1\uff09\u7684\u6fc0\u6d3b\u503c\u5185\u5b58\uff08GiB\uff09\u968f\u5e8f\u5217\u957f\u5ea6\uff08512 \u5230 32768 \u4e2a token\uff09\u7684\u53d8\u5316\u3002\u4e0d\u91cd\u8ba1\u7b97\u65f6\u5b83\u56e0\u6ce8\u610f\u529b\u5206\u6570\u800c\u8d85\u7ebf\u6027\u589e\u957f\uff0c\u4ece\u7ea6 0.1 GiB \u5230\u7ea6 176 GiB\uff1b\u9009\u62e9\u6027\u91cd\u8ba1\u7b97\u4f7f\u5b83\u53d8\u6210\u7ebf\u6027\uff0c\u6700\u591a\u7ea6 4 GiB\uff1bTP 8 \u52a0\u5e8f\u5217\u5e76\u884c\u518d\u9664\u4ee5 8\uff1b\u5b8c\u5168\u91cd\u8ba1\u7b97\u53ea\u4fdd\u7559\u5c42\u7684\u8f93\u5165\uff0c\u662f\u6700\u4f4e\u7684\u4e00\u6761\u7ebf\uff0c32768 \u4e2a token \u65f6\u7ea6 0.25 GiB\u3002"]
h, a, b = 4096, 32, 1
seqs = 2 ** np.arange(9, 16)
cases = [("不重计算", dict()),
         ("选择性重计算", dict(recompute="selective")),
         ("完全重计算", dict(recompute="full")),
         ("TP 8 + SP，选择性", dict(tp=8, sequence_parallel=True, recompute="selective"))]
fig, ax = plt.subplots(figsize=(7, 4))
for label, kw in cases:
    ax.loglog(seqs, [est.activation_bytes_per_layer(int(s), b, h, a, **kw) / GIB for s in seqs],
              "o-", label=label, base=2)
ax.set_xlabel("序列长度 s（token）")
ax.set_ylabel("每层激活值（GiB）")
ax.set_title("一个 Transformer 层，h = 4096，a = 32，b = 1")
ax.legend()
plt.show()

s = 4096
full = est.activation_bytes_per_layer(s, b, h, a)
sel = est.activation_bytes_per_layer(s, b, h, a, recompute="selective")
print(f"s = {s}：5as/h = {5 * a * s / h:.0f}，对比 34；注意力分数占该层激活值的 "
      f"{(full - sel) / full:.0%}")

# %% [markdown]
# ## 一块 GPU 上的全部
#
# 一个 7B 级别模型（32 层，词表 32000，序列 4096，微批次 1，Megatron 式 bf16 加 fp32 梯度，8 块 GPU）在一块 GPU 上的全部预算，随 ZeRO 阶段和重计算模式变化。ZeRO-3 的柱子包含两层收集来的 bf16 权重（"临时"）。

# %% alt=["\u5806\u53e0\u6761\u5f62\u56fe\uff1a7B \u7ea7\u522b\u6a21\u578b\u5728 8 \u5757 GPU \u4e0a\u3001\u5e8f\u5217\u957f\u5ea6 4096 \u65f6\u6bcf\u5757 GPU \u7684\u5185\u5b58\uff08GiB\uff09\uff0c\u5206\u4e3a\u6743\u91cd\u3001\u68af\u5ea6\u3001\u4f18\u5316\u5668\u72b6\u6001\u3001\u6fc0\u6d3b\u503c\u548c\u4e34\u65f6\u7f13\u51b2\u533a\uff0c\u6bd4\u8f83 ZeRO \u9636\u6bb5 0\u30011\u30013 \u5728\u4e0d\u91cd\u8ba1\u7b97\u548c\u9009\u62e9\u6027\u91cd\u8ba1\u7b97\u4e0b\u7684\u60c5\u51b5\uff0c\u865a\u7ebf\u4e3a 80 GiB\u3002\u4e0d\u91cd\u8ba1\u7b97\u65f6\u6fc0\u6d3b\u503c\u5360\u5927\u5934\uff0c\u6bcf\u79cd\u914d\u7f6e\u90fd\u8d85\u8fc7 80 GiB\uff08208\u3001144 \u548c 112 GiB\uff09\uff1b\u9009\u62e9\u6027\u91cd\u8ba1\u7b97\u65f6 ZeRO-1\uff0864 GiB\uff09\u548c ZeRO-3\uff0832 GiB\uff09\u653e\u5f97\u8fdb\u3002"]
model = est.Model(layers=32, hidden=4096, heads=32, vocab=32000, seq=4096, micro_batch=1,
                  ffn=4 * 4096)
configs = [(z, r) for r in ("none", "selective") for z in (0, 1, 3)]
recompute_zh = {"none": "不重计算", "selective": "选择性重计算"}
labels, stacks = [], []
for z, r in configs:
    e = est.estimate(model=model, recipe="bf16-fp32-grads", zero=z, dp=8, recompute=r)
    b_ = e["per_gpu_bytes"]
    labels.append(f"ZeRO-{z}\n{recompute_zh[r]}")
    stacks.append([b_[k] / GIB for k in ("weights", "gradients", "optimizer_states",
                                         "activations", "temporary")])
stacks = np.array(stacks)
fig, ax = plt.subplots(figsize=(8, 4))
bottom = np.zeros(len(configs))
names = ("权重", "梯度", "优化器状态", "激活值", "临时")
for i, name in enumerate(names):
    ax.bar(labels, stacks[:, i], bottom=bottom, label=name)
    bottom += stacks[:, i]
ax.axhline(80, color="grey", ls="--", lw=1)
ax.set_ylabel("每块 GPU 的 GiB")
ax.set_title("7B 级别模型，8 块 GPU，s = 4096")
ax.legend(fontsize=8, ncol=2)
plt.show()
for label, total in zip(labels, bottom, strict=True):
    verdict = "放得进" if total < 80 else "放不进"
    print(f"{label.replace(chr(10), '，')}：{total:.1f} GiB，{verdict} 80 GiB")
