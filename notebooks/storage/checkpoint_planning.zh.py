# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 32f9a1a610f23e3dd99229d639ffa1ebfecb86d8dd8ecfc950c853682d16a471
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
# # 检查点规划：大小、保存时间与间隔
#
# 一个训练作业（job）怎样保存检查点（checkpoint），由三个问题决定：
#
# 1. **检查点有多大？** 由权重（weights）和优化器状态（optimizer state）的数据类型决定的每参数字节数。
# 2. **一次保存会阻塞训练多久？** 大小除以作业能得到的写带宽（bandwidth）；如果是异步保存，则只是复制到主机内存的时间。
# 3. **多久保存一次？** 要足够频繁，使一次故障不会丢掉太多工作；又要足够稀疏，使写入不会吃掉整个训练。Young 和 Daly 的公式根据阻塞时间和作业的平均故障间隔时间（mean time between failures，MTBF）给出最优值。
#
# 这里的每个数字都由公式和引用的数据计算得出，只有一个实测带宽取自本书的测量结果，另有一个小模拟用来检验公式。修改输入即可规划你自己的作业。本 notebook 在 CPU 上一两秒就能跑完。

# %%
import json
import math
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
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
    plt.rcParams["axes.unicode_minus"] = False
else:
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)

# %% [markdown]
# ## 1. 检查点大小
#
# 一个可恢复训练的检查点包含权重和优化器状态（外加一些小东西：学习率调度器、数据加载器的位置、随机数状态）。使用 Adam 做混合精度（mixed precision）训练时，优化器为每个参数保存一份 fp32 主权重和两个 fp32 矩，共 12 字节，即 ZeRO 论文中的 $K = 12$（[Rajbhandari et al. 2019, section 3.1](https://arxiv.org/abs/1910.02054)）。梯度（gradient）不保存：重启后会重新计算。十进制单位：1 GB = $10^9$ 字节。

# %%
BYTES_PER_PARAM = {
    "仅 bf16 权重": 2,
    "fp32 权重 + SGD 动量": 4 + 4,
    "Adam 混合精度（fp32 主权重 + 2 个矩）": 4 + 4 + 4,
    "Adam 混合精度 + bf16 权重": 2 + 4 + 4 + 4,
}
MODELS = {"1B": 1e9, "7B": 7e9, "70B": 70e9, "405B": 405e9}


def checkpoint_bytes(params: float, bytes_per_param: float) -> float:
    """检查点大小（字节）：参数数 × 每参数字节数。"""
    return params * bytes_per_param


def fmt_bytes(n: float) -> str:
    """十进制 GB 或 TB，保留 3 位有效数字。"""
    return f"{n / 1e12:.3g} TB" if n >= 1e12 else f"{n / 1e9:.3g} GB"


for name, bpp in BYTES_PER_PARAM.items():
    print(f"每参数 {bpp:>2} 字节：{name}")
print()
print(f"{'模型':<5}" + "".join(f"{f'{bpp} B/参数':>11}" for bpp in BYTES_PER_PARAM.values()))
for label, params in MODELS.items():
    print(f"{label:<6}" + "".join(f"{fmt_bytes(checkpoint_bytes(params, bpp)):>12}"
                                  for bpp in BYTES_PER_PARAM.values()))

# %% [markdown]
# ## 2. 保存时间
#
# 一阶近似下，保存时间等于检查点大小除以路径上最慢一环的带宽：文件系统的总写带宽，或写入节点数乘以单个节点能推送的带宽，取两者中较小的那个。
#
# $$ t_{\mathrm{save}} = \frac{\text{bytes}}{\min(B_{\mathrm{fs}},\ N_{\mathrm{nodes}} B_{\mathrm{node}})} $$

# %%
def save_seconds(nbytes: float, fs_GBps: float, nodes: int = 1,
                 node_GBps: float = float("inf")) -> float:
    """以 min(文件系统, 节点数 × 单节点) 带宽（GBps）写入 ``nbytes`` 所需的秒数。"""
    return nbytes / (min(fs_GBps, nodes * node_GBps) * 1e9)


size_70b = checkpoint_bytes(70e9, 14)
for bw in (5, 20, 50, 100):
    print(f"70B，每参数 14 字节（{fmt_bytes(size_70b)}），{bw:>3} GBps："
          f"{save_seconds(size_70b, bw):6.1f} s")
# 128 个节点每个能写 2 GBps，会把 500 GBps 的文件系统限制在 256 GBps
print("128 个节点 × 2 GBps，文件系统 500 GBps：",
      f"{save_seconds(size_70b, 500, nodes=128, node_GBps=2):.2f} s")

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1a1B\u30017B\u300170B \u548c 405B \u53c2\u6570\u7684\u6a21\u578b\u6309\u6bcf\u53c2\u6570 14 \u5b57\u8282\uff0814 GB \u5230 5.67 TB\uff09\u540c\u6b65\u4fdd\u5b58\u68c0\u67e5\u70b9\u7684\u65f6\u95f4\uff08\u79d2\uff09\u968f\u4f5c\u4e1a\u5f97\u5230\u7684\u5199\u5e26\u5bbd\uff081 GBps \u5230 1 TBps\uff09\u7684\u53d8\u5316\uff0c\u70b9\u7ebf\u8868\u793a 1 \u5206\u949f\u3002\u6bcf\u6761\u7ebf\u90fd\u4e0e\u5e26\u5bbd\u6210\u53cd\u6bd4\u4e0b\u964d\uff1b70B \u7684\u68c0\u67e5\u70b9\uff08980 GB\uff09\u9700\u8981\u7ea6 20 GBps\u3001405B \u7684\u9700\u8981\u7ea6 100 GBps\uff0c\u624d\u80fd\u5728\u4e00\u5206\u949f\u5185\u4fdd\u5b58\u5b8c\u3002"]
bandwidths = np.logspace(0, 3, 50)  # 1 GBps .. 1 TBps
fig, ax = plt.subplots(figsize=(7, 4.2))
for label, params in MODELS.items():
    nbytes = checkpoint_bytes(params, 14)
    ax.loglog(bandwidths, nbytes / (bandwidths * 1e9), label=f"{label}（{fmt_bytes(nbytes)}）")
ax.axhline(60, color="grey", ls=":", lw=1)
ax.text(300, 70, "1 分钟", color="grey")
ax.set_xlabel("作业得到的写带宽（GBps，1 GBps = 1e9 B/s）")
ax.set_ylabel("保存时间 (s)")
ax.set_title("同步保存时间，Adam 混合精度（每参数 14 字节）")
ax.legend(title="模型")
plt.show()

# %% [markdown]
# ### 我们的基准测试测到了什么
#
# `scripts/storage/checkpoint_io_bench.py` 分别用 `torch.save` 和 `torch.distributed.checkpoint` 写一个检查点并报告 GBps。提交到仓库的那次运行（在构建本书的 2 核机器上用 2 个 CPU 进程，写本地虚拟磁盘）与集群的文件系统相去甚远；这个单元格演示如何把一个实测带宽换算成保存时间的估计。

# %%
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


bench = json.loads(book_file("results/storage/checkpoint_io_bench-cpu-2proc.json"))
by_op = {(r["method"], r["op"]): r for r in bench["results"]}
dcp_save = by_op[("dcp", "save")]["GBps"]
print("实测 dcp 保存带宽 ≈", round(dcp_save, 2), "GBps")
print("按这个带宽，一个 7B 检查点（98 GB）需要 ≈",
      round(save_seconds(checkpoint_bytes(7e9, 14), dcp_save) / 60), "分钟")
blocked = by_op.get(("dcp_async", "save_blocking"))
if blocked:
    print("dcp.async_save 阻塞训练 ≈", round(blocked["time_s"], 1),
          "s；同步的 dcp.save 阻塞训练 ≈", round(by_op[("dcp", "save")]["time_s"], 1), "s")

# %% [markdown]
# ## 3. 多久保存一次
#
# 设 $\delta$ 为一次检查点阻塞训练的时间，$\tau$ 为两次检查点之间的计算时间，$M$ 为作业的 MTBF，$R$ 为重启时间。每个间隔因写入损失 $\delta$；每次故障平均损失半个间隔，再加上 $R$。在 $\tau \ll M$ 时，损失的时间比例约为
#
# $$ f(\tau) = \frac{\delta}{\tau} + \frac{\tau}{2M} + \frac{R}{M}, $$
#
# 它在 **Young** 的间隔处最小（[Young 1974](https://doi.org/10.1145/361147.361115)）：$\tau_{\mathrm{opt}} = \sqrt{2\delta M}$，此时 $f = \sqrt{2\delta/M} + R/M$。**Daly**（[2006](https://doi.org/10.1016/j.future.2004.11.016)）给出了一个高阶估计，在 $\delta$ 相对于 $M$ 不算小时仍然准确：
#
# $$ \tau_{\mathrm{opt}} = \sqrt{2\delta M}\left[1 + \tfrac13\sqrt{\tfrac{\delta}{2M}}
#    + \tfrac19\,\tfrac{\delta}{2M}\right] - \delta \quad (\delta < 2M), \qquad
#    \tau_{\mathrm{opt}} = M \text{ otherwise.} $$

# %%
def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974)：两次检查点之间的最优计算时间 sqrt(2 δ M)，单位秒。"""
    return math.sqrt(2 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006)：最优间隔的高阶估计，单位秒。"""
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    x = delta_s / (2 * mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - delta_s


def lost_fraction(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """一阶近似下损失的墙钟时间比例：写入 + 重算 + 重启。"""
    return delta_s / tau_s + tau_s / (2 * mtbf_s) + restart_s / mtbf_s


# %% [markdown]
# ### 大型作业的故障率
#
# Llama 3 405B 的训练在最多 16,384 个 H100 GPU 上的 54 天快照中，发生了 419 次意外中断，约 78% 被归因于已确认或疑似的硬件问题（[The Llama 3 Herd of Models, section 3.3.4](https://arxiv.org/abs/2407.21783)）。如果各 GPU（连同它分摊的主机、网络和软件）独立地发生故障，作业的 MTBF 就等于单个 GPU 的 MTBF 除以 GPU 数。按 54 天里一直使用全部 16,384 个 GPU 来计算，得到的是一个偏乐观的单 GPU 数字（实际 GPU 小时更少，单 GPU 的 MTBF 就更短）。

# %%
LLAMA3_GPUS, LLAMA3_DAYS, LLAMA3_FAILURES = 16_384, 54, 419
GPU_HOURS_PER_FAILURE = LLAMA3_GPUS * LLAMA3_DAYS * 24 / LLAMA3_FAILURES
print(f"Llama 3 作业 MTBF = {LLAMA3_DAYS * 24 / LLAMA3_FAILURES:.1f} h；"
      f"每次故障对应的 GPU 小时 = {GPU_HOURS_PER_FAILURE:,.0f}")


def job_mtbf_s(gpus: int) -> float:
    """按 Llama 3 每 GPU 小时的故障率计算的作业 MTBF，单位秒。"""
    return GPU_HOURS_PER_FAILURE / gpus * 3600


# %% [markdown]
# ### 算例
#
# 一个 70B 模型，Adam 混合精度（每参数 14 字节，980 GB），在 1,024 个 GPU 上运行，写入的文件系统能给这个作业 50 GBps。

# %%
delta = save_seconds(size_70b, 50)
for gpus, d, label in ((1024, delta, "同步，50 GBps"), (16_384, delta, "同步，50 GBps"),
                       (16_384, 2.0, "异步，阻塞 2 s")):
    M = job_mtbf_s(gpus)
    ty, td = young_interval(d, M), daly_interval(d, M)
    print(f"{gpus:>6} 个 GPU，{label}：δ = {d:.1f} s，MTBF = {M / 3600:.1f} h\n"
          f"       Young = {ty / 60:.1f} 分钟，Daly = {td / 60:.1f} 分钟，"
          f"损失 = {100 * lost_fraction(ty, d, M):.1f}%")

# %% [markdown]
# 损失曲线在最优点附近很平坦：以最优间隔的一半或两倍保存检查点，代价是最小损失的 $\tfrac12(\tfrac12 + 2) = 1.25$ 倍。所以把间隔取整到方便的步数没有问题，而且宁可偏频繁（实践中故障会扎堆）也代价不大。

# %% alt=["\u56fe\uff1a\u635f\u5931\u7684\u65f6\u95f4\u6bd4\u4f8b\uff08%\uff09\u968f\u4e24\u6b21\u68c0\u67e5\u70b9\u7684\u95f4\u9694\uff085 \u5230 240 \u5206\u949f\uff09\u7684\u53d8\u5316\uff0c70B \u6a21\u578b\u30011024 \u4e2a GPU\uff08\u03b4 = 19.6 s\uff0cMTBF = 49.5 h\uff09\uff1a\u5199\u5165\u7684\u865a\u7ebf\uff08\u03b4/\u03c4\uff09\u968f\u95f4\u9694\u4e0b\u964d\uff0c\u6545\u969c\u540e\u91cd\u7b97\u7684\u865a\u7ebf\uff08\u03c4/2M\uff09\u4e0a\u5347\uff0c\u4e8c\u8005\u4e4b\u548c\u662f\u5e95\u90e8\u5e73\u5766\u7684\u66f2\u7ebf\uff0c\u6700\u5c0f\u503c\u7ea6 1.5%\uff0c\u4f4d\u4e8e 44 \u5206\u949f\u7684\u6700\u4f18\u70b9\uff08\u7ad6\u7ebf\uff09\u3002\u5728\u6700\u4f18\u70b9\u9644\u8fd1\u5408\u8ba1\u53d8\u5316\u5f88\u6162\uff0c\u6240\u4ee5\u95f4\u9694\u4e0d\u5fc5\u53d6\u5f97\u5f88\u7cbe\u786e\u3002"]
M = job_mtbf_s(1024)
taus = np.linspace(5 * 60, 4 * 3600, 400)
fig, ax = plt.subplots(figsize=(7, 4.2))
ax.plot(taus / 60, 100 * (delta / taus), ls="--", label="写入：δ/τ")
ax.plot(taus / 60, 100 * taus / (2 * M), ls="--", label="重算：τ/2M")
ax.plot(taus / 60, 100 * (delta / taus + taus / (2 * M)), lw=2, label="合计")
t_opt = young_interval(delta, M)
ax.axvline(t_opt / 60, color="k", lw=1)
ax.annotate(f"最优 {t_opt / 60:.0f} 分钟", (t_opt / 60, 4), xytext=(t_opt / 60 + 10, 4.5))
ax.set_ylim(0, 6)
ax.set_xlabel("两次检查点的间隔 τ（分钟）")
ax.set_ylabel("损失的时间 (%)")
ax.set_title("70B 模型，1,024 个 GPU，δ = 19.6 s，MTBF = 49.5 h")
ax.legend()
plt.show()

# %% [markdown]
# ### 间隔与损失随集群规模的变化
#
# 同一个 980 GB 的检查点，分别以 5 GBps 或 50 GBps 同步写入，或以阻塞 2 s 的方式异步写入，在 256 到 32,768 个 GPU 上、按 Llama 3 的故障率计算。

# %% alt=["\u4e24\u5f20\u56fe\uff0c\u6a2a\u8f74\u4e3a\u4f5c\u4e1a\u4e2d\u7684 GPU \u6570\uff08256 \u5230 32768\uff09\uff0c\u6309 Llama 3 \u7684\u6545\u969c\u7387\uff0c980 GB \u7684\u68c0\u67e5\u70b9\u4ee5 5 GBps\uff08\u03b4 = 196 s\uff09\u6216 50 GBps\uff08\u03b4 = 19.6 s\uff09\u540c\u6b65\u4fdd\u5b58\uff0c\u6216\u5f02\u6b65\u4fdd\u5b58\u3001\u963b\u585e 2 s\u3002\u5de6\u56fe\uff0c\u5bf9\u6570\u5750\u6807\u7684\u6700\u4f18\u95f4\u9694\uff08Daly\uff09\u968f\u96c6\u7fa4\u53d8\u5927\u800c\u7f29\u77ed\uff1a5 GBps \u65f6\u4ece\u7ea6 280 \u5206\u949f\u964d\u5230 22 \u5206\u949f\uff0c\u5f02\u6b65\u65f6\u4ece\u7ea6 28 \u5206\u949f\u964d\u5230 2.5 \u5206\u949f\u3002\u53f3\u56fe\uff0c\u6700\u4f18\u70b9\u5904\u635f\u5931\u7684\u65f6\u95f4\u968f\u4e4b\u4e0a\u5347\uff1a32768 \u4e2a GPU \u65f6\uff0c5 GBps \u7ea6 27%\uff0c50 GBps \u7ea6 8%\uff0c\u5f02\u6b65\u4e0d\u5230 3%\u3002"]
gpus = np.array([256, 512, 1024, 2048, 4096, 8192, 16384, 32768])
cases = {"同步，5 GBps（δ = 196 s）": save_seconds(size_70b, 5),
         "同步，50 GBps（δ = 19.6 s）": save_seconds(size_70b, 50),
         "异步（δ = 2 s）": 2.0}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
for label, d in cases.items():
    taus_opt = [daly_interval(d, job_mtbf_s(g)) for g in gpus]
    lost = [lost_fraction(t, d, job_mtbf_s(g)) for t, g in zip(taus_opt, gpus, strict=True)]
    ax1.loglog(gpus, np.array(taus_opt) / 60, marker="o", label=label)
    ax2.semilogx(gpus, 100 * np.array(lost), marker="o", label=label)
for ax in (ax1, ax2):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("作业中的 GPU 数")
ax1.set_ylabel("最优间隔（分钟，Daly）")
ax2.set_ylabel("最优点处损失的时间 (%)")
ax1.legend(fontsize=8)
fig.suptitle("检查点间隔与集群规模（Llama 3 故障率）")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 4. 用模拟检验公式
#
# Young 的公式建立在近似之上（故障是泊松过程，$\tau \ll M$）。一个故障间隔服从指数分布的小模拟可以检验它：以 $\tau$ 为间隔完成 1,000 小时的工作，每个间隔之后写一次耗时 $\delta$ 的检查点；一次故障会丢掉自上一个完成的检查点以来的全部工作。在最优点附近，模拟得到的损失应与 $f(\tau)$ 相差不超过其自身的百分之几。

# %%
def simulate_lost_fraction(tau_s, delta_s, mtbf_s, work_s, rng):
    """通过模拟得到的、没有用于有效工作的墙钟时间比例（R = 0）。"""
    done, wall = 0.0, 0.0
    next_failure = rng.exponential(mtbf_s)
    while done < work_s:
        segment = tau_s + delta_s  # 先计算，再写检查点
        if wall + segment <= next_failure:
            wall += segment
            done += tau_s
        else:  # 丢掉这一段未完成的部分，从上一个检查点重新开始
            wall = next_failure
            next_failure = wall + rng.exponential(mtbf_s)
    return 1 - work_s / wall


rng = np.random.default_rng(0)
M = job_mtbf_s(4096)
d = save_seconds(size_70b, 50)
ok = []
for factor in (0.5, 1.0, 2.0):
    tau = factor * young_interval(d, M)
    sim = np.mean([simulate_lost_fraction(tau, d, M, 1000 * 3600, rng) for _ in range(20)])
    model = lost_fraction(tau, d, M)
    ok.append(abs(sim - model) / model < 0.15)
    print(f"τ = 最优值的 {factor:>3} 倍：模型 = {100 * model:.2f}%，模拟 ≈ {100 * sim:.2f}%")
print("模拟结果与模型相差在 15% 以内：", all(ok))
