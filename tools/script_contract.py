"""The script contract (CONTRIBUTING.md, "Script contract"): the one source of the code every
script under scripts/ shares, and the tool that writes it into them.

A reader downloads one self-contained file, so each script carries its own copy of the code it
shares with others, generated at its end, after ``main()`` and before the
``if __name__ == "__main__":`` line, between two marker lines::

    # --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this ...
    ...
    # --- end of script contract ---

The sources (SOURCES) are importable and unit-tested (tests/test_script_contract.py and the
scripts' tests):

* this file, between ``# === contract source`` and ``# === end of contract source``: the
  contract every script keeps (errors, exit codes, argument types, outputs, bounded reads);
* tools/script_shared.py, between ``# === shared source`` and ``# === end of shared source``: code
  two or more scripts share (reading a Hugging Face config.json, a training corpus, a DCP
  checkpoint from someone else, ...), and the data rows built into scripts: an assignment
  ``NAME = data_rows("models/architectures.yml", ...)`` is written into a script as the literal
  rows of that file of data/ or results/ (see ``data_rows``), so a script copied alone needs no
  clone.

``sync`` gives each script the top-level definitions it names, plus those they name in turn, in
the order of the sources; ``--check`` lists the scripts whose block differs from what ``sync``
would write (pre-commit and the suite run it), which catches a data file changed since the last
sync as well. A script may not define a name the sources define and use it (sync refuses).

    python tools/script_contract.py sync            rewrite every script's block
    python tools/script_contract.py sync --check    exit 1 and name the scripts out of date

A script must import the modules its part of the contract uses (argparse, os, sys, ...); ruff
reports the missing ones (F821) and the ones left unused (F401).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import math
import os
import sys
import tempfile
import threading
import traceback
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Two lines: build/hooks/book_markers.py folds the block from its first line ("# --- script
# contract") to END on the site; chapters cite line numbers of the scripts' own code above it.
BEGIN = ("# --- script contract and shared code (CONTRIBUTING.md, \"Script contract\"): what this script uses, ---\n"
         "# --- generated from tools/script_contract.py and tools/script_shared.py by "
         "`python tools/script_contract.py sync`. ---\n\n")
END = "# --- end of script contract ---\n"
MAIN_GUARD = 'if __name__ == "__main__":'
# The sources, in the order their definitions appear in a block: (file, the name of its section).
SOURCES = ((ROOT / "tools" / "script_contract.py", "contract"), (ROOT / "tools" / "script_shared.py", "shared"))

# === contract source =============================================================================
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


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


def parse_json(data: bytes, option: str, path: str):
    """``data`` parsed as JSON; ScriptError (usage) naming the option and the path when it is not
    UTF-8, not JSON, nested too deep, or holds a number Python refuses (over 4300 digits)."""
    import json
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptError(f"{option} {path}: not UTF-8 text", EXIT_USAGE) from None
    except RecursionError:
        raise ScriptError(f"{option} {path}: nested too deeply to be JSON data", EXIT_USAGE) from None
    except ValueError as err:  # json.JSONDecodeError, and int() of a 5,000-digit number
        raise ScriptError(f"{option} {path}: not valid JSON ({str(err).splitlines()[0]})", EXIT_USAGE) from None



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

# === end of contract source =====================================================================


def data_rows(path: str, leave_out: tuple[str, ...] = (), keep: tuple[str, ...] = (),
              where: dict[str, tuple] | None = None) -> list[dict]:
    """The ``rows`` of the book's data file data/``path`` (YAML), or the ``results`` of a
    measured-results file when ``path`` starts with ``results/`` (JSON, tools/schemas): what a
    source's ``NAME = data_rows(...)`` holds when imported, and what ``sync`` writes into a
    script as a literal, row after row, each wrapped within WIDTH columns. Each row keeps only
    the keys ``keep`` (all when empty) less ``leave_out`` (what no script reads, such as a row's
    sources); ``where`` keeps only the rows whose value of each key it names is one it lists.
    Raises KeyError for a ``keep`` key some chosen row lacks."""
    import json

    import yaml
    if path.startswith("results/"):
        rows = json.loads((ROOT / path).read_text(encoding="utf-8"))["results"]
    else:
        rows = yaml.safe_load((ROOT / "data" / path).read_text(encoding="utf-8"))["rows"]
    rows = [r for r in rows if all(r.get(k) in allowed for k, allowed in (where or {}).items())]
    return [{k: row[k] for k in (keep or row) if k not in leave_out} for row in rows]


WIDTH = 120  # ruff.toml's line-length, which the rows written into a script keep within


def _literal(value) -> str:
    """``value`` (a list of dicts of plain values) as Python source, item after item."""
    if isinstance(value, list):
        return "[\n" + "".join(_item(item) for item in value) + "]"
    return repr(value)


def _item(item) -> str:
    """One item of a list ``_literal`` writes, indented by 4, and its comma: a dict's ``key: value``
    pairs filled into lines of at most WIDTH columns, the later lines aligned after its brace."""
    if not isinstance(item, dict) or not item:
        return f"    {item!r},\n"
    pairs = [f"{k!r}: {v!r}," for k, v in item.items()]
    pairs[-1] = pairs[-1][:-1] + "},"
    lines = ["    {" + pairs[0]]
    for pair in pairs[1:]:
        if len(lines[-1]) + 1 + len(pair) <= WIDTH:
            lines[-1] += " " + pair
        else:
            lines.append("     " + pair)
    return "\n".join(lines) + "\n"


def _source(path: Path, section: str) -> str:
    text = path.read_text(encoding="utf-8")
    start = text.index("\n", text.index(f"\n# === {section} source =") + 1) + 1
    return text[start:text.index(f"\n# === end of {section} source =")]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _data(node: ast.stmt) -> str | None:
    """``NAME = <the rows>`` for a statement ``NAME = data_rows(...)``; None for any other."""
    call = getattr(node, "value", None)
    if not (isinstance(node, ast.Assign) and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name) and call.func.id == "data_rows"):
        return None
    args = [ast.literal_eval(a) for a in call.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return f"{ast.unparse(node.targets[0])} = {_literal(data_rows(*args, **kwargs))}\n"


@cache
def pieces() -> tuple[tuple[frozenset, frozenset, str], ...]:
    """The sources' top-level statements, in order: (names each defines, names it uses, its text
    with the comment lines just above it; a ``data_rows`` assignment with the rows themselves).
    Raises ValueError for a name two statements define."""
    out, seen = [], {}
    for path, section in SOURCES:
        source = _source(path, section)
        lines = source.splitlines(keepends=True)
        start = 0
        for node in ast.parse(source).body:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
            while first > start and lines[first - 1].lstrip().startswith("#"):
                first -= 1  # the comment lines just above belong to the statement
            data = _data(node)
            text = "".join(lines[first:node.lineno - 1]) + data if data else "".join(lines[first:node.end_lineno])
            uses = set() if data else _names(node) - _defined(node)
            for name in _defined(node):
                if name in seen:
                    raise ValueError(f"{name} is defined twice: in {seen[name]} and {path.name}")
                seen[name] = path.name
            out.append((frozenset(_defined(node)), frozenset(uses), text))
            start = node.end_lineno
    return tuple(out)


def _own_definitions(code: str) -> set[str]:
    return {name for node in ast.parse(code).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign))
            for name in _defined(node)}


def block_for(own_code: str) -> str:
    """The generated block for a script whose own code (without a block) is ``own_code``: the
    definitions it names, and theirs, in source order; "" when it names none. Raises ValueError
    when the script defines one of them itself (its copy would shadow or be shadowed)."""
    parts = pieces()
    wanted, todo = set(), _names(ast.parse(own_code))
    while todo:
        name = todo.pop()
        for defines, uses, _ in parts:
            if name in defines and name not in wanted:
                wanted.add(name)
                todo |= uses
    clash = sorted(wanted & _own_definitions(own_code))
    if clash:
        raise ValueError(f"defines {', '.join(clash)} itself, which tools/script_contract.py or "
                         "tools/script_shared.py defines too: use the shared one, or rename it")
    chosen = [text for defines, _, text in parts if defines & wanted]
    if not chosen:
        return ""
    return BEGIN + "\n\n".join(t.rstrip("\n") + "\n" for t in chosen) + END


def without_block(text: str) -> str:
    """``text`` without its generated block (and the blank lines around it)."""
    begin = text.find("# --- script contract")
    if begin < 0:
        return text
    end = text.index(END, begin) + len(END)
    return text[:begin].rstrip("\n") + "\n\n\n" + text[end:].lstrip("\n")


def synced(text: str) -> str:
    """``text`` (a script) with the block it needs, just above its ``__main__`` guard."""
    own = without_block(text)
    block = block_for(own)
    guard = own.rindex("\n" + MAIN_GUARD) + 1
    before = own[:guard].rstrip("\n") + "\n\n\n"
    return before + (block + "\n\n" if block else "") + own[guard:]


def scripts() -> list[Path]:
    return sorted((ROOT / "scripts").rglob("*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="script_contract.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["sync"])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a script is out of date")
    parser.add_argument("paths", nargs="*", type=Path, help="scripts (default: every scripts/**/*.py)")
    args = parser.parse_intermixed_args(argv)  # `sync --check PATH ...` as well as `sync PATH --check`
    stale = []
    for path in args.paths or scripts():
        text = path.read_text(encoding="utf-8")
        try:
            new = synced(text)
        except ValueError as err:
            print(f"script_contract.py: error: {path}: {err}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{'out of date' if args.check else 'synced'}: {path}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
