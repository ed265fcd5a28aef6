#!/usr/bin/env python
r"""run_watchdog.py: watch a long training from the outside (file systems, the SLURM job and its
nodes, progress, host memory) and raise an alert when something goes wrong.

Every ``--interval`` seconds each check gives ``ok`` or a finding: ``--fs PATH[:MIN_FREE_GB
[:MIN_FREE_INODES_PCT]]`` (statvfs: free GB, 1 GB = 10^9 bytes, and free inodes; not quotas),
``--job JOBID`` (squeue, then sacct: requeued, failed, cancelled, vanished; sinfo: its nodes
draining, down or not responding), ``--heartbeat FILE`` / ``--log FILE`` older than
``--stale-after`` seconds (a hang SLURM still sees RUNNING), ``--rss-pid PID`` (the slope of its
resident memory over ``--rss-window`` above ``--rss-slope-mb-per-h``: a slow leak). A finding
prints ``TIME run_watchdog.py: finding: CHECK: MESSAGE``, runs ``--alert-cmd`` (``/bin/sh -c``,
the message in ``$WATCHDOG_MESSAGE``, killed after ``--alert-timeout``, repeated only after
``--realert-after``) and can create a file (``--on-fs-full-touch``, ``--on-alert-touch``: a save
or kill switch). ``--events`` appends JSON lines, ``--json`` keeps the last status of each check.
Standard library only. The checks in full: book/en/orchestration/long-trainings.md.

Beside the training, on a login node (in tmux) or as a small job of its own::

    python run_watchdog.py --job 4242 --fs /lustre/ckpt:500:5 --heartbeat ckpt/heartbeat \
        --stale-after 900 --interval 60 --events watchdog.jsonl \
        --alert-cmd 'echo "$WATCHDOG_MESSAGE" | mail -s "job 4242" me@example.org'
    python run_watchdog.py --once --fs /scratch:100          # a cron entry: exit 3 on a finding

Example output (a job cancelled while watched, on the book's test cluster)::

    2026-11-25T10:06:27Z run_watchdog.py: finding: job:1: job 1 CANCELLED (squeue)
    2026-11-25T10:06:27Z run_watchdog.py: job 1 ended; exit 3

Exit status: 0 ok (the job COMPLETED), 1 failure, 2 usage (checked before the first round), 3 a
finding (--once, or the job ended otherwise), 130/143 interrupted by Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PROG = "run_watchdog.py"

OK, FINDING, DONE = "ok", "finding", "done"
ALIVE = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED"}
REQUEUED = {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
FAILED = {"FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
          "DEADLINE", "REVOKED", "SPECIAL_EXIT", "STOPPED"}
BAD_NODE = re.compile(r"drain|down|fail|maint|\*$")
JOB_ID = re.compile(r"\d+(_\d+)?(\+\d+)?")


# -- checks ------------------------------------------------------------------------------------
def fs_status(path: str, min_gb: float, min_inodes_pct: float) -> tuple[str, str, str]:
    """(status, kind, message) for one file system."""
    st = os.statvfs(path)
    free_gb = st.f_bavail * st.f_frsize / 1e9
    text = f"{free_gb:.3g} GB free"
    kinds = []
    if free_gb < min_gb:
        kinds.append("space")
        text += f" (below {min_gb:g} GB)"
    if st.f_files:
        pct = 100.0 * st.f_favail / st.f_files
        text += f", {pct:.3g}% inodes free"
        if pct < min_inodes_pct:
            kinds.append("inodes")
            text += f" (below {min_inodes_pct:g}%)"
    else:
        text += ", no inode count reported"
    return (FINDING if kinds else OK), "+".join(kinds) or "ok", text


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` in MB (10^6 bytes), None when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (FileNotFoundError, ProcessLookupError):
        return None
    return 0.0  # a zombie or kernel thread has no VmRSS line


def slope_per_hour(samples) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB/hour (0 for fewer than 2)."""
    samples = list(samples)
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in samples) / var * 3600.0


def run_cmd(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """A SLURM client command under ``timeout`` (TimeoutExpired propagates)."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def squeue(job: str, timeout: float) -> tuple[str, str, str] | None:
    """(state, reason, nodelist) of the job from squeue (all states), None if it is unknown."""
    res = run_cmd(["squeue", "-h", "--states=all", "-j", job, "-o", "%T|%r|%N"], timeout)
    lines = [line for line in res.stdout.splitlines() if line.count("|") >= 2]
    if res.returncode != 0 and "invalid job id" not in res.stderr.lower():
        raise SlurmError("squeue failed: " + ((res.stderr.strip().splitlines() or ["?"])[-1]))
    if not lines:
        return None
    state, reason, nodes = lines[0].split("|", 2)
    return state.strip(), reason.strip(), nodes.strip()


class SlurmError(Exception):
    """A SLURM client command that failed (not "unknown job"): no controller, bad config."""


def sacct(job: str, timeout: float) -> tuple[str, str, str] | None:
    """(state, exit code, nodelist) from accounting, None if sacct is absent or knows nothing."""
    if shutil.which("sacct") is None:
        return None
    res = run_cmd(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,ExitCode,NodeList"], timeout)
    lines = [line for line in res.stdout.splitlines() if line.count("|") >= 2]
    if res.returncode != 0 or not lines:
        return None
    state, code, nodes = lines[-1].split("|", 2)
    return state.split()[0] if state.split() else "UNKNOWN", code, nodes


def bad_nodes(nodelist: str, timeout: float) -> list[str]:
    """'NODE is STATE: REASON' for each node of ``nodelist`` (a hostlist) in a bad state."""
    res = run_cmd(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%T|%E"], timeout)
    found = {}
    for line in res.stdout.splitlines():
        if line.count("|") < 2:
            continue
        node, state, reason = (x.strip() for x in line.split("|", 2))
        if BAD_NODE.search(state.lower()):
            found[node] = f"{node} is {state}" + (f": {reason}" if reason and reason != "none" else "")
    return list(found.values())


# -- the watch ---------------------------------------------------------------------------------
class Watchdog:
    """The checks, their last status, the alert bookkeeping."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.start = time.time()
        self.last: dict[str, dict] = {}  # check -> {"status", "kind", "message", "since"}
        self.sent: dict[tuple[str, str], float] = {}  # (check, kind) -> time alert last sent
        self.seen_running = False
        self.failed_rounds = 0
        self.log_size: tuple[int, float] | None = None  # (size, time it last changed)
        self.rss = collections.deque()
        self.job_end: int | None = None  # exit status once the job has ended

    # One check = (name, status, kind, message).
    def round(self) -> list[tuple[str, str, str, str]]:
        a, out = self.args, []
        for path, gb, pct in a.fs:
            gb = a.min_free_gb if gb is None else gb
            pct = a.min_free_inodes_pct if pct is None else pct
            try:
                out.append((f"fs:{path}", *fs_status(path, gb, pct)))
            except OSError as exc:
                out.append((f"fs:{path}", FINDING, "error", f"statvfs failed ({exc.strerror})"))
        if a.job:
            out.extend(self.job_checks())
        for name, path in (("heartbeat", a.heartbeat), ("log", a.log)):
            if path:
                out.append((name, *self.progress(name, path)))
        if a.rss_pid is not None:
            out.append(("rss", *self.rss_check()))
        return out

    def progress(self, name: str, path: str) -> tuple[str, str, str]:
        now = time.time()
        try:
            st = os.stat(path)
        except FileNotFoundError:
            age = now - self.start
            if age > self.args.stale_after:
                return FINDING, "stale", f"no progress for {age:.0f} s: {path} was never created"
            return OK, "ok", f"{path} not created yet"
        changed = st.st_mtime
        if name == "log":  # a log must grow: a rewrite of the same size is no progress
            if self.log_size is None or st.st_size != self.log_size[0]:
                self.log_size = (st.st_size, st.st_mtime if self.log_size is None else now)
            changed = self.log_size[1]
        age = now - changed
        if age > self.args.stale_after:
            what = "has not grown" if name == "log" else "last modified"
            return FINDING, "stale", (f"no progress for {age:.0f} s: {path} {what} "
                                      f"{age:.0f} s ago (--stale-after {self.args.stale_after:g})")
        return OK, "ok", f"{path} updated {age:.0f} s ago"

    def rss_check(self) -> tuple[str, str, str]:
        a, now = self.args, time.time()
        mb = rss_mb(a.rss_pid)
        if mb is None:
            return FINDING, "gone", f"process {a.rss_pid} is gone"
        self.rss.append((now, mb))
        while self.rss and self.rss[0][0] < now - a.rss_window:
            self.rss.popleft()
        slope = slope_per_hour(self.rss)
        span = self.rss[-1][0] - self.rss[0][0]
        text = (f"pid {a.rss_pid} RSS {mb:.1f} MB, trend {slope:+.1f} MB/h over {span:.0f} s "
                f"({len(self.rss)} samples)")
        if len(self.rss) >= 5 and span >= a.rss_window / 2 and slope > a.rss_slope_mb_per_h:
            return FINDING, "leak", f"{text}: above {a.rss_slope_mb_per_h:g} MB/h, a slow leak?"
        return OK, "ok", text

    def job_checks(self) -> list[tuple[str, str, str, str]]:
        a = self.args
        name = f"job:{a.job}"
        try:
            found = squeue(a.job, a.cmd_timeout)
            source = "squeue"
            if found is None:
                acct = sacct(a.job, a.cmd_timeout)
                found = (acct[0], f"exit code {acct[1]}", acct[2]) if acct else None
                source = "sacct"
        except subprocess.TimeoutExpired as exc:
            return [(name, FINDING, "slurm-timeout",
                     f"{exc.cmd[0]} did not answer within {a.cmd_timeout:g} s (slurmctld overloaded?)")]
        except SlurmError as exc:
            return [(name, FINDING, "slurm-error", str(exc))]
        if found is None:
            self.job_end = EXIT_FINDING
            return [(name, FINDING, "gone", f"job {a.job} is known neither to squeue nor to sacct")]
        state, reason, nodes = found
        state = state.split("+")[0].upper()
        why = f" ({reason})" if reason and reason.lower() != "none" else ""
        checks = []
        if state in ALIVE:
            self.seen_running, self.failed_rounds = True, 0
            checks.append((name, OK, state, f"job {a.job} {state} on {nodes}"))
        elif state == "PENDING" and not self.seen_running:
            self.failed_rounds = 0
            checks.append((name, OK, "PENDING", f"job {a.job} PENDING{why}"))
        elif state == "PENDING" or state in REQUEUED:
            self.failed_rounds = 0
            checks.append((name, FINDING, "requeued", f"job {a.job} requeued: {state}{why}"))
        elif state == "COMPLETED":
            self.job_end = EXIT_OK
            checks.append((name, DONE, "done", f"job {a.job} COMPLETED"))
        else:
            self.failed_rounds += 1
            if self.failed_rounds >= 2 or a.once:
                self.job_end = EXIT_FINDING
            checks.append((name, FINDING, state, f"job {a.job} {state}{why} ({source})"))
        if nodes and nodes != "(null)" and state in ALIVE:
            try:
                bad = bad_nodes(nodes, a.cmd_timeout)
            except subprocess.TimeoutExpired:
                bad = None
                checks.append(("nodes", FINDING, "slurm-timeout",
                               f"sinfo did not answer within {a.cmd_timeout:g} s"))
            if bad is not None:
                checks.append(("nodes", FINDING, "bad:" + ",".join(sorted(b.split()[0] for b in bad)),
                               f"job {a.job}: " + "; ".join(bad)) if bad
                              else ("nodes", OK, "ok", f"{nodes}: fine"))
        return checks

    # -- reporting -----------------------------------------------------------------------------
    def event(self, check: str, status: str, message: str) -> None:
        if self.args.events:
            line = json.dumps({"time": date_utc(), "check": check, "status": status,
                               "message": message}) + "\n"
            try:
                with open(self.args.events, "a") as f:
                    f.write(line)
            except OSError as exc:  # a full file system must not stop the watch of that FS
                warn(f"cannot append to --events {self.args.events}: {exc.strerror}")

    def handle(self, results) -> bool:
        """Record a round's results, alert on findings; True if any check has a finding."""
        now, any_finding = time.time(), False
        for name, status, kind, message in results:
            before = self.last.get(name)
            if before is None or (before["status"], before["kind"]) != (status, kind):
                self.last[name] = {"status": status, "kind": kind, "message": message,
                                   "since": date_utc()}
                self.event(name, status, message)
                if status != FINDING:
                    print(f"{date_utc()} {name}: {status}: {message}", flush=True)
            self.last[name]["message"] = message
            if status != FINDING:
                for key in [k for k in self.sent if k[0] == name]:
                    del self.sent[key]  # recovered: the next occurrence alerts at once
                continue
            any_finding = True
            key = (name, kind)
            if key in self.sent and now - self.sent[key] < self.args.realert_after:
                continue
            self.sent[key] = now
            self.touch(name, fs=name.startswith("fs:"))  # first: a switch file is the urgent part
            print(f"{date_utc()} {PROG}: finding: {name}: {message}", flush=True)
            self.alert(name, status, message)
        if self.args.json:
            try:
                write_atomic(self.args.json, json.dumps(
                    {"time": date_utc(), "checks": self.last}, indent=1) + "\n")
            except OSError as exc:
                warn(f"cannot write --json {self.args.json}: {exc.strerror}")
        return any_finding

    def touch(self, check: str, fs: bool) -> None:
        """Create --on-fs-full-touch (file-system findings) and --on-alert-touch files."""
        a = self.args
        for path in ([a.on_fs_full_touch] if fs else []) + [a.on_alert_touch]:
            if path:
                try:
                    with open(path, "a"):
                        pass
                    self.event(check, "touched", path)
                except OSError as exc:
                    warn(f"cannot create {path}: {exc.strerror}")

    def alert(self, check: str, status: str, message: str) -> None:
        a = self.args
        if a.alert_cmd:
            ok, detail = run_alert(a.alert_cmd, f"{socket.gethostname()}: {check}: {message}",
                                   check, status, a.alert_timeout)
            self.event(check, "alert-sent" if ok else "alert-failed", detail)
            if not ok:
                warn(f"alert command {detail}")


# -- alerts ------------------------------------------------------------------------------------
def warn(text: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: warning: {text}\n")
    sys.stderr.flush()


def descendants(pid: int) -> list[int]:
    """The process ids below ``pid`` (children, their children, ...), from /proc; [] elsewhere."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # after "(comm)": state, ppid
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_alert(command: str, message: str, check: str, status: str,
              timeout: float) -> tuple[bool, str]:
    """Run ``command`` with /bin/sh, the message in $WATCHDOG_MESSAGE; (ok, what happened).
    Its whole process group is killed after ``timeout`` seconds (a hung mail or curl)."""
    env = {**os.environ, "WATCHDOG_MESSAGE": message, "WATCHDOG_CHECK": check,
           "WATCHDOG_STATUS": status}
    try:
        proc = subprocess.Popen(["/bin/sh", "-c", command], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    except OSError as exc:
        return False, f"could not start: {exc.strerror}"
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Its process group, and every process below it that left the group (setsid), then at
        # most 2 s more for the pipe: one that escaped the kill must not hold the watchdog.
        for pid in [proc.pid, *descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            proc.stdout.close()
            proc.wait(timeout=2)
        return False, f"did not finish within {timeout:g} s; killed"
    tail = (out.strip().splitlines() or [""])[-1][:200]
    if proc.returncode != 0:
        return False, f"exited with status {proc.returncode}" + (f": {tail}" if tail else "")
    return True, "exit 0"


class Stop:
    """SIGTERM/SIGINT end the watch at the next wake-up (the wait is interrupted at once)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self.wake = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        self.signal = signum
        self.wake.set()


# -- arguments ---------------------------------------------------------------------------------
def fs_spec(text: str) -> tuple[str, float | None, float | None]:
    """``PATH[:MIN_FREE_GB[:MIN_FREE_INODES_PCT]]`` -> (path, gb or None, pct or None). Trailing
    ``:``-fields are thresholds when they are numbers or empty, so a path may contain colons."""
    parts, limits = nonempty(text).split(":"), []
    while len(parts) > 1 and len(limits) < 2 and re.fullmatch(r"[0-9.eE+-]*", parts[-1]):
        limits.insert(0, parts.pop())
    path = ":".join(parts)
    gb = float_or_none(limits[0], "MIN_FREE_GB", 0, None) if limits else None
    pct = float_or_none(limits[1], "MIN_FREE_INODES_PCT", 0, 100) if len(limits) > 1 else None
    return path, gb, pct


def float_or_none(text: str, what: str, lo: float, hi: float | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None
    if not math.isfinite(value) or value < lo or (hi is not None and value > hi):
        raise argparse.ArgumentTypeError(f"{what} {text} must be between {lo:g} and "
                                         f"{'inf' if hi is None else f'{hi:g}'}")
    return value


def job_id(text: str) -> str:
    if not JOB_ID.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a SLURM job id (e.g. 4242 or 4242_7)")
    return text.strip()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Watch a long training from outside: file systems, a SLURM job and its "
                    "nodes, a heartbeat or log file, a process's RSS trend; alert on findings.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    w = p.add_argument_group("what to watch")
    w.add_argument("--fs", action="append", default=[], type=fs_spec,
                   metavar="PATH[:MIN_FREE_GB[:MIN_FREE_INODES_PCT]]",
                   help="a file system to watch (repeatable)")
    w.add_argument("--min-free-gb", type=number(float, 0), default=10.0,
                   help="default MIN_FREE_GB of --fs (default 10)")
    w.add_argument("--min-free-inodes-pct", type=number(float, 0, 100), default=5.0,
                   help="default MIN_FREE_INODES_PCT of --fs (default 5)")
    w.add_argument("--job", type=job_id, default=None, help="SLURM job id to follow")
    w.add_argument("--heartbeat", type=nonempty, default=None, metavar="FILE",
                   help="file the training touches every step")
    w.add_argument("--log", type=nonempty, default=None, metavar="FILE",
                   help="training log that must keep growing")
    w.add_argument("--stale-after", type=number(float, 0, lo_open=True), default=600.0,
                   metavar="S", help="--heartbeat/--log older than S seconds: no progress "
                                     "(default 600)")
    w.add_argument("--rss-pid", type=number(int, 1), default=None, metavar="PID",
                   help="process whose resident memory trend to watch (this host)")
    w.add_argument("--rss-window", type=number(float, 1), default=3600.0, metavar="S",
                   help="seconds of RSS samples the slope is fitted on (default 3600)")
    w.add_argument("--rss-slope-mb-per-h", type=number(float, 0, lo_open=True), default=200.0,
                   help="RSS growth that is a finding, MB/hour (default 200)")
    a = p.add_argument_group("what to do")
    a.add_argument("--alert-cmd", type=nonempty, default=None, metavar="COMMAND",
                   help="shell command run on a finding; message in $WATCHDOG_MESSAGE")
    a.add_argument("--alert-timeout", type=number(float, 0, 3600, lo_open=True), default=30.0,
                   metavar="S", help="seconds the alert command may take (default 30)")
    a.add_argument("--realert-after", type=number(float, 0), default=3600.0, metavar="S",
                   help="send the same finding again only after S seconds (default 3600)")
    a.add_argument("--on-fs-full-touch", type=nonempty, default=None, metavar="PATH",
                   help="create PATH on a file-system finding (e.g. a save or kill switch)")
    a.add_argument("--on-alert-touch", type=nonempty, default=None, metavar="PATH",
                   help="create PATH on any finding")
    a.add_argument("--events", type=nonempty, default=None, metavar="PATH",
                   help="append events as JSON lines to PATH")
    a.add_argument("--json", type=nonempty, default=None, metavar="PATH",
                   help="write the last status of every check to PATH (atomically, each round)")
    r = p.add_argument_group("how long")
    r.add_argument("--interval", type=number(float, 0.1, 86400), default=60.0, metavar="S",
                   help="seconds between rounds, 0.1 to 86400 (default 60)")
    r.add_argument("--once", action="store_true", help="one round; exit 0 if all fine, 3 if not")
    r.add_argument("--max-runtime", type=number(float, 0, lo_open=True), default=None,
                   metavar="S", help="stop after S seconds (default: until the job ends, or "
                                     "for ever without --job)")
    r.add_argument("--cmd-timeout", type=number(float, 0.1, 600), default=20.0, metavar="S",
                   help="timeout of each squeue/sacct/sinfo call (default 20)")
    return p


def check_parent(path: str, option: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ScriptError(f"{option} {path}: folder {folder} does not exist", EXIT_USAGE)
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)


def parse_args(argv=None) -> argparse.Namespace:
    """Parse and validate everything before the first round; problems exit 2 in one line."""
    args = build_parser().parse_args(argv)
    if not (args.fs or args.job or args.heartbeat or args.log or args.rss_pid):
        raise ScriptError("nothing to watch: give --fs, --job, --heartbeat, --log or --rss-pid",
                          EXIT_USAGE)
    paths = [path for path, _, _ in args.fs]
    for path in paths:
        if paths.count(path) > 1:
            raise ScriptError(f"--fs {path}: given twice", EXIT_USAGE)
        if not os.path.exists(path):
            hint = (" (thresholds must be numbers: PATH[:MIN_FREE_GB[:MIN_FREE_INODES_PCT]])"
                    if ":" in path else "")
            raise ScriptError(f"--fs {path}: does not exist{hint}", EXIT_USAGE)
    for option in ("heartbeat", "log", "on_fs_full_touch", "on_alert_touch"):
        if getattr(args, option):
            check_parent(getattr(args, option), "--" + option.replace("_", "-"))
    if args.rss_pid is not None and not os.path.exists(f"/proc/{args.rss_pid}/status"):
        raise ScriptError(f"--rss-pid {args.rss_pid}: no such process on this host", EXIT_USAGE)
    inputs = [p for p in (args.heartbeat, args.log) if p]
    if args.events:
        check_output(args.events, "--events", inputs)
    if args.json:
        check_output(args.json, "--json", [*inputs, *([args.events] if args.events else [])])
    if args.job:
        if shutil.which("squeue") is None:
            raise ScriptError(f"--job {args.job}: squeue not found on PATH (run this where "
                              "SLURM's client commands are installed)", EXIT_USAGE)
        try:
            state = squeue(args.job, args.cmd_timeout)
        except subprocess.TimeoutExpired:
            raise ScriptError(f"--job {args.job}: squeue did not answer within "
                              f"{args.cmd_timeout:g} s") from None
        except SlurmError as exc:
            raise ScriptError(f"--job {args.job}: {exc}") from None
        if state is None:
            raise ScriptError(f"--job {args.job}: squeue does not know this job (a typo, or "
                              "it ended long ago)", EXIT_USAGE)
    return args


def main(argv=None) -> int:
    stop = Stop()
    args = parse_args(argv)
    dog = Watchdog(args)
    watched = ", ".join([f"fs {p}" for p, _, _ in args.fs] + [f"{k} {v}" for k, v in (
        ("job", args.job), ("heartbeat", args.heartbeat), ("log", args.log),
        ("rss of pid", args.rss_pid)) if v])
    print(f"{date_utc()} {PROG}: watching {watched}; every {args.interval:g} s", flush=True)
    end = None if args.max_runtime is None else time.monotonic() + args.max_runtime
    while True:
        findings = dog.handle(dog.round())
        if stop.signal is not None:
            break
        if args.once:
            return EXIT_FINDING if findings else EXIT_OK
        if dog.job_end is not None:
            print(f"{date_utc()} {PROG}: job {args.job} ended; exit {dog.job_end}", flush=True)
            return dog.job_end
        wait = args.interval
        if end is not None:
            wait = min(wait, end - time.monotonic())
            if wait <= 0:
                print(f"{date_utc()} {PROG}: --max-runtime reached", flush=True)
                return EXIT_FINDING if findings else EXIT_OK
        if stop.wake.wait(wait):
            break
    name = signal.Signals(stop.signal).name
    print(f"{date_utc()} {PROG}: {name}: stopped", flush=True)
    return 128 + stop.signal


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


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
