# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 69de8f9d8d32707ae5318c7a4855a6de569e82060f8c5a1e9507ff1b9c9e06c7
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
# # Roofline：哪些操作能用上你花钱买的 TFLOPS
#
# 加速器（accelerator）有两个速度：计算有多快（峰值 FLOPS），以及能以多快的速度从显存（GPU memory）为计算供数（HBM 带宽（bandwidth））。一个操作如果每读写一个字节只做很少的 FLOPs，无论张量核心（tensor core）多快，它都达不到第一个速度。**Roofline 模型**把这一点画成一张图（[Williams, Waterman and Patterson, 2009](https://doi.org/10.1145/1498765.1498785)）：
#
# $$ \text{attainable FLOPS} = \min\left(\text{peak FLOPS},\ I \times \text{memory bandwidth}\right) $$
#
# 其中**算术强度**（arithmetic intensity）$I$ 是每字节内存流量对应的 FLOPs。两条线相交于**脊点**（ridge point）$I^* = \text{peak} / \text{bandwidth}$：低于脊点的操作是访存受限（memory-bound），高于脊点的是计算受限（compute-bound）。
#
# 本 notebook 从本书的规格数据文件（`data/compute/accelerators.yml`）读取若干加速器的 bf16 峰值 TFLOPS 和 HBM 带宽，计算 transformer 层中各操作的算术强度，然后用一个模型和一次小规模 CPU 测量来考察矩阵乘法达不到峰值的另一个原因：tile 量化与 wave 量化。它在 CPU 上几秒钟就能跑完。

# %%
import json
import time
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import yaml
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

# 图用 PNG（不用 SVG）：PDF 由保存下来的 PNG 生成。
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


specs = yaml.safe_load(book_file("data/compute/accelerators.yml"))
DEVICES = ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200 (HGX)",
           "AMD MI300X", "AMD MI355X", "Intel Gaudi 3", "Google TPU v6e (Trillium)", "AWS Trainium2"]
rows = {r["name"]: r for r in specs["rows"]}
devices = {name: (rows[name]["bf16_dense"] * 1e12, rows[name]["mem_TBps"] * 1e12)
           for name in DEVICES}

print(f"{'加速器':<27} {'bf16 TFLOPS':>12} {'HBM TBps':>9} {'脊点 (FLOPs/字节)':>19}")
for name, (peak, bw) in devices.items():
    print(f"{name:<27} {peak / 1e12:>12.1f} {bw / 1e12:>9.3f} {peak / bw:>19.0f}")

# %% [markdown]
# 脊点都在几百的量级：在这些加速器上，一个操作每从 HBM 读写一个字节，必须做几百次 bf16 FLOPs，才会受计算而不是受显存限制。较新的设备增加 FLOPS 的速度快于增加带宽的速度，所以脊点更高。
#
# ## transformer 各操作的算术强度
#
# 统计 FLOPs 与字节数（bf16，每个元素 2 字节，每个张量从 HBM 读或写一次，忽略缓存）：
#
# * $M \times K$ 乘 $K \times N$ 的**矩阵乘法**（matmul）：$2MNK$ FLOPs，$2(MK + KN + MN)$ 字节。对 $n \times n$ 的方阵乘法，每字节 $n/3$ FLOPs：大矩阵乘法是计算受限的，细长的则不是。
# * **注意力分数**，未融合：每个头的 $QK^\top$ 是 $s \times d$ 乘 $d \times s$ 的矩阵乘法，要把 $s \times s$ 的分数矩阵写回 HBM，softmax 再把它读回来。**融合**的 kernel（FlashAttention，[Dao et al. 2022](https://arxiv.org/abs/2205.14135)）把分数留在片上，只读 $Q, K, V$、写输出：$8 s d$ 字节上做 $4 s^2 d$ FLOPs。
# * 对一行 $h$ 个元素做**层归一化**（layer norm）：每个元素约 8 FLOPs（均值、方差、归一化、缩放、平移；这是我们的粗略计数），每个元素 4 字节（读和写）。
# * **逐元素**操作（残差相加：读两个张量，写一个）：每 6 字节 1 FLOP。

# %%
BF16 = 2  # 每个元素的字节数


def matmul_intensity(m, n, k, nbytes=BF16):
    """(m x k) @ (k x n) 矩阵乘法每字节的 FLOPs，每个操作数搬运一次。"""
    return 2 * m * n * k / (nbytes * (m * k + k * n + m * n))


def attention_unfused_intensity(s, d):
    """一个头的 QK^T，把 s x s 的分数写回显存。"""
    return matmul_intensity(s, s, d)


def attention_fused_intensity(s, d):
    """融合注意力：读 Q、K、V，写 O，做 4 s^2 d FLOPs（QK^T 与 PV）。"""
    return 4 * s * s * d / (4 * s * d * BF16)


h, d, s, tokens = 8192, 128, 4096, 8 * 4096  # 隐藏维度、头维度、序列长度、每步 token 数
ops = {
    "MLP 矩阵乘法 (tokens x h x 4h)": matmul_intensity(tokens, 4 * h, h),
    "QKV 投影，1 条序列": matmul_intensity(s, 3 * h, h),
    "矩阵乘法，16 个 token（解码）": matmul_intensity(16, h, h),
    "注意力 QK^T，未融合": attention_unfused_intensity(s, d),
    "注意力，融合": attention_fused_intensity(s, d),
    "层归一化": 8 / 4,
    "残差相加": 1 / 6,
}
peak, bw = devices["NVIDIA H100 SXM"]
print(f"H100 SXM，脊点 = {peak / bw:.0f} FLOPs/字节")
print(f"{'操作':<31} {'FLOPs/字节':>10} {'受限于':>8} {'可达 TFLOPS':>18}")
for op, intensity in ops.items():
    attainable = min(peak, intensity * bw)
    bound = "计算" if intensity >= peak / bw else "显存"
    print(f"{op:<31} {intensity:>10.2f} {bound:>8} {attainable / 1e12:>18.1f}")

# %% alt=["\u5bf9\u6570-\u5bf9\u6570 roofline \u56fe\uff1a\u6a2a\u8f74\u4e3a\u7b97\u672f\u5f3a\u5ea6\uff08\u6bcf\u5b57\u8282 HBM \u6d41\u91cf\u7684 bf16 FLOPs\uff09\uff0c\u7eb5\u8f74\u4e3a\u53ef\u8fbe\u7684\u7a20\u5bc6 bf16 TFLOPS\uff0c\u753b\u51fa A100\u3001H100\u3001B200\u3001MI300X \u548c TPU v6e \u7684\u5c4b\u9876\uff1a\u6bcf\u6761\u7ebf\u5148\u6cbf\u5185\u5b58\u5e26\u5bbd\u7684\u659c\u5761\u4e0a\u5347\uff0c\u518d\u5728\u5404\u81ea\u7684\u7b97\u529b\u5cf0\u503c\u5904\u53d8\u5e73\uff0c\u4ece\u7ea6 300 TFLOPS\uff08A100\uff09\u5230\u7ea6 2250 TFLOPS\uff08B200\uff09\u3002\u653e\u5728 H100 \u5c4b\u9876\u4e0a\u7684\u4e03\u4e2a transformer \u64cd\u4f5c\u4e2d\uff0c\u6b8b\u5dee\u76f8\u52a0\u3001\u5c42\u5f52\u4e00\u5316\u300116 \u4e2a token \u7684\u77e9\u9635\u4e58\u6cd5\u548c\u672a\u878d\u5408\u7684\u6ce8\u610f\u529b\u4f4d\u4e8e\u5185\u5b58\u53d7\u9650\u7684\u659c\u5761\u4e0a\uff0c\u878d\u5408\u7684\u6ce8\u610f\u529b\u3001QKV \u6295\u5f71\u548c MLP \u77e9\u9635\u4e58\u6cd5\u4f4d\u4e8e\u8ba1\u7b97\u53d7\u9650\u7684\u5e73\u9876\u4e0a\u3002"]
fig, ax = plt.subplots(figsize=(8, 5))
x = np.logspace(-1, 4, 400)
for name in ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA B200 (HGX)", "AMD MI300X",
             "Google TPU v6e (Trillium)"]:
    peak_d, bw_d = devices[name]
    ax.loglog(x, np.minimum(peak_d, x * bw_d) / 1e12, label=name)
peak, bw = devices["NVIDIA H100 SXM"]
# 每个点标一个编号，编号对应的操作列在左上角的空白处；屋顶上相邻的点，编号交替标在屋顶上方和下方
ranked = sorted(ops, key=ops.get)
for number, op in enumerate(ranked, 1):
    intensity = ops[op]
    y = min(peak, intensity * bw) / 1e12
    ax.plot(intensity, y, "o", color="black", ms=4)
    above = intensity * bw < peak or number % 2
    ax.annotate(str(number), (intensity, y), textcoords="offset points", xytext=(-3, 5 if above else -12),
                fontsize=7, fontweight="bold")
ax.text(0.02, 0.97, "\n".join(f"{number}  {op}" for number, op in enumerate(ranked, 1)), transform=ax.transAxes,
        va="top", fontsize=7, bbox={"facecolor": "white", "edgecolor": "0.8", "boxstyle": "round"})
ax.set_xlabel("算术强度（每字节 HBM 流量的 bf16 FLOPs）")
ax.set_ylabel("可达 TFLOPS（稠密 bf16）")
ax.set_title("按厂商峰值画出的 roofline；圆点：H100 SXM 上的 transformer 操作")
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# 大矩阵乘法远在所有脊点的右侧；层归一化、残差相加和未融合的 softmax 远在左侧，以显存速度运行，最多只有几个 TFLOPS。融合注意力把它从显存一侧移到了计算一侧，这正是融合注意力 kernel 更快的主要原因。token 很少的矩阵乘法（16 行，如解码时）虽然是矩阵乘法，也是访存受限的。
#
# ## tile 量化与 wave 量化
#
# 即便是计算受限的矩阵乘法也达不到屋顶。GPU 把 $M \times N$ 的输出切成 tile，按每个 SM 一个 tile 的**波次**（wave）运行（[NVIDIA, Matrix Multiplication Background](https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html)）。未填满的 tile（tile 量化）和未填满的最后一波（wave 量化）与填满的代价相同。下面的模型假设 H100 SXM 的 132 个 SM 上使用 128 × 128 的 tile，返回硬件所做工作中有用部分的比例；实际的库会在多种 tile 形状中选择，曲线更平滑，但台阶依然存在。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u7eb5\u8f74\u4e3a\u6709\u7528\u5de5\u4f5c\u6240\u5360\u6bd4\u4f8b\uff080.25 \u5230 1.0\uff09\uff0c\u6a2a\u8f74\u4e3a M\uff0c\u4ece 128 \u5230 8192\uff08N = 4096\uff0c128 \u00d7 128 \u7684 tile\uff0c132 \u4e2a SM\uff09\u3002\u66f2\u7ebf\u5448\u952f\u9f7f\u5f62\uff1a\u5347\u5230\u7ea6 0.97\uff0c\u6bcf\u5f00\u59cb\u65b0\u7684\u4e00\u6ce2 tile \u5c31\u9aa4\u964d\uff08M \u521a\u8fc7 512 \u65f6\u964d\u5230 0.5\uff09\uff0cM \u8d8a\u5927\u964d\u5e45\u8d8a\u5c0f\uff1bM = 4224 \u65f6\u6070\u597d\u8fbe\u5230 1.0\u3002\u7a0d\u5927\u4e00\u70b9\u7684\u77e9\u9635\u4e58\u6cd5\u53ef\u80fd\u6d6a\u8d39 GPU \u591a\u5f97\u591a\u7684\u7b97\u529b\u3002"]
SMS = 132   # H100 SXM
TILE = 128


def quantization_efficiency(m, n, tile=TILE, sms=SMS):
    """m x n 的输出按 tile x tile 分块、每波每个 SM 一块运行时，有用工作的比例：
    (m*n) / (waves * sms * tile**2)。"""
    tiles = -(-m // tile) * -(-n // tile)
    waves = -(-tiles // sms)
    return m * n / (waves * sms * tile * tile)


for m in (4096, 4097, 4224, 4352):
    print(f"M = {m}，N = 4096：效率 = {quantization_efficiency(m, 4096):.3f}")

ms = np.arange(128, 8193, 16)
eff = [quantization_efficiency(int(m), 4096) for m in ms]
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(ms, eff, lw=1)
ax.set_xlabel("M（N = 4096，128 x 128 的 tile，132 个 SM）")
ax.set_ylabel("有用工作的比例")
ax.set_title("tile 量化与 wave 量化模型")
plt.show()

# %% [markdown]
# $M = 4096$ 时第八波只填满四分之三。$4097$ 时波次正好整除，但第 33 行 tile 只有一行有用，所以效率相同，原因却不同。$4224$ 时 tile 和波次都恰好填满；$4352$ 则需要几乎空着的第九波：更大的矩阵乘法，每个 FLOP 反而可能更慢。这就是为什么模型维度要取 64 或 128 的倍数，也是 `mamf_finder.py`（见本部分的“加速器”一页）要扫描各种形状的原因。
#
# ### 在本机上的一次小测量
#
# CPU 没有 SM，但它的矩阵乘法库同样按寄存器块和缓存行分块工作，所以形状是块大小倍数时应当稍快一些。我们对 $M$ 从 480 到 576，计时 $M \times 512$ 乘 $512 \times 512$ 的 fp32 矩阵乘法。共享机器上的计时有噪声，所以每个形状取若干次中最好的一次；打印出的数值是实测值（以 ≈ 标出），每次运行都会不同。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u5728\u8fd0\u884c\u672c notebook \u7684 CPU \u4e0a\u5b9e\u6d4b\u7684 fp32 \u77e9\u9635\u4e58\u6cd5\u901f\u5ea6\uff08GFLOPS\uff0c5 \u6b21\u4e2d\u6700\u597d\u7684\u4e00\u6b21\uff09\uff0cM \u4ece 480 \u5230 576\u3001\u6b65\u957f\u4e3a 4\uff08M \u00d7 512 \u4e58 512 \u00d7 512\uff09\uff0c32 \u7684\u500d\u6570\u7528\u7ea2\u8272\u65b9\u5757\u6807\u51fa\u3002\u901f\u5ea6\u968f M \u4e0a\u4e0b\u8df3\u52a8\u51e0\u4e2a\u767e\u5206\u70b9\uff0c32 \u7684\u500d\u6570\u5e76\u4e0d\u603b\u662f\u66f4\u5feb\uff1a\u5728 CPU \u4e0a\uff0c\u5bf9\u9f50\u7684\u6548\u679c\u6df9\u6ca1\u5728\u566a\u58f0\u91cc\u3002"]
torch.manual_seed(0)
b = torch.randn(512, 512)
cpu_ms = list(range(480, 577, 4))
best_tflops = []
for m in cpu_ms:
    a = torch.randn(m, 512)
    torch.mm(a, b)  # 预热
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    best_tflops.append(2 * m * 512 * 512 / min(times) / 1e12)

aligned = [t for m, t in zip(cpu_ms, best_tflops, strict=True) if m % 32 == 0]
other = [t for m, t in zip(cpu_ms, best_tflops, strict=True) if m % 32]
print(f"M 为 32 的倍数时的中位数：≈ {np.median(aligned) * 1e3:.1f} GFLOPS")
print(f"其余 M 的中位数：≈ {np.median(other) * 1e3:.1f} GFLOPS")
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(cpu_ms, np.array(best_tflops) * 1e3, "o-", ms=3)
ax.plot([m for m in cpu_ms if m % 32 == 0], np.array(aligned) * 1e3, "s", color="C3",
        label="M 为 32 的倍数")
ax.set_xlabel("M（M x 512 乘 512 x 512，fp32，CPU）")
ax.set_ylabel("GFLOPS（5 次中最好）")
ax.set_title("在运行本 notebook 的机器上实测")
ax.legend()
plt.show()

# %% [markdown]
# 在 CPU 上这种效应通常很小，很容易被噪声淹没；在 GPU 上它就是上面模型中的台阶。
#
# ## 结果文件中实测的 MAMF
#
# 本书的 results 目录保存了 `mamf_finder.py` 的 `--json` 输出。有 GPU 的运行结果时，这里把其中最快的形状与规格文件中对应一行的稠密（dense）数据手册峰值比较；CPU 的运行结果总是存在，它显示了在共享机器上平均值与最好一次迭代之间的差距。图中每个 M 只保留所扫过的各种 N 与 K 中最快的一个。

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1amamf_finder.py \u7ed3\u679c\u6587\u4ef6\u4e2d\u7684 TFLOPS\uff08\u5728 N \u548c K \u4e0a\u53d6\u6700\u597d\uff09\u968f M \u7684\u53d8\u5316\uff0c\u6bcf\u4e2a\u8fd0\u884c\u548c\u6570\u636e\u7c7b\u578b\u753b\u4e00\u6761\u5b9e\u7ebf\uff08\u6700\u597d\u7684\u4e00\u6b21\u8fed\u4ee3\uff09\u548c\u4e00\u6761\u865a\u7ebf\uff08\u5e73\u5747\u503c\uff09\u3002CPU \u7684 fp32 \u548c bf16 \u66f2\u7ebf\u5728 M \u4e3a 256 \u5230 1024 \u65f6\u4f4d\u4e8e\u7ea6 0.05 \u5230 1.4 TFLOPS\uff0c\u5e73\u5747\u503c\u660e\u663e\u4f4e\u4e8e\u6700\u597d\u503c\uff1bH100 \u7684 bf16 \u548c fp8 \u66f2\u7ebf\u5728 M \u4e3a 4096 \u5230 16384 \u65f6\u5206\u522b\u63a5\u8fd1 800 \u548c 1400 TFLOPS\uff0c\u9ad8\u51fa\u4e09\u4e2a\u6570\u91cf\u7ea7\uff0c\u5e73\u5747\u503c\u4e0e\u6700\u597d\u503c\u51e0\u4e4e\u76f8\u540c\u3002"]
# The mamf_finder.py results in results/compute/ (a downloaded notebook cannot list a folder).
MAMF_RESULTS = ["results/compute/mamf_finder-cpu.json",
                "results/compute/mamf_finder-h100.json"]
runs = [json.loads(book_file(rel)) for rel in MAMF_RESULTS]
gpu_runs = [r for r in runs if r["device_type"] == "cuda"]
print(f"mamf_finder 结果文件：{len(runs)} 个，其中 GPU 运行：{len(gpu_runs)} 个")
# CUDA 报告的设备名，及其在 data/compute/accelerators.yml 中对应的行。
SPEC_ROW = {"NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM"}
for run in runs:
    for dtype, best in run["best"].items():
        # 在繁忙的机器上，最佳形状每次运行都可能不同，所以只打印数值。
        line = f"{run['device']} {dtype}：最佳 ≈ {best['max_tflops']:.3f} TFLOPS"
        row = rows.get(SPEC_ROW.get(run["device"], ""))
        if row and isinstance(row.get(f"{dtype}_dense"), (int, float)):
            peak = row[f"{dtype}_dense"]
            line += f"，为 {peak:g} TFLOPS 稠密峰值的 {best['max_tflops'] / peak:.0%}"
        print(line)
if not gpu_runs:
    print("results/compute/ 中还没有 GPU 结果文件：请在 GPU 上运行 mamf_finder.py 并加入其 --json 输出")

fig, ax = plt.subplots(figsize=(8, 3.5))
for run in runs:
    for dtype in run["dtypes"]:
        ms = sorted({r["m"] for r in run["results"] if r["dtype"] == dtype})
        best_max = [max(r["max_tflops"] for r in run["results"]
                        if r["dtype"] == dtype and r["m"] == m) for m in ms]
        best_mean = [max(r["mean_tflops"] for r in run["results"]
                         if r["dtype"] == dtype and r["m"] == m) for m in ms]
        label = f"{run['device']} {dtype}"
        ax.plot(ms, best_max, "o-", label=label + " 最大")
        ax.plot(ms, best_mean, "x--", label=label + " 平均")
ax.set_xlabel("M")
ax.set_xscale("log", base=2)
ax.set_ylabel("TFLOPS，N 与 K 中最好的")
ax.set_yscale("log")
ax.set_title("mamf_finder.py 的结果（results/compute/）")
ax.legend(fontsize=7)
plt.show()
