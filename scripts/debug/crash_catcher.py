#!/usr/bin/env python
"""crash_catcher.py: run a command so that a hard crash (a segfault, an abort, a kill) leaves evidence.

A process that dies of a signal prints no traceback, only its status, 128 + the signal number
(139 for SIGSEGV). This runs the command after ``--`` with ``PYTHONFAULTHANDLER=1`` (every
thread's Python stack on a fatal signal) and ``PYTHONUNBUFFERED=1``, and on request ``--core``
(raise the core-size limit, say where cores go), ``--gdb`` (native ``bt`` and ``py-bt`` at the
crash), ``--cuda-launch-blocking`` or ``--sanitizer TOOL`` (compute-sanitizer). Its output passes
through; when it dies of a signal, times out or is interrupted, a report (the signal and what it
usually means, the stacks, the cores, duration in s, peak RSS in MiB) goes to stdout, to
``--out-dir DIR/crash-HOST-rankR.txt`` and to ``--json PATH``.

How to launch (under srun or torchrun, one catcher per rank, each writing its own report)::

    python crash_catcher.py --out-dir crashes -- python train.py --lr 3e-4
    srun python crash_catcher.py --out-dir crashes --core -- python train.py
    torchrun --nproc-per-node 8 crash_catcher.py --out-dir crashes -- python train.py

Example output (the command's line 5 calls ctypes.string_at(0); abridged)::

    ==================== crash_catcher.py: crash report ====================
    command:  python crasher.py
    outcome:  killed by SIGSEGV (signal 11); exit status 139; core dumped: no
    -- Python stacks (faulthandler) --
      File "/tmp/crashcatch_h/crasher.py", line 5 in crash
    ==================== end of crash report ====================

Exit status: the command's own (a signal death as 128 + N, like a shell), 1 timeout, 2 usage,
130/143 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PROG = "crash_catcher.py"


SANITIZER_TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
TAIL_BYTES = 512 * 1024          # how much of each output stream is kept for the report
BT_FRAMES = 12                   # native frames shown in the report (the JSON keeps 200)

# What a signal death usually means in a training job (the report prints the line).
SIGNAL_HINTS = {
    "SIGSEGV": "an invalid memory access in native code: a C/C++/CUDA extension, a library built "
               "against another ABI, a NULL or freed pointer, or a stack overflow",
    "SIGBUS": "a memory-mapped file was truncated or replaced under the process (a dataset or "
              "checkpoint rewritten while mmapped), or /dev/shm ran out (DataLoader workers)",
    "SIGABRT": "abort(): an uncaught C++ exception ('terminate called ...'), a failed assert in a "
               "library, glibc's heap check ('free(): invalid pointer'), or a watchdog tearing "
               "the process down (NCCL timeout)",
    "SIGFPE": "an arithmetic trap in native code, usually an integer division by zero",
    "SIGILL": "an instruction this CPU lacks (a binary built for a newer CPU) or a deliberate trap",
    "SIGKILL": "killed from outside, no handler could run: the kernel OOM killer (dmesg: 'Killed "
               "process'), a cgroup memory limit (SLURM state OUT_OF_MEMORY), or a forced kill",
    "SIGTERM": "asked to stop: scancel, the job's time limit, or a launcher stopping the other "
               "ranks after one failed",
}


def rank_of() -> int:
    """RANK (torchrun), else SLURM_PROCID (srun), else 0."""
    return env_int("RANK", env_int("SLURM_PROCID", 0))


def fill(path: str, host: str, rank: int) -> str:
    return path.replace("{host}", host).replace("{rank}", str(rank))


def resolve_command(name: str) -> str:
    """The executable the command names, as the shell would find it; a usage error otherwise."""
    found = shutil.which(name)
    if found:
        return found
    if os.sep in name and os.path.exists(name):
        raise ScriptError(f"command {name}: is not an executable file", EXIT_USAGE)
    raise ScriptError(f"command {name!r} not found (not on PATH, not a path to an executable)",
                      EXIT_USAGE)


def is_script(path: str) -> bool:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        return f.read(2) == b"#!"
    return False


def python_gdb_extension(executable: str) -> str | None:
    """CPython's gdb extension (py-bt) for this executable, if one exists: next to a source-built
    interpreter (``python3.11-gdb.py``) or under gdb's auto-load folder (Debian's python3-dbg)."""
    real = os.path.realpath(executable)
    for candidate in (real + "-gdb.py", "/usr/share/gdb/auto-load" + real + "-gdb.py"):
        if os.path.isfile(candidate):
            return candidate
    return None


def core_pattern() -> str:
    with contextlib.suppress(OSError), open("/proc/sys/kernel/core_pattern", encoding="utf-8") as f:
        return f.read().strip()
    return ""


def core_destination(pattern: str) -> str:
    """One sentence: where the kernel puts a core dump of the command."""
    if not pattern:
        return "unknown (/proc/sys/kernel/core_pattern is not readable)"
    if pattern.startswith("|"):
        program = pattern[1:].split()[0] if pattern[1:].split() else "?"
        if "systemd-coredump" in program:
            how = "list them with `coredumpctl list`, open one with `coredumpctl gdb PID`"
        elif "apport" in program:
            how = "apport keeps them under /var/crash (unpack with apport-unpack)"
        else:
            how = "see that program's documentation"
        return (f"piped to {program} (core_pattern {pattern!r}): {how}; in a container the "
                "pattern is the host's, so the core lands on the host")
    where = pattern if pattern.startswith("/") else os.path.join(os.getcwd(), pattern)
    return f"written to a file: {where} (core_pattern {pattern!r}; %p is the pid, %e the program)"


def find_cores(pattern: str, since: float) -> list[str]:
    """Core files written since ``since`` (epoch seconds) by a file-name core_pattern."""
    if not pattern or pattern.startswith("|"):
        return []
    wild = re.sub(r"%.", "*", pattern.replace("%%", "\0")).replace("\0", "%") + "*"
    where = wild if wild.startswith("/") else os.path.join(os.getcwd(), wild)
    found = []
    for path in glob.glob(where):
        with contextlib.suppress(OSError):
            if os.path.isfile(path) and os.path.getmtime(path) >= since - 1:
                found.append(path)
    return sorted(found)


def process_tree(root: int) -> dict[int, str]:
    """``root`` and all its descendants, from /proc: {pid: start time} (the start time tells a
    reused pid from the process we meant)."""
    parents, starts = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError), open(f"/proc/{entry}/stat", encoding="utf-8",
                                                errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
            parents[int(entry)], starts[int(entry)] = int(fields[1]), fields[19]
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in starts and pid not in tree:
            tree[pid] = starts[pid]
            todo.extend(p for p, parent in parents.items() if parent == pid)
    return tree


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Child:
    """The command, in its own process group, with its output passed through and its tails kept."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.known: dict[int, str] = {}
        self.tails = {"stdout": bytearray(), "stderr": bytearray()}
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         preexec_fn=os.setpgrp)
        except OSError as err:
            raise ScriptError(f"cannot run {argv[0]}: {err.strerror}", EXIT_USAGE) from None
        self.known[self.proc.pid] = ""
        self.readers = [threading.Thread(target=self._pump, args=(self.proc.stdout, sys.stdout, "stdout"),
                                         daemon=True),
                        threading.Thread(target=self._pump, args=(self.proc.stderr, sys.stderr, "stderr"),
                                         daemon=True)]
        for reader in self.readers:
            reader.start()

    def _pump(self, pipe, out, name: str) -> None:
        tail = self.tails[name]
        while True:
            try:
                chunk = os.read(pipe.fileno(), 65536)
            except OSError:
                return
            if not chunk:
                return
            with contextlib.suppress(OSError, ValueError):
                out.buffer.write(chunk)
                out.buffer.flush()
            tail.extend(chunk)
            if len(tail) > 2 * TAIL_BYTES:
                del tail[:-TAIL_BYTES]

    def signal_all(self, sig: int, spare_root: bool = False) -> None:
        """Send ``sig`` to the command's process group and to every descendant (gdb puts its
        inferior in a group of its own), including ones seen earlier that still run.
        ``spare_root``: only the descendants (gdb then shows where its inferior was). Each process
        gets ``sig`` once: faulthandler's handler runs with the signal unblocked and its default
        action restored, so a second SIGABRT during the dump would kill it half-written."""
        grouped = False
        if not spare_root:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
                grouped = True
        if self.proc.returncode is None:
            self.known.update(process_tree(self.proc.pid))
        alive = process_tree(1)
        for pid, start in list(self.known.items()):
            if grouped and _group_of(pid) == self.proc.pid:
                continue  # killpg reached it
            if pid in alive and (not start or alive[pid] == start) and not (spare_root and pid == self.proc.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)

    def text(self, name: str) -> str:
        return bytes(self.tails[name][-TAIL_BYTES:]).decode("utf-8", errors="replace")


THREAD_HEAD = re.compile(r"(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):")
DUMP_LINE = re.compile(r"(Fatal Python error|Current thread 0x|Thread 0x|  File |  <no Python frame>"
                       r"|Extension modules:|Python runtime state|\s*\.\.\.\s*$|\s*$)")


def faulthandler_section(text: str) -> str:
    """The last faulthandler dump in ``text``: from its 'Fatal Python error' line (a fatal
    signal) or its first 'Thread 0x...' header (a dump on demand) through its last frame."""
    lines = text.splitlines()
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error: ")]
    heads = [i for i, line in enumerate(lines) if THREAD_HEAD.match(line)]
    if fatal and (not heads or fatal[-1] > heads[-1] or
                  all(DUMP_LINE.match(x) for x in lines[fatal[-1]:heads[-1]])):
        first = fatal[-1]
    elif heads:
        first = heads[-1]
        while [h for h in heads if h < first] and all(
                DUMP_LINE.match(x) for x in lines[[h for h in heads if h < first][-1]:first]):
            first = [h for h in heads if h < first][-1]
    else:
        return ""
    end = first
    while end < len(lines) and DUMP_LINE.match(lines[end]):
        end += 1
    keep = lines[first:end]
    while keep and not keep[-1].strip():
        keep.pop()
    return "\n".join(keep[:400])


def gdb_findings(out: str, err: str) -> dict:
    """What gdb's batch run says: the stop, the native backtrace, py-bt's frames, the end."""
    found = {"stopped_by": "", "backtrace": "", "py_bt": "", "py_bt_available": None,
             "inferior_signal": "", "inferior_exit": None, "inferior_pid": None}
    m = re.search(r"Program received signal (SIG\w+)", out)
    if m:
        found["stopped_by"] = m[1]
    frames = [line for line in out.splitlines() if re.match(r"#\d+\s", line)]
    # frames can be kilobytes long (gdb prints Python dicts as arguments): keep each one short
    found["backtrace"] = "\n".join(f if len(f) <= 240 else f[:237] + "..." for f in frames[:200])
    m = re.search(r"^Traceback \(most recent call first\):\n((?:  .*\n?)+)", out, re.M)
    if m:
        found["py_bt"], found["py_bt_available"] = m[0].rstrip(), True
    if 'Undefined command: "py-bt"' in err + out:
        found["py_bt_available"] = False
    elif found["py_bt"] == "" and found["stopped_by"] and "Unable to locate python frame" in err + out:
        found["py_bt_available"] = True
    m = re.search(r"Program terminated with signal (SIG\w+)", out)
    if m:
        found["inferior_signal"] = m[1]
    m = re.search(r"\[Inferior \d+ \(process (\d+)\) exited (normally|with code (\d+))\]", out)
    if m:
        found["inferior_pid"] = int(m[1])
        found["inferior_exit"] = 0 if m[2] == "normally" else int(m[3], 8)
    return found


def py_bt_help(executable: str) -> str:
    """What to do when gdb has no ``py-bt`` for this interpreter."""
    real = os.path.realpath(executable)
    return (f"py-bt is not available: this gdb has no CPython extension for {real}. For "
            "Debian/Ubuntu's system Python, apt-get install python3-dbg (it puts "
            "python3.X-gdb.py under /usr/share/gdb/auto-load/); for a source-built Python, copy "
            "Tools/gdb/libpython.py of the same version next to the binary as "
            f"{os.path.basename(real)}-gdb.py")


def environment_facts() -> dict:
    from importlib import metadata
    facts = {"python (catcher)": platform.python_version(), "kernel": platform.release()}
    for package in ("torch", "nvidia-nccl-cu12", "nvidia-nccl-cu13"):
        with contextlib.suppress(Exception):
            facts[f"{package} (catcher's Python)"] = metadata.version(package)
    with contextlib.suppress(OSError), open("/proc/driver/nvidia/version", encoding="utf-8") as f:
        facts["nvidia driver"] = f.readline().strip()
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "SLURM_JOB_ID", "SLURM_STEP_ID",
                "SLURM_NODELIST", "LOCAL_RANK", "WORLD_SIZE", "NCCL_DEBUG",
                "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        if os.environ.get(var):
            facts[var] = os.environ[var]
    return facts


@dataclasses.dataclass
class Run:
    """A finished run of the command: its wait status, rusage and how it was ended."""
    child: Child
    status: int
    usage: resource.struct_rusage
    duration: float
    started_at: float
    timed_out: bool
    received: list[int]


def prepare(opts, executable: str, command: list[str], tool_path: str | None):
    """The command line to run (under gdb or compute-sanitizer), its environment, the notes for the
    report and the core_pattern; with --core, raises the core-size limit the command inherits."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if opts.cuda_launch_blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    notes = []
    pattern = core_pattern()
    if opts.core:
        soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        if hard == 0:
            notes.append("--core: the hard core-size limit is 0, no core can be written (ask the "
                         "admins, or set it in the job's prolog / container runtime)")
        else:
            resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))   # inherited by the command
    argv = [executable, *command[1:]]
    if opts.gdb:
        extension = python_gdb_extension(executable)
        pre = ["-iex", "set print thread-events off"]
        if extension:   # gdb declines an extension outside its safe path; allow this one file
            pre += ["-iex", f"add-auto-load-safe-path {extension}"]
        argv = [tool_path, "-q", "-batch", *pre, "-ex", "run", "-ex", "bt", "-ex", "py-bt",
                "-ex", "handle all nostop noprint pass", "-ex", "continue", "--args", *argv]
    elif opts.sanitizer:
        argv = [tool_path, "--tool", opts.sanitizer, *argv]
    return argv, env, notes, pattern


def supervise(argv: list[str], env: dict[str, str], opts, notes: list[str]) -> Run:
    """Run the command to its end: SIGINT/SIGTERM are forwarded to its process tree, --timeout
    sends SIGABRT (then SIGKILL after --grace), and its output is drained."""
    received: list[int] = []

    def on_signal(sig, _frame):
        received.append(sig)
        child.signal_all(sig)

    start, started_at = time.monotonic(), time.time()
    child = Child(argv, env)
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    timed_out, kill_at = False, None
    try:
        while True:
            pid, status, usage = os.wait4(child.proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if opts.timeout and not timed_out and now - start >= opts.timeout:
                timed_out = True
                child.signal_all(signal.SIGABRT, spare_root=opts.gdb)   # under gdb: its inferior
                kill_at = now + opts.grace
            if received and kill_at is None:
                kill_at = now + opts.grace
            if kill_at is not None and now >= kill_at:
                child.signal_all(signal.SIGKILL)
                kill_at = float("inf")
            time.sleep(0.05)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    duration = time.monotonic() - start
    child.proc.returncode = os.waitstatus_to_exitcode(status)
    # Grandchildren that outlive the command keep its pipes open: give them a moment, then kill.
    for reader in child.readers:
        reader.join(timeout=5)
    if any(reader.is_alive() for reader in child.readers):
        child.signal_all(signal.SIGKILL)
        notes.append("processes started by the command outlived it and were killed")
        for reader in child.readers:
            reader.join(timeout=2)
    return Run(child, status, usage, duration, started_at, timed_out, received)


def read_ending(run: Run, opts, notes: list[str]) -> dict:
    """How the command ended, from its wait status and its output: the signal (also one that gdb
    or a shell inside the command reports), the exit status, the faulthandler dump, gdb's view."""
    out, err = run.child.text("stdout"), run.child.text("stderr")
    status = run.status
    signame, exit_status, core_dumped = "", None, bool(os.WIFSIGNALED(status) and os.WCOREDUMP(status))
    if os.WIFSIGNALED(status):
        signame = signal.Signals(os.WTERMSIG(status)).name
        exit_status = 128 + os.WTERMSIG(status)
    else:
        exit_status = os.WEXITSTATUS(status)
    gdb = gdb_findings(out, err) if opts.gdb else None
    if gdb and not signame:          # gdb itself exits 0; its output says how the command ended
        if gdb["inferior_signal"]:
            signame = gdb["inferior_signal"]
            exit_status = 128 + signal.Signals[signame].value
        elif gdb["inferior_exit"] is not None:
            exit_status = gdb["inferior_exit"]
    stacks = faulthandler_section(err)
    if not signame and 128 < exit_status < 128 + 65:
        with contextlib.suppress(ValueError):
            signame = signal.Signals(exit_status - 128).name
            notes.append(f"status {exit_status} is 128 + {exit_status - 128}: a shell or launcher "
                         f"inside the command reported a {signame} death")
    sanitizer = ""
    if opts.sanitizer:
        m = re.findall(r"=+ ERROR SUMMARY: .*", out + err)
        sanitizer = m[-1] if m else ""
    return {"signal": signame, "exit_status": exit_status, "core_dumped": core_dumped, "gdb": gdb,
            "faulthandler": stacks, "sanitizer_summary": sanitizer}


def verdict(run: Run, end: dict, opts) -> tuple[str, int]:
    """The report's outcome line and the catcher's exit status."""
    if run.received:
        return (f"interrupted by {signal.Signals(run.received[0]).name} (forwarded to the command)",
                128 + run.received[0])
    if run.timed_out:
        return (f"timed out after {opts.timeout:g} s: sent SIGABRT to its process tree "
                f"(then SIGKILL, if still alive {opts.grace:g} s later)"), EXIT_FAILURE
    if end["signal"]:
        return f"killed by {end['signal']} (signal {signal.Signals[end['signal']].value})", end["exit_status"]
    return f"exited with status {end['exit_status']}", end["exit_status"]


def render(r: dict, opts) -> str:
    rule = "=" * 20
    lines = [f"{rule} {PROG}: crash report {rule}",
             f"command:  {shlex.join(r['command'])}",
             f"host:     {r['host']}   rank: {r['rank']}   pid: {r['pid']}",
             f"outcome:  {r['outcome']}; exit status {r['exit_status']}"
             + (f"; core dumped: {'yes' if r['core_dumped'] else 'no'}" if r["signal"] else ""),
             f"duration: {r['duration_s']:.1f} s   peak RSS: {r['max_rss_mib']:.1f} MiB"]
    if r["hint"]:
        lines.append(f"meaning:  {r['signal']} is usually {r['hint']}")
    lines += [f"note:     {n}" for n in r["notes"]]
    lines.append("-- Python stacks (faulthandler) --")
    lines.append(r["faulthandler"] or "(none printed: the process was killed by a signal "
                 "faulthandler cannot catch, or the command is not Python)")
    gdb = r["gdb"]
    if gdb is not None:
        lines.append("-- native backtrace (gdb bt) --")
        frames = gdb["backtrace"].splitlines()
        lines.append("\n".join(frames[:BT_FRAMES]) or "(none: the command did not stop on a "
                     "signal under gdb)")
        if len(frames) > BT_FRAMES:
            lines.append(f"... {len(frames) - BT_FRAMES} more frames (all in the output above)")
        lines.append("-- Python backtrace (gdb py-bt) --")
        lines.append(gdb["py_bt"] or r["py_bt_help"] or "(none)")
    if opts.sanitizer:
        lines.append(f"-- compute-sanitizer --tool {r['sanitizer']} --")
        lines.append(r["sanitizer_summary"] or "(no ERROR SUMMARY line; see the output above)")
    if opts.core:
        lines.append("-- core dump --")
        lines.append(f"cores are {r['core_destination']}")
        for path in r["core_files"]:
            lines.append(f"core file: {path} ({os.path.getsize(path) / 2**20:.1f} MiB): "
                         f"gdb -batch -ex bt {r['executable']} {path}")
        if not r["core_files"] and not r["core_pattern"].startswith("|"):
            lines.append("no new core file found (was the process killed by a signal that dumps core?)")
    lines.append("-- environment --")
    lines += [f"{k}: {v}" for k, v in r["environment"].items()]
    lines.append(f"{rule} end of crash report {rule}")
    return "\n".join(lines) + "\n"


def build_report(run: Run, opts, command: list[str], executable: str, host: str, rank: int,
                 pattern: str, notes: list[str]) -> tuple[dict, int]:
    """The outcome as a dict (the --json document) and the catcher's exit status."""
    end = read_ending(run, opts, notes)
    signame, exit_status, gdb, received = end["signal"], end["exit_status"], end["gdb"], run.received
    crashed = bool(signame or end["faulthandler"] or run.timed_out or received)
    cores = find_cores(pattern, run.started_at) if opts.core else []
    core_dumped = end["core_dumped"] or bool(cores)   # under gdb, the inferior dumped it, not gdb
    outcome, final = verdict(run, end, opts)
    report = {
        "crashed": crashed, "outcome": outcome, "exit_status": exit_status, "signal": signame,
        "core_dumped": core_dumped, "timed_out": run.timed_out,
        "interrupted_by": signal.Signals(received[0]).name if received else "",
        "host": host, "rank": rank, "pid": run.child.proc.pid, "command": command,
        "executable": executable,
        "duration_s": round(run.duration, 3), "max_rss_mib": round(run.usage.ru_maxrss / 1024, 1),
        "hint": "" if run.timed_out or received else SIGNAL_HINTS.get(signame, ""),
        "faulthandler": end["faulthandler"],
        "gdb": gdb, "py_bt_help": "", "sanitizer": opts.sanitizer or "",
        "sanitizer_summary": end["sanitizer_summary"],
        "core_pattern": pattern, "core_destination": core_destination(pattern) if opts.core else "",
        "core_files": cores, "notes": notes, "environment": environment_facts(), "report_path": None,
    }
    if gdb and gdb["py_bt_available"] is False:
        report["py_bt_help"] = py_bt_help(executable)
    return report, final


def publish(report: dict, opts, out_dir: str | None, json_path: str | None) -> None:
    """After a crash, the report on stdout and in --out-dir; otherwise a line for a failed command;
    the JSON in every case."""
    if report["crashed"]:
        text = render(report, opts)
        if out_dir:
            path = os.path.join(out_dir, f"crash-{report['host']}-rank{report['rank']}.txt")
            write_atomic(path, text)
            report["report_path"] = path
        sys.stderr.flush()
        sys.stdout.write(text)
        if report["report_path"]:
            say(f"{PROG}: report written to {report['report_path']}")
        sys.stdout.flush()
    elif report["exit_status"]:
        say(f"{PROG}: {shlex.join(report['command'])} exited with status {report['exit_status']} "
            "(not a crash: no signal, no faulthandler dump; no report)")
    if json_path:
        write_atomic(json_path, json.dumps(report, indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, usage=f"{PROG} [options] -- COMMAND [ARGS ...]",
        description="Run COMMAND so that a hard crash leaves evidence: faulthandler's Python "
        "stacks, optionally a core file, gdb's backtraces, CUDA_LAUNCH_BLOCKING or "
        "compute-sanitizer; a report per rank when it dies of a signal.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--out-dir", metavar="DIR", type=nonempty,
                   help="also write the report to DIR/crash-HOST-rankR.txt (created if missing; "
                   "{host} and {rank} are filled in)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the outcome as JSON here, crash or not ({host}, {rank} filled in)")
    p.add_argument("--core", action="store_true",
                   help="raise the core-file size limit to the hard limit and report the cores")
    p.add_argument("--gdb", action="store_true",
                   help="run the command under gdb -batch: native backtrace and py-bt at the crash")
    p.add_argument("--cuda-launch-blocking", action="store_true",
                   help="set CUDA_LAUNCH_BLOCKING=1: CUDA errors are raised at the faulty line")
    p.add_argument("--sanitizer", choices=SANITIZER_TOOLS, metavar="TOOL",
                   help="run under compute-sanitizer --tool TOOL (" + ", ".join(SANITIZER_TOOLS) + ")")
    p.add_argument("--timeout", metavar="SECONDS", type=number(float, 0, 365 * 86400, lo_open=True),
                   help="end the command after this many seconds: SIGABRT (faulthandler dumps "
                   "the stacks), SIGKILL after --grace; status 1 (default: no limit)")
    p.add_argument("--grace", metavar="SECONDS", type=number(float, 0, 3600), default=10.0,
                   help="seconds between SIGABRT/SIGTERM and SIGKILL (default 10)")
    return p


def parse_command_line(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The catcher's options (before ``--``) and the command (after it)."""
    options, command = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args \
        else (args, [])
    parser = build_parser()
    opts, extra = parser.parse_known_args(options)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)} (the command goes after --)")
    if not command or not command[0].strip():
        raise ScriptError("no command given: put it after --, e.g. "
                          f"{PROG} --out-dir crashes -- python train.py", EXIT_USAGE)
    return opts, command


def check_tool(opts, command: list[str], executable: str) -> str | None:
    """gdb's or compute-sanitizer's path when asked for; a usage error when it cannot work."""
    if opts.gdb and opts.sanitizer:
        raise ScriptError("--gdb and --sanitizer cannot be combined (both run the command)", EXIT_USAGE)
    tool_path = None
    if opts.gdb:
        if is_script(executable):
            raise ScriptError(f"--gdb: {command[0]} is a #! script, gdb needs a binary: run it "
                              f"through its interpreter, e.g. -- python {executable}", EXIT_USAGE)
        tool_path = shutil.which("gdb")
        if not tool_path:
            raise ScriptError("--gdb: gdb not found on PATH (apt-get install gdb)", EXIT_USAGE)
    if opts.sanitizer:
        tool_path = shutil.which("compute-sanitizer")
        if not tool_path:
            raise ScriptError("--sanitizer: compute-sanitizer not found on PATH (it comes with "
                              "the CUDA toolkit, in /usr/local/cuda/bin)", EXIT_USAGE)
    return tool_path


def check_outputs(opts, host: str, rank: int) -> tuple[str | None, str | None]:
    """--out-dir (and the report file it will hold) and --json, checked before the command runs."""
    out_dir = check_output_dir(fill(opts.out_dir, host, rank), "--out-dir") if opts.out_dir else None
    if out_dir:  # the report it writes there if the command crashes
        check_output(os.path.join(out_dir, f"crash-{host}-rank{rank}.txt"), "--out-dir")
    json_path = check_output(fill(opts.json, host, rank), "--json") if opts.json else None
    return out_dir, json_path


def main(argv: list[str] | None = None) -> int:
    opts, command = parse_command_line(sys.argv[1:] if argv is None else list(argv))
    host = socket.gethostname().split(".")[0] or "localhost"
    rank = rank_of()
    executable = resolve_command(command[0])
    tool_path = check_tool(opts, command, executable)
    out_dir, json_path = check_outputs(opts, host, rank)
    run_argv, env, notes, pattern = prepare(opts, executable, command, tool_path)
    run = supervise(run_argv, env, opts, notes)
    report, final = build_report(run, opts, command, executable, host, rank, pattern, notes)
    publish(report, opts, out_dir, json_path)
    return final


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


def env_int(name: str, default: int | None = None, lo: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty, an error when
    there is no default); a non-integer or a value below ``lo`` raises ScriptError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        if default is None:
            raise ScriptError(f"environment variable {name} is not set", EXIT_USAGE)
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScriptError(f"environment variable {name}={text!r} is not an integer", EXIT_USAGE) from None
    if value < lo:
        raise ScriptError(f"environment variable {name}={value} must be >= {lo}", EXIT_USAGE)
    return value


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def check_output_dir(path: str, option: str) -> str:
    """Check, before any work, that the folder ``path`` (given as ``option``) can receive results:
    creates it if missing and makes sure a file can be created in it. Returns the path; raises
    ScriptError naming the option and the offending path otherwise."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ScriptError(f"{option} {path}: {existing} is a file, not a folder", EXIT_USAGE)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write there ({err.strerror})", EXIT_USAGE) from None
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


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
