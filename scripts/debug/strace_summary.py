#!/usr/bin/env python
"""strace_summary.py: which system calls a traced job never came back from, and which took longest.

Reads the traces that ``strace -f -tt -T -y -o FILE`` writes (many processes in one file, each
line led by its pid) or ``-ff`` writes (one file per process, ``FILE.PID``), pairs each call that
strace split into ``<unfinished ...>`` and ``<... resumed>`` lines, and prints for every process:

1. the calls still in progress when the trace ends: strace saw them start and never saw them
   return (a hang), each with how long before the end of the trace it started, so blocked for at
   least that long. The end is the trace's last time stamp or, if later, the time strace last
   wrote the file (it writes ``<detached ...>`` when Ctrl-C detaches it), so run this on the file
   strace wrote, not on a later copy; a trace without ``-tt`` or ``-ttt`` cannot say;
2. the ``--top`` calls that took longest (strace's ``-T`` durations, seconds), at least ``--min-s``.

Each call is shown with its file descriptor as ``-y``/``-yy`` named it (a path, a socket's
addresses), or the path it was given, and its result. ``exit`` and ``exit_group`` never return
and are not counted as in progress; nor is a call of a process that the trace shows exiting.

How to launch::

    python strace_summary.py job.trace    # from: strace -f -tt -T -y -o job.trace -p PID, then Ctrl-C
    python strace_summary.py job.trace.* --top 3 --min-s 0.5    # from strace -ff: a file per process

Example output (a reader stuck on a FIFO, traced with ``-p`` for a second and detached with Ctrl-C,
and the TCPStore client of the book's Syscall-level debugging page)::

    hang.trace, pid 32436: 1 call in progress at the end, 0 finished
      in progress  >= 0.960 s  read 3</tmp/demo/train-00017.bin>  (since 09:58:53.238701)
    store.trace, pid 16302: 39 finished
      2.685 s  clock_nanosleep = 0  (09:47:27.539813)
      1.015 s  clock_nanosleep = 0  (09:47:26.516209)
      0.382 s  clock_nanosleep = 0  (09:47:26.131152)
    1 call in progress at the end of the trace: pid 32436 read 3</tmp/demo/train-00017.bin>

Exit status: 0 no call in progress at the end of the traces; 3 a call was still in progress (a
finding: the process was blocked in it when tracing stopped); 2 usage error (a missing, empty or
oversized file, or one without strace's lines or ``-T`` durations); 130/143 interrupted.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
import traceback

TIME = r"(?P<time>\d\d:\d\d:\d\d(?:\.\d+)?|\d{9,}\.\d+)"
LINE = re.compile(rf"^(?:\[pid\s+(?P<pid1>\d+)\]\s+|(?P<pid2>\d+)\s+)?(?:{TIME}\s+)?(?P<rest>.*)$")
COMPLETE = re.compile(r"^(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>.*?)(?:\s+<(?P<dur>\d+\.\d+)>)?$")
UNFINISHED = re.compile(r"^(?P<name>\w+)\((?P<args>.*?)\s*<unfinished \.\.\.>$")
RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<args>.*?)\)?\s+=\s+(?P<ret>.*?)(?:\s+<(?P<dur>\d+\.\d+)>)?$")
OPEN = re.compile(r"^(?P<name>\w+)\((?P<args>.*?)(?:strace: Process \d+ detached)?\s*(?:<detached \.\.\.>)?$")
FORMS = ((UNFINISHED, "start"), (RESUMED, "end"), (COMPLETE, "call"), (OPEN, "cut"))
EXITED = re.compile(r"^\+\+\+ (exited|killed) ")
FD = re.compile(r"(?:fd=)?(\d+<.+?>)(?=[,)\]}\s]|$)")
PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')
NEVER_RETURN = {"exit", "exit_group"}


def seconds(stamp: str | None) -> float | None:
    """A -t/-tt (HH:MM:SS[.us]) or -ttt (epoch) time stamp in seconds."""
    if not stamp:
        return None
    if ":" not in stamp:
        return float(stamp)
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def subject(args: str) -> str:
    """What a call worked on: the first fd as -y/-yy named it, else the first quoted path."""
    found = FD.search(args)
    if found:
        return found.group(1)
    path = PATH.search(args)
    return f'"{path.group(1)}"' if path else ""


def end_of(last: float | None, stamp: str | None, mtime: float | None) -> float | None:
    """The end of a trace in its stamps' scale: the last stamp, or the file's modification time
    (epoch for -ttt stamps, else the local time of day) when that is later, within a day."""
    if last is None or mtime is None or stamp is None:
        return last
    if ":" in stamp:
        t = time.localtime(mtime)
        mtime = t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec + mtime % 1
    return mtime if 0 <= mtime - last < 86400 else last


def parse(text: str, source: str) -> tuple[dict, float | None, int]:
    """The calls of one trace, per pid: {pid: {"done": [call], "open": {name: call}}}, the last
    time stamp and the number of strace lines recognised. A call is (duration or None, start
    stamp, name, subject, result)."""
    default_pid = re.search(r"\.(\d+)$", source)
    procs: dict[str, dict] = {}
    last, recognised = None, 0
    for raw in text.splitlines():
        line = LINE.match(raw.rstrip())
        pid = line.group("pid1") or line.group("pid2") or (default_pid.group(1) if default_pid else "?")
        stamp, rest = line.group("time"), line.group("rest")
        if seconds(stamp) is not None:
            last = seconds(stamp)
        proc = procs.setdefault(pid, {"done": [], "open": {}})
        if EXITED.match(rest):
            proc["open"].clear()
            recognised += 1
            continue
        kind, match = next(((kind, m) for pattern, kind in FORMS if (m := pattern.match(rest))), (None, None))
        if match is None or (kind == "cut" and stamp is None):
            continue  # a signal, strace's own message, a line of something else (a cut call needs -tt)
        recognised += 1
        name = match.group("name")
        if kind == "start" or kind == "cut":
            if name not in NEVER_RETURN:
                proc["open"][name] = (None, stamp, name, subject(match.group("args")), "")
        elif kind == "end":
            began = proc["open"].pop(name, (None, stamp, name, "", ""))
            dur = match.group("dur")
            what = began[3] or subject(match.group("args"))
            proc["done"].append((float(dur) if dur else None, began[1], name, what, match.group("ret")))
        else:
            dur = match.group("dur")
            proc["done"].append((float(dur) if dur else None, stamp, name, subject(match.group("args")),
                                 match.group("ret")))
    return procs, last, recognised


def summarise(traces: dict[str, tuple[str, float | None]], top: int, min_s: float) -> tuple[list[str], list[str]]:
    """The report's lines, and one line per call still in progress at the end."""
    lines, stuck = [], []
    for source, (text, mtime) in traces.items():
        procs, last, recognised = parse(text, source)
        stamp = next((c[1] for p in procs.values() for c in [*p["done"], *p["open"].values()] if c[1]), None)
        last = end_of(last, stamp, mtime)
        calls = [c for p in procs.values() for c in p["done"]]
        if not recognised:
            raise ScriptError(f"{source}: no strace lines in it (write it with strace -f -tt -T -y -o FILE)",
                              EXIT_USAGE)
        if calls and all(c[0] is None for c in calls):
            raise ScriptError(f"{source}: no call durations in it (record with strace -T)", EXIT_USAGE)
        for pid, proc in procs.items():
            done = sorted((c for c in proc["done"] if c[0] is not None and c[0] >= min_s), key=lambda c: -c[0])
            opened = list(proc["open"].values())
            if not done and not opened:
                continue
            head = f"{source}, pid {pid}: "
            head += f"{len(opened)} call{'s' * (len(opened) != 1)} in progress at the end, " if opened else ""
            lines.append(head + f"{len(proc['done'])} finished")
            for _, stamp, name, what, _ in opened:
                since = seconds(stamp)
                age = f">= {last - since:.3f} s" if since is not None and last is not None else "for an unknown time"
                lines.append(f"  in progress  {age}  {name} {what}".rstrip() + (f"  (since {stamp})" if stamp else ""))
                stuck.append(f"pid {pid} {name} {what}".rstrip())
            for dur, stamp, name, what, ret in done[:top]:
                lines.append(f"  {dur:.3f} s  {name} {what}".rstrip() + f" = {ret}" + (f"  ({stamp})" if stamp else ""))
    return lines, stuck


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+", metavar="TRACE", help="files written by strace -f -tt -T -y -o (or -ff)")
    p.add_argument("--top", type=number(int, 1, 1000), default=3, help="longest finished calls per process (default 3)")
    p.add_argument("--min-s", type=number(float, 0, 1e9), default=0.0,
                   help="show finished calls of at least this many seconds (default 0)")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if len(args.traces) > 10000:
        raise ScriptError(f"{len(args.traces)} trace files: at most 10000 (one per process of a job)", EXIT_USAGE)
    traces = {}
    for path in args.traces:
        data = read_input(path, "TRACE", limit=512 << 20)
        if not data.strip():
            raise ScriptError(f"TRACE {path}: is empty (did strace run, and write with -o?)", EXIT_USAGE)
        try:
            mtime = os.stat(path).st_mtime if os.path.isfile(path) else None
        except OSError:
            mtime = None
        name = os.path.basename(path) if len(set(map(os.path.basename, args.traces))) == len(args.traces) else path
        traces[name] = (data.decode("utf-8", errors="replace"), mtime)
    lines, stuck = summarise(traces, args.top, args.min_s)
    for line in lines:
        print(line)
    if stuck:
        print(f"{len(stuck)} call{'s' * (len(stuck) != 1)} in progress at the end of the trace: " + "; ".join(stuck))
        return EXIT_FINDING
    print("no call in progress at the end of the trace" if lines else f"no finished call of at least {args.min_s:g} s")
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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
