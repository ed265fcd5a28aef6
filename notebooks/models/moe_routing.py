# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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
# # MoE routing: load balance and dropped tokens
#
# This notebook trains a small mixture-of-experts layer on a CPU and measures the two things
# the **Mixture of experts** page of this part warns about: how unevenly a router spreads tokens over
# its experts, and how many token-expert assignments a fixed expert capacity throws away. The
# layer is the one the page describes: a linear router, a softmax over the experts, the top
# $k = 2$ experts per token with their gates renormalized to sum to one
# ([Mixtral, Jiang et al. 2024](https://arxiv.org/abs/2401.04088), Section 2.1), and eight tiny
# two-layer MLP experts. The data come from four clusters of very unequal size, so a router
# that is left alone sends most tokens to the few experts that the big cluster prefers.
#
# What you should take away:
#
# 1. Without a balancing term the trained router leaves some experts idle and overloads others
#    (max load several times the mean).
# 2. The Switch Transformer auxiliary loss
#    ([Fedus et al. 2021](https://arxiv.org/abs/2101.03961), Section 2.2, Eq. 4) evens the load
#    as its coefficient $\alpha$ grows, and at the largest $\alpha$ the task loss gets worse:
#    balancing is not free. The bias update of auxiliary-loss-free balancing
#    ([Wang et al. 2024](https://arxiv.org/abs/2408.15664)) balances without adding a loss term.
# 3. With a capacity factor of 1.0 even a well-balanced router drops some assignments, because
#    the load of one batch fluctuates around its mean; an unbalanced router drops a large share
#    at every capacity factor tried, and the task loss follows the dropped share.
#
# Everything runs in about ten seconds on one CPU thread. The numbers come from real training
# with fixed seeds; a different CPU can round differently, so trained values are printed after
# `≈`.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib_inline.backend_inline import set_matplotlib_formats

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 9})
torch.set_num_threads(1)
torch.manual_seed(0)

# %% [markdown]
# ## The task: clusters of unequal size
#
# Each input $x \in \mathbb{R}^{16}$ is drawn around one of four centres, chosen with
# probabilities 55%, 25%, 12% and 8%. The target is a different random nonlinear map for each
# cluster, $y = \tanh(M_c x)$, so an expert that specializes on one cluster has something to
# learn. Training batches hold 512 tokens; a fixed held-out set of 4,096 tokens measures loss
# and load.

# %%
D, HIDDEN, E, K = 16, 8, 8, 2          # model width, expert MLP width, experts, experts per token
CLUSTER_SHARE = torch.tensor([0.55, 0.25, 0.12, 0.08])
BATCH, STEPS, LR = 512, 300, 1e-2

g = torch.Generator().manual_seed(0)
CENTRES = 2.0 * torch.randn(len(CLUSTER_SHARE), D, generator=g)
MAPS = torch.randn(len(CLUSTER_SHARE), D, D, generator=g) / math.sqrt(D)


def sample(n, seed):
    """n tokens: inputs, targets and the cluster each came from."""
    gen = torch.Generator().manual_seed(seed)
    cluster = torch.multinomial(CLUSTER_SHARE, n, replacement=True, generator=gen)
    x = CENTRES[cluster] + 0.5 * torch.randn(n, D, generator=gen)
    y = torch.tanh(torch.einsum("nij,nj->ni", MAPS[cluster], x))
    return x, y, cluster


X_TEST, Y_TEST, C_TEST = sample(4096, seed=7)
print("held-out tokens per cluster:", torch.bincount(C_TEST).tolist())

# %% [markdown]
# ## The MoE layer
#
# The router is one $16 \times 8$ matrix. Its softmax gives each token a probability
# $p_i(x)$ per expert; the top two are kept and renormalized into gates. A per-expert `bias`
# (zero unless we train with auxiliary-loss-free balancing, below) is added to the scores
# **only to choose** the experts; the gates still come from $p_i(x)$, as in DeepSeek-V3
# ([DeepSeek-AI 2024](https://arxiv.org/abs/2412.19437), Section 2.1.2, Eq. 16).
#
# With eight experts this small it is simpler to run every expert on every token and keep the
# two chosen outputs; a real implementation sends each token only to its experts, which gives
# the same output. The `keep` argument zeroes assignments that a capacity limit drops (used in
# the second half).

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
        gates = top / top.sum(dim=-1, keepdim=True)                 # renormalized over top-k
        return probs, chosen, gates

    def forward(self, x, keep=None):
        probs, chosen, gates = self.route(x)
        hidden = F.gelu(torch.einsum("nd,edh->neh", x, self.w_in))
        every = torch.einsum("neh,ehd->ned", hidden, self.w_out)    # all experts, (n, E, D)
        picked = every.gather(1, chosen.unsqueeze(-1).expand(-1, -1, D))
        weights = gates if keep is None else gates * keep
        return (weights.unsqueeze(-1) * picked).sum(dim=1), probs, chosen


layer = MoELayer()
expert_params = layer.w_in.numel() + layer.w_out.numel()
router_params = layer.router.weight.numel()
print(f"total parameters  = {expert_params + router_params}  "
      f"(experts {expert_params}, router {router_params})")
print(f"active per token  = {K * expert_params // E + router_params}  "
      f"({K} of {E} experts plus the router)")

# %% [markdown]
# Memory holds all eight experts, but each token runs through two: the total/active split of
# the page, at toy scale.
#
# ## Load and its imbalance
#
# The **load** of expert $i$ is the number of token-expert assignments it receives. We report
# two summaries: max load over mean load (1.0 is perfect; it is what sizes the busiest GPU
# under expert parallelism) and the coefficient of variation, standard deviation over mean. An
# untrained router is already unbalanced here, because most tokens sit near one centre and
# land on the same experts.

# %%
def loads(chosen):
    return torch.bincount(chosen.reshape(-1), minlength=E).float()


def imbalance(load):
    return (load.max() / load.mean()).item(), (load.std(unbiased=False) / load.mean()).item()


with torch.no_grad():
    _, chosen0, _ = layer.route(X_TEST)
load0 = loads(chosen0)
max_over_mean, cv = imbalance(load0)
print("untrained router, load per expert:", [int(v) for v in load0.tolist()])
print(f"max/mean ≈ {max_over_mean:.2f}, CV ≈ {cv:.2f}")

# %% [markdown]
# ## Training with an auxiliary loss, or with a routing bias
#
# The Switch Transformer loss is $\alpha \cdot E \sum_i f_i P_i$, where $f_i$ is the fraction of
# assignments that went to expert $i$ (counted, so it has no gradient) and $P_i$ the mean
# router probability for expert $i$ over the batch (which has one). It equals $\alpha$ when
# both are uniform at $1/E$ and grows when load and probability pile onto the same experts. We
# train the same layer, from
# the same initial weights and on the same batches, with $\alpha \in \{0, 10^{-3}, 10^{-2},
# 10^{-1}\}$ (Switch Transformer used $10^{-2}$, Section 2.2).
#
# The fifth run uses no auxiliary loss; after every step it lowers the bias of each expert
# that received more than the mean load and raises the bias of each one below it by
# $\gamma = 0.01$, the sign rule of auxiliary-loss-free balancing. DeepSeek-V3 uses
# $\gamma = 0.001$ (Section 4.2); this toy run is only 300 steps long, so it needs a faster
# rate.

# %%
def aux_loss(probs, chosen):
    f = loads(chosen) / chosen.numel()       # fraction of assignments per expert, no gradient
    p = probs.mean(dim=0)                    # mean router probability per expert
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
print(f"{'run':<14} {'max/mean':>10} {'CV':>8} {'idle':>5} {'E·Σf·P':>8} {'test MSE':>10}")
for name, r in results.items():
    mx, cv = imbalance(r["load"])
    idle = int((r["load"] == 0).sum())
    print(f"{name:<14} ≈ {mx:8.2f} ≈ {cv:6.2f} ≈ {idle:3d} ≈ {r['balance_term']:6.2f} "
          f"≈ {r['mse']:.4f}")

# %% [markdown]
# Read the table from top to bottom. With $\alpha = 0$ the router has learnt to serve the big
# cluster with a few experts and leaves some idle: those experts hold parameters and receive no
# gradient. Small coefficients already put the idle experts to work but leave the busiest one
# well above the mean; $10^{-1}$ brings max/mean close to 1, and its test loss is the highest
# of the four: the balancing gradient pulls the router away from the assignment that suits the
# task (the "interference gradients" of Wang et al., abstract). `E·Σf·P` is the balancing term
# without $\alpha$; it falls towards 1 as load and probability spread out. The bias run
# balances the load without any loss term; in a toy this small its task loss is within the
# noise of the auxiliary-loss runs (the paper measures its gain on MoE models of up to 3B
# parameters trained on up to 200B tokens).

# %% alt=["Three bar charts comparing five routers trained on the same task: auxiliary-loss coefficients \u03b1 of 0, 0.001, 0.01 and 0.1, and a routing bias. Left, load imbalance after training: max/mean falls from about 3.2 at \u03b1 = 0 to about 1.1 at \u03b1 = 0.1 (the bias gives about 1.2), and the coefficient of variation from about 1.1 to under 0.1. Middle, held-out MSE: lowest at \u03b1 = 0 (about 0.019) and highest at \u03b1 = 0.1 (about 0.028). Right, assignments per expert for 4,096 tokens: with \u03b1 = 0 experts 0 and 1 get none and expert 2 over 3,000, while with \u03b1 = 0.1 every expert gets close to the uniform 1,024."]
names = list(results)
fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
ax = axes[0]
positions = range(len(names))
ax.bar([p - 0.2 for p in positions], [imbalance(results[n]["load"])[0] for n in names],
       width=0.4, label="max / mean")
ax.bar([p + 0.2 for p in positions], [imbalance(results[n]["load"])[1] for n in names],
       width=0.4, label="coefficient of variation")
ax.axhline(1.0, color="grey", lw=0.8, ls="--")
ax.set_xticks(list(positions), names, rotation=25, ha="right")
ax.set_title("load imbalance after training")
ax.legend()

ax = axes[1]
ax.bar(list(positions), [results[n]["mse"] for n in names], color="tab:red")
ax.set_xticks(list(positions), names, rotation=25, ha="right")
ax.set_title("held-out task loss (MSE)")

ax = axes[2]
width = 0.4
for shift, name in ((-0.2, "aux α=0"), (0.2, "aux α=0.1")):
    ax.bar([e + shift for e in range(E)], results[name]["load"].tolist(), width=width,
           label=name)
ax.axhline(X_TEST.shape[0] * K / E, color="grey", lw=0.8, ls="--", label="uniform")
ax.set_xlabel("expert")
ax.set_title("assignments per expert (4,096 tokens, top-2)")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Capacity factor and dropped tokens
#
# With static shapes every expert gets a buffer of fixed size, the **expert capacity**
# ([Fedus et al. 2021](https://arxiv.org/abs/2101.03961), Section 2.2, Eq. 3), here for top-$k$
# routing:
#
# $$ C = \left\lceil \text{capacity factor} \cdot \frac{k \cdot \text{tokens per group}}{E}
#    \right\rceil . $$
#
# Assignments beyond $C$ are dropped: the expert skips them and the token keeps only its other
# expert, or nothing from this layer if both are dropped (in a transformer the residual
# connection still carries it). We split the held-out tokens into groups of 512, as in training,
# fill the buffers with every token's first choice before any second choice (GShard's order,
# [Lepikhin et al. 2020](https://arxiv.org/abs/2006.16668), Section 2.2, Algorithm 1) and
# count what overflows, for the unbalanced router ($\alpha = 0$) and the balanced one
# ($\alpha = 10^{-1}$).

# %%
GROUP = 512
FACTORS = (1.0, 1.25, 1.5, 2.0)


def capacity_mask(chosen, capacity):
    """1 for assignments that fit in their expert's buffer, 0 for dropped ones."""
    keep = torch.zeros(chosen.shape)
    filled = torch.zeros(E, dtype=torch.long)
    for j in range(K):                                     # all first choices, then second ones
        one_hot = F.one_hot(chosen[:, j], E)
        position = filled[chosen[:, j]] + (one_hot.cumsum(0) * one_hot).sum(1) - 1
        keep[:, j] = (position < capacity).float()
        filled += one_hot.sum(0)
    return keep


for cf in FACTORS:
    print(f"capacity factor {cf:<4}: C = {math.ceil(cf * K * GROUP / E)} assignments "
          f"per expert per group of {GROUP}")

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

print(f"\n{'router':<10} {'factor':>6} {'dropped':>10} {'test MSE':>11}")
for name, rows in drops.items():
    for cf, (share, mse) in zip(FACTORS, rows, strict=True):
        print(f"{name:<10} {cf:>6} ≈ {100 * share:6.1f}% ≈ {mse:.4f}")
    print(f"{name:<10} {'∞':>6} ≈ {0.0:6.1f}% ≈ {results[name]['mse']:.4f}")

# %% [markdown]
# The balanced router still drops a few percent at a capacity factor of 1.0, because even a
# router that is balanced on average sends more than $C$ assignments to some expert in some
# group; 1.25 removes most of that. The unbalanced router drops a large share at every factor
# tried: its busiest expert receives several times the mean, more than any of these factors
# allow, and its task loss rises with every dropped assignment. Raising the factor buys fewer
# drops with padded, idle buffer slots, extra memory and, under expert parallelism, larger
# all-to-all messages; dropless implementations
# ([MegaBlocks, Gale et al. 2022](https://arxiv.org/abs/2211.15841), Section 4) avoid the choice
# by giving each expert exactly the tokens it received.

# %% alt=["Two line charts against the capacity factor (1.0 to 2.0) for the unbalanced router (\u03b1 = 0) and the balanced one (\u03b1 = 0.1). Left, dropped token-expert assignments: the unbalanced router drops from about 49% down to 17%, the balanced one about 4% at 1.0 and almost none from 1.25 on. Right, held-out MSE, with dashed lines for no capacity limit: the unbalanced router's loss falls from about 0.21 to 0.08, still far above its 0.019 without drops, while the balanced one stays near its 0.028."]
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for name, rows in drops.items():
    axes[0].plot(FACTORS, [100 * s for s, _ in rows], "o-", label=name)
    axes[1].plot(FACTORS, [m for _, m in rows], "o-", label=name)
    axes[1].axhline(results[name]["mse"], ls="--", lw=0.8,
                    color=axes[1].lines[-1].get_color())
axes[0].set_xlabel("capacity factor")
axes[0].set_ylabel("dropped assignments (%)")
axes[0].set_title("dropped token-expert assignments")
axes[1].set_xlabel("capacity factor")
axes[1].set_ylabel("held-out MSE")
axes[1].set_title("task loss with drops (dashed: no capacity limit)")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What to measure on a real run
#
# The same three numbers scale to a real model: per-layer expert loads every few hundred steps
# (max/mean is what sizes the slowest expert-parallel rank), the share of dropped assignments
# if the implementation has a capacity limit, and the balancing term or bias values next to the
# task loss. A layer whose max/mean climbs while the loss is flat is paying for idle experts;
# one whose balance is perfect but whose loss lags a comparable run may be over-regularized.
