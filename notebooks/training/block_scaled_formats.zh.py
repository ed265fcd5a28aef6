# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: a112aacebcc0cc519c6c4527c3a0e96565b1a726f40edf32ebfebe4c9d39021d
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
# # 块缩放格式：在真实模型上看 MXFP8、MXFP6、MXFP4 与 NVFP4
#
# "张量精度"一章介绍了 OCP 微缩放（Microscaling，MX）格式：每 32 个相邻的值共享一个 2 的幂（E8M0）缩放因子；以及 NVIDIA 的 NVFP4：每 16 个值共享一个 E4M3 缩放因子，整个张量再多一个 fp32 缩放因子。本笔记本用该章的模拟脚本 `mx_quantize.py` 来观察它们：
#
# 1. 元素格式的取值网格，以及在单个块上手算的缩放规则；
# 2. 本书的小模型经过短暂训练后，其权重和激活值（activations）在每种格式下的误差，与 bf16 和按张量缩放的 fp8 对比；
# 3. 块大小如何决定一个离群值（outlier）的代价；
# 4. 选取 MX 缩放因子的两种方式（规范中的向下取整，Transformer Engine 中的向上取整）。
#
# 全部在 CPU 上几秒内跑完；量化是精确的 float64 运算。

# %%
import os
import sys
import urllib.request
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
torch.set_num_threads(1)

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


mx = book_module("scripts/training/mx_quantize.py", "mx_quantize")
tiny = book_module("scripts/debug/make_tiny_model.py", "make_tiny_model")

# %% [markdown]
# ## 元素格式的取值网格
#
# 每种元素类型都是一个很小的浮点格式。E2M1 只有八个绝对值；两种 FP6 类型在范围（E3M2）和分辨率（E2M3）之间取舍；E4M3 就是 OFP8 的 fp8。FP6 和 FP4 类型都没有无穷大和 NaN：每个编码都是一个数。

# %% alt=["\u70b9\u56fe\uff0clog2 \u523b\u5ea6\uff0c\u6bcf\u79cd\u5143\u7d20\u7c7b\u578b\u4e00\u884c\uff0c\u753b\u51fa\u5b83\u80fd\u8868\u793a\u7684\u6b63\u503c\uff1aE2M1 \u6709 6 \u4e2a\u6b63\u503c\uff0c\u4ece 0.5 \u5230 6\uff1bE2M3 \u6709 32 \u4e2a\u7edd\u5bf9\u503c\uff0c\u4ece 0.125 \u5230 7.5\uff0c\u6392\u5217\u5bc6\u96c6\uff1bE3M2 \u4ece 0.0625 \u5230 28\uff0c\u66f4\u5206\u6563\uff1bE4M3\uff08fp8\uff09\u4ece\u7ea6 0.002 \u5230 448\u3002\u6307\u6570\u4f4d\u591a\u6362\u6765\u8303\u56f4\uff0c\u5c3e\u6570\u4f4d\u591a\u6362\u6765\u7cbe\u5ea6\u3002"]
for name in ("e2m1", "e2m3", "e3m2", "e4m3"):
    el, grid = mx.ELEMENTS[name], mx.element_grid(name)
    print(f"{el.name}：{len(grid)} 个绝对值，最小次正规数 {grid[1]:g}，最小正规数 "
          f"{el.min_normal:g}，最大值 {grid[-1]:g}，emax {el.emax}")
print("E2M1 网格：", mx.element_grid("e2m1"))

fig, ax = plt.subplots(figsize=(8, 2.6))
for row, name in enumerate(("e2m1", "e2m3", "e3m2", "e4m3")):
    grid = np.array(mx.element_grid(name)[1:])
    ax.scatter(grid, np.full_like(grid, row), s=10)
ax.set_xscale("log", base=2)
ax.set_yticks(range(4), ["E2M1", "E2M3", "E3M2", "E4M3"])
ax.set_xlabel("元素类型的正值（log2 刻度）")
ax.set_title("元素网格：可表示的数落在哪里")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 手算一个块
#
# 规范给出的缩放因子是 $X = 2^{\lfloor \log_2 \mathrm{amax} \rfloor - e_{\max}}$，E2M1 的 $e_{\max} = 2$。最大值为 6 的块得到 $X = 1$，每个值舍入到最近的网格点，恰在中点时取编码为偶数的那个（5 位于 4 和 6 之间，取 4；2.5 取 2）。最大值为 7 的块同样得到 $X = 1$，7 饱和为 6。若把缩放因子向上取整（$X = 2$），7 保持在范围内（变成 8），代价是块内其余值的分辨率减半。

# %%
block = torch.tensor([6.0, 5.0, 2.5, 0.25, 0.75, 1.25, 3.5, -4.9])
r = mx.mx_quantize(block, "e2m1", block_size=8)
print(f"amax 6：缩放因子 2^{r.scale_exponents.item()}，取值", r.values.tolist())
for rule in ("floor", "ceil"):
    r = mx.mx_quantize(torch.tensor([7.0, 1.0, 0.3]), "e2m1", block_size=3, rule=rule)
    print(f"amax 7，规则 {rule}：缩放因子 2^{r.scale_exponents.item()}，取值 {r.values.tolist()}，"
          f"E8M0 字节 {mx.e8m0_encode(r.scale_exponents).item()}")
r = mx.nvfp4_quantize(torch.tensor([1.3, 0.4, -0.1]), block_size=3, tensor_scale=1.0)
print(f"NVFP4，amax 1.3：块缩放因子 E4M3({1.3 / 6:.4f}) = {r.scales.item()}，取值",
      [round(v, 4) for v in r.values.tolist()])

# %% [markdown]
# ## 稍加训练的小模型
#
# 随机初始化的权重是均匀分布的，很规整；训练几步会给它们一些结构。模型是本书 `make_tiny_model.py` 的 Transformer（2 层，宽度 64），在它的合成句子上用 AdamW 训练 100 步。然后 `model_tensors` 收集 10 个权重矩阵，以及一次前向中进入矩阵乘法的 7 个激活值。

# %%
texts = tiny.make_corpus(2000, seed=0)
tok = tiny.CharTokenizer.train(texts)
model = tiny.TinyLM({**tiny.DEFAULT_CONFIG, "vocab_size": len(tok)})
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = tiny.batches(tok, texts, batch_size=16, seq_len=64, seed=0)
for _ in range(100):
    x, y = next(data)
    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"100 步后的损失 ≈ {loss.item():.2f} nats/字符")

tensors = mx.model_tensors(model, batch=8, seq_len=64, seed=0)
tensors += mx.synthetic_tensors(seed=0, outlier_scale=100.0)
groups = ["weights", "activations", "synthetic"]
print({g: sum(1 for _, grp, _ in tensors if grp == g) for g in groups}, "个张量")

# %% [markdown]
# ## 每种格式的误差
#
# 每组张量在每种格式下的信噪比 $10 \log_{10}(\sum x^2 / \sum (q - x)^2)$。理想均匀量化器每多一位约多 6 dB。

# %% alt=["\u5206\u7ec4\u6761\u5f62\u56fe\uff1a\u5c0f\u6a21\u578b\u7684\u6743\u91cd\u3001\u6fc0\u6d3b\u503c\u548c\u5408\u6210\u5f20\u91cf\u5728\u4e5d\u79cd\u683c\u5f0f\u4e0b\u7684\u91cf\u5316\u4fe1\u566a\u6bd4\uff08dB\uff0c\u8d8a\u9ad8\u8d8a\u597d\uff09\u3002bf16 \u7ea6 56 dB\uff1b8 \u4f4d\u683c\u5f0f\u548c MXFP6 E2M3 \u7ea6 25 \u5230 31 dB\uff1b\u6309\u5f20\u91cf\u7f29\u653e\u7684 fp4 E2M1 \u53ea\u6709 13 \u5230 19 dB\uff0c\u5728\u542b\u79bb\u7fa4\u503c\u7684\u5408\u6210\u5f20\u91cf\u4e0a\u6700\u4f4e\uff1bMXFP4 \u4e3a 17 \u5230 19 dB\uff1bNVFP4 \u7ea6 20 dB\uff0c\u5728\u5408\u6210\u5f20\u91cf\u4e0a\u8fbe 26 dB\uff0c\u66f4\u7ec6\u7684\u7f29\u653e\u56e0\u5b50\u5728\u90a3\u91cc\u5e2e\u52a9\u6700\u5927\u3002"]
formats = list(mx.FORMATS)
snr = {g: [] for g in groups}
for g in groups:
    for fmt in formats:
        stats = [mx.error_stats(x, mx.quantize(x, fmt)) for _, grp, x in tensors if grp == g]
        snr[g].append(mx.combine(stats)["snr_db"])
print(f"{'format':<11} {'bits':>5}  " + "  ".join(f"{g:>11}" for g in groups))
for i, fmt in enumerate(formats):
    print(f"{fmt:<11} {mx.bits_per_element(fmt):>5.2f}  "
          + "  ".join(f"≈ {snr[g][i]:>6.1f} dB" for g in groups))

fig, ax = plt.subplots(figsize=(9, 3.6))
width = 0.27
pos = np.arange(len(formats))
for k, g in enumerate(groups):
    ax.bar(pos + (k - 1) * width, snr[g], width, label=g)
ax.set_xticks(pos, [f"{f}\n{mx.bits_per_element(f):g} b" for f in formats], fontsize=8)
ax.set_ylabel("信噪比 SNR（dB）")
ax.set_title("小模型各张量的量化误差（越高越好）")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# 有三点值得注意。8 位时，MX 的块在这里比按张量缩放的 fp8 没有任何收益：E4M3 的范围已经覆盖了这些张量，规范中向下取整的缩放因子甚至还有一点损失（见最后一节）。4 位时，一旦有离群值，整个张量一个缩放因子就不可用了，是块把信号找了回来。NVFP4 更细的缩放因子比 MXFP4 多出几个 dB，在有离群值的矩阵上最明显。

# %% [markdown]
# ## 块大小与离群值
#
# 带离群通道的矩阵中，1024 列里有 4 列比其余的大 100 倍。沿着一行，含有离群值的块都按离群值缩放，与它同块的小值失去分辨率。块越小，损害越局部。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u542b\u79bb\u7fa4\u5217\u7684\u77e9\u9635\u4e2d\u666e\u901a\u503c\uff08\u975e\u79bb\u7fa4\u503c\uff09\u7684\u4fe1\u566a\u6bd4\u968f\u6bcf\u5757\u5143\u7d20\u6570\uff088 \u5230 1024\uff0clog2 \u523b\u5ea6\uff09\u7684\u53d8\u5316\u3002E2M1 \u5143\u7d20\u65f6\u4ece 8 \u7684\u7ea6 14.5 dB \u964d\u5230 1024 \u7684 0 dB\uff0c\u90a3\u65f6\u51e0\u4e4e\u6240\u6709\u503c\u90fd\u820d\u5165\u4e3a\u96f6\uff1bE4M3 \u5143\u7d20\u65f6\u4fdd\u6301\u5728 29 \u5230 31.5 dB\u3002NVFP4 \u662f 16 \u4e2a\u5143\u7d20\u5904\u7684\u661f\u53f7\uff0c\u843d\u5728 E2M1 \u66f2\u7ebf\u4e0a\uff0c\u7ea6 12.6 dB\u3002"]
x = dict((n, t) for n, _, t in tensors)["outlier_channels"]
small = torch.ones_like(x, dtype=torch.bool)
small[:, x.abs().amax(dim=0) > 50] = False          # the ordinary columns only
sizes = [8, 16, 32, 64, 128, 256, 1024]


def snr_small(values):
    err = (values.double() - x.double())[small]
    return 10 * np.log10(float((x.double()[small] ** 2).sum() / (err ** 2).sum()))


mx4 = [snr_small(mx.mx_quantize(x, "e2m1", block_size=b).values) for b in sizes]
mx8 = [snr_small(mx.mx_quantize(x, "e4m3", block_size=b).values) for b in sizes]
nv4 = snr_small(mx.nvfp4_quantize(x).values)
for b, a, c in zip(sizes, mx4, mx8, strict=True):
    print(f"块大小 {b:>4}：普通值的信噪比 ≈ {a:.1f} dB（E2M1），≈ {c:.1f} dB（E4M3）")
print(f"NVFP4（16，E4M3 缩放因子）：≈ {nv4:.1f} dB")

fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(sizes, mx4, "o-", label="MX，E2M1 元素")
ax.plot(sizes, mx8, "s-", label="MX，E4M3 元素")
ax.plot([16], [nv4], "*", markersize=12, label="NVFP4")
ax.set_xscale("log", base=2)
ax.set_xlabel("每块元素数")
ax.set_ylabel("非离群值的信噪比（dB）")
ax.set_title("离群值让邻居付出的代价")
ax.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# 用 E2M1 元素时，普通值的信噪比随块增大而持续下降：块大小为 1024 时，离群值决定整行的缩放因子，其余几乎全部舍入为零。用 E4M3 元素时块大小几乎无关紧要，因为 18 个二进制数量级同时容得下离群值和其余的值。NVFP4 与块大小为 16 的 MX 相当，正如它的块大小所示：更细的缩放因子帮助的是离群值本身，而不是它们的邻居。

# %% [markdown]
# ## MX 缩放因子向下还是向上取整
#
# 规范的规则把块的最大值放进元素类型最高的二进制数量级，而它的上端（E4M3 为 512，E2M1 为 8）高于最大可表示值（448、6）：较大的块最大值会饱和。Transformer Engine 则把缩放因子向上取整，永不饱和，代价是其余的值最多损失一个二进制数量级。

# %%
weights = [t for _, g, t in tensors if g == "weights"]
for name in ("e4m3", "e2m1"):
    for rule in ("floor", "ceil"):
        stats = mx.combine([mx.error_stats(w, mx.mx_quantize(w, name, rule=rule)) for w in weights])
        print(f"MX {mx.ELEMENTS[name].name}，规则 {rule:<5}：饱和 ≈ "
              f"{100 * stats['saturated_fraction']:.1f}% 的权重，信噪比 ≈ {stats['snr_db']:.1f} dB")

# %% [markdown]
# ## 要记住的
#
# * 块缩放的每个值占用元素位数加上缩放因子的份额：MXFP8 为 8.25 位，MXFP4 为 4.25 位，NVFP4 为 4.5 位。
# * 元素类型范围越小，块越重要：4 位格式离不开块，fp8 大多不需要。
# * 缩放因子如何取整，对误差的影响与块大小相当；在信任某个实现之前，先用 `mx_quantize.py --checkpoint` 在自己的张量上比较。
