#!/usr/bin/env python
"""checkpoint_io_bench.py: checkpoint write and read bandwidth with torch.save and with DCP.

What it measures
----------------
Every rank builds a state dict of ``--size`` / world_size bytes (the rank's shard of a model and
optimizer state: ``--tensor-size`` tensors of ``--dtype``, filled with values that depend on the
rank and tensor index) and then, ``--iters`` times for each method:

* ``torch.save``: every rank writes its shard to its own file with ``torch.save`` and fsyncs it
  (without the fsync the "write" would end in the page cache), then reads it back with
  ``torch.load(..., weights_only=True)``;
* ``dcp``: ``torch.distributed.checkpoint.save`` with a ``FileSystemWriter`` (one file per rank,
  fsync on: ``sync_files=True``), then ``torch.distributed.checkpoint.load`` into the same
  state dict (https://docs.pytorch.org/docs/stable/distributed.checkpoint.html);
* ``dcp_async`` (with ``--async-save``): ``torch.distributed.checkpoint.async_save``; reported
  separately as the time training is blocked (until async_save returns: the copy of the state
  to host memory) and the time until the background write has finished.

Before each read the written files are dropped from the page cache with
``posix_fadvise(POSIX_FADV_DONTNEED)`` (a cold read; ``--warm-read`` skips this), and after each
read every tensor is compared with what was written. A time is the MAX over ranks (a checkpoint
is done when the slowest rank is done), measured between two barriers; bandwidth is total bytes
(all ranks) divided by that time, in decimal GBps (1 GBps = 1e9 bytes/s). The median over the
iterations is reported.

Output
------
A table (method, operation, bytes, median seconds, GBps) and ``--json PATH`` (values in <> are
placeholders)::

    {"benchmark": "checkpoint_io_bench", "schema_version": 1, "world_size": <int>,
     "backend": "gloo" | "nccl", "device": "cpu" | "<CUDA device name>", "dtype": "bfloat16",
     "size_bytes": <int, all ranks>, "tensor_bytes": <int>, "iters": <int>, "directory": "<DIR>",
     "filesystem": "<type>", "cold_read": true, "torch_version": "<version>",
     "hostname": "<host>", "date_utc": "YYYY-MM-DDTHH:MM:SSZ", "command": "<command line>",
     "results": [{"method": "torch.save" | "dcp" | "dcp_async", "op": "save" | "load" |
                  "save_blocking", "bytes": <int>, "time_s": <float, median>,
                  "times_s": [<float>, ...], "GBps": <float>}, ...],
     "verified": true}

How to launch
-------------
Any number of processes; CPU tensors use gloo, ``--device cuda`` puts the state on GPU LOCAL_RANK
(the save then includes the device-to-host copy) and adds nccl for CUDA tensors::

    python checkpoint_io_bench.py --dir /scratch/$USER --size 2G
    torchrun --standalone --nproc-per-node 8 checkpoint_io_bench.py --dir /lustre/$USER/ckpt \\
        --size 64G --device cuda --async-save --json ckpt.json
    srun --nodes 4 --ntasks-per-node 1 torchrun --nnodes 4 --nproc-per-node 8 \\
        --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:29500" checkpoint_io_bench.py \\
        --dir /lustre/$USER/ckpt --size 256G --device cuda

Plain ``srun`` (one task per GPU, no torchrun) works too: rank and world size come from
SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID, and MASTER_ADDR/MASTER_PORT must be exported.

Bad input (a ``--dir`` that is missing, a file or read-only, a ``--json`` that cannot be written,
a size below one tensor or one that does not fit in the free space of ``--dir`` or, on CPU, in
memory, launcher variables that are not integers) exits with status 2 and a one-line error from
rank 0 (every rank checks) before any work; ``--debug`` adds the traceback. Rendezvous is bounded
by ``--timeout`` too, whatever the store's retries. Collectives have a ``--timeout`` (default 300 s),
so a dead rank ends the job instead of hanging it; that, a failed save or load, or an unreachable
MASTER_ADDR:MASTER_PORT exits with status 1 and one line naming the rank. Self-test (for the test
suite only): ``CHECKPOINT_IO_BENCH_EXIT_RANK=R`` makes rank R exit right after joining the process
group. The checkpoint files are removed at the end unless ``--keep``. Ctrl-C or SIGTERM (``scancel``,
a job's time limit) stops the run: rank 0 still prints and writes to ``--json`` the methods that
finished (``"interrupted": true``), the checkpoint files are removed, and the status is 130 or 143.

Example output (2 CPU processes on the 2-core cloud VM, local ext4 disk; the committed file
results/storage/checkpoint_io_bench-cpu-2proc.json holds the whole run)::

    $ OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 2 \\
          scripts/storage/checkpoint_io_bench.py \\
          --dir /var/tmp --size 2G --iters 3 --async-save \\
          --json results/storage/checkpoint_io_bench-cpu-2proc.json
    # finished torch.save (1 of 3 methods)
    # finished dcp (2 of 3 methods)
    # finished dcp_async (3 of 3 methods)
    # checkpoint_io_bench.py: torch 2.13.0+cpu, 2 rank(s), backend gloo, device cpu, dtype bfloat16
    # checkpoint 2.147 GB in /var/tmp (ext4), cold reads, median of 3; GBps = 1e9 bytes/s; time = max over ranks
        method            op       GB   time(s)     GBps
    torch.save          save    2.147     8.203    0.262
    torch.save          load    2.147     4.262    0.504
           dcp          save    2.147    11.122    0.193
           dcp          load    2.147     4.965    0.433
     dcp_async save_blocking    2.147     2.139    1.004
     dcp_async          save    2.147    14.597    0.147
     dcp_async          load    2.147     5.303    0.405
    # verified: every tensor read back equals what was written
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

PROG = "checkpoint_io_bench.py"
DTYPES = ("bfloat16", "float16", "float32")


class BenchError(Exception):
    """A problem reported as a one-line error."""


def parse_size(text: str) -> int:
    """Bytes in ``text``: integer with optional binary suffix K, M, G, T (K = 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for i, suffix in enumerate("KMGT", 1):
        if t.endswith(suffix):
            mult, t = 1024 ** i, t[:-1]
            break
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be >= 1 byte, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Checkpoint save/load bandwidth (decimal "
                                "GBps) with torch.save and torch.distributed.checkpoint.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--dir", type=lambda t: Path(nonempty(t)), default=Path(tempfile.gettempdir()),
                   help="existing writable directory for the checkpoint (default: the temp dir)")
    p.add_argument("--size", type=parse_size, default=parse_size("1G"),
                   help="checkpoint size, all ranks together, e.g. 512M, 8G (default 1G)")
    p.add_argument("--tensor-size", type=parse_size, default=parse_size("64M"),
                   help="bytes per tensor (default 64M)")
    p.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    p.add_argument("--iters", type=number(int, 1, 1000), default=3, help="repetitions per method (default 3)")
    p.add_argument("--methods", default="torch.save,dcp",
                   help="comma-separated from torch.save,dcp (default both)")
    p.add_argument("--async-save", action="store_true", help="also measure dcp.async_save")
    p.add_argument("--warm-read", action="store_true",
                   help="do not drop the files from the page cache before reading")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--timeout", type=number(float, 0, 7 * 86400, lo_open=True), default=300.0,
                   help="seconds before a collective gives up (default 300)")
    p.add_argument("--keep", action="store_true", help="keep the checkpoint files")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the results as JSON")
    return p


def check_args(args) -> list[str]:
    """Validate arguments that need no torch; returns the method list. Raises BenchError."""
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in ("torch.save", "dcp")]
    if bad or not methods:
        raise BenchError(f"--methods must name torch.save and/or dcp, got {args.methods!r}")
    if not args.dir.is_dir():
        existing = args.dir
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing.exists() and not existing.is_dir():
            raise BenchError(f"--dir {args.dir}: {existing} is a file, not a folder")
        raise BenchError(f"--dir {args.dir} does not exist (give an existing folder)")
    check_output_dir(str(args.dir), "--dir")  # exists: only checks that files can be made there
    if args.json:
        check_output(args.json, "--json")
    # The checkpoint lands in --dir (all of it on a shared file system; every method's copies
    # with --keep), and each process holds its shard and the copy read back in memory.
    if args.device == "cpu" and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            local = env_int("LOCAL_WORLD_SIZE", 1, lo=1)
            world = env_int("WORLD_SIZE", env_int("SLURM_NTASKS", 1), lo=1)
            need = 2 * args.size // world * min(local, world)
            if need > 0.9 * ram:
                raise BenchError(f"--size {args.size / 1e9:.3f} GB needs about {need / 1e9:.3f} GB "
                                 f"of memory on this node (each rank's shard and the copy read "
                                 f"back) but it has {ram / 1e9:.3f} GB")
    copies = args.iters * (len(methods) + args.async_save) if args.keep else 1
    free = shutil.disk_usage(args.dir).free
    if args.size * copies > 0.95 * free:
        raise BenchError(f"--size {args.size / 1e9:.3f} GB x {copies} cop{'y' if copies == 1 else 'ies'}"
                         f" does not fit in the {free / 1e9:.3f} GB free in --dir {args.dir}")
    return methods


def filesystem_of(path: Path) -> str:
    """File-system type of the mount holding ``path`` (from /proc/mounts), or 'unknown'."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, fstype, target = "", "unknown", str(path.resolve())
    for line in mounts:
        f = line.split()
        if len(f) >= 3 and (target == f[1] or target.startswith(f[1].rstrip("/") + "/")) \
                and len(f[1]) > len(best):
            best, fstype = f[1], f[2]
    return fstype


def make_state(torch, rank: int, nbytes: int, tensor_bytes: int, dtype, device) -> dict:
    """This rank's shard: tensors 'shard{rank}.t{i}' of ``tensor_bytes`` (last one smaller)
    totalling ``nbytes``, tensor i filled with (rank * 131 + i) % 97, exact in every dtype."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    state, i, left = {}, 0, nbytes
    while left >= itemsize:
        n = min(tensor_bytes, left) // itemsize
        state[f"shard{rank}.t{i}"] = torch.full((n,), float((rank * 131 + i) % 97), dtype=dtype,
                                                device=device)
        left -= n * itemsize
        i += 1
    return state


def drop_cache(directory: Path) -> None:
    """Ask the kernel to drop the page-cache pages of every file under ``directory`` (fdatasync
    first: only clean pages can be dropped). No-op where posix_fadvise is missing."""
    if not hasattr(os, "posix_fadvise"):
        return
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def verify(torch, state: dict, loaded: dict, where: str) -> None:
    """Raise BenchError unless ``loaded`` holds exactly the tensors of ``state``."""
    if set(state) != set(loaded):
        raise BenchError(f"{where}: loaded keys differ from saved keys")
    for key, tensor in state.items():
        if not torch.equal(tensor.cpu(), loaded[key].cpu()):
            raise BenchError(f"{where}: tensor {key} differs after reading it back")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    env = os.environ
    # torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; plain srun sets the SLURM_* equivalents.
    rank = env_int("RANK", env_int("SLURM_PROCID", 0))
    world = env_int("WORLD_SIZE", env_int("SLURM_NTASKS", 1), lo=1)
    local_rank = env_int("LOCAL_RANK", env_int("SLURM_LOCALID", 0))
    if rank >= world:
        raise ScriptError(f"rank {rank} is outside world size {world} (check RANK and "
                          "WORLD_SIZE)", EXIT_USAGE)

    def fail(msg: str, code: int = 2) -> int:
        if rank == 0 or code != 2:
            print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
        return code

    try:
        methods = check_args(args)
    except (BenchError, ScriptError) as err:
        return fail(str(err))
    if world > 1 and ("MASTER_ADDR" not in env or "MASTER_PORT" not in env):
        return fail("MASTER_ADDR and MASTER_PORT must be set (launch with torchrun, or export "
                    "them under srun)")
    master = f"{env.get('MASTER_ADDR')}:{env_int('MASTER_PORT', 0)}"
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    per_rank = args.size // world
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    dtype = getattr(torch, args.dtype)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if per_rank < itemsize or args.tensor_size < itemsize:
        return fail(f"--size {args.size} B over {world} ranks leaves less than one {args.dtype} "
                    "element per rank")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            return fail("--device cuda but CUDA is not available")
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "cpu:gloo,cuda:nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if world == 1 and "MASTER_ADDR" not in env:  # plain `python`: a group of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    # The store client retries past `timeout`; the deadline bounds the whole rendezvous.
    with deadline(args.timeout * 1.1 + 1, f"rank {rank}: rendezvous with "
                                          f"MASTER_ADDR:MASTER_PORT {master}"):
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout))
        except RuntimeError as err:  # DistNetworkError, DistStoreError: a peer is missing
            raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {master} "
                              f"failed: {(str(err).strip().splitlines() or [''])[0]}") from None
    if env.get("CHECKPOINT_IO_BENCH_EXIT_RANK") == str(rank):  # self-test: a rank dies
        os._exit(3)
    workdir = None
    report, results, interrupted = None, [], False
    # Ctrl-C (even where a shell started us with SIGINT ignored) and SIGTERM (scancel, a time
    # limit) stop the run between operations; the finished results are still reported.
    stopped_by: list[int] = []

    def on_signal(signum, frame):
        stopped_by.append(signum)
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def stop():
        """End an interrupted run: report what finished, exit 130 (SIGINT) or 143 (SIGTERM)."""
        nonlocal interrupted
        # No teardown collective: the other ranks may be gone and it would wait for them.
        interrupted = True
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the writing
            signal.signal(sig, signal.SIG_IGN)
        if rank == 0 and report is not None and results:
            report(interrupted=True)
        name = signal.Signals(stopped_by[0]).name
        kept = (f" after {len(results)} results" + (f"; wrote them to {args.json}"
                if args.json and results else "")) if rank == 0 else ""
        raise ScriptError(f"rank {rank}: interrupted by {name}{kept}", 128 + stopped_by[0]) from None
    try:
        # Every rank checks the directory; rank 0 creates the run directory for all.
        name = [None]
        ok = [True]
        if rank == 0:
            try:
                name[0] = tempfile.mkdtemp(prefix="ckpt_bench.", dir=args.dir)
                workdir = Path(name[0])  # removed in `finally` even if the broadcast fails
            except OSError as err:
                ok[0] = False
                name[0] = f"--dir {args.dir} is not writable ({err.strerror})"
        dist.broadcast_object_list(name, src=0)
        dist.broadcast_object_list(ok, src=0)
        if not ok[0]:
            return fail(name[0])
        workdir = Path(name[0])
        state = make_state(torch, rank, per_rank, args.tensor_size, dtype, device)
        nbytes_rank = sum(t.numel() * t.element_size() for t in state.values())
        total = torch.tensor([nbytes_rank], dtype=torch.int64)
        dist.all_reduce(total)
        total_bytes = int(total.item())

        def timed(fn) -> float:
            """Seconds from a barrier to the slowest rank finishing ``fn`` (max over ranks)."""
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return float(t.item())

        results: list[dict] = []
        # async_save finishes with collectives from a background thread: give it its own
        # group, or they interleave with this thread's barriers on the default group and hang.
        ckpt_group = dist.new_group(backend="gloo") if args.async_save else None

        def record(method, op, times):
            med = statistics.median(times)
            results.append({"method": method, "op": op, "bytes": total_bytes,
                            "time_s": _sig(med), "times_s": [_sig(t) for t in times],
                            "GBps": _sig(total_bytes / med / 1e9)})

        def report(interrupted: bool) -> None:
            """Rank 0 prints the table and writes --json: every method, or those finished."""
            dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
            fs = filesystem_of(workdir)
            print(f"# {PROG}: torch {torch.__version__}, {world} rank(s), backend {backend}, "
                  f"device {dev_name}, dtype {args.dtype}")
            print(f"# checkpoint {total_bytes / 1e9:.3f} GB in {args.dir} ({fs}), "
                  f"{'warm' if args.warm_read else 'cold'} reads, median of {args.iters}; "
                  "GBps = 1e9 bytes/s; time = max over ranks")
            if interrupted:
                print(f"# interrupted: {len(results)} results finished before the signal")
            print(f"{'method':>10} {'op':>13} {'GB':>8} {'time(s)':>9} {'GBps':>8}")
            for r in results:
                print(f"{r['method']:>10} {r['op']:>13} {r['bytes'] / 1e9:>8.3f} "
                      f"{r['time_s']:>9.3f} {r['GBps']:>8.3f}")
            print("# verified: every tensor read back equals what was written")
            if args.json:
                summary = {
                    "benchmark": "checkpoint_io_bench", "schema_version": 1, "world_size": world,
                    "backend": backend, "device": dev_name, "dtype": args.dtype,
                    "size_bytes": total_bytes, "tensor_bytes": args.tensor_size,
                    "iters": args.iters, "directory": str(args.dir), "filesystem": fs,
                    "cold_read": not args.warm_read, "torch_version": torch.__version__,
                    "versions": {"python": platform.python_version(), "torch": torch.__version__},
                    "hostname": platform.node(),
                    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "command": _command(world), "units": {"GBps": "1e9 bytes/s", "time": "s"},
                    "results": results, "verified": True,
                    **({"interrupted": True} if interrupted else {}),
                }
                write_atomic(args.json, json.dumps(summary, indent=2) + "\n")

        todo = methods + (["dcp_async"] if args.async_save else [])
        for done, method in enumerate(todo, 1):
            saves, loads, blocking = [], [], []
            for it in range(args.iters):
                target = workdir / f"{method}.{it}"
                if rank == 0:
                    target.mkdir()
                dist.barrier()
                if method == "torch.save":
                    path = target / f"rank{rank}.pt"

                    def save():
                        with open(path, "wb") as f:
                            torch.save(state, f)
                            f.flush()
                            os.fsync(f.fileno())
                    saves.append(timed(save))
                    if not args.warm_read:
                        drop_cache(target)
                    out = {}
                    loads.append(timed(lambda: out.update(
                        torch.load(path, map_location=device, weights_only=True))))
                    verify(torch, state, out, f"rank {rank} torch.load")
                else:
                    if method == "dcp":
                        saves.append(timed(lambda: dcp.save(state, checkpoint_id=target)))
                    else:
                        future = [None]

                        def start():
                            future[0] = dcp.async_save(state, checkpoint_id=target,
                                                       process_group=ckpt_group)
                        dist.barrier()
                        t0 = time.perf_counter()
                        block = timed(start)
                        future[0].result()
                        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
                        dist.all_reduce(t, op=dist.ReduceOp.MAX)
                        blocking.append(block)
                        saves.append(float(t.item()))
                    if not args.warm_read:
                        drop_cache(target)
                    out = {k: torch.empty_like(v) for k, v in state.items()}
                    loads.append(timed(lambda: dcp.load(out, checkpoint_id=target)))
                    verify(torch, state, out, f"rank {rank} dcp.load")
                dist.barrier()
                if rank == 0 and not args.keep:
                    shutil.rmtree(target, ignore_errors=True)
            if blocking:
                record(method, "save_blocking", blocking)
            record(method, "save", saves)
            record(method, "load", loads)
            if rank == 0:  # progress, and what an interrupted run will still report
                print(f"# finished {method} ({done} of {len(todo)} methods)", flush=True)

        if rank == 0:
            report(interrupted=False)
        dist.barrier()
        return 0
    except KeyboardInterrupt:
        if not stopped_by:  # Python's own Ctrl-C, before our handler was set
            stopped_by.append(signal.SIGINT)
        stop()
    except BenchError as err:
        return fail(str(err), 1)
    except (RuntimeError, OSError) as err:  # a collective timed out, a peer died, disk full
        if isinstance(err, BrokenPipeError) and stdout_reader_gone():  # `| head -1`: no error
            raise  # run_main ends the run quietly, with status 0 (after the teardown below)
        if stopped_by:  # the signal landed inside a save or load, which wrapped it
            stop()
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return fail(f"rank {rank}: {first}", 1)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if stopped_by:  # the signal landed inside a save or load: DCP wrapped the interrupt
            stop()
        # it maps each failing rank to its (error, traceback): name the lowest one's error
        failures = getattr(err, "failures", None)
        if failures:
            item = min(failures.items())[1]
            err = item[0] if isinstance(item, tuple) else item
        first = (str(err).strip().splitlines() or [""])[0]
        return fail(f"rank {rank}: checkpoint in {args.dir} failed: {type(err).__name__}"
                    f"{': ' + first if first else ''}", 1)
    finally:
        if rank == 0 and workdir is not None and not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if dist.is_initialized() and not interrupted:
            dist.destroy_process_group()


def _sig(x: float) -> float:
    """``x`` with 6 significant digits (JSON stays readable, precision stays relative)."""
    return float(f"{x:.6g}")


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(world: int) -> str:
    """The launch line, rebuilt from sys.argv and the launcher's environment."""
    args = " ".join(shlex.quote(a) for a in sys.argv)
    omp = os.environ.get("OMP_NUM_THREADS")
    prefix = f"OMP_NUM_THREADS={omp} " if omp else ""
    if "LOCAL_WORLD_SIZE" in os.environ:
        return f"{prefix}torchrun --nproc-per-node {os.environ['LOCAL_WORLD_SIZE']} {args}"
    return f"{prefix}python {args}"


# --- script contract (CONTRIBUTING.md, "Script contract"): the part this script uses, ---
# --- generated from tools/script_contract.py by `python tools/script_contract.py sync`. ---

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
            raise argparse.ArgumentTypeError(f"{shown!r} is not {'an integer' if kind is int else 'a number'}")
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


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED, anything
    else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the traceback as well. A reader
    that closed stdout (``| head -1``) ends the run quietly, with the status it had (0)."""
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
        if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):
            status, message = EXIT_INTERRUPTED, "interrupted"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
