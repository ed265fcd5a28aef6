#!/usr/bin/env python
"""stack_dumps.py: dump the Python stack of every rank of a running job with py-spy, group the ranks whose stacks are identical, and name the odd rank out.

A hung job is read best from all of its ranks at once: most of them wait in the same collective,
and the one or two that are somewhere else (in another collective, in data loading, in a lock)
are the culprits. This script finds the job's rank processes, runs ``py-spy dump`` on each (in
parallel, each bounded by ``--timeout-s``), and prints one block per distinct stack, largest
first: ``3 ranks (ranks 0-2, host n1): ...`` then ``1 rank (rank 3, host n1, pid 1234): ...``.
``--native`` adds the C/C++ frames (where NCCL and CUDA waits show). Two stacks are the same
when every thread has the same frames (function, file, line), native addresses aside.

Which processes are ranks: the processes named (``--pid``, and their descendants) or matched
(``--match``: the command line contains the text), restricted to Python processes; of these, the
ones whose environment (/proc/PID/environ) sets RANK, else SLURM_PROCID, else all of them. A
rank's own children (DataLoader workers) inherit RANK and are left out. ``--slurm-job ID`` does
this on every node of a running SLURM job: it runs itself there as one extra step,
``srun --overlap --jobid ID --ntasks-per-node 1``, which picks the job's processes by their
SLURM_JOB_ID, and merges the nodes' answers. py-spy is ``--py-spy``, else found on PATH, else
beside this Python. It reads other processes' memory (ptrace): same user with
kernel.yama.ptrace_scope 0, or root; in a container, the SYS_PTRACE capability.

How to launch (while the job hangs)::

    python stack_dumps.py --pid 4242                # torchrun's pid: its ranks are its children
    python stack_dumps.py --match train.py --native
    python stack_dumps.py --slurm-job 812345 --json stacks.json

Example output (the tests' hung 4-rank gloo job, run on the book's 2-node SLURM test cluster on
one CPU host; ranks 0-2 wait in a barrier, rank 3 is held in data loading)::

    $ python stack_dumps.py --slurm-job 1
    4 ranks dumped (2 hosts, job 1, 2 of 2 nodes): 2 different stacks
    3 ranks (ranks 0-2, hosts node1, node2):
      Thread "MainThread"
        barrier (torch/distributed/distributed_c10d.py:5356)
        _exception_logger.<locals>.wrapper (torch/distributed/c10d_logger.py:83)
        train_step (hung_ranks.py:32)
        main (hung_ranks.py:54)
        <module> (hung_ranks.py:60)
    1 rank (rank 3, host node2, pid 32187):
      Thread "MainThread"
        load_next_batch (hung_ranks.py:20)
        main (hung_ranks.py:52)
        <module> (hung_ranks.py:60)
    stack_dumps.py: finding: rank 3 (host node2, pid 32187) is in load_next_batch (hung_ranks.py:20); the other 3 ranks are in barrier (torch/distributed/distributed_c10d.py:5356)

Exit status: 0 every rank dumped has the same stack; 3 a finding (the ranks disagree); 1 no rank
to dump (the job ended, never started, or no process matches), py-spy or srun failed or timed
out, or a rank could not be dumped; 2 a usage error.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import base64
import concurrent.futures
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
import traceback
import zlib

PROG = "stack_dumps.py"
MARK = "STACK_DUMPS_NODE "    # prefix of a node's answer lines in --local-slurm-job mode
CHUNK = 400                   # characters of the answer per line
SLURM_CMD_TIMEOUT_S = 30      # squeue, sacct
ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
# A command line and an environment together fit in ARG_MAX, a quarter of the stack limit
# (execve(2)): 2 MiB under the usual 8 MiB stack. Read up to twice that.
PROC_LIMIT = 4 << 20


# --- finding the job's rank processes (Linux /proc) ------------------------------------------------

def proc_read(pid: int, name: str) -> bytes | None:
    """A /proc file of ``pid``, at most PROC_LIMIT bytes; None when it is gone or not ours."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read(PROC_LIMIT)
    except OSError:
        return None


def environ(pid: int) -> dict[str, str]:
    """The environment the process started with ({} when it is not ours to read)."""
    raw = proc_read(pid, "environ") or b""
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if b"=" in item)
    return {k: v for k, _, v in pairs}


def parents() -> dict[int, int]:
    """pid -> parent pid of every process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_read(int(entry), "stat")
            if stat:  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                found[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return found


def ancestors(pid: int, parent: dict[int, int]) -> set[int]:
    seen = set()
    while pid in parent and pid not in seen and pid > 1:
        seen.add(pid)
        pid = parent[pid]
    return seen


def is_python(pid: int) -> bool:
    """A CPython interpreter: its executable is python*, or it maps libpython."""
    with contextlib.suppress(OSError):
        if os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python"):
            return True
    return b"libpython" in (proc_read(pid, "maps") or b"")


def pick_ranks(candidates: set[int], parent: dict[int, int]) -> list[dict]:
    """The rank processes among ``candidates``: Python ones setting RANK, else SLURM_PROCID, else
    all; a candidate below another kept one (a DataLoader worker of a rank) is left out."""
    procs = {pid: environ(pid) for pid in sorted(candidates) if is_python(pid)}
    for key in ("RANK", "SLURM_PROCID", None):
        chosen = {pid: env for pid, env in procs.items() if key is None or key in env}
        if chosen:
            break
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    ranks = []
    for pid, env in chosen.items():
        if ancestors(parent.get(pid, 0), parent) & set(chosen):
            continue
        rank = env.get("RANK", env.get("SLURM_PROCID"))
        ranks.append({"rank": int(rank) if rank and rank.isdigit() else None, "host": host, "pid": pid,
                      "local_rank": env.get("LOCAL_RANK", env.get("SLURM_LOCALID"))})
    return ranks


def find_local(opts) -> tuple[list[dict], str]:
    """(the ranks on this host, what was looked for)."""
    parent = parents()
    mine = ancestors(os.getpid(), parent) | {os.getpid()}
    if opts.pid:
        gone = [p for p in opts.pid if p not in parent]
        if gone:
            raise ScriptError(f"--pid {gone[0]}: no such process (the job ended, or a typo)")
        candidates = set(opts.pid)
        for pid in parent:
            if ancestors(pid, parent) & set(opts.pid):
                candidates.add(pid)
        what = f"--pid {' '.join(map(str, opts.pid))}"
    elif opts.match:
        needle = opts.match.encode()
        candidates = {pid for pid in parent if needle in (proc_read(pid, "cmdline") or b"").replace(b"\0", b" ")}
        what = f"--match {opts.match!r}"
    else:
        job, step, node = opts.local_slurm_job, os.environ.get("SLURM_STEP_ID"), os.environ.get("SLURMD_NODENAME")
        # the job's processes but this step's, on this node (two slurmd on one host share /proc)
        candidates = {pid for pid in parent if (env := environ(pid)).get("SLURM_JOB_ID") == job
                      and env.get("SLURM_STEP_ID") != step and env.get("SLURMD_NODENAME", node) == node}
        what = f"job {job}"
    return pick_ranks(candidates - mine, parent), what


# --- dumping and grouping --------------------------------------------------------------------------

def run_bounded(cmd: list[str], timeout_s: float, soft_stop: bool = False) -> tuple[int | None, str, str]:
    """(status, stdout, stderr) of ``cmd``, None as status when it outlived ``timeout_s``: its
    process group is then stopped (SIGTERM first with ``soft_stop``, which srun passes on to its
    step), then killed."""
    proc = start_process(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:  # timed out, or Ctrl-C: the children go with us
            for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 5))[0 if soft_stop else 1:]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait_s)
                    break
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
    return None, "", ""


def frame_text(frame: dict) -> str:
    name = ADDRESS.sub("0x?", frame.get("name") or "?")
    name = name if len(name) <= 100 else name[:97] + "..."  # C++ template names run to 2,000 characters
    where = frame.get("short_filename") or frame.get("filename") or "?"
    return f"{name} ({where}:{frame['line']})" if frame.get("line") else f"{name} ({where})"


def dump(rank: dict, py_spy: str, native: bool, timeout_s: float) -> dict:
    """``rank`` with its ``threads`` ([{"name", "frames"}], innermost frame first) or its ``error``."""
    status, out, err = run_bounded([py_spy, "dump", "--json", "--pid", str(rank["pid"]),
                                    *(["--native"] if native else [])], timeout_s)
    if status is None:
        return {**rank, "error": f"py-spy did not answer within --timeout-s {timeout_s:g} s"}
    if status == 0:
        with contextlib.suppress(ValueError, TypeError, KeyError):
            threads = [{"name": t.get("thread_name") or ("MainThread" if t.get("os_thread_id") == rank["pid"]
                                                          else "(no name)"),
                        "frames": [frame_text(f) for f in t["frames"]]} for t in json.loads(out)]
            return {**rank, "threads": sorted(threads, key=lambda t: (t["name"] != "MainThread", t["name"]))}
    text = err + out
    if "Permission denied" in text or "Operation not permitted" in text:
        why = ("permission denied: py-spy needs the same user and kernel.yama.ptrace_scope 0, or root; "
               "in a container the SYS_PTRACE capability")
    elif "No such file" in text or "No such process" in text:
        why = "the process is gone"
    else:
        why = next((line.strip() for line in text.splitlines() if line.strip()), f"py-spy exited with {status}")
    return {**rank, "error": why[:300]}


def dump_all(ranks: list[dict], py_spy: str, native: bool, timeout_s: float) -> list[dict]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, max(1, len(ranks)))) as pool:
        return list(pool.map(lambda r: dump(r, py_spy, native, timeout_s), ranks))


def who(rank: dict) -> str:
    return "pid" if rank["rank"] is None else f"rank {rank['rank']}"


def span(ranks: list[dict]) -> str:
    """"rank 3, host n1, pid 77" for one; "ranks 0-2, 5, hosts n1, n2" for several."""
    if len(ranks) == 1:
        r = ranks[0]
        return (f"rank {r['rank']}, " if r["rank"] is not None else "") + f"host {r['host']}, pid {r['pid']}"
    numbers = sorted(r["rank"] for r in ranks if r["rank"] is not None)
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    parts += [f"pid {r['pid']}" for r in ranks if r["rank"] is None]
    hosts = sorted({r["host"] for r in ranks})
    return f"{'ranks ' if numbers else ''}{', '.join(parts)}, host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}"


def innermost(threads: list[dict]) -> str:
    """The first thread's innermost frame that has a name (native stacks start with bare addresses)."""
    frames = [f for f in (threads[0]["frames"] if threads else []) if not f.startswith("0x?")]
    python = next((f for f in frames if re.search(r":\d+\)$", f)), None)
    if not frames:
        return "no frame"
    return frames[0] if python in (None, frames[0]) else f"{frames[0]} under {python}"


def group(dumped: list[dict]) -> list[dict]:
    """Groups of ranks with identical stacks, largest first (then by lowest rank)."""
    groups: dict[tuple, list[dict]] = {}
    for r in dumped:
        groups.setdefault(tuple((t["name"], tuple(t["frames"])) for t in r["threads"]), []).append(r)
    order = sorted(groups.values(), key=lambda g: (-len(g), min((r["rank"] is None, r["rank"] or 0) for r in g)))
    return [{"count": len(g), "ranks": sorted(g, key=lambda r: (r["rank"] is None, r["rank"] or 0, r["pid"])),
             "threads": g[0]["threads"]} for g in order]


def finding(groups: list[dict]) -> str | None:
    if len(groups) < 2:
        return None
    big = groups[0]
    if big["count"] == groups[1]["count"]:
        sides = "; ".join(f"{g['count']} in {innermost(g['threads'])} ({span(g['ranks'])})" for g in groups)
        return f"no majority: the ranks are in {len(groups)} different places: {sides}"
    odd = "; ".join(f"{span_who(g['ranks'])} {'is' if g['count'] == 1 else 'are'} in {innermost(g['threads'])}"
                    for g in groups[1:])
    return f"{odd}; the other {big['count']} ranks are in {innermost(big['threads'])}"


def span_who(ranks: list[dict]) -> str:
    if len(ranks) == 1:
        r = ranks[0]
        return f"{who(r)} (host {r['host']}, pid {r['pid']})" if r["rank"] is not None else \
            f"pid {r['pid']} (host {r['host']})"
    return span(ranks)


def report(ranks: list[dict], where: str) -> tuple[list[str], dict, int]:
    """(the lines to print, the --json document's own keys, the exit status)."""
    dumped = [r for r in ranks if "threads" in r]
    failed = [r for r in ranks if "error" in r]
    groups = group(dumped)
    hosts = len({r["host"] for r in ranks})
    lines = [f"{len(dumped)} rank{'s' * (len(dumped) != 1)} dumped ({hosts} host{'s' * (hosts != 1)}"
             f"{', ' + where if where else ''}): {len(groups)} different stack{'s' * (len(groups) != 1)}"]
    for g in groups:
        lines.append(f"{g['count']} rank{'s' * (g['count'] != 1)} ({span(g['ranks'])}):")
        for t in g["threads"]:
            lines.append(f"  Thread \"{t['name']}\"")
            lines += [f"    {f}" for f in t["frames"]] or ["    (no Python frame)"]
    for r in failed:
        lines.append(f"not dumped: {span_who([r])}: {r['error']}")
    found = finding(groups)
    doc = {"ranks_found": len(ranks), "ranks_dumped": len(dumped), "finding": found,
           "groups": [{"count": g["count"], "ranks": [r["rank"] for r in g["ranks"]],
                       "members": [{k: r[k] for k in ("rank", "local_rank", "host", "pid")} for r in g["ranks"]],
                       "threads": g["threads"]} for g in groups],
           "results": [{k: r.get(k) for k in ("rank", "local_rank", "host", "pid", "error")} for r in ranks]}
    status = EXIT_FINDING if found else (EXIT_FAILURE if failed else EXIT_OK)
    return lines, doc, status


# --- SLURM -----------------------------------------------------------------------------------------

def slurm_state(job: str) -> tuple[str, int, str]:
    """(state, number of nodes, reason) of ``job`` from squeue, else sacct; ScriptError when
    neither knows it."""
    status, out, err = run_bounded(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%D|%r"], SLURM_CMD_TIMEOUT_S)
    if status is None:
        raise ScriptError(f"squeue did not answer within {SLURM_CMD_TIMEOUT_S} s")
    line = next((x for x in out.splitlines() if x.count("|") == 2), None)
    if status == 0 and line:
        state, nodes, reason = line.split("|")
        return state, int(nodes) if nodes.isdigit() else 0, reason
    if shutil.which("sacct"):
        s_status, s_out, _ = run_bounded(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], SLURM_CMD_TIMEOUT_S)
        if s_status == 0 and s_out.split():
            return s_out.split()[0], 0, ""
    raise ScriptError(f"--slurm-job {job}: neither squeue nor sacct knows this job: it ended long ago, "
                      "or never existed")


def slurm_ranks(opts, py_spy_given: str | None) -> tuple[list[dict], str]:
    """Every node's ranks, dumped there by one srun step of this script."""
    for tool in ("squeue", "srun"):
        if not shutil.which(tool):
            raise ScriptError(f"--slurm-job: {tool} not found on PATH (run this where the SLURM client commands are)")
    job = opts.slurm_job
    state, nodes, reason = slurm_state(job)
    if state == "PENDING":
        raise ScriptError(f"job {job} is PENDING ({reason or 'no reason given'}): it has not started, so it "
                          "has no ranks to dump")
    if state != "RUNNING":
        raise ScriptError(f"job {job} is {state}: it is not running, so it has no ranks to dump")
    cmd = ["srun", "--overlap", f"--jobid={job}", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
           "--label", "--kill-on-bad-exit=0", sys.executable, os.path.abspath(__file__),
           "--local-slurm-job", job, "--timeout-s", f"{opts.timeout_s:g}", *(["--native"] if opts.native else []),
           *(["--py-spy", py_spy_given] if py_spy_given else [])]
    limit = opts.timeout_s + 60  # py-spy's bound, plus starting a step on every node
    status, out, err = run_bounded(cmd, limit, soft_stop=True)
    if status is None:
        raise ScriptError(f"srun --overlap --jobid {job} did not finish within {limit:g} s (the step was stopped)")
    answers = read_answers(out)
    if not answers:
        last = next((x.strip() for x in reversed(err.splitlines()) if x.strip()), f"status {status}")
        raise ScriptError(f"srun --overlap --jobid {job}: no node answered ({last[:200]})")
    ranks = [r for a in answers for r in a.get("ranks", [])]
    problems = [f"{a.get('host')}: {a['error']}" for a in answers if a.get("error")]
    if len(answers) < nodes:
        problems.append(f"{nodes - len(answers)} of {nodes} nodes did not answer")
    if not ranks:
        raise ScriptError(f"job {job} is RUNNING, but no Python rank process was found on its {nodes} "
                          f"node{'s' * (nodes != 1)}" + (f" ({'; '.join(problems)})" if problems else ""))
    return ranks, f"job {job}, {len(answers)} of {nodes} node{'s' * (nodes != 1)}" + (
        f"; {'; '.join(problems)}" if problems else "")


def send_answer(answer: dict) -> None:
    """One node's answer as short numbered lines: srun splits a long line of a task into pieces."""
    blob = base64.b64encode(zlib.compress(json.dumps(answer).encode())).decode()
    chunks = [blob[i:i + CHUNK] for i in range(0, len(blob), CHUNK)]
    for i, chunk in enumerate(chunks):
        say(f"{MARK}{answer['host']} {i} {len(chunks)} {chunk}")


def read_answers(out: str) -> list[dict]:
    """The nodes' answers in srun's output (lines labelled "TASK: "); an incomplete one is an error."""
    parts: dict[str, dict[int, str]] = {}
    sizes: dict[str, int] = {}
    for line in out.splitlines():
        m = re.fullmatch(rf"\s*\d+: {MARK}(\S+) (\d+) (\d+) (\S+)", line)
        if m:
            parts.setdefault(m[1], {})[int(m[2])] = m[4]
            sizes[m[1]] = int(m[3])
    answers = []
    for host, chunks in parts.items():
        try:
            blob = "".join(chunks[i] for i in range(sizes[host]))
            answers.append(json.loads(zlib.decompress(base64.b64decode(blob))))
        except (KeyError, ValueError, zlib.error):
            answers.append({"host": host, "ranks": [], "error": "its answer came back incomplete"})
    return answers


def find_py_spy(given: str | None) -> str:
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise ScriptError(f"--py-spy {given}: not an executable file", EXIT_USAGE)
        return given
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    found = shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)
    if not found:
        raise ScriptError("py-spy not found on PATH nor beside this Python: pip install py-spy "
                          "(https://github.com/benfred/py-spy), or give --py-spy PATH")
    return found


# --- the command line ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Dump every rank's Python stack of a running "
                                "job with py-spy, group identical stacks, and name the odd rank out "
                                "(exit 3 when the ranks disagree).")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--pid", type=number(int, 1), nargs="+", metavar="PID",
                       help="the job's processes: these and their descendants (torchrun's pid will do)")
    which.add_argument("--match", type=nonempty, metavar="TEXT",
                       help="the job's processes: those whose command line contains TEXT")
    which.add_argument("--slurm-job", metavar="JOBID",
                       help="every node of this running SLURM job, through srun --overlap")
    which.add_argument("--local-slurm-job", metavar="JOBID", help=argparse.SUPPRESS)  # the srun step's part
    p.add_argument("--native", action="store_true", help="include C/C++ frames (py-spy dump --native)")
    p.add_argument("--timeout-s", type=number(float, 0, 3600, lo_open=True), default=30.0, metavar="S",
                   help="each py-spy dump is killed after S seconds (default 30); srun gets S + 60")
    p.add_argument("--py-spy", metavar="PATH", type=nonempty, help="the py-spy executable (default: on PATH, "
                   "else beside this Python)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the groups and every rank here as JSON")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    job = opts.slurm_job or opts.local_slurm_job
    if job is not None and not re.fullmatch(r"\d+(_\d+)?", job):
        raise ScriptError(f"--slurm-job {job!r}: not a SLURM job id (digits, or ARRAYJOB_TASK such as 812345_7)",
                          EXIT_USAGE)
    inputs = [os.path.abspath(__file__), *([opts.py_spy] if opts.py_spy else [])]  # not over this script
    json_path = check_output(opts.json, "--json", inputs) if opts.json else None
    if not os.path.isdir("/proc/self"):
        raise ScriptError("no /proc here: this script reads Linux's /proc to find the ranks")
    py_spy = find_py_spy(opts.py_spy)
    on_stop_signals()
    if opts.local_slurm_job:  # one node's part of --slurm-job: print its ranks' dumps as one line
        host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        ranks, _ = find_local(opts)
        send_answer({"host": host, "ranks": dump_all(ranks, py_spy, opts.native, opts.timeout_s)})
        return EXIT_OK
    if opts.slurm_job:
        ranks, where = slurm_ranks(opts, opts.py_spy)
    else:
        found, what = find_local(opts)
        if not found:
            raise ScriptError(f"{what}: no Python process of a job found (it ended, never started, or "
                              "runs as another user)")
        ranks, where = dump_all(found, py_spy, opts.native, opts.timeout_s), ""
    lines, doc, status = report(ranks, where)
    for line in lines:
        say(line)
    if json_path:
        out = envelope("stack_dumps", None)
        out.update({"job": opts.slurm_job, "native": opts.native, "exit_status": status, **doc})
        write_atomic(json_path, json.dumps(out, indent=2) + "\n")
    if doc["finding"]:
        say(f"{PROG}: finding: {doc['finding']}")
    elif not doc["ranks_dumped"]:
        raise ScriptError(f"none of the {len(ranks)} ranks could be dumped: {ranks[0]['error']}")
    elif status == EXIT_FAILURE:
        failed = [r for r in ranks if "error" in r]
        raise ScriptError(f"{len(failed)} of {len(ranks)} ranks could not be dumped ({span_who(failed[:1])}: "
                          f"{failed[0]['error']}); the others agree")
    return status


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


def command_line(argv=None, script: str | None = None) -> str:
    """``python SCRIPT ARGS``, how this script was run, for a results file's ``command``: SCRIPT
    is sys.argv[0] relative to the current folder, ARGS sys.argv[1:]; where main was called with
    ``argv`` (a test, a calculator page) ARGS are ``argv``, and SCRIPT is ``script`` (the file's
    name) when sys.argv[0] names another program."""
    import shlex
    path = sys.argv[0]
    if argv is not None and script and os.path.basename(path) != script:
        path = script
    path = os.path.relpath(path) if os.path.exists(path) else path
    return shlex.join(["python", path, *(sys.argv[1:] if argv is None else argv)])


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def envelope(benchmark: str, device: str | None, versions: dict | None = None,
             command: str | None = None, argv=None) -> dict:
    """The keys every results file starts with (tools/schemas/envelope.schema.json), in order:
    ``benchmark`` (the script's file stem), ``schema_version`` 1, ``date_utc`` (now),
    ``command`` (``command``, else ``command_line(argv)``), ``versions`` (Python's, and
    ``versions``: {"torch": ...}) and ``device`` (None where the result does not depend on the
    hardware). The script adds its own keys and ``results``."""
    import platform
    return {"benchmark": benchmark, "schema_version": 1, "date_utc": date_utc(),
            "command": command or command_line(argv, f"{benchmark}.py"),
            "versions": {"python": platform.python_version(), **(versions or {})}, "device": device}
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
