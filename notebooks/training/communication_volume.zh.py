# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 68ff970319e1caff4c96d327e3939d008b17202510b8f615b3f98b18e2dac829
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
# # 各种并行方式的通信量
#
# 训练部分的《模型并行》一页对拆分 transformer 的每种方式给出了每个 GPU 每步发送的字节数。本笔记本用这些公式做两件事：
#
# 1. 用**穷举计数**检验每个闭式公式：列出一步中发起的每个集合操作及其大小，按网络一章的约定（all-reduce $2\frac{n-1}{n}S$，reduce-scatter、all-gather 和 all-to-all $\frac{n-1}{n}S$）把每个 rank 发送的字节数加起来；
# 2. 在 512 块 GPU 上的一个 70B 级模型上计算这些公式，并用假设的总线带宽（bus bandwidth）把字节换算成秒，看看哪些布局能把通信藏起来，哪些不能。
#
# 下面所有输入都是**假设**，在出现的地方说明；请换成你的模型和你实测的带宽（bandwidth）。

# %%
import math

import matplotlib.pyplot as plt
from matplotlib import font_manager
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

GB = 1e9  # 与网络一章一样，全部使用十进制单位

# %% [markdown]
# ## 每个集合操作的字节数
#
# $n$ 个 rank 上的一次集合操作中每个 rank 发送的字节数，$S$ 为完整缓冲区（reduce-scatter 指输入，all-gather 指输出，all-to-all 指每个 rank 的缓冲区）。点对点发送：$S$。

# %%
def sent(kind, size, n):
    """Bytes one rank sends in a collective of `size` bytes over `n` ranks."""
    factor = {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_gather": (n - 1) / n, "all_to_all": (n - 1) / n, "send": 1.0}
    return factor[kind] * size


# %% [markdown]
# ## 闭式公式
#
# 符号与模型并行一页相同：$\Psi$ 参数量，$L$ 层数，$h$ 隐藏维度，$b$ 微批次（micro-batch），$s$ 序列长度，$B$ 每个元素的字节数，并行度 $d, t, p, c, e$，$m$ 每步的微批次数，$k$ 每个 token 的专家数。

# %%
def v_ddp(psi, d, B=2):
    return 2 * (d - 1) / d * psi * B


def v_zero3(psi, d, B=2):
    return 3 * (d - 1) / d * psi * B


def v_tp_layer(b, s, h, t, B=2):
    """TP (with or without SP), one layer, one micro-batch, forward + backward."""
    return 8 * (t - 1) / t * b * s * h * B


def v_pp_microbatch(b, s, h, B=2):
    """One stage boundary, one micro-batch: activation forward + gradient backward."""
    return 2 * b * s * h * B


def v_ep_layer(b, s, h, k, e, B=2):
    """One MoE layer, one micro-batch: dispatch + combine, forward and backward."""
    return 4 * k * (e - 1) / e * b * s * h * B


# %% [markdown]
# ## 穷举：列出一步中的集合操作
#
# 对每种策略，严格按照实现发起集合操作的方式写下它们，再把 `sent(...)` 加起来：
#
# * **DDP**：对全部 bf16 梯度做一次 all-reduce（分桶把它拆开，但不改变总和）。
# * **ZeRO-3 / FSDP**：每个单元（一层）在前向中 all-gather 其参数，反向中再一次，并对其梯度做 reduce-scatter。
# * **TP**（Megatron）：每层前向在注意力之后和 MLP 之后各一次 all-reduce；反向对注意力和 MLP 的输入梯度各一次 all-reduce。
# * **TP + SP**：上面每次 all-reduce 变成一次 reduce-scatter 加一次 all-gather（前向：每个按列并行的块之前 all-gather，每个按行并行的块之后 reduce-scatter；反向相反）。
# * **PP**：每个微批次前向发送激活值，反向发送梯度。
# * **EP**：每个 MoE 层在前向和反向中各做分发与合并两次 all-to-all。

# %%
def enumerate_ddp(psi, d, B=2):
    return [("all_reduce", psi * B, d)]


def enumerate_zero3(layer_params, d, B=2):
    calls = []
    for n_par in layer_params:
        calls += [("all_gather", n_par * B, d), ("all_gather", n_par * B, d),
                  ("reduce_scatter", n_par * B, d)]
    return calls


def enumerate_tp(layers, b, s, h, t, sp=False, B=2):
    act = b * s * h * B
    calls = []
    for _ in range(layers):
        for _block in ("attention", "mlp"):
            if sp:  # forward AG + RS, backward RS + AG
                calls += [("all_gather", act, t), ("reduce_scatter", act, t)] * 2
            else:   # forward g all-reduce, backward f all-reduce
                calls += [("all_reduce", act, t)] * 2
    return calls


def enumerate_pp(m, b, s, h, B=2):
    return [("send", b * s * h * B, 2)] * (2 * m)


def enumerate_ep(b, s, h, k, e, B=2):
    routed = k * b * s * h * B  # every token's vector, k copies
    return [("all_to_all", routed, e)] * 4


def total(calls):
    return sum(sent(kind, size, n) for kind, size, n in calls)


psi, L, h, b, s = 1_200_000, 6, 512, 2, 1024
layer_params = [psi // L] * L
checks = {
    "DDP = 2(d-1)/d * 2 Psi": math.isclose(total(enumerate_ddp(psi, 16)), v_ddp(psi, 16)),
    "ZeRO-3 = 3(d-1)/d * 2 Psi": math.isclose(total(enumerate_zero3(layer_params, 16)),
                                              v_zero3(psi, 16)),
    "ZeRO-3 / DDP = 1.5": math.isclose(v_zero3(psi, 16) / v_ddp(psi, 16), 1.5),
    "TP = 8(t-1)/t b s h B per layer": math.isclose(total(enumerate_tp(L, b, s, h, 8)),
                                                   L * v_tp_layer(b, s, h, 8)),
    "TP + SP sends the same bytes as TP": math.isclose(
        total(enumerate_tp(L, b, s, h, 8, sp=True)), total(enumerate_tp(L, b, s, h, 8))),
    "PP = 2 b s h B per micro-batch": math.isclose(total(enumerate_pp(32, b, s, h)),
                                                  32 * v_pp_microbatch(b, s, h)),
    "EP = 4k(e-1)/e b s h B per MoE layer": math.isclose(total(enumerate_ep(b, s, h, 2, 8)),
                                                        v_ep_layer(b, s, h, 2, 8)),
}
for name, ok in checks.items():
    print(f"{name:40s} {ok}")
print("所有闭式公式都与穷举结果一致：", all(checks.values()))

# %% [markdown]
# ## 512 块 GPU 上的 70B 级模型
#
# **模型（假设，形状与 Llama 2 70B 相同，[Touvron 等 2023](https://arxiv.org/abs/2307.09288)）：** 80 层，隐藏维度 8192，64 个查询头和 8 个键/值头（分组查询注意力），宽 28672 的 SwiGLU MLP，词表 32000，序列 4096 个 token，激活值和梯度为 bf16。
#
# **集群（假设）：** 64 个节点，每个节点 8 块 H100。总线带宽与网络一章的估算相同：每个节点只有一块 GPU 参与的组，节点间每块 GPU 40 GBps（400 Gbps 网卡的 80%）；包含每个节点全部 GPU 的组为 320 GBps（它的环经由全部 8 块网卡离开节点）；节点内 360 GBps（NVLink 4 单向 450 GBps 的 80%）。实际算力为稠密 bf16 峰值 989 TFLOPS 的 40%。
#
# **批次：** 每步 1024 条序列（4.2M 个 token），微批次为 1。

# %%
L, h, heads, kv_heads, ffn, V, s = 80, 8192, 64, 8, 28672, 32000, 4096
head_dim = h // heads
layer_psi = 2 * h * h + 2 * h * kv_heads * head_dim + 3 * h * ffn
PSI = L * layer_psi + 2 * V * h          # input embedding + output projection
N_MATMUL = L * layer_psi + V * h         # parameters in matmuls (6N)
GPUS, PER_NODE = 512, 8
BW_NVLINK, BW_NET = 360 * GB, 40 * GB
BW_NET_NODE = PER_NODE * BW_NET   # a group with every GPU of each node uses all its NICs
F = 0.40 * 989e12
SEQS, b = 1024, 1

flops_token = 6 * N_MATMUL + 12 * L * h * s   # PaLM 附录 B（见性能一页）
compute_s = flops_token * SEQS * s / GPUS / F
print(f"参数量 Psi = {PSI / 1e9:.1f} B；每个 token 的 FLOPs = {flops_token / 1e9:.0f} GFLOP")
print(f"每个 GPU 每步计算时间 = {compute_s:.2f} s（{F / 1e12:.0f} TFLOPS）")

# %% [markdown]
# 同样 512 块 GPU 的三种布局：
#
# * **A，只用 FSDP**：$d = 512$。
# * **B，3D**：每个节点内 TP $t = 8$，跨节点 PP $p = 4$，DP $d = 16$ 配合 ZeRO-1（字节数与 DDP 相同）。每条流水线分到 $m = 1024/16 = 64$ 个微批次。
# * **C，TP 跨节点的 3D**（一个错误，作对比用）：并行度相同，但 8 个 TP rank 位于 8 个不同的节点上。
#
# 对每种布局，列出一块 GPU 每步在每个维度上发送的字节数、按该维度带宽计算的时间，以及这段时间是否在关键路径上。

# %%
def layout_rows(name):
    rows = []
    if name == "A":
        rows.append(("FSDP (d=512)", v_zero3(PSI, 512), BW_NET_NODE, "大部分被重叠"))
    else:
        t, p, d = 8, 4, 16
        m = SEQS // d
        psi_local = PSI / (t * p)
        tp_bw = BW_NVLINK if name == "B" else BW_NET
        rows.append(("DP, ZeRO-1 (d=16)", v_ddp(psi_local, d), BW_NET, "与反向重叠"))
        rows.append((f"TP (t=8, {'NVLink' if name == 'B' else 'network'})",
                     v_tp_layer(b, s, h, t) * (L // p) * m, tp_bw, "关键路径"))
        rows.append(("PP (p=4)", v_pp_microbatch(b, s, h) * m, BW_NET, "点对点"))
    return rows


summary = {}
for name in ("A", "B", "C"):
    print(f"布局 {name}：")
    comm = {}
    for label, volume, bw, where in layout_rows(name):
        comm[label] = volume / bw
        print(f"  {label:22s} {volume / GB:8.1f} GB/步  {volume / bw:6.2f} s  （{where}）")
    summary[name] = comm
    if name != "A":
        print(f"  流水线气泡 (p-1)/m = 3/64 = 理想步时间的 {3 / 64:.1%}")

# %% [markdown]
# 下图把每种布局每步的通信时间与计算时间并排画出。与计算重叠的通信在超过它所藏身的计算之前不花任何代价；关键路径上的通信则要花掉全部时间。

# %% alt=["\u6c34\u5e73\u6761\u5f62\u56fe\uff1a70B \u7ea7\u6a21\u578b\u5728 512 \u5757 H100 \u4e0a\u3001\u6bcf\u6b65 4.2M \u4e2a token \u65f6\u6bcf\u4e2a GPU \u6bcf\u6b65\u7684\u79d2\u6570\uff0c\u4e09\u79cd\u5e03\u5c40\uff0c\u6bcf\u79cd\u6709\u4e00\u6761\u7ea6 9.2 s \u7684\u7070\u8272\u8ba1\u7b97\u6761\u548c\u4e00\u6761\u5f69\u8272\u901a\u4fe1\u6761\u3002\u5e03\u5c40 A\uff08\u53ea\u7528 FSDP\uff09\uff1a\u7ea6 1.3 s \u7684 FSDP \u901a\u4fe1\uff0c\u85cf\u5728\u8ba1\u7b97\u4e4b\u540e\u3002\u5e03\u5c40 B\uff08\u8282\u70b9\u5185 TP\uff0c\u8de8\u8282\u70b9 PP \u548c DP\uff09\uff1a\u7ea6 2.1 s\uff0c\u4e3b\u8981\u662f\u8d70 NVLink \u7684 TP\u3002\u5e03\u5c40 C\uff08TP \u8de8\u8282\u70b9\uff09\uff1a\u7ea6 15.4 s\uff0c\u4e3b\u8981\u662f\u8d70\u7f51\u7edc\u7684 TP\uff0c\u6bd4\u8ba1\u7b97\u672c\u8eab\u8fd8\u957f\uff0c\u800c\u4e14\u5728\u5173\u952e\u8def\u5f84\u4e0a\u3002"]
fig, ax = plt.subplots(figsize=(9, 3.6))
labels, y = [], 0
colors = {"FSDP": "tab:blue", "DP": "tab:blue", "TP": "tab:red", "PP": "tab:green"}
for name in ("A", "B", "C"):
    ax.barh(y + 0.2, compute_s, height=0.35, color="lightgray",
            label="计算" if name == "A" else None)
    left = 0.0
    for label, secs in summary[name].items():
        kind = label.split()[0].rstrip(",")
        ax.barh(y - 0.2, secs, left=left, height=0.35, color=colors[kind],
                label=kind if name in ("A", "B") else None)
        left += secs
    labels.append(f"布局 {name}")
    y += 1
ax.set_yticks(range(3), labels)
ax.invert_yaxis()
ax.set_xlabel("每个 GPU 每步的秒数（灰色：计算；彩色：通信）")
ax.set_title("70B 级模型，512 块 H100，每步 4.2M 个 token")
handles, names = ax.get_legend_handles_labels()
ax.legend(dict(zip(names, handles, strict=True)).values(), dict(zip(names, handles, strict=True)).keys(),
          loc="center left", bbox_to_anchor=(1.0, 0.5))
ax.grid(axis="x", alpha=0.3)
plt.show()

# %% [markdown]
# 这些数字说明：
#
# * **A（只用 FSDP）。** 每步 1.5 × 2Ψ 的通信量与 $d$ 无关，而每个 GPU 的计算量按 $1/d$ 下降。FSDP 组包含每个节点的全部 GPU，所以它的环使用节点的全部 8 块网卡（320 GBps）：每个 GPU 每步 8192 个 token 时，通信耗时约为计算的七分之一，能藏在计算后面。网络一章的规则给出了余量：每个 GPU 有 $F/B_{\mathrm{bus}} \approx 1{,}240$ 个 token 就能藏住它；若一个组在每个节点只有一块 GPU（40 GBps），则约需 9,900 个。
# * **B（3D）。** DP 流量缩小为 $1/(t \cdot p) = 1/32$，因为每个 DP rank 只持有模型的 $1/32$；PP 流量很小；TP 传输的字节最多，但走 NVLink，约为计算时间的五分之一，除非实现把它与矩阵乘法重叠，否则位于关键路径上。
# * **C。** 同样的 TP 流量走节点间网络，比全部计算还要久：TP 应当留在 NVLink 域内。

# %%
tp_b = summary["B"]["TP (t=8, NVLink)"]
tp_c = summary["C"]["TP (t=8, network)"]
print(f"A：FSDP 通信 / 计算 = {summary['A']['FSDP (d=512)'] / compute_s:.2f}")
print(f"B：NVLink 上的 TP / 计算 = {tp_b / compute_s:.2f}")
print(f"C：跨节点的 TP / 计算 = {tp_c / compute_s:.2f}")
print("跨节点的 TP 比它所服务的计算还慢：", tp_c > compute_s)

# %% [markdown]
# ## 长上下文：ring attention 何时能藏住传输？
#
# 在 $c$ 个 rank 上做上下文并行（context parallelism）时，环的每一步传输一块键和值，共 $2\,b\,\frac{s}{c}\,h_{kv}\,B$ 字节，同时该 rank 计算自己的 $\frac{s}{c}$ 个查询对这一块的注意力：前向中 $4\,b\,(\frac{s}{c})^2\,a$ 次 FLOPs（$a$ 为查询宽度，整块计算，不跳过因果掩码部分）。当满足下式时，传输就藏在计算后面：
#
# $$ \frac{4\,b\,(s/c)^2\,a}{F} \ \ge\ \frac{2\,b\,(s/c)\,h_{kv}\,B}{B_{\mathrm{bus}}}
#    \quad\Longleftrightarrow\quad
#    \frac{s}{c} \ \ge\ \frac{F}{B_{\mathrm{bus}}}\cdot\frac{h_{kv}\,B}{2\,a}. $$
#
# 分组查询注意力在这里帮了两次忙：KV 头越少，要发送的块就越小。

# %%
h_kv = kv_heads * head_dim
for bw_name, bw in (("NVLink", BW_NVLINK), ("network", BW_NET)):
    threshold = F / bw * h_kv * 2 / (2 * h)
    print(f"{bw_name:8s}：当 s/c >= {threshold:6.0f} 个 token/rank 时传输被隐藏")
# 在阈值处直接比较两个时间，检验阈值。
chunk = F / BW_NET * h_kv * 2 / (2 * h)
t_compute = 4 * b * chunk**2 * h / F
t_transfer = 2 * b * chunk * h_kv * 2 / BW_NET
print("在阈值处，计算时间 = 传输时间：", math.isclose(t_compute, t_transfer))
for s_long, c in ((131072, 8), (131072, 16), (131072, 64)):
    print(f"s = {s_long}，c = {c:2d}：s/c = {s_long // c:6d} 个 token/rank")

# %% [markdown]
# 对这个模型和假设的带宽，128K token 上的 ring attention 跨节点也能藏住传输，直到每个 rank 只持有约一千个 token；低于这个数，环的各步就变成通信受限（而反向传播还要发送 K/V 的梯度，会更早到达这个点）。
#
# ## 要记住的
#
# * 每种策略的流量都是网络一章中各集合操作代价之和；拿不准时，就把集合操作列出来加一加。
# * DP 的通信量取决于一个 rank 持有的参数，而不是批次；TP、CP 和 EP 的通信量随一个微批次的 token 数增长，并位于关键路径上；PP 的通信量很小，但带来气泡。
# * 把每 FLOP 传输字节最多的维度放在最快的链路上：TP（以及 Ulysses CP 和 EP）放在 NVLink 内，PP 和 DP 跨节点。
