"""Notebook kernels for nbval, forked from a server that imported torch, numpy, matplotlib and
ipykernel once (the notebooks' counterpart of tests/preloaded.py).

A fresh kernel spends about 2 s of CPU starting ipykernel and importing torch, numpy and
matplotlib before the first cell computes anything, and the suite starts one per notebook and
language. With this, each pytest worker that runs notebooks starts one server; nbval starts the
kernel "book-preloaded", whose command is this file as a *launcher*: it hands the kernel's
connection file, environment, working directory and stdio to the server, which forks a child
that becomes ``python -m ipykernel_launcher -f CONNECTION_FILE`` would. The launcher stays the
process that jupyter_client manages: it passes on the signals it gets (an interrupt is SIGINT)
and exits with the kernel's status; when the launcher dies, the server kills its kernel.

A child gets what a fresh kernel would: ``sys.argv``, the environment, the working directory,
stdio, default signal handlers, the settings ipykernel and matplotlib read from the environment
when imported (the parent process to watch; the backend: the server set MPLBACKEND as ipykernel
does before it imported matplotlib). Not the same: modules already in
``sys.modules`` (a notebook still has to import what it uses) and the random state of the
server's Python hash seed, the same for every kernel of one server. Added: a figure shown with
text drawn over other text is an error of its cell (tests/notebooks/label_overlap.py).

tests/conftest.py switches nbval to this kernel when the session collects notebooks; without it
(``pytest notebooks/x.ipynb`` alone, or BOOK_TEST_FRESH_PROCESS=1), pytest.ini's
``--nbval-current-env`` starts a plain kernel.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

KERNEL_NAME = "book-preloaded"
SOCKET_ENV = "BOOK_KERNEL_SOCKET"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # what ipykernel puts in MPLBACKEND
_label_overlap = None  # the server loads tests/notebooks/label_overlap.py; each kernel installs its check


# --- the session's side: tests/conftest.py ------------------------------------------------------

def use_preloaded_kernels(config) -> None:
    """Have nbval start the kernel KERNEL_NAME, from a server of this process's own; both end
    with the session."""
    folder, stop = start_server()
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (folder, os.environ.get("JUPYTER_PATH")) if p)
    config.option.nbval_current_env = False
    config.option.nbval_kernel_name = KERNEL_NAME
    config.add_cleanup(stop)


def start_server():
    """Start a server and write the kernel's spec under ``FOLDER/kernels/`` (put FOLDER on
    JUPYTER_PATH, where jupyter_client looks for kernels). Returns FOLDER and the function that
    stops the server and removes FOLDER."""
    import shutil
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="book-kernels-")
    path = os.path.join(folder, "server.sock")
    spec = os.path.join(folder, "kernels", KERNEL_NAME)
    os.makedirs(spec)
    with open(os.path.join(spec, "kernel.json"), "w", encoding="utf-8") as out:
        json.dump({"argv": [sys.executable, os.path.abspath(__file__), "-f", "{connection_file}"],
                   "display_name": "Python 3 (forked from a preloaded server)", "language": "python",
                   "env": {SOCKET_ENV: path}}, out)
    server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", path], stdin=subprocess.PIPE)

    def stop() -> None:
        server.stdin.close()  # the server ends when its stdin closes
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)

    return folder, stop


# --- the launcher: the kernel's process as jupyter_client sees it -------------------------------

def launch(argv: list[str], wait_s: float = 60) -> int:
    """Have the server fork the kernel for ``argv`` (``-f CONNECTION_FILE``), pass signals on to
    it and return its exit status. Without a server (none named, or it never answers), become a
    plain kernel."""
    server = _connect(os.environ.get(SOCKET_ENV, ""), wait_s)
    if server is None:
        os.execv(sys.executable, [sys.executable, "-m", "ipykernel_launcher", *argv])
    request = {"argv": ["ipykernel_launcher", *argv], "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
    pid = int(server.recv(64))
    for sig in SIGNALS:
        signal.signal(sig, lambda number, frame: os.kill(pid, number))
    status = server.recv(64)  # the server sends the kernel's exit status when it has ended
    return int(status) if status else 1


def _connect(path: str, wait_s: float) -> socket.socket | None:
    """A connection to the server at ``path``, which binds it once it has imported everything
    (seconds after the session started it); None when there is none within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while path:
        try:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            server.connect(path)
            return server
        except (FileNotFoundError, ConnectionRefusedError):
            server.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
    return None


# --- the server: one per pytest worker --------------------------------------------------------

def serve(path: str) -> None:
    """Import what kernels use, then fork a kernel for each launcher that connects to ``path``.
    Ends when its stdin closes (the pytest worker that started it has gone)."""
    import threading

    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    import ipykernel.kernelapp  # noqa: F401 - imported once, here
    import matplotlib
    import matplotlib.font_manager  # noqa: F401 - builds the font list
    import numpy  # noqa: F401
    import torch  # noqa: F401

    global _label_overlap
    import importlib.util

    spec = importlib.util.spec_from_file_location("label_overlap", Path(__file__).parent / "notebooks/label_overlap.py")
    _label_overlap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_label_overlap)
    sys.path.pop(0)  # this file's folder; `python -m ipykernel_launcher` puts none there
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".tmp")
    listener.listen(16)
    os.rename(path + ".tmp", path)  # launchers connect only to a server that is ready
    while True:
        launcher, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(launcher, 1 << 20, 3)
        pid = os.fork()
        if pid == 0:
            listener.close()
            launcher.close()
            _become_kernel(json.loads(message), fds)
        for fd in fds:
            os.close(fd)
        launcher.sendall(str(pid).encode())
        threading.Thread(target=_watch, args=(launcher, pid), daemon=True).start()


def _watch(launcher: socket.socket, pid: int) -> None:
    """Send the kernel's exit status to its launcher; kill the kernel if the launcher goes first."""
    import select

    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            try:
                launcher.sendall(str(code if code >= 0 else 128 - code).encode())
            except OSError:
                pass
            launcher.close()
            return
        readable, _, _ = select.select([launcher], [], [], 0.1)
        if readable and not launcher.recv(1):
            os.kill(pid, signal.SIGKILL)


def _become_kernel(request: dict, fds: list[int]) -> None:
    """In the forked child: take the launcher's stdio, folder, environment and arguments, run
    ipykernel as ``python -m ipykernel_launcher`` would, and exit with its status."""
    import io

    import matplotlib

    code = 1
    try:
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = io.TextIOWrapper(open(0, "rb", closefd=False))
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), write_through=True)
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        matplotlib.rcParams["backend"] = os.environ.get("MPLBACKEND") or INLINE_BACKEND
        import importlib.util

        # as `python -m ipykernel_launcher` has it: the module's file
        sys.argv = [importlib.util.find_spec("ipykernel_launcher").origin, *request["argv"][1:]]
        from ipykernel.kernelapp import launch_new_instance

        _label_overlap.check_figures_when_shown()

        # ipykernel reads the parent process to watch (the kernel exits when jupyter_client's
        # process has gone) from JPY_PARENT_PID when it is imported: give it as an option.
        parent = os.environ.get("JPY_PARENT_PID", "")
        handle = [f"--IPKernelApp.parent_handle={parent}"] if parent.isdigit() else []
        launch_new_instance(argv=[*sys.argv[1:], *handle])
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - report it as an uncaught exception would be
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
    else:
        sys.exit(launch(sys.argv[1:]))
