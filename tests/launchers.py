"""Run the book's scripts for real in tests, as separate processes.

Every part's conftest makes a ``launch`` fixture with :func:`launch_fixture` (e.g.
``launch = launch_fixture("network")``); tests then call ``launch.python``, ``launch.torchrun``,
``launch.srun_like`` and ``launch.error_lines`` with a script name inside ``scripts/<part>/``.
Jobs run under ``python -m torch.distributed.run --standalone`` (torchrun; the OS picks the
rendezvous port), or as plain processes with SLURM-like variables. Every launch has a wall-clock
limit and, on expiry, its whole process group is killed, so a hanging script fails its test
instead of hanging the suite.

A test that starts two or more ranks (or a SLURM job) must carry :data:`RANKS`: under
pytest-xdist those tests all run on one worker, one after another, so two jobs never share the
two cores (or a port, or the SLURM cluster). :func:`require_ranks` fails a test that forgot it.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

# Launcher/rank variables that must not leak from the environment pytest runs in (for example a
# SLURM allocation) into the jobs the tests start.
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
              "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NNODES")
_SELFTEST_PREFIXES = ("ALL_REDUCE_BENCH_", "CONNECTIVITY_CHECK_")


RANKS = pytest.mark.xdist_group("ranks")
"""Mark (a test, or a module with ``pytestmark = RANKS``) for tests that start two or more ranks
or a SLURM job; pytest-xdist runs them all on one worker (tests/worker_groups.py)."""

ONE_PROCESS = pytest.mark.one_process
"""Mark a test in a :data:`RANKS` module that starts one process only (a careless-input case): it
leaves the ranks queue and runs with the other files' tests (tests/conftest.py), so the one worker
that runs the jobs is not also running hundreds of quick single-process cases.
:func:`require_ranks` still fails it should it start ranks."""

current_test: pytest.Item | None = None  # set by tests/conftest.py before each test's setup


def require_ranks(what: str) -> None:
    """Fail the running test unless it runs in the :data:`RANKS` group (``what``: what it starts)."""
    item = current_test
    if item is None:
        return
    from tests.worker_groups import group_of
    if group_of(item) != "ranks":
        pytest.fail(f"{item.nodeid} starts {what}: mark it (or its module) with tests.launchers.RANKS "
                    "so that it never runs beside another multi-rank test", pytrace=False)


@dataclass
class Result:
    """Outcome of one launch: exit status and captured text."""
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def import_script(path: Path):
    """The script at ``path`` imported as a module named after its file (registered in
    sys.modules first: dataclasses look their module up while it executes). Scripts import torch
    and other heavy packages inside functions, so this is cheap."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago, below the kernel's ephemeral range: no socket
    that lets the OS pick its port (a connection, a bind to port 0) can take it before the job
    binds it. Ranks jobs run one at a time (:data:`RANKS`), so no other test wants it either."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free TCP port found below the ephemeral range")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Copy of os.environ without launcher variables or self-test hooks, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in _RANK_VARS and not k.startswith(_SELFTEST_PREFIXES)}
    env["OMP_NUM_THREADS"] = "1"  # 2 processes on a 2-core machine: no oversubscription
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _communicate(proc: subprocess.Popen, timeout: float) -> Result:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts its workers in sessions of their own: killing its process group would
        # leave them running, holding the output pipes open, and the test waiting for ever.
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out, err = "(output lost: a grandchild kept the pipes open)", ""
        _timed_out(timeout, out, err)
    return Result(proc.returncode, out, err)


# Variables that torch (or a library it loads) reads once, at import: a run that sets one needs an
# interpreter of its own, since the fork server imported torch without it. CUDA_VISIBLE_DEVICES
# is not one: CUDA reads it when it starts, which the fork server never does.
_READ_AT_IMPORT = ("TORCH_", "PYTORCH_", "CUDA_", "NCCL_", "GLOO_", "MKL_", "KMP_", "GOMP_", "LD_")


def _timed_out(timeout: float, out: bytes | str | None, err: bytes | str | None):
    text = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (out, err)]
    pytest.fail(f"process did not finish within {timeout} s (hang?)\nstdout:\n{text[0]}\nstderr:\n{text[1]}")


def run_python(scripts: Path, script: str, args: list[str], env: dict[str, str] | None = None,
               timeout: float = 60, fresh: bool = False) -> Result:
    """Run ``python <scripts>/<script> args`` (``script`` "-m MODULE": ``python -m MODULE args``) as
    one plain process: forked from the torch-preloaded server (tests/preloaded.py), which gives the
    script what a fresh interpreter would, unless ``fresh`` (the test is about the process itself)
    or ``env`` sets a variable read at import."""
    if not fresh and not any(k.startswith(_READ_AT_IMPORT) and k != "CUDA_VISIBLE_DEVICES" for k in env or {}):
        from tests import preloaded
        path = script if script.startswith("-m ") else scripts / script
        try:
            done = preloaded.run(path, args, cwd=REPO, env=clean_env(env), timeout=timeout)
        except subprocess.TimeoutExpired as err:
            _timed_out(timeout, err.stdout, err.stderr)
        return Result(done.returncode, done.stdout, done.stderr)
    command = [sys.executable, *(["-m", script[3:]] if script.startswith("-m ") else [str(scripts / script)])]
    proc = subprocess.Popen([*command, *args], cwd=REPO, env=clean_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return _communicate(proc, timeout)


def interrupt_when(script: Path, args: list[str], ready, sig: int, cwd: Path = REPO,
                   timeout: float = 60) -> Result:
    """Run ``python <script> args``, read its stdout line by line until ``ready(lines)`` (every
    line so far) is true, send ``sig`` and collect the rest within ``timeout`` s. ``stdout`` of
    the Result holds every line. Fails the test if the script ends before it is ready.

    The script starts with SIGINT and SIGQUIT ignored, as a non-interactive shell starts a
    background job (`cmd &`, and so every process of a suite run that way): a script that stops on
    Ctrl-C only because Python's default handler happened to be installed fails here, whatever
    terminal or shell started the suite."""
    ignoring = ["sh", "-c", 'trap "" INT QUIT; exec "$0" "$@"']  # exec keeps ignored signals ignored
    # Bytes read straight from the pipe (bufsize=0): communicate() reads the file descriptor, so
    # lines a buffered reader had already taken in would be lost from the Result.
    proc = subprocess.Popen([*ignoring, sys.executable, str(script), *args], cwd=cwd, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                            start_new_session=True)
    lines: list[str] = []
    pending = b""  # the start of a line not ended yet

    def text(res: Result) -> tuple[str, str]:
        out, err = (x.decode(errors="replace") if isinstance(x, bytes) else x for x in (res.stdout, res.stderr))
        return "".join(lines) + pending.decode(errors="replace") + out, err
    try:
        while not lines or not ready(lines):
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                res = _communicate(proc, timeout)
                out, err = text(res)
                pytest.fail(f"ended before it was interrupted (status {res.returncode})\n"
                            f"stdout:\n{out}\nstderr:\n{err}")
            *complete, pending = (pending + chunk).split(b"\n")
            lines += [line.decode(errors="replace") + "\n" for line in complete]
        proc.send_signal(sig)
        res = _communicate(proc, timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return Result(res.returncode, *text(res))


def run_torchrun(scripts: Path, script: str, args: list[str], nproc: int = 2,
                 env: dict[str, str] | None = None, timeout: float = 90) -> Result:
    """Run ``python -m torch.distributed.run --standalone --nproc-per-node N <scripts>/<script>``
    (the rendezvous store listens on a port the OS chose, and the ranks use that store). The
    launcher itself forks from the torch-preloaded server (:func:`run_python`'s rules); its ranks
    are the real interpreters it starts."""
    if nproc > 1:
        require_ranks(f"{nproc} ranks of {script}")
    torchrun_args = ["--standalone", "--nproc-per-node", str(nproc), str(scripts / script), *args]
    return run_python(scripts, "-m torch.distributed.run", torchrun_args, env=env, timeout=timeout)


def run_srun_like(scripts: Path, script: str, args: list[str], ntasks: int = 2,
                  env: dict[str, str] | None = None, timeout: float = 90) -> list[Result]:
    """Start ``ntasks`` plain ``python script`` processes with the variables ``srun`` sets
    (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) plus MASTER_ADDR/MASTER_PORT; return the
    results in rank order. The port is one that was free a moment before; rank 0 binds it."""
    if ntasks > 1:
        require_ranks(f"{ntasks} ranks of {script}")
    port = str(free_port())
    procs = []
    for rank in range(ntasks):
        rank_env = clean_env({"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(ntasks), "SLURM_LOCALID": str(rank),
                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, **(env or {})})
        # Real interpreters, as srun starts them, not forks of the preloaded server: the ranks
        # of a real job import torch and join at different times, and these tests are about that.
        procs.append(subprocess.Popen([sys.executable, str(scripts / script), *args], cwd=REPO, env=rank_env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    return [_communicate(p, timeout) for p in procs]


def error_lines(text: str) -> list[str]:
    """Lines of ``text`` that are our scripts' (or argparse's) error messages."""
    return [line for line in text.splitlines() if ": error: " in line]


class Launchers:
    """What the ``launch`` fixture hands to tests: the launchers bound to ``scripts/<part>/``
    (test modules do not import conftest, which could clash with other folders' conftests)."""

    def __init__(self, part: str):
        self.repo = REPO
        self.scripts = REPO / "scripts" / part

    def python(self, script: str, args: list[str], **kwargs) -> Result:
        return run_python(self.scripts, script, args, **kwargs)

    def torchrun(self, script: str, args: list[str], **kwargs) -> Result:
        return run_torchrun(self.scripts, script, args, **kwargs)

    def srun_like(self, script: str, args: list[str], **kwargs) -> list[Result]:
        return run_srun_like(self.scripts, script, args, **kwargs)

    error_lines = staticmethod(error_lines)


def launch_fixture(part: str):
    """A session-scoped ``launch`` fixture for the scripts in ``scripts/<part>/``."""

    @pytest.fixture(scope="session")
    def launch() -> Launchers:
        return Launchers(part)

    return launch
