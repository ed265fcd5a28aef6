# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 530b36fadfb6aa6394bb2a03be58f65d317b35d2496d08de9d907677e14f6fcf
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
# # 解码屋顶线：让解码变为计算受限的批大小，以及延迟下限
#
# 本部分的**预填充与解码**一页指出：对一个含 $B$ 条序列、每个权重占 $b_w$ 字节的批，解码（decode）一步中权重矩阵乘法的算术强度（arithmetic intensity）为 $2B / b_w$ FLOP/byte：在 bf16 下，批大小（batch size）*就是*算术强度。一旦这个强度超过设备的脊点（ridge point），即峰值 FLOP/s 除以带宽，设备就不再受显存带宽限制。本 notebook 用本书的数据文件计算：
#
# 1. 计算部分表格中每个加速器（accelerator）的脊点批大小，bf16 与 fp8 各一个；
# 2. 真实模型解码一步的延迟下限（latency floor）（每个字节只读一次）；
# 3. 一个简单的解码吞吐量（throughput）随批大小变化的屋顶线（roofline）模型，计入 KV cache 的读取及其显存上限；
# 4. 由 `scripts/inference/decode_bench.py` 在本书的 CPU 上实测的同样这些量。
#
# 所有加速器数字都是厂商公布的峰值（见该表格的来源）；实际的 kernel 只能达到其中一部分，所以应把结果当作界限来读。

# %%
import json
import os
import sys
import urllib.request
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import yaml
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


accelerators = yaml.safe_load(book_file("data/compute/accelerators.yml"))["rows"]
calc = book_module("scripts/models/model_calculator.py", "model_calculator")
models = {m["name"]: m for m in calc.parse_models(
    book_file("data/models/architectures.yml").decode("utf-8"))}


def figure(row, key):
    """加速器某一行的一个数值列；表中没有数字（"—"）时为 None。"""
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) else None


devices = [r for r in accelerators if figure(r, "bf16_dense") and figure(r, "mem_TBps")]
print(f"{len(devices)} 个加速器同时有 bf16 峰值和显存带宽数据")

# %% [markdown]
# ## 脊点批大小
#
# 脊点 = 峰值 TFLOPS / 以 TBps 计的带宽，单位为 FLOP/byte。权重和运算都用 bf16 时，达到脊点的解码批大小在数值上等于脊点；权重和运算都用 fp8 时，强度为每字节 $2B$ FLOP，所以批大小是 fp8 脊点的一半。

# %% alt=["\u6c34\u5e73\u6761\u5f62\u56fe\uff1a\u7ea6 30 \u79cd\u52a0\u901f\u5668\u5728\u810a\u70b9\u5904\u7684 bf16 \u89e3\u7801\u6279\u5927\u5c0f\uff08\u5cf0\u503c TFLOPS \u9664\u4ee5\u5185\u5b58\u5e26\u5bbd\uff0c\u5355\u4f4d\u4e3a\u5e8f\u5217\u6570\uff09\uff0c\u6309\u5927\u5c0f\u6392\u5e8f\uff1a\u4ece AMD MI250X \u7684\u7ea6 120\u3001A100 \u7684 150 \u5230 160\uff0c\u5230 Google TPU v6e \u7684\u7ea6 560\uff0c\u591a\u6570\u73b0\u5f79 GPU \u5728 200 \u5230 320 \u4e4b\u95f4\u3002\u6bcf\u79cd\u52a0\u901f\u5668\u90fd\u8981\u4e00\u5230\u51e0\u767e\u6761\u5e8f\u5217\u7684\u89e3\u7801\u6279\uff0c\u6743\u91cd\u7684\u77e9\u9635\u4e58\u6cd5\u624d\u4e0d\u518d\u7b49\u5f85\u5185\u5b58\u3002"]
print(f"{'加速器':<23}{'bf16 TFLOPS':>12}{'TBps':>7}{'批大小 bf16':>9}{'fp8':>6}")
ridge = {}
for r in devices:
    bf16, bw, fp8 = figure(r, "bf16_dense"), figure(r, "mem_TBps"), figure(r, "fp8_dense")
    ridge[r["name"]] = bf16 / bw
    fp8_batch = f"{fp8 / bw / 2:>6.0f}" if fp8 else f"{'—':>6}"
    print(f"{r['name']:<26}{bf16:>12g}{bw:>7g}{bf16 / bw:>12.0f}{fp8_batch}")

fig, ax = plt.subplots(figsize=(8, 5))
names = sorted(ridge, key=ridge.get)
ax.barh(names, [ridge[n] for n in names], color="tab:blue")
ax.set_xlabel("脊点处的解码批大小，bf16（序列数）")
fig.tight_layout()
plt.show()

# %% [markdown]
# 当前的每个加速器都需要一百到几百条序列的解码批，权重矩阵乘法才不再等待显存；A100 之后的几代需要得更多，因为它们的峰值 FLOP/s 比带宽增长得快。低于这个批大小时，多加的序列几乎是免费的；高于它时，每条序列都会加上它全部的那份 FLOPs。
#
# ## 解码一步的延迟下限
#
# 批大小为 1 时，解码一步必须把这个 token 用到的每个权重（对混合专家（mixture of experts，MoE）模型而言是被激活的那些）至少读一次；下限就是这些字节数除以带宽，其倒数是单条序列每秒所能得到的 token 数的上限。用张量并行（tensor parallelism）切分到 $n$ 块 GPU 上的模型，字节数除以 $n$（通信时间还要另外加上）。

# %%
SHOWN = ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200 (HGX)",
         "AMD MI300X"]
shown = [r for r in devices if r["name"] in SHOWN]
MODELS = ["Llama 3.1 8B", "Llama 3.1 70B", "Mixtral 8x7B", "Llama 3.1 405B", "DeepSeek-V3"]
print("批大小为 1 时单条序列每秒 token 数的上限：bf16 权重，一块 GPU 的带宽"
      "（只计权重；用张量并行切分到 n 块 GPU 时，单步时间除以 n）")
print(f"{'模型':<14}{'激活(B)':>7}{'读取(GB)':>7}" + "".join(f"{r['name'][:14]:>16}" for r in shown))
for name in MODELS:
    active = calc.count_params(models[name])["active"]
    gbytes = 2 * active / 1e9
    print(f"{name:<16}{active / 1e9:>9.1f}{gbytes:>9.1f}"
          + "".join(f"{1e3 * figure(r, 'mem_TBps') / gbytes:>16.0f}" for r in shown))

# %% [markdown]
# 一个 70B 的稠密模型即使放得进单个设备，凭这个设备的带宽也不可能超过每秒几十个 token；这正是它要在一个节点内用张量并行来提供服务（每块 GPU 读八分之一）的主要原因，也是 fp8 权重（字节数减半）能让小批量解码速度接近翻倍的原因。MoE 模型在批大小为 1 时只读取被激活的专家（expert），所以 DeepSeek-V3（总共 671B）一旦把权重分散到足够多、放得下它的 GPU 上，其下限就与一个 37B 的稠密模型相同。
#
# ## 吞吐量随批大小的变化
#
# 对上下文长度为 $c$、含 $B$ 条序列的批，解码一步的一个简单模型是：
#
# $$t(B) = \max\left(\frac{N b_w + B\,c\,m_{kv}}{\text{bandwidth}},\ \frac{2NB + 4 L h d\, c B}{\text{peak}}\right)$$
#
# 其中 $N$ 是参数量（计算读取字节时取全部参数，计算 FLOPs 时取参与矩阵乘法的参数），$b_w$ 是每个权重的字节数，$L$ 是层数，$h d$ 是注意力的宽度（头数乘以每头维度），$m_{kv}$ 是每个 token 的 KV 字节数。吞吐量为 $B / t(B)$，而批大小受留给缓存的显存限制（按 `kv_cache_calculator.py` 的算法：GPU 显存的 90% 可用，减去权重）。对 Llama 3.1 8B、bf16、单块 GPU、上下文 4,096 个 token：

# %% alt=["\u5bf9\u6570-\u5bf9\u6570\u56fe\uff1aLlama 3.1 8B \u4ee5 bf16\u30014096 \u4e2a token \u7684\u4e0a\u4e0b\u6587\u5728 A100 SXM\u3001H100 SXM\u3001H200 SXM\u3001B200 \u548c MI300X \u4e0a\u7684\u89e3\u7801 tokens/s \u4e0a\u9650\u968f\u6279\u5927\u5c0f\u7684\u53d8\u5316\u3002\u6bcf\u6761\u66f2\u7ebf\u8d77\u521d\u51e0\u4e4e\u4e0e\u6279\u5927\u5c0f\u6210\u6b63\u6bd4\u4e0a\u5347\uff0c\u968f\u540e\u56e0\u6bcf\u6761\u5e8f\u5217\u7684\u7f13\u5b58\u8bfb\u53d6\u589e\u52a0\u800c\u5f2f\u66f2\uff0c\u5728 KV \u7f13\u5b58\u5360\u6ee1\u663e\u5b58\u5904\u7ed3\u675f\uff0880 GB \u7684 GPU \u7ea6\u4e3a\u6279\u5927\u5c0f 100\uff0c\u5176\u4ed6\u4e3a 200 \u5230 290\uff09\uff0cA100 \u7ea6 3000 tokens/s\uff0cB200 \u7ea6 13000 tokens/s\uff0c\u90fd\u672a\u5230\u8fbe\u8ba1\u7b97\u62d0\u70b9\u3002"]
model = models["Llama 3.1 8B"]
n_matmul = calc.flops_per_token(model, 1)["matmul_params"]
total = calc.count_params(model)["total"]
kv_token = calc.kv_bytes_per_token(model, 2)
kv_calc = book_module("scripts/inference/kv_cache_calculator.py", "kv_cache_calculator")
shape = model  # 两个计算器用同一个 architecture() 读取模型
layers, width = model["num_hidden_layers"], model["num_attention_heads"] * model["head_dim"]
context = 4096
batches = np.unique(np.round(np.logspace(0, 11, 200, base=2)).astype(int))

fig, ax = plt.subplots(figsize=(8, 4.5))
print(f"{'加速器':<21}{'最大批大小(显存)':>12}{'拐点批大小':>6}{'该处 tok/s':>10}")
for r in shown:
    bw, peak = figure(r, "mem_TBps") * 1e12, figure(r, "bf16_dense") * 1e12
    memory_time = (2 * total + batches * context * kv_token) / bw
    compute_time = (2 * n_matmul + 4 * layers * width * context) * batches / peak
    step = np.maximum(memory_time, compute_time)
    cap = kv_calc.capacity(shape, params=total, context=context, kv_dtype="bf16",
                           weight_dtype="bf16", gpu_memory_gb=figure(r, "mem_GB"))["sequences"]
    ok = batches <= cap
    ax.loglog(batches[ok], (batches / step)[ok], label=r["name"])
    knee = batches[np.argmax(compute_time >= memory_time)] if (compute_time >= memory_time).any() else None
    knee_text = f"{knee:>11}" if knee and knee <= cap else f"{'> 上限':>9}"
    at = min(knee or cap, cap)
    print(f"{r['name']:<24}{cap:>19}{knee_text}{at / step[batches <= at][-1]:>12,.0f}")
ax.set_xlabel("批大小（序列数）")
ax.set_ylabel("解码 tokens/s（上限）")
ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# “该处 tok/s”：拐点（knee）处的上限；若拐点超出了能放下的最大批大小，则为该最大批大小处的上限。上下文为 4,096 个 token 时，在图中每个设备上，批大小还没到达计算拐点，留给缓存的显存就先用完了（每条线的终点）：缓存每一步都要被每条序列读一遍，这使解码始终受显存带宽限制。吞吐量仍随批大小增长，因为权重对所有序列只读一次；长上下文会让曲线变平，因为每条序列都会增加自己的缓存读取。更短的上下文、fp8 缓存以及 GQA 或 MLA 会把这些线向上、向右移。

# %% [markdown]
# ## 在 CPU 上的实测
#
# `scripts/inference/decode_bench.py` 构建一个小型解码器，用提示词（prompt）填满它的 KV cache（预填充（prefill）），然后为批中的每条序列解码 32 个 token，扫描几种批大小和提示词长度。它记录在 `results/inference/` 中的运行使用 fp32、单个 CPU 线程，所以强度为 $2B/4$ FLOP/byte，即批大小的一半。下表的 FLOP/byte 列由模型的形状算出（权重加上一步中读取的缓存）；时间是实测的。

# %%
bench = json.loads(book_file("results/inference/decode_bench-cpu.json"))
rows = bench["results"]
weight_bytes = bench["model"]["weight_bytes"]
print(f"{bench['model']['parameters'] / 1e6:.1f}M 个参数，{bench['dtype']}，"
      f"{weight_bytes / 1e6:.1f} MB 权重，{bench['threads']} 个 CPU 线程")
print(f"{'上下文':>4}{'批大小':>4}{'FLOP/byte':>10}{'TPOT (ms)':>13}{'解码 tok/s':>13}"
      f"{'预填充 tok/s':>13}")
for r in rows:
    intensity = r["flops_per_step"] / r["bytes_per_step"]
    print(f"{r['context']:>8}{r['batch']:>6}{intensity:>10.2f} ≈ {r['tpot_ms']:>10.2f} "
          f"≈ {r['decode_tokens_per_s']:>12.0f} ≈ {r['prefill_tokens_per_s']:>13.0f}")

# %% [markdown]
# 预填充在每一层中一次处理完提示词的全部 token，所以它每秒写入缓存的 token 数比解码每秒产出的 token 数多得多：这正是**预填充与解码**一页的出发点。对解码而言，上面的屋顶线模型预测单步时间由一个固定部分（权重，无论批多大都只读一次）加上每条序列的部分（它的 FLOPs 和它的缓存）组成。对实测的单步时间做直线拟合即可估计这两部分：固定部分给出单步读取权重的速率，两者之比是各序列的开销与权重开销相当时的批大小，即脊点批大小在实测中的对应值。

# %% alt=["\u4e24\u5f20\u56fe\uff0c\u662f\u5355\u4e2a CPU \u7ebf\u7a0b\u4e0a\u5b9e\u6d4b\u7684\u89e3\u7801\uff0c\u4e0a\u4e0b\u6587\u4e3a 128 \u548c 512 \u4e2a token\u3002\u5de6\u56fe\uff1a\u5355\u6b65\u65f6\u95f4\uff08TPOT\uff0cms\uff09\u968f\u6279\u5927\u5c0f 1 \u5230 16 \u7684\u53d8\u5316\uff0c\u6bcf\u4e2a\u4e0a\u4e0b\u6587\u4e00\u6761\u62df\u5408\u76f4\u7ebf\uff1b\u5355\u6b65\u65f6\u95f4\u4ece\u7ea6 7 ms \u589e\u957f\u5230 16 \u5230 21 ms\uff0c\u8fdc\u6bd4\u6279\u5927\u5c0f\u589e\u957f\u5f97\u6162\u3002\u53f3\u56fe\uff08\u5bf9\u6570-\u5bf9\u6570\uff09\uff1a\u89e3\u7801 tokens/s \u968f\u6279\u5927\u5c0f\u4e0a\u5347\uff0c\u4f46\u4f4e\u4e8e\u8868\u793a\u201c\u82e5\u5355\u6b65\u65f6\u95f4\u4fdd\u6301\u6279\u5927\u5c0f\u4e3a 1 \u65f6\u7684\u503c\u201d\u7684\u865a\u7ebf\u3002"]
fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4))
for context in sorted({r["context"] for r in rows}):
    points = [r for r in rows if r["context"] == context]
    batch = np.array([r["batch"] for r in points])
    tpot = np.array([r["tpot_ms"] for r in points])
    per_sequence, fixed = np.polyfit(batch, tpot, 1)
    print(f"上下文 {context}：单步 ≈ {fixed:.2f} ms + 每条序列 ≈ {per_sequence:.2f} ms；"
          f"权重读取速率 ≈ {weight_bytes / fixed / 1e6:.1f} GB/s；"
          f"各序列的开销在批大小 ≈ {fixed / per_sequence:.0f} 时与权重相当")
    line, = ax_t.plot(batch, tpot, "o", label=f"上下文 {context}")
    ax_t.plot(batch, fixed + per_sequence * batch, "-", color=line.get_color(), lw=1)
    ax_r.loglog(batch, batch / tpot * 1e3, "o-", base=2, color=line.get_color(),
                label=f"上下文 {context}")
ax_r.loglog(batch, batch / rows[0]["tpot_ms"] * 1e3, "k--", base=2, lw=1,
            label="若单步时间保持批大小为 1 时的值")
ax_t.set_xlabel("批大小（序列数）")
ax_t.set_ylabel("解码单步，TPOT（ms）")
ax_t.set_ylim(bottom=0)
ax_t.legend(frameon=False)
ax_r.set_xlabel("批大小（序列数）")
ax_r.set_ylabel("解码 tokens/s")
ax_r.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# 单步时间的增长比批大小慢得多，所以每秒 token 数随批大小上升，与 GPU 上一样；它们仍低于虚线，是因为每条序列都会增加一些工作，而单个 CPU 线程做这些工作的速度有限（它的 FLOPs、它对自身缓存的注意力、框架每一步的开销），而在加速器上，上下文较短时，上面的模型让单步时间几乎不变，直到批大小接近脊点（上下文很长时，缓存读取会先让它增长，如上一节所示）。更长的上下文让每条序列每步读取更多缓存，使曲线更早弯下来。这些点有噪声（共享的虚拟机，每个 TPOT 是 3 次重复、每次 32 步的平均值）：拟合结果只应当作数量级来看。`decode_bench.py --device cuda` 在 GPU 上测量同样的表。
