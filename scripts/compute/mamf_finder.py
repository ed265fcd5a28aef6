#!/usr/bin/env python
"""mamf_finder.py: find the maximum achievable matmul FLOPS (MAMF) of one device.

For every shape (M, N, K) of the sweep and every dtype (bf16, fp16, fp32, tf32, fp8), it times
``--iters`` single matmuls of an M x K by a K x N matrix after ``--warmup`` untimed ones (CUDA
events on a GPU, with the L2 cache overwritten before each; perf_counter on a CPU) and prints the
mean, median and max TFLOPS = 2*M*N*K / time / 1e12 per shape, then the best shape per dtype and
overall. Sizes are values or START:STOP:STEP ranges (STOP included). How it times, and its
limits: book/en/compute/accelerators.md.

One device per process; plain ``python``::

    python mamf_finder.py --m 4096 --n 4096 --k 4096                     # one shape, bf16
    python mamf_finder.py --m 1024:16384:1024 --n 4096 --k 4096 --dtype bf16 fp8 --json h100.json
    srun --ntasks-per-node 8 --gpus-per-task 1 python mamf_finder.py --m 8192 --n 8192 --k 8192 \\
        --json "mamf-$(hostname)-$SLURM_LOCALID.json"                  # every GPU of a node

Example output (one thread of a shared 2-vCPU VM with AMX units; results/compute/mamf_finder-cpu.json)::

    # i/N      M      N      K dtype    mean(ms)  mean TFLOPS  median TFLOPS  max TFLOPS
      1/8    256   1024   1024 fp32       10.303        0.052          0.047       0.158
      8/8   1024   1024   1024 bf16        3.844        0.559          0.560       1.312
    # best bf16: 1.366 TFLOPS (max) at 768x1024x1024, mean 0.555
    # overall best: 1.366 TFLOPS, bf16 at 768x1024x1024

Exit status: 0 ok, 1 failure (also a shape that cannot be allocated mid-sweep, after the summary
of those before it), 2 usage (checked before any measurement), 130/143 interrupted by
Ctrl-C/SIGTERM (the summary and --json of the shapes so far are still written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import socket
import statistics
import sys
import tempfile
import time
import traceback

PROG = "mamf_finder.py"
DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32",
                 "float": "fp32", "float8": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8"}
_RANGE = re.compile(r"(\d+):(\d+):(\d+)")

# At --iters 50 even small shapes take ~10 ms each on a GPU, and large ones far longer: more
# shapes than this would run for days, which is a typo, not a plan.
MAX_SHAPES = 10_000
# Per shape; CUDA timing keeps one pair of events per iteration in memory.
MAX_ITERS = 1_000_000
# Bytes per element of A and B, and of the output.
ELEMENT_BYTES = {"bf16": (2, 2), "fp16": (2, 2), "fp32": (4, 4), "tf32": (4, 4), "fp8": (1, 2)}


# ----------------------------------------------------------------------------------------------
# The method: FLOPs of a matmul, the device, its operands, the timed loop
# ----------------------------------------------------------------------------------------------

def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of one (m x k) @ (k x n) matmul: 2*m*n*k (one multiply + one add per term)."""
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, seconds: float) -> float:
    """Throughput in TFLOPS (1e12 FLOP/s) of one matmul that took ``seconds``."""
    return matmul_flops(m, n, k) / seconds / 1e12


class Device:
    """The device under test and what it can do; created after argument parsing."""

    def __init__(self, torch, spec: str, parser: argparse.ArgumentParser):
        self.torch = torch
        if spec == "auto":
            spec = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.dev = torch.device(spec)
        except RuntimeError:
            parser.error(f"--device: unknown device {spec!r}")
        self.type = self.dev.type
        if self.type == "cuda":
            if not torch.cuda.is_available():
                parser.error("--device cuda: no CUDA device is available (use --device cpu)")
            index = self.dev.index if self.dev.index is not None else torch.cuda.current_device()
            if index >= torch.cuda.device_count():
                parser.error(f"--device {spec}: only {torch.cuda.device_count()} CUDA device(s)")
            self.dev = torch.device("cuda", index)
            torch.cuda.set_device(self.dev)
            props = torch.cuda.get_device_properties(self.dev)
            self.name = props.name
            self.capability = (props.major, props.minor)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20
        elif self.type == "cpu":
            self.name = "cpu"
            self.capability = None
            self.l2_bytes = 0
        else:
            module = getattr(torch, self.type, None)
            if module is None or not module.is_available():
                parser.error(f"--device {spec}: this torch build has no usable {self.type} device")
            self.name = self.type
            self.capability = None
            self.l2_bytes = 0

    def check_dtype(self, dtype: str, parser: argparse.ArgumentParser) -> None:
        """Exit with a one-line error if this device cannot run ``dtype`` matmuls."""
        torch = self.torch
        if dtype == "tf32" and self.type != "cuda":
            parser.error(f"dtype tf32 is a CUDA tensor-core mode; {self.type} has none (use fp32)")
        if dtype == "fp8":
            # NVIDIA only: ROCm builds use other fp8 variants (e4m3fnuz on MI300) that this
            # script does not handle.
            ok = (self.type == "cuda" and torch.version.hip is None and self.capability >= (8, 9)
                  and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm"))
            if not ok:
                where = (f"compute capability {self.capability[0]}.{self.capability[1]}"
                         if self.capability else self.type)
                parser.error(f"dtype fp8 needs a CUDA GPU of compute capability 8.9+ (Ada, "
                             f"Hopper, Blackwell) and torch._scaled_mm; this device is {where}")

    def memory_bytes(self) -> int | None:
        """Memory the operands must fit in (device memory, or the host's RAM for cpu)."""
        if self.type == "cuda":
            return self.torch.cuda.get_device_properties(self.dev).total_memory
        if self.type == "cpu":
            with contextlib.suppress(ValueError, OSError):
                return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return None

    def check_fits(self, shapes: list[tuple[int, int, int]], dtypes: list[str]) -> None:
        """ScriptError (status 2) naming the largest shape whose A, B and output do not fit."""
        have = self.memory_bytes()
        if not have:
            return
        for dtype in dtypes:
            ab, out = ELEMENT_BYTES[dtype]
            m, n, k = max(shapes, key=lambda s: ab * (s[0] * s[2] + s[2] * s[1]) + out * s[0] * s[1])
            need = ab * (m * k + k * n) + out * m * n
            if need > have:
                raise ScriptError(f"--m/--n/--k: shape {m}x{n}x{k} in {dtype} needs {need / 2**30:.1f} "
                                  f"GiB for A, B and the output; {self.type} has "
                                  f"{have / 2**30:.1f} GiB", EXIT_USAGE)

    def versions(self) -> dict:
        """Versions worth recording next to a measurement (driver, runtime, libraries)."""
        torch = self.torch
        v = {"torch": torch.__version__, "python": platform.python_version()}
        if self.type == "cuda":
            v["cuda_runtime"] = torch.version.cuda
            v["hip_runtime"] = torch.version.hip
            try:
                driver = torch._C._cuda_getDriverVersion()  # e.g. 12040 -> "12.4"
                v["cuda_driver_api"] = f"{driver // 1000}.{driver % 1000 // 10}"
            except (AttributeError, RuntimeError):
                pass
            v["cudnn"] = torch.backends.cudnn.version()
            v["compute_capability"] = ".".join(map(str, self.capability))
        elif self.type == "cpu":
            v["cpu"] = _cpu_name()
            v["threads"] = torch.get_num_threads()
            v["mkldnn"] = bool(torch.backends.mkldnn.is_available())
        return {key: value for key, value in v.items() if value is not None}

    def synchronize(self) -> None:
        if self.type == "cuda":
            self.torch.cuda.synchronize(self.dev)
        elif self.type != "cpu":
            getattr(self.torch, self.type).synchronize()


def make_operands(device: Device, dtype: str, m: int, n: int, k: int):
    """Operands and a zero-argument function that runs one matmul of shape (m, k) @ (k, n)."""
    torch = device.torch
    dev = device.dev
    if dtype == "fp8":
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major: the transpose of a row-major (n, k).
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    tdtype = {"bf16": torch.bfloat16, "fp16": torch.float16,
              "fp32": torch.float32, "tf32": torch.float32}[dtype]
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    a = torch.randn(m, k, device=dev, dtype=tdtype)
    b = torch.randn(k, n, device=dev, dtype=tdtype)
    out = torch.empty(m, n, device=dev, dtype=tdtype)
    return lambda: torch.mm(a, b, out=out)


def time_shape(device: Device, run, warmup: int, iters: int, flush) -> list[float]:
    """Seconds taken by each of ``iters`` calls of ``run`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        run()
    device.synchronize()
    times = []
    if device.type == "cuda":
        torch = device.torch
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(iters)]
        for start, end in pairs:
            if flush is not None:
                flush.zero_()  # evict the operands from L2; not timed
            start.record()
            run()
            end.record()
        # Poll instead of torch.cuda.synchronize(): Python handles Ctrl-C only between bytecodes,
        # and a synchronize on a long queue of big matmuls would hold it until all are done.
        while not pairs[-1][1].query():
            time.sleep(0.001)
        times = [start.elapsed_time(end) / 1e3 for start, end in pairs]  # ms -> s
    else:
        for _ in range(iters):
            t0 = time.perf_counter()
            run()
            device.synchronize()
            times.append(time.perf_counter() - t0)
    return times


def open_device(torch, args: argparse.Namespace):
    """The checked device, its versions and the L2 flush buffer (None when not flushing)."""
    device = Device(torch, args.device, args.parser)
    for dtype in args.dtype:
        device.check_dtype(dtype, args.parser)
    device.check_fits(args.shapes, args.dtype)
    versions = device.versions()
    flush = None
    if device.type == "cuda" and args.flush_l2:
        flush = torch.empty(2 * device.l2_bytes // 4, dtype=torch.float32, device=device.dev)
    return device, versions, flush


def sweep(device: Device, args: argparse.Namespace, flush, results: list[dict], total: int,
          width: int) -> ScriptError | None:
    """Measure every dtype and shape, appending and printing one row each; returns the
    ScriptError of a shape that could not be allocated (the sweep stops there), else None."""
    for dtype in args.dtype:
        for m, n, k in args.shapes:
            try:
                run = make_operands(device, dtype, m, n, k)
            except (RuntimeError, MemoryError) as err:
                # Keep what was measured: summary and --json below, then this error.
                return ScriptError(f"cannot allocate {m}x{n}x{k} {dtype} operands: "
                                   f"{str(err).strip() or type(err).__name__}")
            row = summarize(m, n, k, dtype, time_shape(device, run, args.warmup, args.iters,
                                                       flush))
            results.append(row)
            print(f"  {len(results):>{width}}/{total} {m:>6} {n:>6} {k:>6} {dtype:<5} "
                  f"{row['mean_ms']:>11.3f} {row['mean_tflops']:>12.3f} "
                  f"{row['median_tflops']:>14.3f} {row['max_tflops']:>11.3f}", flush=True)
            del run
    return None


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def summarize(m: int, n: int, k: int, dtype: str, times: list[float]) -> dict:
    """Per-shape row: times in ms and mean/median/max TFLOPS (6 significant digits)."""
    mean, median, best = statistics.fmean(times), statistics.median(times), min(times)
    row = {"m": m, "n": n, "k": k, "dtype": dtype,
           "mean_ms": mean * 1e3, "median_ms": median * 1e3, "min_ms": best * 1e3,
           "mean_tflops": tflops(m, n, k, mean), "median_tflops": tflops(m, n, k, median),
           "max_tflops": tflops(m, n, k, best)}
    return {key: (float(f"{v:.6g}") if isinstance(v, float) else v) for key, v in row.items()}


def best_per_dtype(results: list[dict]) -> dict:
    """{dtype: the result row with the highest max_tflops}, in first-seen dtype order."""
    best: dict[str, dict] = {}
    for row in results:
        if row["dtype"] not in best or row["max_tflops"] > best[row["dtype"]]["max_tflops"]:
            best[row["dtype"]] = row
    return best


def print_header(device: Device, versions: dict, args: argparse.Namespace, flush) -> tuple[int, int]:
    """The device, timing and column lines; returns (measurements in the sweep, width of i)."""
    detail = " | ".join(f"{k} {v}" for k, v in versions.items() if k not in ("torch", "python"))
    print(f"# {PROG}: maximum achievable matmul FLOPS, 2*M*N*K / time")
    print(f"# device {device.name} | {detail} | torch {versions['torch']} | "
          f"python {versions['python']}")
    clock = "CUDA events per matmul" if device.type == "cuda" else "perf_counter per matmul"
    print(f"# timing: {clock} | warmup {args.warmup} | iters {args.iters} | L2 flush "
          f"{'yes (' + str(2 * device.l2_bytes // 2**20) + ' MiB buffer)' if flush is not None else 'no'}")
    total = len(args.shapes) * len(args.dtype)
    width = len(str(total))
    print(f"# {'i/N':>{2 * width + 1}} {'M':>6} {'N':>6} {'K':>6} {'dtype':<5} {'mean(ms)':>11} "
          f"{'mean TFLOPS':>12} {'median TFLOPS':>14} {'max TFLOPS':>11}", flush=True)
    return total, width


def _print_summary(results: list[dict], total: int, interrupted: bool) -> dict:
    best = best_per_dtype(results)
    if interrupted:
        print(f"# interrupted: {len(results)} of {total} measurements done; results so far:")
    if not results:
        print("# no shape was measured")
        return best
    for dtype, row in best.items():
        print(f"# best {dtype}: {row['max_tflops']:.3f} TFLOPS (max) at "
              f"{row['m']}x{row['n']}x{row['k']}, mean {row['mean_tflops']:.3f}")
    overall = max(best.values(), key=lambda r: r["max_tflops"])
    print(f"# overall best: {overall['max_tflops']:.3f} TFLOPS, {overall['dtype']} at "
          f"{overall['m']}x{overall['n']}x{overall['k']}")
    return best


def json_report(device: Device, versions: dict, args: argparse.Namespace, flush, results: list[dict],
                best: dict, interrupted: bool) -> dict:
    """The --json document (keys: tools/schemas/mamf_finder.schema.json)."""
    return {
        **envelope("mamf_finder", device.name, versions),
        "device_type": device.type, "dtypes": args.dtype, "warmup": args.warmup,
        "iters": args.iters, "flush_l2": flush is not None, "torch_version": device.torch.__version__,
        "hostname": socket.gethostname(), "interrupted": interrupted, "results": results, "best": best,
        "units": {"time": "milliseconds per matmul", "throughput": "TFLOPS = 2*M*N*K/time/1e12",
                  "max_tflops": "from the fastest iteration"},
    }


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_sizes(text: str) -> list[int]:
    """Parse one size argument: ``4096`` or ``START:STOP:STEP`` (STOP included).

    Returns a list of positive ints. Raises argparse.ArgumentTypeError (so argparse names the
    option) for anything that is not a positive integer or a well-formed range.
    """
    text = text.strip()
    m = _RANGE.fullmatch(text)
    if m:
        start, stop, step = (int(g) for g in m.groups())
        if start <= 0 or step <= 0 or stop < start:
            raise argparse.ArgumentTypeError(
                f"invalid range {text!r}: need 0 < START <= STOP and STEP > 0")
        if (stop - start) // step + 1 > MAX_SHAPES:
            raise argparse.ArgumentTypeError(
                f"range {text!r} has {(stop - start) // step + 1} values; at most {MAX_SHAPES} "
                "(a longer sweep runs for days: use a coarser STEP)")
        return list(range(start, stop + 1, step))
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use a positive integer or START:STOP:STEP") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: sizes must be positive")
    return [value]


def parse_dtype(text: str) -> str:
    """Canonical dtype name for ``text`` (``bfloat16`` -> ``bf16``).

    Raises argparse.ArgumentTypeError for an unknown name.
    """
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise argparse.ArgumentTypeError(f"unknown dtype {text!r} (choose from {', '.join(DTYPES)})")
    return name


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Maximum achievable matmul FLOPS: sweep M/N/K shapes and dtypes on one "
                    "device, time each matmul, report mean/median/max TFLOPS per shape "
                    "(2*M*N*K/time/1e12) and the best shape.",
        epilog="Sizes: a value or START:STOP:STEP (STOP included); several may be given, e.g. "
               "--m 512 1024:8192:1024. Ctrl-C prints the results so far.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--m", nargs="+", type=parse_sizes, default=[[4096]], metavar="SIZE",
                   help="rows of A and of the output (default 4096)")
    p.add_argument("--n", nargs="+", type=parse_sizes, default=[[4096]], metavar="SIZE",
                   help="columns of B and of the output (default 4096)")
    p.add_argument("--k", nargs="+", type=parse_sizes, default=[[4096]], metavar="SIZE",
                   help="inner dimension (default 4096)")
    p.add_argument("--dtype", nargs="+", type=parse_dtype, default=["bf16"],
                   help=f"one or more of {', '.join(DTYPES)} (default bf16)")
    p.add_argument("--device", default="auto", type=nonempty,
                   help="auto (cuda if available, else cpu), cpu, cuda, cuda:N, mps, xpu")
    p.add_argument("--warmup", type=number(int, 0, MAX_ITERS), default=10,
                   help="untimed matmuls per shape (default 10)")
    p.add_argument("--iters", type=number(int, 1, MAX_ITERS), default=50,
                   help="timed matmuls per shape (default 50)")
    p.add_argument("--no-flush-l2", dest="flush_l2", action="store_false",
                   help="do not overwrite the L2 cache before each timed matmul (GPU only)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write machine-readable results to PATH")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate arguments (no device access); problems exit via parser.error
    (status 2, one line). Adds ``args.shapes``: list of (m, n, k)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    flat = {axis: sorted({v for group in getattr(args, axis) for v in group}) for axis in "mnk"}
    count = len(flat["m"]) * len(flat["n"]) * len(flat["k"])
    if count > MAX_SHAPES:
        parser.error(f"--m/--n/--k make {count} shapes; at most {MAX_SHAPES} (a longer sweep "
                     "runs for days: use coarser ranges)")
    args.shapes = [(m, n, k) for m in flat["m"] for n in flat["n"] for k in flat["k"]]
    if args.json:
        check_output(args.json, "--json")
    args.dtype = list(dict.fromkeys(args.dtype))  # keep order, drop repeats
    args.parser = parser
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    on_stop_signals()  # Ctrl-C and SIGTERM (scancel, a time limit) keep the shapes measured
    import torch  # only now: --help and argument errors never touch torch or a device

    device, versions, flush = open_device(torch, args)
    total, width = print_header(device, versions, args, flush)
    results: list[dict] = []
    stopped = failure = None
    try:
        failure = sweep(device, args, flush, results, total, width)
    except Interrupted as stop:
        stopped = stop
    interrupted = stopped is not None or failure is not None
    best = _print_summary(results, total, interrupted)
    if args.json:
        write_atomic(args.json, json.dumps(json_report(device, versions, args, flush, results, best,
                                                       interrupted), indent=2) + "\n")
        print(f"# wrote {args.json}")
    sys.stdout.flush()
    if failure is not None:
        raise failure
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


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
