#!/usr/bin/env python
"""hanging_collective.py: a distributed job that hangs on purpose, and ends with a message naming the stuck collective.

Every rank must call the same collectives in the same order; ``--mode`` breaks the rule:
``mismatch`` (default: rank 0 calls all_reduce, the others broadcast), ``missing`` (the last rank
skips the collective), ``shape`` (the last rank all_reduces 5 elements, the others 4) or ``ok``
(the control case). Each rank prints ``rank R pid P: entering <collective>`` (attach ``py-spy
dump --pid P`` while it hangs), and the process group's timeout (``--timeout-s``, seconds)
becomes one line naming the collective; as a backstop, faulthandler prints every stack and exits
after ``--timeout-s`` + ``--dump-margin-s``. ``--fr-dump DIR`` writes each rank's flight recorder
to ``DIR/rank_<R>.json`` when a collective fails; ``--fr-report DIR`` (no launcher) names the
first collective where the ranks differ, with the line of code on each side.

How to launch (CPU/gloo; ``--backend nccl`` on GPUs; with plain srun, export MASTER_ADDR/PORT)::

    torchrun --standalone --nproc-per-node 2 hanging_collective.py --timeout-s 10
    torchrun --standalone --nproc-per-node 2 hanging_collective.py --timeout-s 5 --fr-dump fr
    python hanging_collective.py --fr-report fr

Example output (2-core cloud VM, torch 2.13.0+cpu, gloo; torchrun's own lines trimmed)::

    $ torchrun --standalone --nproc-per-node 2 scripts/debug/hanging_collective.py --timeout-s 5
    rank 0 pid 5428: entering all_reduce #2 (shape [4], float32)
    rank 1 pid 5429: entering broadcast #2 (shape [4], float32)
    hanging_collective.py: error: rank 0 (pid 5428): all_reduce #2 (shape [4], float32) did not complete within 5 s: the other ranks are not in the same collective

Exit status: 0 ok, 1 a collective or the rendezvous failed, 2 usage, 3 --fr-report found a
difference, 130/143 interrupted.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import datetime
import faulthandler
import json
import math
import os
import pickle
import re
import sys
import tempfile
import threading
import time
import traceback

PROG = "hanging_collective.py"


FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\("
                         r"SequenceNumber=\d+, OpType=(\w+), TensorShape=\[([^\]]*)\]")


def describe_failure(message: str) -> str:
    """One line for a failed collective's RuntimeError. The report of TORCH_DISTRIBUTED_DEBUG=DETAIL
    (two CollectiveFingerPrint reprs of several hundred characters each, then "Collectives differ
    in the following aspects: ...") becomes "rank 0 runs ALLREDUCE [4], rank 1 runs BROADCAST [4]
    (Op type: ALLREDUCE vs BROADCAST)"; any other message keeps its first line (200 characters)."""
    sides = FINGERPRINT.findall(message)
    if "Detected mismatch between collectives" in message and len(sides) >= 2:
        aspects = message.partition("differ in the following aspects:")[2]
        aspects = re.sub(r"(\S)vs ", r"\1 vs ", " ".join(aspects.split()))  # "4vs 5"
        ranks = ", ".join(f"rank {r} runs {op} [{shape}]" for r, op, shape in sides[:2])
        return (f"TORCH_DISTRIBUTED_DEBUG=DETAIL found a mismatch: {ranks}"
                + (f" ({aspects})" if aspects else ""))
    return (message.strip().splitlines() or [""])[0][:200]


class Collectives:
    """Counts the collectives this rank calls and names the one that times out.

    ``with coll.watch("all_reduce", tensor): dist.all_reduce(tensor)`` re-raises a timeout (or any
    other error the backend raises) as a ScriptError naming the collective, its call number on
    this rank, the tensor and how long it waited (seconds): one line on stderr and status 1.
    """

    def __init__(self, rank: int, timeout_s: float, fr_dump: str | None = None):
        self.rank, self.timeout_s, self.count, self.fr_dump = rank, timeout_s, 0, fr_dump

    @contextlib.contextmanager
    def watch(self, name: str, tensor=None):
        self.count += 1
        what = f"{name} #{self.count}"
        if tensor is not None:
            what += f" (shape {list(tensor.shape)}, {str(tensor.dtype).replace('torch.', '')})"
        say(f"rank {self.rank} pid {os.getpid()}: entering {what}")
        start = time.monotonic()
        try:
            yield
        except RuntimeError as exc:
            waited = time.monotonic() - start
            reason = ("did not complete within "
                      f"{self.timeout_s:g} s: the other ranks are not in the same collective"
                      if "timed out" in str(exc).lower() or "timeout" in str(exc).lower()
                      else f"failed after {waited:.1f} s: {describe_failure(str(exc))}")
            if self.fr_dump:
                path = dump_flight_recorder(self.fr_dump, self.rank)
                say(f"rank {self.rank}: flight recorder written to {path}", sys.stderr)
            raise ScriptError(f"rank {self.rank} (pid {os.getpid()}): {what} {reason}") from exc
        say(f"rank {self.rank}: {name} #{self.count} done")


def dump_flight_recorder(folder: str, rank: int) -> str:
    """Write this rank's flight-recorder buffer to ``folder/rank_<rank>.json`` (atomically) and
    return the path. torch returns the buffer pickled (``_dump_fr_trace``); it is loaded here,
    in the process that produced it, and saved as JSON so that reading a dump never unpickles a
    file. Keys as torch writes them: ``pg_config`` (group name -> ranks), ``entries`` (one per
    collective: ``collective_seq_id``, ``profiling_name`` such as ``gloo:all_reduce``,
    ``input_sizes``, ``frames`` innermost first)."""
    import torch
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    path = os.path.join(folder, f"rank_{rank}.json")
    write_atomic(path, json.dumps(trace, indent=1, default=str))
    return path


def load_flight_recorder(folder: str) -> dict[int, dict]:
    """rank -> dump for every ``rank_<R>.json`` in ``folder``. Raises ScriptError (usage) when
    the folder has none, and (failure) naming the file that is not a dump."""
    if not os.path.isdir(folder):
        raise ScriptError(f"--fr-report {folder}: no such folder", EXIT_USAGE)
    dumps = {}
    for name in sorted(os.listdir(folder)):
        match = re.fullmatch(r"rank_(\d+)\.json", name)
        if not match:
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
            entries = trace["entries"]
            if not isinstance(entries, list):
                raise TypeError("entries is not a list")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ScriptError(f"--fr-report {path}: not a flight-recorder dump written by "
                              f"--fr-dump ({exc})") from exc
        dumps[int(match.group(1))] = trace
    if not dumps:
        raise ScriptError(f"--fr-report {folder}: no rank_<R>.json files; write them with "
                          "--fr-dump", EXIT_USAGE)
    return dumps


def describe_entry(entry: dict) -> tuple[str, str]:
    """("all_reduce [4]", "file.py:275"): the operation and its input sizes, and the first stack
    frame outside torch (the caller's line that issued the collective; "" when none)."""
    op = str(entry.get("profiling_name", "?")).partition(":")[2] or "?"
    what = " ".join([op, *(str(s) for s in entry.get("input_sizes") or [])])
    here = next((f for f in entry.get("frames") or []
                 if f"{os.sep}torch{os.sep}" not in str(f.get("filename", ""))), None)
    return what, f"{os.path.basename(str(here['filename']))}:{here['line']}" if here else ""


def first_disagreement(dumps: dict[int, dict]) -> tuple[list[str], str | None]:
    """Line the ranks' collectives up by sequence number (per process group) and return (the
    table's lines, the first disagreement or None). Ranks disagree at a number when they ran
    different operations or sizes there, or when a rank that dumped has no entry with that number
    (it never got there: look at what it did instead). Ranks of the group that left no dump are
    named on the first line, and are the finding when the dumps agree."""
    group_ranks = set(dumps)
    for trace in dumps.values():
        for config in (trace.get("pg_config") or {}).values():
            try:
                group_ranks |= set(json.loads(str(config.get("ranks", "[]"))))
            except (ValueError, AttributeError):
                pass
    by_seq: dict[tuple[str, int], dict[int, dict]] = {}
    for rank, trace in dumps.items():
        for entry in trace["entries"]:
            if entry.get("is_p2p"):
                continue
            group = str((entry.get("process_group") or ["?"])[0])
            by_seq.setdefault((group, int(entry["collective_seq_id"])), {})[rank] = entry
    silent = sorted(group_ranks - set(dumps))
    lines = [f"flight recorder dumps of ranks {', '.join(map(str, sorted(dumps)))} "
             f"({len(group_ranks)} ranks in the group"
             + (f"; no dump from rank {', '.join(map(str, silent))})" if silent else ")")]
    finding = None
    for (_group, seq), per_rank in sorted(by_seq.items(), key=lambda item: item[0][1]):
        shown = {rank: describe_entry(entry) for rank, entry in sorted(per_rank.items())}
        lines.append(f"  #{seq}  " + "   ".join(f"rank {r} {what}" + (f" at {where}" if where else "")
                                              for r, (what, where) in shown.items()))
        if finding:
            continue
        missing = sorted(set(dumps) - set(per_rank))
        if len({what for what, _ in shown.values()}) > 1 or missing:
            sides = [f"rank {r} runs {what}" + (f" ({where})" if where else "")
                     for r, (what, where) in shown.items()]
            sides += [f"rank {r} has no collective #{seq}" for r in missing]
            finding = f"collective #{seq}: " + ", ".join(sides)
    if not finding and silent:
        finding = (f"no dump from rank {', '.join(map(str, silent))}: it died, or none of its "
                   "collectives failed")
    return lines, finding


def fr_report(folder: str) -> int:
    """Print the aligned dumps of ``folder``; 3 and a finding line when ranks disagree, else 0."""
    lines, finding = first_disagreement(load_flight_recorder(folder))
    for line in lines:
        say(line)
    if finding:
        say(f"{PROG}: finding: {finding}")
        return EXIT_FINDING
    say("all ranks ran the same collectives")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="A 2+ rank job whose ranks call different collectives, so it "
        "hangs until the timeout names the stuck collective.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--mode", choices=("mismatch", "missing", "shape", "ok"), default="mismatch",
                   help="mismatch: rank 0 all_reduce, others broadcast; missing: the last rank "
                   "skips the collective; shape: the last rank all_reduces 5 elements, the others "
                   "4; ok: all ranks all_reduce (default mismatch)")
    p.add_argument("--timeout-s", type=number(float, 0, lo_open=True), default=30.0,
                   help="process-group timeout in seconds (default 30)")
    p.add_argument("--dump-margin-s", type=number(float, 0, lo_open=True), default=15.0,
                   help="seconds after the timeout at which faulthandler dumps all stacks and "
                   "exits, if the job is still alive (default 15)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl with CUDA, else gloo (default auto)")
    p.add_argument("--fr-dump", type=nonempty, metavar="DIR",
                   help="turn on PyTorch's flight recorder and, when a collective fails, write "
                   "this rank's buffer to DIR/rank_<R>.json (the folder is created)")
    p.add_argument("--fr-report", type=nonempty, metavar="DIR",
                   help="no job: read the rank_<R>.json dumps in DIR and name the first "
                   "collective where the ranks differ (exit 3 when they do)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.fr_report:
        return fr_report(args.fr_report)
    launch = Launch(min_world=2)
    rank, world, master = launch.rank, launch.world, launch.master
    if args.fr_dump:
        check_output_dir(args.fr_dump, "--fr-dump")
        # Read when the first process group is made; an explicit setting is kept.
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")

    # Backstop: if the job is still alive well after the timeout, print every thread's stack
    # and exit, whatever the backend is doing.
    faulthandler.dump_traceback_later(args.timeout_s + args.dump_margin_s, exit=True)

    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ScriptError("--backend nccl needs CUDA, and no GPU is visible", EXIT_USAGE)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
    # The store retries past the timeout: one deadline, naming the address, for the rendezvous.
    with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: rendezvous with "
                                            f"MASTER_ADDR:MASTER_PORT {master}"):
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout_s))
        except RuntimeError as exc:
            raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {master} "
                              f"failed: {(str(exc).strip().splitlines() or [''])[0]}") from exc
    coll = Collectives(rank, args.timeout_s, args.fr_dump)
    t = torch.full((4,), float(rank + 1), device=device)

    # A first collective that every rank calls: it proves the group works before the hang.
    with coll.watch("all_reduce", t):
        dist.all_reduce(t)

    if args.mode == "shape" and rank == world - 1:
        t = torch.cat([t, t[:1]])           # 5 elements where the other ranks have 4
    if args.mode in ("ok", "shape") or (args.mode == "mismatch" and rank == 0):
        with coll.watch("all_reduce", t):
            dist.all_reduce(t)
    elif args.mode == "mismatch":
        with coll.watch("broadcast", t):
            dist.broadcast(t, src=1)
    elif rank != world - 1:                 # mode "missing": the last rank skips the all_reduce
        with coll.watch("all_reduce", t):
            dist.all_reduce(t)

    with coll.watch("barrier"):
        dist.barrier()
    faulthandler.cancel_dump_traceback_later()
    if rank == 0:
        say(f"all {world} ranks finished; value {t[0].item():g}")
    dist.destroy_process_group()
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


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline to ``stream`` (stdout) in one write, and flush: the ranks of
    a job share the launcher's stdout and stderr, and print() writes the newline apart, so two
    ranks' lines could run together. A reader of stdout that left (``| head -1``) ends no rank,
    since the others would fail in their next collective without it: the rank goes on."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout or not reader_left():
            raise


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
