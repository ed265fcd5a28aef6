"""Run a script as `python SCRIPT ARGS` would, from a fork server that imported torch once.

``import torch`` costs about 1.7 CPU-s, and the careless-input tables start hundreds of script
runs whose point is the argument check, the one-line error and the files left behind, not the
process start. :func:`run` forks each run from a ``multiprocessing`` fork server preloaded with
torch (about 0.03 s instead of 1.5-1.7 s) and gives the child what a fresh interpreter would
have: ``sys.argv`` (``argv[0]`` is the script's path), ``sys.path[0]`` (the script's folder), the
environment, the working directory, stdin from /dev/null, stdout and stderr of its own, a session
of its own, Python's default signal handlers, ``__name__ == "__main__"``, and the exit status
(``sys.exit`` code, 1 and a traceback for an uncaught exception, death by SIGINT for an uncaught
KeyboardInterrupt). tests/test_preloaded.py compares both paths on a sample of cases.

What it cannot give: environment variables that torch reads when it is imported (the server
imported it with the suite's environment), and a first ``import torch`` inside the script (it is
already imported). Tests about those, about signals sent from outside, launchers, or time limits
run real processes (``Case(fresh_process=True)``, or tests/launchers.py). Set
BOOK_TEST_FRESH_PROCESS=1 to run every case in a real process.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import psutil

_CONTEXT = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        # torch.distributed.checkpoint brings FSDP2, DTensor and the device mesh with it (about
        # 4 CPU-s per process here): the DCP, FSDP and HSDP scripts' ranks fork with them loaded
        _CONTEXT.set_forkserver_preload(["torch", "torch.distributed.run",
                                         "torch.distributed.checkpoint", "tests.preloaded"])
    return _CONTEXT


def fresh_processes_only() -> bool:
    return os.environ.get("BOOK_TEST_FRESH_PROCESS", "") not in ("", "0")


def _child(path: str, argv: list[str], cwd: str, env: dict[str, str], out: str, err: str,
           ignored: tuple[int, ...]) -> None:
    """Runs in the forked child: become `python path argv` and exit with its status. ``ignored``:
    the signals the caller ignores, which a real interpreter it started would inherit ignored (a
    suite started in the background runs with SIGINT ignored; Python then installs no handler)."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    # As a real interpreter's: stdout block-buffered (a file or pipe), stderr line-buffered, and
    # both written through at once under PYTHONUNBUFFERED (tests/launchers.clean_env sets it).
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False, buffering=0 if unbuffered else -1),
                                  encoding="utf-8", write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False, buffering=0 if unbuffered else -1),
                                  encoding="utf-8", line_buffering=True, write_through=unbuffered)
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN if signal.SIGINT in ignored else signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if signal.SIGTERM in ignored else signal.SIG_DFL)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if not any(env.get(name) for name in ("LC_ALL", "LC_CTYPE", "LANG")) and env.get("PYTHONCOERCECLOCALE") != "0":
        os.environ["LC_CTYPE"] = "C.UTF-8"  # what a starting interpreter does in the C locale (PEP 538)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # read by torch's OpenMP at import, so set it here
        import torch
        torch.set_num_threads(int(threads))
    import runpy

    status = 0
    try:
        if path.startswith("-m "):  # python -m MODULE: sys.path[0] is the folder it starts in
            sys.argv = [path, *argv]
            sys.path[0] = os.getcwd()
            sys.modules.pop(path[3:], None)  # preloaded for its imports; runs afresh as __main__
            runpy.run_module(path[3:], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [path, *argv]
            sys.path[0] = os.path.dirname(os.path.abspath(path))
            runpy.run_path(path, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            status = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        status = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - what the interpreter does with any uncaught exception
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
        except Exception as error:  # noqa: BLE001 - as the interpreter at exit: report it, exit 120
            print(f"Exception ignored in: {sys.stdout!r}", file=sys.stderr)
            traceback.print_exception(error, limit=0, file=sys.stderr)
            status = 120
        sys.stderr.flush()
    finally:
        if status < 0:  # as an interpreter killed by an uncaught KeyboardInterrupt
            signal.signal(-status, signal.SIG_DFL)
            os.kill(os.getpid(), -status)
        os._exit(status & 0xFF)


def _command(path: str) -> list[str]:
    """The real interpreter's command line for ``path`` (a script, or "-m MODULE")."""
    return [sys.executable, "-m", path[3:]] if path.startswith("-m ") else [sys.executable, path]


class Forked:
    """A script run forked from the server (:func:`start`); :meth:`wait` gives its result."""

    def __init__(self, path: str, argv: list[str], cwd: str, env: dict[str, str], stdout: str | None):
        self.argv = [*_command(path), *argv]
        self._tmp = tempfile.TemporaryDirectory(prefix="preloaded-")
        self._out = stdout or os.path.join(self._tmp.name, "stdout")
        self._err = os.path.join(self._tmp.name, "stderr")
        ignored = tuple(sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) == signal.SIG_IGN)
        self.process = _context().Process(target=_child, args=(path, argv, cwd, env, self._out, self._err, ignored))
        self.process.start()
        self.pid = self.process.pid

    def wait(self, timeout: float) -> subprocess.CompletedProcess:
        """The result as subprocess.run gives it (``returncode`` negative for a signal; stdout ""
        when it went to the caller's path). Raises subprocess.TimeoutExpired after ``timeout``
        seconds, when the child's session has been killed."""
        try:
            self.process.join(timeout)
            if self.process.is_alive():
                _kill_session(self.pid)
                self.process.join(30)
                raise subprocess.TimeoutExpired(self.argv, timeout, self._read(self._out).encode(),
                                                self._read(self._err).encode())
            return subprocess.CompletedProcess(self.argv, self.process.exitcode, self._read(self._out),
                                               self._read(self._err))
        finally:
            if not self.process.is_alive():
                self._tmp.cleanup()


    def _read(self, path: str) -> str:
        """A file of ours the child wrote ("" for the caller's path, or when it never started)."""
        mine = path.startswith(self._tmp.name) and os.path.exists(path)
        return Path(path).read_text(encoding="utf-8", errors="replace") if mine else ""


def start(path: Path | str, argv: list[str], cwd: Path | str, env: dict[str, str],
          stdout: Path | str | None = None) -> Forked:
    """Start ``python path argv`` in ``cwd`` with exactly ``env`` (``path`` "-m MODULE": ``python
    -m MODULE argv``). ``stdout``: a path the child opens for writing as its stdout (a FIFO the
    caller reads, say) instead of a file of ours."""
    return Forked(str(path), [str(a) for a in argv], str(cwd), dict(env), None if stdout is None else str(stdout))


def run(path: Path | str, argv: list[str], cwd: Path | str, env: dict[str, str],
        timeout: float) -> subprocess.CompletedProcess:
    """``python path argv`` in ``cwd`` with exactly ``env``, to its end: :meth:`Forked.wait`'s
    result, or a real interpreter's where BOOK_TEST_FRESH_PROCESS is set."""
    if fresh_processes_only():
        return subprocess.run([*_command(str(path)), *map(str, argv)], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, start_new_session=True, stdin=subprocess.DEVNULL)
    return start(path, argv, cwd, env).wait(timeout)


def _kill_session(pid: int) -> None:
    """SIGKILL the child and every process it started (they may have sessions of their own)."""
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in family:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
