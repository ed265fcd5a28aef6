#!/usr/bin/env python
"""busbw_model.py: predict all-reduce time, algbw and busbw against the number of nodes.

An alpha-beta model (a latency per sequential step plus bytes over bandwidth) of one all-reduce
of ``--size`` bytes per rank on N nodes (each of ``--nodes``) of ``--gpus-per-node`` GPUs, with
two kinds of links: inside a node (``--intra-GBps`` per GPU, ``--alpha-intra-us`` per step) and
between nodes (``--inter-GBps`` per GPU: the node's NIC bandwidth / GPUs, ``--alpha-inter-us``).
Algorithms: ring, tree (NCCL's step counts, src/graph/tuning.cc) and innet (NVLS/SHARP, an upper
bound). busbw = algbw x 2(n-1)/n, as nccl-tests reports it. Decimal GBps (1e9 bytes/s), one
direction; times in us; ``--size`` takes binary suffixes. Standard library only. The formulas:
book/en/network/nccl-tuning.md ("A model of busbw against node count").

    python busbw_model.py
    python busbw_model.py --gpus-per-node 8 --intra-GBps 360 --inter-GBps 50 --size 256M
    python busbw_model.py --nodes 2,4,8,16 --algos ring,tree,innet --json busbw.json

Example output (``--nodes 1,2,8,64,512 --size 64M``, rows cut)::

      nodes   ranks  algorithm      time_us  algbw_GBps  busbw_GBps  limited_by
          1       8  ring             275.0      244.05      427.09  intra-node
          8      64  tree             379.5      176.81      348.10  inter-node
         64     512  ring            1860.9       36.06       71.98  latency
        512    4096  tree             439.5      152.68      305.28  inter-node

Exit status: 0 ok, 2 usage (bad input, one line naming the option).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import traceback

PROG = "busbw_model.py"

ALGORITHMS = ("ring", "tree", "innet")
DEFAULT_NODES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MAX_NODE_COUNTS = 64  # entries of --nodes
MAX_NODES = 1_000_000
_SIZE_RE = re.compile(r"(\d+)([KMGT]?)(I?B)?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


# ----------------------------------------------------------------------------------------------
# The model (pure functions: the CLI, the tests and the book's calculators share them)
# ----------------------------------------------------------------------------------------------

def busbw_factor(ranks: int) -> float:
    """nccl-tests' all-reduce factor 2(n-1)/n: busbw = algbw x this."""
    return 2 * (ranks - 1) / ranks


def predict(algorithm: str, nodes: int, gpus_per_node: int, size_bytes: float, intra_GBps: float,
            inter_GBps: float, alpha_intra_us: float, alpha_inter_us: float) -> dict:
    """One all-reduce of ``size_bytes`` per rank on ``nodes`` x ``gpus_per_node`` ranks with
    ``algorithm`` (ring, tree or innet). Returns a flat dict: ``nodes``, ``ranks``,
    ``algorithm``, ``size_bytes``, ``latency_us`` (the alpha terms), ``transfer_us`` (the
    bandwidth term), ``time_us``, ``algbw_GBps``, ``busbw_GBps``, ``rate_GBps`` (the rate the
    bandwidth term runs at) and ``limited_by`` ("latency", "intra-node" or "inter-node": the
    larger term, and for the bandwidth term the link that sets the rate). Raises ValueError
    for an unknown algorithm, a single rank or values out of range."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r} (choose from {', '.join(ALGORITHMS)})")
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    for name, value, positive in (("size_bytes", size_bytes, True), ("intra_GBps", intra_GBps, True),
                                  ("inter_GBps", inter_GBps, True),
                                  ("alpha_intra_us", alpha_intra_us, False),
                                  ("alpha_inter_us", alpha_inter_us, False)):
        if not (isinstance(value, (int, float)) and math.isfinite(value)
                and (value > 0 if positive else value >= 0)):
            raise ValueError(f"{name} must be a finite number {'>' if positive else '>='} 0, "
                             f"got {value!r}")
    n, N, g, S = nodes * gpus_per_node, nodes, gpus_per_node, float(size_bytes)
    if n == 1:
        raise ValueError("one rank has nothing to all-reduce (nodes x gpus_per_node must be >= 2)")
    intra, inter = intra_GBps * 1e9, inter_GBps * 1e9  # bytes/s, one direction
    a_in, a_out = alpha_intra_us * 1e-6, alpha_inter_us * 1e-6
    if algorithm == "ring":
        # 2(n-1) steps, 2(N-1) of them cross a node boundary; each rank sends 2(n-1)/n x S.
        latency = 2 * (n - N) * a_in + 2 * (N - 1) * a_out
        volume = busbw_factor(n) * S
        if N == 1:
            rates = {"intra-node": intra}
        elif g == 1:
            rates = {"inter-node": inter}
        else:  # 1/g of it through the GPU's NIC, (g-1)/g over the node's links
            rates = {"intra-node": intra * g / (g - 1), "inter-node": g * inter}
    elif algorithm == "tree":
        # chain inside the node, double binary tree across nodes
        depth = math.ceil(math.log2(N)) if N > 1 else 0
        latency = 2 * (g - 1) * a_in + 2 * depth * a_out
        volume = 2 * S
        rates = {}
        if g > 1:
            rates["intra-node"] = intra  # each GPU of the chain sends S up and S down
        if N > 1:  # a node sends 2S through its g NICs; with two nodes only S
            rates["inter-node"] = g * inter * (2 if N == 2 else 1)
    else:  # innet: the switches add; per GPU and per direction
        latency = (a_in if g > 1 else 0.0) + (a_out if N > 1 else 0.0)
        # NVLS: send S and receive the reduced share S/g, then send the share and receive S
        volume = (g + 1) / g * S if g > 1 else S
        times = {}
        if g > 1:
            times["intra-node"] = volume / intra
        if N > 1:  # SHARP: the GPU's share S/g up through its NIC, the reduced share back
            times["inter-node"] = S / g / inter
        rates = {link: volume / t for link, t in times.items()}
    link = min(rates, key=rates.get)
    rate = rates[link]
    transfer = volume / rate
    time = latency + transfer
    algbw = S / time
    return {"nodes": N, "ranks": n, "algorithm": algorithm, "size_bytes": int(S) if S == int(S) else S,
            "latency_us": latency * 1e6, "transfer_us": transfer * 1e6, "time_us": time * 1e6,
            "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * busbw_factor(n) / 1e9,
            "rate_GBps": rate / 1e9, "limited_by": "latency" if latency > transfer else link}


def model(nodes, gpus_per_node: int, size_bytes: float, intra_GBps: float, inter_GBps: float,
          alpha_intra_us: float, alpha_inter_us: float, algorithms=("ring", "tree")) -> list[dict]:
    """``predict`` for every node count of ``nodes`` and every algorithm of ``algorithms``, in
    that order (node count first): the rows of the CLI's table and of its JSON ``results``."""
    return [predict(a, N, gpus_per_node, size_bytes, intra_GBps, inter_GBps, alpha_intra_us,
                    alpha_inter_us) for N in nodes for a in algorithms]


def crossover_bytes(nodes: int, gpus_per_node: int, intra_GBps: float, inter_GBps: float,
                    alpha_intra_us: float, alpha_inter_us: float, lo: float = 1.0,
                    hi: float = 2.0**50) -> float | None:
    """The message size (bytes) at which ring and tree take the same time on ``nodes`` nodes,
    found by bisection on [lo, hi]; None when one of them is faster over the whole range."""
    def diff(size):
        args = (nodes, gpus_per_node, size, intra_GBps, inter_GBps, alpha_intra_us, alpha_inter_us)
        return predict("ring", *args)["time_us"] - predict("tree", *args)["time_us"]
    d_lo, d_hi = diff(lo), diff(hi)
    if d_lo == 0:
        return lo
    if (d_lo > 0) == (d_hi > 0):
        return None
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if (diff(mid) > 0) == (d_lo > 0):
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return math.sqrt(lo * hi)


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _size_text(size: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size:,} bytes"


def report(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [f"# {PROG}: alpha-beta model of one all-reduce of {_size_text(args.size)} per rank, "
             f"{args.gpus_per_node} GPUs per node",
             f"# intra-node {args.intra_GBps:g} GBps, alpha {args.alpha_intra_us:g} us; "
             f"inter-node {args.inter_GBps:g} GBps per GPU, alpha {args.alpha_inter_us:g} us; "
             f"1 GBps = 1e9 bytes/s, one direction",
             "# busbw = algbw * 2(n-1)/n; innet is an upper bound, not a prediction",
             f"{'nodes':>7}{'ranks':>8}  {'algorithm':<10}{'time_us':>12}{'algbw_GBps':>12}"
             f"{'busbw_GBps':>12}  limited_by"]
    for r in rows:
        lines.append(f"{r['nodes']:>7}{r['ranks']:>8}  {r['algorithm']:<10}{r['time_us']:>12.1f}"
                     f"{r['algbw_GBps']:>12.2f}{r['busbw_GBps']:>12.2f}  {r['limited_by']}")
    return "\n".join(lines)


def _round(value):
    return float(f"{value:.6g}") if isinstance(value, float) else value


def json_report(rows: list[dict], args: argparse.Namespace, argv: list[str] | None) -> dict:
    """The --json document (keys: tools/schemas/busbw_model.schema.json)."""
    return {**envelope("busbw_model", None, argv=argv),
            "inputs": {"gpus_per_node": args.gpus_per_node, "size_bytes": args.size,
                       "intra_GBps": args.intra_GBps, "inter_GBps": args.inter_GBps,
                       "alpha_intra_us": args.alpha_intra_us,
                       "alpha_inter_us": args.alpha_inter_us, "algorithms": list(args.algos),
                       "nodes": list(args.nodes)},
            "results": [{k: _round(v) for k, v in r.items()} for r in rows]}


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """A byte count such as ``1024``, ``32K``, ``256M``, ``1G`` or ``64KiB`` (binary suffixes, as
    in all_reduce_bench.py), between 1 byte and 1 PiB."""
    m = _SIZE_RE.fullmatch(text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use an integer number of bytes with an optional binary "
            f"suffix K, M, G or T (K = 1024)")
    value = int(m.group(1)) * _SUFFIX[m.group(2)]
    if not 1 <= value <= 2**50:
        raise argparse.ArgumentTypeError(f"{text} must be between 1 byte and 1 PiB")
    return value


def parse_nodes(text: str) -> tuple[int, ...]:
    """A comma-separated list of node counts, e.g. ``1,2,4,8``: integers >= 1, no repeats."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise argparse.ArgumentTypeError(f"{text!r}: give node counts separated by commas, "
                                         f"e.g. 1,2,4,8")
    if len(items) > MAX_NODE_COUNTS:
        raise argparse.ArgumentTypeError(f"{len(items)} node counts: at most {MAX_NODE_COUNTS} "
                                         f"(one table row each per algorithm)")
    counts = []
    for t in items:
        try:
            value = int(t)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{t!r} is not an integer") from None
        if not 1 <= value <= MAX_NODES:
            raise argparse.ArgumentTypeError(f"{value} must be between 1 and {MAX_NODES:,}")
        if value in counts:
            raise argparse.ArgumentTypeError(f"{value} is listed twice")
        counts.append(value)
    return tuple(counts)


def parse_algos(text: str) -> tuple[str, ...]:
    items = [t.strip().lower() for t in text.split(",")]
    for t in items:
        if t not in ALGORITHMS:
            raise argparse.ArgumentTypeError(f"unknown algorithm {t!r} (choose from "
                                             f"{', '.join(ALGORITHMS)})")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"{text!r} lists an algorithm twice")
    return tuple(items)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Alpha-beta model of all-reduce time, algbw and busbw against the "
        "number of nodes, for ring, tree and in-network reduction (decimal GBps, one direction).")
    parser.add_argument("--nodes", type=parse_nodes, default=DEFAULT_NODES, metavar="N,N,...",
                        help="node counts (default 1,2,4,...,1024)")
    parser.add_argument("--gpus-per-node", type=number(int, 1, 1024), default=8, metavar="G",
                        help="GPUs (ranks) per node (default 8)")
    parser.add_argument("--size", type=parse_size, default=2**30, metavar="BYTES",
                        help="all-reduce size per rank, e.g. 256M or 1G (binary suffixes; "
                        "default 1G)")
    parser.add_argument("--intra-GBps", type=number(float, 0, 1e5, lo_open=True), default=450.0,
                        metavar="GBPS", help="one-direction bandwidth per GPU inside a node "
                        "(default 450, H100 NVLink's per-direction spec)")
    parser.add_argument("--inter-GBps", type=number(float, 0, 1e5, lo_open=True), default=50.0,
                        metavar="GBPS", help="one-direction network bandwidth per GPU, the node's "
                        "NIC bandwidth / GPUs (default 50: one 400 Gbps NIC per GPU)")
    parser.add_argument("--alpha-intra-us", type=number(float, 0, 1e6), default=1.0, metavar="US",
                        help="latency of one step inside a node, microseconds (default 1)")
    parser.add_argument("--alpha-inter-us", type=number(float, 0, 1e6), default=5.0, metavar="US",
                        help="latency of one step between nodes, microseconds (default 5)")
    parser.add_argument("--algos", type=parse_algos, default=("ring", "tree"), metavar="A,A",
                        help="algorithms among ring, tree, innet (default ring,tree; innet is "
                        "an upper bound for NVLS/SHARP)")
    parser.add_argument("--json", type=nonempty, metavar="PATH",
                        help="also write the results as JSON ('-': print it instead of the table)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.gpus_per_node == 1 and 1 in args.nodes:
        parser.error("--nodes 1 with --gpus-per-node 1 is a single rank: nothing to all-reduce")
    if args.json and args.json != "-":
        check_output(args.json, "--json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rows = model(args.nodes, args.gpus_per_node, args.size, args.intra_GBps, args.inter_GBps,
                     args.alpha_intra_us, args.alpha_inter_us, args.algos)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    # The JSON file is written before the table is printed, so a closed pipe
    # (`| head`) cannot cost the reader the file.
    if args.json:
        text = json.dumps(json_report(rows, args, argv), indent=2)
        if args.json == "-":
            print(text)
        else:
            write_atomic(args.json, text + "\n")
    if args.json != "-":
        print(report(rows, args))
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
