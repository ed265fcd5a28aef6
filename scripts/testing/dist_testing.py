#!/usr/bin/env python
"""dist_testing.py: helpers for testing distributed PyTorch code under pytest: torchrun with a deadline, process-tree cleanup, GPU marks, tolerances per dtype.

Copy this one file into your tests folder and import what you need (standard library only at
import time; torch, pytest and, optionally, psutil where a function uses them):

- ``free_port()``: a TCP port on 127.0.0.1 that was free a moment ago (prefer ``--standalone``).
- ``run_torchrun(script, nproc, args, timeout_s)``: ``python -m torch.distributed.run
  --standalone --nproc-per-node N script args`` in a session of its own, without the launcher
  variables of the calling job; past ``timeout_s`` seconds the whole process tree is killed. Returns
  a ``Result`` (``returncode``, ``stdout``, ``stderr``, ``seconds``, ``timed_out``; ``tail()`` is
  the message for a failed assert).
- ``kill_tree(pid)``: freeze a process and every descendant (SIGSTOP), then SIGKILL them all, by
  id: torchrun's workers run in sessions of their own, so its process group alone misses them.
  Descendants are found with psutil where it is installed, else in Linux's /proc.
- ``requires_gpus(n)``: a pytest decorator: mark ``gpu``; skip, with the reason, where fewer than
  n CUDA GPUs are visible; fail instead when ``DIST_TESTING_REQUIRE_GPUS`` is set (a GPU runner).
- ``assert_close_for(actual, expected, dtype)``: ``torch.testing.assert_close`` with the
  tolerances of the dtype the computation ran in (``TOLERANCES``: torch's own defaults), which may
  differ from the dtype of the tensors compared.

From the command line it checks itself, or runs one job with a deadline::

    python dist_testing.py --check
    python dist_testing.py --nproc 2 --timeout-s 300 train.py --steps 10

    # in a test (tests/test_train.py, with dist_testing.py beside it)
    from dist_testing import assert_close_for, requires_gpus, run_torchrun
    def test_two_ranks(tmp_path):
        res = run_torchrun("train.py", nproc=2, args=["--steps", "3"], timeout_s=60)
        assert res.returncode == 0, res.tail()

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/testing/dist_testing.py --check
    free_port: 127.0.0.1:30396 binds
    kill_tree: 3 processes (one in a session of its own) gone in 0.02 s
    tolerances: the table equals torch.testing's defaults for float16, bfloat16, float32, float64
    run_torchrun: 2 ranks of gloo all_reduce gave [3.0, 3.0] in 7.1 s; a sleeping job was killed after 2 s
    dist_testing.py: all 4 checks passed

Exit status: 0 done (check: every check passed; run: the job exited 0), 1 a check failed or the
job failed or outlived --timeout-s (the tail of its output is printed), 2 usage, 130/143
interrupted (the job's whole tree is killed first).
"""  # noqa: E501 - the summary line is the Scripts appendix entry

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

PROG = "dist_testing.py"
# Variables of the job pytest itself may run in (a SLURM allocation, a torchrun): a job started by a
# test must not inherit them, or its ranks would join the outer job's rendezvous.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
               "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
REQUIRE_GPUS_ENV = "DIST_TESTING_REQUIRE_GPUS"
# rtol, atol per dtype: torch.testing.assert_close's defaults (torch/testing/_comparison.py,
# _DTYPE_PRECISIONS, torch 2.13; https://docs.pytorch.org/docs/stable/testing.html). Other dtypes
# (integers, bool) are compared exactly, as torch does; a float8 has no default: give one.
TOLERANCES = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5),
              "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}
KILL_WAIT_S = 10.0


# --- ports and processes -------------------------------------------------------------------------

def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing held a moment ago, below the kernel's ephemeral range
    (/proc/sys/net/ipv4/ip_local_port_range), where no connection or bind to port 0 can take it
    before your job binds it. Something else may still bind it first: where the launcher can pick
    its own port (``torchrun --standalone``), let it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = random.randrange(10000, max(low, 10001))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free TCP port on {host} between 10000 and {low}")


def children(pid: int) -> list[int]:
    """The ids of the direct children of ``pid`` (psutil, else Linux's /proc/PID/stat)."""
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        with contextlib.suppress(psutil.Error):
            return [c.pid for c in psutil.Process(pid).children()]
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:   # the field after the state
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (a dead process whose parent has not reaped it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def kill_tree(pid: int, sig: int = signal.SIGKILL, wait_s: float = KILL_WAIT_S) -> list[int]:
    """Stop ``pid`` and all its descendants, then send them ``sig``; return the ids signalled once
    all are gone (or ``wait_s`` has passed). Each process is frozen (SIGSTOP) before its children
    are listed, so none can start another, or be restarted by torchrun's agent, while the tree is
    walked; processes are named by id, never by name, so nothing the caller did not start is hit.
    A process that left the tree before the walk (a daemon that double-forked) is not found."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in tree:
            continue
        try:
            os.kill(p, signal.SIGSTOP)
        except (ProcessLookupError, PermissionError):
            continue
        tree.append(p)
        todo.extend(children(p))
    for p in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)
            if sig != signal.SIGKILL:
                os.kill(p, signal.SIGCONT)  # a stopped process does not handle SIGTERM until it runs
    end = time.monotonic() + wait_s
    while any(alive(p) for p in tree) and time.monotonic() < end:
        time.sleep(0.01)
    return tree


@dataclasses.dataclass
class Result:
    """One job: its exit status (None when it was killed at its deadline), output and duration."""
    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, lines: int = 40) -> str:
        """What went wrong, for ``assert res.ok, res.tail()``: the status, then the last ``lines``
        lines of stdout and of stderr (a rank's traceback is at the end of a long log)."""
        if self.timed_out:
            head = f"killed after {self.seconds:.1f} s (its deadline)"
        else:
            head = f"exit status {self.returncode} after {self.seconds:.1f} s"
        parts = [f"{' '.join(self.command)}: {head}"]
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            kept = text.splitlines()[-lines:]
            parts.append(f"--- last {len(kept)} lines of {name} ---\n" + "\n".join(kept))
        return "\n".join(parts)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """os.environ without the launcher variables, one OpenMP thread per rank unless set, unbuffered
    Python output (a killed rank's last lines are then in the log), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("SLURM_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_command(command: list[str], timeout_s: float, env: dict[str, str] | None = None,
                cwd: str | None = None) -> Result:
    """Run ``command`` in a session of its own with its output in temporary files (a pipe held
    open by a grandchild could block the reader); past ``timeout_s``, or when the caller is
    interrupted, kill its whole tree."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = start_process(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                env=clean_env(env), cwd=cwd, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc.pid)
            proc.wait()
        except BaseException:  # Ctrl-C, SIGTERM, a pytest-timeout failure: the job goes too
            kill_tree(proc.pid)
            proc.wait()
            raise
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    return Result(command, None if timed_out else proc.returncode, texts[0], texts[1],
                  time.monotonic() - start, timed_out)


def run_torchrun(script: str, nproc: int = 2, args: list[str] | tuple = (), timeout_s: float = 120,
                 env: dict[str, str] | None = None, cwd: str | None = None) -> Result:
    """``python -m torch.distributed.run --standalone --nproc-per-node NPROC SCRIPT ARGS``: the
    rendezvous store binds a port the OS picks, so parallel tests do not collide on one."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               str(nproc), str(script), *map(str, args)]
    return run_command(command, timeout_s, env, cwd)


# --- pytest and torch ----------------------------------------------------------------------------

def gpu_count() -> int:
    """CUDA GPUs visible to this process (CUDA_VISIBLE_DEVICES applies); 0 without torch."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def requires_gpus(n: int = 1):
    """Decorator for a test: mark it ``gpu`` (register the mark in pytest.ini) and skip it with the
    reason where fewer than ``n`` GPUs are visible, or fail it when DIST_TESTING_REQUIRE_GPUS is set,
    so that a GPU runner that lost its GPUs cannot pass by skipping everything."""
    import pytest

    def decorate(test):
        test = pytest.mark.gpu(test)
        have = gpu_count()
        if have >= n:
            return test
        why = f"needs {n} CUDA GPU{'s' if n > 1 else ''}, {have} visible"
        if not os.environ.get(REQUIRE_GPUS_ENV):
            return pytest.mark.skip(reason=why)(test)

        @functools.wraps(test)      # keeps the fixtures' names and the marks
        def fail(*args, **kwargs):
            pytest.fail(f"{why}, and {REQUIRE_GPUS_ENV} is set", pytrace=False)
        return fail
    return decorate


def tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol) for results computed in ``dtype`` (a torch.dtype or its name)."""
    name = str(dtype).removeprefix("torch.")
    if name in TOLERANCES:
        return TOLERANCES[name]
    if name.startswith("float") or name.startswith("complex"):
        raise ValueError(f"no default tolerance for {name}: pass rtol and atol to torch.testing.assert_close")
    return 0.0, 0.0


def assert_close_for(actual, expected, dtype=None, scale: float = 1.0, **kwargs) -> None:
    """torch.testing.assert_close(actual, expected) with the tolerances of ``dtype`` (default:
    ``actual``'s), times ``scale`` (for a result that accumulates many rounding errors, a long sum
    or many steps). Compare a bfloat16 run upcast to float32 with ``dtype=torch.bfloat16``: the
    float32 defaults would be about 12,000 times too strict."""
    import torch
    rtol, atol = tolerances(dtype if dtype is not None else actual.dtype)
    kwargs.setdefault("check_dtype", False)
    torch.testing.assert_close(actual, expected, rtol=rtol * scale, atol=atol * scale, **kwargs)


# --- the self-check ------------------------------------------------------------------------------

ALL_REDUCE = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=30))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank", dist.get_rank(), "sum", t.item(), flush=True)
dist.destroy_process_group()
"""
SLEEPER = """import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print("started", flush=True)
time.sleep(300)
"""


def wait_for_children(pid: int, count: int, timeout_s: float) -> list[int]:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        found = children(pid)
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise ScriptError(f"kill_tree: the test tree did not start {count} children within {timeout_s:g} s")


def check(timeout_s: float) -> list[str]:
    """Each helper once, for real; returns one line per check, raises ScriptError on a failure."""
    lines = []
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    lines.append(f"free_port: 127.0.0.1:{port} binds")

    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        kids = wait_for_children(proc.pid, 2, timeout_s)
        start = time.monotonic()
        killed = kill_tree(proc.pid)
        proc.wait(timeout=KILL_WAIT_S)
        left = [p for p in [proc.pid, *kids] if alive(p)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    if left or sorted(killed) != sorted([proc.pid, *kids]):
        raise ScriptError(f"kill_tree: processes {left} survived (signalled {killed})")
    lines.append(f"kill_tree: {len(killed)} processes (one in a session of its own) gone in "
                 f"{time.monotonic() - start:.2f} s")

    from torch.testing._comparison import _DTYPE_PRECISIONS  # private: the check is that it still agrees
    theirs = {str(d).removeprefix("torch."): v for d, v in _DTYPE_PRECISIONS.items()}
    differ = [name for name, tol in TOLERANCES.items() if theirs.get(name) != tol]
    if differ:
        raise ScriptError(f"tolerances: torch.testing's defaults differ for {', '.join(differ)}: "
                          + ", ".join(f"{n} {theirs.get(n)}" for n in differ))
    lines.append(f"tolerances: the table equals torch.testing's defaults for {', '.join(TOLERANCES)}")

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("all_reduce.py", ALL_REDUCE), ("sleeper.py", "import time\ntime.sleep(300)\n")):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        res = run_torchrun(os.path.join(tmp, "all_reduce.py"), 2, timeout_s=timeout_s, cwd=tmp)
        sums = sorted(float(line.split()[-1]) for line in res.stdout.splitlines() if line.startswith("rank "))
        if not res.ok or sums != [3.0, 3.0]:
            raise ScriptError(f"run_torchrun: the gloo job failed: {res.tail(5)}")
        hung = run_torchrun(os.path.join(tmp, "sleeper.py"), 2, timeout_s=2, cwd=tmp)
        if not hung.timed_out:
            raise ScriptError(f"run_torchrun: a sleeping job was not killed: {hung.tail(5)}")
    lines.append(f"run_torchrun: 2 ranks of gloo all_reduce gave {sums} in {res.seconds:.1f} s; "
                 f"a sleeping job was killed after {hung.seconds:.0f} s")
    return lines


# --- the command line ----------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Check these test helpers on this machine "
                                "(--check), or run one torchrun job with a deadline that kills its "
                                "whole process tree.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--check", action="store_true", help="run each helper once (seconds, on CPU)")
    p.add_argument("--nproc", type=number(int, 1, 1024), default=2, help="ranks (default 2)")
    p.add_argument("--timeout-s", type=number(float, 0, 7 * 86400, lo_open=True), default=None,
                   help="deadline, seconds (default 600; 60 for the gloo job of --check)")
    p.add_argument("--tail", type=number(int, 1, 10000), default=40,
                   help="lines of stdout and stderr shown when the job fails (default 40)")
    p.add_argument("script", nargs="?", type=nonempty, help="the script torchrun runs")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    opts = parser.parse_args(argv)
    if opts.check == bool(opts.script):
        parser.error("give --check, or a script to run (and its arguments)")
    on_stop_signals()
    if opts.check:
        for line in check(opts.timeout_s or 60):
            say(line)
        say(f"{PROG}: all 4 checks passed")
        return EXIT_OK
    if not os.path.isfile(opts.script):
        raise ScriptError(f"script {opts.script}: not a file", EXIT_USAGE)
    timeout_s = opts.timeout_s or 600
    res = run_torchrun(opts.script, opts.nproc, opts.args, timeout_s)
    if not res.ok:
        sys.stderr.write(res.tail(opts.tail) + "\n")
        raise ScriptError(f"{opts.script} was killed at --timeout-s {timeout_s:g}" if res.timed_out
                          else f"{opts.script} exited with status {res.returncode} after {res.seconds:.1f} s")
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    say(f"{PROG}: {opts.nproc} rank{'s' if opts.nproc > 1 else ''} of {opts.script} exited 0 in {res.seconds:.1f} s")
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
