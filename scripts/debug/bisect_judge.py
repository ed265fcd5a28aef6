#!/usr/bin/env python
"""bisect_judge.py: the judge for ``git bisect run``: run a benchmark a few times, read one figure, answer good, bad or skip.

``git bisect run CMD`` checks out commit after commit and asks CMD about each: exit 0 means good,
1-127 (but 125) bad, 125 "cannot test this commit, skip it", anything else ends the bisect
(https://git-scm.com/docs/git-bisect#_bisect_run). A regression in speed or in loss is noisy, so
this judge runs the command after ``--`` ``--runs`` times, reads a figure from each run (the last
match of ``--regex`` in its stdout, else its stderr; or the number at ``--key`` in the JSON file
``--json-file`` that the run wrote), and decides on the median:

1. The threshold T is ``--threshold``, or ``--baseline B`` (the median this judge printed on a
   known-good commit) moved by ``--tolerance`` percent of |B| towards worse.
2. A run that exits non-zero, outlives ``--timeout-s`` (its process group is killed) or gives no
   figure ends the judging: skip (125), or bad with ``--failed-run bad`` (the regression is a crash
   or a hang). A NaN figure counts as the worst possible one.
3. The median M of the runs is compared with T. Within ``--margin`` percent of |T|, the judge runs
   ``--runs`` more, up to ``--max-runs``, and compares the median of all; still within the margin
   then: skip. Otherwise M worse than T (above it with ``--better lower``, below with ``--better
   higher``) is bad, and anything else, T itself included, good.

Before ``git bisect run``, ``--check-ends`` asks the same question about the bisect's ends (each
checked out in a temporary ``git worktree``, the checkout left alone): the good commits must be
judged good and the bad one bad, or the bisect would blame an innocent commit.

How to launch (from the repository's top folder; the judge is a copy outside it, since a checkout
of an old commit would not have it). First judge the known-good checkout by hand: its median is
the baseline. Then mark the ends, check that the judge agrees with them, and let git run::

    python /tmp/bisect_judge.py --better higher --threshold 0 --regex 'throughput: ([0-9.]+)' -- python bench.py
    git bisect start BAD GOOD
    python /tmp/bisect_judge.py --check-ends --better higher --baseline 1250 --tolerance 5 \\
        --regex 'throughput: ([0-9.]+)' --timeout-s 900 -- python bench.py
    git bisect run python /tmp/bisect_judge.py --better higher --baseline 1250 --tolerance 5 \\
        --regex 'throughput: ([0-9.]+)' --timeout-s 900 -- python bench.py

Example output (one step of the test's bisect, a throughput that fell by a fifth at one commit)::

    commit 9c3e1f6: run 1/3: 800 (0.0 s)
    commit 9c3e1f6: run 2/3: 800 (0.1 s)
    commit 9c3e1f6: run 3/3: 800 (0.1 s)
    commit 9c3e1f6: bad: median 800 is worse than the threshold 950 (higher is better; baseline 1000 - 5%; runs: 800, 800, 800)

Exit status, git bisect's convention rather than the book's usual one: 0 good, 1 bad, 125 skip
(the commit cannot be judged); 128 for a usage error or a failure of the judge itself, 130/143
interrupted (git bisect run stops on any of these rather than mark a commit). ``--check-ends``:
0 both ends as marked, 1 an end judged otherwise, 125 an end that cannot be judged, 128 usage.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

PROG = "bisect_judge.py"
EXIT_GOOD, EXIT_BAD, EXIT_SKIP, EXIT_ABORT = 0, 1, 125, 128
MAX_RUNS = 1000
GIT_TIMEOUT_S = 120          # one git command (rev-parse, worktree add on a large repository)
KILL_WAIT_S = 5              # after the kill of a run that timed out: how long its pipes may stay open


def verdict_error(message: str, status: int):
    """A judgement that ends the run with its own status (skip, or an end judged otherwise), as
    a ScriptError marked ``verdict``: any other ScriptError is the judge's own failure, which
    must stop the bisect (EXIT_ABORT)."""
    exc = ScriptError(message, status)
    exc.verdict = True
    return exc


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors exit with EXIT_ABORT, not 2: git bisect run would take 2 for
    "bad" and carry on with a judge that cannot work."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise ScriptError(message, EXIT_ABORT)


# --- reading the figure ----------------------------------------------------------------------------

def parse_key(text: str) -> list[str | int]:
    """``--key`` as a path: dot-separated names, an integer indexing a list (-1 the last item)."""
    parts = text.split(".")
    if any(not p for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty part; write names and list "
                                         "indices joined by dots, e.g. metrics.loss or steps.-1.loss")
    return [int(p) if re.fullmatch(r"-?\d+", p) else p for p in parts]


def regex(text: str) -> re.Pattern:
    try:
        pattern = re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression ({err})") from None
    if pattern.groups > 1 and "figure" not in pattern.groupindex:
        raise argparse.ArgumentTypeError(f"{text!r} has {pattern.groups} groups: keep one, or name "
                                         "the figure's (?P<figure>...)")
    return pattern


def to_number(text: str) -> float | None:
    with contextlib.suppress(ValueError):
        return float(text.strip().replace(",", "").replace("_", ""))
    return None


def figure_from_output(pattern: re.Pattern, stdout: str, stderr: str) -> tuple[float | None, str]:
    """The number of the last match of ``pattern`` in stdout, else in stderr: (figure, problem)."""
    for text in (stdout, stderr):
        matches = list(pattern.finditer(text))
        if matches:
            m = matches[-1]
            group = "figure" if "figure" in pattern.groupindex else (1 if pattern.groups else 0)
            found = m.group(group) or ""
            value = to_number(found)
            if value is None:
                return None, f"--regex matched {m.group(0)[:80]!r}, and {found[:40]!r} is not a number"
            return value, ""
    return None, f"--regex '{pattern.pattern}' matched nothing in the command's output"


def lookup(data, key: list[str | int]):
    """The value at ``key`` in ``data``; KeyError naming the first part that is not there."""
    here = data
    for i, part in enumerate(key):
        where = ".".join(str(p) for p in key[:i + 1])
        if isinstance(here, dict) and str(part) in here:
            here = here[str(part)]
        elif isinstance(here, list) and isinstance(part, int) and -len(here) <= part < len(here):
            here = here[part]
        else:
            kind = type(here).__name__ if not isinstance(here, (dict, list)) else \
                ("an object" if isinstance(here, dict) else f"a list of {len(here)}")
            raise KeyError(f"no {where} ({'.'.join(str(p) for p in key[:i]) or 'the top'} is {kind})")
    return here


def file_state(path: str):
    with contextlib.suppress(OSError):
        st = os.stat(path)
        return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns
    return None


def figure_from_file(path: str, name: str, key: list[str | int], before) -> tuple[float | None, str]:
    """The number at ``key`` in the JSON file ``path`` (``name``: as --json-file gave it), which
    the run must have written (its state differs from ``before``): (figure, problem)."""
    shown = f"--json-file {name}"
    if not os.path.exists(path):
        return None, f"{shown}: the command did not write it"
    if file_state(path) == before:
        return None, f"{shown}: the command did not write it (it holds what it held before the run)"
    try:
        data = parse_json(read_input(path, "--json-file", wait_s=5), "--json-file", name)
    except ScriptError as err:
        return None, str(err).replace(path, name)
    key_text = ".".join(map(str, key))
    try:
        value = lookup(data, key)
    except KeyError as err:
        return None, f"{shown}: --key {key_text}: {err.args[0]}"
    if isinstance(value, str):
        value = to_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{shown}: --key {key_text} holds no number"
    return float(value), ""


# --- running the command ---------------------------------------------------------------------------

@dataclasses.dataclass
class Run:
    """One run of the command: its figure, or the problem that left it without one."""
    index: int
    seconds: float
    exit_status: int | None = None
    timed_out: bool = False
    figure: float | None = None
    problem: str = ""
    output: str = ""

    def row(self, commit: str | None) -> dict:
        figure = self.figure
        return {"commit": commit, "run": self.index,
                "figure": None if figure is None or not math.isfinite(figure) else figure,
                "figure_text": None if figure is None else f"{figure:g}",
                "exit_status": self.exit_status, "seconds": round(self.seconds, 3),
                "timed_out": self.timed_out, "problem": self.problem or None}


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the run's process group (it was started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_once(opts, command: list[str], cwd: str, index: int) -> Run:
    """Run the command once in ``cwd``, bounded by --timeout-s, and read its figure."""
    json_path = os.path.join(cwd, opts.json_file) if opts.json_file else None
    before = file_state(json_path) if json_path else None
    start = time.monotonic()
    try:
        proc = start_process(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
    except OSError as err:
        return Run(index, 0.0, problem=f"cannot start {command[0]}: {err.strerror}")
    try:
        out, err = proc.communicate(timeout=opts.timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_group(proc)
        timed_out = True
        try:
            out, err = proc.communicate(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # a process that left the group holds the pipes open
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
            proc.wait(timeout=KILL_WAIT_S)
            out, err = "", ""
    except BaseException:  # Ctrl-C, SIGTERM: the run goes with the judge
        kill_group(proc)
        with contextlib.suppress(Exception):
            proc.wait(timeout=KILL_WAIT_S)
        raise
    run = Run(index, time.monotonic() - start, exit_status=proc.returncode, output=out + err)
    if timed_out:
        run.timed_out, run.exit_status = True, None
        run.problem = f"did not finish within --timeout-s {opts.timeout_s:g} s (its process group was killed)"
        return run
    if proc.returncode != 0:
        last = next((line.strip() for line in reversed(err.splitlines() or out.splitlines())
                     if line.strip()), "")
        died = f"exited with status {proc.returncode}"
        if proc.returncode < 0:
            with contextlib.suppress(ValueError):
                died = f"died of {signal.Signals(-proc.returncode).name}"
        run.problem = f"{os.path.basename(command[0])} {died}" + (f": {last[:160]}" if last else "")
        return run
    if opts.regex:
        run.figure, run.problem = figure_from_output(opts.regex, out, err)
    else:
        run.figure, run.problem = figure_from_file(json_path, opts.json_file, opts.key, before)
    return run


# --- the decision ----------------------------------------------------------------------------------

def threshold(opts) -> float:
    """--threshold, or the baseline moved by --tolerance percent of its size towards worse."""
    if opts.threshold is not None:
        return opts.threshold
    step = abs(opts.baseline) * opts.tolerance / 100
    return opts.baseline + step if opts.better == "lower" else opts.baseline - step


def worst(better: str) -> float:
    return math.inf if better == "lower" else -math.inf


def decide(figures: list[float], limit: float, better: str, margin_pct: float = 0.0) -> str:
    """'good', 'bad' or 'undecided' (the median within margin_pct percent of |limit|). A NaN
    counts as the worst figure."""
    values = [worst(better) if math.isnan(f) else f for f in figures]
    m = statistics.median(values)
    if margin_pct and abs(m - limit) < abs(limit) * margin_pct / 100:
        return "undecided"
    return "bad" if (m > limit if better == "lower" else m < limit) else "good"


def median_of(figures: list[float], better: str) -> float:
    return statistics.median([worst(better) if math.isnan(f) else f for f in figures])


def rule_text(opts) -> str:
    how = f"{opts.better} is better"
    if opts.threshold is None:
        sign = "+" if opts.better == "lower" else "-"
        how += f"; baseline {opts.baseline:g} {sign} {opts.tolerance:g}%"
    if opts.margin:
        how += f"; margin {opts.margin:g}%"
    return how


@dataclasses.dataclass
class Judgement:
    commit: str | None
    verdict: str               # good, bad, skip
    status: int
    reason: str
    median: float | None
    runs: list[Run]


def judge(opts, command: list[str], cwd: str, commit: str | None) -> Judgement:
    """Run the command --runs times (more within the margin) in ``cwd`` and decide."""
    label = f"commit {commit}: " if commit else ""
    limit = threshold(opts)
    runs: list[Run] = []
    planned = opts.runs
    while True:
        while len(runs) < planned:
            run = run_once(opts, command, cwd, len(runs) + 1)
            runs.append(run)
            if opts.show_output and run.output:
                sys.stdout.write(run.output if run.output.endswith("\n") else run.output + "\n")
                sys.stdout.flush()
            if run.problem:
                say(f"{label}run {run.index}/{planned}: no figure ({run.seconds:.1f} s)")
                failed = f"run {run.index} of {planned}: {run.problem}"
                if opts.failed_run == "bad":
                    return Judgement(commit, "bad", EXIT_BAD, f"{failed} (--failed-run bad)", None, runs)
                return Judgement(commit, "skip", EXIT_SKIP, failed, None, runs)
            say(f"{label}run {run.index}/{planned}: {run.figure:g} ({run.seconds:.1f} s)")
        figures = [r.figure for r in runs]
        verdict = decide(figures, limit, opts.better, opts.margin)
        if verdict != "undecided" or len(runs) >= opts.max_runs:
            break
        planned = min(len(runs) + opts.runs, opts.max_runs)
    m = median_of(figures, opts.better)
    shown = ", ".join(f"{f:g}" for f in figures)
    how = f"({rule_text(opts)}; runs: {shown})"
    if verdict == "undecided":
        reason = f"median {m:g} is still within the margin of the threshold {limit:g} after {len(runs)} runs {how}"
        return Judgement(commit, "skip", EXIT_SKIP, reason, m, runs)
    if verdict == "bad":
        return Judgement(commit, "bad", EXIT_BAD, f"median {m:g} is worse than the threshold {limit:g} {how}",
                         m, runs)
    return Judgement(commit, "good", EXIT_GOOD, f"median {m:g} is within the threshold {limit:g} {how}", m, runs)


# --- git -------------------------------------------------------------------------------------------

def git(args: list[str], cwd: str, check: bool = True) -> str | None:
    """The stripped stdout of ``git ARGS`` in ``cwd``; None when it fails and not ``check``."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        if not check:
            return None
        raise ScriptError("git not found on PATH", EXIT_ABORT) from None
    except subprocess.TimeoutExpired:
        raise ScriptError(f"git {' '.join(args)} did not finish within {GIT_TIMEOUT_S} s", EXIT_ABORT) from None
    if done.returncode != 0:
        if not check:
            return None
        first = (done.stderr.strip().splitlines() or [f"status {done.returncode}"])[0]
        raise ScriptError(f"git {' '.join(args)}: {first}", EXIT_ABORT)
    return done.stdout.strip()


def current_commit(cwd: str) -> str | None:
    """The commit under test: BISECT_HEAD (git bisect start --no-checkout), else HEAD; None
    outside a git repository."""
    for ref in ("BISECT_HEAD", "HEAD"):
        sha = git(["rev-parse", "--verify", "-q", "--short", ref], cwd, check=False)
        if sha:
            return sha
    return None


def bisect_ends(cwd: str) -> tuple[str, list[tuple[str, str]]]:
    """(the top folder of the repository, [(term, sha)] of the bisect's bad end and good ends)."""
    top = git(["rev-parse", "--show-toplevel"], cwd, check=False)
    if not top:
        raise ScriptError(f"--check-ends: {cwd} is not in a git repository", EXIT_ABORT)
    bad, good = "bad", "good"
    terms = git(["rev-parse", "--git-path", "BISECT_TERMS"], cwd)
    terms = terms if os.path.isabs(terms) else os.path.join(cwd, terms)
    with contextlib.suppress(OSError), open(terms, encoding="utf-8") as f:
        names = f.read().split()
        if len(names) == 2:
            bad, good = names
    bad_sha = git(["rev-parse", "--verify", "-q", f"refs/bisect/{bad}"], cwd, check=False)
    goods = (git(["for-each-ref", "--format=%(objectname)", f"refs/bisect/{good}-*"], cwd) or "").split()
    if not bad_sha and not goods:
        raise ScriptError(f"--check-ends: no bisect in progress in {top}: start one with "
                          "git bisect start BAD GOOD", EXIT_ABORT)
    if not goods:
        raise ScriptError(f"--check-ends: no {good} commit is marked, so nothing bounds the search: "
                          f"mark the last commit known to be {good} with git bisect {good} REV", EXIT_ABORT)
    if not bad_sha:
        raise ScriptError(f"--check-ends: no {bad} commit is marked: git bisect {bad} REV", EXIT_ABORT)
    return top, [(good, sha) for sha in goods] + [(bad, bad_sha)]


def check_ends(opts, command: list[str], cwd: str, judged: list[Judgement], terms: list[str]) -> int:
    """Judge each end of the bisect in a temporary worktree, appending to ``judged`` and
    ``terms``; EXIT_GOOD when each is judged as marked, else a verdict_error."""
    top, ends = bisect_ends(cwd)
    inside = os.path.relpath(os.path.realpath(cwd), os.path.realpath(top))
    bad_term = ends[-1][0]
    for term, sha in ends:
        short = git(["rev-parse", "--short", sha], top)
        folder = tempfile.mkdtemp(prefix=f"bisect-judge-{short}-")
        try:
            git(["worktree", "add", "--detach", "--quiet", "--force", folder, sha], top)
            j = judge(opts, command, os.path.normpath(os.path.join(folder, inside)), short)
        finally:
            git(["worktree", "remove", "--force", folder], top, check=False)
            shutil.rmtree(folder, ignore_errors=True)
            git(["worktree", "prune"], top, check=False)
        judged.append(j)
        terms.append(term)
        if j.verdict == "skip":
            raise verdict_error(f"the {term} end {short} cannot be judged: {j.reason}", EXIT_SKIP)
        expected = "bad" if term == bad_term else "good"
        if j.verdict != expected:
            why = ("the regression is older than this commit (mark an older one), or the threshold "
                   "is too strict" if expected == "good" else "the regression is not in this range, "
                   "or the threshold is too lenient")
            raise verdict_error(f"the {term} end {short} is judged {j.verdict}: {j.reason}; {why}; a "
                                "bisect now would blame an innocent commit", EXIT_BAD)
        say(f"{term} end {short}: {j.verdict}, as marked: {j.reason}")
    say("every end is judged as marked: git bisect run can start")
    return EXIT_GOOD


# --- the command line ------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, usage=f"{PROG} [options] -- COMMAND [ARGS ...]",
               description="Run COMMAND --runs times, read a figure from each run, and exit as git "
               "bisect run expects: 0 good, 1 bad, 125 skip (128: the judge's own error, which "
               "stops the bisect).")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    src = p.add_argument_group("the figure (one of)")
    src.add_argument("--regex", type=regex, metavar="RE",
                     help="the figure is the last match of RE in the run's stdout (else stderr): "
                     "its one group, or (?P<figure>...), or the whole match")
    src.add_argument("--json-file", metavar="PATH", type=nonempty,
                     help="the figure is in this JSON file, which each run writes (relative to the "
                     "folder the run starts in); with --key")
    src.add_argument("--key", type=parse_key, metavar="A.B.0",
                     help="where in --json-file: names and list indices joined by dots (-1: last item)")
    rule = p.add_argument_group("the decision")
    rule.add_argument("--better", choices=("lower", "higher"), required=True,
                      help="lower (a loss, a step time) or higher (a throughput, an accuracy)")
    rule.add_argument("--threshold", type=number(float), metavar="T",
                      help="the worst acceptable median")
    rule.add_argument("--baseline", type=number(float), metavar="B",
                      help="the median on a known-good commit; the threshold is B moved by "
                      "--tolerance towards worse")
    rule.add_argument("--tolerance", type=number(float, 0, 1000), metavar="PCT",
                      help="with --baseline: percent of |B| accepted as noise (default 5)")
    rule.add_argument("--margin", type=number(float, 0, 1000), metavar="PCT", default=0.0,
                      help="a median within PCT percent of |T| is undecided: run --runs more, up to "
                      "--max-runs, then skip (default 0: no margin)")
    rule.add_argument("--runs", type=number(int, 1, MAX_RUNS), default=3, metavar="N",
                      help="runs per commit (default 3; the median of 3 outvotes one outlier)")
    rule.add_argument("--max-runs", type=number(int, 1, MAX_RUNS), metavar="N",
                      help="at most this many runs when the median is within --margin (default: --runs)")
    rule.add_argument("--failed-run", choices=("skip", "bad"), default="skip",
                      help="a run that fails, times out or gives no figure makes the commit: skip "
                      "(default: it cannot be judged) or bad (the regression is a crash or a hang)")
    p.add_argument("--timeout-s", type=number(float, 0, 7 * 86400, lo_open=True), default=600.0,
                   metavar="S", help="each run is killed (its whole process group) after S seconds "
                   "(default 600)")
    p.add_argument("--check-ends", action="store_true",
                   help="before git bisect run: judge the marked good and bad commits, each in a "
                   "temporary git worktree, and say whether they are judged as marked")
    p.add_argument("--show-output", action="store_true", help="print each run's output after it ends")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the verdict, the rule and every run's figure here as JSON")
    return p


def parse_command_line(args: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The judge's options (before ``--``) and the command (after it), checked."""
    options, command = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    parser = build_parser()
    opts = parser.parse_args(options)
    if not command or not command[0].strip():
        raise ScriptError("no command given: put it after --, e.g. "
                          f"{PROG} --better lower --threshold 2.5 --regex 'loss ([0-9.]+)' -- python train.py",
                          EXIT_ABORT)
    if (opts.regex is None) == (opts.json_file is None):
        parser.error("give the figure's source: --regex RE, or --json-file PATH with --key (one of them)")
    if opts.json_file and opts.key is None:
        parser.error("--json-file needs --key (where the figure is in the file, e.g. --key metrics.loss)")
    if opts.key is not None and not opts.json_file:
        parser.error("--key goes with --json-file")
    if (opts.threshold is None) == (opts.baseline is None):
        parser.error("give the threshold: --threshold T, or --baseline B (with --tolerance PCT), one of them")
    if opts.tolerance is not None and opts.baseline is None:
        parser.error("--tolerance goes with --baseline (--threshold is the limit itself)")
    opts.tolerance = 5.0 if opts.tolerance is None else opts.tolerance
    opts.max_runs = opts.runs if opts.max_runs is None else opts.max_runs
    if opts.max_runs < opts.runs:
        parser.error(f"--max-runs {opts.max_runs} is below --runs {opts.runs}")
    if opts.max_runs > opts.runs and not opts.margin:
        parser.error("--max-runs only matters with --margin (the runs added when the median is "
                     "within the margin)")
    return opts, command


def resolve_command(name: str) -> str:
    """The executable the command names, as the shell would find it; the judge cannot work
    without it (an abort, not a skip: every commit would be skipped)."""
    found = shutil.which(name)
    if found:
        return found
    if os.sep in name and os.path.exists(name):
        raise ScriptError(f"command {name}: is not an executable file", EXIT_ABORT)
    raise ScriptError(f"command {name!r} not found (not on PATH, not a path to an executable); "
                      "nothing was judged", EXIT_ABORT)


def report(opts, command: list[str], mode: str, status: int, verdict: str, reason: str,
           judged: list[Judgement], terms: list[str] | None = None) -> dict:
    """The --json document: the results envelope, the verdict and its reason, the rule, the
    median (in --check-ends mode each end's), and one row per run in ``results``."""
    doc = envelope("bisect_judge", None)
    doc.update({
        "mode": mode, "verdict": verdict, "exit_status": status, "reason": reason,
        "commit": judged[-1].commit if judged and mode == "judge" else None,
        "judged_command": command,
        "figure_from": {"regex": opts.regex.pattern} if opts.regex else
        {"json_file": opts.json_file, "key": ".".join(map(str, opts.key))},
        "rule": {"better": opts.better, "threshold": threshold(opts), "baseline": opts.baseline,
                 "tolerance_pct": opts.tolerance if opts.threshold is None else None,
                 "margin_pct": opts.margin, "runs": opts.runs, "max_runs": opts.max_runs,
                 "failed_run": opts.failed_run, "timeout_s": opts.timeout_s, "statistic": "median"},
        "median": None,
        "ends": [],
        "results": [],
    })
    for i, j in enumerate(judged):
        if mode == "judge":
            doc["median"] = j.median
        else:
            doc["ends"].append({"term": terms[i], "commit": j.commit, "verdict": j.verdict,
                                "median": j.median, "reason": j.reason})
        doc["results"] += [r.row(j.commit) for r in j.runs]
    for place in (doc, *doc["ends"]):  # JSON has no infinity: a NaN figure made the median one
        if isinstance(place["median"], float) and not math.isfinite(place["median"]):
            place["median"] = None
    return doc


def run_judge(argv: list[str] | None) -> int:
    opts, command = parse_command_line(sys.argv[1:] if argv is None else list(argv))
    inputs = [opts.json_file] if opts.json_file else []
    json_path = check_output(opts.json, "--json", inputs) if opts.json else None
    shown = list(command)
    command = [resolve_command(command[0]), *command[1:]]
    on_stop_signals()
    cwd = os.getcwd()
    judged: list[Judgement] = []
    terms: list[str] = []
    mode = "check-ends" if opts.check_ends else "judge"

    def write(status: int, verdict: str, reason: str) -> None:
        if json_path:
            doc = report(opts, shown, mode, status, verdict, reason, judged, terms)
            write_atomic(json_path, json.dumps(doc, indent=2) + "\n")
    try:
        if opts.check_ends:
            status = check_ends(opts, command, cwd, judged, terms)
            write(status, "as-marked", "every end is judged as marked")
            return status
        j = judge(opts, command, cwd, current_commit(cwd))
        judged.append(j)
    except ScriptError as exc:
        if getattr(exc, "verdict", False):
            write(exc.status, "skip" if exc.status == EXIT_SKIP else "not-as-marked", str(exc))
        raise
    except KeyboardInterrupt as exc:
        write(getattr(exc, "status", 130), "interrupted", f"interrupted by {exc}")
        raise
    label = f"commit {j.commit}: " if j.commit else ""
    write(j.status, j.verdict, j.reason)
    if j.verdict == "skip":
        raise verdict_error(f"{label}skip (125): {j.reason}", EXIT_SKIP)
    say(f"{label}{j.verdict}: {j.reason}")
    return j.status


def main(argv: list[str] | None = None) -> int:
    """run_judge, with every failure of the judge itself turned into EXIT_ABORT: git bisect run
    would read the contract's 1 (failure) and 2 (usage) as "bad" and go on."""
    try:
        return run_judge(argv)
    except ScriptError as exc:
        if not getattr(exc, "verdict", False):
            exc.status = EXIT_ABORT
        raise
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # an unforeseen failure must stop the bisect too
        raise ScriptError(f"{type(exc).__name__}: {exc}", EXIT_ABORT) from exc


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
