# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 2fbc2700b1c897c8164ff5440a96742bcf18572b628a963bf3ce3ea41b176d43
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
# # 学习率调度、批大小逐步增大与计算最优的模型规模
#
# 本书"超参数"一页中的公式，写成以步数为自变量的函数，用 PyTorch 自带的调度器核对，并画出来。
#
# 读完后应当记住：
#
# 1. 常见的大语言模型调度都有**线性预热（warmup）**，区别在于如何衰减：余弦和线性衰减在整个训练中都在衰减，**预热-稳定-衰减**保持峰值、只在最后衰减，平方根倒数永远不会结束。
# 2. 余弦周期必须**与训练同时结束**；为更长训练规划的周期会让训练停止时学习率（learning rate）仍然很高。
# 3. 计算最优的规模由 $C = 6ND$ 和 $D = 20N$ 得出：$N = \sqrt{C/120}$。

# %%
import math
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml
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

# %% [markdown]
# ## 各种调度
#
# 峰值 $\eta_{\max}$，最终值 $\eta_{\min}$，$W$ 个预热步，共 $T$ 步，$\tau = (t - W)/(T - W)$ 为衰减已完成的比例。每个函数返回第 $t$ 步的学习率。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u56db\u79cd\u5b66\u4e60\u7387\u8c03\u5ea6\u5728 10000 \u6b65\u4e2d\u7684\u53d8\u5316\uff0c\u90fd\u5728 500 \u6b65\u5185\u7ebf\u6027\u9884\u70ed\u5230 3e-4 \u7684\u5cf0\u503c\u3002\u4f59\u5f26\u6cbf S \u5f62\u66f2\u7ebf\u3001\u7ebf\u6027\u8870\u51cf\u6cbf\u76f4\u7ebf\uff0c\u6700\u540e\u90fd\u964d\u5230 3e-5\uff1b\u9884\u70ed-\u7a33\u5b9a-\u8870\u51cf\u4e00\u76f4\u4fdd\u6301\u5cf0\u503c\u5230\u7b2c 9000 \u6b65\uff0c\u7136\u540e\u7ebf\u6027\u964d\u5230 3e-5\uff1b\u5e73\u65b9\u6839\u5012\u6570\u8d77\u521d\u4e0b\u964d\u5f88\u5feb\u3001\u4e4b\u540e\u5f88\u6162\uff0c\u6700\u540e\u7ea6\u4e3a 6.7e-5\u3002\u9884\u70ed-\u7a33\u5b9a-\u8870\u51cf\u7684\u5e73\u5747\u5b66\u4e60\u7387\u6700\u9ad8\u3002"]
def warmup(t, peak, W):
    return peak * (t + 1) / W          # 第 0 步就有一个很小的非零学习率


def cosine(t, peak, final, W, T):
    """线性预热，然后余弦衰减，在第 T 步到达 ``final``（Loshchilov 与 Hutter 2016）。"""
    if t < W:
        return warmup(t, peak, W)
    tau = min(1.0, (t - W) / (T - W))
    return final + 0.5 * (peak - final) * (1 + math.cos(math.pi * tau))


def linear(t, peak, final, W, T):
    if t < W:
        return warmup(t, peak, W)
    return peak - (peak - final) * min(1.0, (t - W) / (T - W))


def wsd(t, peak, final, W, T, decay_frac=0.1):
    """预热-稳定-衰减（Hu 等人 2024）：保持峰值，在最后 ``decay_frac`` 比例的步数内线性衰减。"""
    if t < W:
        return warmup(t, peak, W)
    start = T - int(decay_frac * T)
    if t < start:
        return peak
    return peak - (peak - final) * min(1.0, (t - start) / (T - start))


def inverse_sqrt(t, peak, W):
    """Vaswani 等人 2017：线性预热，之后与 1/sqrt(步数) 成正比。"""
    return warmup(t, peak, W) if t < W else peak * math.sqrt(W / (t + 1))


T, W, peak, final = 10_000, 500, 3e-4, 3e-5
steps = np.arange(T)
curves = {
    "余弦": [cosine(t, peak, final, W, T) for t in steps],
    "线性衰减": [linear(t, peak, final, W, T) for t in steps],
    "预热-稳定-衰减（10%）": [wsd(t, peak, final, W, T) for t in steps],
    "平方根倒数": [inverse_sqrt(t, peak, W) for t in steps],
}
fig, ax = plt.subplots(figsize=(7.5, 4))
for label, y in curves.items():
    ax.plot(steps, np.array(y) * 1e4, label=label)
ax.set_xlabel("步数")
ax.set_ylabel("学习率（x 1e-4）")
ax.set_title(f"峰值 {peak:g}，最终值 {final:g}，{T} 步中预热 {W} 步")
ax.legend()
plt.show()
for label, y in curves.items():
    print(f"{label}：最后一步的学习率 = {y[-1]:.2e}，平均学习率 = {np.mean(y):.2e}")

# %% [markdown]
# ## PyTorch 中的同样调度
#
# 调度就是交给 `torch.optim.lr_scheduler.LambdaLR` 的一个以步数为自变量的函数，它用该函数的值乘以优化器的基础学习率。不带预热时，我们的余弦必须与 PyTorch 的 `CosineAnnealingLR`（它没有预热）逐步相等。

# %%
def torch_lrs(make_scheduler, n):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return np.array(lrs)


T2, W2 = 1000, 50                                                  # 短的训练就够了
ours = np.array([cosine(t, peak, final, 0, T2) for t in range(T2)])   # 无预热
theirs = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=T2, eta_min=final), T2)
print("我们的余弦等于 CosineAnnealingLR：", np.allclose(ours, theirs, rtol=1e-6, atol=0))
via_lambda = torch_lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(
    o, lambda t: wsd(t, peak, final, W2, T2) / peak), T2)
print("LambdaLR 复现了 WSD 函数：",
      np.allclose(via_lambda, [wsd(t, peak, final, W2, T2) for t in range(T2)], rtol=1e-9))

# %% [markdown]
# ## 与训练不匹配的余弦周期
#
# Hoffmann 等人（2022，附录 B）发现，把余弦周期设得比训练长约 25% 以上，会得到明显更差的模型。原因一目了然：训练停止时学习率还很高。

# %% alt=["\u6298\u7ebf\u56fe\uff1a10000 \u6b65\u7684\u8bad\u7ec3\u4e2d\uff0c\u4f59\u5f26\u5468\u671f\u4e3a\u8bad\u7ec3\u957f\u5ea6\u7684 1\u30011.25 \u548c 2 \u500d\u65f6\u5b66\u4e60\u7387\u7684\u53d8\u5316\uff0c\u90fd\u5148\u7528\u540c\u6837\u7684 500 \u6b65\u9884\u70ed\u5230 3e-4\u3002\u5468\u671f\u4e0e\u8bad\u7ec3\u957f\u5ea6\u4e00\u81f4\u65f6\uff0c\u5b66\u4e60\u7387\u5728\u6700\u540e\u4e00\u6b65\u5230\u8fbe\u6700\u7ec8\u503c 3e-5\uff08\u5cf0\u503c\u7684 10%\uff09\uff1b\u5468\u671f\u4e3a 1.25 \u500d\u65f6\u7ed3\u675f\u4e8e\u5cf0\u503c\u7684 19%\uff0c2 \u500d\u65f6\u7ed3\u675f\u4e8e 57%\uff1a\u8bad\u7ec3\u7ed3\u675f\u65f6\u5b66\u4e60\u7387\u4ecd\u7136\u5f88\u9ad8\u3002"]
fig, ax = plt.subplots(figsize=(7.5, 3.5))
for cycle in (T, int(1.25 * T), 2 * T):
    y = [cosine(t, peak, final, W, cycle) for t in steps]
    ax.plot(steps, np.array(y) * 1e4, label=f"周期 = {cycle / T:g} x 训练长度")
    print(f"周期为训练长度的 {cycle / T:g} 倍：最后一步的学习率 = 峰值的 {y[-1] / peak:.0%}")
ax.set_xlabel("步数（训练在右边缘结束）")
ax.set_ylabel("学习率（x 1e-4）")
ax.legend()
plt.show()

# %% [markdown]
# ## 批大小逐步增大
#
# GPT-3（Brown 等人 2020，附录 B）在前 40 到 120 亿个 token（视模型大小而定）上把批大小（batch size）从 32K 个 token 线性增加到完整的 3.2M。下面按 175B 的做法：在 120 亿个 token 上从 32K 增加到 3.2M，并像框架那样取 32K 的整数倍（Megatron-LM 的 `--rampup-batch-size start increment samples` 以样本数做同样的事）。因为批次小时每步很短，逐步增大的阶段覆盖了很多步。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u5168\u5c40\u6279\u5927\u5c0f\uff08\u767e\u4e07 token\uff09\u968f\u5df2\u5904\u7406\u7684 token\uff08\u5341\u4ebf\uff0c0 \u5230 200 \u4ebf\uff09\u7684\u53d8\u5316\uff1a\u5728\u524d 120 \u4ebf\u4e2a token \u4e2d\u4ee5\u7ec6\u5bc6\u7684\u53f0\u9636\u4ece 32K \u7ebf\u6027\u589e\u957f\u5230 3.2M\uff0c\u4e4b\u540e\u4fdd\u6301\u5728 3.2M\u3002\u56e0\u4e3a\u65e9\u671f\u7684\u6279\u6b21\u5c0f\uff0c\u8fd9\u6bb5\u722c\u5347\u8981 19473 \u6b65\uff0c\u800c\u56fa\u5b9a 3.2M \u7684\u6279\u6b21\u5904\u7406\u540c\u6837\u7684 token \u53ea\u9700 3737 \u6b65\u3002"]
start, full, ramp_tokens, inc = 32_768, 3_211_264, 12e9, 32_768
tokens, batch, seen = [], [], 0.0
while seen < 20e9:
    b = start + (full - start) * min(1.0, seen / ramp_tokens)
    b = max(start, int(b // inc) * inc)
    tokens.append(seen)
    batch.append(b)
    seen += b
tokens, batch = np.array(tokens), np.array(batch)
ramp_steps = int(np.argmax(batch >= full))
fig, ax = plt.subplots(figsize=(7.5, 3.5))
ax.plot(tokens / 1e9, batch / 1e6)
ax.set_xlabel("已处理的 token（十亿）")
ax.set_ylabel("全局批大小（百万 token）")
plt.show()
print(f"达到完整批大小所需的步数：{ramp_steps}；固定 3.2M 的批次处理同样 120 亿个 token 只需 "
      f"{math.ceil(ramp_tokens / full)} 步")

# %% [markdown]
# ## 计算最优的模型规模
#
# 从本书的数据文件读出 Hoffmann 等人（2022）的表 3，与由 $C = 6ND$ 和每参数 20 个 token 推出的规则 $N = \sqrt{C/120}$、$D = 20N$ 对照。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a\u8ba1\u7b97\u6700\u4f18\u6a21\u578b\u7684\u53c2\u6570\u91cf\u548c\u8bad\u7ec3 token \u6570\u968f\u8bad\u7ec3\u7b97\u529b\uff081e18 \u5230 1e29 FLOPs\uff09\u7684\u53d8\u5316\uff1a\u5706\u70b9\u548c\u65b9\u5757\u662f Hoffmann \u7b49\u4eba 2022 \u5e74\u8868 3 \u7684\u6570\u503c\uff0c\u76f4\u7ebf\u662f\u89c4\u5219 N = sqrt(C/120) \u548c D = 20 N\u3002\u8868\u4e2d\u7684\u70b9\u90fd\u843d\u5728\u4e24\u6761\u76f4\u7ebf\u4e0a\uff0c\u53c2\u6570\u91cf\u4ece 0.4B \u5230 10T\uff0ctoken \u6570\u7ea6\u4e3a\u53c2\u6570\u91cf\u7684 20 \u500d\u3002"]
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


SUFFIX = {"M": 1e6, "B": 1e9, "T": 1e12}
rows = yaml.safe_load(book_file("data/training/chinchilla_optimal.yml"))["rows"]
N = np.array([float(r["params"][:-1]) * SUFFIX[r["params"][-1]] for r in rows])
D = np.array([float(r["tokens"][:-1]) * SUFFIX[r["tokens"][-1]] for r in rows])
C = np.array([float(r["flops"]) for r in rows])
c_grid = np.logspace(18, 29, 50)
fig, ax = plt.subplots(figsize=(7, 4))
ax.loglog(c_grid, np.sqrt(c_grid / 120), "-", color="tab:blue", label="N = sqrt(C/120)")
ax.loglog(c_grid, 20 * np.sqrt(c_grid / 120), "-", color="tab:orange", label="D = 20 N")
ax.loglog(C, N, "o", color="tab:blue", label="参数量（表 3）")
ax.loglog(C, D, "s", color="tab:orange", label="token 数（表 3）")
ax.set_xlabel("训练算力 C（FLOPs）")
ax.set_ylabel("参数量 / token 数")
ax.legend()
plt.show()
for n, d, c in zip(N, D, C, strict=True):
    print(f"C = {c:.2e}：表中 N = {n / 1e9:7.1f}B，规则 N = {math.sqrt(c / 120) / 1e9:7.1f}B，"
          f"每参数 token 数 = {d / n:.1f}")
budget = 1e23
n_opt = math.sqrt(budget / 120)
print(f"预算 1e23 FLOPs：N = {n_opt / 1e9:.1f}B 参数，D = {20 * n_opt / 1e9:.0f}B 个 token")
