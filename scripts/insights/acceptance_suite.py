#!/usr/bin/env python
"""acceptance_suite.py: accept a rented node in its first hours: the book's own checks, one JSON report.

Runs, one after the other on the node it is started on, six checks, each by its own script from
the book with ``--json`` into a run folder and a time limit of its own:

=================== ===================================== =====================================
check               script, in scripts/                   fails (exit 3) when
=================== ===================================== =====================================
node_health_check   debug/node_health_check.py            a GPU health check fails
mamf_finder         compute/mamf_finder.py (GPU 0)        best TFLOPS < --min-tflops
mem_bandwidth       compute/mem_bandwidth.py              peak GBps < --min-mem-GBps
all_reduce_bench    network/all_reduce_bench.py           peak busbw GBps < --min-busbw-GBps
fio_scan            storage/fio_scan.py (--fio-dir)       sequential read MBps < --min-fio-MBps
find_bad_rank       debug/find_bad_rank.py                a slow or dead rank or link
=================== ===================================== =====================================

The two distributed checks run under torchrun with one rank per GPU (``--expect-gpus``, else the
count ``nvidia-smi -L`` gives), or with two gloo ranks on a node without GPUs; on a one-GPU node
they are skipped (verdict ``skip``: no peer to measure against). Each check's verdict
is ``pass``; ``fail`` when its script exits 3 (it found a problem) or a figure is below the minimum
you give (the figure in your contract); ``error`` when it could not run (exit 1 or 2, a missing
tool, its time limit). The report (``--json``, default RUN/acceptance_suite.json) holds, for each
check, its command, exit status, seconds, verdict and reason, the headline figure, and its own
JSON (or the last lines of its output, which is kept whole in RUN/<check>.log).

How to launch (on each node; ``--quick`` picks small sizes, e.g. to try it on a laptop)::

    python scripts/insights/acceptance_suite.py --expect-gpus 8 --fio-dir /shared/scratch \\
        --min-tflops 600 --min-busbw-GBps 300 --out acceptance-$(hostname)
    srun --ntasks-per-node=1 python scripts/insights/acceptance_suite.py --expect-gpus 8
    python scripts/insights/acceptance_suite.py --quick --out /tmp/acc/run

(under srun each node writes its own acceptance-HOST-TIME folder). Example output (``--quick`` on
a 2-core VM without GPU; all_reduce_bench and find_bad_rank as two gloo ranks under torchrun)::

    node_health_check  pass      0.2 s  healthy
    mamf_finder        pass      4.6 s  0.0021 TFLOPS (fp32)
    mem_bandwidth      pass      4.3 s  0.217 GBps (host_copy)
    all_reduce_bench   pass     10.1 s  busbw 0.396 GBps
    fio_scan           pass      3.3 s  read 1294 MBps
    find_bad_rank      pass     10.6 s  no finding
    PASS: 6 checks passed; report /tmp/acc/run/acceptance_suite.json

Exit status: 0 every check passed, 3 a check found a problem (the last line names it), 1 a check
could not run (none failed), 2 usage (checked before any check runs), 130/143 interrupted (the
report holds the checks finished so far). The scripts it runs are found next to it
(``--scripts``, default the scripts/ folder above this file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

PROG = "acceptance_suite.py"
CHECKS = ("node_health_check", "mamf_finder", "mem_bandwidth", "all_reduce_bench", "fio_scan", "find_bad_rank")
SCRIPT_OF = {"node_health_check": "debug/node_health_check.py", "mamf_finder": "compute/mamf_finder.py",
             "mem_bandwidth": "compute/mem_bandwidth.py", "all_reduce_bench": "network/all_reduce_bench.py",
             "fio_scan": "storage/fio_scan.py", "find_bad_rank": "debug/find_bad_rank.py"}
DISTRIBUTED = ("all_reduce_bench", "find_bad_rank")
TAIL_LINES = 12


def check_args(name: str, args, gpus: int) -> list[str]:
    """The options of one check, before --json and the user's --extra: full sizes on a GPU node,
    small ones with --quick."""
    q = args.quick
    if name == "node_health_check":
        return ["--expect-gpus", str(gpus)] if gpus else ["--allow-no-gpu"]
    if name == "mamf_finder":
        small = ["--m", "256", "--n", "256", "--k", "256", "--dtype", "fp32", "--warmup", "2", "--iters", "5"]
        return ["--device", "cuda:0" if gpus else "cpu", *(small if q else ["--dtype", "bf16"])]
    if name == "mem_bandwidth":
        return ["--sizes", "4M", "--warmup", "1", "--iters", "3"] if q else []
    if name == "all_reduce_bench":
        sizes = ["--sizes", "64K", "1M", "--warmup", "1", "--iters", "3"] if q else ["--max-bytes", "1G"]
        return [*sizes, "--backend", "nccl" if gpus else "gloo", "--timeout-s", "60"]
    if name == "fio_scan":
        small = ["--rw", "read,write", "--bs", "1M", "--size", "8M", "--budget", "2"]
        return [args.fio_dir, *(small if q else ["--size", "4G", "--budget", "120"]), "--fio", args.fio]
    small = ["--bandwidth-bytes", "64K", "--iters", "3", "--warmup", "1", "--matmul-n", "64", "--min-excess-ms", "20"]
    return ["--device", "cuda" if gpus else "cpu", "--timeout-s", "30", *(small if q else [])]


def headline(name: str, out: dict) -> tuple[float | None, str]:
    """The figure a minimum applies to, and a short text for the summary line."""
    if name == "node_health_check":
        failed = [f"{c.get('check')}: {c.get('detail')}" for c in out.get("checks", []) if c.get("status") == "fail"]
        return None, "; ".join(failed)[:200] or str(out.get("verdict"))
    if name == "mamf_finder":
        best = max(out.get("best", {}).values(), key=lambda b: b["max_tflops"], default=None)
        return (best["max_tflops"], f"{best['max_tflops']:.3g} TFLOPS ({best['dtype']})") if best else (None, "")
    if name == "mem_bandwidth":
        test, gbps = max(out.get("peak_GBps", {}).items(), key=lambda kv: kv[1], default=(None, None))
        return gbps, f"{gbps:.3g} GBps ({test})" if test else ""
    if name == "all_reduce_bench":
        busbw = out.get("peak_busbw_GBps")
        return busbw, f"busbw {busbw:.3g} GBps" if busbw is not None else ""
    if name == "fio_scan":
        reads = [r["bw_MBps"] for r in out.get("results", []) if r.get("rw") == "read"]
        return (max(reads), f"read {max(reads):.0f} MBps") if reads else (None, "no sequential read")
    findings = out.get("findings") or []
    return None, "; ".join(str(f.get("message", f.get("kind"))) if isinstance(f, dict) else str(f)
                           for f in findings)[:200] or "no finding"


def run_check(name: str, cmd: list[str], log_path: str, timeout_s: float) -> tuple[int | None, float, str]:
    """Run one check in a session of its own, its output into ``log_path``, bounded by
    ``timeout_s`` (then its whole process group is killed). Returns (exit status or None, seconds,
    problem)."""
    start = time.monotonic()
    with open(log_path, "wb") as log:
        try:
            proc = start_process(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as err:
            return None, 0.0, f"cannot start {cmd[0]}: {err.strerror}"
        try:
            status = proc.wait(timeout=timeout_s)
            return status, time.monotonic() - start, ""
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - start, f"did not finish within {timeout_s:g} s (--timeout-s)"
        finally:  # a time limit, Ctrl-C, SIGTERM: the check goes too
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def judge(name: str, args, status: int | None, problem: str, out: dict | None) -> tuple[str, str, float | None]:
    """(verdict, reason, headline figure) of one check."""
    if problem:
        return "error", problem, None
    if status not in (0, 3):
        return "error", f"exit status {status}: could not run (see the output's last lines)", None
    if out is None:
        return "error", f"exit status {status} but no JSON was written", None
    figure, text = headline(name, out)
    if status == 3:
        return "fail", text or "the script found a problem", figure
    minimum = {"mamf_finder": args.min_tflops, "mem_bandwidth": args.min_mem_GBps,
               "all_reduce_bench": args.min_busbw_GBps, "fio_scan": args.min_fio_MBps}.get(name)
    if minimum is not None and (figure is None or figure < minimum):
        return "fail", f"{text or 'no figure'} is below the minimum {minimum:g}", figure
    return "pass", text, figure


def run_and_judge(name: str, cmd: list[str], json_path: str, log_path: str, args) -> tuple:
    """Run one check and read its JSON: (exit status, seconds, verdict, reason, figure, its JSON,
    the last lines of its output)."""
    if os.path.exists(json_path):
        os.unlink(json_path)  # a result left by an earlier run in this folder is not this run's
    status, seconds, problem = run_check(name, cmd, log_path, args.timeout_s)
    result = None
    if os.path.isfile(json_path):
        try:
            result = parse_json(read_input(json_path, name), name, json_path)
        except ScriptError as err:
            problem = problem or f"its JSON cannot be read: {err}"
    result = result if isinstance(result, dict) else None
    verdict, reason, figure = judge(name, args, status, problem, result)
    with open(log_path, "rb") as log:
        tail = log.read()[-16384:].decode("utf-8", "replace").splitlines()[-TAIL_LINES:]
    return status, seconds, verdict, reason, figure, result, tail


def count_gpus() -> int:
    """GPUs ``nvidia-smi -L`` lists (0 without the tool or when it fails within 60 s)."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in proc.stdout.splitlines()) if proc.returncode == 0 else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--out", type=nonempty, default=None, metavar="DIR",
                   help="run folder for each check's JSON and log (created; default "
                        "acceptance-HOST-YYYYmmddTHHMMSS here)")
    p.add_argument("--json", type=nonempty, default=None, metavar="PATH",
                   help="the report (default DIR/acceptance_suite.json)")
    p.add_argument("--quick", action="store_true", help="small sizes: a run of about a minute, on CPU too")
    p.add_argument("--checks", nargs="+", choices=CHECKS, default=list(CHECKS), metavar="CHECK",
                   help=f"which checks to run, in this order (default all: {' '.join(CHECKS)})")
    p.add_argument("--expect-gpus", type=number(int, 0, 1024), default=None, metavar="N",
                   help="GPUs the node must have (default: what nvidia-smi -L lists; 0: a CPU node, "
                        "gloo ranks)")
    p.add_argument("--fio-dir", type=nonempty, default=None, metavar="DIR",
                   help="existing folder fio tests, e.g. the shared file system (default DIR/fio)")
    p.add_argument("--fio", type=nonempty, default="fio", help="fio executable (default fio on PATH)")
    p.add_argument("--timeout-s", type=number(float, 1, 86400), default=900, metavar="S",
                   help="time limit of each check, seconds (default 900)")
    for option, what in (("--min-tflops", "mamf_finder's best TFLOPS"),
                         ("--min-mem-GBps", "mem_bandwidth's peak GBps"),
                         ("--min-busbw-GBps", "all_reduce_bench's peak busbw GBps"),
                         ("--min-fio-MBps", "fio_scan's best sequential read MBps")):
        p.add_argument(option, type=number(float, 0), default=None, metavar="X", help=f"fail when {what} < X")
    p.add_argument("--extra", type=nonempty, action="append", default=[], metavar="'CHECK ARGS'",
                   help="more options for one check, e.g. --extra 'mamf_finder --dtype bf16 fp8'")
    p.add_argument("--scripts", type=nonempty, default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                   metavar="DIR", help="the book's scripts/ folder (default the one holding this script)")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    extra: dict[str, list[str]] = {}
    for text in args.extra:
        try:
            name, *words = shlex.split(text)
        except ValueError as err:
            raise ScriptError(f"--extra {text!r}: {err}", EXIT_USAGE) from None
        if name not in CHECKS:
            raise ScriptError(f"--extra {text!r}: {name} is not a check; choose from {', '.join(CHECKS)}",
                              EXIT_USAGE)
        extra[name] = extra.get(name, []) + words
    for name in args.checks:
        if not os.path.isfile(os.path.join(args.scripts, SCRIPT_OF[name])):
            raise ScriptError(f"--scripts {args.scripts}: has no {SCRIPT_OF[name]}", EXIT_USAGE)
    if args.fio_dir is not None and "fio_scan" in args.checks and not os.path.isdir(args.fio_dir):
        raise ScriptError(f"--fio-dir {args.fio_dir}: is not an existing folder", EXIT_USAGE)
    host = socket.gethostname()
    out = args.out or f"acceptance-{host}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    report_path = check_output(args.json, "--json") if args.json else None
    check_output_dir(out, "--out")
    report_path = report_path or check_output(os.path.join(out, f"{PROG[:-3]}.json"), "--json")
    if args.fio_dir is None:
        args.fio_dir = check_output_dir(os.path.join(out, "fio"), "--out")
    gpus = count_gpus() if args.expect_gpus is None else args.expect_gpus
    on_stop_signals()

    doc = {**envelope(PROG[:-3], None, argv=argv), "hostname": host, "quick": args.quick, "gpus": gpus,
           "run_dir": os.path.abspath(out), "verdict": "pass", "interrupted": False, "results": []}
    stop = None
    try:
        for name in args.checks:
            script = os.path.join(args.scripts, SCRIPT_OF[name])
            launch = [sys.executable]
            if name in DISTRIBUTED:
                launch += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus or 2}"]
            json_path = os.path.join(out, f"{name}.json")
            cmd = [*launch, script, *check_args(name, args, gpus), "--json", json_path, *extra.get(name, [])]
            log_path = os.path.join(out, f"{name}.log")
            if name in DISTRIBUTED and gpus == 1:  # no peer to measure against
                status, seconds, verdict, reason, figure, result, tail = \
                    None, 0.0, "skip", "needs two or more GPUs; this node has one", None, None, []
            else:
                status, seconds, verdict, reason, figure, result, tail = \
                    run_and_judge(name, cmd, json_path, log_path, args)
            doc["results"].append({"check": name, "command": shlex.join(cmd), "exit_status": status,
                                   "seconds": round(seconds, 2), "verdict": verdict, "reason": reason,
                                   "figure": figure, "json_file": json_path if result is not None else None,
                                   "output": result, "log_file": None if verdict == "skip" else log_path,
                                   "output_tail": [] if verdict in ("pass", "skip") else tail})
            if name == "mamf_finder" and result:
                doc["device"] = result.get("device")
            say(f"{name:<18} {verdict:<6} {seconds:6.1f} s  {reason}")
    except KeyboardInterrupt as exc:
        stop, doc["interrupted"] = exc, True
    verdicts = {row["verdict"] for row in doc["results"]}
    doc["verdict"] = "fail" if "fail" in verdicts else "error" if "error" in verdicts or stop else "pass"
    write_atomic(report_path, json.dumps(doc, indent=2) + "\n")
    if stop is not None:
        raise stop
    failed = [row["check"] for row in doc["results"] if row["verdict"] == "fail"]
    broken = [row["check"] for row in doc["results"] if row["verdict"] == "error"]
    if failed:
        say(f"FAIL: {', '.join(failed)} found a problem; report {report_path}")
        return EXIT_FINDING
    if broken:
        raise ScriptError(f"{', '.join(broken)} could not run; report {report_path}")
    skipped = sum(row["verdict"] == "skip" for row in doc["results"])
    say(f"PASS: {len(doc['results']) - skipped} checks passed{f', {skipped} skipped' if skipped else ''}; "
        f"report {report_path}")
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


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


def parse_json(data: bytes, option: str, path: str):
    """``data`` parsed as JSON; ScriptError (usage) naming the option and the path when it is not
    UTF-8, not JSON, nested too deep, or holds a number Python refuses (over 4300 digits)."""
    import json
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptError(f"{option} {path}: not UTF-8 text", EXIT_USAGE) from None
    except RecursionError:
        raise ScriptError(f"{option} {path}: nested too deeply to be JSON data", EXIT_USAGE) from None
    except ValueError as err:  # json.JSONDecodeError, and int() of a 5,000-digit number
        raise ScriptError(f"{option} {path}: not valid JSON ({str(err).splitlines()[0]})", EXIT_USAGE) from None


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
