# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: d0b0c71233fbb47709f36a50ef918b78395335b7963a0cfac13dd2c5c77770bb
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
# # 训练中的浮点上溢与下溢
#
# 混合精度（mixed precision）训练中追查 NaN 和 Inf，大多会归结到四种机制之一：某个值增长到超过其 dtype 的最大有限值（**上溢**（overflow）为 Inf，之后 Inf − Inf 或 0 × Inf 就得到 NaN）；某个值缩小到低于最小值（**下溢**（underflow）为 0）；输入和结果都放得下，但平方和之类的中间量上溢了；或者一个小的更新在加到一个大数上时被舍入**吞掉**。本笔记本用 CPU 上真实的 `torch` 张量逐一演示，各种极限值取自 `torch.finfo`。它几秒钟就能运行完。
#
# 涉及的格式有 IEEE 754 binary32（float32）和 binary16（float16）、Google 的 bfloat16（float32 的 8 位指数加 7 位尾数，[Google Cloud: bfloat16](https://cloud.google.com/tpu/docs/bfloat16)），以及 [Micikevicius 等人 2022，"FP8 formats for deep learning"](https://arxiv.org/abs/2209.05433) 中的两种 FP8 格式 E4M3 和 E5M2。

# %%
import math
import warnings

import matplotlib.pyplot as plt
import torch
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
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
    plt.rcParams["axes.unicode_minus"] = False
else:
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)

# %% [markdown]
# ## 极限值
#
# `max` 是最大的有限值，`tiny` 是最小的*规格化*值（低于它的次正规数保留的有效位越来越少），`smallest subnormal` 是 0 之前的最后一个值，`eps` 是 1 与下一个数之间的间隔，即相对精度。

# %%
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn,
          torch.float8_e5m2]


def smallest_subnormal(dtype):
    """The smallest positive value of ``dtype``: halve ``tiny`` until one more halving,
    rounded to ``dtype``, gives 0."""
    x = torch.tensor(torch.finfo(dtype).tiny, dtype=torch.float64)
    while (x / 2).to(dtype).item() != 0:
        x = x / 2
    return x.to(dtype).item()


print(f"{'dtype':>14} {'位数':>4} {'max':>10} {'tiny':>10} {'subnormal':>10} {'eps':>10}")
for dt in DTYPES:
    fi = torch.finfo(dt)
    print(f"{str(dt).replace('torch.', ''):>14} {fi.bits:>4} {fi.max:>10.4g} {fi.tiny:>10.4g} "
          f"{smallest_subnormal(dt):>10.4g} {fi.eps:>10.4g}")

# %% [markdown]
# float16 是其中的异类：它的最大值 65504 小到普通的激活值（activations）、注意力分数和平方和都能达到，而它的最小规格化值（约 6e-5）又大到许多梯度（gradient）都低于它。bfloat16 拥有 float32 的范围，转而牺牲精度：它的 eps 是 float16 的 8 倍。两种 FP8 格式在二者之间取舍：E4M3 偏重精度（权重和激活值），E5M2 偏重范围（梯度）。
#
# ## 上溢：超过 `max` 的值

# %%
x = torch.tensor([60000.0, 65504.0], dtype=torch.float16)
print("float16 中 65504 * 2 =", (x[1:] * 2).item())
print("fp16 中 60000 + 10000 =", (x[:1] + 10000).item())
print("exp(11.0), exp(11.1)  =", torch.exp(torch.tensor([11.0, 11.1], dtype=torch.float16)).tolist())
print("Inf - Inf             =", (torch.tensor(math.inf) - torch.tensor(math.inf)).item())

# %% [markdown]
# `exp` 在略高于 11 处就让 float16 上溢（ln 65504 ≈ 11.09）。这就是 softmax 在取指数之前必须减去该行最大值的原因：朴素的写法会把中等大小的注意力分数变成 Inf / Inf = NaN，而稳定的写法不会上溢，因为每个指数都 ≤ 0。`torch.softmax` 会做这个减法。

# %%
scores = torch.tensor([[2.0, 8.0, 12.0]], dtype=torch.float16)   # attention logits
naive = scores.exp() / scores.exp().sum(-1, keepdim=True)
print("朴素 softmax   :", naive.tolist())
print("torch.softmax :", [[round(v, 4) for v in torch.softmax(scores, -1)[0].tolist()]])

# %% [markdown]
# ## 中间量上溢：平方和
#
# 结果可以表示，中间量却可能无法表示。LayerNorm 或 RMSNorm 中的方差、梯度裁剪（gradient clipping）所用的 L2 范数，都要先对数值求平方：几百大小的激活值无害，它们的平方却不然。各个库正因为如此才用 float32 累加这类归约；在 float16 中手工计算的代码就会出错。

# %%
h = torch.full((1024,), 300.0, dtype=torch.float16)     # activations of 300
var_fp16 = (h * h).mean()                                # squares: 90000 > 65504
var_fp32 = (h.float() * h.float()).mean()
print("平方的均值，float16：", var_fp16.item())
print("平方的均值，float32：", var_fp32.item())
print("float16 张量的 torch.linalg.vector_norm：",
      torch.linalg.vector_norm(h).item(), "（内部用 fp32 累加）")
print("在 float16 中手工计算：", torch.sqrt((h * h).sum()).item())

# %% [markdown]
# ## 下溢：低于 `tiny` 的梯度
#
# 大模型的梯度很小：许多在 1e-6 到 1e-9 之间。转换为 float16 后，低于 6.1e-5 的会损失精度，低于约 6e-8 的会恰好变成 0。使用 float16 时的修复办法是**损失缩放**（[Micikevicius 等人 2018，"Mixed precision training"](https://arxiv.org/abs/1710.03740)）：把损失乘以一个因子 S（例如 2¹⁶），于是反向传播中每个梯度都大了 S 倍，然后在优化器步之前用 float32 除以 S。bfloat16 不需要缩放：它的范围就是 float32 的范围。
#
# 下面把一组合成的、但符合实际的梯度大小分布（在 1e-10 到 1e-2 之间对数均匀分布）转换到各个格式。

# %%
g = 10 ** torch.empty(100_000).uniform_(-10, -2)          # |gradient| values, float32


def lost_to_zero(values, dtype, scale=1.0):
    """Fraction of non-zero values that become exactly 0 when cast (after scaling)."""
    return ((values * scale).to(dtype) == 0).float().mean().item()


def below_normal(values, dtype, scale=1.0):
    """Fraction that fall below the smallest normal number (reduced precision)."""
    return ((values * scale).abs() < torch.finfo(dtype).tiny).float().mean().item()


for name, dt, scale in [("float16", torch.float16, 1.0),
                        ("float16，损失缩放 2^16", torch.float16, 2.0**16),
                        ("bfloat16", torch.bfloat16, 1.0)]:
    print(f"{name:22s} 变为零：{lost_to_zero(g, dt, scale):6.1%}   "
          f"次正规或零：{below_normal(g, dt, scale):6.1%}")
print("缩放后的最大值在 float16 中仍是有限值：",
      bool(torch.isfinite((g.max() * 2.0**16).to(torch.float16))))

# %% [markdown]
# 缩放因子太大时，上溢的反而是*最大*的那些梯度：这就是动态损失缩放（`torch.amp.GradScaler`）在发现 Inf 时把缩放因子减半并跳过这一步、在连续若干个正常步之后再把它调大的原因。训练日志里满是被跳过的步，说明缩放因子一直在撞 float16 范围的上限。
#
# ## 被吞掉的更新：精度的极限
#
# 加上一个小于相邻可表示数间隔一半的数，什么也不会发生。在 bfloat16 中，1.0 处的间隔是 2⁻⁷ = 0.0078，所以值为 1.0 的权重（weights）接收 1e-3 的更新后永远停在 1.0；bfloat16 中的累加和在 256 处就不再增长，因为那里相邻数之间的间隔达到了 2。这就是优化器保留 float32 主权重、归约用 float32 累加的原因。

# %%
w = torch.tensor(1.0, dtype=torch.bfloat16)
print("bfloat16 中 1.0 + 1e-3 =", (w + 1e-3).item(), "  float32 中 =", 1.0 + 1e-3)
acc = torch.tensor(0.0, dtype=torch.bfloat16)
for _ in range(1000):
    acc = acc + 1.0
print("1000 个 1 之和，bfloat16 累加器 =", acc.item())
print("1000 个 1 之和，bfloat16 的 torch.sum =",
      torch.ones(1000, dtype=torch.bfloat16).sum().item(), "（内部用 fp32 累加）")

# %% [markdown]
# 相邻数之间的间隔随数值大小增长。对于规格化数 x，它等于 2^⌊log₂ x⌋ × eps；下面的单元格用 float32 中的 `torch.nextafter` 检验这个公式，并为三种格式画出它，一直画到各自的 `max`。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a\u4e00\u4e2a\u6570\u5230\u4e0b\u4e00\u4e2a\u53ef\u8868\u793a\u6570\u7684\u95f4\u9694\u968f\u6570\u503c\u5927\u5c0f\u7684\u53d8\u5316\uff0c\u53ea\u753b\u6bcf\u79cd\u683c\u5f0f\u7684\u89c4\u683c\u5316\u8303\u56f4\u3002\u4e09\u6761\u5e73\u884c\u76f4\u7ebf\uff1afloat32 \u6700\u4f4e\uff0c\u8de8\u8d8a\u7ea6 1e-38 \u5230 3e38\uff1bbfloat16 \u8303\u56f4\u76f8\u540c\u4f46\u7c97\u7ea6 65000 \u500d\uff1bfloat16 \u662f\u4e24\u8005\u4e4b\u95f4\u7684\u4e00\u5c0f\u6bb5\uff0c\u4ece\u7ea6 6e-5 \u5230\u5176\u6700\u5927\u503c 65504\uff08\u7ad6\u7ebf\u6807\u51fa\uff09\u3002\u95f4\u9694\u4e0e\u6570\u503c\u5927\u5c0f\u6210\u6b63\u6bd4\u589e\u957f\u3002"]
def gap(x, dtype):
    """Distance from x (float64 tensor of normal values of dtype) to the next number."""
    return torch.exp2(torch.floor(torch.log2(x))) * torch.finfo(dtype).eps


probe = torch.tensor([1e-3, 1.0, 3.0, 1e4, 6e30])
exact = torch.nextafter(probe, torch.tensor(math.inf)) - probe
print("公式与 float32 中的 torch.nextafter 一致：",
      torch.equal(gap(probe.double(), torch.float32).float(), exact))

fig, ax = plt.subplots(figsize=(7, 4))
for dt, style in [(torch.float32, "-"), (torch.float16, "--"), (torch.bfloat16, ":")]:
    fi = torch.finfo(dt)
    x = torch.logspace(math.log10(fi.tiny), math.log10(fi.max), 400, dtype=torch.float64)
    ax.loglog(x, gap(x, dt), style, label=str(dt).replace("torch.", ""))
ax.axvline(65504, color="gray", lw=0.8)
ax.text(65504 * 1.5, 1e-30, "float16 最大值", fontsize=8, color="gray")
ax.set_xlabel("数值大小 |x|")
ax.set_ylabel("到下一个可表示数的间隔")
ax.set_title("可表示数的间隔（规格化范围）")
ax.legend()
plt.show()

# %% [markdown]
# ## 要点
#
# * float16 中的 Inf/NaN 通常始于某一个输出超过 65504 的模块：用前向钩子找到它（本书的 `scripts/debug/underflow_overflow_detector.py`），而不是盯着损失看。
# * 平方和（范数、方差）最先上溢；用 float32 累加它们。
# * float16 需要对梯度做损失缩放；bfloat16 不需要，但会吞掉小的更新，所以主权重和归约要保留在 float32。
