#!/usr/bin/env python
"""usage_by_owner.py: who fills a shared file system: bytes by owner and by top-level folder, in one walk.

Walks the folder ROOT once with ``os.scandir`` (``--threads`` walkers share the top-level
folders), and sums for every file, folder and symbolic link the bytes allocated on disk
(``st_blocks`` x 512, what ``du`` counts) and the apparent size (``st_size``, what ``ls -l``
shows), by owner (the uid's user name) and by ROOT's top-level entry. It never follows a
symbolic link (a link counts as itself), counts a file with several hard links once (its first
path found), and does what ``du -s --block-size=1 ROOT`` does for the total. Decimal units in the
table (1 GB = 1e9 bytes); exact byte counts in ``--json``. On a terminal it shows a progress line
on stderr, at most ``--progress-every-s`` apart. ``--max-files`` and ``--timeout-s`` bound the
walk, and Ctrl-C stops it: the table then holds what was counted so far, marked partial.
Standard library only.

    python usage_by_owner.py /shared/scratch
    python usage_by_owner.py /shared/scratch --threads 8 --top 10 --timeout-s 600 --json /tmp/usage.json

Example output (a small tree: a 2 MB file linked from data/ and logs/, an 8 MB sparse file, a link to /usr)::

    # usage_by_owner.py: tree: 10 entries in 0.0 s (1 GB = 1e9 bytes), complete
    # total: 2.03 MB allocated, 10.41 MB apparent
    owner          allocated    apparent   entries   share
    root             2.02 MB    10.40 MB         8   99.8%
    nobody           4.10 kB         2 B         1    0.2%

    top-level      allocated    apparent   entries   share
    logs             2.01 MB     2.00 MB         3   99.2%
    .                8.19 kB     4.10 kB         2    0.4%
    data             8.19 kB     8.40 MB         4    0.4%

Exit status: 0 complete; 1 stopped early by ``--max-files`` or ``--timeout-s`` (the table above
the error line is partial), or a failure; 2 usage (ROOT missing, not a folder, unreadable, a
``--json`` inside ROOT); 130/143 interrupted (the partial table is printed and written first).
Folders inside ROOT that cannot be read are counted as folders, named in one warning line, and
listed in ``--json``; they do not change the exit status.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import pwd
import sys
import tempfile
import threading
import time
import traceback

PROG = "usage_by_owner.py"
MAX_THREADS = 64
MAX_FILES = 10**10
MAX_TIMEOUT_S = 7 * 24 * 3600
BATCH = 512                  # entries a walker counts between looks at the shared limits
KEEP_UNREADABLE = 20         # unreadable folders named in --json


# --- the walk --------------------------------------------------------------------------------------

class Tally:
    """Allocated bytes, apparent bytes and entries, per key."""

    def __init__(self):
        self.sums: dict = {}

    def add(self, key, allocated: int, apparent: int, entries: int = 1) -> None:
        a, b, n = self.sums.get(key, (0, 0, 0))
        self.sums[key] = (a + allocated, b + apparent, n + entries)

    def merge(self, other: Tally) -> None:
        for key, (a, b, n) in other.sums.items():
            self.add(key, a, b, n)


class Walk:
    """State the walkers share: hard-linked inodes seen, the entry count, why the walk stopped."""

    def __init__(self, max_files: int, deadline: float):
        self.lock = threading.Lock()
        self.seen: set[tuple[int, int]] = set()
        self.entries = 0
        self.allocated = 0
        self.max_files, self.deadline = max_files, deadline
        self.stopped_by: str | None = None
        self.unreadable: list[tuple[str, str]] = []

    def first_time(self, st: os.stat_result) -> bool:
        """False for a hard link to an inode already counted (du's rule: count it once)."""
        if st.st_nlink < 2:
            return True
        key = (st.st_dev, st.st_ino)
        with self.lock:
            if key in self.seen:
                return False
            self.seen.add(key)
            return True

    def report(self, entries: int, allocated: int) -> bool:
        """Add a walker's batch; False when the walk must stop (a limit, a stop request)."""
        with self.lock:
            self.entries += entries
            self.allocated += allocated
            if self.stopped_by is None:
                if self.entries >= self.max_files:
                    self.stopped_by = f"--max-files {self.max_files}"
                elif time.monotonic() >= self.deadline:
                    self.stopped_by = "--timeout-s"
            return self.stopped_by is None

    def stop(self, why: str) -> None:
        with self.lock:
            self.stopped_by = self.stopped_by or why


def count(walk: Walk, tally: Tally, top: str, st: os.stat_result) -> int:
    """Count one entry under its owner and its top-level entry; returns its allocated bytes."""
    if not walk.first_time(st):
        return 0
    allocated = st.st_blocks * 512
    tally.add(("owner", st.st_uid), allocated, st.st_size)
    tally.add(("folder", top), allocated, st.st_size)
    return allocated


def tally_folder(walk: Walk, top: str, path: str) -> Tally:
    """Walk the folder ``path`` (ROOT's entry ``top``) depth first with os.scandir, without
    following symbolic links; counts everything below ``path`` (not ``path`` itself)."""
    tally, stack, entries, allocated = Tally(), [path], 0, 0
    while stack and walk.stopped_by is None:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:  # removed since it was listed
                        continue
                    allocated += count(walk, tally, top, st)
                    entries += 1
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    if entries >= BATCH:
                        keep_going = walk.report(entries, allocated)
                        entries = allocated = 0
                        if not keep_going:
                            return tally
        except OSError as err:
            with walk.lock:
                walk.unreadable.append((folder, err.strerror or str(err)))
    walk.report(entries, allocated)
    return tally


def scan(root: str, threads: int, walk: Walk, total: Tally, progress) -> None:
    """Count ROOT itself and its top-level entries into ``total``, then walk each top-level
    folder in a pool of ``threads``. ``progress()`` is called about every 0.2 s from this (the
    main) thread, which also receives Ctrl-C: the walkers then stop at their next batch, and
    ``total`` holds what they counted."""
    walk.report(1, count(walk, total, ".", os.stat(root)))
    folders = []
    with os.scandir(root) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            walk.report(1, count(walk, total, entry.name if is_dir else ".", st))
            if is_dir:
                folders.append((entry.name, entry.path))
    futures = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        try:
            futures = [pool.submit(tally_folder, walk, name, path) for name, path in folders]
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(pending, timeout=0.2)
                progress()
                if time.monotonic() >= walk.deadline:
                    walk.stop("--timeout-s")
        except BaseException:
            walk.stop("interrupted")  # the walkers return at their next batch
            raise
        finally:
            pool.shutdown(wait=True)
            for f in futures:
                if f.done() and not f.cancelled() and f.exception() is None:
                    total.merge(f.result())


# --- the report ------------------------------------------------------------------------------------

def owner_name(uid: int, cache: dict) -> str:
    if uid not in cache:
        try:
            cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            cache[uid] = f"uid {uid}"
    return cache[uid]


def rows(total: Tally) -> list[dict]:
    """One row per owner and per top-level entry, largest allocation first in each group."""
    names: dict = {}
    out = []
    for group in ("owner", "folder"):
        part = [(k[1], v) for k, v in total.sums.items() if k[0] == group]
        for key, (a, b, n) in sorted(part, key=lambda kv: (-kv[1][0], str(kv[0]))):
            row = {"group": group, "name": owner_name(key, names) if group == "owner" else key,
                   "allocated_bytes": a, "apparent_bytes": b, "entries": n}
            if group == "owner":
                row["uid"] = key
            out.append(row)
    return out


def size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return ""


def table(root: str, result: list[dict], walk: Walk, elapsed: float, top: int) -> str:
    alloc = sum(r["allocated_bytes"] for r in result if r["group"] == "owner")
    apparent = sum(r["apparent_bytes"] for r in result if r["group"] == "owner")
    state = "complete" if walk.stopped_by is None else f"PARTIAL (stopped: {walk.stopped_by})"
    lines = [f"# {PROG}: {root}: {walk.entries:,} entries in {elapsed:.1f} s (1 GB = 1e9 bytes), {state}",
             f"# total: {size(alloc)} allocated, {size(apparent)} apparent"]
    for group, title in (("owner", "owner"), ("folder", "top-level")):
        part = [r for r in result if r["group"] == group]
        lines.append(f"{title:<12} {'allocated':>11} {'apparent':>11} {'entries':>9} {'share':>7}")
        for r in part[:top]:
            share = 100 * r["allocated_bytes"] / alloc if alloc else 0.0
            lines.append(f"{r['name']:<12} {size(r['allocated_bytes']):>11} {size(r['apparent_bytes']):>11} "
                         f"{r['entries']:>9,} {share:>6.1f}%")
        if len(part) > top:
            lines.append(f"... {len(part) - top} more (--top)")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def progress_printer(walk: Walk, mode: str, every_s: float):
    """A function that prints one progress line on stderr, at most every ``every_s`` seconds,
    when ``mode`` is 'always', or 'auto' and stderr is a terminal; a no-op otherwise."""
    shown = mode == "always" or (mode == "auto" and sys.stderr.isatty())
    start, last = time.monotonic(), [float("-inf")]

    def show(final: bool = False) -> None:
        now = time.monotonic()
        if not shown or (not final and now - last[0] < every_s):
            return
        last[0] = now
        with walk.lock:
            entries, allocated = walk.entries, walk.allocated
        end = "\n" if final else ""
        sys.stderr.write(f"\r{PROG}: {entries:,} entries, {size(allocated)} allocated, "
                         f"{now - start:.0f} s{end}")
        sys.stderr.flush()
    return show


# --- the command line ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("root", type=nonempty, metavar="ROOT", help="the folder to walk")
    p.add_argument("--threads", type=number(int, 1, MAX_THREADS), default=4,
                   help="walkers sharing ROOT's top-level folders (default 4; a parallel file system "
                        "answers several at once, a local disk gains little)")
    p.add_argument("--max-files", type=number(int, 1, MAX_FILES), default=MAX_FILES,
                   help="stop after this many entries (default: no limit)")
    p.add_argument("--timeout-s", type=number(float, 0, MAX_TIMEOUT_S, lo_open=True), default=24 * 3600,
                   help="stop after this many seconds (default 86400)")
    p.add_argument("--top", type=number(int, 1, 10**6), default=20, help="rows per table (default 20)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress line on stderr: auto (when stderr is a terminal), always, never")
    p.add_argument("--progress-every-s", type=number(float, 0.05, 3600), default=0.5,
                   help="at most one progress line per this many seconds (default 0.5)")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the rows as JSON here")
    p.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return p


def check_root(root: str) -> str:
    """ROOT must be a readable folder (a link to one is followed, once, as du does for its
    argument); one line otherwise."""
    try:
        st = os.stat(root)
    except FileNotFoundError:
        what = "is a broken symbolic link" if os.path.islink(root) else "does not exist"
        raise ScriptError(f"ROOT {root}: {what}", EXIT_USAGE) from None
    except OSError as err:
        raise ScriptError(f"ROOT {root}: {err.strerror}", EXIT_USAGE) from None
    if not os.path.isdir(root):
        raise ScriptError(f"ROOT {root}: is not a folder (mode {oct(st.st_mode)}); give the folder to walk",
                          EXIT_USAGE)
    try:
        with os.scandir(root) as it:
            next(it, None)
    except OSError as err:
        raise ScriptError(f"ROOT {root}: cannot read it ({err.strerror})", EXIT_USAGE) from None
    return root


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    root = check_root(opts.root)
    json_path = check_output(opts.json, "--json", inputs=[root]) if opts.json else None
    walk = Walk(opts.max_files, time.monotonic() + opts.timeout_s)
    show = progress_printer(walk, opts.progress, opts.progress_every_s)
    on_stop_signals()
    start = time.monotonic()
    interrupted: BaseException | None = None
    total = Tally()
    try:
        scan(root, opts.threads, walk, total, show)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: report what was counted
        interrupted = exc
        walk.stop(f"interrupted ({exc})")
    show(final=True)
    elapsed = time.monotonic() - start
    result = rows(total)
    sys.stdout.write(table(root, result, walk, elapsed, opts.top))
    if walk.unreadable:
        first = walk.unreadable[0]
        sys.stderr.write(f"{PROG}: warning: {len(walk.unreadable):,} folders could not be read and count "
                         f"as empty (first: {first[0]}: {first[1]})\n")
    if json_path:
        doc = envelope("usage_by_owner", None, argv=argv)
        doc.update({"root": os.path.abspath(root), "complete": walk.stopped_by is None,
                    "stopped_by": walk.stopped_by, "elapsed_s": round(elapsed, 3), "entries": walk.entries,
                    "unreadable_folders": len(walk.unreadable),
                    "unreadable_first": [{"path": p, "error": e} for p, e in walk.unreadable[:KEEP_UNREADABLE]],
                    "results": result})
        write_atomic(json_path, json.dumps(doc, indent=1) + "\n")
    if interrupted is not None:
        raise interrupted
    if walk.stopped_by is not None:
        raise ScriptError(f"stopped by {walk.stopped_by} after {walk.entries:,} entries; the table is partial")
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
