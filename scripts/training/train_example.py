#!/usr/bin/env python
"""train_example.py: a small but real data-parallel training loop (DDP or FSDP2) that logs like a
production job: loss, step and data-loading time, tokens/s, achieved TFLOPS, MFU and memory per
step, with distributed checkpoints (torch.distributed.checkpoint) that it can resume from.

A decoder-only transformer (pre-norm blocks, causal attention, GELU MLP) learns token sequences
from a fixed random "grammar" (each token is followed by ``perm[token]`` with probability 0.9),
so the loss falls fast from ln(V) towards the entropy of the noise; batches are a function of
(seed, step, rank), so a resumed run sees the data an uninterrupted one would. ``--strategy ddp``
all-reduces the gradients of a replicated model; ``fsdp`` shards parameters, gradients and
optimizer state with FSDP2's ``fully_shard`` (ZeRO-3). Rank 0 logs every ``--log-every`` steps,
reading the statistics back from the device once per log line, to the terminal, ``--json``,
``--metrics-jsonl`` and ``--tensorboard`` (the Training metrics page explains each key); MFU
needs ``--peak-tflops`` or a known GPU. TFLOPS are decimal (1e12 FLOP/s), MiB 2**20 bytes.
Re-running with the same ``--checkpoint-dir`` resumes. Under SLURM: one torchrun per node, or
srun with MASTER_ADDR and MASTER_PORT exported. CPU, two processes (gloo)::

    torchrun --standalone --nproc-per-node 2 train_example.py --strategy fsdp --steps 40

Exit status: 0 ok, 1 failure (a dead peer, a bad checkpoint, a nan/inf loss), 2 usage, 130 Ctrl-C.

Example output (2 CPU processes on a busy 2-core VM; the Model parallelism chapter shows it all)::

    $ torchrun --standalone --nproc-per-node 2 scripts/training/train_example.py \\
          --strategy ddp --steps 30 --log-every 10 --peak-tflops 0.1
    ...
      step      loss         lr    gnorm   step_ms   data_ms      tok/s   TFLOPS     MFU   peak RSS MiB
         1    5.7201  3.000e-03    0.626    127.12      2.80      16111   0.0459   45.9%            369
    ...
    # done: 30 steps, loss 5.7201 -> 0.9055, mean 17676 tokens/s (steps 2-30)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import gc
import json
import logging
import math
import os
import resource
import sys
import tempfile
import threading
import time
import traceback

PROG = "train_example.py"
CKPT_PREFIX = "step_"
CHECKPOINT_ENTRIES = "model, optim and trainer entries"
SPIKE_WINDOW = 50  # steps of loss history behind the spike counter's running median
MIN_LR_RATIO = 0.1  # cosine decays to 0.1 x the peak (GPT-3, Chinchilla; Hyper-parameters page)
# The MFU column's peak when --peak-tflops is not given: the dense bf16 figure of the catalogue
# row (data/compute/accelerators.yml, built in below as ACCELERATOR_ROWS) for the first of these
# substrings found in the CUDA device name. NVIDIA lists "with sparsity" figures, twice these.
KNOWN_PEAKS = (("H100 PCIe", "NVIDIA H100 PCIe"), ("A100", "NVIDIA A100 SXM 80GB"),
               ("H100", "NVIDIA H100 SXM"), ("H200", "NVIDIA H200 SXM"))


def matmul_params(layers: int, hidden: int, vocab: int) -> int:
    """N of 6N: per block 4 d^2 (QKV + output projection) + 8 d^2 (MLP d->4d->d), plus the
    d x V output projection. The embedding lookup does no matmul and is not counted."""
    return layers * 12 * hidden * hidden + hidden * vocab


def model_flops_per_token(layers: int, hidden: int, vocab: int, seq_len: int) -> float:
    """Training FLOPs per token, 6N + 12 L d T (PaLM, appendix B; d = attention width)."""
    return 6.0 * matmul_params(layers, hidden, vocab) + 12.0 * layers * hidden * seq_len


def lr_at(step: int, args: argparse.Namespace) -> float:
    """Learning rate of ``step`` (1-based): linear warmup ``lr * step / W`` for the first W
    steps, then constant or a cosine from ``lr`` to ``MIN_LR_RATIO * lr`` at ``--steps``
    (Loshchilov and Hutter 2016, https://arxiv.org/abs/1608.03983). A pure function of the step,
    so a resumed run follows the same schedule."""
    w, peak = args.warmup_steps, args.lr
    if step <= w:
        return peak * step / w
    if args.lr_schedule == "constant":
        return peak
    tau = (step - w) / max(args.steps - w, 1)
    low = MIN_LR_RATIO * peak
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * tau))


def write_board(board, rec: dict) -> None:
    """One logged step as TensorBoard scalars: a tag per number, per-block lists as
    ``grad_norm/block_I`` and ``update_ratio/block_I``."""
    step = rec["step"]
    for key, value in rec.items():
        if key == "step" or value is None:
            continue
        if isinstance(value, list):
            base = key.replace("_blocks", "")
            for i, v in enumerate(value):
                board.add_scalar(f"{base}/block_{i}", v, step)
        else:
            board.add_scalar(key, float(value), step)
    board.flush()


def local_tensor(t):
    """The part of ``t`` this rank holds: the local shard of an FSDP2 DTensor, else ``t``."""
    return t.to_local() if hasattr(t, "to_local") else t


def squared_norms(torch, groups, device):
    """A float32 device tensor with, for each group (a list of tensors), the sum of the squares
    of its elements on this rank (the local shards of DTensors). Nothing is read back to the
    host: the result stays on ``device`` until the caller reads it."""
    out = []
    for tensors in groups:
        norms = [torch.linalg.vector_norm(local_tensor(t), dtype=torch.float32) for t in tensors]
        out.append(torch.stack(norms).pow(2).sum() if norms
                   else torch.zeros((), dtype=torch.float32, device=device))
    return torch.stack(out)


def check_fits(args: argparse.Namespace, world: int, memory: int, where: str) -> None:
    """Refuse, before the rendezvous, a model whose weights, gradients and AdamW moments (16
    bytes per parameter in fp32; FSDP splits them over the ranks) alone exceed ``memory``."""
    params = (matmul_params(args.layers, args.hidden, args.vocab)
              + (args.vocab + args.seq_len) * args.hidden)
    need = 16 * params / (world if args.strategy == "fsdp" else 1)
    if need > memory:
        raise ScriptError(f"the model ({params:.3g} parameters) needs {need / 2**30:.1f} "
                          f"GiB per rank for weights, gradients and AdamW state, more than the "
                          f"{memory / 2**30:.1f} GiB of {where}: make --layers, --hidden or "
                          "--vocab smaller", EXIT_USAGE)


def latest_checkpoint(ckpt_dir: str) -> str | None:
    """The newest complete checkpoint under ``ckpt_dir`` (a folder named step_XXXXXXXX holding
    DCP's ``.metadata`` file, which DCP writes last), or None."""
    if not os.path.isdir(ckpt_dir):
        return None
    steps = sorted(d for d in os.listdir(ckpt_dir) if d.startswith(CKPT_PREFIX)
                   and os.path.isfile(os.path.join(ckpt_dir, d, ".metadata")))
    return os.path.join(ckpt_dir, steps[-1]) if steps else None


def init_distributed(args: argparse.Namespace) -> tuple:
    """This rank's device (GPU LOCAL_RANK, or the CPU), compute dtype and process group (nccl or
    gloo; plain python is a group of one), after refusing a model that cannot fit. The timeout
    is long (``--first-step-timeout-s``) while ranks start, load checkpoints and warm up; the
    loop shortens it after step 1. Returns (backend, device, use_cuda, dtype)."""
    import torch
    import torch.distributed as dist

    launch = args.launch
    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        die("--backend nccl needs CUDA, and no GPU is visible", 2)
    device = torch.device(f"cuda:{launch.local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dtype = {"auto": torch.bfloat16 if use_cuda else torch.float32, "fp32": torch.float32,
             "bf16": torch.bfloat16}[args.dtype]
    check_fits(args, launch.world, torch.cuda.get_device_properties(device).total_memory if use_cuda
               else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
               torch.cuda.get_device_name(device) if use_cuda else "this machine's RAM")

    # A long timeout while ranks start, load checkpoints and warm up; shortened after step 1.
    first_timeout = datetime.timedelta(seconds=args.first_step_timeout_s)
    if not launch.master:
        store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=first_timeout)
    else:
        rank, master = launch.rank, launch.master
        # The store client retries past its timeout; the deadline bounds the whole rendezvous.
        with deadline(args.first_step_timeout_s * 1.1 + 1,
                      f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {master}"):
            try:
                dist.init_process_group(backend, rank=rank, world_size=launch.world,
                                        timeout=first_timeout,
                                        device_id=device if use_cuda else None)
            except RuntimeError as exc:  # DistNetworkError, DistStoreError: a peer is missing
                raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT "
                                  f"{master} failed: "
                                  f"{(str(exc).strip().splitlines() or [''])[0]}") from None
    return backend, device, use_cuda, dtype


def build_model(args: argparse.Namespace, device, dtype, use_cuda: bool) -> tuple:
    """The transformer (pre-norm blocks, causal attention, GELU MLP, untied head), the same
    initial weights on every rank, wrapped in DDP or sharded with FSDP2 (one unit per block and
    one for the rest). Returns (model, core, autocast): ``core`` is the unwrapped model, to
    find its blocks; ``autocast`` the context of the forward pass."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    world, local_rank = args.launch.world, args.launch.local_rank
    torch.manual_seed(args.seed)  # same initial weights on every rank

    class Block(nn.Module):
        def __init__(self, d: int, heads: int):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.fc1 = nn.Linear(d, 4 * d, bias=False)
            self.fc2 = nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads) \
                .permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(args.vocab, args.hidden)
            self.pos = nn.Embedding(args.seq_len, args.hidden)
            self.blocks = nn.ModuleList(Block(args.hidden, args.heads) for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(args.hidden)
            self.head = nn.Linear(args.hidden, args.vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    model = core = TinyGPT().to(device)  # core: the unwrapped model, to find its blocks
    if args.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[local_rank] if use_cuda else None,
                    bucket_cap_mb=args.bucket_mb)
        autocast = (torch.autocast(device.type, dtype=dtype) if dtype != torch.float32
                    else contextlib.nullcontext())
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(device.type, (world,))
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for block in model.blocks:  # one all-gather / reduce-scatter unit per block
            fully_shard(block, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)  # embeddings, final norm and head
        autocast = contextlib.nullcontext()  # FSDP2 casts parameters itself
    return model, core, autocast


def batch_maker(args: argparse.Namespace, rank: int, device):
    """Synthetic data: a fixed permutation "grammar" (each token is followed by ``perm[token]``
    with probability 0.9, else by a random token). Returns ``batch(step)``, the (inputs,
    targets) of ``step`` on this rank, a pure function of (seed, step, rank)."""
    import torch

    perm = torch.randperm(args.vocab, generator=torch.Generator().manual_seed(args.seed + 1))

    def batch(step: int):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 4099 + rank)
        n, t = args.batch_size, args.seq_len + 1
        seq = torch.empty(n, t, dtype=torch.long)
        seq[:, 0] = torch.randint(args.vocab, (n,), generator=g)
        noise = torch.rand(n, t, generator=g) < 0.1
        rand_tok = torch.randint(args.vocab, (n, t), generator=g)
        for i in range(1, t):
            seq[:, i] = torch.where(noise[:, i], rand_tok[:, i], perm[seq[:, i - 1]])
        seq = seq.to(device, non_blocking=True)
        return seq[:, :-1], seq[:, 1:]
    return batch


def resume_checkpoint(args: argparse.Namespace, dcp, model, optimizer) -> tuple[int, str | None]:
    """Load ``--resume-from``, else the newest checkpoint in ``--checkpoint-dir`` (if any), into
    the model and the optimizer. Returns (the step it holds, its path), or (0, None)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    start_step = 0
    resume = args.resume_from or (latest_checkpoint(args.checkpoint_dir)
                                  if args.checkpoint_dir else None)
    if resume:
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "trainer": {"step": 0}}
        load_checkpoint(dcp, state, resume, CHECKPOINT_ENTRIES)
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start_step = int(state["trainer"]["step"])
        if start_step >= args.steps:
            die(f"checkpoint {resume} is at step {start_step}, not before --steps {args.steps}", 2)
    return start_step, resume


def save_checkpoint(args: argparse.Namespace, dcp, model, optimizer, step: int) -> str:
    """Write the model, the optimizer and the step to CHECKPOINT_DIR/step_XXXXXXXX (each rank
    its part; DCP writes .metadata last). Returns the folder."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = os.path.join(args.checkpoint_dir, f"{CKPT_PREFIX}{step:08d}")
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd, "trainer": {"step": step}},
             checkpoint_id=path)
    return path


def make_profiler(args: argparse.Namespace, rank: int, start_step: int, use_cuda: bool):
    """A torch.profiler for ``--profile-steps A:B`` (one unrecorded warm-up step before A when
    there is one), with the allocator's events, writing trace_rank<R>.json to ``--profile-dir``
    (scripts/debug/trace_summary.py summarizes it); else a null context."""
    import torch

    if not args.profile_steps:
        return contextlib.nullcontext()
    a, b = args.profile_steps
    first = max(a, start_step + 1)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if use_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    os.makedirs(args.profile_dir, exist_ok=True)
    warmup = 1 if first > start_step + 1 else 0  # one unrecorded step before, if possible
    if not warmup:
        import warnings
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
    return torch.profiler.profile(
        activities=activities, profile_memory=True,  # [memory] events: allocations and frees
        schedule=torch.profiler.schedule(skip_first=first - start_step - 1 - warmup, wait=0,
                                         warmup=warmup, active=b - first + 1, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(
            os.path.join(args.profile_dir, f"trace_rank{rank}.json")))


def stall_hook() -> tuple[int, int]:
    """Self-test hook (for the test suite only): TRAIN_EXAMPLE_STALL=RANK:STEP makes rank RANK
    stop answering at step STEP, so the other ranks must fail after --timeout-s, which proves
    the timeout was shortened after step 1. Returns (rank, step), or (-1, -1)."""
    stall = os.environ.get("TRAIN_EXAMPLE_STALL", "")  # "RANK:STEP", a self-test hook
    try:
        stall_rank, stall_step = (int(v) for v in stall.split(":")) if stall else (-1, -1)
    except ValueError:
        raise ScriptError(f"environment variable TRAIN_EXAMPLE_STALL={stall!r} is not "
                          "RANK:STEP", EXIT_USAGE) from None
    return stall_rank, stall_step


class Trainer:
    """One training run, in the pieces ``run`` calls: ``__init__`` sets up (process group, model,
    optimizer, resume, rank 0's header, the outputs), ``train`` runs the steps and returns the
    mean tokens/s, each step is ``step`` then, on a logging step, ``read_back`` and ``log``. The
    per-step statistics stay on the device; the host reads them once per logging step."""

    def __init__(self, args: argparse.Namespace):
        import torch
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp
        import torch.nn.functional as F

        self.args, self.torch, self.dist, self.dcp, self.F = args, torch, dist, dcp, F
        self.rank, world, launcher = args.launch.rank, args.launch.world, args.launch.launcher
        backend, self.device, self.use_cuda, dtype = init_distributed(args)
        self.model, self.core, self.autocast = build_model(args, self.device, dtype, self.use_cuda)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=0.0)
        self.batch = batch_maker(args, self.rank, self.device)
        # Resume: explicit --resume-from, else the newest checkpoint in --checkpoint-dir.
        self.start_step, resume = resume_checkpoint(args, dcp, self.model, self.optimizer)

        n_params = matmul_params(args.layers, args.hidden, args.vocab)
        flops_token = model_flops_per_token(args.layers, args.hidden, args.vocab, args.seq_len)
        self.peak = args.peak_tflops
        if self.peak is None and self.use_cuda:
            name = torch.cuda.get_device_name(self.device)
            self.peak = next((float(row_named(ACCELERATOR_ROWS, row)["bf16_dense"])
                              for k, row in KNOWN_PEAKS if k in name), None)
        self.tokens_per_step = world * args.batch_size * args.seq_len
        device_name = torch.cuda.get_device_name(self.device) if self.use_cuda else "cpu"
        self.info = {"backend": backend, "device": device_name, "world_size": world, "launcher": launcher,
                     "torch_version": torch.__version__, "dtype": str(dtype).replace("torch.", ""),
                     "matmul_params": n_params, "flops_per_token": flops_token,
                     "tokens_per_step": self.tokens_per_step, "peak_tflops": self.peak,
                     "start_step": self.start_step, "resumed_from": resume}
        if self.rank == 0:
            print_header(args, self.info, self.use_cuda)

        if args.gc_every:
            gc.collect()
            gc.disable()  # no multi-second pauses at random steps: collect at known points instead
        self.profiler = make_profiler(args, self.rank, self.start_step, self.use_cuda)
        self.stall = stall_hook()
        self._device_statistics(world)
        self.jsonl = open(args.metrics_jsonl, "a", encoding="utf-8") \
            if args.metrics_jsonl and self.rank == 0 else None
        self.board = None
        if args.tensorboard and self.rank == 0:
            from torch.utils.tensorboard import SummaryWriter
            # purge_step drops events a previous run wrote after the step we resume from.
            self.board = SummaryWriter(args.tensorboard,
                                       purge_step=self.start_step + 1 if self.start_step else None)
        self.records, self.first_loss, self.before = [], None, None
        self.timed_s, self.timed_steps = 0.0, 0  # all steps after the first (which includes warm-up)

    def _device_statistics(self, world: int) -> None:
        """The per-step statistics, kept on the device between logging steps."""
        torch, device = self.torch, self.device
        self.blocks = [list(b.parameters()) for b in self.core.blocks]
        in_blocks = {id(p) for group in self.blocks for p in group}
        self.others = [p for p in self.core.parameters() if id(p) not in in_blocks]
        self.sharded = self.args.strategy == "fsdp"  # FSDP: each rank holds 1/n of every tensor
        self.zero = torch.zeros((), dtype=torch.float32, device=device)
        self.grad_max, self.clipped_steps, self.spikes = (self.zero.clone() for _ in range(3))
        self.history = torch.zeros(SPIKE_WINDOW, dtype=torch.float32, device=device)  # recent losses
        # Summed over ranks, [loss, squared norms] / divisor gives the mean loss and the squares of
        # the global gradient norms, sharded (FSDP) or replicated (DDP).
        self.divisor = torch.tensor([world] + [1 if self.sharded else world] * (len(self.blocks) + 1),
                                    dtype=torch.float32, device=device)

    def train(self) -> float:
        """Run the steps after the one resumed from, to --steps, logging every --log-every and
        checkpointing every --checkpoint-every. Returns the mean tokens/s over every step but the
        first: total tokens / total time."""
        args, start = self.args, self.start_step
        stall_rank, stall_step = self.stall
        self.window_start, self.window_steps, self.window_data_s = time.perf_counter(), 0, 0.0
        batches = (self.batch(step) for step in range(start + 1, args.steps + 1))
        with self.profiler as prof:
            for step in range(start + 1, args.steps + 1):
                if self.rank == stall_rank and step == stall_step:
                    time.sleep(3600)
                logging_step = step % args.log_every == 0 or step in (start + 1, args.steps)
                lr = lr_at(step, args)
                for group in self.optimizer.param_groups:
                    group["lr"] = lr  # a Python float: setting it costs no device work
                reduced = self.step(step, batches, logging_step)
                self.window_steps += 1
                if step == start + 1:
                    # The slow first step is over: from now on a hang should end the job quickly.
                    from torch.distributed.distributed_c10d import _set_pg_timeout
                    _set_pg_timeout(datetime.timedelta(seconds=args.timeout_s))
                if prof is not None:
                    prof.step()
                if logging_step:
                    self.log(step, lr, self.read_back(*reduced))
                if args.checkpoint_every and (step % args.checkpoint_every == 0 or step == args.steps):
                    t_save = time.perf_counter()
                    path = save_checkpoint(args, self.dcp, self.model, self.optimizer, step)
                    if self.rank == 0:
                        print(f"# checkpoint: {path}", flush=True)
                    self.window_start += time.perf_counter() - t_save  # not part of any step's time
        if self.jsonl:
            self.jsonl.close()
        if self.board:
            self.board.close()
        if args.gc_every:
            gc.enable()
        return (self.tokens_per_step * self.timed_steps / self.timed_s if self.timed_steps
                else self.records[-1]["tokens_per_s"])

    def step(self, step: int, batches, logging_step: bool) -> tuple:
        """One optimizer step in the profiler's named ranges: data, forward, backward, the gradient
        norms (with clipping and the spike counter), optimizer. Keeps the blocks' weights before
        the update on a logging step (``self.before``); returns what ``read_back`` reads."""
        record, args, F = self.torch.profiler.record_function, self.args, self.F
        t0 = time.perf_counter()
        with record(f"train_step_{step}"):  # named ranges in the profiler's trace
            with record("data"):
                x, y = next(batches)  # data-loading time: the time spent in next()
            self.window_data_s += time.perf_counter() - t0
            with record("forward"), self.autocast:
                logits = self.model(x)
                loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
            del logits  # our reference would keep the largest activation alive in backward
            with record("backward"):
                loss.backward()
            with record("grad_norm"):
                reduced = self.reduce_statistics(step, loss)
            if logging_step:  # keep the weights to measure the update ||dw|| / ||w||
                self.before = [[local_tensor(p).detach().clone() for p in g] for g in self.blocks]
            with record("optimizer"):
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            if args.gc_every and step % args.gc_every == 0:
                gc.collect()
        return reduced

    def reduce_statistics(self, step: int, loss) -> tuple:
        """Squared gradient norm per block and of the other parameters, with the loss, in one
        small all-reduce: FSDP ranks hold disjoint shards, whose squares add up; DDP ranks hold
        the same averaged gradient, so each adds 1/n of it. On NCCL this queues on the GPU and
        does not block the host. Clips the gradients and counts a loss spike (above
        --spike-factor x the median of the recent losses). Returns (the reduced statistics, the
        global gradient norm before clipping, the squared norms)."""
        torch, args = self.torch, self.args
        grads = [[p.grad for p in g if p.grad is not None] for g in (*self.blocks, self.others)]
        sq = squared_norms(torch, grads, self.device)
        stats = torch.cat([loss.detach().float().view(1), sq]) / self.divisor
        self.dist.all_reduce(stats)
        loss_mean, grad_sq = stats[0], stats[1:]
        grad_norm = grad_sq.sum().sqrt()  # global norm, before clipping
        torch.maximum(self.grad_max, grad_norm, out=self.grad_max)
        if args.clip_grad:
            coef = (args.clip_grad / (grad_norm + 1e-6)).clamp(max=1.0)
            torch._foreach_mul_([local_tensor(g) for group in grads for g in group], coef)
            self.clipped_steps += grad_norm > args.clip_grad
        seen = min(step - self.start_step - 1, SPIKE_WINDOW)
        if seen >= 5:
            self.spikes += loss_mean > args.spike_factor * self.history[:seen].median()
        self.history[(step - self.start_step - 1) % SPIKE_WINDOW] = loss_mean
        return stats, grad_norm, grad_sq

    def read_back(self, stats, grad_norm, grad_sq) -> list:
        """A logging step's one read-back from the device: the loss, the gradient norms, the clip
        and spike counters and the blocks' update-to-weight ratios, in one .tolist()."""
        torch, blocks, args = self.torch, self.blocks, self.args
        with torch.no_grad():
            before, self.before = self.before, None
            after = [[local_tensor(p).detach() for p in g] for g in blocks]
            upd = squared_norms(torch, [[a - b for a, b in zip(ga, gb, strict=True)]
                                        for ga, gb in zip(after, before, strict=True)], self.device)
            weights = squared_norms(torch, after, self.device)
            norms = torch.cat([upd, weights])
            if self.sharded:  # shards of one tensor: add the squares over the ranks
                self.dist.all_reduce(norms)
            ratio = (norms[:len(blocks)] / norms[len(blocks):]).sqrt()
            del before, after
            clipped = grad_norm > args.clip_grad if args.clip_grad else self.zero
            values = torch.cat([stats[:1], grad_norm.view(1), grad_sq.sqrt(), self.grad_max.view(1),
                                self.clipped_steps.view(1), clipped.view(1).float(),
                                self.spikes.view(1), ratio]).tolist()
            self.grad_max.zero_()
        return values

    def log(self, step: int, lr: float, values: list) -> None:
        """A logging step's record, with the mean step and data times since the last one: on
        rank 0 to the terminal, --metrics-jsonl and --tensorboard. Starts the next window."""
        if self.use_cuda:
            self.torch.cuda.synchronize(self.device)  # the interval's time ends on the device
        window_s = time.perf_counter() - self.window_start
        t_step, t_data = window_s / self.window_steps, self.window_data_s / self.window_steps
        if step > self.start_step + 1:
            self.timed_s, self.timed_steps = self.timed_s + window_s, self.timed_steps + self.window_steps
        rec = metrics_record(self.args, self.info, step, lr, values, len(self.blocks), t_step, t_data,
                             self.device if self.use_cuda else None)
        self.first_loss = rec["loss"] if self.first_loss is None else self.first_loss
        self.records.append(rec)
        if self.rank == 0:
            print_row(rec, self.peak, self.use_cuda)
            if self.jsonl:
                self.jsonl.write(json.dumps(rec) + "\n")
                self.jsonl.flush()
            if self.board:
                write_board(self.board, rec)
        self.window_start, self.window_steps, self.window_data_s = time.perf_counter(), 0, 0.0


def run(args: argparse.Namespace) -> int:
    """Train as the arguments say: set up, resume, run the steps (logging every --log-every,
    checkpointing every --checkpoint-every), report, tear down. Returns the exit status."""
    import torch.distributed as dist

    trainer = Trainer(args)
    mean_tok_s = trainer.train()
    rank = trainer.rank
    if rank == 0:
        report(args, trainer.info, trainer.records, trainer.first_loss, mean_tok_s, trainer.timed_steps)
    # Free the model while the process group is still registered. A DDP model's Reducer holds the
    # group; were it the last holder, freeing it (as run() returns, with the GIL held) would run
    # the group's destructor, which joins gloo's worker threads while one of them waits for the
    # GIL to free a tensor of the last barrier: a deadlock (1 run in about 70-110 on a loaded
    # 2-core machine; py-spy: ~Reducer -> ~ProcessGroupGloo -> thread::join, and a worker in
    # ~AsyncBarrierWork -> gil_scoped_acquire). destroy_process_group then frees the group through
    # its own binding, which releases the GIL (pytorch/pytorch#56297, #154976).
    trainer.model = trainer.core = None
    gc.collect()
    # The teardown has no timeout of its own: the deadline says so in one line; faulthandler's
    # watchdog, which needs no GIL (a threading.Timer does), ends a rank stuck with the GIL held.
    faulthandler.dump_traceback_later(args.timeout_s * 1.1 + 11, exit=True, file=2)
    try:
        with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: final barrier and teardown"):
            dist.barrier()
            dist.destroy_process_group()
    finally:
        faulthandler.cancel_dump_traceback_later()
    return 0


def print_header(args: argparse.Namespace, info: dict, use_cuda: bool) -> None:
    """Rank 0's lines before the first step: setup, model, batch, units, and the column heads."""
    peak = info["peak_tflops"]
    print(f"# {PROG}: {args.strategy} on {info['world_size']} x {info['device']} "
          f"({info['backend']}), torch {info['torch_version']}, dtype {info['dtype']}")
    print(f"# model: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, vocab "
          f"{args.vocab}, seq {args.seq_len}; N = {info['matmul_params'] / 1e6:.2f} M matmul "
          "parameters")
    print(f"# batch: {args.batch_size} sequences x {args.seq_len} tokens per rank, "
          f"{info['tokens_per_step']} tokens per step; {info['flops_per_token'] / 1e6:.2f} MFLOPs "
          "per token")
    print("# TFLOPS: achieved model TFLOPS per device (1e12 FLOP/s); MFU vs "
          + (f"--peak-tflops {peak:g}" if peak else "peak (unknown here: give --peak-tflops)"))
    if info["resumed_from"]:
        print(f"# resumed from {info['resumed_from']} at step {info['start_step']}")
    mem_head = "alloc/reserved MiB" if use_cuda else "peak RSS MiB"
    print(f"  {'step':>4}  {'loss':>8}  {'lr':>9}  {'gnorm':>7}  {'step_ms':>8}  "
          f"{'data_ms':>8}  {'tok/s':>9}  {'TFLOPS':>7}  {'MFU':>6}  {mem_head:>13}")


def metrics_record(args: argparse.Namespace, info: dict, step: int, lr: float, values: list,
                   n_blocks: int, t_step: float, t_data: float, cuda_device) -> dict:
    """The logged record of ``step`` (the keys the Training metrics page lists) from the values
    read back on this logging step, the interval's mean step and data times (seconds) and, on
    CUDA (``cuda_device``), the allocator's counters, whose peaks it resets; on CPU the peak
    RSS. Raises ScriptError when the loss is nan or inf."""
    loss_value, g_norm = values[0], values[1]
    g_blocks, g_other = values[2:2 + n_blocks], values[2 + n_blocks]
    g_max, n_clipped, was_clipped, n_spikes = values[3 + n_blocks:7 + n_blocks]
    ratios = values[7 + n_blocks:]
    if not math.isfinite(loss_value):  # every rank has the same mean: all stop here
        raise ScriptError(f"loss is {loss_value} at step {step}: the training "
                          f"diverged (--lr {args.lr:g} too high?)")
    peak = info["peak_tflops"]
    tok_s = info["tokens_per_step"] / t_step
    tflops = info["flops_per_token"] * tok_s / info["world_size"] / 1e12
    rec = {"step": step, "loss": loss_value, "lr": lr, "grad_norm": g_norm,
           "grad_norm_max": g_max, "grad_norm_blocks": g_blocks,
           "grad_norm_other": g_other, "clipped": bool(was_clipped),
           "clipped_steps": int(n_clipped), "update_ratio_blocks": ratios,
           "loss_spikes": int(n_spikes), "step_ms": 1e3 * t_step,
           "data_ms": 1e3 * t_data, "tokens_per_s": tok_s, "model_tflops": tflops,
           "mfu": tflops / peak if peak else None}
    if cuda_device is not None:
        import torch
        mem = torch.cuda.memory_stats(cuda_device)  # host-side counters: no device sync
        rec.update(active_mib=mem.get("active_bytes.all.current", 0) / 2**20,
                   reserved_mib=mem.get("reserved_bytes.all.current", 0) / 2**20,
                   max_allocated_mib=mem.get("allocated_bytes.all.peak", 0) / 2**20,
                   max_reserved_mib=mem.get("reserved_bytes.all.peak", 0) / 2**20,
                   alloc_retries=mem.get("num_alloc_retries", 0),
                   ooms=mem.get("num_ooms", 0))
        torch.cuda.reset_peak_memory_stats(cuda_device)
    else:
        rec["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return rec


def print_row(rec: dict, peak: float | None, use_cuda: bool) -> None:
    """One logged step as a line of the table."""
    mfu = f"{100 * rec['mfu']:5.1f}%" if peak else "     -"
    mem = (f"{rec['max_allocated_mib']:.0f}/{rec['max_reserved_mib']:.0f}" if use_cuda
           else f"{rec['peak_rss_mib']:.0f}")
    print(f"  {rec['step']:4d}  {rec['loss']:8.4f}  {rec['lr']:9.3e}  {rec['grad_norm']:7.3f}  "
          f"{rec['step_ms']:8.2f}  {rec['data_ms']:8.2f}  {rec['tokens_per_s']:9.0f}  "
          f"{rec['model_tflops']:7.4f}  {mfu:>6}  {mem:>13}", flush=True)


def report(args: argparse.Namespace, info: dict, records: list[dict], first_loss: float,
           mean_tok_s: float, timed_steps: int) -> None:
    """Rank 0's end of the run: a warning for an MFU above 100 % (a peak below what was
    achieved), the summary line, and the ``--json`` file (every logged record and the setup)."""
    peak, start_step = info["peak_tflops"], info["start_step"]
    top = max(records, key=lambda r: r["mfu"] or 0.0)
    if top["mfu"] and top["mfu"] > 1:  # the peak is wrong, not the device faster than it
        sys.stderr.write(f"{PROG}: warning: MFU up to {100 * top['mfu']:.0f}% at step "
                         f"{top['step']}: the peak of {peak:g} TFLOPS is below the "
                         f"{top['model_tflops']:.4g} TFLOPS achieved; give the device's "
                         "dense peak with --peak-tflops\n")
    span = f"steps {start_step + 2}-{args.steps}" if timed_steps else f"step {args.steps}"
    print(f"# done: {args.steps - start_step} steps, loss {first_loss:.4f} -> "
          f"{records[-1]['loss']:.4f}, mean {mean_tok_s:.0f} tokens/s ({span})", flush=True)
    if args.json:
        summary = {
            "tool": PROG, "schema_version": 1, "strategy": args.strategy,
            "backend": info["backend"], "device": info["device"],
            "world_size": info["world_size"], "launcher": info["launcher"],
            "hostname": args.launch.host, "torch_version": info["torch_version"],
            "dtype": info["dtype"],
            "config": {k: v for k, v in vars(args).items() if k not in ("profile_steps", "launch")},
            "matmul_params": info["matmul_params"], "flops_per_token": info["flops_per_token"],
            "tokens_per_step": info["tokens_per_step"], "peak_tflops": peak,
            "start_step": start_step, "resumed_from": info["resumed_from"], "steps": records,
            "mean_tokens_per_s": mean_tok_s,
            "date_utc": date_utc(),
        }
        write_atomic(args.json, json.dumps(summary, indent=1) + "\n")


def step_range(text: str) -> tuple[int, int]:
    """argparse type for --profile-steps: ``A:B`` with 1 <= A <= B."""
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected A:B, got {text!r}") from None
    if not 1 <= a <= b:
        raise argparse.ArgumentTypeError(f"need 1 <= A <= B, got {text!r}")
    return a, b


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it imports neither torch nor touches a device."""
    # argparse types (the contract's number(): finite, in range, the option named in the error)
    positive_int = number(int, 1)
    non_negative_int = number(int, 0)
    positive_float = number(float, 0, lo_open=True)
    # Timeouts end up as int32 milliseconds in c10d: a week is far below that and above any real need.
    timeout_s = number(float, 0, 7 * 24 * 3600, lo_open=True)
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Data-parallel training of a tiny transformer with DDP or FSDP2, logging loss, "
                    "step/data time, tokens/s, TFLOPS, MFU and memory per step, with "
                    "torch.distributed.checkpoint checkpoints and resume. Launch with torchrun "
                    "(or srun); plain python runs one process.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--strategy", choices=("ddp", "fsdp"), default="ddp",
                   help="ddp (replicated model) or fsdp (FSDP2 fully_shard, ZeRO-3 layout)")
    p.add_argument("--steps", type=number(int, 1, 10_000_000), default=30,
                   help="last step to run (default 30)")
    p.add_argument("--batch-size", type=number(int, 1, 65536), default=8,
                   help="sequences per rank per step (micro-batch, default 8)")
    p.add_argument("--seq-len", type=number(int, 1, 1 << 20), default=128, help="tokens per sequence (128)")
    p.add_argument("--layers", type=number(int, 1, 1024), default=4, help="transformer blocks (4)")
    p.add_argument("--hidden", type=number(int, 1, 65536), default=128, help="model width (128)")
    p.add_argument("--heads", type=number(int, 1, 1024), default=4, help="attention heads (4)")
    p.add_argument("--vocab", type=number(int, 2, 1 << 22), default=256, help="vocabulary size (256)")
    p.add_argument("--lr", type=number(float, 0, 10, lo_open=True), default=3e-3,
                   help="AdamW learning rate, in (0, 10] (3e-3)")
    p.add_argument("--seed", type=number(int, 0, 2**32 - 1), default=0,
                   help="seed for weights and data, 0 to 2**32-1 (0)")
    p.add_argument("--dtype", choices=("auto", "fp32", "bf16"), default="auto",
                   help="compute dtype: auto = bf16 on CUDA, fp32 on CPU")
    p.add_argument("--bucket-mb", type=number(float, 0, 65536, lo_open=True), default=25.0,
                   help="DDP gradient bucket size in MiB (default 25, DDP's default)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl if CUDA is available, else gloo")
    p.add_argument("--timeout-s", type=timeout_s, default=60.0,
                   help="collective timeout after the first step, seconds (default 60)")
    p.add_argument("--first-step-timeout-s", type=timeout_s, default=600.0,
                   help="collective timeout until the first step ends (rendezvous, warm-up, "
                        "checkpoint load), seconds (default 600)")
    p.add_argument("--peak-tflops", type=positive_float,
                   help="peak TFLOPS per device for MFU (default: known GPUs only)")
    p.add_argument("--log-every", type=positive_int, default=1,
                   help="print/record every N steps; the loss is read back only then (default 1)")
    p.add_argument("--gc-every", type=non_negative_int, default=50,
                   help="disable Python's automatic gc and collect every N steps; 0 leaves gc "
                        "automatic (default 50)")
    p.add_argument("--checkpoint-dir", type=nonempty,
                   help="directory for checkpoints; resumes from its latest")
    p.add_argument("--checkpoint-every", type=positive_int,
                   help="save every N steps (and at the last step); needs --checkpoint-dir")
    p.add_argument("--resume-from", metavar="DIR", type=nonempty,
                   help="resume from this checkpoint directory (a step_XXXXXXXX folder)")
    p.add_argument("--profile-steps", type=step_range, metavar="A:B",
                   help="profile steps A..B with torch.profiler; Chrome traces go to "
                        "--profile-dir (default ./profile)")
    p.add_argument("--profile-dir", default="profile", type=nonempty,
                   help="where --profile-steps writes traces")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write per-step records and a summary (rank 0)")
    p.add_argument("--metrics-jsonl", metavar="PATH", type=nonempty,
                   help="append one JSON object per logged step to PATH, flushed line by line "
                        "(rank 0)")
    p.add_argument("--tensorboard", metavar="DIR", type=nonempty,
                   help="write TensorBoard event files to DIR (rank 0; needs the tensorboard "
                        "package)")
    p.add_argument("--clip-grad", metavar="NORM", type=number(float, 0, 1e6), default=0.0,
                   help="clip the global gradient norm to NORM; 0 = no clipping (default 0)")
    p.add_argument("--lr-schedule", choices=("constant", "cosine"), default="constant",
                   help="constant, or cosine decay to 0.1 x --lr at --steps (default constant)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=0,
                   help="linear warmup from --lr/N to --lr over the first N steps (default 0)")
    p.add_argument("--spike-factor", type=number(float, 1, 1e6, lo_open=True), default=1.5,
                   help="count a loss spike when the loss exceeds this many times the median "
                        f"of the previous {SPIKE_WINDOW} steps (default 1.5)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check arguments; problems exit through parser.error (status 2, one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} is not divisible by --heads {args.heads}")
    if args.checkpoint_every and not args.checkpoint_dir:
        parser.error("--checkpoint-every needs --checkpoint-dir")
    if args.resume_from:
        check_checkpoint_folder(args.resume_from)
    if args.profile_steps and args.profile_steps[1] > args.steps:
        parser.error(f"--profile-steps ends after --steps {args.steps}")
    args.launch = Launch()  # the launcher's variables, checked before anything starts
    if args.checkpoint_every:
        check_output_dir(args.checkpoint_dir, "--checkpoint-dir")
    elif args.checkpoint_dir and os.path.exists(args.checkpoint_dir) \
            and not os.path.isdir(args.checkpoint_dir):  # only read, to resume from
        raise ScriptError(f"--checkpoint-dir {args.checkpoint_dir}: is a file, not a folder",
                          EXIT_USAGE)
    if args.profile_steps:
        check_output_dir(args.profile_dir, "--profile-dir")
    if args.warmup_steps > args.steps:
        parser.error(f"--warmup-steps {args.warmup_steps} is longer than --steps {args.steps}")
    # The checkpoint being resumed is an input, every file in it.
    resume = args.resume_from or (latest_checkpoint(args.checkpoint_dir) if args.checkpoint_dir else None)
    for option, path in (("--json", args.json), ("--metrics-jsonl", args.metrics_jsonl)):
        if path and args.launch.rank == 0:
            check_output(path, option, inputs=[resume] if resume else [])
    if args.tensorboard and args.launch.rank == 0:
        import importlib.util
        if importlib.util.find_spec("tensorboard") is None:  # torch.utils.tensorboard needs it
            raise ScriptError("--tensorboard needs the tensorboard package, which is not "
                              "installed (pip install tensorboard)", EXIT_USAGE)
        check_output_dir(args.tensorboard, "--tensorboard")
    return args


def check_checkpoint_folder(path: str) -> None:
    """--resume-from must be a folder DCP wrote (it holds ``.metadata``, written last): say what
    was found instead, before any rank starts."""
    if not os.path.exists(path):
        raise ScriptError(f"--resume-from {path}: no such checkpoint folder", EXIT_USAGE)
    if not os.path.isdir(path):
        raise ScriptError(f"--resume-from {path}: is a file; expected a checkpoint folder "
                          f"({CKPT_PREFIX}XXXXXXXX, written by {PROG} with --checkpoint-every)",
                          EXIT_USAGE)
    if not os.path.isfile(os.path.join(path, ".metadata")):
        found = sorted(os.listdir(path))
        listing = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "") if found else "nothing"
        raise ScriptError(f"--resume-from {path}: not a torch.distributed.checkpoint folder (no "
                          f".metadata; found {listing}): expected a {CKPT_PREFIX}XXXXXXXX folder "
                          f"written by {PROG}, complete", EXIT_USAGE)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        return run(args)
    except (SystemExit, KeyboardInterrupt):
        raise
    except ScriptError as exc:
        die(str(exc), exc.status, args.debug)
    except BaseException as exc:  # noqa: BLE001 - one line for any failure, then a hard exit
        # DCP's CheckpointException (a BaseException) wraps one exception per rank.
        failures = getattr(exc, "failures", None)
        if isinstance(failures, dict) and failures:
            exc = next(iter(failures.values()))
            if isinstance(exc, tuple):  # (exception, traceback) in some versions
                exc = exc[0]
        die(f"{type(exc).__name__}: {exc}", debug=args.debug)
    return 1


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def env_int(name: str, default: int | None = None, lo: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty, an error when
    there is no default); a non-integer or a value below ``lo`` raises ScriptError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        if default is None:
            raise ScriptError(f"environment variable {name} is not set", EXIT_USAGE)
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScriptError(f"environment variable {name}={text!r} is not an integer", EXIT_USAGE) from None
    if value < lo:
        raise ScriptError(f"environment variable {name}={value} must be >= {lo}", EXIT_USAGE)
    return value


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def check_output_dir(path: str, option: str) -> str:
    """Check, before any work, that the folder ``path`` (given as ``option``) can receive results:
    creates it if missing and makes sure a file can be created in it. Returns the path; raises
    ScriptError naming the option and the offending path otherwise."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ScriptError(f"{option} {path}: {existing} is a file, not a folder", EXIT_USAGE)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write there ({err.strerror})", EXIT_USAGE) from None
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


class deadline:
    """``with deadline(seconds, "what"):`` bounds a wait that has no timeout of its own (or one
    that retries): after ``seconds`` it prints ``PROG: error: WHAT did not finish within S s``
    and ends the process at once (os._exit, since the stuck call cannot be unwound)."""

    def __init__(self, seconds: float, what: str):
        self.timer = threading.Timer(seconds, self._expire, (seconds, what))
        self.timer.daemon = True

    @staticmethod
    def _expire(seconds: float, what: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {what} did not finish within {seconds:g} s\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def die(message: str | None, status: int = EXIT_FAILURE, debug: bool = False) -> None:
    """End a rank of a distributed script at once: ``PROG: error: MESSAGE`` (its first line) on
    stderr, after the traceback of the exception being handled when ``debug``, then
    os._exit(status); no line when ``message`` is None. Not sys.exit: after a failed collective,
    process-group teardown can wait for peers that are gone, and a rank that hangs on its way out
    is what these scripts exist to prevent. Called while handling the BrokenPipeError of a reader
    that closed stdout (``| head -1``), it exits quietly with EXIT_OK, as run_main does; output
    that a reader gone meanwhile can no longer take is dropped."""
    if reader_left():
        message, status = None, EXIT_OK
    elif debug and sys.exc_info()[1] is not None:
        traceback.print_exc()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone meanwhile, a closed stdout: the exit drops it
        pass
    if message is not None:
        first = " ".join(str(message).strip().splitlines()[:1]) or "unknown error"
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {first}\n")
        sys.stderr.flush()
    os._exit(status)


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


class Launch:
    """This process's place in a distributed run, from the environment: torchrun's (or any
    env:// launch's) RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE when RANK or WORLD_SIZE is
    set; else plain srun's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID when it started more than
    one task; else a lone process, rank 0 of 1. ``launcher`` says which: "torchrun", "env", "srun"
    or "python". Each variable is read with env_int, so one that is not an integer is a usage
    error naming it; so are fewer ranks than ``min_world``, a rank outside the world and, for more
    than one rank, a missing MASTER_ADDR or MASTER_PORT or a port outside 1-65535. ``addr`` and
    ``port`` are where rank 0 (or torchrun's agent) hosts the rendezvous; ``master`` is
    "ADDR:PORT", None for a lone process (it makes a group of one without a network port)."""

    def __init__(self, min_world: int = 1):
        import socket
        env = os.environ
        self.host = socket.gethostname()
        if "RANK" in env or "WORLD_SIZE" in env:
            self.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
            names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        elif "SLURM_PROCID" in env and env_int("SLURM_NTASKS", 1, lo=1) > 1:
            self.launcher, names = "srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
        else:
            self.launcher, names = "python", None
        self.rank, self.world = (env_int(names[0]), env_int(names[1], lo=1)) if names else (0, 1)
        self.local_rank = env_int(names[2], 0) if names else 0
        self.local_world = env_int("LOCAL_WORLD_SIZE", 1, lo=1)
        if self.world < min_world:
            raise ScriptError(f"needs at least {min_world} ranks (world size is {self.world}); launch "
                              f"with torchrun --nproc-per-node {min_world} (or more), or srun", EXIT_USAGE)
        if self.rank >= self.world:
            raise ScriptError(f"rank {self.rank} is outside world size {self.world} (check "
                              f"{names[0]} and {names[1]})", EXIT_USAGE)
        self.addr, self.port, self.master = None, None, None
        if self.launcher != "python":
            self._read_master()

    def _read_master(self) -> None:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
        if missing and self.world > 1:
            both = len(missing) > 1
            raise ScriptError(
                f"MASTER_ADDR and MASTER_PORT must be set for rank {self.rank} of {self.world} "
                f"(launched by {self.launcher}): environment variable{'s' * both} "
                f"{' and '.join(missing)} {'are' if both else 'is'} not set; export "
                f"{'them' if both else 'it'} (the first node's address and a free port) or launch "
                "with torchrun", EXIT_USAGE)
        if not missing:
            self.addr, self.port = os.environ["MASTER_ADDR"].strip(), env_int("MASTER_PORT")
            if not 1 <= self.port <= 65535:
                raise ScriptError(f"environment variable MASTER_PORT={self.port} is not a TCP port "
                                  "(1-65535)", EXIT_USAGE)
            self.master = f"{self.addr}:{self.port}"

    def me(self) -> str:
        return f"rank {self.rank} on {self.host}"

    def command(self, argv=None) -> str:
        """The command line of the run, for a results file: ``command_line()`` with the launcher's
        own in front of it (``torchrun --nnodes N --nproc-per-node M``, ``srun --ntasks N``)."""
        line = command_line(argv)
        if self.launcher == "torchrun":
            nnodes = os.environ.get("GROUP_WORLD_SIZE", "1")
            return f"torchrun --nnodes {nnodes} --nproc-per-node {self.local_world} {line.removeprefix('python ')}"
        return f"srun --ntasks {self.world} {line}" if self.launcher == "srun" else line


def command_line(argv=None, script: str | None = None) -> str:
    """``python SCRIPT ARGS``, how this script was run, for a results file's ``command``: SCRIPT
    is sys.argv[0] relative to the current folder, ARGS sys.argv[1:]; where main was called with
    ``argv`` (a test, a calculator page) ARGS are ``argv``, and SCRIPT is ``script`` (the file's
    name) when sys.argv[0] names another program."""
    import shlex
    path = sys.argv[0]
    if argv is not None and script and os.path.basename(path) != script:
        path = script
    path = os.path.relpath(path) if os.path.exists(path) else path
    return shlex.join(["python", path, *(sys.argv[1:] if argv is None else argv)])


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# data/compute/accelerators.yml: the figures scripts compute with, for the devices they offer by
# name: dense bf16 peak (TFLOPS), memory (GB), scale-up links over both directions (GBps).
ACCELERATOR_ROWS = [
    {'name': 'NVIDIA A100 SXM 80GB', 'bf16_dense': 312, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H100 SXM', 'bf16_dense': 989.4, 'mem_GB': 80, 'scaleup_GBps': 900},
    {'name': 'NVIDIA H100 PCIe', 'bf16_dense': 756, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H200 SXM', 'bf16_dense': 989.4, 'mem_GB': 141, 'scaleup_GBps': 900},
    {'name': 'NVIDIA B200 (HGX)', 'bf16_dense': 2250, 'mem_GB': 180, 'scaleup_GBps': 1800},
    {'name': 'NVIDIA GB200 (per GPU)', 'bf16_dense': 2500, 'mem_GB': 186, 'scaleup_GBps': 1800},
    {'name': 'AMD MI300X', 'bf16_dense': 1307.4, 'mem_GB': 192, 'scaleup_GBps': 896},
    {'name': 'AMD MI355X', 'bf16_dense': 2500, 'mem_GB': 288, 'scaleup_GBps': 1075.2},
    {'name': 'Google TPU v4', 'bf16_dense': 275, 'mem_GB': 34.4, 'scaleup_GBps': '—'},
    {'name': 'Google TPU v5p', 'bf16_dense': 459, 'mem_GB': 102, 'scaleup_GBps': 1200},
]


def row_named(rows: list[dict], value: str, key: str = "name") -> dict:
    """The row of ``rows`` (a ``data_rows`` table) whose ``key`` is ``value``. Raises KeyError
    naming the value when no row has it (a device the table was not built with)."""
    for row in rows:
        if row.get(key) == value:
            return row
    raise KeyError(f"no row with {key} {value!r} in the built-in table")


# DCP reads a checkpoint's .metadata with pickle.load and its non-tensor entries with
# torch.load(weights_only=False): both run any callable the file names, so resuming from a folder
# someone else wrote would run their code. Here the metadata goes through an unpickler that builds
# only the classes a DCP metadata file holds, and each non-tensor entry must pass
# torch.load(weights_only=True) before DCP loads it. Tensors DCP already loads with weights_only.
DCP_METADATA_MAX_BYTES = 1 << 30


def read_dcp_metadata(path):
    """The ``Metadata`` object of the DCP checkpoint folder ``path``, unpickled with only DCP's own
    classes allowed (torch.distributed.checkpoint.metadata, its filesystem ``_StorageInfo``,
    ``torch.Size``, dtypes, layouts and pathlib paths). Raises ScriptError naming the file: missing,
    not a regular file, over DCP_METADATA_MAX_BYTES, damaged, or naming any other global (which
    a metadata file written by DCP never does: that one would have run code)."""
    import io
    import pickle
    import stat

    import torch

    file = os.path.join(os.fspath(path), ".metadata")
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as exc:
        raise ScriptError(f"{file}: cannot open ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ScriptError(f"{file}: not a regular file")
        if info.st_size > DCP_METADATA_MAX_BYTES:
            raise ScriptError(f"{file}: {info.st_size} bytes, more than a DCP metadata file "
                              f"holds (limit {DCP_METADATA_MAX_BYTES})")
        data = f.read(DCP_METADATA_MAX_BYTES + 1)

    def allowed(module: str, name: str) -> bool:
        if module in ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem"):
            obj = getattr(sys.modules.get(module), name, None)
            return isinstance(obj, type) and obj.__module__ == module
        if module == "torch":
            return name == "Size" or isinstance(getattr(torch, name, None), torch.dtype)
        if module in ("pathlib", "pathlib._local"):
            return name in ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath")
        return (module, name) == ("torch.serialization", "_get_layout")

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if not allowed(module, name):
                raise ScriptError(f"{file}: refused: it names {module}.{name}, which is no part of "
                                  "a DCP checkpoint's metadata (unpickling it could run code)")
            return super().find_class(module, name)

    import torch.distributed.checkpoint.filesystem  # the modules allowed() looks in
    try:
        metadata = Unpickler(io.BytesIO(data)).load()
    except ScriptError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged pickle raises any of a dozen types
        raise ScriptError(f"{file}: cannot read the checkpoint's metadata ({type(exc).__name__}: "
                          f"{exc}): it is truncated or damaged; resume from an earlier step") from None
    if type(metadata).__name__ != "Metadata":
        raise ScriptError(f"{file}: holds a {type(metadata).__name__}, not DCP metadata")
    return metadata


def checked_dcp_load(dcp, state: dict, path) -> None:
    """``dcp.load(state, checkpoint_id=path)`` with the metadata from :func:`read_dcp_metadata`
    (read once, so the file cannot change between the check and the load) and every non-tensor
    entry checked by ``torch.load(weights_only=True)`` first. Raises ScriptError for what
    read_dcp_metadata refuses, and DCP's own exceptions otherwise."""
    import re

    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import StorageMeta

    metadata = read_dcp_metadata(path)

    class Reader(FileSystemReader):
        def read_metadata(self):  # no **kwargs: DCP then tries no per-rank metadata files
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = getattr(self, "load_id", None)
            return metadata

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value):
            try:
                torch.load(value, weights_only=True)
            except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError, EOFError, ...
                entry = read_item.dest_index.fqn
                named = re.search(r"(?:unsupported|Unsupported global:) GLOBAL (\S+)", str(exc))
                if named:
                    raise ScriptError(f"{path}: refused: entry '{entry}' names {named[1]} "
                                      "(unpickling it could run code)") from None
                first = (str(exc).strip().splitlines() or [""])[0]
                raise ScriptError(f"{path}: cannot read entry '{entry}' ({type(exc).__name__}"
                                  f"{': ' + first if first else ''}): it is truncated or damaged; "
                                  "resume from an earlier step") from None
            value.seek(0)
            super().load_bytes(read_item, value)

    dcp.load(state, storage_reader=Reader(os.fspath(path)), planner=Planner())


def load_checkpoint(dcp, state: dict, path, expected: str) -> None:
    """:func:`checked_dcp_load` of ``path`` into ``state``, with a CheckpointException (a BaseException that
    maps each failing rank to its (error, traceback)) turned into a one-line ScriptError saying
    what was expected and what was found."""
    # DCP's loader logs a traceback to the root logger for each fallback it tries (e.g. per-rank
    # metadata) before raising: the one line below says it better.
    dcp_log = logging.getLogger()
    level = dcp_log.level
    dcp_log.setLevel(logging.CRITICAL)
    try:
        checked_dcp_load(dcp, state, path)
    except (KeyboardInterrupt, SystemExit, ScriptError):
        raise
    except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException
        failures = getattr(exc, "failures", None) or {0: (exc,)}
        rank, item = min(failures.items())
        err = item[0] if isinstance(item, tuple) else item
        if isinstance(err, ScriptError):  # refused by checked_dcp_load on that rank
            raise err from None
        text = (str(err).strip().splitlines() or [""])[0]
        if "Missing key in checkpoint state_dict" in text:
            key = text.split(":", 1)[1].strip().rstrip(".")
            raise ScriptError(f"{path}: not a checkpoint of {os.path.basename(sys.argv[0])}: it has "
                              f"no '{key}' (expected {expected}; written by another script?)") from None
        raise ScriptError(f"{path}: rank {rank} cannot read the checkpoint ({type(err).__name__}"
                          f"{': ' + text if text else ''}): it is truncated or damaged; "
                          "resume from an earlier step") from None
    finally:
        dcp_log.setLevel(level)
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
