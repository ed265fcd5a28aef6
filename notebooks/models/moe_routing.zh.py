# ---
# jupyter:
#   book:
#     translation:
#       source_sha256: 7d588a00216313f152eb363af9ea3c66df836044cdcd7fdf5e4e431a06d0bff1
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
# # MoE 路由：负载均衡与被丢弃的 token
#
# 本 notebook 在 CPU 上训练一个小型混合专家（mixture of experts，MoE）层，测量本部分**混合专家**一页提醒的两件事：路由器（router）把 token 分给各个专家（expert）时有多不均匀，以及固定的专家容量（expert capacity）会丢掉多少 token-专家分配。这个层就是该页描述的那种：一个线性路由器，对各专家做 softmax，每个 token 取前 $k = 2$ 个专家，并把它们的门控值（gate）重新归一化为和为一（[Mixtral，Jiang 等人 2024](https://arxiv.org/abs/2401.04088)，第 2.1 节），外加八个很小的两层 MLP 专家。数据来自四个大小悬殊的簇，所以放任不管的路由器会把大部分 token 送到大簇偏好的少数几个专家。
#
# 读完后应当记住：
#
# 1. 不加均衡项时，训练好的路由器会让一些专家闲置、让另一些过载（最大负载是平均值的好几倍）。
# 2. Switch Transformer 的辅助损失（auxiliary loss）（[Fedus 等人 2021](https://arxiv.org/abs/2101.03961)，第 2.2 节，式 4）随系数 $\alpha$ 增大而使负载趋于均匀，而在最大的 $\alpha$ 下任务损失变差：均衡不是免费的。无辅助损失负载均衡（auxiliary-loss-free load balancing）的偏置更新（[Wang 等人 2024](https://arxiv.org/abs/2408.15664)）不在损失里加任何项也能做到均衡。
# 3. 容量因子（capacity factor）为 1.0 时，即使均衡良好的路由器也会丢掉一些分配，因为单个批次的负载会在均值附近波动；不均衡的路由器在所试的每个容量因子下都丢掉很大一部分，任务损失随丢弃比例一起上升。
#
# 全部内容在单个 CPU 线程上大约十秒跑完。数字来自固定随机种子（seed）的真实训练；换一种 CPU 可能舍入不同，所以训练得到的数值打印在 `≈` 之后。

# %%
import math
import warnings

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib import font_manager
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 9})

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
torch.manual_seed(0)

# %% [markdown]
# ## 任务：大小悬殊的簇
#
# 每个输入 $x \in \mathbb{R}^{16}$ 围绕四个中心之一抽取，选中各中心的概率为 55%、25%、12% 和 8%。目标对每个簇是一个不同的随机非线性映射 $y = \tanh(M_c x)$，因此专门负责某个簇的专家有东西可学。训练批次含 512 个 token；一个固定的 4,096 个 token 的留出集用来测量损失和负载。

# %%
D, HIDDEN, E, K = 16, 8, 8, 2          # 模型宽度、专家 MLP 宽度、专家数、每个 token 的专家数
CLUSTER_SHARE = torch.tensor([0.55, 0.25, 0.12, 0.08])
BATCH, STEPS, LR = 512, 300, 1e-2

g = torch.Generator().manual_seed(0)
CENTRES = 2.0 * torch.randn(len(CLUSTER_SHARE), D, generator=g)
MAPS = torch.randn(len(CLUSTER_SHARE), D, D, generator=g) / math.sqrt(D)


def sample(n, seed):
    """n 个 token：输入、目标以及各自所属的簇。"""
    gen = torch.Generator().manual_seed(seed)
    cluster = torch.multinomial(CLUSTER_SHARE, n, replacement=True, generator=gen)
    x = CENTRES[cluster] + 0.5 * torch.randn(n, D, generator=gen)
    y = torch.tanh(torch.einsum("nij,nj->ni", MAPS[cluster], x))
    return x, y, cluster


X_TEST, Y_TEST, C_TEST = sample(4096, seed=7)
print("留出集中每个簇的 token 数：", torch.bincount(C_TEST).tolist())

# %% [markdown]
# ## MoE 层
#
# 路由器是一个 $16 \times 8$ 的矩阵。它的 softmax 给每个 token 在每个专家上一个概率 $p_i(x)$；保留最大的两个并重新归一化，得到门控值。每个专家还有一个 `bias`（除非用下文的无辅助损失均衡来训练，否则为零），它加到分数上**只用于选择**专家；门控值仍然来自 $p_i(x)$，与 DeepSeek-V3 相同（[DeepSeek-AI 2024](https://arxiv.org/abs/2412.19437)，第 2.1.2 节，式 16）。
#
# 专家只有八个而且很小，所以更简单的做法是让每个专家处理每个 token，再保留被选中的两个输出；真实实现只把每个 token 发给它的专家，输出相同。`keep` 参数把被容量上限丢弃的分配置零（在后半部分使用）。

# %%
class MoELayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E, bias=False)
        self.w_in = nn.Parameter(torch.randn(E, D, HIDDEN) / math.sqrt(D))
        self.w_out = nn.Parameter(torch.randn(E, HIDDEN, D) / math.sqrt(HIDDEN))
        self.register_buffer("bias", torch.zeros(E))

    def route(self, x):
        probs = self.router(x).softmax(dim=-1)                     # p_i(x), (n, E)
        chosen = (probs.detach() + self.bias).topk(K, dim=-1).indices
        top = probs.gather(1, chosen)
        gates = top / top.sum(dim=-1, keepdim=True)                 # 在前 k 个之间重新归一化
        return probs, chosen, gates

    def forward(self, x, keep=None):
        probs, chosen, gates = self.route(x)
        hidden = F.gelu(torch.einsum("nd,edh->neh", x, self.w_in))
        every = torch.einsum("neh,ehd->ned", hidden, self.w_out)    # 所有专家，(n, E, D)
        picked = every.gather(1, chosen.unsqueeze(-1).expand(-1, -1, D))
        weights = gates if keep is None else gates * keep
        return (weights.unsqueeze(-1) * picked).sum(dim=1), probs, chosen


layer = MoELayer()
expert_params = layer.w_in.numel() + layer.w_out.numel()
router_params = layer.router.weight.numel()
print(f"总参数量     = {expert_params + router_params}（专家 {expert_params}，路由器 {router_params}）")
print(f"每 token 激活 = {K * expert_params // E + router_params}（{E} 个专家中的 {K} 个，加上路由器）")

# %% [markdown]
# 显存里放着全部八个专家，但每个 token 只经过两个：这就是该页所说的总参数与激活参数之分，只是缩小到玩具规模。
#
# ## 负载及其不均衡
#
# 专家 $i$ 的**负载**是它收到的 token-专家分配数。我们报告两个汇总量：最大负载除以平均负载（1.0 为完全均衡；在专家并行（expert parallelism）下，它决定最忙那块 GPU 的工作量）和变异系数（coefficient of variation），即标准差除以均值。这里未经训练的路由器就已经不均衡，因为大多数 token 都聚在一个中心附近，落到同样几个专家上。

# %%
def loads(chosen):
    return torch.bincount(chosen.reshape(-1), minlength=E).float()


def imbalance(load):
    return (load.max() / load.mean()).item(), (load.std(unbiased=False) / load.mean()).item()


with torch.no_grad():
    _, chosen0, _ = layer.route(X_TEST)
load0 = loads(chosen0)
max_over_mean, cv = imbalance(load0)
print("未训练的路由器，每个专家的负载：", [int(v) for v in load0.tolist()])
print(f"最大/平均 ≈ {max_over_mean:.2f}，变异系数 ≈ {cv:.2f}")

# %% [markdown]
# ## 用辅助损失或路由偏置训练
#
# Switch Transformer 的损失是 $\alpha \cdot E \sum_i f_i P_i$，其中 $f_i$ 是分给专家 $i$ 的分配所占的比例（靠计数得到，没有梯度），$P_i$ 是批次内路由器给专家 $i$ 的平均概率（有梯度）。当两者都均匀为 $1/E$ 时它等于 $\alpha$，当负载和概率集中到同一批专家上时它变大。我们从相同的初始权重、在相同的批次上训练同一个层，$\alpha \in \{0, 10^{-3}, 10^{-2}, 10^{-1}\}$（Switch Transformer 用的是 $10^{-2}$，第 2.2 节）。
#
# 第五次运行不用辅助损失；每一步之后，把负载高于平均值的专家的偏置降低 $\gamma = 0.01$，把低于平均值的专家的偏置升高同样的量，这就是无辅助损失均衡的符号规则。DeepSeek-V3 用 $\gamma = 0.001$（第 4.2 节）；这个玩具运行只有 300 步，所以需要更快的速率。

# %%
def aux_loss(probs, chosen):
    f = loads(chosen) / chosen.numel()       # 每个专家所得分配的比例，无梯度
    p = probs.mean(dim=0)                    # 每个专家的平均路由概率
    return E * (f * p).sum()


def train(alpha=0.0, gamma=0.0):
    torch.manual_seed(0)
    model = MoELayer()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y, _ = sample(BATCH, seed=1000 + step)
        out, probs, chosen = model(x)
        loss = F.mse_loss(out, y)
        if alpha:
            loss = loss + alpha * aux_loss(probs, chosen)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if gamma:
            load = loads(chosen)
            model.bias -= gamma * torch.sign(load - load.mean())
    return model


def evaluate(model):
    with torch.no_grad():
        out, probs, chosen = model(X_TEST)
    load = loads(chosen)
    return {"mse": F.mse_loss(out, Y_TEST).item(), "load": load,
            "balance_term": aux_loss(probs, chosen).item()}


runs = {}
for alpha in (0.0, 1e-3, 1e-2, 1e-1):
    runs[f"aux α={alpha:g}"] = (train(alpha=alpha), alpha)
runs["bias γ=0.01"] = (train(gamma=0.01), None)

results = {name: evaluate(model) for name, (model, _) in runs.items()}
print(f"{'运行':<12} {'最大/平均':>8} {'变异系数':>6} {'闲置':>4} {'E·Σf·P':>8} {'测试 MSE':>9}")
for name, r in results.items():
    mx, cv = imbalance(r["load"])
    idle = int((r["load"] == 0).sum())
    print(f"{name:<14} ≈ {mx:8.2f} ≈ {cv:6.2f} ≈ {idle:3d} ≈ {r['balance_term']:6.2f} "
          f"≈ {r['mse']:.4f}")

# %% [markdown]
# 从上往下读这张表。$\alpha = 0$ 时，路由器学会了用少数几个专家服务大簇，让一些专家闲置：这些专家占着参数却得不到梯度。小系数已经让闲置专家开始工作，但最忙的专家仍远高于平均值；$10^{-1}$ 让最大/平均接近 1，而它的测试损失是四次辅助损失运行中最高的：均衡梯度把路由器从适合任务的分配上拉开（即 Wang 等人摘要中所说的"干扰梯度"（interference gradients））。`E·Σf·P` 是不含 $\alpha$ 的均衡项；随着负载和概率摊开，它朝 1 下降。偏置运行不加任何损失项也做到了均衡；在这么小的玩具里，它的任务损失与辅助损失各次运行的差别在噪声之内（该论文是在最多 3B 参数、训练最多 200B token 的 MoE 模型上测出它的收益的）。

# %% alt=["\u4e09\u5f20\u6761\u5f62\u56fe\uff0c\u6bd4\u8f83\u5728\u540c\u4e00\u4efb\u52a1\u4e0a\u8bad\u7ec3\u7684\u4e94\u79cd\u8def\u7531\u5668\uff1a\u8f85\u52a9\u635f\u5931\u7cfb\u6570 \u03b1 \u4e3a 0\u30010.001\u30010.01\u30010.1\uff0c\u4ee5\u53ca\u8def\u7531\u504f\u7f6e\u3002\u5de6\u56fe\uff0c\u8bad\u7ec3\u540e\u7684\u8d1f\u8f7d\u4e0d\u5747\u8861\uff1a\u6700\u5927/\u5e73\u5747\u4ece \u03b1 = 0 \u65f6\u7684\u7ea6 3.2 \u964d\u5230 \u03b1 = 0.1 \u65f6\u7684\u7ea6 1.1\uff08\u504f\u7f6e\u7ea6\u4e3a 1.2\uff09\uff0c\u53d8\u5f02\u7cfb\u6570\u4ece\u7ea6 1.1 \u964d\u5230 0.1 \u4ee5\u4e0b\u3002\u4e2d\u56fe\uff0c\u7559\u51fa\u96c6 MSE\uff1a\u03b1 = 0 \u6700\u4f4e\uff08\u7ea6 0.019\uff09\uff0c\u03b1 = 0.1 \u6700\u9ad8\uff08\u7ea6 0.028\uff09\u3002\u53f3\u56fe\uff0c4096 \u4e2a token \u65f6\u6bcf\u4e2a\u4e13\u5bb6\u7684\u5206\u914d\u6570\uff1a\u03b1 = 0 \u65f6\u4e13\u5bb6 0 \u548c 1 \u4e00\u4e2a\u4e5f\u6ca1\u6709\uff0c\u4e13\u5bb6 2 \u8d85\u8fc7 3000\uff1b\u03b1 = 0.1 \u65f6\u6bcf\u4e2a\u4e13\u5bb6\u90fd\u63a5\u8fd1\u5747\u5300\u503c 1024\u3002"]
names = list(results)
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
ax = axes[0]
positions = range(len(names))
ax.bar([p - 0.2 for p in positions], [imbalance(results[n]["load"])[0] for n in names],
       width=0.4, label="最大 / 平均")
ax.bar([p + 0.2 for p in positions], [imbalance(results[n]["load"])[1] for n in names],
       width=0.4, label="变异系数")
ax.axhline(1.0, color="grey", lw=0.8, ls="--")
ax.set_xticks(list(positions), names, rotation=25, ha="right")
ax.set_title("训练后的负载不均衡")
ax.legend()

ax = axes[1]
ax.bar(list(positions), [results[n]["mse"] for n in names], color="tab:red")
ax.set_xticks(list(positions), names, rotation=25, ha="right")
ax.set_title("留出集任务损失（MSE）")

ax = axes[2]
width = 0.4
for shift, name in ((-0.2, "aux α=0"), (0.2, "aux α=0.1")):
    ax.bar([e + shift for e in range(E)], results[name]["load"].tolist(), width=width,
           label=name)
ax.axhline(X_TEST.shape[0] * K / E, color="grey", lw=0.8, ls="--", label="均匀")
ax.set_xlabel("专家")
ax.set_title("每个专家的分配数（4,096 个 token，top-2）")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 容量因子与被丢弃的 token
#
# 在静态形状下，每个专家有一个固定大小的缓冲区，即**专家容量**（[Fedus 等人 2021](https://arxiv.org/abs/2101.03961)，第 2.2 节，式 3），这里写成 top-$k$ 路由的形式：
#
# $$ C = \left\lceil \text{capacity factor} \cdot \frac{k \cdot \text{tokens per group}}{E}
#    \right\rceil . $$
#
# 超过 $C$ 的分配被丢弃：专家跳过它们，token 只保留另一个专家的输出；如果两个都被丢弃，就得不到这一层的任何输出（在 Transformer 里残差连接仍会把它传下去）。我们把留出集按训练时的做法切成 512 个 token 一组，先放入每个 token 的第一选择、再放第二选择（GShard 的顺序，[Lepikhin 等人 2020](https://arxiv.org/abs/2006.16668)，第 2.2 节，算法 1），统计溢出的部分，分别对不均衡的路由器（$\alpha = 0$）和均衡的路由器（$\alpha = 10^{-1}$）进行。

# %%
GROUP = 512
FACTORS = (1.0, 1.25, 1.5, 2.0)


def capacity_mask(chosen, capacity):
    """能放进专家缓冲区的分配为 1，被丢弃的为 0。"""
    keep = torch.zeros(chosen.shape)
    filled = torch.zeros(E, dtype=torch.long)
    for j in range(K):                                     # 先放所有第一选择，再放第二选择
        one_hot = F.one_hot(chosen[:, j], E)
        position = filled[chosen[:, j]] + (one_hot.cumsum(0) * one_hot).sum(1) - 1
        keep[:, j] = (position < capacity).float()
        filled += one_hot.sum(0)
    return keep


for cf in FACTORS:
    print(f"容量因子 {cf:<4}：C = {math.ceil(cf * K * GROUP / E)}，"
          f"即每组 {GROUP} 个 token 中每个专家可收的分配数")

drops = {}
for name in ("aux α=0", "aux α=0.1"):
    model = runs[name][0]
    drops[name] = []
    for cf in FACTORS:
        capacity = math.ceil(cf * K * GROUP / E)
        dropped = 0
        squared_error = 0.0
        with torch.no_grad():
            for start in range(0, X_TEST.shape[0], GROUP):
                x, y = X_TEST[start:start + GROUP], Y_TEST[start:start + GROUP]
                _, chosen, _ = model.route(x)
                keep = capacity_mask(chosen, capacity)
                out, _, _ = model(x, keep=keep)
                dropped += int((keep == 0).sum())
                squared_error += F.mse_loss(out, y, reduction="sum").item()
        share = dropped / (X_TEST.shape[0] * K)
        mse = squared_error / Y_TEST.numel()
        drops[name].append((share, mse))

print(f"\n{'路由器':<8} {'容量因子':>6} {'丢弃':>8} {'测试 MSE':>10}")
for name, rows in drops.items():
    for cf, (share, mse) in zip(FACTORS, rows, strict=True):
        print(f"{name:<10} {cf:>6} ≈ {100 * share:6.1f}% ≈ {mse:.4f}")
    print(f"{name:<10} {'∞':>6} ≈ {0.0:6.1f}% ≈ {results[name]['mse']:.4f}")

# %% [markdown]
# 均衡的路由器在容量因子 1.0 时仍会丢掉几个百分点，因为即使平均而言均衡，路由器在某些组里也会给某个专家送去多于 $C$ 个分配；1.25 就消除了其中大部分。不均衡的路由器在所试的每个容量因子下都丢掉很大一部分：它最忙的专家收到的是平均值的好几倍，超出了这些因子所允许的范围，而它的任务损失随着每个被丢弃的分配而上升。提高容量因子能减少丢弃，代价是缓冲区里填充的空槽位、额外的显存，以及在专家并行下更大的 all-to-all 消息；无丢弃（dropless）实现（[MegaBlocks，Gale 等人 2022](https://arxiv.org/abs/2211.15841)，第 4 节）让每个专家恰好处理它收到的 token，从而不必做这个选择。

# %% alt=["\u4e24\u5f20\u6298\u7ebf\u56fe\uff0c\u6a2a\u8f74\u4e3a\u5bb9\u91cf\u56e0\u5b50\uff081.0 \u5230 2.0\uff09\uff0c\u753b\u51fa\u4e0d\u5747\u8861\u7684\u8def\u7531\u5668\uff08\u03b1 = 0\uff09\u548c\u5747\u8861\u7684\u8def\u7531\u5668\uff08\u03b1 = 0.1\uff09\u3002\u5de6\u56fe\uff0c\u88ab\u4e22\u5f03\u7684 token-\u4e13\u5bb6\u5206\u914d\uff1a\u4e0d\u5747\u8861\u7684\u8def\u7531\u5668\u4ece\u7ea6 49% \u964d\u5230 17%\uff0c\u5747\u8861\u7684\u5728 1.0 \u65f6\u7ea6 4%\uff0c\u4ece 1.25 \u8d77\u51e0\u4e4e\u4e3a\u96f6\u3002\u53f3\u56fe\uff0c\u7559\u51fa\u96c6 MSE\uff0c\u865a\u7ebf\u4e3a\u65e0\u5bb9\u91cf\u4e0a\u9650\u65f6\u7684\u503c\uff1a\u4e0d\u5747\u8861\u8def\u7531\u5668\u7684\u635f\u5931\u4ece\u7ea6 0.21 \u964d\u5230 0.08\uff0c\u4ecd\u8fdc\u9ad8\u4e8e\u4e0d\u4e22\u5f03\u65f6\u7684 0.019\uff1b\u5747\u8861\u7684\u5219\u4fdd\u6301\u5728 0.028 \u9644\u8fd1\u3002"]
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for name, rows in drops.items():
    axes[0].plot(FACTORS, [100 * s for s, _ in rows], "o-", label=name)
    axes[1].plot(FACTORS, [m for _, m in rows], "o-", label=name)
    axes[1].axhline(results[name]["mse"], ls="--", lw=0.8,
                    color=axes[1].lines[-1].get_color())
axes[0].set_xlabel("容量因子")
axes[0].set_ylabel("被丢弃的分配（%）")
axes[0].set_title("被丢弃的 token-专家分配")
axes[1].set_xlabel("容量因子")
axes[1].set_ylabel("留出集 MSE")
axes[1].set_title("有丢弃时的任务损失（虚线：无容量上限）")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 在真实运行中要测什么
#
# 同样三个数可以推广到真实模型：每隔几百步记录各层的专家负载（最大/平均决定了专家并行中最慢那个 rank 的工作量）；如果实现有容量上限，记录被丢弃分配的比例；把均衡项或偏置值和任务损失记在一起。某层的最大/平均不断攀升而损失持平，说明它在为闲置专家付费；某层均衡完美但损失落后于可比的运行，可能是均衡约束过强。
