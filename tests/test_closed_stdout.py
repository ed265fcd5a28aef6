"""``script | head -1`` is no error for the distributed scripts either (CONTRIBUTING.md, "Script
contract": a reader that stops reading is no error).

Each of them has a catch-all of its own around the run (one line and a hard exit, so that no rank
hangs); it must not turn the BrokenPipeError of a reader that left into ``error: BrokenPipeError``
and status 1, which fails a ``set -o pipefail`` job whose reader wanted only the first line.
Each script runs as ``python script`` (world size 1, CPU, gloo), forked from the torch-preloaded
server (tests/preloaded.py, which also flushes stdout at exit as the interpreter does), or under
torchrun with two ranks where it refuses one; its stdout is a pipe (a FIFO for a forked run) whose
reader closes it after the first line. The output of every case goes on well after that line, so
the script does write to the closed pipe.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests import preloaded
from tests.launchers import RANKS, REPO, clean_env, error_lines, require_ranks

SMALL_MODEL = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64",
               "--batch-size", "4", "--vocab", "256"]
LINES_PY = "import time\nfor i in range(200):\n    print(f'line {i}', flush=True)\n    time.sleep(0.01)\n"

# (script in scripts/, its arguments ({tmp}: the test's folder), ranks). Every case prints its first
# line, then works (milliseconds at least) before the next one.
CASES = [
    ("network/all_reduce_bench.py", ["--sizes", "1K", "4K", "16K", "64K", "--iters", "2",
                                     "--warmup", "1", "--backend", "gloo"], 1),
    ("network/distributed_connectivity_check.py", ["--backend", "gloo", "--size", "4K"], 1),
    ("training/train_example.py", [*SMALL_MODEL, "--steps", "5", "--log-every", "1"], 1),
    ("training/dcp_resume_example.py", ["--steps", "12", "--ckpt-dir", "{tmp}/ckpt"], 1),
    ("debug/find_bad_rank.py", ["--device", "cpu", "--timeout-s", "10", "--bandwidth-bytes", "64K",
                                "--iters", "3", "--warmup", "1", "--matmul-n", "64",
                                # a 64x64 matmul varies 3x on a busy CPU: not a slow host
                                "--min-excess-ms", "20"], 2),
    ("debug/rank_line_tracer.py", ["--out", "{tmp}/trace", "--", "{tmp}/lines.py"], 1),
    # 3 x 5000 lines: more than a pipe holds, so its writes outlast the reader
    ("debug/print_rank_ordered.py", ["--lines", "5000"], 1),
    ("debug/hanging_collective.py", ["--mode", "ok", "--timeout-s", "30"], 2),
    ("storage/checkpoint_io_bench.py", ["--dir", "{tmp}", "--size", "2M", "--iters", "1",
                                        "--dtype", "float32"], 1),
    ("orchestration/train_requeue.py", ["--ckpt-dir", "{tmp}/requeue", "--steps", "100",
                                        "--save-every", "10", "--log-every", "1"], 1),
]


def first_line_then_close(read_fd: int, ended, limit: float) -> bytes:
    """Read ``read_fd`` up to its first newline, then close it, as ``head -1`` does. ``ended()``
    says how the writer ended, for the message when it closes stdout before its first line."""
    got, end = b"", time.monotonic() + limit
    try:
        while b"\n" not in got:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                pytest.fail(f"no line on stdout within {limit} s")
            chunk = os.read(read_fd, 4096)
            if not chunk:
                pytest.fail(f"stdout closed before its first line: {ended()}")
            got += chunk
    finally:
        os.close(read_fd)
    return got.split(b"\n", 1)[0]


@pytest.mark.parametrize("script, args, ranks", [
    pytest.param(script, args, ranks, id=script.split("/")[1], marks=[RANKS] if ranks > 1 else [])
    for script, args, ranks in CASES])
def test_a_reader_that_closes_after_the_first_line_is_no_error(script, args, ranks, tmp_path):
    (tmp_path / "lines.py").write_text(LINES_PY)
    argv = [str(REPO / "scripts" / script), *(a.replace("{tmp}", str(tmp_path)) for a in args)]
    # CUDA_VISIBLE_DEVICES is read when CUDA starts, not at import: the fork server honours it too.
    env = clean_env({"CUDA_VISIBLE_DEVICES": ""})
    if ranks == 1 and not preloaded.fresh_processes_only():
        status, err = _forked(argv, env, tmp_path)
    else:
        if ranks > 1:
            require_ranks(f"{ranks} ranks of {script}")
            argv = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *argv]
        status, err = _real(argv, env, tmp_path)
    assert "BrokenPipe" not in err and "Traceback" not in err, err
    assert not error_lines(err), err
    assert status == 0, err


def _forked(argv: list[str], env: dict[str, str], tmp_path) -> tuple[int, str]:
    """A one-rank run forked from the torch-preloaded server (tests/preloaded.py), whose stdout is
    a FIFO that this side reads up to the first line, then closes."""
    fifo = tmp_path / "stdout.fifo"
    os.mkfifo(fifo)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # before the child opens it for writing
    run = preloaded.start(argv[0], argv[1:], tmp_path, env, stdout=fifo)
    try:
        first = first_line_then_close(read_fd, lambda: run.wait(0).stderr, 90)
        done = run.wait(120)
    except subprocess.TimeoutExpired:
        pytest.fail("still running 120 s after its reader left (hang?)")
    assert first.strip(), "the first line is empty"
    return done.returncode, done.stderr


def _real(argv: list[str], env: dict[str, str], tmp_path) -> tuple[int, str]:
    """The run as its own interpreter (or torchrun's), stdout a pipe read up to the first line."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, *argv], cwd=tmp_path, stdout=write_fd, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    os.close(write_fd)
    try:
        first = first_line_then_close(read_fd, lambda: f"(status {proc.wait()}) {proc.stderr.read()}", 90)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("still running 120 s after its reader left (hang?)")
    finally:
        if proc.poll() is None:  # torchrun's workers run in sessions of their own
            for child in psutil.Process(proc.pid).children(recursive=True):
                child.kill()
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert first.strip(), "the first line is empty"
    return proc.returncode, err
