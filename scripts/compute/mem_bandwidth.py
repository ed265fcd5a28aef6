#!/usr/bin/env python
"""mem_bandwidth.py: measure memory copy bandwidth of a device and of the host link.

For each buffer size S and test it copies S bytes ``--iters`` times after ``--warmup`` untimed
copies and reports the time of one copy (CUDA: mean of back-to-back copies between CUDA events;
CPU: median of individually timed copies) and two bandwidths in decimal GBps (1e9 bytes/s):
GBps = S / time, the bytes copied, as host-link figures are rated; traffic_GBps = bytes read +
written / time (2 S / time for a copy inside one memory), as memory bandwidth specs are rated.
Tests: d2d, h2d_pinned, h2d_pageable, d2h_pinned, d2h_pageable on CUDA; host_copy on a CPU.
Sizes take binary suffixes (K = 1024). More: book/en/compute/accelerators.md.

One process per device; plain ``python`` (under numa_affinity.py for NUMA-local pinned copies)::

    python mem_bandwidth.py                                  # CUDA if present, else CPU
    python mem_bandwidth.py --device cuda --sizes 64M 1G 4G --json membw-h100.json
    python mem_bandwidth.py --device cpu --min-bytes 1M --max-bytes 256M

Example output (one thread of a shared 2-vCPU VM; results/compute/mem_bandwidth-cpu.json)::

    # test               size     time(us)       GBps  traffic GBps
    host_copy              1M         37.8      27.70         55.41
    host_copy             64M      38372.8       1.75          3.50
    host_copy            256M     141463.3       1.90          3.80
    # peak host_copy: 27.70 GBps (traffic 55.41 GBps) at 1M

Exit status: 0 ok, 1 failure, 2 usage (checked before any copy), 130/143 interrupted by
Ctrl-C/SIGTERM (the sizes measured so far are still written, "interrupted": true).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import socket
import statistics
import sys
import tempfile
import time
import traceback

PROG = "mem_bandwidth.py"
GPU_TESTS = ("d2d", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable")
CPU_TESTS = ("host_copy",)
# Tests whose copy reads and writes the same memory: traffic = 2 x copied bytes.
IN_MEMORY = {"d2d", "host_copy"}
_SIZE_RE = re.compile(r"(\d+)([KMG]?)(I?B)?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
MAX_SIZES = 1000  # sizes in one sweep


# ----------------------------------------------------------------------------------------------
# The method: sizes, bandwidths, the copies
# ----------------------------------------------------------------------------------------------

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


def check_memory(torch, kind: str, tests: list[str], size: int, dev, option: str) -> None:
    """Refuse, before measuring, a ``size`` whose buffers cannot fit: host_copy holds two host
    buffers, the h2d/d2h tests one host and one device buffer, d2d two device buffers."""
    try:
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not reported by this OS: let the allocator decide
        host = None
    need = {"host memory": (2 if "host_copy" in tests else 1 if set(tests) - {"d2d"} else 0, host)}
    if kind == "cuda":
        device = torch.cuda.get_device_properties(dev).total_memory
        need["device memory"] = (2 if "d2d" in tests else 1, device)
    for where, (buffers, have) in need.items():
        if have and buffers * size > have:
            raise ScriptError(f"{option}: size {format_size(size)} needs {buffers} buffer(s) of that "
                              f"size, more than this machine's {have / 2**30:.1f} GiB of {where}",
                              EXIT_USAGE)


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


def choose_tests(torch, args: argparse.Namespace) -> tuple[str, list[str], list[int]]:
    """(device kind, tests, sizes) from the arguments and the device present; usage errors
    exit with status 2."""
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
    return kind, tests, sizes


def measure(torch, tests: list[str], sizes: list[int], dev, args: argparse.Namespace,
            results: list[dict]) -> None:
    """Run every test at every size, appending and printing one row each."""
    for test in tests:
        for size in sizes:
            seconds = run_test(torch, test, size, dev, args.warmup, args.iters)
            gbps, traffic = bandwidths(test, size, seconds)
            results.append({"test": test, "size_bytes": size,
                            "time_us": float(f"{seconds * 1e6:.6g}"),
                            "GBps": float(f"{gbps:.6g}"),
                            "traffic_GBps": float(f"{traffic:.6g}")})
            print(f"{test:<16} {format_size(size):>8} {seconds * 1e6:>12.1f} {gbps:>10.2f} "
                  f"{traffic:>13.2f}", flush=True)


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def format_size(nbytes: int) -> str:
    """``1M``, ``64K``... for exact binary multiples, else the byte count."""
    for suffix in ("G", "M", "K"):
        if nbytes >= _SUFFIX[suffix] and nbytes % _SUFFIX[suffix] == 0:
            return f"{nbytes // _SUFFIX[suffix]}{suffix}"
    return str(nbytes)


def print_header(torch, kind: str, where: str, args: argparse.Namespace) -> None:
    print(f"# {PROG}: copy bandwidth, torch {torch.__version__}, {where}")
    print("# GBps = copied bytes / time; traffic = bytes read + written / time "
          "(2x for in-memory copies); 1 GBps = 1e9 bytes/s")
    print(f"# time: {'mean' if kind == 'cuda' else 'median'} of {args.iters} copies after "
          f"{args.warmup} warmup")
    print(f"# {'test':<14} {'size':>8} {'time(us)':>12} {'GBps':>10} {'traffic GBps':>13}",
          flush=True)


def print_peaks(results: list[dict]) -> dict:
    """Print and return {test: highest GBps over its sizes}."""
    peak = {}
    for test in dict.fromkeys(r["test"] for r in results):
        best = max((r for r in results if r["test"] == test), key=lambda r: r["GBps"])
        peak[test] = best["GBps"]
        print(f"# peak {test}: {best['GBps']:.2f} GBps (traffic {best['traffic_GBps']:.2f} GBps) "
              f"at {format_size(best['size_bytes'])}")
    return peak


def json_report(torch, kind: str, name: str, tests: list[str], args: argparse.Namespace,
                results: list[dict], peak: dict, interrupted: bool) -> dict:
    """The --json document (keys: tools/schemas/mem_bandwidth.schema.json)."""
    return {
        **envelope("mem_bandwidth", name, {"torch": torch.__version__}),
        "device_type": kind, "tests": tests, "warmup": args.warmup, "iters": args.iters,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__, "hostname": socket.gethostname(),
        "results": results, "peak_GBps": peak, "interrupted": interrupted,
        "time": "mean of back-to-back copies (CUDA events)" if kind == "cuda"
                else "median of individually timed copies (perf_counter)",
        "convention": "GBps = copied bytes / time; traffic_GBps counts bytes read plus "
                      "bytes written (2x GBps for d2d and host_copy); 1 GBps = 1e9 bytes/s",
    }


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

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
    if value <= 0 or value % 4:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: must be a positive multiple of 4 bytes (the copies move "
            "float32 elements)")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Copy bandwidth: device-to-device, host<->device (pinned and pageable) on "
                    "CUDA, host memory copy on CPU. Reports copied bytes/time and memory "
                    "traffic (read + write) in decimal GBps.",
        epilog=f"Tests: {', '.join(GPU_TESTS)} (CUDA); {', '.join(CPU_TESTS)} (CPU). "
               "Sizes accept K/M/G binary suffixes.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
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
    p.add_argument("--factor", type=number(float, 1, lo_open=True), default=4.0,
                   help="ratio between sizes, > 1 (default 4)")
    p.add_argument("--warmup", type=number(int, 0), default=5, help="untimed copies per size (default 5)")
    p.add_argument("--iters", type=number(int, 1), default=20, help="timed copies per size (default 20)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write machine-readable results to PATH")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate what can be checked without a device (exit status 2 on errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.sizes and (args.min_bytes or args.max_bytes):
        parser.error("--sizes cannot be combined with --min-bytes/--max-bytes")
    if args.sizes and len(set(args.sizes)) > MAX_SIZES:
        parser.error(f"--sizes: {len(set(args.sizes))} sizes; at most {MAX_SIZES} (each is measured "
                     "--warmup + --iters times per test)")
    if args.min_bytes and args.max_bytes and args.max_bytes < args.min_bytes:
        parser.error(f"--max-bytes ({args.max_bytes}) must be >= --min-bytes ({args.min_bytes})")
    # Each size is measured --warmup + --iters times per test; beyond this a sweep is a typo.
    span = (args.max_bytes or 1024**3) / (args.min_bytes or 1024**2)
    if not args.sizes and span > 1 and math.log(span) / math.log(args.factor) > MAX_SIZES:
        parser.error(f"--factor {args.factor:g} makes more than {MAX_SIZES} sizes between "
                     "--min-bytes and --max-bytes; use a larger factor")
    if args.json:
        check_output(args.json, "--json")
    args.parser = parser
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch  # only after argument parsing

    kind, tests, sizes = choose_tests(torch, args)
    if kind == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
        name = torch.cuda.get_device_name(dev)
        where = f"device {name}, CUDA {torch.version.cuda or torch.version.hip}"
    else:
        dev, name = torch.device("cpu"), "cpu"
        where = f"device cpu, {torch.get_num_threads()} thread(s)"
    check_memory(torch, kind, tests, max(sizes), dev, "--sizes" if args.sizes else "--max-bytes")
    print_header(torch, kind, where, args)
    results = []
    stopped = None
    on_stop_signals()  # Ctrl-C, scancel, a job's time limit: keep what was measured
    try:
        measure(torch, tests, sizes, dev, args, results)
    except Interrupted as stop:
        stopped = stop
        print(f"# interrupted: {len(results)} of {len(tests) * len(sizes)} measurements done")
    peak = print_peaks(results)
    if args.json:
        report = json_report(torch, kind, name, tests, args, results, peak, bool(stopped))
        write_atomic(args.json, json.dumps(report, indent=2) + "\n")
        print(f"# wrote {args.json}")
    return stopped.status if stopped else 0


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
