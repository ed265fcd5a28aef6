"""Tests of scripts/debug/rank_debugger.py: pdb on one rank of a 2-rank gloo job, driven for real.

The job test starts torchrun on a pseudo-terminal (``pty``), as a reader's shell would, and types
pdb commands at rank 1 while rank 0 waits in the store; then the job's own ``breakpoint_on_rank``
serves rank 1's pdb over TCP, and the script's client talks to it: a wrong token is refused, the
right one gets a prompt, and the job finishes. The waiting rank's
deadline is tested on a lone rank 0 of 2 whose rank 1 never comes (the store is this test's own).
The careless-input table runs the script the way a tired user would.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta

import psutil
import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import RANKS, REPO, clean_env, error_lines, import_script, require_ranks

SCRIPT = REPO / "scripts" / "debug" / "rank_debugger.py"

# A 2-rank gloo job that stops rank 1 itself at line 8, its pdb served over TCP behind the token
# in the file argv[1].
JOB = """import sys
import torch
import torch.distributed as dist
from rank_debugger import breakpoint_on_rank
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1) * (rank + 1)
breakpoint_on_rank(1, timeout_s=30, remote=True, token_file=sys.argv[1])
dist.all_reduce(t)
print(f"rank {rank}: sum {t.item():g}", flush=True)
dist.destroy_process_group()
"""


def torchrun(args: list[str], cwd, **popen) -> subprocess.Popen:
    require_ranks("2 ranks of rank_debugger.py")
    env = clean_env({"PYTHONPATH": str(SCRIPT.parent)})
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                             "2", *args], cwd=cwd, env=env, start_new_session=True, **popen)


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read_until(fd: int, pattern: str, seen: bytearray, limit_s: float = 30) -> str:
    """Read ``fd`` into ``seen`` until ``pattern`` matches the text read so far (or it closes)."""
    end = time.monotonic() + limit_s
    while not re.search(pattern, seen.decode(errors="replace")):
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            pytest.fail(f"no {pattern!r} within {limit_s} s:\n{seen.decode(errors='replace')}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:             # EIO: every process left the terminal
            chunk = b""
        if not chunk:
            break
        seen += chunk
    return seen.decode(errors="replace")


@RANKS
@pytest.mark.slow
def test_pdb_on_one_rank_through_the_terminal_then_over_tcp(tmp_path):
    """Rank 1 stops before the job's first line and reads pdb commands from torchrun's terminal
    while rank 0 waits; after ``c`` the job's own ``breakpoint_on_rank`` serves rank 1's pdb on
    127.0.0.1 behind a token in a 0600 file: the client with a wrong token gets one line and
    status 1, the right one a prompt; after ``c`` both ranks finish the all-reduce."""
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "wrong").write_text("not-the-token\n")
    main, tty = pty.openpty()
    proc = torchrun([str(SCRIPT), "--rank", "1", "--timeout-s", "60", "--", "job.py", "tok"], tmp_path,
                    stdin=tty, stdout=tty, stderr=tty)
    os.close(tty)
    seen = bytearray()
    try:
        text = read_until(main, r"\(Pdb\) ", seen)
        assert "rank 1 of 2" in text and "is in pdb" in text and "job.py(1)<module>()" in text
        os.write(main, b"b 8\n")
        read_until(main, r"Breakpoint 1 at .*job\.py:8[\s\S]*\(Pdb\) ", seen)
        os.write(main, b"c\n")             # rank 0 goes on, to the job's breakpoint_on_rank
        read_until(main, r"job\.py\(8\)[\s\S]*\(Pdb\) ", seen)
        os.write(main, b"p rank, t.item()\n")
        read_until(main, r"\(1, 2\.0\)[\s\S]*\(Pdb\) ", seen)
        os.write(main, b"c\n")
        text = read_until(main, r"connect (127\.0\.0\.1:\d+) --token-file", seen)
        address = re.search(r"connect (127\.0\.0\.1:\d+) --token-file", text).group(1)
        assert (tmp_path / "tok").stat().st_mode & 0o777 == 0o600
        client = [sys.executable, str(SCRIPT), "connect", address, "--token-file"]
        wrong = subprocess.run([*client, "wrong"], capture_output=True, text=True, timeout=30, cwd=tmp_path)
        right = subprocess.run([*client, "tok"], input="p rank\nc\n", capture_output=True, text=True,
                               timeout=60, cwd=tmp_path)
        proc.wait(timeout=30)
        text = read_until(main, r"rank 0: sum 3[\s\S]*rank 1: sum 3|rank 1: sum 3[\s\S]*rank 0: sum 3", seen)
    finally:
        kill(proc)
        os.close(main)
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert error_lines(wrong.stderr) == [f"rank_debugger.py: error: {address} refused the token in "
                                         "wrong (wrong token)"]
    assert "refused a client from 127.0.0.1 (wrong token)" in text
    assert right.returncode == 0, right.stderr
    assert "connected to pdb on rank 1 of 2" in right.stdout and "(Pdb) 1\n" in right.stdout
    assert proc.returncode == 0 and "Traceback" not in text, text


@pytest.mark.slow
def test_a_waiting_rank_ends_in_one_line(tmp_path, launch):
    """Rank 0 of 2 whose rank 1 never resumes: one line naming rank 1 and the time, status 1, well
    within its timeout plus start-up; told that rank 1 quit pdb, it stops at once, in one line."""
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    (tmp_path / "job.py").write_text("print('ran')\n")
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    args = ["--rank", "1", "--timeout-s", "0.5", "--", str(tmp_path / "job.py")]
    start = time.monotonic()
    res = launch.python("rank_debugger.py", args, env=env, timeout=30)
    assert time.monotonic() - start < 10
    assert res.returncode == 1 and "ran" not in res.stdout and "Traceback" not in res.output
    assert error_lines(res.stderr) == ["rank_debugger.py: error: rank 0 waited 0.5 s for rank 1 (in pdb) to "
                                       "resume; nobody did"]
    store.set(f"{import_script(SCRIPT).KEY}//0/1", "quit")    # what rank 1's `q` writes
    res = launch.python("rank_debugger.py", args, env=env, timeout=30)
    assert res.returncode == 1 and "ran" not in res.stdout
    assert error_lines(res.stderr) == ["rank_debugger.py: error: rank 0 stops: rank 1 (in pdb) quit"]


def test_without_a_terminal_it_serves_pdb_over_tcp(tmp_path, launch):
    """A lone rank with no terminal says so and serves pdb instead; nobody connects: one line."""
    (tmp_path / "job.py").write_text("print('ran')\n")
    res = launch.python("rank_debugger.py", ["--rank", "0", "--timeout-s", "0.5", "--token-file",
                                             str(tmp_path / "tok"), "--", str(tmp_path / "job.py")])
    assert "no terminal to read from; serving pdb over TCP instead" in res.stderr
    assert res.returncode == 1 and "ran" not in res.stdout
    assert re.fullmatch(r"rank_debugger.py: error: rank 0 of 1 on .*: nobody connected to 127\.0\.0\.1:\d+ "
                        r"within 0\.5 s", error_lines(res.stderr)[0])


def test_a_port_in_use_is_refused(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        case = Case("port-in-use", ["--rank", "0", "--remote", "--port", str(port), "--", "t.py"],
                    rf"--bind 127\.0\.0\.1 --port {port}: cannot listen there \(Address already in use\)",
                    files={"t.py": ""})
        check_refused("debug/rank_debugger.py", case, tmp_path)


T = {"t.py": "print('ran')\n"}
TWO = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}
BAD_INPUT = [
    Case("nothing", [], "give --rank R and, after --, the script to run"),
    Case("no-script", ["--rank", "0"], "give --rank R and, after --, the script to run"),
    Case("script-missing", ["--rank", "0", "--", "train.py"], r"train\.py: no such script"),
    Case("script-is-folder", ["--rank", "0", "--", "{tmp}"], "no such script"),
    Case("rank-negative", ["--rank", "-1", "--", "t.py"], "--rank: .*must be >= 0", files=T),
    Case("rank-beyond-lone-process", ["--rank", "1", "--", "t.py"],
         r"--rank 1 is outside the job's ranks 0-0", files=T),
    Case("rank-beyond-world", ["--rank", "2", "--", "t.py"], r"--rank 2 is outside the job's ranks 0-1",
         files=T, env=TWO),
    Case("two-ranks-without-store", ["--rank", "1", "--", "t.py"], "no torchrun store and no process group",
         files=T, env=TWO),
    Case("timeout-zero", ["--rank", "0", "--timeout-s", "0", "--", "t.py"], "--timeout-s: .*must be > 0", files=T),
    Case("timeout-nan", ["--rank", "0", "--timeout-s", "nan", "--", "t.py"], "--timeout-s: .*not a finite",
         files=T),
    Case("bind-hostname", ["--rank", "0", "--bind", "localhost", "--", "t.py"], "--bind: .*not an IP address",
         files=T),
    Case("bind-foreign-address", ["--rank", "0", "--remote", "--bind", "192.0.2.1", "--", "t.py"],
         r"--bind 192\.0\.2\.1 .*cannot listen there", files=T),
    Case("port-beyond-range", ["--rank", "0", "--port", "70000", "--", "t.py"], "--port: .*must be <= 65535",
         files=T),
    Case("token-file-is-folder", ["--rank", "0", "--remote", "--token-file", "{tmp}", "--", "t.py"],
         "--token-file", files=T),
    Case("token-file-is-the-script", ["--rank", "0", "--remote", "--token-file", "t.py", "--", "t.py"],
         "--token-file", files=T),
    Case("connect-alone", ["connect"], "connect needs HOST:PORT and --token-file F"),
    Case("connect-without-token-file", ["connect", "127.0.0.1:5678"], "connect needs HOST:PORT and --token-file F"),
    Case("connect-no-port", ["connect", "somehost", "--token-file", "tok"], "'somehost' is not HOST:PORT",
         files={"tok": "abc\n"}),
    Case("connect-token-file-missing", ["connect", "127.0.0.1:5678", "--token-file", "tok"],
         "--token-file tok: does not exist"),
    Case("connect-token-file-empty", ["connect", "127.0.0.1:5678", "--token-file", "tok"],
         "--token-file tok: holds no token", files={"tok": "\n"}),
    Case("connect-token-file-is-folder", ["connect", "127.0.0.1:5678", "--token-file", "{tmp}"],
         "is a folder"),
    Case("connect-nobody-listens", ["connect", "127.0.0.1:{port}", "--token-file", "tok"],
         r"cannot reach 127\.0\.0\.1:{port} \(Connection refused\)", status=1, files={"tok": "abc\n"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/rank_debugger.py", case, tmp_path)


def test_help_needs_no_torch():
    """``--help`` on a login node: instant, without importing torch (or a GPU)."""
    probe = ("import runpy, sys\nsys.argv = [sys.argv[1], '--help']\ntry:\n"
             "    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as exc:\n"
             "    print('EXIT', exc.code, 'TORCH', 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", probe, str(SCRIPT)], env=clean_env(), capture_output=True, text=True,
                         timeout=60)
    assert "usage:" in res.stdout and "connect HOST:PORT" in res.stdout
    assert res.stdout.strip().endswith("EXIT 0 TORCH False"), res.stdout + res.stderr
