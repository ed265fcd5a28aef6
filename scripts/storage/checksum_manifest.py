#!/usr/bin/env python
"""checksum_manifest.py: write the SHA-256 of every file in a folder (a checkpoint, data shards), verify it later.

``write DIR --out MANIFEST`` hashes each file under DIR, reading it in 4 MiB pieces, ``--workers``
files at a time, and writes one line per file, sorted by path, in GNU sha256sum's format, each
after a comment line that gives its size in bytes::

    #size 8388608
    5f0d1c...e1a2  step-1000/__0_0.distcp

so that ``cd DIR && sha256sum -c MANIFEST`` checks it on a machine without this script (sha256sum
skips the lines that start with #). ``verify DIR MANIFEST`` prints one line for each file that is
missing, changed (a different size, else a different hash), extra (in DIR, not in the manifest) or
unreadable, and exits 3 if there is one; a manifest from ``sha256sum`` or ``find -exec sha256sum``
(paths starting ``./``) verifies too.

What it never does: follow a symbolic link out of DIR (a link to a file inside DIR is hashed under
its own name; one to outside, to a folder, one that leads nowhere or loops is skipped and named,
as are pipes and devices), hash a folder that is still being written (a name that looks temporary,
``.tmp``, ``tmp-``, ``.partial``, ``.incomplete``, ``.lock``, refuses the run unless
``--exclude``d), write the manifest inside DIR unless an ``--exclude`` pattern covers it, or trust
the manifest it verifies: a path that is absolute or holds ``..`` refuses the whole file, which is
read up to 64 MiB (about 400,000 files), and its paths are compared with the walk of DIR, never
opened. A pattern with a ``/`` matches a path from DIR's top, one without a name at any depth.

    python checksum_manifest.py write /ckpt/step-1000 --out /ckpt/step-1000.sha256 --workers 8
    python checksum_manifest.py verify /ckpt/step-1000 /ckpt/step-1000.sha256

Example output (a folder of 3 files; then one byte of a file changed, and another file removed)::

    wrote st.sha256: 3 files, 16.8 MB in 0.1 s (1 worker, 161.8 MBps)
    missing     config.json
    changed     shard-1.bin: different sha256
    checksum_manifest.py: error: 2 of 3 files differ from st.sha256 (1 changed, 1 missing)

Exit status: 0 ok; 1 a runtime failure (``write``: a file that cannot be read or changed while it
was read, a full disk, and the old manifest is kept); 2 usage (one line, before any work); 3
``verify`` found a difference. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import hashlib
import math
import os
import re
import stat
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

PROG = "checksum_manifest.py"
CHUNK = 4 << 20
MANIFEST_MAX_BYTES = 64 << 20
ENTRY = re.compile(r"(\\?)([0-9a-fA-F]{64}) [ *](.+)")  # sha256sum: hash, space, ' ' or '*' (binary), path
SIZE = re.compile(r"#size (\d{1,19})")
STOP = threading.Event()  # set when the run ends early: the workers stop at their next piece
HEADER = ("# checksum_manifest.py: the SHA-256 of each file, with its size on the line before; paths relative to\n"
          "# the folder. Check it there with `sha256sum -c FILE`, or `checksum_manifest.py verify FOLDER FILE`.\n")


def excluded(rel: str, patterns: list[str]) -> bool:
    """``rel`` or a folder above it matches a pattern (with a /: the path; without: the name)."""
    parts = rel.split("/")
    return any(fnmatch.fnmatchcase("/".join(parts[:i + 1]) if "/" in p else parts[i], p)
               for p in patterns for i in range(len(parts)))


def list_files(top: str, patterns: list[str]):
    """The files under ``top`` to hash, {path: (size, follow a link)}, and {path: why skipped},
    {path: why unreadable}, [names that look temporary]."""
    root = os.path.realpath(top)
    real = os.path.join(root, "")
    files, skipped, unreadable, busy = {}, {}, {}, []
    for rel, info, problem in walk_tree(top):
        if excluded(rel, patterns):
            continue
        if problem:
            unreadable[rel] = problem
            continue
        if IN_PROGRESS.search(os.path.basename(rel)):
            busy.append(rel)
        full = os.path.join(top, rel)
        if stat.S_ISREG(info.st_mode):
            files[rel] = (info.st_size, False)
        elif stat.S_ISLNK(info.st_mode):
            resolved = os.path.realpath(full)
            if resolved != root and not resolved.startswith(real):
                skipped[rel] = "a link to outside the folder, not followed"
                continue
            try:
                target = os.stat(full)
            except OSError as err:
                skipped[rel] = f"a link that leads nowhere ({err.strerror})"
                continue
            if stat.S_ISREG(target.st_mode):
                files[rel] = (target.st_size, True)
            else:
                skipped[rel] = "a link to a folder, not followed (its files are listed under their own paths)"
        elif not stat.S_ISDIR(info.st_mode):
            skipped[rel] = "not a regular file (a pipe, a socket or a device)"
    return files, skipped, unreadable, busy


def sha256(path: str, follow: bool) -> tuple[str | None, int, str | None]:
    """(hex digest, bytes read, problem) of the file ``path``, read in CHUNK pieces."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        with open(os.open(path, flags), "rb", buffering=0) as f:
            before = os.fstat(f.fileno())
            if not stat.S_ISREG(before.st_mode):
                return None, 0, "no longer a regular file"
            digest, buf, done = hashlib.sha256(), bytearray(CHUNK), 0
            view = memoryview(buf)
            while n := f.readinto(buf):
                if STOP.is_set():
                    return None, done, "not read to its end: the run was stopped"
                digest.update(view[:n])
                done += n
            after = os.fstat(f.fileno())
    except OSError as err:
        return None, 0, f"cannot read it ({err.strerror or err})"
    if done != before.st_size or (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        return None, done, "changed while it was read (is it still being written?)"
    return digest.hexdigest(), done, None


def hash_all(top: str, files: dict, workers: int):
    """Yield (path, digest, bytes, problem) for each of ``files``, in order, ``workers`` at a time."""
    pool = ThreadPoolExecutor(max_workers=workers)  # hashlib releases the GIL while it hashes
    try:
        jobs = [(rel, pool.submit(sha256, os.path.join(top, rel), follow)) for rel, (_, follow) in files.items()]
        for rel, job in jobs:
            yield (rel, *job.result())
    finally:
        STOP.set()
        pool.shutdown(wait=False, cancel_futures=True)


def shown(rel: str) -> str:
    return rel if rel.isprintable() else ascii(rel)


def manifest_line(rel: str, digest: str, size: int) -> str:
    if "\\" in rel or "\n" in rel:  # sha256sum's escape: a leading backslash, then \\ and \n
        return f"#size {size}\n\\{digest}  " + rel.replace("\\", "\\\\").replace("\n", "\\n") + "\n"
    return f"#size {size}\n{digest}  {rel}\n"


def parse_manifest(data: bytes, where: str) -> dict[str, tuple[str, int | None]]:
    """{path: (digest, size or None)}; ScriptError (usage) naming the line for anything else."""
    entries, size = {}, None
    for number, line in enumerate(data.decode("utf-8", "surrogateescape").split("\n"), 1):
        line = line.removesuffix("\r")
        if not line or line.startswith("#"):
            found = SIZE.fullmatch(line)
            size = int(found[1]) if found else None
            continue
        found = ENTRY.fullmatch(line)
        if not found:
            raise ScriptError(f"{where}:{number}: not a checksum line (64 hex digits, two spaces, a path)", EXIT_USAGE)
        escaped, digest, path = found.groups()
        if escaped:
            try:
                path = re.sub(r"\\(.)", lambda m: {"\\": "\\", "n": "\n", "r": "\r"}[m[1]], path)
            except KeyError:
                raise ScriptError(f"{where}:{number}: an unknown escape in the path", EXIT_USAGE) from None
        while path.startswith("./"):
            path = path[2:]
        if path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in path.split("/")):
            raise ScriptError(f"{where}:{number}: the path {shown(path)} is not a plain path inside the "
                              "folder (absolute, or with . or ..); refusing the whole manifest", EXIT_USAGE)
        if path in entries:
            raise ScriptError(f"{where}:{number}: {shown(path)} is listed twice", EXIT_USAGE)
        entries[path], size = (digest.lower(), size), None
    if not entries:
        raise ScriptError(f"{where}: no checksum lines in it", EXIT_USAGE)
    return entries


def inside(path: str, top: str) -> str | None:
    """``path`` relative to the folder ``top`` when it is inside it (both resolved), else None."""
    real, root = os.path.realpath(path), os.path.realpath(top)
    return os.path.relpath(real, root) if real.startswith(os.path.join(root, "")) else None


def write(args) -> int:
    rel_out = inside(args.out, args.dir)
    if rel_out is not None and not excluded(rel_out, args.exclude):
        raise ScriptError(f"--out {args.out}: is inside {args.dir}, which this run hashes; write it elsewhere, "
                          f"or add --exclude '{os.path.basename(rel_out)}'", EXIT_USAGE)
    check_output(args.out, "--out")
    start = time.monotonic()
    files, skipped, unreadable, busy = list_files(args.dir, args.exclude)
    if not files:
        raise ScriptError(f"{args.dir}: no files to hash", EXIT_USAGE)
    if busy:
        raise ScriptError(f"{args.dir}: {shown(busy[0])} looks like it is still being written; wait for the "
                          "writer to finish, or --exclude it")
    if unreadable:
        rel, why = next(iter(unreadable.items()))
        raise ScriptError(f"{args.dir}: {shown(rel)}: {why}; no manifest written")
    for rel, why in skipped.items():
        print(f"{PROG}: warning: skipped {shown(rel)}: {why}", file=sys.stderr)
    lines, total = [HEADER], 0
    for rel, digest, done, problem in hash_all(args.dir, dict(sorted(files.items())), args.workers):
        if problem:
            raise ScriptError(f"{args.dir}: {shown(rel)}: {problem}; no manifest written")
        lines.append(manifest_line(rel, digest, done))
        total += done
    lines += [f"# skipped {rel}: {why}\n" for rel, why in sorted(skipped.items()) if rel.isprintable()]
    write_atomic(args.out, "".join(lines).encode("utf-8", "surrogateescape"))
    took = time.monotonic() - start
    print(f"wrote {args.out}: {len(files)} files, {decimal_size(total)} in {took:.1f} s ({args.workers} "
          f"worker{'s' * (args.workers > 1)}, {decimal_size(total / max(took, 1e-6))}ps)")
    return 0


def verify(args) -> int:
    entries = parse_manifest(read_input(args.manifest, "MANIFEST", limit=MANIFEST_MAX_BYTES), args.manifest)
    patterns = list(args.exclude)
    rel_manifest = inside(args.manifest, args.dir)
    if rel_manifest is not None:
        patterns.append(glob_escape(rel_manifest))  # the manifest does not list itself
    files, skipped, unreadable, _ = list_files(args.dir, patterns)
    entries = {rel: e for rel, e in entries.items() if not excluded(rel, patterns)}
    found = {rel: f"unreadable  {shown(rel)}: {why}" for rel, why in unreadable.items()}
    for rel in entries.keys() - files.keys():
        why = f": {skipped[rel]}" if rel in skipped else ""
        found[rel] = f"{'changed' if why else 'missing'}     {shown(rel)}{why}"
    found.update({rel: f"extra       {shown(rel)}" for rel in files.keys() - entries.keys()})
    check = {}
    for rel in sorted(entries.keys() & files.keys()):
        expected = entries[rel][1]
        if expected is not None and expected != files[rel][0]:
            found[rel] = f"changed     {shown(rel)}: {files[rel][0]:,} bytes, the manifest says {expected:,}"
        else:
            check[rel] = files[rel]
    for rel, digest, _, problem in hash_all(args.dir, check, args.workers):
        if problem:
            found[rel] = f"unreadable  {shown(rel)}: {problem}"
        elif digest != entries[rel][0]:
            found[rel] = f"changed     {shown(rel)}: different sha256"
    for rel in sorted(found):
        print(found[rel])
    if found:
        kinds = [line.split()[0] for line in found.values()]
        counts = ", ".join(f"{kinds.count(k)} {k}" for k in ("changed", "missing", "extra", "unreadable") if k in kinds)
        total = len(entries.keys() | files.keys())
        raise ScriptError(f"{len(found)} of {total} files differ from {args.manifest} ({counts})", EXIT_FINDING)
    print(f"OK: {len(entries)} files match {args.manifest}")
    return 0


def glob_escape(text: str) -> str:
    return re.sub(r"([*?[])", r"[\1]", text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Write the SHA-256 manifest of a folder, or verify "
                                "a folder against one.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    sub = p.add_subparsers(dest="command", required=True, metavar="{write,verify}")
    for name, text in (("write", "hash every file under DIR into --out"),
                       ("verify", "compare DIR with MANIFEST; exit 3 on a difference")):
        usage = f"{PROG} {name} DIR " + ("--out MANIFEST" if name == "write" else "MANIFEST") + " [options]"
        s = sub.add_parser(name, prog=PROG, usage=usage, help=text, description=text)
        s.add_argument("dir", metavar="DIR", type=nonempty, help="the folder")
        if name == "write":
            s.add_argument("--out", required=True, type=nonempty, metavar="MANIFEST", help="the manifest to write")
        else:
            s.add_argument("manifest", metavar="MANIFEST", type=nonempty, help="a manifest (or sha256sum's output)")
        s.add_argument("--workers", type=number(int, 1, 256), default=1, metavar="N",
                       help="hash N files at a time (default 1; a parallel file system likes 8 or more)")
        s.add_argument("--exclude", action="append", default=[], type=nonempty, metavar="GLOB",
                       help="leave out paths that match (repeatable; with a /: from DIR's top; else a name)")
        s.add_argument("--debug", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not os.path.isdir(args.dir):
        raise ScriptError(f"{args.dir}: {'is not a folder' if os.path.exists(args.dir) else 'does not exist'}",
                          EXIT_USAGE)
    on_stop_signals()
    return write(args) if args.command == "write" else verify(args)


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
