#!/usr/bin/env python
"""hanging_collective.py: a distributed job that hangs on purpose, and ends with a message naming the stuck collective.

What it shows
-------------
Every rank must call the same collectives in the same order. This job breaks the rule on purpose
(``--mode``):

* ``mismatch`` (default) - rank 0 calls ``all_reduce`` while every other rank calls ``broadcast``:
  each side waits for partners that are in a different collective, so nobody progresses;
* ``missing``  - the last rank skips the collective and goes straight to a ``barrier`` that the
  others never reach;
* ``ok``       - every rank calls ``all_reduce``: the job finishes (the control case).

Before the collective each rank prints one line ``rank R pid P: entering <collective> ...``, so you
can attach ``py-spy dump --pid P`` to every rank while it hangs (see the Debugging chapter) and see
which line each one is stuck on. Each collective runs inside ``watch(name)``, which turns the
process group's timeout (``--timeout-s``) into a one-line error naming the collective, e.g.::

    hanging_collective.py: error: rank 0 (pid 123): all_reduce #1 (shape [4], float32) did not complete within 10 s: the other ranks are not in the same collective

and exits with status 1. As a backstop for hangs that no timeout can interrupt (a rank stuck in a
CUDA kernel, or NCCL without its watchdog), ``faulthandler.dump_traceback_later`` prints every
thread's Python stack to stderr after ``--timeout-s`` + ``--dump-margin-s`` and exits.

With NCCL, PyTorch's watchdog enforces the timeout and tears the process down itself; its log
names the collective too (``WorkNCCL(SeqNum=1, OpType=ALLREDUCE, ...)``), and the flight recorder
(``TORCH_NCCL_TRACE_BUFFER_SIZE``) can dump the last collectives of every rank.

How to launch
-------------
CPU (gloo), two processes::

    torchrun --standalone --nproc-per-node 2 hanging_collective.py --timeout-s 10

and, in another terminal while it hangs::

    py-spy dump --pid <pid printed by rank 0>; py-spy dump --pid <pid printed by rank 1>

GPUs (nccl, one GPU per rank): the same with ``--backend nccl``. SLURM: ``srun --ntasks 2
python -m torch.distributed.run ...`` or plain ``srun`` with MASTER_ADDR/MASTER_PORT exported
(RANK/WORLD_SIZE are taken from SLURM_PROCID/SLURM_NTASKS when torchrun's are absent).

Example output (2-core cloud VM, torch 2.13.0+cpu, gloo; torchrun's own lines trimmed)::

    $ torchrun --standalone --nproc-per-node 2 scripts/debug/hanging_collective.py --timeout-s 5
    rank 1 pid 5429: entering all_reduce #1 (shape [4], float32)
    rank 0 pid 5428: entering all_reduce #1 (shape [4], float32)
    rank 1: all_reduce #1 done
    rank 1 pid 5429: entering broadcast #2 (shape [4], float32)
    rank 0: all_reduce #1 done
    rank 0 pid 5428: entering all_reduce #2 (shape [4], float32)
    hanging_collective.py: error: rank 0 (pid 5428): all_reduce #2 (shape [4], float32) did not complete within 5 s: the other ranks are not in the same collective
    hanging_collective.py: error: rank 1 (pid 5429): broadcast #2 (shape [4], float32) did not complete within 5 s: the other ranks are not in the same collective
    ...
    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ...
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import os
import sys
import time

PROG = "hanging_collective.py"


def say(line: str, stream=sys.stdout) -> None:
    """Write ``line`` and its newline in one write: every rank shares the launcher's stdout and
    stderr, and print() writes the newline separately, so two ranks' lines could run together."""
    stream.write(line + "\n")
    stream.flush()


def fail(msg: str, status: int = 2) -> None:
    """Print a one-line error naming the problem and exit with ``status``."""
    say(f"{PROG}: error: {msg}", sys.stderr)
    sys.exit(status)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) from torchrun's RANK/WORLD_SIZE, else SLURM's, else (0, 1)."""
    rank = os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))
    world = os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1"))
    return int(rank), int(world)


class Collectives:
    """Counts the collectives this rank calls and names the one that times out.

    ``with coll.watch("all_reduce", tensor): dist.all_reduce(tensor)`` re-raises a timeout (or any
    other error the backend raises) as SystemExit(1) after printing which collective, which call
    number on this rank and which tensor it was, and how long it waited (seconds).
    """

    def __init__(self, rank: int, timeout_s: float):
        self.rank, self.timeout_s, self.count = rank, timeout_s, 0

    @contextlib.contextmanager
    def watch(self, name: str, tensor=None):
        self.count += 1
        what = f"{name} #{self.count}"
        if tensor is not None:
            what += f" (shape {list(tensor.shape)}, {str(tensor.dtype).replace('torch.', '')})"
        say(f"rank {self.rank} pid {os.getpid()}: entering {what}")
        start = time.monotonic()
        try:
            yield
        except RuntimeError as exc:
            waited = time.monotonic() - start
            reason = ("did not complete within "
                      f"{self.timeout_s:g} s: the other ranks are not in the same collective"
                      if "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
                      else f"failed after {waited:.1f} s: {str(exc).splitlines()[0][:200]}")
            fail(f"rank {self.rank} (pid {os.getpid()}): {what} {reason}", status=1)
        say(f"rank {self.rank}: {name} #{self.count} done")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="A 2+ rank job whose ranks call different collectives, so it "
        "hangs until the timeout names the stuck collective.")
    p.add_argument("--mode", choices=("mismatch", "missing", "ok"), default="mismatch",
                   help="mismatch: rank 0 all_reduce, others broadcast; missing: the last rank "
                   "skips the collective; ok: all ranks all_reduce (default mismatch)")
    p.add_argument("--timeout-s", type=float, default=30.0,
                   help="process-group timeout in seconds (default 30)")
    p.add_argument("--dump-margin-s", type=float, default=15.0,
                   help="seconds after the timeout at which faulthandler dumps all stacks and "
                   "exits, if the job is still alive (default 15)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl with CUDA, else gloo (default auto)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.timeout_s <= 0 or args.dump_margin_s <= 0:
        fail("--timeout-s and --dump-margin-s must be positive")
    rank, world = rank_and_world()
    if world < 2:
        fail(f"needs at least 2 ranks (world size is {world}); launch with torchrun "
             "--nproc-per-node 2")
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            fail(f"{var} is not set; launch with torchrun, or export it for srun")

    # Backstop: if the job is still alive well after the timeout, print every thread's stack
    # and exit, whatever the backend is doing.
    faulthandler.dump_traceback_later(args.timeout_s + args.dump_margin_s, exit=True)

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        fail("--backend nccl needs CUDA, and no GPU is visible")
    device = torch.device("cpu")
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    coll = Collectives(rank, args.timeout_s)
    t = torch.full((4,), float(rank + 1), device=device)

    # A first collective that every rank calls: it proves the group works before the hang.
    with coll.watch("all_reduce", t):
        dist.all_reduce(t)

    if args.mode == "ok" or (args.mode == "mismatch" and rank == 0):
        with coll.watch("all_reduce", t):
            dist.all_reduce(t)
    elif args.mode == "mismatch":
        with coll.watch("broadcast", t):
            dist.broadcast(t, src=1)
    elif rank != world - 1:                 # mode "missing": the last rank skips the all_reduce
        with coll.watch("all_reduce", t):
            dist.all_reduce(t)

    with coll.watch("barrier"):
        dist.barrier()
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        print(f"all {world} ranks finished; value {t[0].item():g}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
