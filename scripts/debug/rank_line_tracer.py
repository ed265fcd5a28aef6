#!/usr/bin/env python
"""rank_line_tracer.py: record which line of your script each rank executes, to see where each rank is stuck.

What it does
------------
Runs a Python script (``runpy``, as ``python script.py args`` would) with ``sys.settrace``
installed, and appends one line per executed source line of the traced files to
``OUT/rank<R>.trace`` (R from RANK or SLURM_PROCID, default 0)::

    hanging_collective.py:166 main

The file is line-buffered, so it is up to date even if the process hangs or is killed: after a hang,
``python rank_line_tracer.py --show OUT`` prints the last recorded line of every rank, with the
source text, in rank order. Ranks that differ in that column are the ones that went different
ways. Only frames whose file path contains ``--match`` (default: the traced script's own path) are
recorded: library code (torch, the data loader) is not, which keeps the overhead and the files
small. Tracing still slows the matched Python code several-fold; use it to find a hang, not to
train.

``--every S`` additionally dumps every thread's full stack to ``OUT/rank<R>.stacks`` every S
seconds with ``faulthandler.dump_traceback_later(S, repeat=True)``: no per-line cost, and it shows
library frames too (the collective a rank is blocked in), but only the latest dump is current.

How to launch
-------------
Put it in front of the script, under the same launcher::

    torchrun --nproc-per-node 2 rank_line_tracer.py --out traces -- train.py --lr 1e-3
    srun python rank_line_tracer.py --out traces --every 30 -- train.py
    python rank_line_tracer.py --show traces          # while it hangs, or after

Example output (2-core cloud VM, torch 2.13.0+cpu; the job is scripts/debug/hanging_collective.py,
shown while it hangs)::

    $ torchrun --standalone --nproc-per-node 2 scripts/debug/rank_line_tracer.py --out /tmp/tr -- \\
          scripts/debug/hanging_collective.py --timeout-s 30 &
    $ python scripts/debug/rank_line_tracer.py --show /tmp/tr
    rank 0: hanging_collective.py:174 in main: dist.all_reduce(t)
    rank 1: hanging_collective.py:177 in main: dist.broadcast(t, src=1)
"""

from __future__ import annotations

import argparse
import faulthandler
import linecache
import os
import re
import runpy
import sys

PROG = "rank_line_tracer.py"
_TRACE_RE = re.compile(r"^rank(\d+)\.trace$")


def rank_from_env() -> int:
    """This process's rank: RANK (torchrun), else SLURM_PROCID (srun), else 0."""
    return int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))


def start_line_trace(out_path: str, match: str):
    """Install a ``sys.settrace`` tracer that appends ``file:line function`` for every line
    executed in files whose path contains ``match``. Returns the open (line-buffered) file.
    Raises OSError if ``out_path`` cannot be opened for writing.
    """
    out = open(out_path, "w", buffering=1)

    def local(frame, event, arg):
        if event == "line":
            code = frame.f_code
            out.write(f"{code.co_filename}:{frame.f_lineno} {code.co_name}\n")
        return local

    def global_trace(frame, event, arg):
        if match in frame.f_code.co_filename:
            return local
        return None

    sys.settrace(global_trace)
    return out


def last_lines(out_dir: str) -> list[tuple[int, str, int, str, str]]:
    """Last recorded line of each ``rank<R>.trace`` in ``out_dir``, in rank order, as
    (rank, file, line number, function, source text). Empty trace files are left out.
    Raises FileNotFoundError if ``out_dir`` does not exist.
    """
    rows = []
    for name in os.listdir(out_dir):
        m = _TRACE_RE.match(name)
        if not m:
            continue
        last = ""
        with open(os.path.join(out_dir, name), errors="replace") as fh:
            for line in fh:
                if line.strip():
                    last = line
        if not last:
            continue
        where, _, func = last.strip().rpartition(" ")
        path, _, lineno = where.rpartition(":")
        text = linecache.getline(path, int(lineno)).strip()
        rows.append((int(m.group(1)), path, int(lineno), func, text))
    return sorted(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Run a script with a per-rank line tracer (which line is each "
        "rank on?), or --show the last traced line of every rank.",
        usage="%(prog)s --out DIR [--match TEXT] [--every S] -- script.py [args ...]\n"
              "       %(prog)s --show DIR")
    p.add_argument("--out", help="directory for rank<R>.trace (and rank<R>.stacks) files")
    p.add_argument("--match", help="trace only files whose path contains this text "
                   "(default: the script's own path)")
    p.add_argument("--every", type=float, default=0.0,
                   help="also dump all stacks to rank<R>.stacks every S seconds (default off)")
    p.add_argument("--show", metavar="DIR", help="print the last traced line of every rank")
    p.add_argument("script", nargs="?", help="the Python script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.show:
        if not os.path.isdir(args.show):
            print(f"{PROG}: error: no such directory {args.show!r}", file=sys.stderr)
            return 2
        rows = last_lines(args.show)
        if not rows:
            print(f"{PROG}: error: no rank<R>.trace files with lines in {args.show!r}",
                  file=sys.stderr)
            return 1
        for rank, path, lineno, func, text in rows:
            print(f"rank {rank}: {os.path.basename(path)}:{lineno} in {func}: {text}")
        return 0
    if not args.out or not args.script:
        print(f"{PROG}: error: give --out DIR and a script to run (or --show DIR)",
              file=sys.stderr)
        return 2
    if not os.path.isfile(args.script):
        print(f"{PROG}: error: no such script {args.script!r}", file=sys.stderr)
        return 2
    if args.every < 0:
        print(f"{PROG}: error: --every must be >= 0, got {args.every}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    rank = rank_from_env()
    script = os.path.abspath(args.script)
    if args.every:
        stacks = open(os.path.join(args.out, f"rank{rank}.stacks"), "w")
        faulthandler.dump_traceback_later(args.every, repeat=True, file=stacks)
    script_args = args.args[1:] if args.args[:1] == ["--"] else args.args
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(script))
    start_line_trace(os.path.join(args.out, f"rank{rank}.trace"), args.match or script)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.settrace(None)
        faulthandler.cancel_dump_traceback_later()
    return 0


if __name__ == "__main__":
    sys.exit(main())
