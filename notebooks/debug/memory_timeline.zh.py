# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 38e0d4e020ab54a88e2174bdba4bbcc2a99ab43bf199f89ab3a663f868cd48e5
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
# # 读懂内存时间线
#
# 显存不足（out of memory，OOM）错误只指出失败的那次分配，而不是把内存占满的那些张量。*内存时间线*（memory timeline）回答的是后一个问题：在几个训练步里，每一时刻活着的字节数，按用途分开（参数、梯度（gradient）、优化器状态（optimizer state）、激活值（activations）、临时张量）。本 notebook 在 CPU 上用 `torch.profiler` 记录一条时间线，先读懂一个健康训练步的形状，再在循环里制造一个内存泄漏（memory leak），并用存活张量普查（census）找出泄漏的张量。GPU 一侧的内容（错误信息、缓存分配器（caching allocator）以及 `pytorch.org/memory_viz` 所画的快照）见调试一章的**显存不足**一页。
#
# 全部内容在 CPU 上几秒内跑完。字节数是精确的，在任何机器上都一样（性能分析器（profiler）记录的是每个算子申请的大小）；只有时间轴会变。

# %%
import contextlib
import gc
import os
import sys
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats
from torch.profiler import ProfilerActivity, profile, record_function
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

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
MiB = 2**20


@contextlib.contextmanager
def quiet_stderr():
    """把文件描述符 2 指向 /dev/null：性能分析器的后端（Kineto）在启动和停止时会往那里打印
    带时间戳的状态行，这会让每次运行的输出都不一样。"""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# %% [markdown]
# ## 模型与训练步
#
# 六个宽度为 512、带 GELU 的隐藏层，一个 10 类的输出头，交叉熵，Adam，每个微批次（micro-batch）512 个 fp32 样本。尺寸的选择使一个微批次的激活值（12 MiB）约为参数（6 MiB）的两倍，与真实训练在合理微批次大小下的情形相近。`train_step` 是一个普通的训练步；`leak=True` 时它还会在一个留出批次上计算一个“监控”损失，既没有 `torch.no_grad()`，也没有 `.item()`，并把这个张量存进列表：这是写日志辅助函数时很容易犯的错误。

# %%
WIDTH, DEPTH, CLASSES, BATCH = 512, 6, 10, 512


def make_model():
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


generator = torch.Generator().manual_seed(1)
x, y = torch.randn(BATCH, WIDTH, generator=generator), torch.randint(0, CLASSES, (BATCH,), generator=generator)
x_val, y_val = torch.randn(BATCH, WIDTH, generator=generator), torch.randint(0, CLASSES, (BATCH,), generator=generator)


def train_step(model, opt, history, leak=False):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    history.append(loss.item())
    if leak:  # bug：没有 torch.no_grad()，也没有 .item()
        history.append(nn.functional.cross_entropy(model(x_val), y_val))


model, opt = make_model()
param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
# 自动求导为反向传播保存的内容：每个 GELU 的输入、除第一个以外每个 Linear 的输入（第一个的输入
# 就是批次本身），以及交叉熵的 log-softmax。
saved_bytes = 4 * BATCH * (2 * DEPTH - 1 + 1) * WIDTH + 4 * BATCH * CLASSES
input_bytes = x.nbytes
print(f"参数        = {param_bytes / MiB:6.2f} MiB（{param_bytes // 4:,} 个 fp32 数值）")
print(f"梯度        = {param_bytes / MiB:6.2f} MiB（每个参数一个）")
print(f"Adam 状态   = {2 * param_bytes / MiB:6.2f} MiB（exp_avg 和 exp_avg_sq）")
print(f"保存的激活值 = {saved_bytes / MiB:6.2f} MiB / 微批次")
print(f"输入批次    = {input_bytes / MiB:6.2f} MiB")

# %% [markdown]
# ## 性能分析器下的四个训练步
#
# `profile_memory=True` 让性能分析器记录每一次分配和释放；再加上 `record_shapes=True` 和 `with_stack=True`，`torch.profiler._memory_profiler` 就能沿着自动求导图和优化器跟踪每个张量，并给它归类。公开接口 `prof.export_memory_timeline(path, device="cpu")` 把这个结果写进文件（对 CPU 也有效），但它在 torch 2.13 中已被弃用并会发出警告，所以下面的单元直接调用它所依赖的两个私有部件：`prof._memory_profile()` 和 `MemoryProfileTimeline(...)._coalesce_timeline("cpu")`，后者返回各个时间点，以及每个时间点上各类别存活的字节数。循环在每一步开始和结束时记下时钟（性能分析器的时间戳和 `time.time_ns()` 一样，是自 epoch 起的纳秒数），并把每一步包在 `record_function("step k")` 里，在性能分析器自己的 trace 中给它命名。

# %% alt=["\u5806\u53e0\u9762\u79ef\u56fe\uff1a\u5065\u5eb7\u7684\u8bad\u7ec3\u5faa\u73af\u5728\u56db\u4e2a\u8bad\u7ec3\u6b65\u4e2d\u6309\u7c7b\u522b\u7684 CPU \u5b58\u6d3b\u5185\u5b58\uff08MiB\uff0c0 \u5230 40\uff09\u3002\u6700\u5e95\u5c42\u662f\u53c2\u6570\uff08\u7ea6 6 MiB\uff09\uff0c\u7b2c 1 \u6b65\u7ed3\u675f\u65f6\u51fa\u73b0\u4f18\u5316\u5668\u72b6\u6001\uff08\u7ea6 12 MiB\uff09\uff0c\u8fd8\u6709\u8f93\u5165\u3002\u6bcf\u4e00\u6b65\u4e2d\uff0c\u7ea2\u8272\u7684\u6fc0\u6d3b\u503c\u5728\u524d\u5411\u4f20\u64ad\u65f6\u4ee5\u5341\u4e8c\u7ea7 1 MiB \u7684\u53f0\u9636\u4e0a\u5347\uff0c\u5728\u53cd\u5411\u4f20\u64ad\u65f6\u4e0b\u964d\uff0c\u540c\u65f6\u84dd\u8272\u7684\u68af\u5ea6\u589e\u957f\uff0c\u5cf0\u503c\u7ea6 32 MiB\uff1b\u6bcf\u4e00\u6b65\u90fd\u56de\u5230\u540c\u6837\u7684\u5e95\u7ebf\uff0c\u6ca1\u6709\u6cc4\u6f0f\u3002"]
CATEGORIES = {  # 性能分析器的类别 -> （标签，颜色），自下而上绘制
    "PARAMETER": ("参数", "tab:green"),
    "OPTIMIZER_STATE": ("优化器状态", "goldenrod"),
    "INPUT": ("输入", "black"),
    "GRADIENT": ("梯度", "tab:blue"),
    "ACTIVATION": ("激活值", "tab:red"),
    "AUTOGRAD_DETAIL": ("autograd detail", "lightsteelblue"),
    "TEMPORARY": ("临时张量", "mediumpurple"),
    None: ("未归类", "grey"),
}


def record_timeline(steps, leak=False):
    """在性能分析器下运行 `steps` 个训练步。返回自第 1 步开始起的时间（ms）、按类别的存活字节数
    （{name: array}），以及每一步的（开始，结束）时间（ms）。"""
    model, opt = make_model()
    history, spans = [], []
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                 record_shapes=True, with_stack=True) as prof:
        for step in range(1, steps + 1):
            start = time.time_ns()  # 性能分析器的时间戳也是自 epoch 起的纳秒数
            with record_function(f"step {step}"):
                train_step(model, opt, history, leak)
            spans.append((start / 1e6, time.time_ns() / 1e6))
    times_us, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline("cpu")
    sizes = np.array(sizes)[:, 1:]  # 第 0 列不用
    t0 = spans[0][0]
    column = {(category.name if category else None): i for category, i in _CATEGORY_TO_INDEX.items()}
    by_category = {name: sizes[:, column[name]] for name in CATEGORIES}
    return (np.array(times_us) / 1e3 - t0, by_category,
            [(start - t0, end - t0) for start, end in spans])


def draw(ax, times, by_category, spans):
    ax.stackplot(times, *(by_category[name] / MiB for name in CATEGORIES),
                 labels=[label for label, _ in CATEGORIES.values()],
                 colors=[colour for _, colour in CATEGORIES.values()], step="post", alpha=0.85)
    for k, (start, end) in enumerate(spans, 1):
        ax.axvline(start, color="k", lw=0.6, ls=":")
        ax.text((start + end) / 2, 0.97, f"第 {k} 步", transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=9)
    ax.set_xlim(spans[0][0], spans[-1][1])
    ax.set_ylabel("存活内存（MiB）")


STEPS = 4
times, by_category, spans = record_timeline(STEPS)
fig, ax = plt.subplots(figsize=(10, 4.5))
draw(ax, times, by_category, spans)
ax.set_ylim(0, 40)
ax.set_xlabel("自第 1 步开始的时间（ms）")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
ax.set_title("健康的训练循环：按类别的 CPU 存活内存")
fig.tight_layout()
plt.show()

# %% [markdown]
# 图中要读的内容：
#
# * **前向传播的阶梯。** 每一层都为反向传播保存自己的输入，所以红色的激活值带每过一层就上一级台阶：十二级，每级 1 MiB。
# * **反向传播的释放。** 反向传播按相反顺序经过各层；每层保存的张量在其梯度算完后立即释放，而蓝色的梯度带按该层参数的大小增长。两条带此消彼长：所有层的梯度和所有层的激活值从不同时存活。
# * **优化器状态在第一步出现。** Adam 在第一次 `step()` 时才惰性地创建 `exp_avg` 和 `exp_avg_sq`：黄色带（参数的两倍）在第 1 步末出现，之后再不消失。因此第 1 步的峰值低于其他各步：它的前向和反向传播运行时还没有优化器状态。
# * **从第 2 步起进入稳态。** 之后每一步形状相同、峰值相同，步与步之间内存回到同一个底线（参数、Adam 状态和输入批次）。底线上升就是泄漏，本 notebook 后半部分就来制造一个。
#
# 同样的数字，按步列出（每步的峰值、峰值的组成，以及该步结束时的底线）：

# %%
def step_rows(times, by_category, spans):
    total = sum(by_category.values())
    for k, (start, end) in enumerate(spans, 1):
        inside = np.flatnonzero((times >= start) & (times <= end))
        at_peak = inside[np.argmax(total[inside])]
        parts = ", ".join(f"{CATEGORIES[name][0]} {by_category[name][at_peak] / MiB:.2f}"
                          for name in CATEGORIES if by_category[name][at_peak] >= MiB / 10)
        yield k, total[at_peak], total[inside[-1]], parts


for k, peak, floor, parts in step_rows(times, by_category, spans):
    print(f"第 {k} 步：峰值 = {peak / MiB:5.2f} MiB，该步之后的底线 = {floor / MiB:5.2f} MiB"
          f"\n        峰值的组成（MiB）：{parts}")

# %% [markdown]
# 性能分析器的类别是推断出来的，而不是声明的：它根据张量在自动求导图中和被优化器使用的方式来归类，少数短命的张量会落进错误的带或不归任何类（反向传播期间灰色和浅蓝色的细条，或第 1 步峰值处、Adam 第一次更新之中多出来的 1 MiB“参数”和“激活值”）。要找出*哪一类*内存主导了峰值，这无关紧要。
#
# ## 算术估计，以及峰值为什么低于它
#
# 训练一章的**内存剖析**一页逐项估计训练所需内存，其中的估算脚本可以对真实模型做这件事。对这个模型，所有项之和是峰值的上界；测量则显示峰值的真正位置：反向传播刚开始时，所有激活值都还活着，而任何参数都还没有梯度。

# %%
upper_bound = 4 * param_bytes + saved_bytes + input_bytes
steady_peak = max(peak for k, peak, _, _ in step_rows(times, by_category, spans) if k > 1)
print(f"参数 + 梯度 + Adam（2 倍）+ 激活值 + 输入 = {upper_bound / MiB:.2f} MiB")
print(f"测得的峰值（第 2 至 {STEPS} 步）            = {steady_peak / MiB:.2f} MiB")
print(f"不含梯度（参数 + Adam + 激活值 + 输入）= "
      f"{(3 * param_bytes + saved_bytes + input_bytes) / MiB:.2f} MiB")
print("峰值低于所有项之和：", steady_peak < upper_bound)

# %% [markdown]
# 测得的峰值等于“还没有梯度”的和再加大约 1 MiB（性能分析器称为 autograd detail 的那条带：流回最后一个隐藏层的梯度）。参数的梯度与全部激活值从不同时存在：所有项之和是一个安全的预算，而不是预测。在 GPU 上同样的推理成立，但还要加上性能分析器在这里看不到的东西：缓存分配器的取整与缓存、kernel 工作区（workspace）、CUDA 上下文（CUDA context）和 NCCL 缓冲区。**显存不足**一页讲的就是这些。
#
# ## 泄漏：底线每一步都在上升
#
# 现在用 `leak=True` 运行同一个循环。监控损失是在自动求导开启时计算的，所以它带着一张计算图，图中的节点持有一次完整前向传播保存的激活值；列表持有损失，损失持有它的图，而没有任何地方对它调用 `backward()` 来释放这些张量。

# %% alt=["\u5e76\u6392\u7684\u4e24\u5f20\u5806\u53e0\u5185\u5b58\u65f6\u95f4\u7ebf\uff0c\u7eb5\u8f74\u76f8\u540c\uff08\u5b58\u6d3b\u5185\u5b58\uff0cMiB\uff09\uff0c\u5171\u56db\u4e2a\u8bad\u7ec3\u6b65\uff1a\u5de6\u8fb9\u662f\u5065\u5eb7\u7684\u5faa\u73af\uff0c\u6bcf\u4e00\u6b65\u4e4b\u540e\u90fd\u56de\u5230\u540c\u6837\u7684\u5e95\u7ebf\uff0c\u5cf0\u503c\u7ea6 32 MiB\uff1b\u53f3\u8fb9\u662f\u6cc4\u6f0f\u7684\u5faa\u73af\uff0c\u7ea2\u8272\u7684\u6fc0\u6d3b\u503c\u4e0d\u518d\u56de\u843d\uff0c\u5e95\u7ebf\u548c\u5cf0\u503c\u6bcf\u4e00\u6b65\u4e0a\u5347\u7ea6 12 MiB\uff0c\u7b2c 4 \u6b65\u8fbe\u5230\u7ea6 69 MiB\u3002"]
leak_times, leak_by_category, leak_spans = record_timeline(STEPS, leak=True)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
draw(axes[0], times, by_category, spans)
axes[0].set_title("健康")
draw(axes[1], leak_times, leak_by_category, leak_spans)
axes[1].set_title("泄漏：监控损失连同其计算图被保留")
for ax in axes:
    ax.set_xlabel("自第 1 步开始的时间（ms）")
axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
fig.tight_layout()
plt.show()

leak_rows = list(step_rows(leak_times, leak_by_category, leak_spans))
for (k, peak, floor, _), (_, _, previous, _) in zip(leak_rows, [(0, 0, np.nan, "")] + leak_rows, strict=False):
    rise = "" if np.isnan(previous) else f"，{(floor - previous) / MiB:+.2f} MiB"
    print(f"第 {k} 步：峰值 = {peak / MiB:5.2f} MiB，该步之后的底线 = {floor / MiB:5.2f} MiB{rise}")

# %% [markdown]
# 健康的循环每一步之后都回到同一条底线；泄漏的循环每一步结束时都比上一步高出约 12 MiB，泄漏的字节位于激活值带中。在 80 GB 的 GPU 上，同样的模式要跑几百或几千步才会显存不足，而那时的错误指向的只是碰巧最后发生的那次分配。时间线，或者只是在每一步的同一位置记录 `torch.cuda.memory_allocated()`，早早就能显示出这道阶梯。
#
# ## 找出泄漏的张量：跨步普查
#
# 时间线告诉我们每步泄漏*多少*；下一个问题是*哪些张量*。Python 的垃圾回收器（garbage collector）能列出它跟踪的所有对象，张量也在其中。普查按形状、dtype 以及是否带有自动求导图（`grad_fn`）统计存活的张量，在第 k 步之后和第 k + 1 步之后各做一次；每一步都增长同样数量的，就是泄漏。

# %%
def census():
    """Python 的 gc 所知道的存活张量：{(形状, dtype, 是否有 grad_fn): [个数, 字节数]}。"""
    gc.collect()
    rows = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # 用 type() 而不是 isinstance()：不查 __class__
            key = (tuple(obj.shape), str(obj.dtype).removeprefix("torch."), obj.grad_fn is not None)
            row = rows.setdefault(key, [0, 0])
            row[0] += 1
            row[1] += obj.untyped_storage().nbytes()
    return rows


def census_diff(before, after):
    keys = sorted(set(before) | set(after), key=str)
    return [(key, after.get(key, [0, 0])[0] - before.get(key, [0, 0])[0],
             after.get(key, [0, 0])[1] - before.get(key, [0, 0])[1])
            for key in keys if after.get(key) != before.get(key)]


model, opt = make_model()
history = []
for _ in range(2):
    train_step(model, opt, history, leak=True)
snapshots = []
for _ in range(3, 5):
    train_step(model, opt, history, leak=True)
    snapshots.append(census())
print("第 3 步与第 4 步之间的变化：")
for (shape, dtype, has_graph), count, nbytes in census_diff(*snapshots):
    print(f"  形状 {str(list(shape)):12} {dtype:8} grad_fn={has_graph!s:5}  {count:+d} 个张量，"
          f"{nbytes:+,} 字节")

# %% [markdown]
# 增长的有两行，都指向泄漏：每步多一个带 `grad_fn` 的标量（存进 `history` 的监控损失），以及多十二个带 `grad_fn` 的 512 × 512 fp32 张量，恰好 12 MiB，正是时间线显示的每步上升量。它们是六个 Linear 层和六个 GELU 层的输出，被自动求导保存下来，等待一次永远不会到来的反向传播。普查之所以能看到它们，是因为一旦 Python 见过某个张量，只要其 C++ 张量还活着，PyTorch 就会让它的 Python 对象一直存活。在单个算子内部创建的张量（例如 `cross_entropy` 中的 log-softmax）从来没有 Python 对象，普查看不到它们。
#
# 要把这两行联系起来，并测量一个嫌疑对象让多少东西保持存活，可以从它出发遍历自动求导图：每个节点都把它保存的东西暴露为 `_saved_*` 属性（在 `backward()` 之后读取会报错，因为反向传播已把它释放）。

# %%
def graph_saved_bytes(tensor, exclude=()):
    """`tensor` 背后的自动求导图中保存的张量的字节数：每个 storage 只计一次，并跳过 `exclude`
    的 storage（参数，它们不算泄漏）。"""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen_nodes, seen_storages, total, stack = set(), set(), 0, [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen_nodes:
            continue
        seen_nodes.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # 已被 backward() 释放
                continue
            if isinstance(value, torch.Tensor):
                ptr = value.untyped_storage().data_ptr()
                if ptr not in skip and ptr not in seen_storages:
                    seen_storages.add(ptr)
                    total += value.untyped_storage().nbytes()
    return total, len(seen_nodes)


leaked = [item for item in history if isinstance(item, torch.Tensor)]
held, nodes = graph_saved_bytes(leaked[-1], exclude=list(model.parameters()))
print(f"`history` 中泄漏的张量：{len(leaked)} 个")
print(f"最后一个的计算图：{nodes} 个节点，持有 {held / MiB:.2f} MiB 已保存的张量"
      f"（其中监控批次占 {x_val.nbytes / MiB:.2f} MiB）")

trained = nn.functional.cross_entropy(model(x), y)
trained.backward()
opt.zero_grad(set_to_none=True)
held_after_backward, _ = graph_saved_bytes(trained, exclude=list(model.parameters()))
print(f"backward() 之后保留的训练损失：计算图持有 {held_after_backward} 字节已保存的张量")

# %% [markdown]
# 一个泄漏标量背后的图持有 13 MiB：普查中的十二个激活值、普查看不到的 log-softmax，以及监控批次本身（它不在普查差异里，因为这个张量一直都活着）。反向传播之后仍被保留的*训练*损失不持有已保存的张量（反向传播已释放它们），但仍保留着图的节点，这种慢速泄漏要许多步之后才显现。两者的修复方法相同：保存数字而不是张量（`.item()`，若数值必须留在 GPU 上则用 `.detach()`），并把所有不参与训练的计算放在 `torch.no_grad()` 之下。修复之后普查是平的：

# %%
def train_step_fixed(model, opt, history):
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    history.append(loss.item())
    with torch.no_grad():
        history.append(nn.functional.cross_entropy(model(x_val), y_val).item())


del leaked, trained
model, opt = make_model()
history = []
for _ in range(2):
    train_step_fixed(model, opt, history)
before = census()
train_step_fixed(model, opt, history)
print("修复后两步之间的变化：", census_diff(before, census()) or "无")

# %% [markdown]
# 真实训练代码中造成同样阶梯的常见原因：为了记日志把损失或 logits 追加到列表；`total_loss += loss` 这样的累加（保留每一步的图节点）；不在 `torch.no_grad()` 下根据模型输出计算指标；以步数或输入形状为键的缓存（每出现一种新的序列长度就多一项）；保存激活值却从不移除的 hook；以及被闭包或留作日后检查的异常 traceback 捕获的张量。
#
# ## 在 GPU 上
#
# 上面的 CPU 性能分析器是查看类别的可移植方法。在 GPU 上，PyTorch 的 CUDA 缓存分配器可以记录自己的历史，包括每次分配时的 Python 调用栈，并把它转储为 pickle 文件，由 [pytorch.org/memory_viz](https://pytorch.org/memory_viz) 的查看器在浏览器中打开（文件在本地读取，不会上传）；见 [Understanding CUDA Memory Usage](https://docs.pytorch.org/docs/stable/torch_cuda_memory.html)：
#
# ```python
# import torch
#
# torch.cuda.memory._record_memory_history(max_entries=100_000)  # keep the last 100k events
# for step in range(4):
#     train_step(model, opt, history)           # the same loop, model and data on "cuda"
# torch.cuda.memory._dump_snapshot("memory_snapshot.pickle")
# torch.cuda.memory._record_memory_history(enabled=None)  # stop recording
# ```
#
# *Active Memory Timeline* 标签页把每次分配画成一条带，随时间堆叠，鼠标悬停时显示它的调用栈：前向阶梯、反向释放以及 Adam 状态在第一步出现，看起来都和上面一样；泄漏则是一组每一步都开始、却永远不结束的带。*Allocator State History* 标签页显示分配器的段（segment）及其中的块（block），碎片（fragmentation）就在这里显现。**显存不足**一页对两者都有解释。
