# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: d2ea314cdda4edec025cadd5626e3c708cd62eed93aed30d856d3281bc0d419a
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
# # 找到两次运行分道扬镳的那一层
#
# **调试**一章的 `activation_diff.py` 在一次前向与反向传播中，为每一次模块调用记录其输出以及到达该输出的梯度的几个统计量，并指出两次运行之差第一次超过容差（tolerance）的那条记录。本 notebook 看的是整条曲线，而不只是它的第一个点：对同一个小模型的三组运行，按执行顺序逐条记录地画出两次运行之差：
#
# 1. 某个权重矩阵改变 0.1%（某一层里的 bug）；
# 2. 第二次运行使用 bfloat16（精度变化）；
# 3. 输入被扰动千万分之一（在 CPU 上模拟归约不确定的 GPU 在两次运行之间的噪声）。
#
# 第一组展示单个元凶是什么样子，第二组展示精度变化是什么样子，第三组说明如何选择 `--rtol`。全部在 CPU 上几秒内跑完。

# %%
import os
import sys
import urllib.request
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
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
torch.set_num_threads(1)

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


ad = book_module("scripts/debug/activation_diff.py", "activation_diff")

# %% [markdown]
# ## 模型与三组运行
#
# 十二个残差块（LayerNorm，一个把宽度扩大到四倍的 Linear，GELU，一个再变回原宽度的 Linear），接一个 Linear 输出头和均方误差。每次运行都从同一个种子构建模型，用 `ActivationRecorder` 记录一次前向与反向传播，并返回这些记录。

# %%
BLOCKS, WIDTH, BATCH = 12, 64, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def run(change=None, dtype=torch.float32, input_noise=0.0):
    """一次前向与反向传播的记录；`change(model)` 先修改模型。"""
    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(BLOCKS)], nn.Linear(WIDTH, 1))
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, 1)
    x = x * (1 + input_noise * torch.randn(BATCH, WIDTH))
    if change:
        change(model)
    model, x, y = model.to(dtype), x.to(dtype), y.to(dtype)
    recorder = ad.ActivationRecorder(model)
    ((model(x) - y) ** 2).mean().backward()
    recorder.remove()
    return recorder.records


def scale_weight(name, factor):
    def change(model):
        with torch.no_grad():
            model.get_submodule(name).weight.mul_(factor)
    return change


reference = run()
pairs = {
    "5.fc1 改变 0.1%": run(scale_weight("5.fc1", 1.001)),
    "B 用 bfloat16": run(dtype=torch.bfloat16),
    "输入噪声 1e-7": run(input_noise=1e-7),
}
RTOL = 1e-3
results = {name: ad.compare(reference, records, RTOL) for name, records in pairs.items()}
for name, result in results.items():
    first = result["first"]
    where = (f"{first['phase']} 第 {first['index']} 条记录，模块 '{first['a']['module']}'"
             if first else "无")
    print(f"{name:<16} 第一处超过 rtol {RTOL:g} 的分歧：{where}")

# %% [markdown]
# ## 沿前向传播的差异
#
# 每个点是一条被记录的输出，按模块执行的顺序排列；纵轴是 `activation_diff` 计算的差异（均值、均方根、最大绝对值和探针值中变化最大的那个，除以张量的均方根）。恰好为 0 的差异画在纵轴底部。

# %% alt=["\u4e0a\u4e0b\u4e24\u5f20\u5bf9\u6570\u5750\u6807\u56fe\uff0c\u4e0a\u4e3a\u524d\u5411\u3001\u4e0b\u4e3a\u53cd\u5411\uff1a\u6bcf\u4e2a\u8bb0\u5f55\u4e0b\u6765\u7684\u6a21\u5757\u8f93\u51fa\uff08\u6309\u6267\u884c\u987a\u5e8f\u7ea6 60 \u6761\u8bb0\u5f55\uff09\u4e0e\u53c2\u8003\u8fd0\u884c\u7684\u76f8\u5bf9\u5dee\u5f02\uff0c\u865a\u7ebf\u662f rtol 0.001\u30025.fc1 \u6539\u53d8 0.1% \u65f6\uff0c\u524d\u5411\u5dee\u5f02\u5728\u7b2c 26 \u6761\u8bb0\u5f55\uff08\u7ad6\u7ebf\u6807\u51fa\u7684 5.fc1\uff09\u4e4b\u524d\u4e3a\u96f6\uff0c\u5728\u90a3\u91cc\u8df3\u8fc7\u5bb9\u5dee\uff0c\u4e4b\u540e\u4fdd\u6301\u5728 1e-4 \u5230 1e-3 \u5de6\u53f3\uff1bbfloat16 \u7684\u8fd0\u884c\u4ece\u7b2c\u4e00\u6761\u8bb0\u5f55\u8d77\u5c31\u5728 1e-2 \u5de6\u53f3\uff1b1e-7 \u7684\u8f93\u5165\u566a\u58f0\u4fdd\u6301\u5728 1e-7 \u5230 1e-6\uff0c\u8fdc\u4f4e\u4e8e\u5bb9\u5dee\u3002\u53cd\u5411\u4f20\u64ad\u4e2d\uff0c\u6539\u4e86\u6743\u91cd\u7684\u8fd0\u884c\u5904\u5904\u90fd\u6709\u5dee\u5f02\uff0c\u63a5\u8fd1\u5bb9\u5dee\u3002"]
FLOOR = 1e-12


def curve(result, phase):
    rows = result["phases"][phase]["rows"]
    return np.array([max(row["difference"], FLOOR) for row in rows])


fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
for ax, phase in zip(axes, ("forward", "backward"), strict=True):
    for name, result in results.items():
        ax.semilogy(curve(result, phase), ".-", ms=3, lw=0.8, label=name)
    ax.axhline(RTOL, color="k", ls="--", lw=1, label=f"rtol {RTOL:g}")
    ax.set_ylim(FLOOR / 3, 1)
    ax.set_ylabel(f"差异，{ {'forward': '前向', 'backward': '反向'}[phase] }")
injected = next(row["index"] for row in results["5.fc1 改变 0.1%"]["phases"]["forward"]["rows"]
                if row["a"]["module"] == "5.fc1")
axes[0].axvline(injected, color="tab:blue", lw=0.6)
axes[1].set_xlabel("记录（按执行顺序；反向传播从损失往回走）")
axes[0].legend(frameon=False, fontsize=8, ncol=2, loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
# 在真实的比较中要找的正是这三种形状：
#
# * **单个元凶**：直到被修改的模块之前差异都为零，在那里跳起，之后每个模块都带着这份差异（残差连接让它大致保持不变）。虚线之上的第一个点就是答案。反向传播中每个梯度都不同：修改之后的模块，是因为修改改变了它们算出的值；修改之前的模块，是因为它们的梯度要倒流经过被修改的那一层。只有当前向曲线平坦时（例如自定义的 backward 写错了），反向曲线才能定位 bug。
# * **精度变化**：从第一条记录起就不为零（输入已被舍入），然后停在由该格式的舍入决定的水平上。这时第一处分歧没有意义；要看的是曲线是否、以及在哪里*升到*远高于这一水平。
# * **噪声**：远低于容差的一个底。在排查之前，先用同一配置的两次运行测出它，再把 `--rtol` 设在它之上、留足余量。
#
# 各水平的数值：

# %%
for name, result in results.items():
    forward = curve(result, "forward")
    nonzero = forward[forward > FLOOR]
    print(f"{name:<16} 前向：第一个非零值在第 "
          f"{int(np.argmax(forward > FLOOR)) if nonzero.size else '-'} 条记录；"
          f"中位数 ≈ {np.median(nonzero) if nonzero.size else 0:.2g}，"
          f"最大值 ≈ {forward.max():.2g}")
