#!/usr/bin/env python
"""dataloader_bench.py: DataLoader throughput against num_workers, pin_memory and non_blocking.

A synthetic dataset returns uint8 samples of ``--sample-shape`` and spends ``--sample-ms`` ms on
each (``--cost cpu``: busy-wait, like decoding; ``sleep``: waiting, like remote storage). For
every ``--workers`` value (and, on a CUDA GPU, each pin_memory / non_blocking combination) it
times ``--batches`` batches of ``--batch-size`` after ``--warmup``, copying each to the device, and
reports samples/s, MBps (1e6 bytes/s), the seconds to the first batch, the ms per batch spent
waiting for data and the ideal k / c samples/s; then it recommends the cheapest setting within
5% of the best. Method: book/en/storage/index.md ("Data loading", "Data loader benchmark").

One process (the DataLoader starts its own worker processes)::

    python dataloader_bench.py --workers 0,1,2,4,8 --sample-ms 5 --batch-size 64 --json dl.json
    srun --ntasks 1 --cpus-per-task 16 python dataloader_bench.py --workers 0,4,8,16 --device cuda

Example output (a loaded 2-core VM, no GPU; results/storage/dataloader_bench-cpu.json)::

    workers   pin nonblk  samples/s      MBps     ideal first(s) wait(ms)
          0 False  False       80.1      12.1     500.0     0.29   399.45
          2 False  False      136.3      20.5    1000.0     0.77   234.64
          4 False  False      226.8      34.1    1000.0     1.23   141.01
    # recommended: num_workers=4, pin_memory=False, non_blocking=False (226.8 samples/s, within 5% of the best 226.8)

Exit status: 0 ok, 1 failure (a batch later than --timeout, a worker that died: the settings
measured before are still written), 2 usage (checked before any measurement), 130/143
interrupted by Ctrl-C/SIGTERM (the settings measured so far are still written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import signal
import sys
import tempfile
import threading
import time
import traceback

PROG = "dataloader_bench.py"

# Each worker is a process holding a copy of the dataset object: more than this is a typo.
MAX_WORKERS = 1024
# One synthetic sample is allocated per item; above this a typo in --sample-shape eats the node.
MAX_SAMPLE_BYTES = 2**30
# A batch is held by the main process plus up to 2 prefetched per worker: beyond this, memory.
MAX_BATCH_BYTES = 2**32
# Samples drawn per setting: beyond this a typo in --batches/--batch-size runs for days.
MAX_SAMPLES_PER_SETTING = 10_000_000


# ----------------------------------------------------------------------------------------------
# The method: a dataset with a known cost per sample, one timed setting, the sweep
# ----------------------------------------------------------------------------------------------

class SyntheticDataset:
    """Map-style dataset of ``length`` uint8 tensors of ``shape``, each costing ``cost_s`` seconds.

    ``kind`` 'cpu' busy-waits for the cost, 'sleep' sleeps. Item i is filled with i % 251, so a
    batch can be checked for order and content.
    """

    def __init__(self, length: int, shape: list[int], cost_s: float, kind: str):
        self.length, self.shape, self.cost_s, self.kind = length, shape, cost_s, kind

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        import torch
        start = time.perf_counter()
        sample = torch.full(self.shape, index % 251, dtype=torch.uint8)
        if self.kind == "sleep":
            time.sleep(max(0.0, self.cost_s - (time.perf_counter() - start)))
        else:
            while time.perf_counter() - start < self.cost_s:
                pass
        return sample


def measure(torch, dataset, device, workers: int, pin: bool, non_blocking: bool, args) -> dict:
    """Time one DataLoader setting. Returns samples_per_s, MBps (decimal), first_batch_s and
    wait_ms_per_batch. Raises RuntimeError if a batch is wrong (order or content)."""
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=args.batch_size, shuffle=False, num_workers=workers,
        pin_memory=pin, timeout=args.timeout if workers > 0 else 0,
        persistent_workers=False, prefetch_factor=2 if workers > 0 else None)
    sample_bytes = 1
    for size in dataset.shape:
        sample_bytes *= size
    t0 = time.perf_counter()
    it = iter(loader)
    waited = 0.0
    timed_start = None
    first_batch_s = None
    for step in range(args.warmup + args.batches):
        t_wait = time.perf_counter()
        # With workers the DataLoader enforces `timeout` itself; without, nothing does.
        with deadline(args.timeout, f"batch {step} with --workers 0 (--timeout)") \
                if workers == 0 else contextlib.nullcontext():
            batch = next(it)
        now = time.perf_counter()
        if first_batch_s is None:
            first_batch_s = now - t0
        if step == args.warmup:
            timed_start = t_wait
        if step >= args.warmup:
            waited += now - t_wait
        batch = batch.to(device, non_blocking=non_blocking)
        expect = (step * args.batch_size) % 251
        if int(batch[0].flatten()[0]) != expect:
            raise RuntimeError(f"batch {step} starts with {int(batch[0].flatten()[0])}, "
                               f"expected {expect}")
        if args.step_ms > 0:
            if device.type == "cuda":
                torch.cuda._sleep(int(args.step_ms * 1e-3 * 1.4e9))  # ~cycles at ~1.4 GHz
            else:
                time.sleep(args.step_ms / 1000)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - timed_start
    del it
    n = args.batches * args.batch_size
    return {"samples_per_s": n / elapsed, "MBps": n * sample_bytes / elapsed / 1e6,
            "first_batch_s": first_batch_s, "wait_ms_per_batch": 1000 * waited / args.batches}


def ideal_rate(args, workers: int, cpus: int) -> float:
    """k / c samples/s: k workers (at most the cores for --cost cpu) at c seconds per sample."""
    cost = args.sample_ms / 1000
    if cost <= 0:
        return float("inf")
    par = max(1, workers) if args.cost == "sleep" else min(max(1, workers), cpus)
    return par / cost


def sweep(torch, dataset, device, workers: list[int], flags: list[tuple[bool, bool]], args,
          cpus: int, rows: list[dict]) -> None:
    """Measure every setting (num_workers x (pin_memory, non_blocking)), appending and printing
    one row each."""
    for w in workers:
        for pin, nb in flags:
            res = measure(torch, dataset, device, w, pin, nb, args)
            ideal = ideal_rate(args, w, cpus)
            row = {"num_workers": w, "pin_memory": pin, "non_blocking": nb, **res,
                   "ideal_samples_per_s": ideal}
            rows.append(row)
            print(f"{w:>7} {str(pin):>5} {str(nb):>6} {res['samples_per_s']:>10.1f} "
                  f"{res['MBps']:>9.1f} {ideal:>9.1f} {res['first_batch_s']:>8.2f} "
                  f"{res['wait_ms_per_batch']:>8.2f}", flush=True)


def recommend(rows: list[dict]) -> dict:
    """Cheapest setting within 5% of the best samples/s: fewest workers, then no pinning,
    then blocking copies. ``rows`` are the results list; returns one of its rows."""
    best = max(r["samples_per_s"] for r in rows)
    good = [r for r in rows if r["samples_per_s"] >= 0.95 * best]
    return min(good, key=lambda r: (r["num_workers"], r["pin_memory"], r["non_blocking"]))


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _env_prefix() -> list[str]:
    """``OMP_NUM_THREADS=N`` if it was set: it changes the main process's speed."""
    n = os.environ.get("OMP_NUM_THREADS")
    return [f"OMP_NUM_THREADS={n}"] if n else []


def print_header(torch, args, name: str, cpus: int, shape: list[int], sample_bytes: int,
                 device) -> None:
    print(f"# {PROG}: torch {torch.__version__}, device {name}, {cpus} CPU cores")
    print(f"# sample {'x'.join(map(str, shape))} uint8 ({sample_bytes / 1e6:.3f} MB), "
          f"{args.sample_ms:g} ms/sample ({args.cost}), batch {args.batch_size}, "
          f"{args.batches} timed batches, step {args.step_ms:g} ms")
    print("# samples/s and MBps (1e6 bytes/s) over the timed batches; first = s to first batch; "
          "wait = ms per batch spent waiting for data")
    if device.type == "cpu":
        print("# no CUDA: pin_memory and non_blocking are not measured (they only affect copies "
              "to a GPU)")
    print(f"{'workers':>7} {'pin':>5} {'nonblk':>6} {'samples/s':>10} {'MBps':>9} "
          f"{'ideal':>9} {'first(s)':>8} {'wait(ms)':>8}")


def json_report(torch, args, name: str, cpus: int, shape: list[int], sample_bytes: int,
                rows: list[dict], rec: dict, interrupted: bool, failure: str | None) -> dict:
    """The --json document (keys: tools/schemas/dataloader_bench.schema.json)."""
    return {
        **envelope("dataloader_bench", name, {"torch": torch.__version__},
                   " ".join([*_env_prefix(), command_line()])),
        "cpu_count": cpus,
        "sample_shape": shape, "sample_bytes": sample_bytes, "sample_ms": args.sample_ms,
        "cost": args.cost, "batch_size": args.batch_size, "batches": args.batches,
        "warmup": args.warmup, "step_ms": args.step_ms, "torch_version": torch.__version__,
        "hostname": platform.node(), "units": {"MBps": "1e6 bytes/s"},
        "results": [{k: (float(f"{v:.6g}") if isinstance(v, float) and v != float("inf")
                         else (None if v == float("inf") else v)) for k, v in r.items()}
                    for r in rows],
        "recommended": {k: rec[k] for k in ("num_workers", "pin_memory", "non_blocking")},
        "interrupted": interrupted,
        **({"failed": failure} if failure else {}),
    }


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def _csv_ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    if not values or min(values) < 0 or max(values) > MAX_WORKERS or len(values) > 64:
        raise argparse.ArgumentTypeError(
            f"need a list of at most 64 integers from 0 to {MAX_WORKERS}, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Measure DataLoader throughput "
                                "(samples/s, decimal MBps) against num_workers, pin_memory and "
                                "non_blocking on a synthetic dataset.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--workers", type=_csv_ints, default=None,
                   help="num_workers values to try (default 0,1,2,4,... up to 2x the cores)")
    p.add_argument("--sample-ms", type=number(float, 0), default=2.0,
                   help="milliseconds of work per sample (default 2)")
    p.add_argument("--cost", choices=("cpu", "sleep"), default="cpu",
                   help="cpu: busy-wait (decode/augment); sleep: wait (remote storage)")
    p.add_argument("--sample-shape", default="3,224,224",
                   help="shape of one uint8 sample (default 3,224,224)")
    p.add_argument("--batch-size", type=number(int, 1, 1_000_000), default=32)
    p.add_argument("--batches", type=number(int, 1, 1_000_000), default=30,
                   help="timed batches (default 30)")
    p.add_argument("--warmup", type=number(int, 0, 1_000_000), default=3,
                   help="untimed batches first (default 3)")
    p.add_argument("--step-ms", type=number(float, 0), default=0.0,
                   help="simulated training step per batch in ms (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--timeout", type=number(float, 0, 7 * 86400, lo_open=True), default=120.0,
                   help="seconds to wait for one batch before failing, also with --workers 0 "
                        "(default 120)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON")
    return p


def check_args(args) -> list[int]:
    """Validate ``args``; returns the sample shape. Raises ValueError with a one-line message."""
    try:
        shape = [int(v) for v in args.sample_shape.split(",")]
    except ValueError:
        raise ValueError(f"--sample-shape must be comma-separated integers, got "
                         f"{args.sample_shape!r}") from None
    if not shape or min(shape) < 1:
        raise ValueError(f"--sample-shape needs positive sizes, got {args.sample_shape!r}")
    if math.prod(shape) > MAX_SAMPLE_BYTES:
        raise ValueError(f"--sample-shape {args.sample_shape} is {math.prod(shape)} bytes per "
                         f"sample; at most {MAX_SAMPLE_BYTES} (1 GiB)")
    batch_bytes = math.prod(shape) * args.batch_size
    if batch_bytes > MAX_BATCH_BYTES:
        raise ValueError(f"--batch-size {args.batch_size} x --sample-shape {args.sample_shape} is "
                         f"{batch_bytes} bytes per batch; at most {MAX_BATCH_BYTES} (4 GiB: the "
                         "main process and every worker hold batches in memory)")
    samples = (args.warmup + args.batches) * args.batch_size
    if samples > MAX_SAMPLES_PER_SETTING:
        raise ValueError(f"(--warmup + --batches) x --batch-size = {samples} samples per setting; "
                         f"at most {MAX_SAMPLES_PER_SETTING} (a measurement needs far fewer)")
    if args.json:
        check_output(args.json, "--json")
    return shape


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        shape = check_args(args)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    import warnings

    import torch

    # Trying more workers than cores is the point of the sweep: silence torch's warning about it.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        raise ScriptError("--device cuda but CUDA is not available", EXIT_USAGE)
    device = torch.device("cuda" if (args.device == "cuda" or (args.device == "auto" and cuda))
                          else "cpu")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = args.workers
    if workers is None:
        workers = sorted({0, 1, 2} | {2 ** i for i in range(1, 8) if 2 ** i <= 2 * cpus})
    flags = [(False, False), (True, False), (True, True)] if device.type == "cuda" \
        else [(False, False)]
    length = (args.warmup + args.batches) * args.batch_size
    dataset = SyntheticDataset(length, shape, args.sample_ms / 1000, args.cost)
    sample_bytes = math.prod(shape)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print_header(torch, args, name, cpus, shape, sample_bytes, device)
    rows = []
    stopped = failure = None  # a setting that failed after others were measured: keep theirs
    on_stop_signals()  # Ctrl-C, scancel, a job's time limit: keep the finished rows
    try:
        sweep(torch, dataset, device, workers, flags, args, cpus, rows)
    except (RuntimeError, OSError) as err:  # a DataLoader timeout, a worker that died, a wrong batch
        msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "timed out" in msg:
            msg += f" waiting for a batch from the workers (--timeout {args.timeout:g})"
        if not rows:
            raise ScriptError(msg) from err
        failure = msg
        print(f"# stopped: {msg}")
    except Interrupted as stop:
        stopped = stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not lose the rows
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"# interrupted: {len(rows)} of {len(workers) * len(flags)} settings measured")
        if not rows:
            raise ScriptError(f"interrupted by {stop.name} before the first setting was "
                              "measured; nothing written", stop.status) from None
    rec = recommend(rows)
    print(f"# recommended: num_workers={rec['num_workers']}, pin_memory={rec['pin_memory']}, "
          f"non_blocking={rec['non_blocking']} ({rec['samples_per_s']:.1f} samples/s, within 5% "
          f"of the best {max(r['samples_per_s'] for r in rows):.1f})")
    if args.json:
        summary = json_report(torch, args, name, cpus, shape, sample_bytes, rows, rec,
                              bool(stopped), failure)
        write_atomic(args.json, json.dumps(summary, indent=2) + "\n")
    if failure:
        kept = f"; wrote the {len(rows)} settings measured before it to {args.json}" if args.json else ""
        raise ScriptError(f"{failure}{kept}")
    if stopped:
        kept = f"; wrote them to {args.json}" if args.json else ""
        raise ScriptError(f"interrupted by {stopped.name} after {len(rows)} of "
                          f"{len(workers) * len(flags)} settings{kept}", stopped.status)
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
