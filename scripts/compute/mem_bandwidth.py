#!/usr/bin/env python
"""mem_bandwidth.py: measure memory copy bandwidth of a device and of the host link.

What it measures
----------------
For each buffer size S (bytes) and each test, the script copies S bytes ``--iters`` times after
``--warmup`` untimed copies and reports the time of one copy (CUDA: mean of back-to-back copies
timed with CUDA events; CPU: median of individually timed copies) and two bandwidths:

* ``GBps``: S / time, the bytes *copied* per second. This is what a host-to-device or
  device-to-host transfer is rated in (PCIe, one direction), and what ``cudaMemcpy``-style
  benchmarks print for H2D/D2H.
* ``traffic_GBps``: the bytes that crossed the memory interface per second. A copy inside one
  memory reads S bytes and writes S bytes, so for ``d2d`` and ``host_copy`` this is 2 * S / time,
  the number to compare with a memory bandwidth spec (HBM TBps, DRAM channels). For H2D/D2H it
  equals ``GBps`` (each byte crosses the link once).

Units: decimal, 1 GBps = 1e9 bytes/s. Sizes on the command line accept binary suffixes
(K = 1024, M = 1024**2, G = 1024**3).

Tests
-----
On a CUDA device (``--device cuda``, the default when one is present):

* ``d2d``: device-to-device copy in device memory (``dst.copy_(src)``), timed with CUDA events.
* ``h2d_pinned`` / ``d2h_pinned``: host <-> device copies from/to page-locked (pinned) host
  memory, which the GPU's DMA engines read directly.
* ``h2d_pageable`` / ``d2h_pageable``: the same from/to ordinary (pageable) host memory, which
  the driver first stages through a pinned bounce buffer, so they are usually slower.

On CPU (``--device cpu``, or no GPU): ``host_copy``, a copy between two host buffers timed with
``time.perf_counter()``: a rough figure for the host's memory bandwidth as one process with
torch's threads sees it (a STREAM-like copy, not a tuned STREAM run).

How to launch
-------------
One process per device; plain ``python``::

    python mem_bandwidth.py                                  # CUDA if present, else CPU
    python mem_bandwidth.py --device cuda --sizes 64M 1G 4G --json membw-h100.json
    python mem_bandwidth.py --device cpu --min-bytes 1M --max-bytes 256M

Pinned-memory results depend on which CPU socket the process runs on relative to the GPU; run
it under ``numa_affinity.py`` (same folder) to measure the NUMA-local case.

``--json PATH`` writes::

    {"benchmark": "mem_bandwidth", "schema_version": 1, "device": "<name>",
     "device_type": "cpu|cuda", "tests": [...], "warmup": <int>, "iters": <int>,
     "torch_version": "<v>", "hostname": "<host>", "date_utc": "...", "command": "...",
     "results": [{"test": "d2d", "size_bytes": <int>, "time_us": <float>, "GBps": <float>,
                  "traffic_GBps": <float>}, ...],
     "peak_GBps": {"<test>": <highest GBps over sizes>, ...}, "convention": "..."}

Bad input (a size that is not positive, a test that the device does not have, e.g. ``d2d`` on
a CPU) exits with status 2 and a one-line ``mem_bandwidth.py: error: ...`` message.

Example output (the committed results/compute/mem_bandwidth-cpu.json: one thread on a 2-vCPU
cloud VM shared with other jobs, load average about 7)::

    $ OMP_NUM_THREADS=1 python scripts/compute/mem_bandwidth.py --device cpu --min-bytes 1M \
          --max-bytes 256M --factor 4 --warmup 3 --iters 10 \
          --json results/compute/mem_bandwidth-cpu.json
    # mem_bandwidth.py: copy bandwidth, torch 2.13.0+cpu, device cpu, 1 thread(s)
    # GBps = copied bytes / time; traffic = bytes read + written / time (2x for in-memory copies); 1 GBps = 1e9 bytes/s
    # time: median of 10 copies after 3 warmup
    # test               size     time(us)       GBps  traffic GBps
    host_copy              1M         37.8      27.70         55.41
    host_copy              4M        288.2      14.55         29.11
    host_copy             16M       9831.6       1.71          3.41
    host_copy             64M      38372.8       1.75          3.50
    host_copy            256M     141463.3       1.90          3.80
    # peak host_copy: 27.70 GBps (traffic 55.41 GBps) at 1M

(The small sizes are served from the CPU caches; the large ones show what this busy VM's memory
gives one thread. A GPU run prints one block per test: d2d, h2d/d2h pinned and pageable.)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import socket
import statistics
import sys
import time

PROG = "mem_bandwidth.py"
GPU_TESTS = ("d2d", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable")
CPU_TESTS = ("host_copy",)
# Tests whose copy reads and writes the same memory: traffic = 2 x copied bytes.
IN_MEMORY = {"d2d", "host_copy"}
_SIZE_RE = re.compile(r"(\d+)([KMG]?)(I?B)?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    """Bytes from ``1024``, ``64K``, ``1M``, ``4G`` (binary suffixes, optional B/iB).

    Raises argparse.ArgumentTypeError for anything else, or for a size that is not positive.
    """
    m = _SIZE_RE.fullmatch(text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a positive number of bytes with an optional K, M or G "
            "suffix (K = 1024)")
    value = int(m.group(1)) * _SUFFIX[m.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive")
    return value


def format_size(nbytes: int) -> str:
    """``1M``, ``64K``... for exact binary multiples, else the byte count."""
    for suffix in ("G", "M", "K"):
        if nbytes >= _SUFFIX[suffix] and nbytes % _SUFFIX[suffix] == 0:
            return f"{nbytes // _SUFFIX[suffix]}{suffix}"
    return str(nbytes)


def bandwidths(test: str, size_bytes: int, seconds: float) -> tuple[float, float]:
    """(copied GBps, memory-traffic GBps) for one copy of ``size_bytes`` in ``seconds``.

    Copied = S / t. Traffic = 2 S / t for copies inside one memory (read S + write S), S / t for
    copies across a link. Decimal GBps (1e9 bytes/s).
    """
    copied = size_bytes / seconds / 1e9
    return copied, copied * (2 if test in IN_MEMORY else 1)


def geometric_sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """min, min*factor, ... up to max (included), rounded down to multiples of 4 bytes."""
    sizes, size = [], float(min_bytes)
    while size <= max_bytes * (1 + 1e-12):
        aligned = int(size) // 4 * 4
        if aligned and (not sizes or aligned > sizes[-1]):
            sizes.append(aligned)
        size *= factor
    return sizes


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Copy bandwidth: device-to-device, host<->device (pinned and pageable) on "
                    "CUDA, host memory copy on CPU. Reports copied bytes/time and memory "
                    "traffic (read + write) in decimal GBps.",
        epilog=f"Tests: {', '.join(GPU_TESTS)} (CUDA); {', '.join(CPU_TESTS)} (CPU). "
               "Sizes accept K/M/G binary suffixes.")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda if available, else cpu (default auto)")
    p.add_argument("--tests", nargs="+", default=None, choices=GPU_TESTS + CPU_TESTS,
                   help="which tests to run (default: all tests of the device)")
    p.add_argument("--sizes", nargs="+", type=parse_size, default=None, metavar="SIZE",
                   help="explicit buffer sizes instead of the geometric sweep")
    p.add_argument("--min-bytes", type=parse_size, default=None, metavar="SIZE",
                   help="smallest size of the sweep (default 1M)")
    p.add_argument("--max-bytes", type=parse_size, default=None, metavar="SIZE",
                   help="largest size of the sweep (default 1G on CUDA, 256M on CPU)")
    p.add_argument("--factor", type=float, default=4.0, help="ratio between sizes, > 1 (default 4)")
    p.add_argument("--warmup", type=int, default=5, help="untimed copies per size (default 5)")
    p.add_argument("--iters", type=int, default=20, help="timed copies per size (default 20)")
    p.add_argument("--json", metavar="PATH", help="write machine-readable results to PATH")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate what can be checked without a device (exit status 2 on errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0 (got {args.warmup})")
    if args.iters < 1:
        parser.error(f"--iters must be >= 1 (got {args.iters})")
    if not args.factor > 1:
        parser.error(f"--factor must be > 1 (got {args.factor})")
    if args.sizes and (args.min_bytes or args.max_bytes):
        parser.error("--sizes cannot be combined with --min-bytes/--max-bytes")
    if args.min_bytes and args.max_bytes and args.max_bytes < args.min_bytes:
        parser.error(f"--max-bytes ({args.max_bytes}) must be >= --min-bytes ({args.min_bytes})")
    args.parser = parser
    return args


def run_test(torch, test: str, size: int, dev, warmup: int, iters: int) -> float:
    """Seconds of one copy of ``size`` bytes for ``test``: on CUDA the mean over ``iters``
    back-to-back copies (CUDA events); on CPU the median of ``iters`` individually timed copies,
    which a busy machine's scheduler hiccups do not drag around as they do a mean."""
    n = size // 4
    if test == "host_copy":
        src, dst = torch.ones(n), torch.empty(n)
        for _ in range(warmup):
            dst.copy_(src)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    pinned = test.endswith("pinned")
    if test == "d2d":
        src = torch.ones(n, device=dev)
        dst = torch.empty(n, device=dev)
    elif test.startswith("h2d"):
        src = torch.ones(n, pin_memory=pinned)
        dst = torch.empty(n, device=dev)
    else:
        src = torch.ones(n, device=dev)
        dst = torch.empty(n, pin_memory=pinned)
    # non_blocking only matters for pinned memory; pageable copies are synchronous anyway.
    for _ in range(warmup):
        dst.copy_(src, non_blocking=pinned)
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dst.copy_(src, non_blocking=pinned)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # only after argument parsing

    kind = args.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        args.parser.error("--device cuda: no CUDA device is available (use --device cpu)")
    available = GPU_TESTS if kind == "cuda" else CPU_TESTS
    tests = args.tests or list(available)
    wrong = [t for t in tests if t not in available]
    if wrong:
        args.parser.error(f"test(s) {', '.join(wrong)} need a "
                          f"{'CUDA device' if kind == 'cpu' else 'CPU run (--device cpu)'}; "
                          f"on {kind} choose from {', '.join(available)}")
    if args.sizes:
        sizes = sorted(set(args.sizes))
    else:
        default_max = 1024**3 if kind == "cuda" else 256 * 1024**2
        min_bytes = args.min_bytes or 1024**2
        max_bytes = args.max_bytes or default_max
        if max_bytes < min_bytes:
            args.parser.error(f"--max-bytes ({max_bytes}) must be >= --min-bytes ({min_bytes})")
        sizes = geometric_sizes(min_bytes, max_bytes, args.factor)
    if kind == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(dev)
        where = f"device {name}, CUDA {torch.version.cuda or torch.version.hip}"
    else:
        dev, name = torch.device("cpu"), "cpu"
        where = f"device cpu, {torch.get_num_threads()} thread(s)"
    print(f"# {PROG}: copy bandwidth, torch {torch.__version__}, {where}")
    print("# GBps = copied bytes / time; traffic = bytes read + written / time "
          "(2x for in-memory copies); 1 GBps = 1e9 bytes/s")
    print(f"# time: {'mean' if kind == 'cuda' else 'median'} of {args.iters} copies after "
          f"{args.warmup} warmup")
    print(f"# {'test':<14} {'size':>8} {'time(us)':>12} {'GBps':>10} {'traffic GBps':>13}",
          flush=True)
    results = []
    for test in tests:
        for size in sizes:
            seconds = run_test(torch, test, size, dev, args.warmup, args.iters)
            gbps, traffic = bandwidths(test, size, seconds)
            results.append({"test": test, "size_bytes": size,
                            "time_us": float(f"{seconds * 1e6:.6g}"),
                            "GBps": float(f"{gbps:.6g}"), "traffic_GBps": float(f"{traffic:.6g}")})
            print(f"{test:<16} {format_size(size):>8} {seconds * 1e6:>12.1f} {gbps:>10.2f} "
                  f"{traffic:>13.2f}", flush=True)
    peak = {}
    for test in tests:
        best = max((r for r in results if r["test"] == test), key=lambda r: r["GBps"])
        peak[test] = best["GBps"]
        print(f"# peak {test}: {best['GBps']:.2f} GBps (traffic {best['traffic_GBps']:.2f} GBps) "
              f"at {format_size(best['size_bytes'])}")
    if args.json:
        report = {
            "benchmark": "mem_bandwidth", "schema_version": 1, "device": name,
            "device_type": kind, "tests": tests, "warmup": args.warmup, "iters": args.iters,
            "threads": torch.get_num_threads(),
            "torch_version": torch.__version__, "hostname": socket.gethostname(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": "python " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
            "results": results, "peak_GBps": peak,
            "time": "mean of back-to-back copies (CUDA events)" if kind == "cuda"
                    else "median of individually timed copies (perf_counter)",
            "convention": "GBps = copied bytes / time; traffic_GBps counts bytes read plus "
                          "bytes written (2x GBps for d2d and host_copy); 1 GBps = 1e9 bytes/s",
        }
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(json.dumps(report, indent=2) + "\n")
        print(f"# wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
