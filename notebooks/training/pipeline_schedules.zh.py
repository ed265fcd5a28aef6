# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: b594f07b70069252258daeb9eaf40e4d9bf724053b0237f71a0abb1bbf05d013
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
# # 流水线调度与气泡
#
# 流水线并行（pipeline parallelism）按深度把模型切成 $p$ 个阶段，放在 $p$ 块 GPU 上，并向它们输入 $m$ 个微批次（micro-batch）。每一步的开始和结束时，总有一些阶段无事可做：这就是**流水线气泡**（pipeline bubble）。Megatron-LM 论文（[Narayanan 等 2021](https://arxiv.org/abs/2104.04473)，第 2.2 节）给出了它占理想（无气泡）时间的比例：
#
# $$ \frac{\text{bubble}}{\text{ideal}} = \frac{p-1}{m}\ \text{(GPipe and 1F1B)},\qquad
#    \frac{\text{bubble}}{\text{ideal}} = \frac{p-1}{v\,m}\ \text{(interleaved, } v \text{ chunks per GPU)}. $$
#
# 本笔记本不直接相信公式，而是根据规则构造每种调度，模拟它，画成时间线，并测量空闲时间。这里没有任何东西是 GPU 特有的；时间的单位是一个微批次通过一个阶段的一次前向所用的时间。
#
# 模拟的调度：
#
# * **GPipe**（[Huang 等 2018](https://arxiv.org/abs/1811.06965)）：先做全部前向，再做全部反向。
# * **1F1B**（PipeDream-Flush，[Narayanan 等 2021](https://arxiv.org/abs/2006.09503)）：阶段 $i$ 先做 $p-i-1$ 个预热前向，然后交替做一个前向和一个反向，最后排空。
# * **交错 1F1B**（[Narayanan 等 2021](https://arxiv.org/abs/2104.04473)，第 2.2.2 节）：每块 GPU 持有 $v$ 个层块；GPU $d$ 持有虚拟阶段 $d, d+p, \dots$。微批次以 $p$ 个为一组依次经过各个块。

# %%
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.patches import Patch
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "font.size": 9})

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
    import warnings
    warnings.warn(f"未找到字体 {CJK_FONT}，图中的汉字将无法正常显示", stacklevel=1)

# %% [markdown]
# ## 把调度写成每块 GPU 的操作列表
#
# 调度就是每块 GPU 执行其操作的**顺序**。一个操作是 `(kind, micro-batch, chunk)`，kind 为 `F`（前向）或 `B`（反向）。调度决定的只有顺序；时间由依赖关系推出。

# %%
def gpipe(p, m, v=1):
    """All m forwards, then all m backwards, on every GPU."""
    return [[("F", mb, 0) for mb in range(m)] + [("B", mb, 0) for mb in range(m)]
            for _ in range(p)]


def one_f_one_b(p, m, v=1):
    """PipeDream-Flush: p-d-1 warm-up forwards, then one forward / one backward, then drain."""
    orders = []
    for d in range(p):
        warm = min(p - d - 1, m)
        ops = [("F", mb, 0) for mb in range(warm)]
        f, b = warm, 0
        while f < m:
            ops += [("F", f, 0), ("B", b, 0)]
            f, b = f + 1, b + 1
        ops += [("B", mb, 0) for mb in range(b, m)]
        orders.append(ops)
    return orders


def interleaved(p, m, v):
    """Interleaved 1F1B with v chunks per GPU (m must be a multiple of p).

    The k-th forward of a GPU is micro-batch (k // (p v)) p + k % p on chunk (k // p) % v;
    backwards visit the chunks in reverse. Warm-up: 2(p - d - 1) + (v - 1) p forwards.
    """
    assert m % p == 0, "interleaving needs m to be a multiple of p"
    total = m * v

    def fwd(k):
        return ("F", (k // (p * v)) * p + k % p, (k // p) % v)

    def bwd(k):
        return ("B", (k // (p * v)) * p + k % p, v - 1 - (k // p) % v)

    orders = []
    for d in range(p):
        warm = min(2 * (p - d - 1) + (v - 1) * p, total)
        ops = [fwd(k) for k in range(warm)]
        f, b = warm, 0
        while f < total:
            ops += [fwd(f), bwd(b)]
            f, b = f + 1, b + 1
        ops += [bwd(k) for k in range(b, total)]
        orders.append(ops)
    return orders


# %% [markdown]
# ## 模拟器
#
# 虚拟阶段 $s = \text{chunk}\cdot p + d$。微批次 $j$ 在阶段 $s$ 上的前向需要 $j$ 在阶段 $s-1$ 上的前向；反向需要 $j$ 在阶段 $s+1$ 上的反向（在最后一个阶段上则需要它自己的前向）。每块 GPU 按顺序执行自己的列表，GPU 一空闲且依赖完成就开始下一个操作。前向耗时 $t_f/v$，反向耗时 $t_b/v$（一个块是一个阶段的 $1/v$），通信不耗时。如果某个调度死锁，模拟器会报错。

# %%
def simulate(orders, p, v, tf=1.0, tb=2.0):
    """Return a list of (gpu, kind, micro-batch, chunk, start, end) for the given orders."""
    last = p * v - 1
    done, free, pos, ops = {}, [0.0] * p, [0] * p, []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for d in range(p):
            if pos[d] == len(orders[d]):
                continue
            kind, mb, chunk = orders[d][pos[d]]
            s = chunk * p + d
            if kind == "F":
                dep = ("F", mb, s - 1) if s > 0 else None
            else:
                dep = ("B", mb, s + 1) if s < last else ("F", mb, s)
            if dep is not None and dep not in done:
                continue
            start = max(free[d], done[dep] if dep else 0.0)
            end = start + (tf if kind == "F" else tb) / v
            done[(kind, mb, s)] = free[d] = end
            ops.append((d, kind, mb, chunk, start, end))
            pos[d] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("schedule deadlocks")
    return ops


def bubble_fraction(ops, m, tf=1.0, tb=2.0):
    """(bubble / ideal time, bubble / total time) for a simulated step."""
    total = max(o[5] for o in ops)
    ideal = m * (tf + tb)
    return (total - ideal) / ideal, (total - ideal) / total


def peak_in_flight(ops, gpu=0):
    """Largest number of forwards on `gpu` whose backward has not run yet (stored activations)."""
    level = peak = 0
    for o in sorted((o for o in ops if o[0] == gpu), key=lambda o: o[4]):
        level += 1 if o[1] == "F" else -1
        peak = max(peak, level)
    return peak


# %% [markdown]
# ## 时间线
#
# $p = 4$ 块 GPU，$m = 8$ 个微批次，反向耗时是前向的两倍（常见的比例：前向每做一个矩阵乘积，反向要做两个）。蓝色方块是前向，橙色方块是反向，数字是微批次编号；在交错调度中，浅色是第二个块。空白处就是气泡。

# %% alt=["\u4e09\u6761\u65f6\u95f4\u7ebf\uff1a4 \u5757 GPU\u30018 \u4e2a\u5fae\u6279\u6b21\u7684\u4e00\u4e2a\u6d41\u6c34\u7ebf\u6b65\uff0c\u6bcf\u5757 GPU \u4e00\u884c\uff0c\u524d\u5411\u662f\u84dd\u8272\u65b9\u5757\uff0c\u53cd\u5411\uff08\u65f6\u957f\u4e3a\u524d\u5411\u7684\u4e24\u500d\uff09\u662f\u6a59\u8272\u65b9\u5757\uff0c\u65b9\u5757\u4e0a\u7684\u6570\u5b57\u662f\u5fae\u6279\u6b21\u7f16\u53f7\u3002GPipe \u5148\u505a\u5b8c\u6240\u6709\u524d\u5411\u518d\u505a\u6240\u6709\u53cd\u5411\uff0c1F1B \u5728\u51e0\u4e2a\u524d\u5411\u4e4b\u540e\u4ea4\u66ff\u8fdb\u884c\uff1b\u4e24\u8005\u90fd\u7528 33 \u4e2a\u65f6\u95f4\u5355\u4f4d\uff0c\u6c14\u6ce1\u4e3a\u7406\u60f3\u65f6\u95f4\u7684 0.375\uff0c\u5373\u5f00\u5934\u548c\u7ed3\u5c3e\u7684\u7a7a\u767d\u3002\u6bcf\u5757 GPU \u4e24\u4e2a\u5757\uff08\u989c\u8272\u8f83\u6d45\uff09\u7684\u4ea4\u9519 1F1B \u7528 28.5 \u4e2a\u5355\u4f4d\uff0c\u6c14\u6ce1\u51cf\u534a\u4e3a 0.188\u3002"]
def draw(ax, ops, p, title):
    colors = {("F", 0): "#4c72b0", ("F", 1): "#8fb0de", ("B", 0): "#dd8452", ("B", 1): "#f2be9b"}
    for d, kind, mb, chunk, start, end in ops:
        ax.broken_barh([(start, end - start)], (p - 1 - d - 0.4, 0.8),
                       facecolors=colors[(kind, chunk % 2)], edgecolor="white", linewidth=0.5)
        ax.text((start + end) / 2, p - 1 - d, str(mb), ha="center", va="center", fontsize=7,
                color="white" if chunk % 2 == 0 else "black")
    ax.set_yticks(range(p), [f"GPU {p - 1 - i}" for i in range(p)])
    ax.set_title(title, loc="left")


P, M = 4, 8
cases = [("GPipe", gpipe(P, M), 1), ("1F1B", one_f_one_b(P, M), 1),
         ("交错 1F1B，v = 2", interleaved(P, M, 2), 2)]
fig, axes = plt.subplots(len(cases), 1, figsize=(10, 6.5), sharex=True)
for ax, (name, orders, v) in zip(axes, cases, strict=True):
    ops = simulate(orders, P, v)
    rel, _ = bubble_fraction(ops, M)
    draw(ax, ops, P, f"{name}：一步 = {max(o[5] for o in ops):g} 个时间单位，"
                     f"气泡 = 理想时间的 {rel:.3f}")
axes[-1].set_xlim(0, 34)
axes[-1].set_xlabel("时间（单位：一个微批次通过一个阶段的一次前向）")
fig.legend(handles=[Patch(color="#4c72b0", label="前向"),
                    Patch(color="#dd8452", label="反向"),
                    Patch(color="#8fb0de", label="前向，第 2 块"),
                    Patch(color="#f2be9b", label="反向，第 2 块")],
           loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.02))
fig.tight_layout(rect=(0, 0.04, 1, 1))
plt.show()

# %% [markdown]
# GPipe 和 1F1B 耗时相同：1F1B 改变的是顺序，而不是空闲时间的多少。$v = 2$ 的交错调度把气泡减半。
#
# ## 检验公式
#
# 在一组流水线深度、微批次数和块数的组合上，把模拟得到的气泡与理想时间的 $(p-1)/(vm)$ 比较，并且（$v = 1$ 时）与 GPipe 的形式——总时间的 $(p-1)/(m+p-1)$——比较。两种前向/反向耗时比例都试了：公式与它无关。

# %%
from fractions import Fraction

results = []
for p in (2, 4, 8):
    for m in (p, 2 * p, 4 * p, 8 * p):
        for tb in (1.0, 2.0):
            for name, fn, v in (("gpipe", gpipe, 1), ("1f1b", one_f_one_b, 1),
                                ("interleaved", interleaved, 2), ("interleaved", interleaved, 4)):
                ops = simulate(fn(p, m, v), p, v, tb=tb)
                rel, of_total = bubble_fraction(ops, m, tb=tb)
                ok = abs(rel - (p - 1) / (v * m)) < 1e-9
                if v == 1:
                    ok = ok and abs(of_total - (p - 1) / (m + p - 1)) < 1e-9
                results.append((name, p, m, v, tb, rel, ok))

print(f"共模拟 {len(results)} 个调度")
print("每种情况下 气泡 / 理想时间 = (p-1)/(v m)：", all(r[-1] for r in results))
for name, p, m, v in (("gpipe", 8, 16, 1), ("1f1b", 8, 16, 1), ("interleaved", 8, 16, 2),
                      ("interleaved", 8, 64, 4)):
    rel = next(r[5] for r in results if r[:4] == (name, p, m, v))
    print(f"{name:12s} p={p} m={m:2d} v={v}：气泡/理想 = {Fraction(rel).limit_denominator(1000)}"
          f" = {rel:.4f}")

# %% [markdown]
# ## 显存：在途的微批次
#
# 一个阶段必须把一个微批次的激活值（activations）从它的前向一直保存到它的反向。GPipe 保存全部 $m$ 个；1F1B 在第一块 GPU 上最多保存 $p$ 个（后面的 GPU 更少），与 $m$ 无关。这就是 1F1B 取代 GPipe 的原因，也是之后可以提高 $m$ 来缩小气泡的原因。交错调度保存的是块的激活值，每个是一个阶段的 $1/v$；下面的计数以块为单位。

# %%
for m in (8, 16, 32):
    g = peak_in_flight(simulate(gpipe(4, m), 4, 1))
    f = peak_in_flight(simulate(one_f_one_b(4, m), 4, 1))
    i = peak_in_flight(simulate(interleaved(4, m, 2), 4, 2))
    print(f"p=4, m={m:2d}：GPipe {g:2d} 个微批次，1F1B {f} 个微批次，"
          f"交错 v=2 {i:2d} 个块（= {i / 2:g} 个阶段当量）")
print("1F1B 在每块 GPU 上最多保存 p 个在途微批次：",
      all(peak_in_flight(simulate(one_f_one_b(p, m), p, 1), d) <= p
          for p in (2, 4, 8) for m in (p, 4 * p) for d in range(p)))

# %% [markdown]
# ## 多少个微批次才够？
#
# 气泡按 $1/m$ 下降。$p = 8$ 个阶段时，不用交错调度的话，$m = 32$ 个微批次仍会浪费理想时间的 22%；用 $v = 4$ 个块时，同样的 $m$ 只浪费 5.5%。由于全局批次 = 数据并行度 × $m$ × 微批次大小，每条流水线的微批次越多，同一批次下的数据并行副本就越少：流水线深度、交错调度和数据并行要一起选择。

# %% alt=["\u56fe\uff1a8 \u4e2a\u9636\u6bb5\u3001\u6bcf\u5757 GPU 1\u30012 \u6216 4 \u4e2a\u5757\u65f6\uff0c\u6d41\u6c34\u7ebf\u6c14\u6ce1\u5360\u7406\u60f3\u6b65\u65f6\u95f4\u7684\u767e\u5206\u6bd4\u968f\u6bcf\u6b65\u5fae\u6279\u6b21\u6570\uff088 \u5230 128\uff09\u7684\u53d8\u5316\uff1a\u7ebf\u662f\u516c\u5f0f (p \u2212 1)/(v m)\uff0c\u70b9\u662f\u6a21\u62df\u7ed3\u679c\uff0c\u843d\u5728\u7ebf\u4e0a\u3002\u4e0d\u4ea4\u9519\u65f6\uff0c\u6c14\u6ce1\u4ece 8 \u4e2a\u5fae\u6279\u6b21\u65f6\u7684\u7ea6 88% \u964d\u5230 128 \u4e2a\u65f6\u7684\u7ea6 5%\uff1b\u4e24\u4e2a\u5757\u4f7f\u5b83\u51cf\u534a\uff0c\u56db\u4e2a\u5757\u4f7f\u5b83\u964d\u5230\u56db\u5206\u4e4b\u4e00\u3002"]
fig, ax = plt.subplots(figsize=(7, 4))
ms = list(range(8, 129, 8))
for v, style in ((1, "-"), (2, "--"), (4, ":")):
    sim = [bubble_fraction(simulate((one_f_one_b if v == 1 else interleaved)(8, m, v), 8, v),
                           m)[0] for m in ms]
    ax.plot(ms, [100 * x for x in sim], "o", ms=3, color="black" if v == 1 else None)
    ax.plot(ms, [100 * 7 / (v * m) for m in ms], style, label=f"(p-1)/(v m)，v = {v}")
ax.set_xlabel("每步的微批次数 m")
ax.set_ylabel("气泡占理想步时间的百分比")
ax.set_title("p = 8 个阶段：公式（线）与模拟（点）")
ax.set_ylim(0, 100)
ax.grid(alpha=0.3)
ax.legend()
plt.show()

# %% [markdown]
# ## 要记住的
#
# * GPipe 和 1F1B 的气泡相同，都是理想步时间的 $(p-1)/m$；1F1B 把保存的激活值限制在 $p$ 个微批次，而不是 $m$ 个。
# * 每块 GPU 持有 $v$ 个块的交错调度把气泡除以 $v$，代价是点对点消息多 $v$ 倍。
# * 保持 $m \ge 4p$，或者使用交错调度，或者两者都用；这里的模拟假设通信不耗时、各阶段完全均衡，所以真实的气泡更大。
