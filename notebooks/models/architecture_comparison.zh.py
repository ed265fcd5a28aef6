# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 552d7a280cb86dbf4be71d8c4e1cfca27331ff38da5a88d01fbf6705e21fcb71
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
# # 架构对比：参数和 KV cache 都花在了哪里
#
# 本 notebook 用本书的计算器 `scripts/models/model_calculator.py` 计算 `data/models/architectures.yml` 中的每一个模型（开放模型 `config.json` 中的取值，每个都注明出处），展示本部分**模型架构**一页推导出的三件事：
#
# 1. **参数分布在哪里**：嵌入（embedding）、注意力（attention）、MLP 还是专家（expert）。词表大的小模型要把十分之一甚至更多的参数花在嵌入上；在混合专家（mixture of experts，MoE）模型中，专家几乎就是全部。
# 2. **总参数量与激活参数量（active parameters）**：显存为总参数量买单，每个 token 的 FLOPs 则取决于激活参数量。
# 3. **每个 token 的 KV cache**：多头注意力、分组查询注意力（grouped-query attention）、潜在注意力以及滑动窗口对它的影响，以及在多长的上下文下一条序列的 cache 会超过权重本身。
#
# 每个数字都是对公开配置做的算术，因此打印的值是精确的。
# %%
import sys
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib.patches import Patch
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


def book_module(rel, name):
    """The book's Python file `rel` (found as by book_file) imported as the module `name`."""
    import types
    module = types.ModuleType(name)
    module.__file__ = rel
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(book_file(rel), rel, "exec"), module.__dict__)
    return module


calc = book_module("scripts/models/model_calculator.py", "model_calculator")
models = calc.parse_models(book_file("data/models/architectures.yml").decode("utf-8"))
counts = {m["name"]: calc.count_params(m) for m in models}
names = [m["name"] for m in models]
print(f"{len(models)} models:", ", ".join(names))

# %% [markdown]
# ## 参数分布在哪里
#
# 计算器把每个模型拆成输入嵌入、输出投影（与嵌入共享时为零，如 Gemma 2）、注意力、稠密 MLP、路由专家与共享专家（连同路由器）以及归一化层。下面的占比都是相对总参数量而言。
# %% alt=["\u5806\u53e0\u6c34\u5e73\u6761\u5f62\u56fe\uff1a17 \u4e2a\u6a21\u578b\u4e2d\u53c2\u6570\u7684\u5206\u5e03\uff0c\u6309\u5360\u603b\u91cf\u7684\u6bd4\u4f8b\u5206\u4e3a\u5d4c\u5165\u3001\u6ce8\u610f\u529b\u3001MLP \u548c\u4e13\u5bb6\u3002\u7a20\u5bc6\u6a21\u578b\u4e2d MLP \u5360\u5927\u90e8\u5206\u53c2\u6570\uff0cLlama 2 7B \u548c 13B \u7ea6\u4e09\u5206\u4e4b\u4e8c\uff0c\u5176\u4ed6\u6a21\u578b 60% \u5230 86%\uff0c\u5176\u4f59\u591a\u4e3a\u6ce8\u610f\u529b\uff1b\u53ea\u6709\u8bcd\u8868\u5927\u7684 7B \u5230 9B \u6a21\u578b\uff0c\u5d4c\u5165\u624d\u5360\u5230 10% \u5230 14%\u3002\u6df7\u5408\u4e13\u5bb6\u6a21\u578b\uff08Mixtral\u3001Qwen3-30B-A3B\u3001OLMoE\u3001DeepSeek-V3\uff09\u4e2d\u4e13\u5bb6\u5360 93% \u5230 98%\u3002"]
GROUPS = {"嵌入": ("embedding", "output"), "注意力": ("attention",),
          "MLP": ("mlp",), "专家": ("experts", "shared_experts", "router")}
share = {g: np.array([sum(counts[n][k] for k in keys) / counts[n]["total"] for n in names])
         for g, keys in GROUPS.items()}

largest_norms = max(counts[n]["norms"] / counts[n]["total"] for n in names)
print(f"norm weights: at most {100 * largest_norms:.3f}% of a model, left out below")
print(f"{'model':<16}{'total B':>9}" + "".join(f"{g:>12}" for g in GROUPS))
for i, n in enumerate(names):
    print(f"{n:<16}{counts[n]['total'] / 1e9:>9.2f}"
          + "".join(f"{100 * share[g][i]:>11.1f}%" for g in GROUPS))

fig, ax = plt.subplots(figsize=(8, 5.5))
left = np.zeros(len(names))
for g, color in zip(GROUPS, ("tab:gray", "tab:blue", "tab:orange", "tab:green"), strict=True):
    ax.barh(names, 100 * share[g], left=left, label=g, color=color)
    left += 100 * share[g]
ax.invert_yaxis()
ax.set_xlabel("占总参数量的比例（%）")
ax.set_xlim(0, 100)
ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# 从上往下读。Llama 2 把每层约 2/3 的参数给了 MLP（$3hf$，$f \approx 2.7h$），1/3 给了注意力（$4h^2$）；Llama 2 70B、Llama 3.1 和 Qwen2.5 的分组查询注意力缩小了 K 和 V 投影，MLP 又更宽，注意力占比降到六分之一或更低。128k 到 256k 的词表让嵌入占到 8B、9B 模型的十分之一（Gemma 2 的输入与输出共享权重，只付一次）；到 405B，同样的词表只占 1%。在 MoE 模型中，专家占了 93% 到 98% 的参数。
# %% [markdown]
# ## 总参数量与激活参数量
#
# 一个 token 只经过 `num_experts_per_tok` 个路由专家（以及共享专家），所以每个 token 的 FLOPs 随激活参数量变化，而所有专家都必须放在显存里。发布者公布的数字印在我们算出的数字旁边（测试逐一核对）。
# %%
print(f"{'model':<16}{'total B':>9}{'active B':>10}{'active/total':>14}{'published':>16}")
for m in models:
    if not m["num_experts"]:
        continue
    c = counts[m["name"]]
    published = f"{m['published_total']} / {m['published_active']}"
    print(f"{m['name']:<16}{c['total'] / 1e9:>9.2f}{c['active'] / 1e9:>10.2f}"
          f"{c['active'] / c['total']:>14.3f}{published:>16}")

# %% [markdown]
# DeepSeek-V3 让一个 token 只经过 5.6% 的权重，Qwen3-30B-A3B 是 11%，Mixtral 超过四分之一（8 个专家中的 2 个，加上注意力）。DeepSeek-V3 每个 token 的 FLOPs 相当于约 37B 参数的稠密模型，但部署它需要 671B 参数的显存。
#
# 有两个公布的激活参数量需要说明。DeepSeek 的"37B activated"只有在不计输入嵌入时才与配置吻合（36.6B；计入则为 37.6B）：查表算不算激活参数，各发布者的口径不同。Qwen 的模型卡片给 Qwen3-30B-A3B 印的是"3.3B activated"；由配置算出计入嵌入为 3.35B，不计为 3.04B，所以数据文件没有收录这个数字。
# %% [markdown]
# ## 每个 token 的 KV cache
#
# 以 bf16 计（每个值 2 字节）。多头注意力为每个头缓存一个键和一个值；分组查询注意力每组一个；多头潜在注意力（multi-head latent attention，MLA）每层缓存一个 `kv_lora_rank` 维的潜在向量加一个共享的旋转位置键。最后一列是一条序列的 cache 与 bf16 模型权重一样大时的上下文长度：超过它，单个长请求的 cache 比模型本身还占显存（每一层都只保留滑动窗口时为 "never"）。
# %% alt=["\u6c34\u5e73\u6761\u5f62\u56fe\uff1a17 \u4e2a\u6a21\u578b\u6bcf\u4e2a token \u7684 KV cache\uff08KiB\uff0cbf16\uff09\uff0c\u6309\u6ce8\u610f\u529b\u7c7b\u578b\u7740\u8272\uff1a\u591a\u5934\u6ce8\u610f\u529b\uff08\u7ea2\u8272\uff09\u4e2d Llama 2 7B \u548c OLMo 2 7B \u4e3a 512 KiB\uff0cLlama 2 13B \u4e3a 800 KiB\uff1b\u5206\u7ec4\u67e5\u8be2\u6ce8\u610f\u529b\uff08\u84dd\u8272\uff09\u591a\u4e3a 56 \u5230 370 KiB\uff0cLlama 3.1 405B \u8fbe 504 KiB\uff1bDeepSeek-V3 \u7684\u591a\u5934\u6f5c\u5728\u6ce8\u610f\u529b\uff08\u7eff\u8272\uff09\u7ea6 69 KiB\u3002\u51b3\u5b9a\u7f13\u5b58\u5927\u5c0f\u7684\u4e3b\u8981\u662f\u6ce8\u610f\u529b\u7684\u8bbe\u8ba1\uff0c\u800c\u4e0d\u662f\u6a21\u578b\u5927\u5c0f\u3002"]
kv = {m["name"]: calc.kv_bytes_per_token(m, 2) for m in models}


def context_equal_to_weights(m):
    """The smallest context whose cache (bf16) reaches the weights (bf16), or None."""
    weights, low, high = 2 * counts[m["name"]]["total"], 1, 10**9
    if calc.kv_bytes(m, high, 2) < weights:
        return None
    while low < high:  # the cache grows with the context: bisect
        mid = (low + high) // 2
        low, high = (mid + 1, high) if calc.kv_bytes(m, mid, 2) < weights else (low, mid)
    return low



print(f"{'model':<16}{'attention':>10}{'KV bytes/token':>16}{'GB at 32k':>11}{'equal to weights at':>22}")
for m in models:
    n = m["name"]
    at_32k = calc.kv_bytes(m, 32768, 2) / 1e9
    breakeven = context_equal_to_weights(m)
    shown = "never" if breakeven is None else f"{breakeven:,} tok"
    print(f"{n:<16}{m['attention']:>10}{kv[n]:>16,}{at_32k:>11.2f}"
          f"{shown:>22}")

fig, ax = plt.subplots(figsize=(8, 5))
colors = {"MHA": "tab:red", "GQA": "tab:blue", "MLA": "tab:green"}
ax.barh(names, [kv[n] / 1024 for n in names],
        color=[colors[m["attention"]] for m in models])
ax.invert_yaxis()
ax.set_xlabel("每个 token 的 KV cache，KiB（bf16）")
ax.legend(handles=[Patch(color=color, label=label) for label, color in colors.items()],
          frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# 有两点很醒目。每个 token 的 cache 大小主要由注意力设计决定，而不是模型规模：Llama 2 7B（MHA）每个 token 缓存 512 KiB，比 Llama 3.1 405B（8 个 KV 头的 GQA，504 KiB）还多，而 DeepSeek-V3（MLA）约 69 KiB。另外，Mistral 7B 和 Gemma 2 的滑动窗口限制了部分 cache：在 32k token 时 Mistral 只保留 4,096 个 token 的窗口；Gemma 2 每隔一层保留窗口，所以超过 4,096 个 token 后它的 cache 只以一半的速度增长。
