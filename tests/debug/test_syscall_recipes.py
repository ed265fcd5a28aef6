"""The recipes of book/en/debug/syscalls.md, run for real against the page's own transcripts.

Each test reproduces one case of the page (a read from a FIFO that never returns, a name server
that never answers, a TCPStore client with no server, a DataLoader's worker processes), runs the
page's strace or ltrace command on it, and checks that every line the page shows in that command's
transcript appears in the fresh output once what differs between runs is masked: process ids,
clock times, durations, addresses, fd, inode and port numbers (every digit run), IPv4 addresses and
the temporary folder. So the page and reality cannot drift apart. Lines that depend on the
machine's own name service (the query to its DNS server, the nscd socket) are not compared; the
figures that carry the page's argument (a read that waited for its writer, a poll timeout of 1000 ms, the
number of worker processes) are checked as numbers.

The scripts come from the page's Python blocks (their first line names them). The torch cases are
forked from the preloaded server (tests/preloaded.py) and traced with `strace -p`, with the page's
options, which saves the 2-4 s of `import torch` a traced fresh interpreter would cost. Every
process a test starts is ended by its pid, and every wait has a deadline.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import preloaded
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env, free_port

PAGE = REPO / "book" / "en" / "debug" / "syscalls.md"
DEMO = "/tmp/demo"  # the folder of the page's runs; the tests' own folder is shown as this


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def page_script(name: str, folder: Path) -> Path:
    """Write the page's Python block whose first line is `# NAME: ...` into folder."""
    for body in re.findall(r"```python\n(.*?)```", page_text(), re.S):
        if body.startswith(f"# {name}:"):
            path = folder / name
            path.write_text(body, encoding="utf-8")
            return path
    raise AssertionError(f"{PAGE.name} has no Python block for {name}")


def shown(fragment: str) -> tuple[str, list[str]]:
    """The first `$ ` command of a console block that contains fragment, and the lines shown after
    it (up to the next command)."""
    for body in re.findall(r"```console\n(.*?)```", page_text(), re.S):
        lines = body.rstrip("\n").split("\n")
        for i, line in enumerate(lines):
            if line.startswith("$ ") and fragment in line:
                out = []
                for rest in lines[i + 1:]:
                    if rest.startswith("$ "):
                        break
                    out.append(rest)
                return line[2:], out
    raise AssertionError(f"{PAGE.name} shows no command containing {fragment!r}")


def mask(line: str, folder: Path | None = None) -> str:
    if folder is not None:
        line = line.replace(str(folder), DEMO)
    line = re.sub(r"\d\d:\d\d:\d\d\.\d{6}", "TIME", line)
    line = re.sub(r"<\d+\.\d+>", "<SECONDS>", line)
    line = re.sub(r"0x[0-9a-f]+", "0xADDR", line)
    line = re.sub(r"\b\d{1,3}(\.\d{1,3}){3}\b", "IPV4", line)
    line = re.sub(r"\d+", "N", line)
    return " ".join(line.split())


MACHINE_DEPENDENT = ("htons(53)", ":53]>", "nscd")


def missing(page_lines: list[str], fresh: str, folder: Path) -> list[str]:
    """The page's lines (masked) that the fresh output lacks; "..." lines and the lines that depend
    on the machine's name service are left out."""
    have = {mask(line, folder) for line in fresh.splitlines()}
    return [line for line in page_lines
            if line.strip() != "..." and not any(m in line for m in MACHINE_DEPENDENT)
            and mask(line) not in have]


def command(text: str, python: str = sys.executable) -> list[str]:
    words = shlex.split(text)
    return [python if w == "python" else w for w in words]


def wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.02)


def end(proc: subprocess.Popen) -> None:
    """Kill a process this test started (and its session, where it has one), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait(10)


def durations(text: str, call: str) -> list[float]:
    return [float(s) for s in re.findall(rf"\b{call}\(.*<(\d+\.\d+)>$", text, re.M)]


# --- a read that never returns ------------------------------------------------------------------

def test_hung_read_shows_the_call_and_the_file(tmp_path):
    strace = require_tool("strace")
    script = page_script("read_shard.py", tmp_path)
    fifo = tmp_path / "train-00017.bin"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # a writer that never writes: the reader's read blocks
    reader = subprocess.Popen([sys.executable, script.name, fifo.name], cwd=tmp_path, stdout=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    tracer = None
    try:
        assert reader.stdout.readline().startswith("opened")  # it returns: the writer holds the FIFO
        page_cmd, page_lines = shown("strace -p ")
        args = command(page_cmd.replace("15422", str(reader.pid)))
        assert args[0] == "strace" and args[2] == str(reader.pid), page_cmd
        err = tmp_path / "strace.err"
        with err.open("w") as sink:  # by name, as on the page: strace prefixes its messages with it
            tracer = subprocess.Popen(args, executable=strace, stderr=sink, stdin=subprocess.DEVNULL)
        wait_for(lambda: "read(" in err.read_text(), 10, "read( from strace -p")
        time.sleep(0.2)
        tracer.send_signal(signal.SIGINT)  # Ctrl-C: strace detaches, the reader goes on
        tracer.wait(10)
        fresh = err.read_text()
        assert missing(page_lines, fresh, tmp_path) == [], fresh
        assert reader.poll() is None, "the reader should still be waiting after strace detached"
        wchan = Path(f"/proc/{reader.pid}/wchan").read_text()
        assert "pipe" in wchan, wchan  # the page's run shows anon_pipe_read
    finally:
        if tracer is not None and tracer.poll() is None:
            tracer.kill()
            tracer.wait(10)
        end(reader)
        os.close(writer)


def test_slow_read_shows_its_duration_and_awk_finds_it(tmp_path):
    require_tool("strace")
    page_script("read_shard.py", tmp_path)
    fifo = tmp_path / "train-00017.bin"
    os.mkfifo(fifo)
    # The page's writer answers after 2 s; 0.5 s here keeps the test short (durations are masked).
    # As on the page, the writer's shell opens the FIFO first, so the reader's open returns at once.
    writer = subprocess.Popen(["sh", "-c", 'exec sh -c "sleep 0.5; printf shard" > "$0"', fifo.name], cwd=tmp_path,
                              start_new_session=True)
    try:
        page_cmd, page_lines = shown("-P train-00017.bin")
        run = subprocess.run(command(page_cmd), cwd=tmp_path, capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
        fresh = run.stdout + run.stderr
        assert run.returncode == 0, fresh
        assert missing(page_lines, fresh, tmp_path) == [], fresh
        reads = durations(run.stderr, "read")
        assert reads and 0.4 < reads[0] < 10, reads
        # The page's awk, on a trace of the same format (one process, so no pid column).
        (tmp_path / "shard.trace.1").write_text(run.stderr)
        awk_cmd, _ = shown("awk -F'<'")
        top = subprocess.run(["bash", "-c", awk_cmd], cwd=tmp_path, capture_output=True, text=True,
                             timeout=10).stdout.splitlines()
        assert top and "read(" in top[0] and float(top[0].split()[0]) == reads[0], top
    finally:
        end(writer)


# --- a name that does not resolve ---------------------------------------------------------------

def silent_name_server(tmp_path: Path) -> tuple[socket.socket, list[str]]:
    """A UDP socket on 127.0.0.2:53 that never answers, and the command prefix that runs a command
    with /etc/resolv.conf naming it (in a mount namespace of its own: the machine's file stays)."""
    if os.geteuid() != 0:
        pytest.skip("staging a name server needs root (port 53, unshare -m, mount --bind)")
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        server.bind(("127.0.0.2", 53))
    except OSError as e:
        server.close()
        pytest.skip(f"cannot bind 127.0.0.2:53 for the silent name server: {e}")
    resolv = tmp_path / "resolv.silent"
    resolv.write_text("nameserver 127.0.0.2\n")
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        server.close()
        pytest.skip(f"no private mount namespace here: {probe.stderr.strip()}")
    return server, prefix


@pytest.mark.slow  # two lookups that each wait out the resolver's 1 s timeout
def test_dns_stall_is_a_poll_that_times_out(tmp_path):
    require_tool("strace")
    ltrace = require_tool("ltrace")
    page_script("resolve.py", tmp_path)
    server, prefix = silent_name_server(tmp_path)
    env = {**os.environ, "RES_OPTIONS": "timeout:1 attempts:1"}
    assert shown('export RES_OPTIONS="timeout:1 attempts:1"')[0]
    try:
        page_cmd, page_lines = shown("trace=connect,poll python resolve.py")
        run = subprocess.run([*prefix, *command(page_cmd)], cwd=tmp_path, capture_output=True, text=True,
                             timeout=20, env=env, stdin=subprocess.DEVNULL)
        fresh = run.stdout + run.stderr
        assert missing(page_lines, fresh, tmp_path) == [], fresh
        timeouts = re.findall(r"poll\(.*127\.0\.0\.2:53\]>, events=POLLIN\}\], 1, 1000\) = 0 \(Timeout\) <(\S+)>",
                              run.stderr)
        assert len(timeouts) == 1 and 0.9 < float(timeouts[0]) < 5, run.stderr

        page_cmd, page_lines = shown("ltrace -T -e getaddrinfo")
        args = command(page_cmd)
        run = subprocess.run([*prefix, ltrace, *args[1:]], cwd=tmp_path, capture_output=True, text=True,
                             timeout=20, env=env, stdin=subprocess.DEVNULL)
        fresh = run.stdout + run.stderr
        assert missing(page_lines, fresh, tmp_path) == [], fresh
        took = re.findall(r'getaddrinfo\("trainer-db\.cluster\.invalid", .*\) = -3 <(\S+)>', fresh)
        assert len(took) == 1 and 0.9 < float(took[0]) < 5, fresh  # -3: EAI_AGAIN
    finally:
        server.close()


# --- the torch cases, forked from the preloaded server and traced with -p -----------------------

def trace_forked(tmp_path: Path, script: Path, argv: list[str], options: list[str], go: Path | None,
                 timeout: float) -> tuple[str, str]:
    """Start `python script argv` forked from the preloaded server, attach `strace OPTIONS -p PID
    -o trace` to it, create `go` once strace is attached (the script waits for it), and return the
    script's stdout and the trace."""
    strace = require_tool("strace")
    child = preloaded.start(script, argv, tmp_path, clean_env({"TORCH_CPP_LOG_LEVEL": "FATAL"}))
    trace, err = tmp_path / "fresh.trace", tmp_path / "strace.err"
    with err.open("w") as sink:
        tracer = subprocess.Popen([strace, *options, "-o", str(trace), "-p", str(child.pid)], stderr=sink,
                                  stdin=subprocess.DEVNULL)
    try:
        if go is not None:
            wait_for(lambda: "attached" in err.read_text(), 10, "attach message from strace")
            go.touch()
        result = child.wait(timeout)
        tracer.wait(10)  # strace ends when its tracee does
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait(10)
    assert result.returncode == 0, result.stderr
    return result.stdout, trace.read_text()


@pytest.mark.slow  # the client's own 2 s of retrying, plus the preloaded server's start
def test_store_client_retries_on_econnrefused(tmp_path):
    script = page_script("store_client.py", tmp_path)
    port = free_port()
    page_cmd, page_out = shown("-o store.trace python store_client.py")
    _, page_trace = shown("cat store.trace")
    sum_cmd, page_summary = shown("-c -w -e trace=")
    words = shlex.split(page_cmd)
    options = words[1:words.index("-o")]
    assert shlex.split(sum_cmd)[1:4] == ["-f", "-c", "-w"]
    # One run for both blocks: -C prints the trace and the summary table, -w in wall-clock time.
    stdout, trace = trace_forked(tmp_path, script, ["127.0.0.1", str(port), "2"], [*options, "-C", "-w"],
                                 None, 30)
    fresh = stdout + trace
    assert missing(page_out + page_trace + page_summary, fresh, tmp_path) == [], fresh
    refused = re.findall(r"getsockopt\(\d+<TCPv6:\[.*\]>, SOL_SOCKET, SO_ERROR, \[ECONNREFUSED\]", trace)
    sleeps = [float(s) for s in re.findall(r"clock_nanosleep\(CLOCK_REALTIME, 0, \{tv_sec=\d+, tv_nsec=\d+\}, "
                                           r"NULL\) = 0 <(\S+)>", trace)]
    assert len(refused) >= 2 and len(sleeps) >= 1 and all(s > 0.05 for s in sleeps), trace
    assert f"htons({port})" in trace


# Waits for strace to be attached, then runs the page's loader.py. A child of the preloaded server
# inherits its multiprocessing start method, "forkserver"; a fresh interpreter on Linux starts with
# "fork" (up to Python 3.13), which is what the page's run used, so the workers are forked as there.
WAIT_THEN_RUN = """\
import multiprocessing, os, runpy, sys, time
multiprocessing.set_start_method("fork", force=True)
go, script = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 20
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go file")
    time.sleep(0.01)
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("persistent", [False, True], ids=["per-epoch", "persistent"])
def test_dataloader_worker_processes_are_counted(tmp_path, persistent):
    loader = page_script("loader.py", tmp_path)
    wrapper = tmp_path / "wait_then_run.py"
    wrapper.write_text(WAIT_THEN_RUN)
    name = "loader-p.trace" if persistent else "loader.trace"
    page_cmd, page_out = shown(f"-o {name} python loader.py")
    words = shlex.split(page_cmd)
    options = words[1:words.index("-o")]
    go = tmp_path / "go"
    stdout, trace = trace_forked(tmp_path, wrapper, [str(go), str(loader), "2", *(["--persistent"] * persistent)],
                                 options, go, 60)
    assert missing(page_out, stdout, tmp_path) == [], stdout
    (tmp_path / name).write_text(trace)
    count_cmd, count_out = shown(f"grep -v CLONE_THREAD {name} | grep -c 'clone'")
    counted = subprocess.run(["bash", "-c", count_cmd], cwd=tmp_path, capture_output=True, text=True, timeout=10)
    expected = 2 if persistent else 4  # num_workers 2, two epochs: forked once, or once per epoch
    assert counted.stdout.split() == count_out == [str(expected)], (counted.stdout, count_out)
    if persistent:
        return
    list_cmd, page_clones = shown(f"grep -v CLONE_THREAD {name} | grep 'clone'")
    listed = subprocess.run(["bash", "-c", list_cmd], cwd=tmp_path, capture_output=True, text=True, timeout=10)
    assert missing(page_clones, listed.stdout, tmp_path) == [], listed.stdout
    awk_cmd, awk_out = shown("awk '/clone/")
    per_parent = subprocess.run(["bash", "-c", awk_cmd], cwd=tmp_path, capture_output=True, text=True, timeout=10)
    rows = [line.split() for line in per_parent.stdout.splitlines()]
    assert [row[1] for row in rows] == [awk_out[0].split()[1]] == ["4"], per_parent.stdout
