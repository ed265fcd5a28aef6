#!/usr/bin/env python
"""checkpoint_io_bench.py: checkpoint write and read bandwidth with torch.save and with DCP.

Every rank builds its shard, ``--size`` / world_size bytes of ``--dtype`` tensors, then ``--iters``
times per method saves it and reads it back: ``torch.save`` (one fsynced file per rank, read with
torch.load(weights_only=True)), ``dcp`` (torch.distributed.checkpoint save and load) and, with
``--async-save``, ``dcp_async`` (also the time training is blocked). Files are dropped from the
page cache before each read (``--warm-read``: not), and every tensor read back is checked. Time
= the max over ranks between two barriers, median of the iterations; GBps = total bytes / time,
decimal (1e9 bytes/s). CPU tensors use gloo; ``--device cuda`` puts the shard on GPU LOCAL_RANK.
Method and launch lines for SLURM: book/en/storage/index.md ("Checkpoint benchmark").

    python checkpoint_io_bench.py --dir /scratch/$USER --size 2G
    torchrun --standalone --nproc-per-node 8 checkpoint_io_bench.py --dir /lustre/$USER/ckpt \\
        --size 64G --device cuda --async-save --json ckpt.json

Example output (2 CPU processes, local ext4; results/storage/checkpoint_io_bench-cpu-2proc.json)::

        method            op       GB   time(s)     GBps
    torch.save          save    2.147     8.203    0.262
           dcp          load    2.147     4.965    0.433
     dcp_async save_blocking    2.147     2.139    1.004
    # verified: every tensor read back equals what was written

Exit status: 0 ok, 1 failure (a failed save or load, a dead rank after --timeout: one line
naming the rank), 2 usage (checked before any work), 130/143 interrupted by Ctrl-C/SIGTERM (the
methods finished are still reported). The checkpoint files are removed unless --keep.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
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


# ----------------------------------------------------------------------------------------------
# The method: the shard, the page cache, the check
# ----------------------------------------------------------------------------------------------

class BenchError(Exception):
    """A problem reported as a one-line error."""


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


# ----------------------------------------------------------------------------------------------
# Launch and the timed saves and loads
# ----------------------------------------------------------------------------------------------

def fail(rank: int, msg: str, code: int = 2) -> int:
    """Print ``PROG: error: msg`` (a usage error, code 2, from rank 0 only) and return ``code``."""
    if rank == 0 or code != 2:
        print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
    return code


def join_group(torch, dist, args, launch: Launch) -> tuple[object, str]:
    """(device, backend) after init_process_group, within ``--timeout``: gloo for CPU tensors,
    with nccl for CUDA ones on GPU LOCAL_RANK. BenchError for a CUDA that is not there;
    ScriptError naming MASTER_ADDR:MASTER_PORT for a rendezvous that fails."""
    rank, world, local_rank, master = launch.rank, launch.world, launch.local_rank, launch.master
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise BenchError("--device cuda but CUDA is not available")
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "cpu:gloo,cuda:nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if master is None:  # plain `python`: a group of one
        master = f"127.0.0.1:{_free_port()}"
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=master.partition(":")[2])
    # The store client retries past `timeout`; the deadline bounds the whole rendezvous.
    with deadline(args.timeout * 1.1 + 1, f"rank {rank}: rendezvous with "
                                          f"MASTER_ADDR:MASTER_PORT {master}"):
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout))
        except RuntimeError as err:  # DistNetworkError, DistStoreError: a peer is missing
            raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {master} "
                              f"failed: {(str(err).strip().splitlines() or [''])[0]}") from None
    return device, backend


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bench:
    """One run on one rank: its shard, the checkpoint folder, the timings, the results so far."""

    def __init__(self, torch, dist, dcp, args, launch: Launch, device, backend: str):
        self.torch, self.dist, self.dcp, self.args, self.launch = torch, dist, dcp, args, launch
        self.rank, self.world, self.device, self.backend = launch.rank, launch.world, device, backend
        self.dtype = getattr(torch, args.dtype)
        self.workdir: Path | None = None
        self.results: list[dict] = []
        self.reporting = False  # True once report() has all it needs
        self.interrupted = False
        # Ctrl-C and SIGTERM (scancel, a time limit) stop the run between operations; the
        # finished results are still reported. The signals that came: DCP wraps what it raises.
        self.stopped_by = on_stop_signals()

    def run(self, methods: list[str], per_rank: int) -> int:
        """Make the run folder, build the shard, measure every method; 0, or fail()'s status."""
        torch, dist, rank = self.torch, self.dist, self.rank
        # Every rank checks the directory; rank 0 creates the run directory for all.
        name = [None]
        ok = [True]
        if rank == 0:
            try:
                name[0] = tempfile.mkdtemp(prefix="ckpt_bench.", dir=self.args.dir)
                self.workdir = Path(name[0])  # removed by cleanup() even if the broadcast fails
            except OSError as err:
                ok[0] = False
                name[0] = f"--dir {self.args.dir} is not writable ({err.strerror})"
        dist.broadcast_object_list(name, src=0)
        dist.broadcast_object_list(ok, src=0)
        if not ok[0]:
            return fail(rank, name[0])
        self.workdir = Path(name[0])
        self.state = make_state(torch, rank, per_rank, self.args.tensor_size, self.dtype, self.device)
        nbytes_rank = sum(t.numel() * t.element_size() for t in self.state.values())
        total = torch.tensor([nbytes_rank], dtype=torch.int64)
        dist.all_reduce(total)
        self.total_bytes = int(total.item())
        self.results = []
        # async_save finishes with collectives from a background thread: give it its own
        # group, or they interleave with this thread's barriers on the default group and hang.
        self.ckpt_group = dist.new_group(backend="gloo") if self.args.async_save else None
        self.reporting = True

        todo = methods + (["dcp_async"] if self.args.async_save else [])
        for done, method in enumerate(todo, 1):
            self.measure(method)
            if rank == 0:  # progress, and what an interrupted run will still report
                print(f"# finished {method} ({done} of {len(todo)} methods)", flush=True)
        if rank == 0:
            self.report(interrupted=False)
        dist.barrier()
        return 0

    def timed(self, fn) -> float:
        """Seconds from a barrier to the slowest rank finishing ``fn`` (max over ranks)."""
        torch, dist = self.torch, self.dist
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def measure(self, method: str) -> None:
        """``--iters`` saves and loads of the shard with ``method``; records their medians."""
        saves, loads, blocking = [], [], []
        for it in range(self.args.iters):
            target = self.workdir / f"{method}.{it}"
            if self.rank == 0:
                target.mkdir()
            self.dist.barrier()
            if method == "torch.save":
                save_s, load_s = self.torch_save_load(target)
            else:
                block_s, save_s, load_s = self.dcp_save_load(method, target)
                if block_s is not None:
                    blocking.append(block_s)
            saves.append(save_s)
            loads.append(load_s)
            self.dist.barrier()
            if self.rank == 0 and not self.args.keep:
                shutil.rmtree(target, ignore_errors=True)
        if blocking:
            self.record(method, "save_blocking", blocking)
        self.record(method, "save", saves)
        self.record(method, "load", loads)

    def torch_save_load(self, target: Path) -> tuple[float, float]:
        """One torch.save of the shard to its own file (fsynced: else the "write" would end in
        the page cache), then a torch.load (weights only) of it, checked; (save s, load s)."""
        torch, state = self.torch, self.state
        path = target / f"rank{self.rank}.pt"

        def save():
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
        save_s = self.timed(save)
        if not self.args.warm_read:
            drop_cache(target)
        out = {}
        load_s = self.timed(lambda: out.update(
            torch.load(path, map_location=self.device, weights_only=True)))
        verify(torch, state, out, f"rank {self.rank} torch.load")
        return save_s, load_s

    def dcp_save_load(self, method: str, target: Path) -> tuple[float | None, float, float]:
        """One dcp.save (``dcp``) or dcp.async_save (``dcp_async``: also the time training is
        blocked), then a dcp.load into fresh tensors, checked; (blocking s or None, save s,
        load s)."""
        torch, dist, dcp, state = self.torch, self.dist, self.dcp, self.state
        block_s = None
        if method == "dcp":
            save_s = self.timed(lambda: dcp.save(state, checkpoint_id=target))
        else:
            future = [None]

            def start():
                future[0] = dcp.async_save(state, checkpoint_id=target,
                                           process_group=self.ckpt_group)
            dist.barrier()
            t0 = time.perf_counter()
            block_s = self.timed(start)
            future[0].result()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            save_s = float(t.item())
        if not self.args.warm_read:
            drop_cache(target)
        out = {k: torch.empty_like(v) for k, v in state.items()}
        load_s = self.timed(lambda: dcp.load(out, checkpoint_id=target))
        verify(torch, state, out, f"rank {self.rank} dcp.load")
        return block_s, save_s, load_s

    def record(self, method: str, op: str, times: list[float]) -> None:
        med = statistics.median(times)
        self.results.append({"method": method, "op": op, "bytes": self.total_bytes,
                             "time_s": _sig(med), "times_s": [_sig(t) for t in times],
                             "GBps": _sig(self.total_bytes / med / 1e9)})

    def report(self, interrupted: bool) -> None:
        """Rank 0 prints the table and writes --json: every method, or those finished."""
        torch, args, results = self.torch, self.args, self.results
        device = self.device
        dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        fs = filesystem_of(self.workdir)
        print(f"# {PROG}: torch {torch.__version__}, {self.world} rank(s), backend {self.backend}, "
              f"device {dev_name}, dtype {args.dtype}")
        print(f"# checkpoint {self.total_bytes / 1e9:.3f} GB in {args.dir} ({fs}), "
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
                **envelope("checkpoint_io_bench", dev_name, {"torch": torch.__version__},
                           _command(self.launch)),
                "world_size": self.world, "backend": self.backend, "dtype": args.dtype,
                "size_bytes": self.total_bytes, "tensor_bytes": args.tensor_size,
                "iters": args.iters, "directory": str(args.dir), "filesystem": fs,
                "cold_read": not args.warm_read, "torch_version": torch.__version__,
                "hostname": platform.node(), "units": {"GBps": "1e9 bytes/s", "time": "s"},
                "results": results, "verified": True,
                **({"interrupted": True} if interrupted else {}),
            }
            write_atomic(args.json, json.dumps(summary, indent=2) + "\n")

    def stop(self) -> None:
        """End an interrupted run: report what finished, exit 130 (SIGINT) or 143 (SIGTERM)."""
        # No teardown collective: the other ranks may be gone and it would wait for them.
        self.interrupted = True
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the writing
            signal.signal(sig, signal.SIG_IGN)
        rank, results, args = self.rank, self.results, self.args
        if rank == 0 and self.reporting and results:
            self.report(interrupted=True)
        stop = Interrupted(self.stopped_by[0])
        kept = (f" after {len(results)} results" + (f"; wrote them to {args.json}"
                if args.json and results else "")) if rank == 0 else ""
        raise ScriptError(f"rank {rank}: interrupted by {stop.name}{kept}", stop.status) from None

    def failed(self, err: BaseException) -> None:
        """Raise the one line of a run that raised ``err`` (not an interruption), naming the
        rank, status 1. DCP's CheckpointException maps each failing rank to its (error,
        traceback): the lowest rank's error is named."""
        if self.stopped_by:  # the signal landed inside a save or load, which wrapped it
            self.stop()
        if not isinstance(err, (RuntimeError, OSError)):
            failures = getattr(err, "failures", None)
            if failures:
                item = min(failures.items())[1]
                err = item[0] if isinstance(item, tuple) else item
            first = (str(err).strip().splitlines() or [""])[0]
            raise ScriptError(f"rank {self.rank}: checkpoint in {self.args.dir} failed: "
                              f"{type(err).__name__}{': ' + first if first else ''}") from err
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ScriptError(f"rank {self.rank}: {first}") from err

    def cleanup(self) -> None:
        """Remove the checkpoint files (unless --keep) and, unless interrupted, the group."""
        if self.rank == 0 and self.workdir is not None and not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.dist.is_initialized() and not self.interrupted:
            self.dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

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


def _sig(x: float) -> float:
    """``x`` with 6 significant digits (JSON stays readable, precision stays relative)."""
    return float(f"{x:.6g}")


def _command(launch: Launch) -> str:
    """The launch line (``launch.command()``), with OMP_NUM_THREADS in front where it was set."""
    omp = os.environ.get("OMP_NUM_THREADS")
    return (f"OMP_NUM_THREADS={omp} " if omp else "") + launch.command()


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

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


def check_args(args, launch: Launch) -> list[str]:
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
            local, world = launch.local_world, launch.world
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    env = os.environ
    launch = Launch()
    rank, world = launch.rank, launch.world
    try:
        methods = check_args(args, launch)
    except (BenchError, ScriptError) as err:
        return fail(rank, str(err))
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    per_rank = args.size // world
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    itemsize = torch.empty((), dtype=getattr(torch, args.dtype)).element_size()
    if per_rank < itemsize or args.tensor_size < itemsize:
        return fail(rank, f"--size {args.size} B over {world} ranks leaves less than one "
                    f"{args.dtype} element per rank")
    try:
        device, backend = join_group(torch, dist, args, launch)
    except BenchError as err:
        return fail(rank, str(err))
    if env.get("CHECKPOINT_IO_BENCH_EXIT_RANK") == str(rank):  # self-test: a rank dies
        os._exit(3)
    bench = Bench(torch, dist, dcp, args, launch, device, backend)
    try:
        return bench.run(methods, per_rank)
    except Interrupted:
        bench.stop()
    except BenchError as err:
        return fail(rank, str(err), 1)
    except SystemExit:
        raise
    except BaseException as err:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        bench.failed(err)  # a collective timed out, a peer died, a full disk: one line, status 1
    finally:
        bench.cleanup()


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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM (scancel, a job's time limit), raised where the main thread is
    by the handler ``on_stop_signals`` installs. ``signum`` is the signal, ``name`` its name and
    ``status`` the exit status of a run it stops, 128 + signum (130, 143). A KeyboardInterrupt,
    so what catches Ctrl-C catches both; run_main exits with ``status``."""

    def __init__(self, signum: int = 2):  # SIGINT
        import signal
        self.signum, self.status, self.name = signum, 128 + signum, signal.Signals(signum).name
        super().__init__(self.name)


def on_stop_signals() -> list[int]:
    """From now on Ctrl-C and SIGTERM raise Interrupted, so that a run writes what it has before
    it exits with 128 + the signal; Ctrl-C too where a shell started the job with SIGINT ignored
    (a background job). Returns the list that receives each signal as it comes, for the code that
    sees the exception only wrapped (DCP wraps what a save raises)."""
    import signal
    stopped_by: list[int] = []

    def stop(signum, frame):
        stopped_by.append(signum)
        raise Interrupted(signum)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    return stopped_by


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


def envelope(benchmark: str, device: str | None, versions: dict | None = None,
             command: str | None = None, argv=None) -> dict:
    """The keys every results file starts with (tools/schemas/envelope.schema.json), in order:
    ``benchmark`` (the script's file stem), ``schema_version`` 1, ``date_utc`` (now),
    ``command`` (``command``, else ``command_line(argv)``), ``versions`` (Python's, and
    ``versions``: {"torch": ...}) and ``device`` (None where the result does not depend on the
    hardware). The script adds its own keys and ``results``."""
    import platform
    return {"benchmark": benchmark, "schema_version": 1, "date_utc": date_utc(),
            "command": command or command_line(argv, f"{benchmark}.py"),
            "versions": {"python": platform.python_version(), **(versions or {})}, "device": device}
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
