"""scripts/debug/strace_summary.py: on a real strace of a blocked read, on a multi-process trace in
strace's own formats (split calls, exits, a kill), and on careless inputs."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool

SCRIPT = "strace_summary.py"

# The line formats of strace 6.1 -f -tt -T -y/-yy (see tests/debug/test_syscall_recipes.py for
# real ones): pid 100's read is split by pid 101's calls and resumed 2.5 s later; pid 102 is still
# in poll when the trace ends; 103 ends in exit_group, 104 is killed inside a read.
JOB = """\
100 10:00:00.000000 openat(AT_FDCWD</w>, "/data/a.bin", O_RDONLY|O_CLOEXEC) = 3</data/a.bin> <0.000040>
100 10:00:00.100000 read(3</data/a.bin>,  <unfinished ...>
101 10:00:00.200000 connect(4<TCPv6:[77]>, {sa_family=AF_INET6, sin6_port=htons(29500)}, 28) = -1 ECONNREFUSED (Connection refused) <0.000100>
101 10:00:00.300000 clock_nanosleep(CLOCK_REALTIME, 0, {tv_sec=1, tv_nsec=0}, NULL) = 0 <1.000100>
100 10:00:02.600000 <... read resumed>"abc", 8192) = 3 <2.500000>
102 10:00:02.700000 poll([{fd=5<UDP:[127.0.0.1:46134->127.0.0.2:53]>, events=POLLIN}], 1, 5000 <unfinished ...>
103 10:00:02.800000 exit_group(0 <unfinished ...>
103 10:00:02.800100 +++ exited with 0 +++
104 10:00:02.900000 read(7</data/b.bin>,  <unfinished ...>
104 10:00:02.950000 +++ killed by SIGKILL +++
100 10:00:04.000000 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED} ---
"""  # noqa: E501


def write_trace(path, text, last="10:00:04"):
    """Write a trace whose file time is its last stamp (the script takes the later of the two)."""
    path.write_text(text)
    h, m, s = map(int, last.split(":"))
    stamp = datetime.datetime.combine(datetime.date.today(), datetime.time(h, m, s)).timestamp()
    os.utime(path, (stamp, stamp))
    return path


def test_a_multi_process_trace(launch, tmp_path):
    trace = write_trace(tmp_path / "job.trace", JOB)
    run = launch.python(SCRIPT, [str(trace), "--top", "2"])
    assert run.returncode == 3, run.output  # pid 102 is still in poll: a finding
    lines = run.stdout.splitlines()
    assert "job.trace, pid 100: 2 finished" in lines
    assert "  2.500 s  read 3</data/a.bin> = 3  (10:00:00.100000)" in lines  # duration from the resumed line
    assert "  1.000 s  clock_nanosleep = 0  (10:00:00.300000)" in lines
    assert "job.trace, pid 102: 1 call in progress at the end, 0 finished" in lines
    assert ("  in progress  >= 1.300 s  poll 5<UDP:[127.0.0.1:46134->127.0.0.2:53]>  (since 10:00:02.700000)"
            in lines)
    assert not [line for line in lines if "pid 103" in line or "pid 104" in line]  # exited, killed
    assert lines[-1] == ("1 call in progress at the end of the trace: "
                         "pid 102 poll 5<UDP:[127.0.0.1:46134->127.0.0.2:53]>")

    done = write_trace(tmp_path / "job.trace.555", "10:00:00.000000 read(3</x>, \"\", 1) = 0 <0.700000>\n",
                       last="10:00:00")  # -ff: one file per process, its pid in the name
    run = launch.python(SCRIPT, [str(done), "--min-s", "0.5"])
    assert run.returncode == 0, run.output
    assert run.stdout.splitlines() == ["job.trace.555, pid 555: 1 finished",
                                       "  0.700 s  read 3</x> = 0  (10:00:00.000000)",
                                       "no call in progress at the end of the trace"]
    run = launch.python(SCRIPT, [str(done), "--min-s", "1"])
    assert (run.returncode, run.stdout) == (0, "no finished call of at least 1 s\n"), run.output


def test_a_real_blocked_read(launch, tmp_path):
    strace = require_tool("strace")
    fifo = tmp_path / "train-00017.bin"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # holds the FIFO open and never writes
    reader = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'rb').read()"], start_new_session=True,
                              stdin=subprocess.DEVNULL)
    trace = tmp_path / "hang.trace"
    tracer = None
    try:
        time.sleep(0.2)
        tracer = subprocess.Popen([strace, "-f", "-tt", "-T", "-y", "-o", str(trace), "-p", str(reader.pid)],
                                  stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while "read(" not in (trace.read_text() if trace.exists() else ""):
            assert time.monotonic() < end, "strace wrote no read( within 10 s"
            time.sleep(0.02)
        time.sleep(0.3)
        tracer.send_signal(signal.SIGINT)  # Ctrl-C: strace writes <detached ...> and leaves
        tracer.wait(10)
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
            tracer.wait(10)
        reader.kill()
        reader.wait(10)
        os.close(writer)
    run = launch.python(SCRIPT, [str(trace)])
    assert run.returncode == 3, run.output + trace.read_text()
    line = next(line for line in run.stdout.splitlines() if "in progress  >=" in line)
    assert f"read 3<{fifo}>" in line and float(line.split(">=")[1].split()[0]) >= 0.2, run.stdout


NOT_A_TRACE = "Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: epoch 3\n"
BAD_INPUT = [
    Case("no-trace", [], "the following arguments are required: TRACE"),
    Case("missing", ["{tmp}/job.trace"], r"TRACE .*job\.trace: does not exist"),
    Case("folder", ["{tmp}"], "is a folder"),
    Case("device", ["/dev/zero"], "is not a regular file or a pipe"),
    Case("empty", ["{tmp}/e.trace"], r"e\.trace: is empty", files={"e.trace": ""}),
    Case("a-log-not-a-trace", ["{tmp}/train.log"], r"train\.log: no strace lines", files={"train.log": NOT_A_TRACE}),
    Case("binary", ["{tmp}/core"], "core: no strace lines", files={"core": bytes(range(256)) * 8}),
    Case("no-durations", ["{tmp}/t.trace"], r"no call durations in it \(record with strace -T\)",
         files={"t.trace": '100 10:00:00.000000 read(3, "a", 1) = 1\n'}),
    Case("top-zero", ["{tmp}/t.trace", "--top", "0"], "--top: 0 must be >= 1", files={"t.trace": JOB}),
    Case("top-nan", ["{tmp}/t.trace", "--top", "nan"], "--top: 'nan' is not an integer", files={"t.trace": JOB}),
    Case("min-s-inf", ["{tmp}/t.trace", "--min-s", "inf"], "--min-s: 'inf' is not a finite number",
         files={"t.trace": JOB}),
    Case("min-s-negative", ["{tmp}/t.trace", "--min-s", "-1"], "--min-s: -1 must be >= 0", files={"t.trace": JOB}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused(f"debug/{SCRIPT}", case, tmp_path)
