"""Tests of scripts/debug/crash_catcher.py: real crashes, caught.

The children crash for real: ``ctypes.string_at(0)`` reads address 0 (SIGSEGV), ``os.abort()``
raises SIGABRT, a sleeping child outlives ``--timeout``. Each test checks what the Crashes chapter
promises a reader: the status a shell would give (128 + signal), the faulthandler section naming
the file and line of the fatal call, gdb's native and Python backtraces, a core file gdb can read,
and that no process of the command's tree survives a timeout or a SIGTERM.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env, import_script

SCRIPT = REPO / "scripts" / "debug" / "crash_catcher.py"
HOST = socket.gethostname().split(".")[0] or "localhost"

# The fatal call is on line 4 (in crash()), called from line 7.
CRASHER = """import ctypes


def crash():
    ctypes.string_at(0)


crash()
"""
CRASH_LINE, CALL_LINE = 5, 8

# Starts a grandchild (sleep) in the same process group, prints its pid, then sleeps on line 5.
HANGER = """import subprocess
import time
p = subprocess.Popen(["sleep", "120"])
print("grandchild", p.pid, flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def cc():
    return import_script(SCRIPT)


def catch(tmp_path: Path, options: list[str], command: list[str], env=None,
          timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the catcher in ``tmp_path`` (where cores land) with --out-dir and --json there."""
    out = tmp_path / "crashes"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out-dir", str(out), "--json",
                           str(tmp_path / "report.json"), *options, "--", *command],
                          cwd=tmp_path, env=clean_env(env), capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    return proc, report


def gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for a parent that is not ours)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_help_needs_no_gpu():
    res = subprocess.run([sys.executable, str(SCRIPT), "--help"], env=clean_env(),
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "-- COMMAND" in res.stdout


def test_segfault_is_reported_with_the_python_line(tmp_path):
    crasher = tmp_path / "crasher.py"
    crasher.write_text(CRASHER, encoding="utf-8")
    proc, report = catch(tmp_path, [], [sys.executable, str(crasher)], env={"RANK": "3"})
    assert proc.returncode == 139, proc.stderr           # 128 + SIGSEGV, as a shell says
    assert report["signal"] == "SIGSEGV" and report["exit_status"] == 139 and report["crashed"]
    assert report["rank"] == 3 and report["host"] == HOST
    # faulthandler's section names the fatal call, innermost user frame first, then its caller
    stacks = report["faulthandler"]
    assert stacks.startswith("Fatal Python error: Segmentation fault"), stacks
    assert f'File "{crasher}", line {CRASH_LINE} in crash' in stacks
    assert f'File "{crasher}", line {CALL_LINE} in <module>' in stacks
    # the child's own stderr passed through; the report is on stdout and in the per-rank file
    assert f'File "{crasher}", line {CRASH_LINE} in crash' in proc.stderr
    assert "killed by SIGSEGV (signal 11); exit status 139" in proc.stdout
    text = (tmp_path / "crashes" / f"crash-{HOST}-rank3.txt").read_text(encoding="utf-8")
    assert report["report_path"].endswith(f"crash-{HOST}-rank3.txt")
    assert stacks in text and "meaning:  SIGSEGV is usually an invalid memory access" in text


def test_gdb_shows_the_native_frames_and_says_whether_py_bt_works(tmp_path, cc):
    require_tool("gdb")
    crasher = tmp_path / "crasher.py"
    crasher.write_text(CRASHER, encoding="utf-8")
    proc, report = catch(tmp_path, ["--gdb"], [sys.executable, str(crasher)])
    assert proc.returncode == 139, proc.stdout + proc.stderr
    gdb = report["gdb"]
    assert gdb["stopped_by"] == "SIGSEGV" and gdb["inferior_signal"] == "SIGSEGV"
    frames = gdb["backtrace"].splitlines()
    # frame 0 is libc's strlen (__strlen_avx2, __strlen_evex, ...) called by ctypes' string_at
    assert frames[0].startswith("#0") and "strlen" in frames[0], gdb["backtrace"]
    assert any("string_at" in f for f in frames[:4]), gdb["backtrace"]
    # gdb let the signal through afterwards: faulthandler still printed its section
    assert f'line {CRASH_LINE} in crash' in report["faulthandler"]
    if cc.python_gdb_extension(sys.executable):     # e.g. pyenv's python3.11-gdb.py
        assert gdb["py_bt_available"] is True, proc.stdout + proc.stderr
        assert f'File "{crasher}", line {CRASH_LINE}, in crash' in gdb["py_bt"]
        assert "ctypes.string_at(0)" in gdb["py_bt"]
    else:
        assert gdb["py_bt_available"] is False
        assert "py-bt is not available" in proc.stdout and "python3-dbg" in proc.stdout


def test_gdb_output_without_python_extension_is_recognised(cc):
    # What gdb 13 prints when it has no CPython extension (captured from a real run).
    found = cc.gdb_findings(
        "Program received signal SIGSEGV, Segmentation fault.\n"
        "#0  __strlen_evex () at ../sysdeps/x86_64/multiarch/strlen-evex.S:79\n"
        "#1  0x00007ffff7154608 in string_at (size=-1, ptr=0x0) at _ctypes.c:5564\n\n"
        "Program terminated with signal SIGSEGV, Segmentation fault.\n",
        'Undefined command: "py-bt".  Try "help".\n')
    assert found["py_bt_available"] is False and found["py_bt"] == ""
    assert found["backtrace"].count("\n") == 1 and found["inferior_signal"] == "SIGSEGV"
    assert "python3-dbg" in cc.py_bt_help(sys.executable)
    exited = cc.gdb_findings("[Inferior 1 (process 42) exited with code 012]\n", "")
    assert exited["inferior_exit"] == 10 and exited["inferior_pid"] == 42   # gdb prints octal


def test_abort_is_caught(tmp_path):
    proc, report = catch(tmp_path, [], [sys.executable, "-c", "import os; os.abort()"])
    assert proc.returncode == 134
    assert report["signal"] == "SIGABRT" and report["crashed"]
    assert report["faulthandler"].startswith("Fatal Python error: Aborted")
    assert 'File "<string>", line 1 in <module>' in report["faulthandler"]


def test_a_plain_failure_is_passed_through_without_a_report(tmp_path):
    proc, report = catch(tmp_path, [], [sys.executable, "-c", "raise SystemExit(1)"])
    assert proc.returncode == 1
    assert not report["crashed"] and report["signal"] == "" and report["exit_status"] == 1
    assert not (tmp_path / "crashes" / f"crash-{HOST}-rank0.txt").exists()
    assert "crash report" not in proc.stdout and "not a crash" in proc.stdout


def test_timeout_dumps_the_stacks_and_kills_the_process_tree(tmp_path):
    (tmp_path / "hang.py").write_text(HANGER, encoding="utf-8")
    start = time.monotonic()
    proc, report = catch(tmp_path, ["--timeout", "1.5", "--grace", "3"],
                         [sys.executable, str(tmp_path / "hang.py")])
    elapsed = time.monotonic() - start
    assert proc.returncode == 1 and report["timed_out"] and report["crashed"]
    assert elapsed < 20
    assert "timed out after 1.5 s" in report["outcome"]
    # SIGABRT made faulthandler print where the hung process was
    assert f'File "{tmp_path / "hang.py"}", line 5 in <module>' in report["faulthandler"]
    grandchild = int(proc.stdout.split("grandchild ")[1].split()[0])
    assert gone(grandchild), "the sleeping grandchild survived the timeout"


def test_each_process_of_the_tree_is_signalled_once(cc, tmp_path, monkeypatch):
    # faulthandler's handler runs with its signal unblocked and the default action back: a second
    # SIGABRT during the dump kills the process half-way ("Fatal Python error: " and nothing more,
    # seen once under load). killpg reaches the command's group; os.kill only the processes outside it.
    (tmp_path / "tree.py").write_text(
        "import os, subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n", encoding="utf-8")
    child = cc.Child([sys.executable, str(tmp_path / "tree.py")], clean_env())
    try:
        deadline = time.monotonic() + 30
        while len(cc.process_tree(child.proc.pid)) < 3:
            assert time.monotonic() < deadline, "the command did not start its two sleeps"
            time.sleep(0.05)
        sent = []
        monkeypatch.setattr(cc.os, "killpg", lambda pgid, sig: sent.extend(
            pid for pid in cc.process_tree(child.proc.pid) if os.getpgid(pid) == pgid))
        monkeypatch.setattr(cc.os, "kill", lambda pid, sig: sent.append(pid))
        child.signal_all(signal.SIGUSR1)
        assert sorted(sent) == sorted(cc.process_tree(child.proc.pid)), "each once, none left out"
    finally:
        monkeypatch.undo()
        child.signal_all(signal.SIGKILL)
        child.proc.wait(timeout=30)


def test_gdb_timeout_reaches_the_inferior_and_shows_where_it_hung(tmp_path, cc):
    # gdb runs its inferior in a process group of its own: the catcher must find it in /proc,
    # abort it (not gdb), and let gdb print where the hung process was.
    require_tool("gdb")
    (tmp_path / "hang.py").write_text(HANGER, encoding="utf-8")
    start = time.monotonic()
    # 4 s: Python under gdb took over 1.5 s to reach its sleep on a loaded 2-core machine, and an
    # abort before faulthandler is on leaves no Python stack (one clean-clone CI run)
    proc, report = catch(tmp_path, ["--gdb", "--timeout", "4", "--grace", "3"],
                         [sys.executable, str(tmp_path / "hang.py")])
    assert proc.returncode == 1 and report["timed_out"] and time.monotonic() - start < 28
    assert report["gdb"]["stopped_by"] == "SIGABRT", proc.stdout
    assert f'File "{tmp_path / "hang.py"}", line 5 in <module>' in report["faulthandler"]
    if cc.python_gdb_extension(sys.executable):
        assert "time.sleep(120)" in report["gdb"]["py_bt"]
    assert gone(int(proc.stdout.split("grandchild ")[1].split()[0]))


def test_sigterm_is_forwarded_to_the_command(tmp_path):
    (tmp_path / "hang.py").write_text(HANGER, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--json", str(tmp_path / "r.json"),
                             "--", sys.executable, str(tmp_path / "hang.py")], cwd=tmp_path,
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("grandchild "), line
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert report["interrupted_by"] == "SIGTERM" and report["signal"] == "SIGTERM"
    assert gone(int(line.split()[1]))


def test_core_file_is_written_and_readable_by_gdb(tmp_path):
    gdb = require_tool("gdb")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text(encoding="utf-8").strip()
    if pattern.startswith("|"):
        pytest.skip(f"core_pattern pipes cores to a program ({pattern}), not to a file here")
    if resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        pytest.skip("the hard core-size limit is 0: no process may dump core here")
    crasher = tmp_path / "crasher.py"
    crasher.write_text(CRASHER, encoding="utf-8")
    proc, report = catch(tmp_path, ["--core"], [sys.executable, str(crasher)])
    assert proc.returncode == 139
    assert report["core_dumped"] and len(report["core_files"]) == 1, proc.stdout
    assert "written to a file" in report["core_destination"]
    core = report["core_files"][0]
    bt = subprocess.run([gdb, "-q", "-batch", "-ex", "bt", sys.executable, core],
                        capture_output=True, text=True, timeout=60)
    assert "SIGSEGV" in bt.stdout and "string_at" in bt.stdout, bt.stdout + bt.stderr


def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


# A token id (10) outside a 4-row embedding table: a device-side assert in the CUDA kernel.
BAD_EMBEDDING = """import os
import torch
print("CUDA_LAUNCH_BLOCKING", os.environ.get("CUDA_LAUNCH_BLOCKING"), flush=True)
weight = torch.zeros(4, 3, device="cuda")
out = torch.nn.functional.embedding(torch.tensor([10], device="cuda"), weight)
torch.cuda.synchronize()
"""


@pytest.mark.gpu
def test_cuda_launch_blocking_names_the_faulty_line(tmp_path):
    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    (tmp_path / "bad.py").write_text(BAD_EMBEDDING, encoding="utf-8")
    proc, report = catch(tmp_path, ["--cuda-launch-blocking"],
                         [sys.executable, str(tmp_path / "bad.py")], timeout=120)
    assert proc.returncode != 0
    assert "CUDA_LAUNCH_BLOCKING 1" in proc.stdout
    assert "device-side assert triggered" in proc.stderr
    # With blocking launches the error surfaces at the embedding call (line 5), not at line 6.
    frames = [ln for ln in proc.stderr.splitlines() if f'File "{tmp_path / "bad.py"}"' in ln]
    assert frames and frames[-1].strip().startswith(f'File "{tmp_path / "bad.py"}", line 5'), \
        proc.stderr


BAD_INPUT = [
    Case("json-is-the-report", ["--out-dir", "d", "--json", f"d/crash-{socket.gethostname()}-rank0.txt", "--", "true"],
         r"--json d/crash-.*-rank0\.txt: --out-dir writes there too; give each output its own path"),
    Case("no-command", [], "no command given: put it after --"),
    Case("empty-command", ["--out-dir", "{tmp}/c", "--"], "no command given"),
    Case("command-not-found", ["--", "no-such-command-4711"],
         "command 'no-such-command-4711' not found"),
    Case("command-not-executable", ["--", "{tmp}/notes.txt"], r"notes\.txt: is not an executable",
         files={"notes.txt": "x"}),
    Case("option-after-command-missing-dashes", ["--cores", "--", "true"],
         "unrecognized arguments: --cores"),
    Case("out-dir-is-a-file", ["--out-dir", "{tmp}/f", "--", "true"], "--out-dir .*is a file",
         files={"f": "x"}),
    Case("out-dir-unwritable", ["--out-dir", "/proc/crashes", "--", "true"],
         "--out-dir /proc/crashes: cannot write there"),
    Case("timeout-zero", ["--timeout", "0", "--", "true"], "--timeout: 0 must be > 0"),
    Case("timeout-nan", ["--timeout", "nan", "--", "true"], "'nan' is not a finite number"),
    Case("grace-negative", ["--grace", "-1", "--", "true"], "--grace: -1 must be >= 0"),
    Case("sanitizer-unknown-tool", ["--sanitizer", "asan", "--", "true"], "--sanitizer"),
    Case("sanitizer-missing", ["--sanitizer", "memcheck", "--", sys.executable, "-c", "pass"],
         "compute-sanitizer not found on PATH", env={"PATH": "{tmp}"}),
    Case("gdb-missing", ["--gdb", "--", sys.executable, "-c", "pass"], "gdb not found on PATH",
         env={"PATH": "{tmp}"}),
    Case("gdb-and-sanitizer", ["--gdb", "--sanitizer", "memcheck", "--", "true"],
         "cannot be combined"),
    Case("gdb-on-a-script", ["--gdb", "--", str(Path(sys.executable).parent / "torchrun")],
         "is a #! script, gdb needs a binary"),
    Case("rank-not-integer", ["--", "true"], "environment variable RANK='abc' is not an integer",
         env={"RANK": "abc"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/crash_catcher.py", case, tmp_path)
