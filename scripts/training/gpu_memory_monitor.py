#!/usr/bin/env python
"""gpu_memory_monitor.py: log GPU memory from PyTorch's caching allocator inside a training loop.

``nvidia-smi`` shows what the process holds (the CUDA context plus all the allocator reserved);
what a step needs is in the allocator's own counters (``torch.cuda.memory_stats``).
``MemoryMonitor.snapshot()`` returns, in bytes: ``allocated`` (live tensors now), ``active_peak``
(the most in active blocks since the last ``reset_peaks()``: the step's worst moment),
``reserved_peak`` (the most the allocator held; reserved minus active is cache or fragmentation),
``alloc_retries`` (failed cudaMallocs that flushed the cache: a growing count means the job runs
at the edge of memory), ``ooms`` and ``device_total``; ``format()`` prints GiB (2**30 bytes).
Without CUDA it reports the process's resident memory (``rss``, ``rss_peak``). In a loop::

    from gpu_memory_monitor import MemoryMonitor
    mon = MemoryMonitor()            # current CUDA device, or host RSS without CUDA
    for step in range(steps):
        ...forward, backward, optimizer.step()...
        print(f"step {step} | {mon.format(mon.snapshot())}")
        mon.reset_peaks()

The demo keeps ``--mib`` more each step for ``--steps`` steps (``--provoke-oom``: catch an OOM;
``--json PATH``: the snapshots; under torchrun each rank watches GPU LOCAL_RANK). Exit status:
0 ok, 1 failure, 2 usage, 130 interrupted (``--json`` keeps the steps measured so far).

Example output (CPU only: RSS grows by the 64 MiB kept; the peak saw a 128 MiB temporary)::

    $ python scripts/training/gpu_memory_monitor.py --steps 3 --mib 64
    # gpu_memory_monitor.py: CUDA is not available; reporting host process memory (RSS) instead
    step 0 | host rss 0.28 GiB | rss peak 0.40 GiB
    step 1 | host rss 0.34 GiB | rss peak 0.47 GiB
    step 2 | host rss 0.40 GiB | rss peak 0.53 GiB
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import traceback

PROG = "gpu_memory_monitor.py"
GIB = 2**30
# The demo keeps steps x mib MiB alive (plus a temporary of 2 x mib): on a CPU run a typo would
# otherwise wake the kernel's OOM killer rather than give an error.
MAX_KEPT_MIB = 65536


def _host_memory() -> dict[str, int]:
    """Resident set size of this process now and its peak, in bytes (Linux /proc, else
    getrusage; ``rss`` is then the peak too)."""
    rss = peak = None
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    if rss is None or peak is None:
        import resource  # Unix only; ru_maxrss is KiB on Linux, bytes on macOS
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = maxrss if sys.platform == "darwin" else maxrss * 1024
        rss = peak if rss is None else rss
    return {"rss": rss, "rss_peak": peak}


class MemoryMonitor:
    """Reads the CUDA caching allocator's counters for one device (or host RSS without CUDA).

    ``device``: a CUDA device index, ``torch.device`` or None for the current device. Raises
    ValueError if ``device`` is given but CUDA is not available or the index does not exist.
    """

    def __init__(self, device=None, warn=True):
        import torch  # imported here so that `--help` works without torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        if not self.cuda:
            if device is not None:
                raise ValueError(f"device {device} requested but CUDA is not available")
            self.device = None
            if warn:
                print(f"# {PROG}: CUDA is not available; reporting host process memory (RSS) "
                      "instead", file=sys.stderr)
            return
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device if not isinstance(device, int) else f"cuda:{device}")
        if self.device.index is not None and self.device.index >= torch.cuda.device_count():
            raise ValueError(f"CUDA device {self.device.index} does not exist "
                             f"({torch.cuda.device_count()} visible)")
        _free, self.device_total = torch.cuda.mem_get_info(self.device)

    def snapshot(self) -> dict:
        """Current counters as a dict of ints (bytes or counts), as the module docstring says.
        Keys with CUDA: kind='cuda', allocated, active_peak, reserved, reserved_peak,
        alloc_retries, ooms, device_total. Without: kind='host', rss, rss_peak."""
        if not self.cuda:
            return {"kind": "host", **_host_memory()}
        st = self.torch.cuda.memory_stats(self.device)
        return {"kind": "cuda",
                "allocated": st.get("allocated_bytes.all.current", 0),
                "active_peak": st.get("active_bytes.all.peak", 0),
                "reserved": st.get("reserved_bytes.all.current", 0),
                "reserved_peak": st.get("reserved_bytes.all.peak", 0),
                "alloc_retries": st.get("num_alloc_retries", 0),
                "ooms": st.get("num_ooms", 0),
                "device_total": self.device_total}

    def reset_peaks(self) -> None:
        """Start a new peak window (``torch.cuda.reset_peak_memory_stats``); the retry and OOM
        counters are cumulative and are not reset. No-op without CUDA (RSS peaks cannot be
        reset)."""
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    @staticmethod
    def format(snap: dict) -> str:
        """One log-friendly line for a snapshot, sizes in GiB."""
        if snap["kind"] == "host":
            return f"host rss {snap['rss'] / GIB:.2f} GiB | rss peak {snap['rss_peak'] / GIB:.2f} GiB"
        total = snap["device_total"] or 1
        return (f"alloc {snap['allocated'] / GIB:.2f} GiB | active peak "
                f"{snap['active_peak'] / GIB:.2f} GiB ({100 * snap['active_peak'] / total:.0f}%) | "
                f"reserved peak {snap['reserved_peak'] / GIB:.2f} GiB "
                f"({100 * snap['reserved_peak'] / total:.0f}%) | retries {snap['alloc_retries']} | "
                f"OOMs {snap['ooms']}")


def run_demo(args: argparse.Namespace, torch, mon: MemoryMonitor, device) -> list[dict]:
    """The demo loop: keep --mib MiB more each step, with a temporary twice as large freed
    before the snapshot, and print one line per step; returns the snapshots. Ctrl-C writes
    the steps measured so far to --json, then stops the run."""
    kept, steps = [], []
    try:
        for step in range(args.steps):
            mon.reset_peaks()
            kept.append(torch.ones(args.mib * 2**20 // 4, dtype=torch.float32, device=device))
            # a temporary twice as large, freed before the snapshot: it shows in the peak only
            tmp = torch.empty(2 * args.mib * 2**20 // 4, dtype=torch.float32, device=device)
            tmp.fill_(1.0)
            del tmp
            snap = mon.snapshot()
            steps.append({"step": step, **snap})
            print(f"step {step} | {mon.format(snap)}", flush=True)
        if args.provoke_oom:
            _free, total = torch.cuda.mem_get_info(device)
            try:
                torch.empty(2 * total, dtype=torch.uint8, device=device)
            except torch.OutOfMemoryError:
                snap = mon.snapshot()
                steps.append({"step": "oom", **snap})
                print(f"after OOM | {mon.format(snap)}", flush=True)
    except KeyboardInterrupt:
        write_steps(args, steps, interrupted=True)  # the steps measured so far are kept
        raise
    return steps


def check_fits(args: argparse.Namespace, torch, device) -> None:
    """Refuse a demo that cannot fit: it keeps --steps x --mib MiB and, in its last step, a
    temporary of 2 x --mib more. On the GPU compare with the device's free memory; on the CPU
    with the host's MemAvailable, where a run past it wakes the kernel's OOM killer."""
    need = (args.steps + 2) * args.mib * 2**20
    if device is not None:
        free, where = torch.cuda.mem_get_info(device)[0], f"GPU {device}"
    else:
        free, where = _host_available(), "host"
        if free is None:
            return
    if need > free:
        raise ScriptError(f"--steps {args.steps} x --mib {args.mib} (and a temporary of 2 x "
                          f"--mib) needs {need // 2**20} MiB; the {where} has "
                          f"{free // 2**20} MiB free", EXIT_USAGE)


def _host_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def write_steps(args: argparse.Namespace, steps: list[dict], interrupted: bool = False) -> None:
    """--json's file: the per-step snapshots (and ``"interrupted": true`` after Ctrl-C)."""
    if args.json:
        doc = {"tool": "gpu_memory_monitor", "schema_version": 1, "units": "bytes",
               "mib_per_step": args.mib, "steps": steps}
        if interrupted:
            doc["interrupted"] = True
        write_atomic(args.json, json.dumps(doc, indent=2))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Demo of MemoryMonitor: allocate a growing "
                                "set of tensors and print the allocator's counters each step.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--steps", type=number(int, 1, 1_000_000), default=5,
                   help="demo steps, at most 1e6 (default 5)")
    p.add_argument("--mib", type=number(int, 1), default=64,
                   help="MiB allocated and kept per step (default 64)")
    p.add_argument("--provoke-oom", action="store_true",
                   help="after the loop, request more than the device holds and catch the OOM "
                   "(CUDA only)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the per-step snapshots to PATH")
    args = p.parse_args(argv)
    if args.steps * args.mib > MAX_KEPT_MIB:
        p.error(f"--steps {args.steps} x --mib {args.mib} keeps {args.steps * args.mib} MiB "
                f"alive; the demo allows at most {MAX_KEPT_MIB} MiB")
    if args.json:
        check_output(args.json, "--json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it ignored:
    # restore it, so that Ctrl-C or `kill -INT` stops the run however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    local_rank = env_int("LOCAL_RANK", 0)
    import torch

    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise ScriptError(f"environment variable LOCAL_RANK={local_rank} but only "
                              f"{torch.cuda.device_count()} CUDA devices are visible", EXIT_USAGE)
        torch.cuda.set_device(local_rank)
    elif args.provoke_oom:
        raise ScriptError("--provoke-oom needs CUDA (no device allocator on CPU)", EXIT_USAGE)
    mon = MemoryMonitor()
    device = mon.device or torch.device("cpu")
    check_fits(args, torch, mon.device)
    steps = run_demo(args, torch, mon, device)
    write_steps(args, steps)
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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
