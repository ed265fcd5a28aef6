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
# # Reading a memory timeline
#
# An out-of-memory error names the allocation that failed, not the tensors that filled the
# memory. A *memory timeline* answers the second question: the bytes alive at every moment of a
# few training steps, split by what they are for (parameters, gradients, optimizer state,
# activations, temporaries). This notebook records one on a CPU with `torch.profiler`, reads the
# shape of a healthy training step, then breaks the loop with a leak and finds the leaking tensors
# with a census of live tensors. The **Out of memory** page of the Debugging chapter explains the GPU side: the error
# message, the caching allocator and the snapshots that `pytorch.org/memory_viz` draws.
#
# Everything runs on a CPU in a few seconds. The byte counts are exact and the same on every
# machine (the profiler records the size each operator asked for); only the time axis varies.

# %%
import contextlib
import gc
import os
import sys
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
from matplotlib_inline.backend_inline import set_matplotlib_formats
from torch.profiler import ProfilerActivity, profile, record_function
from torch.profiler._memory_profiler import _CATEGORY_TO_INDEX, MemoryProfileTimeline

set_matplotlib_formats("png")
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "axes.grid": True,
                     "grid.alpha": 0.3, "font.size": 10})
torch.set_num_threads(1)
MiB = 2**20


@contextlib.contextmanager
def quiet_stderr():
    """Send file descriptor 2 to /dev/null: the profiler's backend (Kineto) prints time-stamped
    status lines there when it starts and stops, which would make the outputs differ run to run."""
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
# ## The model and the training step
#
# Six hidden layers of width 512 with GELU, a 10-class head, cross-entropy, Adam, a micro-batch
# of 512 samples in fp32. The sizes are chosen so that the activations of one micro-batch
# (12 MiB) are about twice the parameters (6 MiB), as in a real training run at a
# reasonable micro-batch size. `train_step` is an ordinary step; with `leak=True` it also
# computes a "monitoring" loss on a held-out batch without `torch.no_grad()` and keeps the
# tensor in a list without `.item()`, a mistake that is easy to make in a logging helper.

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
    if leak:  # the bug: no torch.no_grad(), no .item()
        history.append(nn.functional.cross_entropy(model(x_val), y_val))


model, opt = make_model()
param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
# What autograd saves for the backward pass: the input of every GELU and of every Linear but the
# first (whose input is the batch itself), plus the cross-entropy's log-softmax.
saved_bytes = 4 * BATCH * (2 * DEPTH - 1 + 1) * WIDTH + 4 * BATCH * CLASSES
input_bytes = x.nbytes
print(f"parameters        = {param_bytes / MiB:6.2f} MiB ({param_bytes // 4:,} fp32 values)")
print(f"gradients         = {param_bytes / MiB:6.2f} MiB (one per parameter)")
print(f"Adam state        = {2 * param_bytes / MiB:6.2f} MiB (exp_avg and exp_avg_sq)")
print(f"saved activations = {saved_bytes / MiB:6.2f} MiB per micro-batch")
print(f"input batch       = {input_bytes / MiB:6.2f} MiB")

# %% [markdown]
# ## Four steps under the profiler
#
# `profile_memory=True` makes the profiler record every allocation and free; with
# `record_shapes=True` and `with_stack=True` as well, `torch.profiler._memory_profiler` can
# follow each tensor through the autograd graph and the optimizer and give it a category. The
# public `prof.export_memory_timeline(path, device="cpu")` writes that result to a file (and
# works for the CPU), but in torch 2.13 it is deprecated and warns, so the cell below calls the
# two private pieces it is made of: `prof._memory_profile()` and
# `MemoryProfileTimeline(...)._coalesce_timeline("cpu")`, which returns the times and, for each
# time, the live bytes of each category. The loop notes the clock at each step's start and end
# (the profiler's timestamps are nanoseconds since the epoch, like `time.time_ns()`) and wraps
# each step in `record_function("step k")`, which names it in the profiler's own trace.

# %% alt=["Stacked area chart of live CPU memory (MiB, 0 to 40) by category over four training steps of a healthy loop: parameters at the bottom (about 6 MiB), optimizer state (about 12 MiB) appearing at the end of step 1, and inputs. In each step the red activations band climbs in twelve 1 MiB stairs during the forward pass and shrinks during the backward pass while the blue gradients band grows, peaking near 32 MiB; every step ends at the same floor, so nothing leaks."]
CATEGORIES = {  # the profiler's category -> (label, colour), drawn bottom to top
    "PARAMETER": ("parameters", "tab:green"),
    "OPTIMIZER_STATE": ("optimizer state", "goldenrod"),
    "INPUT": ("inputs", "black"),
    "GRADIENT": ("gradients", "tab:blue"),
    "ACTIVATION": ("activations", "tab:red"),
    "AUTOGRAD_DETAIL": ("autograd detail", "lightsteelblue"),
    "TEMPORARY": ("temporaries", "mediumpurple"),
    None: ("uncategorized", "grey"),
}


def record_timeline(steps, leak=False):
    """Runs `steps` training steps under the profiler. Returns the time in ms from the start of
    step 1, the live bytes by category ({name: array}), and the (start, end) of each step in ms."""
    model, opt = make_model()
    history, spans = [], []
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                 record_shapes=True, with_stack=True) as prof:
        for step in range(1, steps + 1):
            start = time.time_ns()  # the profiler's timestamps are in ns since the epoch too
            with record_function(f"step {step}"):
                train_step(model, opt, history, leak)
            spans.append((start / 1e6, time.time_ns() / 1e6))
    times_us, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline("cpu")
    sizes = np.array(sizes)[:, 1:]  # column 0 is unused
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
        ax.text((start + end) / 2, 0.97, f"step {k}", transform=ax.get_xaxis_transform(),
                ha="center", va="top", fontsize=9)
    ax.set_xlim(spans[0][0], spans[-1][1])
    ax.set_ylabel("live memory (MiB)")


STEPS = 4
times, by_category, spans = record_timeline(STEPS)
fig, ax = plt.subplots(figsize=(10, 4.5))
draw(ax, times, by_category, spans)
ax.set_ylim(0, 40)
ax.set_xlabel("time since the start of step 1 (ms)")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
ax.set_title("Healthy training loop: live CPU memory by category")
fig.tight_layout()
plt.show()

# %% [markdown]
# What to read in the picture:
#
# * **The forward staircase.** Each layer saves its input for the backward pass, so the red
#   activations band climbs one step per layer: twelve 1 MiB steps.
# * **The backward release.** The backward pass walks the layers in reverse; each layer's saved
#   tensors are freed as soon as its gradient is computed, while the blue gradients band grows
#   by the size of that layer's parameters. The two bands cross: the gradients of all layers and
#   the activations of all layers are never alive at the same time.
# * **The optimizer state appears at the first step.** Adam creates `exp_avg` and `exp_avg_sq`
#   lazily, on its first `step()`: the yellow band, twice the parameters, appears at the end of
#   step 1 and never goes away. Step 1 therefore has a lower peak than the others: its forward
#   and backward ran without the optimizer state.
# * **The steady state from step 2.** Every later step has the same shape and the same peak,
#   and memory returns to the same floor between steps (parameters, Adam state and the input
#   batch). A floor that rises is a leak, which the second half of this notebook builds.
#
# The same numbers, per step (the peak of each step, what the peak is made of, and the floor
# at the end of the step):

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
    print(f"step {k}: peak = {peak / MiB:5.2f} MiB, floor after the step = {floor / MiB:5.2f} MiB"
          f"\n        at the peak (MiB): {parts}")

# %% [markdown]
# The profiler's categories are inferred, not declared: it classifies a tensor by how it is
# used in the autograd graph and by the optimizer, and a few short-lived tensors end up in the
# wrong band or in none (the small grey and pale blue slivers during the backward pass, or the
# extra 1 MiB of "parameters" and "activations" at step 1's peak, inside Adam's first update). For
# finding *which kind* of memory dominates the peak this does not matter.
#
# ## The arithmetic, and why the peak is below it
#
# The **Memory anatomy** page of the Training chapter estimates training memory term by term,
# and its estimator script does it for real models. For this model
# the sum of all terms is an upper bound on the peak, and the measurement shows where the peak
# really is: at the start of the backward pass, when all activations are still alive and no
# parameter has a gradient yet.

# %%
upper_bound = 4 * param_bytes + saved_bytes + input_bytes
steady_peak = max(peak for k, peak, _, _ in step_rows(times, by_category, spans) if k > 1)
print(f"params + grads + Adam (2x) + activations + input = {upper_bound / MiB:.2f} MiB")
print(f"measured peak, steps 2 to {STEPS}                    = {steady_peak / MiB:.2f} MiB")
print(f"without the gradients (params + Adam + activations + input) = "
      f"{(3 * param_bytes + saved_bytes + input_bytes) / MiB:.2f} MiB")
print("peak below the sum of all terms:", steady_peak < upper_bound)

# %% [markdown]
# The measured peak is the "no gradients yet" sum plus about one megabyte (the band the
# profiler calls autograd detail: the gradient flowing back into the last hidden layer). The
# gradients of the parameters and the full set of activations never coexist: the sum of all
# terms is a safe budget, not a prediction. On a GPU the same reasoning holds, plus what the
# profiler cannot see here: the caching allocator's rounding and cache, kernel workspaces, the
# CUDA context and NCCL buffers. The **Out of memory** page covers those.
#
# ## A leak: the floor rises every step
#
# Now the same loop with `leak=True`. The monitoring loss is computed with autograd on, so it
# carries a graph whose nodes hold the saved activations of a full forward pass; the list keeps
# the loss, the loss keeps its graph, and nothing ever calls `backward()` on it to free them.

# %% alt=["Two stacked memory timelines side by side with the same y axis (live memory in MiB) over four training steps: on the left the healthy loop, which returns to the same floor after every step and peaks near 32 MiB; on the right the leaking loop, where the red activations band does not go back down, so the floor and the peak rise by about 12 MiB every step, to about 69 MiB in step 4."]
leak_times, leak_by_category, leak_spans = record_timeline(STEPS, leak=True)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
draw(axes[0], times, by_category, spans)
axes[0].set_title("healthy")
draw(axes[1], leak_times, leak_by_category, leak_spans)
axes[1].set_title("leaking: monitoring loss kept with its graph")
for ax in axes:
    ax.set_xlabel("time since the start of step 1 (ms)")
axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
fig.tight_layout()
plt.show()

leak_rows = list(step_rows(leak_times, leak_by_category, leak_spans))
for (k, peak, floor, _), (_, _, previous, _) in zip(leak_rows, [(0, 0, np.nan, "")] + leak_rows, strict=False):
    rise = "" if np.isnan(previous) else f", {(floor - previous) / MiB:+.2f} MiB"
    print(f"step {k}: peak = {peak / MiB:5.2f} MiB, floor after the step = {floor / MiB:5.2f} MiB{rise}")

# %% [markdown]
# The healthy loop returns to the same floor after every step; the leaking one ends every step
# about 12 MiB higher than the previous one, and the leaked bytes sit in the activations band.
# On a GPU with 80 GB the same pattern runs for hundreds or thousands of steps before the
# out-of-memory error, which then points at whatever allocation happened to come last. The
# timeline, or just `torch.cuda.memory_allocated()` logged at the same point of every step,
# shows the staircase long before.
#
# ## Finding the leaking tensors: a census across steps
#
# The timeline says *how much* leaks per step; the next question is *which tensors*. Python's
# garbage collector can list every object it tracks, tensors included. A census counts the live
# tensors by shape, dtype and whether they carry an autograd graph (`grad_fn`), once after step
# k and once after step k + 1; whatever grew by the same amount every step is the leak.

# %%
def census():
    """Live tensors known to Python's gc: {(shape, dtype, has grad_fn): [count, bytes]}."""
    gc.collect()
    rows = {}
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # type(), not isinstance(): no __class__ lookups
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
print("what changed between step 3 and step 4:")
for (shape, dtype, has_graph), count, nbytes in census_diff(*snapshots):
    print(f"  shape {str(list(shape)):12} {dtype:8} grad_fn={has_graph!s:5}  {count:+d} tensor(s), "
          f"{nbytes:+,} bytes")

# %% [markdown]
# Two rows grew, and both point at the leak: one more scalar with a `grad_fn` per step (the
# monitoring loss kept in `history`) and twelve more 512 × 512 fp32 tensors with a `grad_fn`,
# exactly 12 MiB, the rise per step that the timeline showed. They are the outputs of the six
# Linear and six GELU layers, saved by autograd for a backward pass that never comes. The
# census sees them because PyTorch keeps a tensor's Python object alive for as long as the C++
# tensor lives once Python has seen it. Tensors created inside one operator (the log-softmax of
# `cross_entropy`, for instance) never had a Python object and stay invisible to a census.
#
# To connect the two rows, and to measure everything a suspect keeps alive, walk the autograd
# graph from it: every node exposes what it saved as `_saved_*` attributes (reading one after
# `backward()` raises, because backward freed it).

# %%
def graph_saved_bytes(tensor, exclude=()):
    """Bytes of the tensors saved in the autograd graph behind `tensor`, counting each storage
    once and skipping the storages of `exclude` (the parameters, which are not leaked)."""
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
            except RuntimeError:  # freed by backward()
                continue
            if isinstance(value, torch.Tensor):
                ptr = value.untyped_storage().data_ptr()
                if ptr not in skip and ptr not in seen_storages:
                    seen_storages.add(ptr)
                    total += value.untyped_storage().nbytes()
    return total, len(seen_nodes)


leaked = [item for item in history if isinstance(item, torch.Tensor)]
held, nodes = graph_saved_bytes(leaked[-1], exclude=list(model.parameters()))
print(f"leaked tensors in `history`: {len(leaked)}")
print(f"the last one's graph: {nodes} nodes holding {held / MiB:.2f} MiB of saved tensors "
      f"(the monitoring batch is {x_val.nbytes / MiB:.2f} MiB of it)")

trained = nn.functional.cross_entropy(model(x), y)
trained.backward()
opt.zero_grad(set_to_none=True)
held_after_backward, _ = graph_saved_bytes(trained, exclude=list(model.parameters()))
print(f"a training loss kept after backward(): graph holds {held_after_backward} bytes of saved tensors")

# %% [markdown]
# The graph behind one leaked scalar holds 13 MiB: the twelve activations of the census, the
# log-softmax the census could not see, and the monitoring batch (not in the census diff because
# that tensor was alive all along). A *training* loss kept after `backward()` holds no saved
# tensors (backward freed them) but still keeps its graph's nodes, a slow leak that only shows
# after many steps. The fix for both is the same: keep numbers, not tensors (`.item()`, or
# `.detach()` if the value must stay on the GPU), and compute anything that is not trained on
# under `torch.no_grad()`. With the fix the census is flat:

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
print("changes between two steps after the fix:", census_diff(before, census()) or "none")

# %% [markdown]
# Common causes of the same staircase in real training code: losses or logits appended to a
# list for logging; a running total such as `total_loss += loss` (keeps every step's graph
# nodes); metrics computed from model outputs without `torch.no_grad()`; a cache keyed by step
# or by input shape (one entry per new sequence length); hooks that store activations and are
# never removed; and tensors captured by a closure or an exception traceback kept around for
# later inspection.
#
# ## On a GPU
#
# The CPU profiler above is the portable way to see categories. On a GPU, PyTorch's CUDA
# caching allocator can record its own history, including the Python stack of every allocation,
# and dump it to a pickle that the viewer at
# [pytorch.org/memory_viz](https://pytorch.org/memory_viz) opens in the browser (the file is
# read locally, not uploaded); see
# [Understanding CUDA Memory Usage](https://docs.pytorch.org/docs/stable/torch_cuda_memory.html):
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
# The *Active Memory Timeline* tab draws each allocation as a band, stacked over time, and
# shows its stack trace on hover: the forward staircase, the backward release and Adam's state
# appearing at the first step look as they do above, and a leak is a set of bands that start in
# every step and never end. The *Allocator State History* tab shows the allocator's segments
# and the blocks inside them, which is where fragmentation becomes visible. The
# **Out of memory** page explains both.
