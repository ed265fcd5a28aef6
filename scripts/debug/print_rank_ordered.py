#!/usr/bin/env python
"""print_rank_ordered.py: print from many ranks without interleaved lines, optionally in rank order.

The problem
-----------
Every rank of a distributed job writes to the same terminal or log file. Two ranks printing
multi-line messages at the same time produce lines (and sometimes half-lines) mixed together, and
the order changes from run to run. Two helpers fix it:

* ``print_locked(*args)`` - any rank, any time, no collective: takes an exclusive ``fcntl.flock`` on
  a lock file (shared by the ranks of one node: ``--lock-file``, default this script's own path)
  while it writes and flushes. Messages come out whole, in the order the ranks got the lock.
  POSIX only (``fcntl``); ranks on different nodes write to different terminals anyway.
* ``print_rank_ordered(text)`` - a collective (every rank must call it): ``gather_object`` sends
  every rank's text to rank 0, which prints them in rank order, each under a ``[rank R]`` header.
  Deterministic output, at the cost of a collective (don't call it from only some ranks: that is
  the hang of hanging_collective.py).

The demo prints a multi-line message from every rank three ways: plain ``print`` (may interleave),
``print_locked`` and ``print_rank_ordered``.

How to launch
-------------
::

    torchrun --standalone --nproc-per-node 4 print_rank_ordered.py
    torchrun --standalone --nproc-per-node 4 print_rank_ordered.py --lines 3 --only ordered

Library use: copy the two functions, or ``from print_rank_ordered import print_locked,
print_rank_ordered`` with this file on ``sys.path``.

Example output (2 ranks, 2-core cloud VM, torch 2.13.0+cpu, gloo)::

    $ torchrun --standalone --nproc-per-node 2 scripts/debug/print_rank_ordered.py --only ordered
    [rank 0]
      rank 0 of 2 on vm: line 1 of 4
      rank 0 of 2 on vm: line 2 of 4
      rank 0 of 2 on vm: line 3 of 4
      rank 0 of 2 on vm: line 4 of 4
    [rank 1]
      rank 1 of 2 on vm: line 1 of 4
      rank 1 of 2 on vm: line 2 of 4
      rank 1 of 2 on vm: line 3 of 4
      rank 1 of 2 on vm: line 4 of 4
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys

PROG = "print_rank_ordered.py"


def print_locked(*args, lock_file: str = __file__, **kwargs) -> None:
    """``print(*args, **kwargs)`` under an exclusive ``fcntl.flock`` on ``lock_file``, then flush.

    Processes that use the same ``lock_file`` never interleave their messages. The file must be
    readable by every process (it is opened read-only and never modified). Raises OSError if it
    cannot be opened.
    """
    import fcntl
    with open(lock_file, "r") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            print(*args, **kwargs, flush=True)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def print_rank_ordered(text: str, file=None) -> None:
    """Collective: rank 0 prints every rank's ``text`` in rank order under ``[rank R]`` headers.

    Every rank of the default process group must call it (it uses ``gather_object``); without an
    initialised process group it just prints ``text``. Returns nothing; non-zero ranks print nothing.
    """
    import torch.distributed as dist
    file = file or sys.stdout
    if not (dist.is_available() and dist.is_initialized()):
        print(text, file=file, flush=True)
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    texts = [None] * world if rank == 0 else None
    dist.gather_object(text, texts, dst=0)
    if rank == 0:
        for r, t in enumerate(texts):
            print(f"[rank {r}]\n{t}", file=file, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Print a multi-line message from every "
                                "rank: plainly, under a file lock, and gathered in rank order.")
    p.add_argument("--lines", type=int, default=4, help="lines per message (default 4)")
    p.add_argument("--only", choices=("plain", "locked", "ordered"),
                   help="run only one of the three demos")
    p.add_argument("--lock-file", default=__file__,
                   help="file to flock for print_locked (default: this script)")
    p.add_argument("--timeout-s", type=float, default=60.0,
                   help="process-group timeout in seconds (default 60)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.lines < 1:
        print(f"{PROG}: error: --lines must be at least 1, got {args.lines}", file=sys.stderr)
        return 2
    if not os.access(args.lock_file, os.R_OK):
        print(f"{PROG}: error: cannot read lock file {args.lock_file!r}", file=sys.stderr)
        return 2
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    if world > 1:
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            print(f"{PROG}: error: MASTER_ADDR and MASTER_PORT must be set for {world} ranks "
                  "(launch with torchrun)", file=sys.stderr)
            return 2
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args.timeout_s))
    host = socket.gethostname()
    message = "\n".join(f"  rank {rank} of {world} on {host}: line {i + 1} of {args.lines}"
                        for i in range(args.lines))
    if args.only in (None, "plain"):
        for line in message.splitlines():      # one write per line: other ranks can cut in
            print(line, flush=True)
    if args.only in (None, "locked"):
        if world > 1:
            dist.barrier()
        print_locked(f"[rank {rank}, locked]\n{message}", lock_file=args.lock_file)
    if args.only in (None, "ordered"):
        if world > 1:
            dist.barrier()
        print_rank_ordered(message)
    if world > 1:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
