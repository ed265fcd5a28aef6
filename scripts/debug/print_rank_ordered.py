#!/usr/bin/env python
"""print_rank_ordered.py: print from many ranks without interleaved lines, optionally in rank order.

Every rank of a job writes to the same terminal or log, and two ranks printing multi-line messages
at once mix their lines. Two helpers fix it. ``print_locked(*args)`` (any rank, any time, no
collective) holds an exclusive ``fcntl.flock`` on ``--lock-file`` (default: this script's own
path) while it writes, so each message comes out whole. ``print_rank_ordered(text)`` is a
collective that every rank must call: rank 0 gathers the texts and prints them in rank order. The
demo prints a multi-line message from every rank with plain ``print``, ``print_locked`` and
``print_rank_ordered``.

How to launch (library use: copy the two functions, or import them from this file)::

    torchrun --standalone --nproc-per-node 4 print_rank_ordered.py
    torchrun --standalone --nproc-per-node 4 print_rank_ordered.py --lines 3 --only ordered

Example output (2 ranks, 2-core cloud VM, torch 2.13.0+cpu, gloo)::

    $ torchrun --standalone --nproc-per-node 2 scripts/debug/print_rank_ordered.py --only ordered --lines 2
    [rank 0]
      rank 0 of 2 on vm: line 1 of 2
      rank 0 of 2 on vm: line 2 of 2
    [rank 1]
      rank 1 of 2 on vm: line 1 of 2
      rank 1 of 2 on vm: line 2 of 2

Exit status: 0 done, 1 a rank cannot reach MASTER_ADDR:MASTER_PORT or a collective failed,
2 usage (an option, the --lock-file, a launcher variable), 130/143 interrupted.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import threading
import traceback

PROG = "print_rank_ordered.py"


def print_locked(*args, lock_file: str = __file__, **kwargs) -> None:
    """``print(*args, **kwargs)`` under an exclusive ``fcntl.flock`` on ``lock_file``, then flush.

    Processes that use the same ``lock_file`` never interleave their messages. The file must be
    readable by every process (it is opened read-only and never modified). Raises OSError if it
    cannot be opened.
    """
    import fcntl
    with open(lock_file) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            print(*args, **kwargs, flush=True)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def print_rank_ordered(text: str, file=None) -> None:
    """Collective: rank 0 prints every rank's ``text`` in rank order under ``[rank R]`` headers.

    Every rank of the default process group must call it (it uses ``gather_object``); without an
    initialised process group it just prints ``text``. Returns nothing; non-zero ranks print nothing.
    """
    import torch.distributed as dist
    file = file or sys.stdout
    if not (dist.is_available() and dist.is_initialized()):
        print(text, file=file, flush=True)
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    texts = [None] * world if rank == 0 else None
    dist.gather_object(text, texts, dst=0)
    if rank == 0:
        for r, t in enumerate(texts):
            print(f"[rank {r}]\n{t}", file=file, flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Print a multi-line message from every "
                                "rank: plainly, under a file lock, and gathered in rank order.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--lines", type=number(int, 1, 100_000), default=4, help="lines per message (default 4)")
    p.add_argument("--only", choices=("plain", "locked", "ordered"),
                   help="run only one of the three demos")
    p.add_argument("--lock-file", type=nonempty, default=__file__,
                   help="file to flock for print_locked (default: this script)")
    p.add_argument("--timeout-s", type=number(float, 0, lo_open=True), default=60.0,
                   help="process-group timeout in seconds (default 60)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not os.path.isfile(args.lock_file) or not os.access(args.lock_file, os.R_OK):
        raise ScriptError(f"--lock-file: cannot read lock file {args.lock_file!r}", EXIT_USAGE)
    launch = Launch()
    rank, world, master = launch.rank, launch.world, launch.master
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch.distributed as dist

    if world > 1:
        # The store retries past the timeout: one deadline, naming the address, bounds it.
        with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: rendezvous with "
                                                f"MASTER_ADDR:MASTER_PORT {master}"):
            try:
                dist.init_process_group("gloo", rank=rank, world_size=world,
                                        timeout=datetime.timedelta(seconds=args.timeout_s))
            except RuntimeError as exc:
                raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT "
                                  f"{master} failed: "
                                  f"{(str(exc).strip().splitlines() or [''])[0]}") from None
    host = launch.host
    message = "\n".join(f"  rank {rank} of {world} on {host}: line {i + 1} of {args.lines}"
                        for i in range(args.lines))
    if args.only in (None, "plain"):
        for line in message.splitlines():      # one write per line: other ranks can cut in
            print(line, flush=True)
    if args.only in (None, "locked"):
        if world > 1:
            dist.barrier()
        print_locked(f"[rank {rank}, locked]\n{message}", lock_file=args.lock_file)
    if args.only in (None, "ordered"):
        if world > 1:
            dist.barrier()
        print_rank_ordered(message)
    if world > 1:
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
