#!/usr/bin/env python
"""prune_checkpoints.py: keep the last N checkpoints and every k-th step, delete the rest, safely.

In the folder DIR, each entry whose name carries a step number (``--pattern``: by default
``step_001200``, ``step-1200``, ``global_step1200`` (DeepSpeed), ``checkpoint-1200`` (Hugging Face
Trainer), ``iter_0001200`` (Megatron-LM), ``epoch=3-step=1200.ckpt`` (Lightning)) is a checkpoint:
a folder, a file, or a symbolic link. The rules, in order:

1. A checkpoint that may still be being written is left alone, neither deleted nor counted: its
   name or a name inside it looks temporary (``.tmp``, ``tmp-``, ``.partial``, ``.incomplete``,
   ``.lock``), a folder lacks the ``--marker`` file (DCP: ``.metadata``), or it or anything in it
   changed less than ``--min-age-s`` seconds ago (default 600).
2. Of the others, the ``--keep-last`` N highest steps are kept, and every step that is a multiple
   of ``--keep-every`` K; so is the checkpoint that DIR's ``latest`` file (DeepSpeed),
   ``latest_checkpointed_iteration.txt`` (Megatron-LM) or a symbolic link in DIR names.
3. The rest is deleted, only with ``--delete`` (without it: a dry run that says what it would
   delete and the bytes, apparent size, that it would free). Each is first renamed to
   ``.deleting-NAME`` in DIR (one atomic rename(2)), then removed without following any link (a
   link is removed as a link, never its target); a run that dies in between leaves that name,
   which the next run with ``--delete`` finishes removing. A checkpoint with a folder it cannot
   read is not touched.

    python prune_checkpoints.py /ckpt --keep-last 3 --keep-every 1000             # dry run
    python prune_checkpoints.py /ckpt --keep-last 3 --keep-every 1000 --marker .metadata --delete

Example output (ten DCP checkpoints two hours old, the newest without its .metadata)::

    checkpoints in ck: 10 (steps 100 to 1000), keeping the last 2 and every 500th step
    delete  step-100       8.2 MB
    ...
    keep    step-500       8.2 MB  every 500th step
    delete  step-600       8.2 MB
    delete  step-700       8.2 MB
    keep    step-800       8.2 MB  last 2
    keep    step-900       8.2 MB  last 2
    leave   step-1000      8.2 MB  being written: no .metadata
    dry run: would delete 6 checkpoints, 49.2 MB; run again with --delete to delete them

Exit status: 0 ok (nothing to delete included), 1 a checkpoint could not be deleted (the others
were), 2 usage (one line naming the option, before any work). Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass

PROG = "prune_checkpoints.py"
DEFAULT_PATTERN = r"(?:^|[-_=])(?:step|iter|checkpoint)[-_=]?(\d+)(?:\.[A-Za-z0-9]+)?$"
DEFAULT_MIN_AGE_S = 600.0
LEFTOVER = ".deleting-"
POINTERS = ("latest", "latest_checkpointed_iteration.txt")  # DeepSpeed, Megatron-LM


@dataclass
class Checkpoint:
    name: str
    step: int
    kind: str            # folder, file or link
    bytes: int = 0       # apparent size of its files; 0 for a link
    action: str = ""     # keep, delete, deleted, leave, failed
    reason: str = ""


def inspect(top: str, ck: Checkpoint, marker: str | None, min_age_s: float, now: float) -> None:
    """Size ``ck`` and leave it alone (action "leave") when it may still be being written or
    cannot be read whole."""
    path = os.path.join(top, ck.name)
    info = os.lstat(path)
    newest, why = info.st_mtime, None
    if IN_PROGRESS.search(ck.name):
        why = "being written: its name looks temporary"
    if stat.S_ISDIR(info.st_mode):
        if marker and not os.path.isfile(os.path.join(path, marker)):
            why = why or f"being written: no {marker}"
        for rel, entry, problem in walk_tree(path):
            if problem:
                why = f"cannot read {ck.name}/{rel}: {problem}"
                break
            newest = max(newest, entry.st_mtime)
            if stat.S_ISREG(entry.st_mode):
                ck.bytes += entry.st_size
            if not why and IN_PROGRESS.search(os.path.basename(rel)):
                why = f"being written: {ck.name}/{rel}"
    elif stat.S_ISREG(info.st_mode):
        ck.bytes = info.st_size
    age = now - newest
    if not why and age < min_age_s:
        why = f"being written: changed {max(age, 0):.0f} s ago (--min-age-s {min_age_s:g})"
    if why:
        ck.action, ck.reason = "leave", why


def pointed_at(top: str, checkpoints: list[Checkpoint]) -> dict[str, str]:
    """The checkpoints a resume would load: named by a ``latest`` file (DeepSpeed: the name),
    ``latest_checkpointed_iteration.txt`` (Megatron-LM: the step) or a symbolic link in ``top``."""
    by_name = {ck.name: ck for ck in checkpoints}
    found = {}
    for name in os.listdir(top):
        path = os.path.join(top, name)
        if os.path.islink(path) and name not in by_name:
            target = os.path.realpath(path)
            if os.path.dirname(target) == os.path.realpath(top) and os.path.basename(target) in by_name:
                found[os.path.basename(target)] = f"the link {name} points at it"
        elif name in POINTERS and os.path.isfile(path):
            with open(path, "rb") as f:
                text = f.read(4096).decode("utf-8", "replace").strip()
            for ck in checkpoints:
                if text == ck.name or (text.isdigit() and int(text) == ck.step):
                    found[ck.name] = f"{name} names it"
    return found


def plan(checkpoints: list[Checkpoint], keep_last: int, keep_every: int, pinned: dict[str, str]) -> None:
    """Decide keep or delete for each checkpoint not left alone already."""
    candidates = [ck for ck in checkpoints if ck.action != "leave"]
    last = set(sorted({ck.step for ck in candidates})[-keep_last:])
    for ck in candidates:
        reasons = [f"last {keep_last}"] if ck.step in last else []
        if keep_every and ck.step % keep_every == 0:
            reasons.append(f"every {keep_every}th step")
        if ck.name in pinned:
            reasons.append(pinned[ck.name])
        ck.action, ck.reason = ("keep", ", ".join(reasons)) if reasons else ("delete", "")


def remove_tree(path: str) -> None:
    """Remove ``path`` (renamed already) without following a link; gone meanwhile is no error."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # fd-based on Linux: a link inside is unlinked, never followed
        else:
            os.unlink(path)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise


def delete(top: str, ck: Checkpoint) -> None:
    """Rename ``ck`` to .deleting-NAME (atomic), then remove it; raises OSError on failure."""
    hidden = os.path.join(top, LEFTOVER + ck.name)
    if os.path.lexists(hidden):  # a leftover of the same name: finished first by the caller
        raise OSError(f"{LEFTOVER + ck.name} is in the way")
    os.rename(os.path.join(top, ck.name), hidden)
    remove_tree(hidden)


def regex(text: str) -> re.Pattern:
    try:
        pattern = re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"not a regular expression ({err})") from None
    if pattern.groups != 1:
        raise argparse.ArgumentTypeError(f"needs exactly one group, the step number; {text!r} has {pattern.groups}")
    return pattern


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Keep the last N checkpoints and every k-th step in DIR; "
                                "delete the rest with --delete (the default is a dry run).")
    p.add_argument("dir", metavar="DIR", type=nonempty, help="the folder that holds the checkpoints")
    p.add_argument("--keep-last", type=number(int, 1, 10**6), required=True, metavar="N",
                   help="keep the N highest steps among the complete checkpoints")
    p.add_argument("--keep-every", type=number(int, 0, 10**12), default=0, metavar="K",
                   help="also keep every step that is a multiple of K (default 0: none)")
    p.add_argument("--pattern", type=regex, default=re.compile(DEFAULT_PATTERN), metavar="RE",
                   help="a checkpoint is an entry whose name RE matches (re.search); its one group is "
                   "the step (default: step_N, step-N, global_stepN, checkpoint-N, iter_N, ...-step=N.ckpt)")
    p.add_argument("--marker", type=nonempty, metavar="FILE",
                   help="a folder checkpoint without FILE in it is still being written (DCP: .metadata)")
    p.add_argument("--min-age-s", type=number(float, 0, 10**8), default=DEFAULT_MIN_AGE_S, metavar="S",
                   help="a checkpoint with anything changed in the last S seconds is still being "
                   f"written (default {DEFAULT_MIN_AGE_S:g})")
    p.add_argument("--delete", action="store_true", help="delete; without it, only say what would be deleted")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the decisions as JSON to PATH")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    top = args.dir
    if not os.path.isdir(top):
        raise ScriptError(f"{top}: {'is not a folder' if os.path.exists(top) else 'does not exist'}", EXIT_USAGE)
    if args.marker and ("/" in args.marker or args.marker in (".", "..")):
        raise ScriptError(f"--marker {args.marker}: give a file name inside each checkpoint, not a path", EXIT_USAGE)
    if args.json:
        check_output(args.json, "--json", inputs=[top])
    on_stop_signals()
    now, names = time.time(), sorted(os.listdir(top))
    leftovers = [n for n in names if n.startswith(LEFTOVER)]
    checkpoints = []
    for name in names:
        found = None if name.startswith(".") else args.pattern.search(name)
        if found:
            kind = "link" if os.path.islink(os.path.join(top, name)) else \
                "folder" if os.path.isdir(os.path.join(top, name)) else "file"
            checkpoints.append(Checkpoint(name, int(found.group(1)), kind))
    checkpoints.sort(key=lambda ck: (ck.step, ck.name))
    for ck in checkpoints:
        if ck.kind != "link":
            inspect(top, ck, args.marker, args.min_age_s, now)
        elif now - os.lstat(os.path.join(top, ck.name)).st_mtime < args.min_age_s:
            ck.action, ck.reason = "leave", f"being written: a link made less than {args.min_age_s:g} s ago"
    plan(checkpoints, args.keep_last, args.keep_every, pointed_at(top, checkpoints))
    steps = f"steps {checkpoints[0].step} to {checkpoints[-1].step}" if checkpoints else "none match --pattern"
    keeping = f"keeping the last {args.keep_last}" + (f" and every {args.keep_every}th step" if args.keep_every else "")
    print(f"checkpoints in {top}: {len(checkpoints)} ({steps}), {keeping}")
    width = max([len(ck.name) for ck in checkpoints] + [10])
    failures = []
    try:
        for name in leftovers:  # a deletion a crash interrupted: finish it
            print(f"{'finish' if args.delete else 'leftover'}  {name}  (an interrupted deletion)")
            if args.delete:
                try:
                    remove_tree(os.path.join(top, name))
                except OSError as err:
                    failures.append(f"{name}: {err.strerror or err}")
        for ck in checkpoints:
            if ck.action == "delete" and args.delete:
                try:
                    delete(top, ck)
                    ck.action = "deleted"
                except OSError as err:
                    ck.action, ck.reason = "failed", f"cannot delete it ({err.strerror or err})"
                    failures.append(f"{ck.name}: {ck.reason}")
            note = f"  {ck.reason}" if ck.reason else ""
            shown = "link" if ck.kind == "link" else decimal_size(ck.bytes)
            print(f"{ck.action:<7} {ck.name:<{width}}  {shown:>9}{note}")
    finally:
        doomed = [ck for ck in checkpoints if ck.action == ("deleted" if args.delete else "delete")]
        freed = sum(ck.bytes for ck in doomed)
        if args.delete:
            print(f"deleted {len(doomed)} checkpoints, {decimal_size(freed)}")
        else:
            print(f"dry run: would delete {len(doomed)} checkpoints, {decimal_size(freed)}; run again with --delete "
                  "to delete them")
        if args.json:
            report = {"tool": "prune_checkpoints", "dir": top, "dry_run": not args.delete,
                      "keep_last": args.keep_last, "keep_every": args.keep_every,
                      "pattern": args.pattern.pattern, "marker": args.marker, "min_age_s": args.min_age_s,
                      "bytes_freed" if args.delete else "bytes_to_free": freed, "leftovers": leftovers,
                      "checkpoints": [asdict(ck) for ck in checkpoints]}
            write_atomic(args.json, json.dumps(report, indent=2) + "\n")
    if failures:
        raise ScriptError(f"{len(failures)} could not be deleted (the rest was): {failures[0]}")
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


# A name that says its file or folder is still being written: DCP's .metadata.tmp, Orbax's
# STEP.orbax-checkpoint-tmp-TIME, a tmp-checkpoint-N, a download's .partial or .incomplete, a .lock.
IN_PROGRESS = re.compile(r"(^|[._-])(tmp|temp)([._-]|$)|\.(partial|incomplete|lock)$|^incomplete$", re.IGNORECASE)


def walk_tree(top: str):
    """Everything under the folder ``top``, as (path relative to ``top``, its lstat result,
    problem), parents before their contents. Symbolic links are yielded as links and never
    followed, so the walk cannot leave ``top`` or loop. ``problem`` is None, or why a folder (or
    an entry) could not be read; its stat result is then None."""
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(top, rel)) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as err:
            yield rel or ".", None, f"cannot list it ({err.strerror})"
            continue
        for entry in reversed(entries):
            path = os.path.join(rel, entry.name) if rel else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as err:
                yield path, None, f"cannot stat it ({err.strerror})"
                continue
            yield path, info, None
            if stat.S_ISDIR(info.st_mode):
                stack.append(path)


def decimal_size(n: float) -> str:
    """Bytes in decimal units (1 kB = 1000 B), as the book gives storage sizes."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
