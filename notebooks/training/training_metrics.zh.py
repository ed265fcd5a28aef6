# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: e4cab6324d39b6e3c370daf78e2438bd1fc3cfe9f166c30b1ddbd29bbd3005d3
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
# # 训练指标：读懂一次运行的日志
#
# 本 notebook 读取本书训练示例 `scripts/training/train_example.py` 在一次录制运行中用 `--metrics-jsonl` 写下的指标日志（一个微型 transformer 在两个 CPU 进程上跑 200 步 DDP，预热（warmup）加余弦调度，梯度裁剪（gradient clipping）阈值 1.0；命令见 `results/training/README.md`），并画出**训练指标**一页要你关注的各项。该文件已提交到仓库，所以打印出的每个数字都是固定的。
#
# 读完后应当记住：
#
# 1. **损失**下降到合成数据的熵下限（可以算出来），之后只在它附近波动：停在已知的下限上是成功，不是停滞。
# 2. 模型学会数据的结构之后，**梯度范数**下降到约四分之一；各块的范数一起变化，第一块最大。
# 3. **更新/权重比**跟随学习率（learning rate）：预热时上升，余弦衰减时下降。
# 4. **吞吐量（throughput）**随录制时那台共享机器的负载而波动，但**数据加载占比**始终低于一步的 4%：输入流水线不是训练的瓶颈。

# %%
import json
import math
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


RUN = "results/training/train_example-cpu-metrics.jsonl"
records = [json.loads(line) for line in book_file(RUN).decode("utf-8").splitlines()]
steps = np.array([r["step"] for r in records])


def column(key):
    return np.array([r[key] for r in records], dtype=float)


print(f"{len(records)} 个记录步，从第 {steps[0]} 步到第 {steps[-1]} 步")
print("字段：", ", ".join(records[0]))

# %% [markdown]
# ## 损失与熵下限
#
# 示例的数据是合成的：每个 token 以 0.9 的概率跟着一个固定的后继，否则跟着一个均匀随机的 token（词表 $V = 256$）。完美的模型以概率 $p = 0.9 + 0.1/V$ 预测那个后继，以 $q = 0.1/V$ 预测其他任一 token，所以任何模型都不可能低于条件熵
#
# $$ H = -p \ln p - (V - 1)\, q \ln q . $$
#
# 损失从 $\ln V$（均匀猜测）开始，值得关心的是它多快到达 $H$。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u5f55\u5236\u8fd0\u884c\u7684\u4ea4\u53c9\u71b5\u635f\u5931\uff08nats\uff0c\u5404 rank \u5e73\u5747\uff09\u5728 200 \u6b65\u4e2d\u7684\u53d8\u5316\uff1a\u4ece\u7ea6 5.7 \u5f00\u59cb\uff0c\u63a5\u8fd1 ln V = 5.55\uff08\u5747\u5300\u731c\u6d4b\uff0c\u70b9\u7ebf\uff09\uff0c\u5230\u7b2c 30 \u6b65\u5c31\u9661\u964d\u5230 0.88 \u7684\u71b5\u4e0b\u9650\uff08\u865a\u7ebf\uff09\u7684 10% \u4ee5\u5185\uff0c\u4e4b\u540e\u4e00\u76f4\u7565\u9ad8\u4e8e\u4e0b\u9650\uff0c\u5e73\u5747\u7ea6 0.93\u3002"]
V = 256
q = 0.1 / V
p = 0.9 + q
floor = -p * math.log(p) - (V - 1) * q * math.log(q)
loss = column("loss")
print(f"ln V = {math.log(V):.3f} nats；第一个记录的损失 = {loss[0]:.3f}")
print(f"熵下限 H = {floor:.3f} nats")
near = steps[np.argmax(loss < 1.1 * floor)]
print(f"第一个进入下限 10% 以内的记录步：{near}")
print(f"最后 100 步的平均损失 = {loss[steps > 100].mean():.3f}"
      f"（下限的 {loss[steps > 100].mean() / floor:.3f} 倍）")

fig, ax = plt.subplots(figsize=(7, 3.4))
ax.plot(steps, loss, marker=".", label="损失（各 rank 平均）")
ax.axhline(floor, color="grey", ls="--", lw=1, label=f"熵下限 {floor:.2f}")
ax.axhline(math.log(V), color="grey", ls=":", lw=1, label=f"ln V = {math.log(V):.2f}")
ax.set_xlabel("步")
ax.set_ylabel("交叉熵（nats）")
ax.set_title("录制运行的损失")
ax.legend()
plt.show()

# %% [markdown]
# ## 学习率、梯度范数与更新/权重比
#
# 记录的学习率就是优化器实际使用的值。梯度范数是裁剪前的全局 L2 范数，拆成每个 transformer 块一个范数，外加其余部分（嵌入、最后的归一化、输出头）一个；各部分的平方和等于整体的平方。更新/权重比是记录步那次优化器更新的每块 $\lVert \Delta w \rVert / \lVert w \rVert$；虚线标出 $10^{-3}$，即该页讨论的经验法则。

# %% alt=["\u4e09\u5f20\u56fe\uff0c\u5f55\u5236\u8fd0\u884c\u7684 200 \u6b65\u3002\u5de6\u56fe\uff1a\u5b66\u4e60\u7387\u5728\u7b2c 20 \u6b65\u9884\u70ed\u5230 3e-3\uff0c\u4e4b\u540e\u6309\u4f59\u5f26\u964d\u5230 3e-4\u3002\u4e2d\u56fe\uff08\u5bf9\u6570\u5750\u6807\uff09\uff1a\u88c1\u526a\u524d\u7684\u5168\u5c40\u68af\u5ea6\u8303\u6570\u5230\u7b2c 35 \u6b65\u4ece\u7ea6 0.6 \u964d\u5230\u7ea6 0.16 \u5e76\u4fdd\u6301\uff0c\u5404\u5757\u7684\u8303\u6570\uff08\u7ea6 0.04 \u5230 0.07\uff09\u548c\u5d4c\u5165\u52a0\u8f93\u51fa\u5934\u7684\u8303\u6570\uff08\u7ea6 0.12\uff09\u5728\u5b83\u4e0b\u9762\u3002\u53f3\u56fe\uff08\u5bf9\u6570\u5750\u6807\uff09\uff1a\u6bcf\u5757\u7684\u66f4\u65b0/\u6743\u91cd\u6bd4\u5728\u7b2c 20 \u6b65\u8fbe\u5230\u7ea6 0.024 \u7684\u5cf0\u503c\uff0c\u4e4b\u540e\u968f\u5b66\u4e60\u7387\u4e0b\u964d\uff0c\u5728\u63a5\u8fd1\u7ed3\u675f\u65f6\u8d8a\u8fc7 1e-3 \u7684\u865a\u7ebf\u3002"]
lr = column("lr")
gnorm = column("grad_norm")
blocks = np.array([r["grad_norm_blocks"] for r in records])
other = column("grad_norm_other")
ratio = np.array([r["update_ratio_blocks"] for r in records])
parts = np.sqrt((blocks ** 2).sum(axis=1) + other ** 2)
print(f"峰值学习率 {lr.max():.1e}，在第 {steps[lr.argmax()]} 步；"
      f"最后为 {lr[-1]:.1e}（峰值的 {lr[-1] / lr.max():.2f} 倍）")
print("全局范数等于各部分范数的合成：", bool(np.allclose(parts, gnorm, rtol=1e-5)))
print(f"最大梯度范数 {column('grad_norm_max').max():.3f}；"
      f"在 1.0 处被裁剪的步数：{records[-1]['clipped_steps']}；"
      f"计到的损失尖峰：{records[-1]['loss_spikes']}")
late = steps > 100
print(f"梯度范数：第一次记录 {gnorm[0]:.3f}，第 100 步之后平均 {gnorm[late].mean():.3f}")
print("第 100 步之后各块梯度范数（平均）：",
      ", ".join(f"{v:.3f}" for v in blocks[late].mean(axis=0)))
r_mean = ratio.mean(axis=1)
print(f"更新/权重比：最大 {r_mean.max():.4f}，在第 {steps[r_mean.argmax()]} 步；"
      f"最后 {r_mean[-1]:.4f}")
print(f"平均比值与学习率的相关系数 = "
      f"{np.corrcoef(r_mean, lr)[0, 1]:.2f}")

fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
axes[0].plot(steps, lr * 1e3)
axes[0].set_ylabel("学习率（× 1e-3）")
axes[0].set_title("预热 + 余弦调度")
axes[1].semilogy(steps, gnorm, color="black", lw=2, label="全局")
for i in range(blocks.shape[1]):
    axes[1].semilogy(steps, blocks[:, i], lw=1, label=f"块 {i}")
axes[1].semilogy(steps, other, lw=1, ls="--", label="嵌入 + 输出头")
axes[1].set_title("梯度范数（裁剪前）")
axes[1].legend(fontsize=8)
for i in range(ratio.shape[1]):
    axes[2].semilogy(steps, ratio[:, i], lw=1, label=f"块 {i}")
axes[2].axhline(1e-3, color="grey", ls="--", lw=1)
axes[2].set_title("每块的更新/权重比")
axes[2].legend(fontsize=8)
for ax in axes:
    ax.set_xlabel("步")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 吞吐量与数据加载时间
#
# `tokens_per_s` 是全局的（两个 rank 合计），`step_ms`/`data_ms` 是自上一行日志以来各步的平均值。这次运行与其他作业共用一台 2 核机器，所以这些数字有噪声；重要的是数据占比保持很小且平稳。

# %% alt=["\u4e24\u5f20\u56fe\uff0c\u5f55\u5236\u8fd0\u884c\u7684 200 \u6b65\uff0c\u8fd0\u884c\u5728\u5171\u4eab\u7684 2 \u6838\u673a\u5668\u4e0a\u3002\u5de6\u56fe\uff1a\u4e24\u4e2a rank \u5408\u8ba1\u7684\u541e\u5410\u91cf\uff08\u6bcf\u79d2\u5343\u4e2a token\uff09\uff0c\u5728\u7ea6 1.2 \u4e07\u5230 2.2 \u4e07\u4e4b\u95f4\u6ce2\u52a8\u3002\u53f3\u56fe\uff1a\u6bcf\u4e00\u6b65\u4e2d\u6570\u636e\u52a0\u8f7d\u6240\u5360\u7684\u6bd4\u4f8b\uff0c\u5e73\u7a33\u5730\u4fdd\u6301\u5728\u7ea6 1.3% \u5230 3.2%\uff1a\u6570\u636e\u52a0\u8f7d\u4e0d\u662f\u74f6\u9888\u3002"]
tok_s = column("tokens_per_s")
step_ms = column("step_ms")
data_ms = column("data_ms")
share = 100 * data_ms / step_ms
print(f"每秒 token 数中位数（第一步之后）= {np.median(tok_s[1:]):.0f}")
print(f"数据加载占一步的比例中位数 = {np.median(share[1:]):.1f}%；"
      f"最大 {share[1:].max():.1f}%")
print(f"结束时的峰值常驻内存 = 每进程 {records[-1]['peak_rss_mib']:.0f} MiB")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
axes[0].plot(steps[1:], tok_s[1:] / 1e3)
axes[0].set_ylabel("每秒 token 数（千，两个 rank 合计）")
axes[0].set_title("吞吐量")
axes[1].plot(steps[1:], share[1:], color="tab:red")
axes[1].set_ylabel("数据时间（占一步的 %）")
axes[1].set_ylim(0, max(10, share[1:].max() * 1.2))
axes[1].set_title("数据加载占比")
for ax in axes:
    ax.set_xlabel("步")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 可以试试
#
# 用高十倍的学习率（`--lr 3e-2`）或不加预热重新运行示例，比较梯度范数和更新比的图；加上 `--tensorboard tb/`，用 `tensorboard --logdir tb/` 实时查看同样的标签。在 GPU 上，日志还包含缓存分配器（caching allocator）的计数器（`active_mib`、`reserved_mib`、`max_allocated_mib`、`alloc_retries`、`ooms`）。
