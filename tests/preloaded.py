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
        _CONTEXT.set_forkserver_preload(["torch", "tests.preloaded"])
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
    # Block-buffered like a real run's pipes; errors unbuffered-ish like Python's stderr.
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
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
    sys.argv = [path, *argv]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    import runpy

    status = 0
    try:
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
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if status < 0:  # as an interpreter killed by an uncaught KeyboardInterrupt
            signal.signal(-status, signal.SIG_DFL)
            os.kill(os.getpid(), -status)
        os._exit(status & 0xFF)


def run(path: Path | str, argv: list[str], cwd: Path | str, env: dict[str, str],
        timeout: float) -> subprocess.CompletedProcess:
    """``python path argv`` in ``cwd`` with exactly ``env``; the result as subprocess.run gives
    it (``returncode`` negative for a signal). Raises subprocess.TimeoutExpired after ``timeout``
    seconds, when the child's session has been killed."""
    path, argv = str(path), [str(a) for a in argv]
    if fresh_processes_only():
        return subprocess.run([sys.executable, path, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, start_new_session=True, stdin=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="preloaded-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        ignored = tuple(sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) == signal.SIG_IGN)
        child = _context().Process(target=_child, args=(path, argv, str(cwd), dict(env), out, err, ignored))
        child.start()
        child.join(timeout)
        if child.is_alive():
            _kill_session(child.pid)
            child.join(30)
            raise subprocess.TimeoutExpired([path, *argv], timeout,
                                            Path(out).read_bytes(), Path(err).read_bytes())
        return subprocess.CompletedProcess([sys.executable, path, *argv], child.exitcode,
                                           Path(out).read_text(encoding="utf-8", errors="replace"),
                                           Path(err).read_text(encoding="utf-8", errors="replace"))


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
