#!/usr/bin/env python
"""fio_scan.py: run a matrix of fio jobs against one directory and print one table.

For every combination of pattern (``--rw``: read, write, randread, randwrite), block size
(``--bs``), file size per job (``--size``) and parallel jobs (``--numjobs``) it runs one
time-based fio job (``--budget`` seconds split evenly over the matrix; laying out the files is not
timed) in a scratch directory it creates inside DIR and removes at the end, and reports the jobs'
sum: MBps (1e6 bytes/s), IOPS (blocks/s) and the p50/p99 total latency of one I/O in
microseconds. Defaults: O_DIRECT (``--direct 1``), libaio, ``--iodepth 16``. Sizes take binary
suffixes (K = 1024). Needs fio 3.x on PATH. Method and safety checks: book/en/storage/index.md
("The fio scan").

One process; fio does the parallel I/O. On a shared file system, run it from a compute node::

    python fio_scan.py /scratch/$USER --size 4G --bs 4K,1M --numjobs 1,8 --budget 300 --json fio.json
    srun --nodes 1 --ntasks 1 python fio_scan.py /lustre/$USER --budget 120

Example output (a 2-core VM's disk, ext4, rows cut; results/storage/fio_scan-local-ext4.json)::

            rw     bs   size jobs  qd       MBps        IOPS    p50(us)    p99(us)
          read     4K     1G    1  16      314.0      76,664      148.5    2,342.9
         write    64K     1G    1  16    1,803.9      27,526      391.2    2,244.6
     randwrite     1M     1G    4  16    1,810.7       1,727   43,778.0   98,041.9
    # best read: 1,613 MBps

Exit status: 0 ok, 1 failure (fio failed or outlived its time limit), 2 usage (checked before fio
starts), 130/143 interrupted by Ctrl-C/SIGTERM (the finished jobs are still written to --json).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from itertools import product
from pathlib import Path

PROG = "fio_scan.py"
PATTERNS = ("read", "write", "randread", "randwrite")
MIN_RUNTIME_S = 0.5  # fio's runtime has 1 ms resolution; below this, ramp-up dominates
MAX_NUMJOBS = 1024     # fio forks one process per job: more than this is a typo
MAX_IODEPTH = 65536    # fio's own limit on iodepth


# ----------------------------------------------------------------------------------------------
# The method: one time-based fio job per point of the matrix
# ----------------------------------------------------------------------------------------------

class ScanError(Exception):
    """A problem that ends the scan with a one-line error message."""


def filesystem_of(path: Path) -> str:
    """File-system type of the mount holding ``path``, from /proc/mounts ('unknown' elsewhere)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    best, fstype = "", "unknown"
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount = fields[1].replace("\\040", " ")
        if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) > len(best):
            best, fstype = mount, fields[2]
    return fstype


def make_scratch(directory: Path) -> Path:
    """Create and return a scratch directory inside ``directory``.

    Raises ScanError (one line) if ``directory`` is missing, not a directory or not writable.
    Creating a directory is the test of writability: ``os.access`` says yes to root even on a
    read-only file system.
    """
    if not directory.exists():
        raise ScanError(f"directory {directory} does not exist")
    if not directory.is_dir():
        raise ScanError(f"{directory} is not a directory")
    try:
        return Path(tempfile.mkdtemp(prefix="fio_scan.", dir=directory))
    except OSError as err:
        raise ScanError(f"directory {directory} is not writable ({err.strerror})") from err


def fio_version(fio: str) -> str:
    """fio's version string; raises ScanError if ``fio`` cannot be run."""
    path = shutil.which(fio)
    if not path:
        raise ScanError(f"fio not found ({fio!r}); install it, e.g. apt-get install fio")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ScanError(f"cannot run {path} --version ({err})") from err
    return out.stdout.strip() or "unknown"


def fio_command(fio: str, workdir: Path, rw: str, bs: int, size: int, numjobs: int,
                iodepth: int, runtime_s: float, direct: int, ioengine: str) -> list[str]:
    """The fio command line of one matrix point (one group-reported job, JSON output)."""
    return [
        fio, "--name=scan", f"--directory={workdir}", "--filename_format=data.$jobnum",
        f"--rw={rw}", f"--bs={bs}", f"--size={size}", f"--numjobs={numjobs}",
        f"--iodepth={iodepth}", f"--ioengine={ioengine}", f"--direct={direct}",
        f"--runtime={max(1, round(runtime_s * 1000))}ms", "--time_based", "--group_reporting",
        "--lat_percentiles=1", "--percentile_list=50:99", "--randrepeat=0",
        "--output-format=json",
    ]


def run_fio(cmd: list[str], timeout_s: float, state: dict) -> str:
    """Run one fio command, return its stdout; ScriptError with fio's last error line if it
    fails or outlives ``timeout_s``.

    The child is recorded in ``state['child']`` so that a signal handler can stop it.
    """
    # fio's output goes to unnamed temporary files, not pipes: a job process that outlives fio
    # would hold a pipe open and reading it to the end would block; the scan waits for fio
    # itself only. A session of its own: stopping fio means stopping its job processes too
    # (see stop_fio).
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        proc = start_process(cmd, stdout=out_file, stderr=err_file, start_new_session=True)
        state["child"] = proc
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_fio(proc)
            state["child"] = None
            raise ScriptError(f"fio did not finish within {timeout_s:.0f} s (stopped it and its "
                              "job processes)") from None
        # (a signal raised inside wait() leaves state["child"] set: stop_scan stops it)
        state["child"] = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever fio left behind in its group
        out_file.seek(0)
        err_file.seek(0)
        out = out_file.read().decode("utf-8", errors="replace")
        err = err_file.read().decode("utf-8", errors="replace")
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (err + "\n" + out).splitlines() if ln.strip()]
        msgs = [ln for ln in lines if "fio:" in ln or "error" in ln.lower()] or lines or ["?"]
        raise ScriptError(f"fio failed (exit {proc.returncode}): {msgs[-1]}")
    return out


def parse_fio_json(text: str, rw: str) -> dict:
    """Bandwidth, IOPS and latency of a group-reported fio run.

    ``text`` is fio's ``--output-format=json`` output; ``rw`` picks the ``read`` or ``write``
    section. Returns bw_MBps (decimal), iops, lat_mean_us, lat_p50_us, lat_p99_us, io_bytes,
    runtime_s. Raises ScanError if the JSON is malformed or fio reported a job error.
    """
    try:
        start = text.index("{")  # fio may print notices before the JSON document
        data = json.loads(text[start:])
        job = data["jobs"][0]
    except (ValueError, KeyError, IndexError) as err:
        raise ScriptError(f"could not parse fio's JSON output ({err})") from err
    if not isinstance(job, dict):
        raise ScriptError("could not parse fio's JSON output (jobs[0] is not an object)")
    if job.get("error"):
        raise ScriptError(f"fio job failed with error {job['error']}")
    version = data.get("fio version", "an unknown fio version") if isinstance(data, dict) else "?"
    name = "write" if "write" in rw else "read"
    side = job.get(name)

    def number(obj, key: str, where: str) -> float:
        value = obj.get(key) if isinstance(obj, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScriptError(f"fio's JSON output has no number at jobs[0].{where}{key} ({version}); "
                              "this fio reports in a layout fio_scan.py does not know")
        return value
    lat = side.get("lat_ns", {}) if isinstance(side, dict) else {}
    pct = lat.get("percentile") or (side or {}).get("clat_ns", {}).get("percentile") or {}

    def percentile(p: float) -> float:
        for key, value in pct.items():
            if abs(float(key) - p) < 1e-6:
                return value / 1000.0
        return float("nan")

    return {
        "bw_MBps": number(side, "bw_bytes", f"{name}.") / 1e6,
        "iops": float(number(side, "iops", f"{name}.")),
        "lat_mean_us": lat.get("mean", float("nan")) / 1000.0,
        "lat_p50_us": percentile(50.0),
        "lat_p99_us": percentile(99.0),
        "io_bytes": int(number(side, "io_bytes", f"{name}.")),
        "runtime_s": number(side, "runtime", f"{name}.") / 1000.0,
    }


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, read from /proc (Linux; just ``[pid]`` elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], []))
    return tree


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def stop_fio(proc: subprocess.Popen, sig: int = signal.SIGKILL, wait_s: float = 30) -> None:
    """Send ``sig`` to fio and every process it forked and wait (at most ``wait_s``) until they
    are all gone, so that nothing writes in the scan's files once this returns. fio's job
    processes start sessions of their own, so the process group is not enough: the tree is
    collected before anything is killed (orphans are adopted by init)."""
    tree = process_tree(proc.pid)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    end = time.monotonic() + wait_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=wait_s)
    # the job processes are fio's children, not ours: wait until they have exited
    while time.monotonic() < end and any(_running(pid) for pid in tree[1:]):
        time.sleep(0.05)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def check_matrix(args) -> float:
    """Seconds per fio job of the matrix ``args`` asks for; ScanError if the matrix cannot run
    (too many points for the budget, a block larger than its file). Counted before the matrix
    is built: a long list on every axis would not fit in memory."""
    points = len(args.size) * len(args.numjobs) * len(args.rw) * len(args.bs)
    runtime_s = args.budget / points
    if runtime_s < MIN_RUNTIME_S:
        raise ScanError(f"--budget {args.budget:g} s gives {runtime_s:.2g} s per job for "
                        f"{points} jobs; need at least {MIN_RUNTIME_S} s each")
    if max(args.bs) > min(args.size):
        raise ScanError(f"--bs {human_size(max(args.bs))} is larger than --size "
                        f"{human_size(min(args.size))}: a block must fit in the file")
    return runtime_s


def scan(args, state: dict) -> dict:
    """Run the matrix; returns the JSON-able summary. Raises ScanError on a problem."""
    runtime_s = check_matrix(args)
    matrix = list(product(args.size, args.numjobs, args.rw, args.bs))
    version = fio_version(args.fio)
    scratch = make_scratch(args.directory)
    state["scratch"] = scratch
    need = max(s * j for s, j in product(args.size, args.numjobs)) * len(args.size)
    free = shutil.disk_usage(scratch).free
    if need > 0.9 * free:
        raise ScanError(f"the scan needs {need / 1e9:.2f} GB but {args.directory} has "
                        f"{free / 1e9:.2f} GB free; use a smaller --size or --numjobs")
    if args.direct == 0 and any(rw in ("read", "randread") for rw in args.rw):
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if min(args.size) * min(args.numjobs) < 2 * mem:
            print(f"# warning: buffered reads of files smaller than 2x RAM ({mem / 1e9:.0f} GB) "
                  "may be served from the page cache", file=sys.stderr)
    fstype = filesystem_of(scratch)
    print(f"# {PROG}: {version}, {args.directory} ({fstype}), ioengine {args.ioengine}, "
          f"direct={args.direct}, {len(matrix)} jobs x {runtime_s:.2f} s")
    print("# MBps = 1e6 bytes/s; IOPS = blocks/s; p50/p99 = total IO latency in microseconds")
    rows: list[dict] = state["rows"]
    state["meta"] = {"fio_version": version, "filesystem": fstype, "runtime_s": runtime_s}
    print_header()
    for size, numjobs, rw, bs in matrix:
        workdir = scratch / f"size-{human_size(size)}"
        workdir.mkdir(exist_ok=True)
        cmd = fio_command(args.fio, workdir, rw, bs, size, numjobs, args.iodepth, runtime_s,
                          args.direct, args.ioengine)
        # generous limit: laying out the files may take a while on slow storage
        out = run_fio(cmd, timeout_s=runtime_s + 60 + size * numjobs / 20e6, state=state)
        row = {"rw": rw, "bs_bytes": bs, "size_bytes": size, "numjobs": numjobs,
               "iodepth": args.iodepth, **parse_fio_json(out, rw)}
        rows.append(row)
        print_row(row)
    summary = summarize(args, rows, **state["meta"])
    best = lambda pat, key: max((r[key] for r in rows if r["rw"] == pat), default=None)  # noqa: E731
    for pat, key, unit in (("read", "bw_MBps", "MBps"), ("randread", "iops", "IOPS")):
        value = best(pat, key)
        if value is not None:
            print(f"# best {pat}: {value:,.0f} {unit}")
    return summary


def stop_scan(state: dict) -> None:
    """Stop a running fio (and its job processes) and remove the scratch directory; signals are
    ignored meanwhile, so a second Ctrl-C cannot leave files behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = state.get("child")
    if child is not None:
        stop_fio(child)
        state["child"] = None
    if state.get("scratch") is not None:
        shutil.rmtree(state["scratch"], ignore_errors=True)
        state["scratch"] = None


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def human_size(nbytes: int) -> str:
    """Shortest binary-suffixed spelling of ``nbytes`` (4096 -> '4K'), as fio accepts it."""
    for suffix, mult in (("T", 1024 ** 4), ("G", 1024 ** 3), ("M", 1024 ** 2), ("K", 1024)):
        if nbytes % mult == 0:
            return f"{nbytes // mult}{suffix}"
    return str(nbytes)


def _fmt(value: float, digits: int = 1) -> str:
    return "nan" if value != value else f"{value:,.{digits}f}"


def print_header(file=sys.stdout) -> None:
    """Column titles of the table that print_row fills."""
    print(f"{'rw':>10} {'bs':>6} {'size':>6} {'jobs':>4} {'qd':>3} {'MBps':>10} {'IOPS':>11} "
          f"{'p50(us)':>10} {'p99(us)':>10}", file=file)


def print_row(r: dict, file=sys.stdout) -> None:
    """One table line: pattern, bs, file size, jobs, queue depth, MBps, IOPS, p50, p99 (us)."""
    print(f"{r['rw']:>10} {human_size(r['bs_bytes']):>6} {human_size(r['size_bytes']):>6} "
          f"{r['numjobs']:>4} {r['iodepth']:>3} {_fmt(r['bw_MBps']):>10} "
          f"{_fmt(r['iops'], 0):>11} {_fmt(r['lat_p50_us']):>10} {_fmt(r['lat_p99_us']):>10}",
          file=file, flush=True)


def summarize(args, rows: list[dict], fio_version: str, filesystem: str, runtime_s: float,
              interrupted: bool = False) -> dict:
    """The --json document of a scan (``interrupted``: the rows measured before a signal)."""
    return {
        **envelope("fio_scan", f"{filesystem} at {args.directory}", {"fio": fio_version}),
        "fio_version": fio_version,
        "directory": str(args.directory), "filesystem": filesystem, "ioengine": args.ioengine,
        "direct": args.direct, "iodepth": args.iodepth,
        "runtime_s_per_job": round(runtime_s, 3), "hostname": platform.node(),
        "units": {"bw_MBps": "1e6 bytes/s", "lat": "microseconds", "sizes": "bytes"},
        "results": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in rows],
        **({"interrupted": True} if interrupted else {}),
    }


def save_plot(rows: list[dict], path: Path, title: str) -> None:
    """PNG of bandwidth (MBps) against block size, one line per (pattern, jobs, size)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise ScanError(f"--plot needs matplotlib ({err}); pip install matplotlib") from err
    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = sorted({(r["rw"], r["numjobs"], r["size_bytes"]) for r in rows})
    for rw, jobs, size in keys:
        pts = sorted((r["bs_bytes"], r["bw_MBps"]) for r in rows
                     if (r["rw"], r["numjobs"], r["size_bytes"]) == (rw, jobs, size))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                label=f"{rw}, {jobs} job(s), {human_size(size)}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block size (bytes)")
    ax.set_ylabel("bandwidth (MBps, 1 MBps = 1e6 B/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    write_atomic(path, buffer.getvalue())


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """Bytes in ``text``: an integer with an optional binary suffix K, M, G or T (K = 1024).

    Raises ValueError for anything else or a value < 1.
    """
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    for i, suffix in enumerate("KMGT", 1):
        if text.endswith(suffix):
            mult, text = 1024 ** i, text[:-1]
            break
    value = int(text) * mult
    if value < 1:
        raise ValueError(f"size must be >= 1 byte, got {value}")
    return value


def _csv(kind):
    def convert(text: str):
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from err
        if not values:
            raise argparse.ArgumentTypeError("empty list")
        return values
    return convert


def _pattern(text: str) -> str:
    if text not in PATTERNS:
        raise ValueError(f"unknown pattern {text!r} (choose from {', '.join(PATTERNS)})")
    return text


def _positive_int(text: str, hi: int = MAX_NUMJOBS) -> int:
    value = int(text)
    if not 1 <= value <= hi:
        raise ValueError(f"must be from 1 to {hi}, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run a matrix of fio jobs against DIR and print bandwidth "
        "(decimal MBps), IOPS and p50/p99 latency in one table.")
    parser.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    parser.add_argument("directory", type=lambda t: Path(nonempty(t)),
                        help="existing, writable directory to test")
    parser.add_argument("--rw", type=_csv(_pattern), default=list(PATTERNS),
                        help="comma-separated patterns from read,write,randread,randwrite "
                        "(default: all four)")
    parser.add_argument("--bs", type=_csv(parse_size), default=[4096, 1024 ** 2],
                        help="block sizes, e.g. 4K,64K,1M (default 4K,1M)")
    parser.add_argument("--size", type=_csv(parse_size), default=[1024 ** 3],
                        help="file size per job, e.g. 256M,4G (default 1G); make it larger than "
                        "RAM for buffered reads")
    parser.add_argument("--numjobs", type=_csv(_positive_int), default=[1],
                        help="parallel jobs (processes), e.g. 1,8 (default 1)")
    parser.add_argument("--iodepth", type=number(int, 1, MAX_IODEPTH), default=16,
                        help="IOs in flight per job (queue depth; default 16)")
    parser.add_argument("--ioengine", default="libaio" if sys.platform.startswith("linux")
                        else "posixaio", help="fio ioengine (default libaio on Linux)")
    parser.add_argument("--direct", type=number(int), choices=(0, 1), default=1,
                        help="1 = O_DIRECT, bypass the page cache (default); 0 = buffered")
    parser.add_argument("--budget", type=number(float, 0, 7 * 86400, lo_open=True), default=120.0,
                        help="total seconds of measurement, split evenly over the matrix "
                        "(default 120; file layout comes on top)")
    parser.add_argument("--fio", default="fio", help="fio executable (default: fio on PATH)")
    parser.add_argument("--json", type=nonempty, metavar="PATH", help="write the results as JSON")
    parser.add_argument("--plot", type=nonempty, metavar="PATH",
                        help="save a PNG of bandwidth vs block size (needs matplotlib)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            check_output(path, option)
    state: dict = {"scratch": None, "child": None, "rows": [], "meta": None}
    on_stop_signals()
    try:
        summary = scan(args, state)
        if args.json:
            write_atomic(args.json, json.dumps(summary, indent=2) + "\n")
        if args.plot:
            save_plot(summary["results"], args.plot,
                      f"fio scan of {args.directory} ({summary['filesystem']})")
        return 0
    except ScanError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    except Interrupted as sig:
        stop_scan(state)  # fio first: its files can only be removed once it has stopped
        kept = ""
        if args.json and state["meta"] is not None and state["rows"]:
            write_atomic(args.json, json.dumps(summarize(args, state["rows"], **state["meta"],
                                                         interrupted=True), indent=2) + "\n")
            kept = f"; wrote the {len(state['rows'])} finished jobs to {args.json}"
        print(f"{PROG}: error: interrupted by {sig}; removed the scan's files{kept}",
              file=sys.stderr)
        return sig.status
    finally:
        stop_scan(state)


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


def start_process(cmd: list[str], **popen_args):
    """``subprocess.Popen(cmd, **popen_args)`` with Ctrl-C and SIGTERM held until it returns, so
    that the caller always gets the process it must stop: a signal raised inside Popen, after the
    fork, would leave a running child that no one knows of. A signal that came meanwhile kills the
    new process (its whole group with ``start_new_session=True``) and is raised as Interrupted.
    Raises what Popen raises (OSError) when no signal came. Signals are held only in the main
    thread and only where a Python handler takes them (SIGINT left ignored stays ignored)."""
    import signal
    import subprocess
    import threading
    held: list[int] = []
    before = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            if callable(signal.getsignal(sig)):
                before[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        proc = subprocess.Popen(cmd, **popen_args)
    except BaseException:
        if not held:
            raise
        proc = None
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if held:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if popen_args.get("start_new_session"):
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        raise Interrupted(held[0])
    return proc


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
