# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 582c890373953258eeffa5dbc792c8cf9e4260685d42dbfad12cfbcfe178265c
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
# # KV cache 分页：能容纳多少个请求
#
# 本部分的 **KV cache** 一页解释了推理服务器为什么不再为每个请求预留一块连续的缓存缓冲区，而改用分页分配（paged allocation）（PagedAttention，Kwon 等人 2023，[arXiv:2309.06180](https://arxiv.org/abs/2309.06180)）。本 notebook 在一个模拟的服务器上测量两者的差别：
#
# 1. 对一组长度各异的请求，每种方案浪费多少显存（GPU memory），以及页（即块）的大小如何影响浪费；
# 2. 在固定的显存预算下，当请求不断到达、每步增长一个 token、完成后离开时，能同时运行多少个请求；
# 3. 并行采样（parallel sampling）的各个样本共享同一个提示词（prompt）能省下多少。
#
# 所有量都以缓存的 token 数计：乘以模型每个 token 的 KV 字节数（该页的表格，或 `scripts/inference/kv_cache_calculator.py`）就得到字节数。长度从固定随机种子（seed）的对数正态分布（log-normal distribution）中抽取；它们代表一种类似聊天的负载（workload），而不是实测的请求记录（trace）。

# %%
import math
import warnings

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

rng = np.random.default_rng(0)
MAX_LEN = 4096  # 服务器接受的最长序列（提示词 + 输出）


def lengths(n, median, sigma, rng):
    """n 个服从对数正态分布、具有给定中位数的 token 数，截断到 [1, MAX_LEN]。"""
    return np.clip(np.round(rng.lognormal(math.log(median), sigma, n)), 1, MAX_LEN).astype(int)


N = 20_000
prompt = lengths(N, 300, 1.0, rng)
output = lengths(N, 200, 0.9, rng)
total = np.minimum(prompt + output, MAX_LEN)
print(f"{N} 个请求：提示词中位数 {np.median(prompt):.0f}，均值 {prompt.mean():.0f}；"
      f"输出中位数 {np.median(output):.0f}，均值 {output.mean():.0f}；"
      f"总长度均值 {total.mean():.0f}，p99 {np.percentile(total, 99):.0f} token")

# %% [markdown]
# ## 最终长度下的浪费
#
# 假设每个请求都以其最终长度持有缓存。为每个请求预留 `MAX_LEN` 个 token 的**连续**分配服务器，只用上了所预留空间的 `length / MAX_LEN`。**分页**服务器随着序列增长，按每块 `b` 个 token 分配块（block），所以只浪费最后一个块中未填满的部分：平均每条序列约 `b / 2` 个 token。

# %% alt=["\u6298\u7ebf\u56fe\uff1a\u5206\u9875\u7f13\u5b58\u7684\u5757\u5927\u5c0f\uff081 \u5230 512 \u4e2a token\uff0c\u5bf9\u6570\u5750\u6807\uff09\u4e0e KV \u7f13\u5b58\u4e2d\u5b58\u653e\u4e86 token \u7684\u6bd4\u4f8b\uff08%\uff09\u7684\u5173\u7cfb\uff0c\u865a\u7ebf\u662f\u6bcf\u4e2a\u8bf7\u6c42\u9884\u7559 4096 \u4e2a token \u7684\u8fde\u7eed\u5206\u914d\u3002\u5206\u9875\u5206\u914d\u5728\u5757\u5927\u5c0f\u4e0d\u8d85\u8fc7 64 \u4e2a token \u65f6\u4fdd\u6301\u5728 95% \u4ee5\u4e0a\uff0c\u5230 512 \u65f6\u964d\u5230\u7ea6 76%\uff1b\u8fde\u7eed\u5206\u914d\u9884\u7559\u7684\u7f13\u5b58\u4e2d\u53ea\u6709\u7ea6 19% \u5b58\u653e\u4e86 token\u3002"]
def paged_tokens(length, block):
    """长为 `length` 个 token 的序列，按每块 `block` 个 token 分配时占用的缓存 token 数。"""
    return -(-length // block) * block


print(f"连续分配，每个请求预留 {MAX_LEN}：预留的缓存中 {100 * total.mean() / MAX_LEN:5.1f}% "
      "存放了 token")
blocks = [1, 8, 16, 32, 64, 128, 256, 512]
used = [total.sum() / paged_tokens(total, b).sum() for b in blocks]
for b, u in zip(blocks, used, strict=True):
    print(f"分页，每块 {b:>3} token：{100 * u:5.1f}% 存放了 token；"
          f"每个请求浪费 {paged_tokens(total, b).mean() - total.mean():6.1f} token")

fig, ax = plt.subplots(figsize=(7, 3.8))
ax.semilogx(blocks, [100 * u for u in used], "o-", base=2, label="分页")
ax.axhline(100 * total.mean() / MAX_LEN, color="tab:red", ls="--",
           label=f"连续，预留 {MAX_LEN}")
ax.set_xlabel("块大小（token）")
ax.set_ylabel("存放了 token 的缓存（%）")
ax.set_ylim(0, 105)
ax.legend(frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# 每个请求只有几百个 token，而上限是 4,096 token，所以连续方案只填满了所预留空间的一小部分。分页分配把浪费控制在每条序列半个块，块大小为 16 到 32 个 token 时只占缓存的百分之一到二（vLLM 默认每块 16 个 token）；更大的块让 kernel 的工作更容易，但浪费更多。预留少于 `MAX_LEN` 的空间（即为每个请求的输出设一个上限）对连续方案有帮助，但任何上限要么截断长回答，要么保留大部分浪费。

# %% [markdown]
# ## 服务器随时间的运行
#
# 现在来看一个简单的连续批处理（continuous batching）服务器。请求在一个先来先服务（first-come-first-served）的队列中等待；每个解码（decode）步之前，只要显存允许，服务器就从队首接纳（admit）请求；每一步为每条正在运行的序列增加一个 token（提示词的 token 视为在接纳时就已写入）；序列一结束就立即释放显存。显存预算是 `BUDGET` 个 token 的缓存。
#
# * **连续**：接纳时预留 `MAX_LEN` 个 token；除此之外不会出任何问题。
# * **分页**：接纳时需要容纳提示词再加一个 token 所需的块；序列填满最后一个块时再取一个新块。如果没有空闲块，就抢占（preempt）最近接纳的那条序列：释放它的块，把它放回队首，以后从头重新计算（vLLM 的重新计算（recomputation），论文第 4.5 节）。
#
# 请求到达的速度超过服务器的服务能力，所以队列永远不会空，同时运行的序列数衡量的就是显存所能容纳的量。

# %%
BUDGET = 200_000
BLOCK = 16


def simulate(policy, reserve=0.0, steps=3000, seed=1):
    """在一个始终满载、请求按上文方式抽取的队列上，`policy`（"contiguous" 即连续，或 "paged" 即
    分页）的平均运行序列数和每 1,000 步的抢占次数；分页服务器只有在接纳请求后仍有比例为
    `reserve` 的预算空闲时才接纳它。"""
    rng = np.random.default_rng(seed)
    queue, running, free = [], [], BUDGET
    running_counts, preemptions = [], 0
    for _ in range(steps):
        while len(queue) < 64:  # 永远处理不完的积压请求
            p, o = int(lengths(1, 300, 1.0, rng)[0]), int(lengths(1, 200, 0.9, rng)[0])
            queue.append([min(p, MAX_LEN - 1), max(1, min(o, MAX_LEN - p))])
        while queue:  # 只要显存允许，就从队首接纳请求
            p, o = queue[0]
            need = MAX_LEN if policy == "contiguous" else paged_tokens(p + 1, BLOCK)
            if need > free - reserve * BUDGET:
                break
            queue.pop(0)
            free -= need
            running.append({"p": p, "o": o, "len": p, "held": need})
        for s in list(running):  # 一个解码步
            if s.get("preempted"):
                continue  # 已在本步早些时候被驱逐
            s["len"] += 1
            if policy == "paged" and s["len"] > s["held"]:
                while free < BLOCK:  # 抢占最新接纳的序列，直到有一个空闲块
                    victim = running.pop()
                    victim["preempted"] = True
                    free += victim["held"]
                    queue.insert(0, [victim["p"], victim["o"]])
                    preemptions += 1
                if s.get("preempted"):
                    continue
                free -= BLOCK
                s["held"] += BLOCK
            if s["len"] >= s["p"] + s["o"]:
                running.remove(s)
                free += s["held"]
        running_counts.append(len(running))
    return np.mean(running_counts[steps // 3:]), 1000 * preemptions / steps


results = {"连续分配": simulate("contiguous")}
for reserve in (0.0, 0.05, 0.1, 0.2):
    results[f"分页，预留 {reserve:.0%}"] = simulate("paged", reserve)
for name, (mean_running, preempt) in results.items():
    print(f"{name:>20}：平均同时运行 {mean_running:6.1f} 条序列，"
          f"每 1,000 步抢占 {preempt:5.1f} 次")
best = results["分页，预留 0%"][0] / results["连续分配"][0]
print(f"不设预留的分页分配同时运行的序列数是连续分配的 {best:.1f} 倍")

# %% [markdown]
# 无论序列实际多长，连续分配的服务器最多只能同时运行 `BUDGET / MAX_LEN` 条序列；分页服务器用同样的显存能同时运行约五倍的序列，而由于序列增多时一个解码步的开销远不是按比例增长（**预填充与解码**一页），它的吞吐量（throughput）也随之增长。代价是抢占（preemption）：贪心接纳请求的分页服务器不知道各序列的最终长度，会耗尽块，只好驱逐序列并在以后重新计算，这里大约每三步一次。在接纳时保留百分之几的块空闲，就能消除这个负载下的抢占，只损失一点并发度（concurrency）；合适的预留比例取决于回答有多长。

# %% [markdown]
# ## 共享提示词
#
# 并行采样（为一个提示词生成 `n` 个回答）和束搜索（beam search）的每条序列都以同样的提示词开头。采用分页时，提示词的完整块只存一份，由各序列共享（它最后那个部分填充的块在某条序列第一次写入时被复制：写时复制（copy-on-write））。

# %%
p, o = 1000, 300
print(f"提示词 {p} 个 token，每个样本生成 {o} 个 token，每块 {BLOCK} 个 token")
print(f"{'样本数':>5}{'各自存放 (token)':>15}{'共享 (token)':>15}{'节省':>6}")
for n in (1, 2, 4, 8, 16):
    separate = n * paged_tokens(p + o, BLOCK)
    full_blocks = (p // BLOCK) * BLOCK  # 提示词的完整块，只存一份
    shared = full_blocks + n * paged_tokens(p + o - full_blocks, BLOCK)
    print(f"{n:>8}{separate:>19,}{shared:>17,}{100 * (1 - shared / separate):>7.1f}%")

# %% [markdown]
# 8 个样本共用一个 1,000 token 的提示词时，缓存缩小了一半以上；提示词相对回答越长，节省越多。跨*请求*的前缀缓存（prefix caching）（该页有一节专门讲它）把同样的共享用于不同用户发来的提示词。
