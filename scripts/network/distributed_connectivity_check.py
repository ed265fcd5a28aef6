#!/usr/bin/env python
"""distributed_connectivity_check.py: are all my GPUs and nodes talking to each other?

Every rank prints one line about itself (host, ranks, device, torch, CUDA and NCCL versions)
before joining, so a rank that never joins is still visible in the log. Then the ranks join the
group (at most ``--timeout-s`` seconds), exchange those lines, all-reduce (SUM) a float32 matrix
in which rank r writes r+1 into row r, check every row exactly, and pass a barrier; rank 0 prints
``OK: N ranks on M hosts``. A wrong row names the rank whose data went wrong and where it
arrived. nccl with CUDA (GPU LOCAL_RANK), gloo on CPU. More, and the SLURM launch lines:
book/en/network/index.md ("Check connectivity and versions on every rank").

    torchrun --standalone --nproc-per-node 8 distributed_connectivity_check.py
    srun --nodes 2 --ntasks-per-node 8 python distributed_connectivity_check.py   # MASTER_ADDR/PORT exported

Example output (2 CPU processes on a 2-core VM; the per-rank lines may come in either order)::

    rank=1 local_rank=1 world_size=2 host=vm device=cpu backend=gloo torch=2.13.0+cpu cuda=none nccl=none
    rank=0 local_rank=0 world_size=2 host=vm device=cpu backend=gloo torch=2.13.0+cpu cuda=none nccl=none
    # host vm: 2 rank(s): 0-1
    OK: 2 ranks on 1 hosts

Exit status: 0 ok, 1 failure (a timeout, an unreachable peer: one line naming the rank and
host), 2 usage (checked before anything starts), 3 finding (a wrong all-reduce result), 130/143
interrupted by Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import re
import shlex
import sys
import tempfile
import threading
import time
import traceback

PROG = "distributed_connectivity_check.py"

_SIZE_RE = re.compile(r"(\d+)([KMGT]?)(I?B)?")
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}



# ----------------------------------------------------------------------------------------------
# Device and process group (the launch: Launch, in the block at the end)
# ----------------------------------------------------------------------------------------------

def check_fits(torch, device, nbytes: int) -> None:
    """ScriptError (status 2) if the ``--size`` buffer cannot fit in ``device``'s memory (the
    GPU's, or the host's RAM for cpu); checked before joining the group."""
    if device.type == "cuda":
        have, where = torch.cuda.get_device_properties(device).total_memory, "device"
    else:
        try:
            have, where = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "host"
        except (ValueError, OSError):  # not reported by this OS: let the allocator decide
            return
    if nbytes > have:
        raise ScriptError(f"--size: {nbytes} bytes do not fit in this machine's "
                          f"{have / 2**30:.1f} GiB of {where} memory", EXIT_USAGE)


def _selftest_rank(name: str) -> int | None:
    value = env_int(name, -1)
    return value if value >= 0 else None


def open_device(torch, dist, args: argparse.Namespace, launch: Launch) -> tuple[str, object, str, dict]:
    """(backend, device, its description, init_process_group keyword arguments): nccl and GPU
    number LOCAL_RANK when CUDA and NCCL are there (or asked for), else gloo and the CPU."""
    cuda_ok = torch.cuda.is_available()
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if cuda_ok and dist.is_nccl_available() else "gloo"
    if backend == "nccl" and not (cuda_ok and dist.is_nccl_available()):
        die("--backend nccl needs CUDA and a PyTorch build with NCCL; use --backend gloo")
    if backend == "nccl":
        if launch.local_rank >= torch.cuda.device_count():
            die(f"{launch.me()}: LOCAL_RANK {launch.local_rank} but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible")
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
        device_text = f"cuda:{launch.local_rank} ({torch.cuda.get_device_name(device)})"
        return backend, device, device_text, {"device_id": device}
    return backend, torch.device("cpu"), "cpu", {}


def rank_info(torch, dist, launch: Launch, backend: str, device_text: str) -> dict:
    """What this rank says about itself: where it runs and with which versions."""
    nccl_version = "none"
    if torch.cuda.is_available() and dist.is_nccl_available():
        nccl_version = ".".join(str(v) for v in torch.cuda.nccl.version())
    return {"rank": launch.rank, "local_rank": launch.local_rank, "world_size": launch.world,
            "host": launch.host, "device": device_text, "backend": backend,
            "torch": torch.__version__, "cuda": torch.version.cuda or "none",
            "nccl": nccl_version, "pid": os.getpid()}


def selftest_hooks(rank: int) -> None:
    """The test suite's hooks (see --help): this rank exits or stalls before joining."""
    if _selftest_rank("CONNECTIVITY_CHECK_EXIT_RANK") == rank:
        os._exit(3)
    if _selftest_rank("CONNECTIVITY_CHECK_STALL_RANK") == rank:
        while True:
            time.sleep(3600)


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


# ----------------------------------------------------------------------------------------------
# The check: one all-reduce of a matrix with a known sum
# ----------------------------------------------------------------------------------------------

def check_rows(result, world_size: int, hosts: list[str]) -> str | None:
    """Verify the all-reduced matrix.

    ``result``: tensor of shape (world_size, k); row r must equal r + 1 everywhere (rank r
    contributed r + 1 to its row and 0 elsewhere). Returns None when correct, else a one-line
    description of the first wrong row (naming the rank that row belongs to and its host) and
    how many rows are wrong.
    """
    import torch

    expected = torch.arange(1, world_size + 1, dtype=result.dtype,
                            device=result.device).unsqueeze(1)
    wrong = result != expected  # (world_size, k), broadcast over columns
    bad_rows = wrong.any(dim=1).nonzero().flatten().tolist()
    if not bad_rows:
        return None
    r = bad_rows[0]
    col = int(wrong[r].nonzero()[0, 0])
    got = result[r, col].item()
    got_text = str(int(got)) if float(got).is_integer() else repr(got)
    return (f"wrong all-reduce result: row of rank {r} (on {hosts[r]}) expected {r + 1} got "
            f"{got_text} at column {col}; {len(bad_rows)} of {world_size} rows wrong")


def all_reduce_rows(torch, dist, args: argparse.Namespace, rank: int, world: int, device,
                    hosts: list[str]) -> tuple[str | None, int]:
    """All-reduce a (world, cols) float32 matrix to which rank r adds r + 1 in row r; returns
    what this rank found wrong in the result (None: nothing) and cols."""
    cols = max(1, args.size // 4 // world)
    buf = torch.zeros(world, cols, dtype=torch.float32, device=device)
    buf[rank].fill_(rank + 1)
    dist.all_reduce(buf)
    if _selftest_rank("CONNECTIVITY_CHECK_CORRUPT_RANK") == rank:
        buf[0, -1] += 1  # self-test hook: simulate a damaged value arriving at this rank
    return check_rows(buf, world, hosts), cols


def run(args: argparse.Namespace, launch: Launch, stage: list[str]) -> int:
    """Do the check. Returns the exit status (0 OK, 1 failed check); ``stage[0]`` says what is
    going on, for error messages. Backend errors and timeouts propagate as exceptions."""
    import torch
    import torch.distributed as dist

    rank, world = launch.rank, launch.world
    backend, device, device_text, init_kwargs = open_device(torch, dist, args, launch)
    check_fits(torch, device, max(args.size, 4 * world))
    info = rank_info(torch, dist, launch, backend, device_text)
    # Every rank prints, before joining: the lines show which ranks started and where. One write,
    # newline included: print() writes the newline apart, and two ranks' lines could run together.
    sys.stdout.write(rank_info_line(info) + "\n")
    sys.stdout.flush()
    selftest_hooks(rank)

    stage[0] = f"waiting for peers in init_process_group (timeout {args.timeout_s:g} s)"
    join_group(dist, args, launch, backend, init_kwargs)

    stage[0] = "all_gather_object of rank info"
    infos: list[dict | None] = [None] * world
    dist.all_gather_object(infos, info)
    hosts = [i["host"] for i in infos]

    stage[0] = "all_reduce"
    problem, cols = all_reduce_rows(torch, dist, args, rank, world, device, hosts)

    stage[0] = "all_gather_object of check results"
    problems: list[str | None] = [None] * world
    dist.all_gather_object(problems, problem)
    errors = [{"rank": r, "host": hosts[r], "error": p} for r, p in enumerate(problems) if p]

    stage[0] = "barrier"
    dist.barrier()

    if rank == 0:
        report(args, infos, errors, backend, torch.__version__, world * cols * 4)
    if problem:
        die(f"rank {rank} on {launch.host}: {problem}")
    if errors:
        if rank == 0:
            bad = ", ".join(f"rank {e['rank']} on {e['host']}" for e in errors)
            die(f"FAILED: {len(errors)} of {world} ranks saw a wrong all-reduce result: {bad}",
                EXIT_FINDING)
        return 1
    stage[0] = "destroy_process_group"
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def rank_info_line(info: dict) -> str:
    """One ``key=value`` line per rank; values with spaces are shell-quoted (shlex.split parses
    it back)."""
    keys = ("rank", "local_rank", "world_size", "host", "device", "backend", "torch", "cuda",
            "nccl")
    return " ".join(f"{k}={shlex.quote(str(info[k]))}" for k in keys)


def _ranges(ranks: list[int]) -> str:
    """Compact text for sorted ranks: [0, 1, 2, 5] -> '0-2,5'."""
    parts = []
    start = prev = ranks[0]
    for cur in ranks[1:] + [None]:
        if cur is not None and cur == prev + 1:
            prev = cur
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = cur
    return ",".join(parts)


def report(args: argparse.Namespace, infos: list[dict], errors: list[dict], backend: str,
           torch_version: str, all_reduce_bytes: int) -> None:
    """Rank 0: the ranks of each host, the --json summary, and OK when no rank saw an error."""
    world = len(infos)
    by_host: dict[str, list[int]] = {}
    for r, info in enumerate(infos):
        by_host.setdefault(info["host"], []).append(r)
    for h, ranks in by_host.items():
        print(f"# host {h}: {len(ranks)} rank(s): {_ranges(ranks)}")
    if args.json:
        summary = {
            "check": "distributed_connectivity",
            "schema_version": 1,
            "ok": not errors,
            "world_size": world,
            "nhosts": len(by_host),
            "hosts": by_host,
            "backend": backend,
            "torch_version": torch_version,
            "all_reduce_bytes": all_reduce_bytes,
            "date_utc": date_utc(),
            "ranks": infos,
            "errors": errors,
        }
        write_atomic(args.json, json.dumps(summary, indent=2) + "\n")
        print(f"# wrote {args.json}")
    if not errors:
        print(f"OK: {world} ranks on {len(by_host)} hosts", flush=True)


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """Parse a byte count such as ``4096``, ``64K`` or ``1M`` (binary suffixes K, M, G, T; K=1024).

    Returns bytes (int). Raises argparse.ArgumentTypeError on anything else.
    """
    m = _SIZE_RE.fullmatch(text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(
            f"invalid size {text!r}: use an integer number of bytes with an optional binary "
            f"suffix K, M, G or T (K = 1024)")
    return int(m.group(1)) * _SUFFIX[m.group(2)]


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Check that all ranks of a distributed job can talk: every rank prints where it runs, "
            "then the ranks join the group, all-reduce a tensor, verify the result and pass a "
            "barrier; rank 0 prints 'OK: N ranks on M hosts'. A wrong result exits 3, any other "
            "failure 1, with a message naming the rank and host. Launch with torchrun (or srun)."),
        epilog=(
            "Self-test of the failure paths: the environment variable "
            "CONNECTIVITY_CHECK_CORRUPT_RANK=R makes rank R corrupt its all-reduce result; "
            "CONNECTIVITY_CHECK_EXIT_RANK=R / CONNECTIVITY_CHECK_STALL_RANK=R make rank R exit / "
            "hang before joining; each must make the run fail (within --timeout-s)."),
    )
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl if CUDA is available, else gloo (CPU tensors). Default auto")
    p.add_argument("--timeout-s", type=number(float, 0, lo_open=True), default=60.0,
                   help="seconds to wait for peers (joining and each collective) before failing, "
                        "> 0 (default 60)")
    p.add_argument("--size", type=parse_size, default=1024**2, metavar="SIZE",
                   help="bytes of the all-reduced float32 matrix (default 1M; suffixes K=1024, "
                        "M, G); at least 4 bytes per rank are used")
    p.add_argument("--json", metavar="PATH", default=None, type=nonempty,
                   help="write a summary (ok, hosts, per-rank info, errors) to PATH (rank 0)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate arguments; a problem exits via parser.error (status 2, one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.size < 4:
        parser.error(f"--size must be at least 4 bytes (one float32) (got {args.size})")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse arguments (before importing torch, so --help is instant), run the
    check, and turn any failure into a one-line message naming this rank and host (exit 1)."""
    args = parse_args(argv)
    launch = Launch()
    if launch.rank == 0 and args.json:
        check_output(args.json, "--json")
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    on_stop_signals()  # Ctrl-C (even in a background job) and scancel stop the check
    stage = ["starting"]
    try:
        status = run(args, launch, stage)
    except Interrupted as stop:
        die(f"{launch.me()}: interrupted during {stage[0]}", stop.status)
    except ScriptError:  # a usage error found before joining the group (run_main prints it)
        raise
    except Exception as exc:  # noqa: BLE001 - every failure must end the job, not hang it
        die(f"{launch.me()}: {stage[0]} failed: {type(exc).__name__}: {exc}")
    if status:
        # Another rank reported the problem (rank 0 names it); leave quietly, without waiting
        # for process-group teardown.
        die(None, status)
    return EXIT_OK


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
