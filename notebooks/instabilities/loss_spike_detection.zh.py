# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: d8af2096ab46e4f51569b36fad5feb6ec5d5a954ec59e5179001a7d3be083aaf
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
# # 在记录下来的运行中检测损失尖峰
#
# 损失尖峰（loss spike）事后在图上很容易看到，而凌晨三点在监控面板上却出奇地容易错过。本笔记本构建一个最简单但管用的自动检测器——损失和梯度（gradient）范数的**滚动 z 分数**（rolling z-score），并把它用在一个微型 transformer 的六次真实训练运行上。这些运行由本书的 `scripts/instabilities/loss_spike_experiment.py` 记录（文件 `results/instabilities/loss_spike_experiment.json`；命令和机器写在 `results/instabilities/README.md` 中）。各次运行只在训练配方上不同；模型初始化和数据顺序都相同。
#
# 读完后应当记住：
#
# 1. 与最近历史相比的 z 分数，会在坏批次造成的尖峰发生的那一步把它标出来，在损失上如此，在梯度范数上更加明显。
# 2. 它**不会**标出缓慢的发散（divergence）：高学习率（learning rate）的运行从未出现尖峰，它只是在注意力 logit 爆炸的同时停止了学习。要单独监控这些量。
# 3. 跳过被标出的批次，可以消除它们对损失的后续影响。
#
# 这里不训练任何模型：笔记本只读取记录文件，几秒钟就能运行完。

# %%
import json
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


report = json.loads(book_file("results/instabilities/loss_spike_experiment.json"))
runs = report["runs"]
settings = report["settings"]
print("运行：", ", ".join(runs))
print(f"每次运行的步数 = {settings['steps']}，批次 = {settings['batch_size']} x "
      f"{settings['seq_len']} 个 token，模型宽度 = {settings['d_model']}，"
      f"层数 = {settings['layers']}")
print(f"损失下限（合成语言的熵率）= {report['loss_floor']:.3f} nats/token")

# %% [markdown]
# ## 检测器
#
# 对于第 $t$ 步的值 $x_t$（损失或梯度范数），取它之前的 $W$ 个值，计算它们的均值 $\mu_t$ 和标准差 $\sigma_t$，则
#
# $$ z_t = \frac{x_t - \mu_t}{\sigma_t}. $$
#
# 当 $z_t$ 从下方越过阈值 $k$ 时，一个尖峰开始。窗口让检测器跟随损失缓慢下降的趋势；阈值决定你能接受多少误报。脚本的默认值是 $W = 50$ 步、$k = 6$。如果损失噪声是均值和标准差已知的高斯噪声，$k = 6$ 大约每 10⁹ 步才会被偶然越过一次（$P(Z > 6) \approx 10^{-9}$）；而均值和标准差都只从 50 步估计出来，加上真实损失的尾部更重，偶然越过的频率要高得多，这就是阈值要远高于 3 的原因。
#
# 下面是脚本中 `rolling_z` 的向量化版本（NumPy），并与脚本保存的 z 分数作了核对。

# %%
def rolling_z(x, window):
    """z-score of x[t] against x[t-window:t] (sample std); 0 for the first `window` steps."""
    x = np.asarray(x, dtype=float)
    z = np.zeros_like(x)
    if len(x) <= window:
        return z
    past = np.lib.stride_tricks.sliding_window_view(x[:-1], window)
    mu, sd = past.mean(axis=1), past.std(axis=1, ddof=1)
    z[window:] = (x[window:] - mu) / np.maximum(sd, 1e-12)
    return z


def spike_starts(z, k):
    """Steps where z crosses k from below."""
    above = z > k
    return [int(t) for t in np.flatnonzero(above & ~np.r_[False, above[:-1]])]


W, K = settings["window"], settings["z_threshold"]
same = all(np.allclose(rolling_z(r["loss"], W), r["loss_z"]) for r in runs.values())
print("NumPy 算出的 z 分数与脚本的一致：", same)

# %% [markdown]
# ## 各次运行一览
#
# `最终损失` 是最后 20 步的平均值；`损失 z` 和 `梯度 z` 是损失和梯度范数的最大 z 分数；`尖峰数` 统计损失 z 分数越过 k = 6 的次数；`注意力 logit` 是该次运行中见到的最大注意力 logit $|q \cdot k| / \sqrt{d_{head}}$。

# %%
print("运行" + " " * 17 + "   最终损失  损失 z  梯度 z 尖峰数  注意力 logit")
for name, r in runs.items():
    s = r["summary"]
    print(f"{name:21s}{s['final_loss']:11.3f}{s['max_loss_z']:8.1f}{s['max_grad_z']:8.1f}"
          f"{len(s['loss_spike_steps']):7d}{s['max_attn_logit']:13.1f}")

# %% [markdown]
# ## 坏批次造成的尖峰
#
# 在 `bad_batches` 中，运行进行到 35% 和 60% 时，各有连续四个批次被替换为垃圾（一个 token 的重复）。这些批次的损失跳高，梯度范数跳得更多，两个 z 分数都在第一个坏批次处越过阈值。`bad_batches_skipped` 在线使用同一个检测器：损失 z 分数超过 6 的批次不做优化器步。

# %% alt=["\u4e0a\u4e0b\u4e09\u5f20\u56fe\uff0c700 \u4e2a\u8bad\u7ec3\u6b65\uff0c\u753b\u51fa\u57fa\u7ebf\u3001\u542b\u574f\u6279\u6b21\u7684\u8fd0\u884c\u548c\u8df3\u8fc7\u574f\u6279\u6b21\u7684\u8fd0\u884c\u3002\u4e0a\u56fe\uff1a\u635f\u5931\uff08nats/token\uff0c\u622a\u5728 3\uff09\u4ece 3 \u4ee5\u4e0a\u964d\u5230\u7ea6 1.4\uff0c\u542b\u574f\u6279\u6b21\u7684\u8fd0\u884c\u5728\u7ea6\u7b2c 245 \u6b65\u548c\u7b2c 420 \u6b65\uff08\u7ea2\u8272\u70b9\u7ebf\uff09\u51b2\u51fa\u56fe\u5916\uff0c\u4e4b\u540e\u7565\u9ad8\u4e8e\u57fa\u7ebf\u4e00\u6bb5\u65f6\u95f4\uff0c\u8df3\u8fc7\u574f\u6279\u6b21\u7684\u8fd0\u884c\u5219\u4e0e\u57fa\u7ebf\u91cd\u5408\u3002\u4e2d\u56fe\uff1a\u5bf9\u6570\u5750\u6807\u7684\u68af\u5ea6\u8303\u6570\uff0c\u5728\u540c\u6837\u7684\u6b65\u4ece\u7ea6 0.6 \u8df3\u5230\u7ea6 20\u3002\u4e0b\u56fe\uff1a50 \u6b65\u7a97\u53e3\u7684\u635f\u5931 z \u5206\u6570\uff0c\u9664\u4e24\u4e2a\u7ea6 165 \u548c 185 \u7684\u5c16\u5cf0\u5916\u90fd\u63a5\u8fd1 0\uff0c\u5c16\u5cf0\u8fdc\u9ad8\u4e8e\u9608\u503c 6 \u7684\u865a\u7ebf\u3002"]
steps = np.arange(settings["steps"])
fig, axes = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
for name, color in [("baseline", "gray"), ("bad_batches_skipped", "tab:blue"),
                    ("bad_batches", "tab:red")]:
    r = runs[name]
    axes[0].plot(steps, r["loss"], color=color, lw=0.8, label=name)
    axes[1].semilogy(steps, r["grad_norm"], color=color, lw=0.8, label=name)
    axes[2].plot(steps, np.clip(rolling_z(r["loss"], W), -10, 200), color=color, lw=0.8,
                 label=name)
for t in runs["bad_batches"]["summary"]["loss_spike_steps"]:
    axes[0].axvline(t, color="tab:red", ls=":", lw=0.8)
axes[0].set_ylim(1.2, 3.0)
axes[0].set_ylabel("损失（nats/token）")
axes[1].set_ylabel("梯度范数")
axes[2].axhline(K, color="black", lw=0.8, ls="--")
axes[2].set_ylabel(f"损失 z 分数（W={W}）")
axes[2].set_xlabel("步")
axes[0].legend(loc="upper right")
axes[0].set_title("坏批次：尖峰、后续影响与跳过")
plt.show()

# %% [markdown]
# 损失轴在 3 处截断，以便看清后续影响：坏批次之后，没有保护的运行会在一段时间内高于基线，跳过了它们的运行则不会。下表度量了这一点：每组坏批次之后 50 步的平均损失，减去基线在同样这些步上的平均损失。

# %%
bad_steps = runs["bad_batches"]["summary"]["bad_steps"]
groups = [s for s in bad_steps if s - 1 not in bad_steps]
base = np.array(runs["baseline"]["loss"])
for name in ("bad_batches", "bad_batches_skipped"):
    loss = np.array(runs[name]["loss"])
    excess = [loss[g + 4:g + 54].mean() - base[g + 4:g + 54].mean() for g in groups]
    print(f"{name:22s} 每组之后的额外损失："
          + ", ".join(f"{e:+.3f}" for e in excess) + " nats/token")
print("跳过的步 == 坏批次的步：",
      runs["bad_batches_skipped"]["summary"]["skipped_steps"] == bad_steps)

# %% [markdown]
# ## z 分数看不见的东西：注意力 logit 增长导致的发散
#
# `high_lr` 使用 0.1 的学习率，没有预热（warmup），也没有梯度裁剪（gradient clipping）。它的损失从未出现*尖峰*：先下降，然后停滞在远高于其他运行的位置，与此同时最大的注意力 logit 增长了几个数量级。这正是 [Dehghani 等人 2023](https://arxiv.org/abs/2302.05442) 描述、[Wortsman 等人 2023](https://arxiv.org/abs/2309.14322) 在小规模上复现的失败方式。同样的学习率加上 QK-layernorm（以及 z-loss）就能训练；预热加梯度裁剪在这里也能训练，但它的注意力 logit 仍在攀升。

# %% alt=["\u4e24\u5f20\u56fe\uff0c700 \u6b65\uff0c\u753b\u51fa\u5b66\u4e60\u7387 0.1 \u7684\u51e0\u4e2a\u8fd0\u884c\u548c\u57fa\u7ebf\u3002\u5de6\u56fe\u4e3a\u635f\u5931\uff08nats/token\uff09\uff0c\u865a\u7ebf\u662f\u7ea6 1.3 \u7684\u4e0b\u9650\uff1ahigh_lr \u505c\u5728 3.5 \u5de6\u53f3\uff0c\u4f46\u6ca1\u6709\u4efb\u4f55\u5c16\u5cf0\uff1bhigh_lr_warmup_clip \u548c high_lr_qknorm_zloss \u7a33\u5b9a\u5728\u7ea6 1.6\uff0c\u57fa\u7ebf\u5230\u8fbe\u7ea6 1.4\u3002\u53f3\u56fe\u4e3a\u5bf9\u6570\u5750\u6807\u7684\u6700\u5927\u6ce8\u610f\u529b logit\uff1ahigh_lr \u7ea6 3 \u00d7 10\u2074\uff0c\u52a0\u9884\u70ed\u548c\u88c1\u526a\u7684\u8fd0\u884c\u722c\u5347\u5230\u7ea6 2000\uff0c\u52a0 QK-layernorm \u7684\u8fd0\u884c\u7a33\u5b9a\u5728\u7ea6 45\uff0c\u57fa\u7ebf\u7ea6\u4e3a 4\u3002\u6ce8\u610f\u529b logit \u589e\u957f\u5bfc\u81f4\u7684\u53d1\u6563\u4f53\u73b0\u5728 logit \u4e0a\uff0c\u800c\u4e0d\u662f\u635f\u5931\u5c16\u5cf0\u3002"]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for name, color in [("high_lr", "tab:red"), ("high_lr_warmup_clip", "tab:orange"),
                    ("high_lr_qknorm_zloss", "tab:green"), ("baseline", "gray")]:
    r = runs[name]
    axes[0].plot(steps, r["loss"], color=color, lw=0.8, label=name)
    axes[1].semilogy(steps, r["max_attn_logit"], color=color, lw=0.8, label=name)
axes[0].axhline(report["loss_floor"], color="black", lw=0.8, ls="--")
axes[0].set_ylim(1.2, 4.5)
axes[0].set_xlabel("步")
axes[0].set_ylabel("损失（nats/token）")
axes[0].set_title("损失（虚线：下限）")
axes[1].set_xlabel("步")
axes[1].set_ylabel("最大 |注意力 logit|")
axes[1].set_title("注意力 logit")
axes[1].legend(fontsize=8)
plt.show()

# %%
for name in ("high_lr", "high_lr_qknorm_zloss"):
    s = runs[name]["summary"]
    print(f"{name:22s} 标出的损失尖峰：{len(s['loss_spike_steps'])}，"
          f"最终损失 - 下限 = {s['final_loss'] - report['loss_floor']:.2f} nats/token")

# %% [markdown]
# ## 是哪一层？尖峰附近各块的梯度范数
#
# 脚本还记录了每个 transformer 块的梯度范数。在第一个坏批次附近，所有块的范数一起跳高，这表明原因在输入（数据），而不在某一层失控。

# %% alt=["\u5bf9\u6570\u5750\u6807\u56fe\uff1a\u4e24\u4e2a transformer \u5757\u5404\u81ea\u7684\u68af\u5ea6\u8303\u6570\uff0c\u7b2c 234 \u6b65\u5230\u7b2c 258 \u6b65\uff0c\u56db\u4e2a\u574f\u6279\u6b21\uff08\u7b2c 244 \u5230 247 \u6b65\uff09\u7528\u7ea2\u8272\u9634\u5f71\u6807\u51fa\u3002\u4e24\u4e2a\u5757\u5728\u574f\u6279\u6b21\u671f\u95f4\u540c\u65f6\u4ece\u7ea6 0.3 \u5230 0.4 \u8df3\u5230\u7ea6 10\uff0c\u4e4b\u540e\u7acb\u5373\u56de\u843d\uff1a\u539f\u56e0\u5728\u6570\u636e\uff0c\u800c\u4e0d\u662f\u67d0\u4e00\u5c42\u5931\u63a7\u3002"]
g0 = groups[0]
layer = np.array(runs["bad_batches"]["layer_grad_norms"])
window = slice(g0 - 10, g0 + 15)
fig, ax = plt.subplots(figsize=(7, 3.5))
for i in range(layer.shape[1]):
    ax.semilogy(steps[window], layer[window, i], marker=".", lw=0.8, label=f"块 {i}")
ax.axvspan(g0 - 0.5, g0 + 3.5, color="tab:red", alpha=0.15, label="坏批次")
ax.set_xlabel("步")
ax.set_ylabel("该块的梯度范数")
ax.legend()
plt.show()

# %% [markdown]
# ## 选择阈值
#
# 在每个阈值下，干净的基线运行中有多少步会被标出（分别看损失和梯度范数），每组坏批次是否仍然都能被抓到？梯度范数是噪声更大的信号：k = 3 时它在干净运行上已经产生误报，而损失没有。k = 6 时两者在干净运行上都保持沉默，并且都能抓到每一组。

# %%
def alarms(name, key, k):
    return spike_starts(rolling_z(runs[name][key], W), k)


print("   k" + "   误报（损失）" + "   误报（梯度）" + "  全部组都抓到")
for k in (2, 3, 6, 20):
    caught = all(g in alarms("bad_batches", "loss", k) and g in alarms("bad_batches", "grad_norm", k)
                 for g in groups)
    print(f"{k:4d}{len(alarms('baseline', 'loss', k)):15d}"
          f"{len(alarms('baseline', 'grad_norm', k)):15d}{str(caught):>14}")

# %% [markdown]
# 这里的余量很大，是因为坏批次很极端（z 分数达到数百）。真实的损失曲线噪声更大，而且噪声的尾部比这个合成语言的更重，所以请在你自己运行中一段已知健康的区间上校准 k：统计它本会产生多少次报警，然后提高 k，直到这个次数可以接受。
