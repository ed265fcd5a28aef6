#!/usr/bin/env python
"""all_reduce_bench.py: measure all-reduce bandwidth (algbw, busbw) over a sweep of message sizes.

For each message size S every rank all-reduces (SUM) S bytes ``--iters`` times back to back after
``--warmup`` untimed calls. time = the max over ranks of each rank's mean time per all-reduce (us);
algbw = S / time and busbw = algbw x 2(n-1)/n for n ranks, in decimal GBps (1e9 bytes/s), as the
NCCL tests define them (doc/PERFORMANCE.md). After each size every rank checks an untimed SUM of
known small integers exactly; a wrong value stops the run naming the rank. nccl with CUDA (GPU
LOCAL_RANK), gloo on CPU. Sizes take binary suffixes (K = 1024). Method, launch lines for SLURM
and how to read the result: book/en/network/index.md ("Benchmarking").

    torchrun --standalone --nproc-per-node 8 all_reduce_bench.py --max-bytes 4G --json ar.json
    srun --nodes 2 --ntasks-per-node 8 python all_reduce_bench.py    # MASTER_ADDR/PORT exported

Example output (2 CPU processes, gloo, on a 2-core VM; results/network/all_reduce_bench-cpu-gloo-2proc.json)::

    #       size        count      type     time(us)  algbw(GBps)  busbw(GBps)  check
            1024          256   float32      1399.40       0.0007       0.0007     OK
       268435456     67108864   float32    177909.67       1.5088       1.5088     OK
    # peak busbw: 1.5823 GBps at size 4194304 bytes (4M)

Exit status: 0 ok, 1 failure (a wrong result, a timeout after --timeout-s, an unreachable peer:
one line naming the rank and host), 2 usage (checked before any rank joins), 130/143 interrupted
by Ctrl-C/SIGTERM (rank 0 still prints and writes the sizes done, "interrupted": true).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
import traceback

PROG = "all_reduce_bench.py"

# Element size in bytes, and the largest integer N such that every integer in [0, N] is exactly
# representable (so any sum of small non-negative integers up to N is computed exactly, in any
# order). Float limits: 2**(mantissa bits + 1); int limits: the type's maximum.
# Only dtypes that both gloo and NCCL can all-reduce are listed (gloo rejects int16 and float8).
DTYPES = {
    "float32": (4, 2**24),
    "float64": (8, 2**53),
    "float16": (2, 2**11),
    "bfloat16": (2, 2**8),
    "int8": (1, 2**7 - 1),
    "uint8": (1, 2**8 - 1),
    "int32": (4, 2**31 - 1),
    "int64": (8, 2**63 - 1),
}
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp64": "float64", "double": "float64",
                 "fp16": "float16", "half": "float16", "bf16": "bfloat16"}

_SIZE_RE = re.compile(r"(\d+)([KMGT]?)(I?B)?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}

MAX_ITERS = 1_000_000  # per size and rank; --iters 1e12 is a typo, not a plan
MAX_SIZES = 1000  # each costs --warmup + --iters collectives on every rank: more is a typo


# ----------------------------------------------------------------------------------------------
# The method: the sweep, the busbw factor, the exact check values
# ----------------------------------------------------------------------------------------------

def message_sizes(min_bytes: int, max_bytes: int, factor: float, elem_size: int) -> list[int]:
    """Geometric sweep ``min_bytes, min_bytes*factor, ...`` up to and including ``max_bytes``.

    Each size is rounded down to a whole number of elements of ``elem_size`` bytes; duplicates
    that rounding creates are dropped. Returns sizes in bytes, increasing.
    """
    sizes: list[int] = []
    size = float(min_bytes)
    # The small epsilon keeps max_bytes in the sweep despite float rounding of size * factor.
    while size <= max_bytes * (1 + 1e-12):
        aligned = int(size) // elem_size * elem_size
        if aligned and (not sizes or aligned > sizes[-1]):
            sizes.append(aligned)
        size *= factor
    return sizes


def busbw_factor(world_size: int) -> float:
    """Bus-bandwidth factor of all-reduce: 2(n-1)/n (NCCL tests, doc/PERFORMANCE.md)."""
    return 2.0 * (world_size - 1) / world_size


def check_values(world_size: int, exact_limit: int) -> tuple[int, int, int]:
    """Choose per-rank fill values whose SUM is exact in a dtype.

    Rank r contributes ``r % m + 1`` if ``r < cap`` else 0. Returns ``(m, cap, expected_sum)``
    with m as large as possible (m = n gives the textbook n(n+1)/2) such that
    ``expected_sum <= exact_limit``; cap < n only when even all-ones would overflow the dtype
    (e.g. bfloat16 beyond 256 ranks), in which case ranks >= cap contribute 0.
    All contributions are non-negative integers, so every partial sum, in whatever order the
    backend adds them, is <= expected_sum and therefore exact.
    """
    cap = min(world_size, exact_limit)
    for m in range(cap, 0, -1):
        q, rem = divmod(cap, m)
        total = q * m * (m + 1) // 2 + rem * (rem + 1) // 2
        if total <= exact_limit:
            return m, cap, total
    raise AssertionError("unreachable: m = 1 gives cap <= exact_limit")


# ----------------------------------------------------------------------------------------------
# Device and process group (the launch: Launch, in the block at the end)
# ----------------------------------------------------------------------------------------------

def check_fits(torch, device, nbytes: int, option: str) -> None:
    """ScriptError (status 2) if a buffer of ``nbytes`` cannot fit in ``device``'s memory (the
    GPU's, or the host's RAM for cpu); checked before joining the group."""
    if device.type == "cuda":
        have, where = torch.cuda.get_device_properties(device).total_memory, "device"
    else:
        try:
            have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "host"
        except (ValueError, OSError):  # not reported by this OS: let the allocator decide
            return
    if nbytes > have:
        raise ScriptError(f"{option}: a buffer of {format_size(nbytes)} does not fit in this "
                          f"machine's {have / 2**30:.1f} GiB of {where} memory", EXIT_USAGE)


def _selftest_rank(name: str) -> int | None:
    value = env_int(name, -1)
    return value if value >= 0 else None


def choose_backend(torch, dist, args: argparse.Namespace) -> str:
    """nccl or gloo, as ``--backend`` asks (auto: nccl when CUDA and NCCL are there)."""
    cuda_ok = torch.cuda.is_available()
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if cuda_ok and dist.is_nccl_available() else "gloo"
    if backend == "nccl" and not (cuda_ok and dist.is_nccl_available()):
        die("--backend nccl needs CUDA and a PyTorch build with NCCL; use --backend gloo")
    return backend


def open_device(torch, backend: str, launch: Launch) -> tuple[object, str, dict]:
    """(device, its name, init_process_group keyword arguments): GPU number LOCAL_RANK for nccl,
    the CPU for gloo."""
    if backend == "nccl":
        if launch.local_rank >= torch.cuda.device_count():
            die(f"{launch.me()}: LOCAL_RANK {launch.local_rank} but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible")
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
        return device, torch.cuda.get_device_name(device), {"device_id": device}
    return torch.device("cpu"), "cpu", {}


def join_group(dist, args: argparse.Namespace, launch: Launch, backend: str, init_kwargs: dict) -> None:
    """init_process_group within ``--timeout-s``: through MASTER_ADDR:MASTER_PORT, or an
    in-memory store for a lone process."""
    rank, world = launch.rank, launch.world
    timeout = datetime.timedelta(seconds=args.timeout_s)
    if launch.master:
        # The store client retries a refused connection until well past `timeout`; the
        # deadline (a little later than the store's own timeout, whose message is more
        # precise when it comes) bounds the whole wait.
        with deadline(args.timeout_s * 1.1 + 1, f"rank {rank} on {launch.host}: rendezvous with "
                                      f"MASTER_ADDR:MASTER_PORT {launch.master}"):
            dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout,
                                    **init_kwargs)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1,
                                timeout=timeout, **init_kwargs)


def selftest_hooks(rank: int) -> int | None:
    """The test suite's hooks (see --help): this rank exits or stalls before the first
    collective; returns the rank that is to corrupt its result, if any."""
    if _selftest_rank("ALL_REDUCE_BENCH_EXIT_RANK") == rank:
        os._exit(3)
    if _selftest_rank("ALL_REDUCE_BENCH_STALL_RANK") == rank:
        while True:
            time.sleep(3600)
    return _selftest_rank("ALL_REDUCE_BENCH_CORRUPT_RANK")


# ----------------------------------------------------------------------------------------------
# One size: the timed loop and the check; the sweep
# ----------------------------------------------------------------------------------------------

def time_all_reduce(torch, dist, buf, args: argparse.Namespace, device) -> float:
    """This rank's mean seconds per all-reduce of ``buf``: ``--warmup`` untimed calls, a barrier,
    then ``--iters`` back-to-back calls (between CUDA events on a GPU)."""
    for _ in range(args.warmup):
        dist.all_reduce(buf)
    # Start the timed loop together, so one rank's late start is not counted as bandwidth.
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / args.iters  # elapsed_time is in ms
    # gloo's all_reduce on CPU tensors returns when the data is in place: wall time is the
    # operation's time.
    t0 = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / args.iters


def verify_sum(dist, buf, fill: int, expected: int, count: int, corrupt: bool) -> str | None:
    """The untimed check of one size on this rank: the timed buffer is still all zeros, and a SUM
    of every rank's ``fill`` gives ``expected`` everywhere. Returns what was wrong, or None."""
    problem = None
    if bool(buf.any()):
        idx = int(buf.nonzero()[0, 0])
        problem = (f"timed buffer should still be all zeros, element {idx} is "
                   f"{_num(buf[idx].item())}")
    buf.fill_(fill)
    dist.all_reduce(buf)
    if corrupt:
        buf[-1] += 1  # self-test hook: simulate a wrong received value on this rank
    if problem is None:
        bad = buf != expected
        if bool(bad.any()):
            idx = int(bad.nonzero()[0, 0])
            problem = f"expected {expected} got {_num(buf[idx].item())} at element {idx} (of {count})"
    return problem


def stop_on_wrong_result(dist, failed, problem: str | None, launch: Launch, size: int, count: int,
                         dtype: str) -> None:
    """Every rank learns which ranks saw a wrong value, so all of them stop at the same size (a
    rank that stopped alone would leave the others waiting in the next collective)."""
    rank = launch.rank
    failed.zero_()
    failed[rank] = 1 if problem else 0
    dist.all_reduce(failed)
    bad_ranks = failed.nonzero().flatten().tolist()
    if bad_ranks:
        if problem:
            die(f"{launch.me()}: wrong all-reduce result for size {size} "
                f"bytes ({dtype}): {problem}")
        if rank == 0:
            print(f"{size:>12} {count:>12} {dtype:>9} {'':>12} {'':>12} {'':>12} "
                  f"{'FAIL':>6}", flush=True)
            die(f"all-reduce result check failed on rank(s) {bad_ranks} at size {size} "
                "bytes; see their messages")
        die(None)  # the ranks with a wrong value, and rank 0, said it


def sweep(torch, dist, args: argparse.Namespace, launch: Launch, device, check: tuple[int, int, bool],
          factor: float, stage: list[str], results: list[dict]) -> None:
    """Time, check and record every size: one row each in ``results`` (printed by rank 0).
    ``check`` is (this rank's fill value, the expected sum, whether this rank corrupts it)."""
    rank, world = launch.rank, launch.world
    fill, expected, corrupt = check
    dtype = getattr(torch, args.dtype)
    max_time = torch.zeros(1, dtype=torch.float64, device=device)
    failed = torch.zeros(world, dtype=torch.int32, device=device)
    for size in args.size_list:
        count = size // args.elem_size
        stage[0] = f"all_reduce of {size} bytes"
        # Zeros: a SUM of zeros is zero after any number of iterations, so the values never
        # overflow and the check below knows what the timed buffer holds.
        buf = torch.zeros(count, dtype=dtype, device=device)
        max_time.fill_(time_all_reduce(torch, dist, buf, args, device))
        dist.all_reduce(max_time, op=dist.ReduceOp.MAX)  # a collective is as slow as its slowest rank
        time_s = max_time.item()

        stage[0] = f"verification all_reduce of {size} bytes"
        problem = verify_sum(dist, buf, fill, expected, count, corrupt)
        stop_on_wrong_result(dist, failed, problem, launch, size, count, args.dtype)

        algbw = size / time_s / 1e9
        busbw = algbw * factor
        # 6 significant digits: more than the measurement's precision, fine for tiny values.
        results.append({"size_bytes": size, "count": count, "time_us": _sig6(time_s * 1e6),
                        "algbw_GBps": _sig6(algbw), "busbw_GBps": _sig6(busbw)})
        if rank == 0:
            print(f"{size:>12} {count:>12} {args.dtype:>9} {time_s * 1e6:>12.2f} "
                  f"{algbw:>12.4f} {busbw:>12.4f} {'OK':>6}", flush=True)
        del buf


def run(args: argparse.Namespace, launch: Launch, stage: list[str]) -> None:
    """Initialise torch.distributed, run the sweep, print/write results. ``stage[0]`` says what
    is going on, for error messages. Raises RuntimeError (or backend errors) on failure."""
    import torch
    import torch.distributed as dist

    rank, world = launch.rank, launch.world
    backend = choose_backend(torch, dist, args)
    stage[0] = f"waiting for peers in init_process_group (timeout {args.timeout_s:g} s)"
    device, device_name, init_kwargs = open_device(torch, backend, launch)
    check_fits(torch, device, args.size_list[-1], "--sizes" if args.sizes else "--max-bytes")
    join_group(dist, args, launch, backend, init_kwargs)
    corrupt_rank = selftest_hooks(rank)

    stage[0] = "all_gather_object of host names"
    hosts: list[str | None] = [None] * world
    dist.all_gather_object(hosts, launch.host)
    nnodes = len(set(hosts))

    m, cap, expected = check_values(world, DTYPES[args.dtype][1])
    my_value = rank % m + 1 if rank < cap else 0
    factor = busbw_factor(world)
    if rank == 0:
        print_header(torch, args, backend, device_name, world, nnodes, factor, expected)

    results: list[dict] = []
    stopped = None
    try:
        sweep(torch, dist, args, launch, device, (my_value, expected, corrupt_rank == rank), factor,
              stage, results)
    except Interrupted as stop:  # keep the sizes measured so far (every rank agreed on them)
        stopped = stop

    if not stopped:
        stage[0] = "final barrier"
        dist.barrier()
    elif rank == 0:
        print(f"# interrupted: {len(results)} of {len(args.size_list)} sizes done; results so far:")
    if rank == 0 and results:
        run_info = {"backend": backend, "device": device_name, "world_size": world,
                    "nnodes": nnodes, "torch": torch.__version__, "factor": factor, "hosts": hosts}
        write_results(args, launch, run_info, results, bool(stopped))
    if stopped:  # no teardown: the other ranks may be gone, and it would wait for them
        die(None, stopped.status)
    stage[0] = "destroy_process_group"
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _sig6(value: float) -> float:
    return float(f"{value:.6g}")


def _num(value: float | int) -> str:
    """Print 4.0 as 4 (the check values are integers), anything else as is."""
    return str(int(value)) if float(value).is_integer() else repr(value)


def format_size(nbytes: int) -> str:
    """Human label for a byte count: ``1K``, ``64M``... if an exact binary multiple, else bytes."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def print_header(torch, args: argparse.Namespace, backend: str, device_name: str, world: int,
                 nnodes: int, factor: float, expected: int) -> None:
    """Rank 0's lines above the table: the run, the definitions, the check, the column names."""
    print(f"# {PROG}: all-reduce (SUM) bandwidth, torch {torch.__version__}")
    print(f"# backend {backend} | device {device_name} | world_size {world} | nnodes {nnodes}"
          f" | dtype {args.dtype} | warmup {args.warmup} | iters {args.iters}")
    print("# time: max over ranks of the mean per-iteration time, in microseconds (us)")
    print(f"# algbw = size/time; busbw = algbw * 2(n-1)/n = algbw * {factor:.4g}; "
          "in GBps (1 GBps = 1e9 bytes/s)")
    if world == 1:
        print("# NOTE: world size 1: nothing crosses a link, busbw is 0 by definition; "
              "launch with torchrun for a real measurement")
    print(f"# check: after each size's timed loop every rank verifies an untimed SUM "
          f"(expected value {expected})")
    print("#")
    print(f"# {'size':>10} {'count':>12} {'type':>9} {'time(us)':>12} "
          f"{'algbw(GBps)':>12} {'busbw(GBps)':>12} {'check':>6}")
    sys.stdout.flush()


def json_report(args: argparse.Namespace, launch: Launch, run_info: dict, results: list[dict],
                interrupted: bool) -> dict:
    """The --json document (keys: tools/schemas/all_reduce_bench.schema.json)."""
    peak = max(results, key=lambda r: r["busbw_GBps"])
    return {
        **envelope("all_reduce_bench", run_info["device"], {"torch": run_info["torch"]},
                   launch.command()),
        "backend": run_info["backend"],
        "world_size": run_info["world_size"],
        "nnodes": run_info["nnodes"],
        "dtype": args.dtype,
        "warmup": args.warmup,
        "iters": args.iters,
        "torch_version": run_info["torch"],
        "hostname": launch.host,
        "results": results,
        "peak_busbw_GBps": peak["busbw_GBps"],
        # Extra keys (not part of the schema the notebook relies on):
        "peak_busbw_size_bytes": peak["size_bytes"],
        "busbw_factor": run_info["factor"],
        "launcher": launch.launcher,
        "hosts": sorted(set(run_info["hosts"])),
        "units": {"size": "bytes", "time": "microseconds, max over ranks of the mean "
                  "per-iteration time", "bandwidth": "GBps, 1 GBps = 1e9 bytes/s"},
        "verified": True,
        "interrupted": interrupted,
    }


def write_results(args: argparse.Namespace, launch: Launch, run_info: dict, results: list[dict],
                  interrupted: bool) -> None:
    """Rank 0, after the sweep: the peak busbw line, then --json and --plot."""
    peak = max(results, key=lambda r: r["busbw_GBps"])
    print(f"# peak busbw: {peak['busbw_GBps']:.4f} GBps at size {peak['size_bytes']} bytes "
          f"({format_size(peak['size_bytes'])})", flush=True)
    report = json_report(args, launch, run_info, results, interrupted)
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=2) + "\n")
        print(f"# wrote {args.json}")
    if args.plot:
        write_plot(args.plot, report)
        print(f"# wrote {args.plot}")


def write_plot(path: str, report: dict) -> None:
    """Write a PNG of busbw (GBps) against message size (bytes, log2 axis) from ``report``
    (the --json dictionary). Imports matplotlib here so nothing else needs it."""
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        die("--plot needs matplotlib, which is not installed (pip install matplotlib)")
    sizes = [r["size_bytes"] for r in report["results"]]
    busbw = [r["busbw_GBps"] for r in report["results"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes, busbw, marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([format_size(s) for s in sizes], rotation=60, fontsize=7)
    ax.set_xlabel("message size (bytes; K = 1024)")
    ax.set_ylabel("busbw (GBps, 1 GBps = 1e9 B/s)")
    ax.set_title(f"all-reduce {report['dtype']}: {report['world_size']} ranks, "
                 f"{report['nnodes']} node(s), {report['backend']}, {report['device']}",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    write_atomic(path, buffer.getvalue())
    plt.close(fig)


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """Parse a byte count such as ``1024``, ``32K``, ``1M``, ``4G``, ``64KiB`` or ``2MB``.

    Suffixes are binary (K = 1024, M = 1024**2, G = 1024**3, T = 1024**4), case-insensitive, and
    may be followed by ``B`` or ``iB``. Returns the size in bytes (int, may be 0).
    Raises argparse.ArgumentTypeError on anything else (so argparse names the option).
    """
    m = _SIZE_RE.fullmatch(text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use an integer number of bytes with an optional binary "
            f"suffix K, M, G or T (K = 1024)")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def parse_dtype(text: str) -> str:
    """Return the canonical dtype name for ``text`` (e.g. ``bf16`` -> ``bfloat16``).

    Raises argparse.ArgumentTypeError for an unknown name.
    """
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(
            f"unknown dtype {text!r} (choose from {', '.join(DTYPES)})")
    return name


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "All-reduce (SUM) bandwidth benchmark over a sweep of message sizes. Reports time "
            "(us, max over ranks of the mean per-iteration time), algbw = size/time and "
            "busbw = algbw*2(n-1)/n, in GBps (1 GBps = 1e9 bytes/s), as defined by the NCCL tests. "
            "Launch with torchrun (or srun); plain python runs a single process."),
        epilog=(
            "Sizes accept binary suffixes: K=1024, M=1024**2, G=1024**3, T=1024**4 (e.g. 32K, "
            "1M, 4G). Self-test of the result check: the environment variable "
            "ALL_REDUCE_BENCH_CORRUPT_RANK=R makes rank R corrupt its result, so the run must "
            "fail; "
            "ALL_REDUCE_BENCH_EXIT_RANK=R / ALL_REDUCE_BENCH_STALL_RANK=R make rank R exit / hang "
            "before the first collective, so the run must fail within --timeout-s."),
    )
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--min-bytes", type=parse_size, default=None, metavar="SIZE",
                   help="smallest message size of the geometric sweep (default 1K)")
    p.add_argument("--max-bytes", type=parse_size, default=None, metavar="SIZE",
                   help="largest message size of the geometric sweep (default 256M)")
    p.add_argument("--factor", type=number(float), default=None,
                   help="ratio between consecutive sizes of the sweep, > 1 (default 2)")
    p.add_argument("--sizes", nargs="+", default=None, metavar="SIZE",
                   help="explicit message sizes instead of a sweep, space- or comma-separated "
                        "(e.g. --sizes 1K 1M 64M); each must be a multiple of the element size")
    p.add_argument("--dtype", type=parse_dtype, default="float32",
                   help=f"element type: {', '.join(DTYPES)} (aliases fp32, fp16, bf16, ...); "
                        "default float32")
    p.add_argument("--warmup", type=number(int, 0, MAX_ITERS), default=5,
                   help="untimed all-reduces per size before timing, >= 0 (default 5)")
    p.add_argument("--iters", type=number(int, 1, MAX_ITERS), default=20,
                   help="timed all-reduces per size, >= 1 (default 20)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl if CUDA is available, else gloo (CPU tensors). Default auto")
    p.add_argument("--timeout-s", type=number(float, 0, lo_open=True), default=60.0,
                   help="seconds to wait for peers (rendezvous and each collective) before "
                        "failing, > 0 (default 60)")
    p.add_argument("--json", metavar="PATH", default=None, type=nonempty,
                   help="write machine-readable results to PATH (rank 0)")
    p.add_argument("--plot", metavar="PATH", default=None, type=nonempty,
                   help="write a PNG of busbw vs message size to PATH (rank 0; needs matplotlib)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate arguments; any problem exits via parser.error (status 2, one line).

    Adds ``args.size_list`` (bytes, increasing) and ``args.elem_size`` (bytes).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    elem_size = DTYPES[args.dtype][0]
    if args.sizes is not None:
        if args.min_bytes is not None or args.max_bytes is not None or args.factor is not None:
            parser.error("--sizes cannot be combined with --min-bytes/--max-bytes/--factor")
        sizes = []
        for item in ",".join(args.sizes).split(","):
            if not item.strip():
                continue
            try:
                size = parse_size(item)
            except argparse.ArgumentTypeError as exc:
                parser.error(f"argument --sizes: {exc}")
            if size <= 0 or size % elem_size:
                parser.error(f"--sizes: {item!r} is not a positive multiple of the "
                             f"{args.dtype} element size ({elem_size} bytes)")
            sizes.append(size)
        if not sizes:
            parser.error("--sizes: no size given")
        args.size_list = sorted(set(sizes))
    else:
        min_bytes = 1024 if args.min_bytes is None else args.min_bytes
        max_bytes = 256 * 1024**2 if args.max_bytes is None else args.max_bytes
        factor = 2.0 if args.factor is None else args.factor
        if min_bytes < elem_size:
            parser.error(f"--min-bytes must be at least one {args.dtype} element "
                         f"({elem_size} bytes) (got {min_bytes})")
        if max_bytes < min_bytes:
            parser.error(f"--max-bytes ({max_bytes}) must be >= --min-bytes ({min_bytes})")
        if not (factor > 1 and math.isfinite(factor)):
            parser.error(f"--factor must be a finite number > 1 (got {factor})")
        if math.log(max_bytes / min_bytes) / math.log(factor) > MAX_SIZES:
            parser.error(f"--factor {factor:g} makes more than {MAX_SIZES} sizes between "
                         "--min-bytes and --max-bytes; use a larger factor")
        args.size_list = message_sizes(min_bytes, max_bytes, factor, elem_size)
    if len(args.size_list) > MAX_SIZES:
        parser.error(f"--sizes: {len(args.size_list)} sizes; at most {MAX_SIZES}")
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        parser.error("--plot needs matplotlib, which is not installed (pip install matplotlib)")
    args.elem_size = elem_size
    return args


def main(argv: list[str] | None = None) -> None:
    """Entry point: parse arguments (before importing torch, so --help is instant), run, and turn
    any failure into a one-line error naming this rank and host, with exit status 1."""
    args = parse_args(argv)
    launch = Launch()
    if launch.rank == 0:
        for option, path in (("--json", args.json), ("--plot", args.plot)):
            if path:
                check_output(path, option)
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    on_stop_signals()  # Ctrl-C and scancel stop the sweep with the results so far
    stage = ["starting"]
    try:
        run(args, launch, stage)
    except Interrupted as stop:
        die(f"{launch.me()}: interrupted during {stage[0]}", stop.status)
    except ScriptError:  # a usage error found before joining the group (run_main prints it)
        raise
    except Exception as exc:  # noqa: BLE001 - every failure must end the job, not hang it
        die(f"{launch.me()}: {stage[0]} failed: {type(exc).__name__}: {exc}")


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
