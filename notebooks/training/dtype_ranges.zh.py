# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 38823ed3a95742a40f14b58e3e1c348fdc8dc4fcc43a0d259a1cb5853c952b7b
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
# # 用真实张量看浮点格式：范围、舍入与损失缩放
#
# 本书"张量精度"一页中的每个论断，都在 CPU 上用 PyTorch 张量核对：torch 支持 fp32、bf16、fp16 以及两种 fp8 格式（E4M3 和 E5M2）作为存储类型，所以即使没有 GPU，这里的转换及其舍入也是精确的。
#
# 读完后应当记住：
#
# 1. **fp16 在 65504 处上溢，在 6e-8 以下变成零**；bf16 保留 fp32 的范围，损失的是有效数字。
# 2. 在 16 位下，**小的更新量加到大的权重上会消失**，这就是主权重和长求和保持 fp32 的原因。
# 3. **损失缩放（loss scaling）**把小的 fp16 梯度移回可表示范围；bf16 不需要它。

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
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
FORMATS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
           "fp8 E4M3": torch.float8_e4m3fn, "fp8 E5M2": torch.float8_e5m2}


def cast(values, dtype):
    """把 float64 值舍入到 ``dtype`` 再转回：即该格式实际存储的值。"""
    return torch.tensor(values, dtype=torch.float64).to(dtype).to(torch.float64).tolist()


# %% [markdown]
# ## torch 眼中的各种格式
#
# `torch.finfo` 给出位数、最大值、最小正规数和机器 epsilon（1.0 之后的间隔，$m$ 位尾数时为 $2^{-m}$）。最小次正规数等于最小正规数乘以 epsilon。

# %%
print(f"{'格式':<8}{'位数':>5}{'最大值':>10}{'最小正规数':>10}{'最小次正规数':>10}{'eps':>11}")
for name, dt in FORMATS.items():
    fi = torch.finfo(dt)
    print(f"{name:<10}{fi.bits:>5}{fi.max:>12.4g}{fi.smallest_normal:>13.4g}"
          f"{fi.smallest_normal * fi.eps:>15.4g}{fi.eps:>11.4g}")

# %% [markdown]
# 几个数的位模式：符号 | 指数 | 尾数。1.0 的尾数为零，指数字段等于偏置（bf16 为 127，fp16 为 15，E4M3 为 7）。

# %%
LAYOUT = {torch.bfloat16: (8, 7, torch.int16), torch.float16: (5, 10, torch.int16),
          torch.float8_e4m3fn: (4, 3, torch.int8), torch.float8_e5m2: (5, 2, torch.int8)}


def bits(x, dt):
    e, m, itype = LAYOUT[dt]
    n = 1 + e + m
    raw = torch.tensor([x], dtype=dt).view(itype).item() & ((1 << n) - 1)
    s = format(raw, f"0{n}b")
    return f"{s[0]} {s[1:1 + e]} {s[1 + e:]}"


for x in (1.0, -2.0, 0.1):
    print(f"{x:>5}: " + " | ".join(f"{n} {bits(x, dt)}" for n, dt in
                                     (("bf16", torch.bfloat16), ("fp16", torch.float16),
                                      ("E4M3", torch.float8_e4m3fn))))

# %% [markdown]
# ## 转换之后还剩下什么
#
# 同样的值存进每种格式。fp16 把 70000 变成 `inf`，把 1e-9 变成 0；bf16 两者都保留，前者舍入成 70144（在 65536 附近相邻的数相差 512）。E4M3 没有无穷大：torch 把它饱和到 448。E5M2 表示得更远（57344），但数字更少：300 变成 320。

# %%
values = [1e-9, 1e-7, 1e-5, 3e-3, 1.0, 300.0, 500.0, 65504.0, 70000.0, 1e5]
print(f"{'值':>8}" + "".join(f"{n:>12}" for n in FORMATS))
columns = {n: cast(values, dt) for n, dt in FORMATS.items()}
for i, v in enumerate(values):
    print(f"{v:>9.3g}" + "".join(f"{columns[n][i]:>12.5g}" for n in FORMATS))

# %% [markdown]
# ## 舍入：相对误差与数值大小
#
# 在正规数范围内，一种格式的相对舍入误差至多为其 epsilon 的一半，与数值大小无关；低于最小正规数时（次正规数）误差增大，直到一切都舍入为零。图中转换了一百万个对数间隔的值。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u6563\u70b9\u56fe\uff1a\u4e00\u6b21\u8f6c\u6362\u7684\u76f8\u5bf9\u820d\u5165\u8bef\u5dee\u968f\u6570\u503c\uff081e-12 \u5230 1e6\uff09\u7684\u53d8\u5316\uff0c\u753b\u51fa bf16\u3001fp16\u3001fp8 E4M3 \u548c fp8 E5M2\u3002\u5728\u6bcf\u79cd\u683c\u5f0f\u7684\u6b63\u89c4\u6570\u8303\u56f4\u5185\uff0c\u8bef\u5dee\u4e0d\u8d85\u8fc7\u56fa\u5b9a\u7684\u4e0a\u9650\uff0c\u5373\u5176 epsilon \u7684\u4e00\u534a\uff1abf16 \u5728\u6574\u4e2a\u8303\u56f4\u5185\u7ea6 4e-3\uff0cfp16 \u5728\u7ea6 6e-5 \u4ee5\u4e0a\u7ea6 5e-4\uff0cfp8 \u683c\u5f0f\u7ea6 0.06 \u5230 0.125\u3002\u4f4e\u4e8e\u6b63\u89c4\u6570\u8303\u56f4\u65f6\u8bef\u5dee\u5347\u5230 1\uff0c\u6570\u503c\u88ab\u820d\u5165\u4e3a\u96f6\uff1afp16 \u7ea6\u5728 1e-7\uff0cE5M2 \u548c E4M3 \u7ea6\u5728 1e-5 \u548c 1e-3\uff1bE4M3 \u5728\u5176\u6700\u5927\u503c 448 \u4ee5\u4e0a\u8bef\u5dee\u4e5f\u63a5\u8fd1 100%\u3002"]
x = np.logspace(-12, 6, 1_000_000)
fig, ax = plt.subplots(figsize=(7, 4))
for name in ("bf16", "fp16", "fp8 E4M3", "fp8 E5M2"):
    y = np.array(cast(x, FORMATS[name]))
    rel = np.abs(y - x) / x
    ok = np.isfinite(rel)
    ax.loglog(x[ok][::50], np.maximum(rel[ok][::50], 1e-9), ".", ms=1, label=name)
ax.set_xlabel("值")
ax.set_ylabel("相对舍入误差")
ax.set_ylim(1e-6, 2)
ax.set_title("一次转换的相对误差（低于 1e-6 的误差被截断；不画 inf/NaN）")
ax.legend(markerscale=8)
plt.show()
for name in ("bf16", "fp16"):
    y = np.array(cast(x, FORMATS[name]))
    normal = (x >= torch.finfo(FORMATS[name]).smallest_normal) & (x <= torch.finfo(FORMATS[name]).max)
    worst = float(np.max(np.abs(y[normal] - x[normal]) / x[normal]))
    print(f"{name}：正规数范围内最大相对误差 = {worst:.3g}，"
          f"eps/2 = {torch.finfo(FORMATS[name]).eps / 2:.3g}")

# %% [markdown]
# ## 消失的更新：为什么主权重保持 fp32
#
# bf16 中值为 1.0 的权重，相邻的数是 $1 - 2^{-8}$ 和 $1 + 2^{-7}$。小于间隔一半的更新会被舍入回 1.0。学习率为 1e-4、Adam 更新量约为 1 时，bf16 权重的每一步都会丢失；fp32 的主权重则会移动。

# %%
w16 = torch.tensor(1.0, dtype=torch.bfloat16)
w32 = torch.tensor(1.0, dtype=torch.float32)
for _ in range(1000):
    w16 = w16 - 1e-4
    w32 = w32 - 1e-4
print(f"1000 次 -1e-4 的更新之后：bf16 权重 = {w16.item():.6f}，fp32 权重 = {w32.item():.6f}")
print(f"fp32 主权重的 bf16 副本 = {w32.to(torch.bfloat16).item():.6f}")

# %% [markdown]
# 长求和中的同一效应。把 1e-4 一次一次地加一万次，在 bf16 中会停在 0.03125：那里相邻数的间隔是 $2^{-12} \approx 2.4 \times 10^{-4}$，其一半大于增量。torch 对 bf16 张量的 `sum` 在内部以 fp32 累加，结果正确。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u7d2f\u52a0\u548c\u968f\u52a0 1e-4 \u7684\u6b21\u6570\uff08\u6700\u591a 10000 \u6b21\uff09\u7684\u53d8\u5316\uff1a\u4ee5 fp32 \u7d2f\u52a0\u65f6\u6cbf\u76f4\u7ebf\u5347\u5230 1.0\uff1b\u4ee5 bf16 \u7d2f\u52a0\u65f6\u51e0\u767e\u6b21\u540e\u5c31\u505c\u5728\u7ea6 0.03\uff0c\u56e0\u4e3a\u90a3\u65f6\u6bcf\u6b21\u7684\u589e\u91cf\u5df2\u5c0f\u4e8e\u76f8\u90bb bf16 \u6570\u4e4b\u95f4\u95f4\u9694\u7684\u4e00\u534a\u3002"]
inc = torch.tensor(1e-4, dtype=torch.bfloat16)
acc16, acc32, trace16, trace32 = torch.zeros((), dtype=torch.bfloat16), 0.0, [], []
for _ in range(10_000):
    acc16 = acc16 + inc
    acc32 += inc.item()
    trace16.append(acc16.item())
    trace32.append(acc32)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(trace32, label="以 fp32 累加")
ax.plot(trace16, label="以 bf16 累加")
ax.set_xlabel("加 1e-4 的次数")
ax.set_ylabel("累加和")
ax.legend()
plt.show()
print(f"bf16 累加和 = {acc16.item()}，fp32 累加和 = {acc32:.4f}，"
      f"bf16 张量的 torch.sum = {torch.full((10_000,), 1e-4, dtype=torch.bfloat16).sum().item():.4f}")

# %% [markdown]
# ## 损失缩放
#
# 梯度很小。取一组合成的梯度，其大小以 1e-6 为中心呈对数正态分布（代替 Micikevicius 等人 2017 中激活梯度的直方图）。在 fp16 中，其中一部分小于最小次正规数 $2^{-24}$，变成零。把损失（从而每个梯度）乘以 $S = 2^{16}$（PyTorch GradScaler 的初始缩放）就把它们移进范围；优化器再以 fp32 除以 $S$。

# %% alt=["\u76f4\u65b9\u56fe\uff08\u6a2a\u8f74\u4e3a\u5bf9\u6570\u5750\u6807\uff09\uff1a20 \u4e07\u4e2a\u4ee5\u7ea6 1e-6 \u4e3a\u4e2d\u5fc3\u7684\u5408\u6210\u68af\u5ea6\u5927\u5c0f\uff0c\u4ee5\u53ca\u540c\u6837\u7684\u68af\u5ea6\u4e58\u4ee5 2^16 \u540e\u7684\u5206\u5e03\uff0c\u4e2d\u5fc3\u7ea6\u5728 0.07\u3002\u865a\u7ebf\u6807\u51fa fp16 \u7684\u6700\u5c0f\u6b21\u6b63\u89c4\u6570\uff08\u7ea6 6e-8\uff09\uff0c\u5b83\u622a\u6389\u4e86\u672a\u7f29\u653e\u68af\u5ea6\u7684\u5de6\u5c3e\uff08\u5176\u4e2d 8% \u53d8\u6210 0\uff09\uff1b\u70b9\u7ebf\u6807\u51fa fp16 \u7684\u6700\u5927\u503c 65504\u3002\u4e58\u4ee5 2^16 \u4e4b\u540e\uff0c\u6574\u4e2a\u5206\u5e03\u843d\u5728\u4e24\u6761\u7ebf\u4e4b\u95f4\u3002"]
rng = np.random.default_rng(0)
grads = np.exp(rng.normal(np.log(1e-6), 2.5, 200_000))
for scale in (1.0, 2.0**16):
    in16 = np.array(cast(grads * scale, torch.float16)) / scale
    zero = np.mean(in16 == 0)
    inf = np.mean(~np.isfinite(in16))
    print(f"缩放 {scale:>7g}：{zero:.1%} 的梯度在 fp16 中变成 0，{inf:.1%} 上溢")
in_bf16 = np.array(cast(grads, torch.bfloat16))
print(f"bf16，不缩放：{np.mean(in_bf16 == 0):.1%} 变成 0")

fig, ax = plt.subplots(figsize=(7, 3.5))
bins = np.logspace(-14, 2, 80)
ax.hist(grads, bins=bins, alpha=0.5, label="梯度")
ax.hist(grads * 2.0**16, bins=bins, alpha=0.5, label="梯度 x 2^16")
ax.axvline(2.0**-24, color="k", ls="--", lw=1)
ax.axvline(65504, color="k", ls=":", lw=1)
ax.text(2.0**-24 * 1.5, ax.get_ylim()[1] * 0.85, "fp16 最小\n次正规数", fontsize=8)
ax.text(65504 / 1e3, ax.get_ylim()[1] * 0.85, "fp16 最大值", fontsize=8)
ax.set_xscale("log")
ax.set_xlabel("梯度大小")
ax.set_ylabel("个数")
ax.legend(loc="center left")
plt.show()
