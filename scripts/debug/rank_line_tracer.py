#!/usr/bin/env python
"""rank_line_tracer.py: record which line of your script each rank executes, to see where each rank is stuck.

Runs a Python script (``runpy``, as ``python script.py args`` would) under ``sys.settrace`` and
appends each executed line of the traced files (paths containing ``--match``, default the
script's own; library code is skipped) to ``OUT/rank<R>.trace``, line-buffered, so the file is
current even when the process hangs or is killed. ``--show OUT`` prints the last line of every
rank with its source text: ranks that differ there went different ways. ``--every S`` also dumps
every thread's stack to ``OUT/rank<R>.stacks`` every S seconds (library frames too, no per-line
cost). Tracing slows the traced Python code several-fold: use it to find a hang, not to train.

How to launch (in front of the script, under the same launcher)::

    torchrun --nproc-per-node 2 rank_line_tracer.py --out traces -- train.py --lr 1e-3
    srun python rank_line_tracer.py --out traces --every 30 -- train.py
    python rank_line_tracer.py --show traces          # while it hangs, or after

Example output (2-core cloud VM; the job is scripts/debug/hanging_collective.py, while it hangs)::

    $ python scripts/debug/rank_line_tracer.py --show /tmp/tr
    rank 0: hanging_collective.py:316 in main: dist.all_reduce(t)
    rank 1: hanging_collective.py:319 in main: dist.broadcast(t, src=1)

Exit status: the traced script's own; 1 when it raises or --show finds no trace lines; 2 usage.
"""

from __future__ import annotations

import argparse
import faulthandler
import linecache
import math
import os
import re
import runpy
import sys
import tempfile
import traceback

PROG = "rank_line_tracer.py"
_TRACE_RE = re.compile(r"^rank(\d+)\.trace$")


def rank_from_env() -> int:
    """This process's rank: RANK (torchrun), else SLURM_PROCID (srun), else 0."""
    return env_int("RANK", env_int("SLURM_PROCID", 0))


def start_line_trace(out_path: str, match: str):
    """Install a ``sys.settrace`` tracer that appends ``file:line function`` for every line
    executed in files whose path contains ``match``. Returns the open (line-buffered) file.
    Raises OSError if ``out_path`` cannot be opened for writing.
    """
    out = open(out_path, "w", buffering=1)

    def local(frame, event, arg):
        if event == "line":
            code = frame.f_code
            out.write(f"{code.co_filename}:{frame.f_lineno} {code.co_name}\n")
        return local

    def global_trace(frame, event, arg):
        if match in frame.f_code.co_filename:
            return local
        return None

    sys.settrace(global_trace)
    return out


def last_lines(out_dir: str) -> list[tuple[int, str, int, str, str]]:
    """Last recorded line of each ``rank<R>.trace`` in ``out_dir``, in rank order, as
    (rank, file, line number, function, source text). Empty trace files are left out.
    Raises FileNotFoundError if ``out_dir`` does not exist, ValueError naming the file if its last
    line is not ``file:line function``.
    """
    rows = []
    for name in os.listdir(out_dir):
        m = _TRACE_RE.match(name)
        if not m:
            continue
        last = ""
        with open(os.path.join(out_dir, name), errors="replace") as fh:
            for line in fh:
                if line.strip():
                    last = line
        if not last:
            continue
        where, _, func = last.strip().rpartition(" ")
        path, _, lineno = where.rpartition(":")
        if not (path and func and lineno.isdigit()):
            raise ValueError(f"{os.path.join(out_dir, name)}: last line {last.strip()[:80]!r} is "
                             "not 'file:line function' (not written by this tracer?)")
        text = linecache.getline(path, int(lineno)).strip()
        rows.append((int(m.group(1)), path, int(lineno), func, text))
    return sorted(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Run a script with a per-rank line tracer (which line is each "
        "rank on?), or --show the last traced line of every rank.",
        usage="%(prog)s --out DIR [--match TEXT] [--every S] -- script.py [args ...]\n"
              "       %(prog)s --show DIR")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--out", type=nonempty, help="directory for rank<R>.trace (and rank<R>.stacks) files")
    p.add_argument("--match", type=nonempty, help="trace only files whose path contains this text "
                   "(default: the script's own path)")
    p.add_argument("--every", type=number(float, 0), default=0.0,
                   help="also dump all stacks to rank<R>.stacks every S seconds (default off)")
    p.add_argument("--show", metavar="DIR", type=nonempty, help="print the last traced line of every rank")
    p.add_argument("script", nargs="?", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.show:
        if not os.path.isdir(args.show):
            raise ScriptError(f"--show: no such directory {args.show!r}", EXIT_USAGE)
        try:
            rows = last_lines(args.show)
        except ValueError as exc:
            raise ScriptError(str(exc)) from exc
        if not rows:
            raise ScriptError(f"--show: no rank<R>.trace files with lines in {args.show!r}")
        for rank, path, lineno, func, text in rows:
            print(f"rank {rank}: {os.path.basename(path)}:{lineno} in {func}: {text}")
        return 0
    if not args.out or not args.script:
        parser.error("give --out DIR and a script to run (or --show DIR)")
    if not os.path.isfile(args.script):
        raise ScriptError(f"no such script {args.script!r}", EXIT_USAGE)
    check_output_dir(args.out, "--out")
    rank = rank_from_env()
    script = os.path.abspath(args.script)
    if args.every:
        stacks = open(os.path.join(args.out, f"rank{rank}.stacks"), "w")
        faulthandler.dump_traceback_later(args.every, repeat=True, file=stacks)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    own_argv, sys.argv = sys.argv, [script, *script_args]
    sys.path.insert(0, os.path.dirname(script))
    start_line_trace(os.path.join(args.out, f"rank{rank}.trace"), args.match or script)
    try:
        runpy.run_path(script, run_name="__main__")
    except Exception as exc:  # its BrokenPipeError of a reader that left: run_main exits 0
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise ScriptError(f"{args.script} failed: {type(exc).__name__}: {first} (--debug, before "
                          "--, shows its traceback)") from exc
    finally:
        sys.settrace(None)
        sys.argv = own_argv                  # our own error line names this script, not it
        faulthandler.cancel_dump_traceback_later()
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
