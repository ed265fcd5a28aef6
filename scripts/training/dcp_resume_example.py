#!/usr/bin/env python
"""dcp_resume_example.py: save a training run mid-epoch with torch.distributed.checkpoint (DCP) and
resume it so that it continues exactly as if it had never stopped.

A small MLP with dropout, under DistributedDataParallel, trains on a synthetic data set made from
``--seed``. Every rank adds random noise to its inputs and draws dropout masks, so the run depends
on each rank's random number generators (RNG) and on its position in a per-epoch shuffle. After
step K of ``--save-at K`` it saves all of that: ``model`` and ``optim`` (``get_state_dict``, the
same call for DDP, FSDP and plain modules), ``sched``, ``data`` (epoch and batches done),
``rng_rank<r>`` (rank r's torch and Python RNG states) and ``meta`` (world size and step).
``--resume DIR`` (``auto``: the newest complete checkpoint under ``--ckpt-dir``) continues bit for
bit; ``--forget rng`` or ``--forget data`` shows what goes wrong without that part. The
Checkpoints chapter explains ``--async-save``, the save on SIGTERM or SIGUSR1, ``--export FILE``,
the keys of ``--json PATH`` and why a checkpoint from someone else is read with a checked loader.
Losses (mean squared errors) are printed in decimal and as ``float.hex``. CPU, two processes::

    torchrun --standalone --nproc-per-node 2 dcp_resume_example.py --save-at 17 --stop-after-save
    torchrun --standalone --nproc-per-node 2 dcp_resume_example.py --resume ckpt/step-17

Exit status: 0 ok, 1 failure (an unreachable peer, a foreign, damaged or code-carrying checkpoint,
a failed save), 2 usage; one line ``dcp_resume_example.py: error: ...`` (``--debug``: traceback).

Example output (2 CPU processes, resuming the checkpoint of step 17; the chapter shows both runs)::

    $ torchrun --standalone --nproc-per-node 2 dcp_resume_example.py --steps 20 --resume ck/step-17
    # dcp_resume_example.py: world_size 2 | backend gloo | 96 samples | batch 4 per rank | 12 steps per epoch
    # resumed from ck/step-17 (step 17, epoch 1, batch 5 of that epoch) in 0.15 s
    step    18  epoch 1  batch  6/12  loss 5.478902  0x1.5ea6560000000p+2
    ...
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import hashlib
import json
import logging
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

PROG = "dcp_resume_example.py"
IN_FEATURES = 16
HIDDEN = 32


# Caps on the sizes of the toy run: beyond them a typo would run for days or exhaust memory.
MAX_STEPS = 1_000_000
MAX_SAMPLES = 10_000_000
MAX_BATCH = 1_000_000
MAX_TIMEOUT_S = 7 * 86400
CHECKPOINT_ENTRIES = "model, optim, sched, data, rng_rank<R> and meta entries"


class ResumableShardSampler:
    """Per-epoch shuffled batches of sample indices for one rank, with a resumable position.

    Every rank draws the same permutation of ``range(n)`` for epoch e (a generator seeded with
    ``seed + e``), drops the tail that does not fill a batch on every rank, and takes every
    ``world``-th index starting at ``rank``. ``next_batch()`` returns a LongTensor of
    ``batch_size`` indices. ``state_dict()`` is ``{"epoch": int, "batches_done": int}``: with it a
    resumed run skips straight to the next unread batch without reading the earlier ones.
    Raises ValueError if the data set is smaller than one global batch.
    """

    def __init__(self, n: int, rank: int, world: int, batch_size: int, seed: int):
        self.n, self.rank, self.world, self.batch_size, self.seed = n, rank, world, batch_size, seed
        self.batches_per_epoch = n // (world * batch_size)
        if self.batches_per_epoch == 0:
            raise ValueError(f"{n} samples do not fill one global batch of "
                             f"{world} ranks x {batch_size}")
        self.epoch, self.batches_done = 0, 0
        self._cache: tuple[int, object] | None = None

    def _my_indices(self):
        import torch
        if self._cache is None or self._cache[0] != self.epoch:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            perm = torch.randperm(self.n, generator=g)
            used = perm[: self.batches_per_epoch * self.world * self.batch_size]
            self._cache = (self.epoch, used[self.rank::self.world])
        return self._cache[1]

    def peek(self):
        """The batch ``next_batch()`` would return, without advancing."""
        epoch, done = self.epoch, self.batches_done
        if done == self.batches_per_epoch:
            epoch, done = epoch + 1, 0
        saved = (self.epoch, self.batches_done)
        self.epoch, self.batches_done = epoch, done
        batch = self._my_indices()[done * self.batch_size:(done + 1) * self.batch_size]
        self.epoch, self.batches_done = saved
        return batch

    def next_batch(self):
        """Advance by one batch and return its indices (LongTensor, shape [batch_size])."""
        if self.batches_done == self.batches_per_epoch:
            self.epoch, self.batches_done = self.epoch + 1, 0
        b = self.batches_done
        self.batches_done += 1
        return self._my_indices()[b * self.batch_size:(b + 1) * self.batch_size]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.batches_done = int(state["epoch"]), int(state["batches_done"])


def tensor_digest(tensors) -> str:
    """SHA-256 (hex) of the raw bytes of an iterable of tensors, in order (dtype and shape
    included, so equal digests mean bit-identical tensors)."""
    import torch
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous().reshape(-1)
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(bytes(t.view(torch.uint8).flatten().tolist()))
    return h.hexdigest()


def optim_digest(optim_sd: dict) -> str:
    """SHA-256 of every tensor in an optimizer state dict (keys sorted)."""
    import torch
    items = []

    def walk(prefix, obj):
        if isinstance(obj, torch.Tensor):
            items.append((prefix, obj))
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
                walk(f"{prefix}.{k}", obj[k])
    walk("", optim_sd.get("state", {}))
    return tensor_digest(t for _, t in sorted(items, key=lambda kv: kv[0]))


def first_failure(exc: BaseException) -> str:
    """``Type: first line`` of the error behind ``exc``; for DCP's CheckpointException (which
    maps each failing rank to its error) the lowest failing rank's error."""
    failures = getattr(exc, "failures", None)
    if failures:
        item = min(failures.items())[1]
        exc = item[0] if isinstance(item, tuple) else item
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}{': ' + text if text else ''}"


def newest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The ``step-K`` directory under ``ckpt_dir`` with the largest K that holds a ``.metadata``
    file (DCP writes it after every rank's data, so an interrupted save never counts)."""
    best = None
    for d in ckpt_dir.glob("step-*") if ckpt_dir.is_dir() else []:
        try:
            k = int(d.name.split("-", 1)[1])
        except ValueError:
            continue
        if (d / ".metadata").is_file() and (best is None or k > best[0]):
            best = (k, d)
    return best[1] if best else None


def init_distributed(args: argparse.Namespace) -> tuple:
    """Join the process group: nccl on GPU LOCAL_RANK (``--backend auto`` picks it when CUDA is
    available) or gloo on the CPU, the rendezvous bounded by ``--timeout-s``; plain python is a
    group of one. Returns (rank, world, local_rank, backend, device, ckpt_group), ckpt_group
    the gloo group of ``--async-save`` (else None)."""
    import torch
    import torch.distributed as dist

    launch = args.launch
    rank, world, local_rank = launch.rank, launch.world, launch.local_rank
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ScriptError("--backend nccl needs CUDA, and torch sees no GPU", EXIT_USAGE)
    device = torch.device(f"cuda:{local_rank}" if backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = datetime.timedelta(seconds=args.timeout_s)
    if launch.master:
        master = launch.master
        # The store client retries past `timeout`; the deadline bounds the whole rendezvous.
        with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: rendezvous with "
                                                f"MASTER_ADDR:MASTER_PORT {master}"):
            try:
                dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout,
                                        device_id=device if device.type == "cuda" else None)
            except RuntimeError as err:  # DistNetworkError, DistStoreError: a peer is missing
                raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT "
                                  f"{master} failed: "
                                  f"{(str(err).strip().splitlines() or [''])[0]}") from None
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout)
    # Async saves run in a background thread: give them their own (CPU) process group so their
    # collectives never interleave with the training's on the default group.
    ckpt_group = dist.new_group(backend="gloo", timeout=timeout) if args.async_save else None
    return rank, world, local_rank, backend, device, ckpt_group


def build_training(args: argparse.Namespace, rank: int, world: int, local_rank: int, device) -> tuple:
    """The synthetic data set (identical on every rank), this rank's sampler, the DDP model,
    AdamW and the scheduler (warm-up, then cosine decay); then the per-rank seeds of the noise
    and dropout masks. Returns (x_all, y_all, sampler, model, optim, sched)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Data: identical on every rank (generated from the base seed).
    g = torch.Generator().manual_seed(args.seed)
    x_all = torch.randn(args.samples, IN_FEATURES, generator=g)
    w_true = torch.randn(IN_FEATURES, 1, generator=g)
    y_all = x_all @ w_true + 0.1 * torch.randn(args.samples, 1, generator=g)
    try:
        sampler = ResumableShardSampler(args.samples, rank, world, args.batch_size, args.seed)
    except ValueError as e:
        raise ScriptError(str(e), EXIT_USAGE) from None

    # Model: the same initial weights on every rank (DDP would broadcast rank 0's anyway).
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, HIDDEN), torch.nn.ReLU(),
                                torch.nn.Dropout(0.1), torch.nn.Linear(HIDDEN, 1)).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, args.steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / args.steps)))
    # Per-rank seeds: ranks must draw different noise and dropout masks, reproducibly.
    torch.manual_seed(args.seed + 1000 * (rank + 1))
    random.seed(args.seed + 1000 * (rank + 1))
    if device.type == "cuda":
        torch.cuda.manual_seed(args.seed + 1000 * (rank + 1))
    return x_all, y_all, sampler, model, optim, sched


def resume_dir_of(args: argparse.Namespace, say) -> Path | None:
    """The checkpoint to resume from: ``--resume DIR``, or with ``--resume auto`` the newest
    complete one under ``--ckpt-dir`` (None, and a note, when there is none)."""
    if args.resume == "auto":
        resume_dir = newest_checkpoint(Path(args.ckpt_dir))
        if resume_dir is None:
            say(f"# --resume auto: no complete checkpoint under {args.ckpt_dir}, starting fresh")
        return resume_dir
    return Path(args.resume) if args.resume else None


def resume(args: argparse.Namespace, dcp, resume_dir: Path, app_state, model, optim, sched,
           sampler, rank: int, world: int, device, say) -> int:
    """Load ``resume_dir`` into the model, the optimizer, the scheduler, the sampler and this
    rank's RNGs (all but the parts ``--forget`` names), once its ``meta`` shows as many ranks as
    this run has; returns the step it was saved after."""
    import torch
    from torch.distributed.checkpoint.state_dict import set_state_dict

    t0 = time.perf_counter()
    meta = {"meta": {"world_size": -1, "step": -1}}
    load_checkpoint(dcp, meta, resume_dir, CHECKPOINT_ENTRIES)
    if meta["meta"]["world_size"] != world:
        raise ScriptError(f"{resume_dir} was written by {meta['meta']['world_size']} ranks "
                          f"and this run has {world}: the per-rank RNG states do not map "
                          "onto the new ranks")
    state = app_state(0)
    load_checkpoint(dcp, state, resume_dir, CHECKPOINT_ENTRIES)
    set_state_dict(model, optim, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    sched.load_state_dict(state["sched"])
    if "data" not in args.forget:
        sampler.load_state_dict(state["data"])
    if "rng" not in args.forget:
        rs = state[f"rng_rank{rank}"]
        torch.set_rng_state(rs["torch"])
        random.setstate(rs["python"])
        if device.type == "cuda":
            torch.cuda.set_rng_state(rs["cuda"], device)
    step = int(state["meta"]["step"])
    say(f"# resumed from {resume_dir} (step {step}, epoch {state['data']['epoch']}, "
        f"batch {state['data']['batches_done']} of that epoch) in "
        f"{time.perf_counter() - t0:.2f} s"
        + (f"; ignoring saved {', '.join(args.forget)} (--forget)" if args.forget else ""))
    if step >= args.steps:
        raise ScriptError(f"{resume_dir} is at step {step}, not before --steps {args.steps}",
                          EXIT_USAGE)
    return step


class Saver:
    """Writes ``app_state(step)`` to CKPT_DIR/step-K with ``dcp.save``, or with ``dcp.async_save``
    on ``ckpt_group`` (one save in flight at a time), and keeps the last folder written and how
    long each save blocked training."""

    def __init__(self, args: argparse.Namespace, rank: int, ckpt_group, app_state, say):
        self.args, self.rank, self.ckpt_group, self.app_state, self.say = (
            args, rank, ckpt_group, app_state, say)
        self.pending = None          # future of the last async save
        self.last_saved = None
        self.save_times = []

    def finish(self) -> None:
        """Wait for the last async save, if any; its failure (a CheckpointException) becomes
        one line."""
        if self.pending is None:
            return
        try:
            self.pending.result()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException
            raise ScriptError(f"--ckpt-dir: rank {self.rank} could not finish an async save under "
                              f"{self.args.ckpt_dir}: {first_failure(exc)}") from None

    def save(self, step_done: int) -> None:
        import torch.distributed.checkpoint as dcp

        args = self.args
        path = Path(args.ckpt_dir) / f"step-{step_done}"
        t0 = time.perf_counter()
        self.finish()      # one save in flight at a time
        state = self.app_state(step_done)
        try:
            if args.async_save:
                self.pending = dcp.async_save(state, checkpoint_id=str(path),
                                              process_group=self.ckpt_group)
            else:
                dcp.save(state, checkpoint_id=str(path))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException
            raise ScriptError(f"--ckpt-dir: rank {self.rank} cannot save step {step_done} to {path}: "
                              f"{first_failure(exc)}") from None
        blocked = time.perf_counter() - t0
        self.save_times.append(blocked)
        self.last_saved = path
        self.say(f"# saved step {step_done} to {path} "
                 + (f"(training blocked {blocked:.2f} s; files written in the background)"
                    if args.async_save else f"in {blocked:.2f} s"))


def stop_on_signals() -> dict:
    """SIGTERM or SIGUSR1 sets ``["signal"]`` of the returned dict, so that every rank saves at
    the end of the step and exits; a second signal ends the process at once."""
    stop_requested = {"signal": None}

    def on_signal(signum, _frame):
        stop_requested["signal"] = signum
        signal.signal(signum, signal.SIG_DFL)   # a second signal ends the process at once
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    return stop_requested


def train_step(forward, sampler, optim, sched, world: int) -> float:
    """One optimizer step on this rank's next batch; returns the loss averaged over the ranks."""
    import torch.distributed as dist

    indices = sampler.next_batch()
    loss = forward(indices)
    optim.zero_grad(set_to_none=True)
    loss.backward()
    optim.step()
    sched.step()
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    return float(mean_loss) / world


def train(args: argparse.Namespace, step: int, forward, sampler, optim, sched, saver: Saver,
          rank: int, world: int, device, say) -> tuple[int, dict]:
    """The steps after ``step`` up to ``--steps``, saving after the steps of ``--save-at``;
    stops after the first save with ``--stop-after-save``, or after saving at the end of the
    step in which a rank got SIGTERM or SIGUSR1. Returns the last step and the losses by step."""
    import torch
    import torch.distributed as dist

    stop_requested = stop_on_signals()
    # Self-test hooks (for the test suite only): rank 1 exits with status 3 at the start of step
    # CRASH_AT on the first attempt only; rank 0 sends itself SIGUSR1 at the start of SIGNAL_AT.
    crash_at = env_int("DCP_RESUME_EXAMPLE_CRASH_AT", 0)
    signal_at = env_int("DCP_RESUME_EXAMPLE_SIGNAL_AT", 0)
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    losses = {}
    while step < args.steps:
        if crash_at and step + 1 == crash_at and rank == min(1, world - 1) and first_attempt:
            print(f"{PROG}: self-test: rank {rank} exits at step {crash_at}", file=sys.stderr,
                  flush=True)
            os._exit(3)
        if signal_at and step + 1 == signal_at and rank == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        value = train_step(forward, sampler, optim, sched, world)
        step += 1
        losses[step] = value
        if not args.quiet:
            say(f"step {step:5d}  epoch {sampler.epoch}  batch {sampler.batches_done:2d}/"
                f"{sampler.batches_per_epoch}  loss {value:.6f}  {value.hex()}")
        flag = torch.tensor([1.0 if stop_requested["signal"] else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() > 0:
            saver.save(step)
            say(f"# stop requested by a signal: saved step {step}, exiting")
            break
        if step in args.save_at:
            saver.save(step)
            if args.stop_after_save:
                say("# stopping after the save (--stop-after-save)")
                break
    return step, losses


def run(args: argparse.Namespace) -> dict:
    """Train (and save/resume) as the arguments say; return the results dict (see --json)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rank, world, local_rank, backend, device, ckpt_group = init_distributed(args)
    say = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    x_all, y_all, sampler, model, optim, sched = build_training(args, rank, world, local_rank,
                                                               device)

    def rng_state() -> dict:
        state = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(device)
        return state

    def app_state(step: int) -> dict:
        model_sd, optim_sd = get_state_dict(model, optim)
        return {"model": model_sd, "optim": optim_sd, "sched": sched.state_dict(),
                "data": sampler.state_dict(), f"rng_rank{rank}": rng_state(),
                "meta": {"world_size": world, "step": step}}

    say(f"# {PROG}: world_size {world} | backend {backend} | {args.samples} samples | batch "
        f"{args.batch_size} per rank | {sampler.batches_per_epoch} steps per epoch")
    step = 0
    resume_dir = resume_dir_of(args, say)
    if resume_dir is not None:
        step = resume(args, dcp, resume_dir, app_state, model, optim, sched, sampler, rank,
                      world, device, say)
    saver = Saver(args, rank, ckpt_group, app_state, say)
    loss_fn = torch.nn.MSELoss()

    def forward(indices):
        x = x_all[indices].to(device)
        x = x + 0.05 * torch.randn(x.shape, device=device)   # per-rank RNG: augmentation noise
        return loss_fn(model(x), y_all[indices].to(device))   # per-rank RNG: dropout masks

    model.train()
    step, losses = train(args, step, forward, sampler, optim, sched, saver, rank, world, device,
                         say)
    saver.finish()

    result = report(args, forward, sampler, model, optim, losses, step, world, backend,
                    resume_dir, saver, say)
    dist.barrier()
    if args.export and rank == 0:
        export(args, saver.last_saved, say)
    if args.json and rank == 0:
        write_atomic(args.json, json.dumps(result, indent=1) + "\n")
    # Free the DDP model while the group is registered: freed after destroy_process_group, as run()
    # returns, its Reducer would be the group's last holder and destroy it with the GIL held, while
    # a gloo worker waits for the GIL (a deadlock; see train_example.py's teardown).
    model = None
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return result


def report(args: argparse.Namespace, forward, sampler, model, optim, losses: dict, step: int,
           world: int, backend: str, resume_dir, saver: Saver, say) -> dict:
    """What the next step would see, its batch on every rank and its loss (this forward pass
    draws noise and dropout masks from the RNG, so it also checks the RNG states), and the
    digests of the parameters and optimizer state: the results dict (--json), and its lines."""
    import torch
    import torch.distributed as dist

    next_idx = sampler.peek()
    gathered = [None] * world
    dist.all_gather_object(gathered, next_idx.tolist())
    next_loss = forward(next_idx).detach()
    dist.all_reduce(next_loss)
    next_value = float(next_loss) / world
    params = [p for _, p in sorted(model.module.state_dict().items())]
    result = {
        "script": PROG, "schema_version": 1, "world_size": world, "backend": backend,
        "torch_version": torch.__version__, "resumed_from": str(resume_dir) if resume_dir else None,
        "forget": args.forget, "last_step": step, "epoch": sampler.epoch,
        "batches_done": sampler.batches_done,
        "losses_hex": {str(k): v.hex() for k, v in losses.items()},
        "losses": {str(k): v for k, v in losses.items()},
        "next_batch": gathered, "next_loss": next_value, "next_loss_hex": next_value.hex(),
        "params_sha256": tensor_digest(params),
        "optim_sha256": optim_digest(optim.state_dict()),
        "last_checkpoint": str(saver.last_saved) if saver.last_saved else None,
        "save_blocking_s": [round(t, 4) for t in saver.save_times],
    }
    say("# next batch: " + "  ".join(f"rank {r} {b}" for r, b in enumerate(gathered)))
    say(f"# next loss: {next_value:.6f}  {next_value.hex()}")
    say(f"# params sha256 {result['params_sha256'][:12]}...  optim sha256 "
        f"{result['optim_sha256'][:12]}...")
    return result


def export(args: argparse.Namespace, last_saved, say) -> None:
    """``--export FILE``: the last checkpoint written, converted into one torch.save file."""
    if last_saved is None:
        raise ScriptError("--export: this run wrote no checkpoint (use --save-at)", EXIT_USAGE)
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    export_atomic(dcp_to_torch_save, str(last_saved), args.export)
    say(f"# exported {last_saved} to {args.export} "
        f"({os.path.getsize(args.export)} bytes)")


def export_atomic(convert, checkpoint: str, path: str) -> None:
    """``convert(checkpoint, tmp)`` into a temporary file next to ``path``, then rename it to
    ``path``: an interrupted export never leaves half a file under the name asked for."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        convert(checkpoint, tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it private; a plain file would not be
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def parse_steps(text: str) -> list[int]:
    """Parse ``"17"`` or ``"10,20"`` into a sorted list of positive step numbers.

    Raises argparse.ArgumentTypeError on anything else.
    """
    try:
        steps = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid step list {text!r}: use e.g. 17 or 10,20") from None
    if not steps or steps[0] < 1:
        raise argparse.ArgumentTypeError(f"invalid step list {text!r}: steps start at 1")
    return steps


def describe_resume(path: str) -> str | None:
    """What ``--resume path`` is when it is not a complete DCP checkpoint folder (None if it is)."""
    target = Path(path)
    if (target / ".metadata").is_file():
        return None
    if not target.exists():
        return "nothing there (it does not exist)"
    if not target.is_dir():
        return "a file"
    entries = sorted(e.name for e in target.iterdir())
    if not entries:
        return "an empty folder"
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return f"a folder without .metadata ({shown}: an interrupted save, or not DCP)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Save a small DDP training run mid-epoch with "
        "torch.distributed.checkpoint and resume it exactly (model, optimizer, scheduler, "
        "per-rank RNG states, data position).")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--steps", type=number(int, 1, MAX_STEPS), default=30,
                   help="total optimizer steps of the run, counting those before a resume "
                        "(default 30)")
    p.add_argument("--samples", type=number(int, 1, MAX_SAMPLES), default=96,
                   help="size of the synthetic data set (default 96)")
    p.add_argument("--batch-size", type=number(int, 1, MAX_BATCH), default=4,
                   help="samples per rank per step (default 4)")
    p.add_argument("--lr", type=number(float, 0, lo_open=True), default=1e-2, help="peak learning rate (default 1e-2)")
    p.add_argument("--seed", type=number(int, -2**62, 2**62), default=1234,
                   help="base seed (default 1234; torch's generators take 64-bit seeds)")
    p.add_argument("--save-at", type=parse_steps, default=[],
                   help="save a checkpoint after these steps, e.g. 17 or 10,20")
    p.add_argument("--stop-after-save", action="store_true",
                   help="exit right after the first save (simulates an interrupted run)")
    p.add_argument("--ckpt-dir", default="ckpt", type=nonempty,
                   help="checkpoints go to CKPT_DIR/step-K (default ./ckpt)")
    p.add_argument("--resume", metavar="DIR", type=nonempty,
                   help="resume from this DCP checkpoint directory, or 'auto' for the newest "
                        "complete one under --ckpt-dir (none: start from scratch)")
    p.add_argument("--forget", action="append", choices=["rng", "data"], default=[],
                   help="on resume, ignore this part of the saved state (demonstration)")
    p.add_argument("--async-save", action="store_true",
                   help="save with dcp.async_save on a separate gloo process group")
    p.add_argument("--export", metavar="FILE", type=nonempty,
                   help="after the run, convert the last checkpoint written into one torch.save "
                        "file (rank 0)")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="process group backend (auto: nccl with CUDA, else gloo)")
    p.add_argument("--timeout-s", type=number(int, 1, MAX_TIMEOUT_S), default=60,
                   help="seconds before a collective waiting for a dead rank fails (default 60)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the results as JSON (rank 0)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and cross-check the command line (no torch import, no devices touched)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.save_at and args.save_at[-1] > args.steps:
        p.error(f"--save-at {args.save_at[-1]} is after the last step (--steps {args.steps})")
    if args.stop_after_save and not args.save_at:
        p.error("--stop-after-save needs --save-at")
    if args.forget and not args.resume:
        p.error("--forget only applies with --resume")
    args.launch = Launch()  # the launcher's variables: checked before torch
    world = args.launch.world
    env_int("DCP_RESUME_EXAMPLE_CRASH_AT", 0)  # self-test variables: checked before torch
    env_int("DCP_RESUME_EXAMPLE_SIGNAL_AT", 0)
    if args.samples < world * args.batch_size:
        p.error(f"{args.samples} samples do not fill one global batch of {world} ranks x "
                f"{args.batch_size}")
    if args.resume and args.resume != "auto":
        found = describe_resume(args.resume)
        if found:
            p.error(f"--resume {args.resume}: expected a complete DCP checkpoint folder (with a "
                    f".metadata file), found {found}")
    if args.save_at:  # every rank writes its shard there
        check_output_dir(args.ckpt_dir, "--ckpt-dir")
        for k in args.save_at:
            target = Path(args.ckpt_dir) / f"step-{k}"
            if target.exists() and not target.is_dir():
                raise ScriptError(f"--ckpt-dir {args.ckpt_dir}: {target} is a file; the "
                                  f"checkpoint of step {k} goes there as a folder", EXIT_USAGE)
    if args.launch.rank == 0:
        # The checkpoint being resumed is an input, every file in it.
        read = newest_checkpoint(Path(args.ckpt_dir)) if args.resume == "auto" else args.resume
        for option, path in (("--json", args.json), ("--export", args.export)):
            if path:
                check_output(path, option, inputs=[read] if read else [])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    try:
        run(args)
    except ScriptError:
        raise
    except Exception as e:  # a dead peer or a bad checkpoint: one line, non-zero status
        raise ScriptError(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
    return 0


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


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline to ``stream`` (stdout) in one write, and flush: the ranks of
    a job share the launcher's stdout and stderr, and print() writes the newline apart, so two
    ranks' lines could run together. A reader of stdout that left (``| head -1``) ends no rank,
    since the others would fail in their next collective without it: the rank goes on."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout or not reader_left():
            raise


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
