"""Tests of scripts/debug/bisect_judge.py: real bisects of a throwaway repository.

Each test builds a git repository of eight commits in its own folder, whose ``bench.py`` is a tiny
deterministic "benchmark": it prints a throughput and writes a loss to metrics.json. One known
commit makes it worse (the throughput falls by a fifth, or the loss rises by half), and
``git bisect run`` with the judge must name that commit. The loss carries deterministic noise: a
counter outside the repository makes every third run an outlier that a one-run judge would take
for a regression, and that the median of three runs outvotes. The careless-input table runs the
judge the way a tired user would; git bisect's exit-status convention replaces the book's usual
one here (0 good, 1 bad, 125 skip, 128 the judge's own error, which stops the bisect).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env, import_script

SCRIPT = REPO / "scripts" / "debug" / "bisect_judge.py"
PY = sys.executable

BENCH = """import json, os, sys
SLOWDOWN = {slowdown}
LOSS = {loss}
NOISE = (0.0, 0.02, 0.45)   # every third run is an outlier
counter = os.environ.get("BENCH_COUNTER")
n = 0
if counter:
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
print(f"step 50 throughput: {{1000 / SLOWDOWN:.1f}} samples/s")
with open("metrics.json", "w") as f:
    json.dump({{"metrics": {{"loss": LOSS + NOISE[n % 3]}}}}, f)
"""


def git(repo: Path, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, env=env or git_env(), capture_output=True, text=True,
                          timeout=60, check=check, stdin=subprocess.DEVNULL)


def git_env(extra: dict | None = None) -> dict:
    return clean_env({"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "t@example.invalid",
                      "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "t@example.invalid",
                      "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                      "GIT_TERMINAL_PROMPT": "0", **(extra or {})})


def make_repo(repo: Path, bad: int, what: str = "slowdown", commits: int = 8) -> list[str]:
    """A repository of ``commits`` commits (1-based) whose bench.py gets worse at commit ``bad``
    (``what``: "slowdown" makes it 20% slower, "loss" raises its loss from 1.0 to 1.5); the
    other commits change a notes file. Returns the full shas, oldest first."""
    require_tool("git")
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("metrics.json\n")
    shas = []
    for i in range(1, commits + 1):
        worse = i >= bad
        slowdown = 1.25 if worse and what == "slowdown" else 1.0
        loss = 1.5 if worse and what == "loss" else 1.0
        (repo / "bench.py").write_text(BENCH.format(slowdown=slowdown, loss=loss))
        (repo / "notes.txt").write_text(f"change {i}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"change {i}" + (" (the regression)" if i == bad else ""))
        shas.append(git(repo, "rev-parse", "HEAD").stdout.strip())
    return shas


def judge_args(*options: str) -> list[str]:
    return [PY, str(SCRIPT), *options, "--", PY, "-I", "bench.py"]


THROUGHPUT = ("--better", "higher", "--baseline", "1000", "--tolerance", "5",
              "--regex", r"throughput: ([0-9.]+)", "--timeout-s", "30")
LOSS = ("--better", "lower", "--baseline", "1.0", "--tolerance", "20",
        "--json-file", "metrics.json", "--key", "metrics.loss", "--timeout-s", "30")


def bisect(repo: Path, good: str, bad: str, judge: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    git(repo, "bisect", "start", bad, good, env=env)
    return git(repo, "bisect", "run", *judge, env=env, check=False)


def first_bad(out: str) -> str | None:
    m = re.search(r"^([0-9a-f]{40}) is the first bad commit", out, re.M)
    return m[1] if m else None


@pytest.fixture(scope="module")
def bj():
    return import_script(SCRIPT)


def test_bisect_finds_the_commit_that_made_the_benchmark_slower(tmp_path):
    shas = make_repo(tmp_path / "repo", bad=5)
    done = bisect(tmp_path / "repo", shas[0], shas[-1], judge_args(*THROUGHPUT))
    assert done.returncode == 0, done.stdout + done.stderr
    assert first_bad(done.stdout) == shas[4], done.stdout
    assert "change 5 (the regression)" in done.stdout
    # each step is judged on three runs, in the judge's own lines
    assert re.search(r"commit [0-9a-f]{7,}: bad: median 800 is worse than the threshold 950 "
                     r"\(higher is better; baseline 1000 - 5%; runs: 800, 800, 800\)", done.stdout), done.stdout
    assert re.search(r"commit [0-9a-f]{7,}: good: median 1000 is within the threshold 950", done.stdout)


def test_the_median_outvotes_an_outlier_that_misleads_a_single_run(tmp_path):
    shas = make_repo(tmp_path / "repo", bad=6, what="loss")
    env = git_env({"BENCH_COUNTER": str(tmp_path / "counter")})
    done = bisect(tmp_path / "repo", shas[0], shas[-1], judge_args(*LOSS), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert first_bad(done.stdout) == shas[5], done.stdout
    assert "runs: 1, 1.02, 1.45" in done.stdout  # the outlier was there, and outvoted
    # the same bisect judged on one run per commit blames an innocent commit
    git(tmp_path / "repo", "bisect", "reset", env=env)
    (tmp_path / "counter").unlink()
    once = bisect(tmp_path / "repo", shas[0], shas[-1], judge_args(*LOSS, "--runs", "1"), env=env)
    assert first_bad(once.stdout) not in (None, shas[5]), once.stdout


def test_check_ends_accepts_good_ends_and_refuses_a_good_end_that_is_bad(tmp_path):
    shas = make_repo(tmp_path / "repo", bad=1)        # the regression is older than the "good" end
    repo = tmp_path / "repo"
    git(repo, "bisect", "start", shas[-1], shas[2])
    head = git(repo, "rev-parse", "HEAD").stdout
    check = subprocess.run(judge_args("--check-ends", *THROUGHPUT, "--json", str(tmp_path / "ends.json")),
                           cwd=repo, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert check.returncode == 1, check.stdout + check.stderr
    short = git(repo, "rev-parse", "--short", shas[2]).stdout.strip()
    assert re.search(rf"error: the good end {short} is judged bad: median 800 is worse than the threshold "
                     r"950 .*the regression is older than this commit", check.stderr), check.stderr
    report = json.loads((tmp_path / "ends.json").read_text())
    assert report["verdict"] == "not-as-marked" and report["ends"][0]["verdict"] == "bad"
    # the checkout and the worktree list are as they were
    assert git(repo, "rev-parse", "HEAD").stdout == head
    assert len(git(repo, "worktree", "list").stdout.splitlines()) == 1
    # a good end that is good: both ends as marked
    git(repo, "bisect", "reset")
    shas = make_repo(tmp_path / "ok", bad=5)
    git(tmp_path / "ok", "bisect", "start", shas[-1], shas[0])
    check = subprocess.run(judge_args("--check-ends", *THROUGHPUT), cwd=tmp_path / "ok", env=clean_env(),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "every end is judged as marked: git bisect run can start" in check.stdout


def test_json_records_the_verdict_the_rule_and_every_figure(tmp_path):
    out = tmp_path / "verdict.json"
    done = subprocess.run([PY, str(SCRIPT), "--better", "lower", "--threshold", "2", "--runs", "5",
                           "--regex", r"loss=(?P<figure>\S+) step=(\d+)", "--json", str(out), "--",
                           PY, "-c", "print('loss=1.5 step=3')"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["benchmark"] == "bisect_judge" and report["verdict"] == "good" and report["exit_status"] == 0
    assert report["rule"]["threshold"] == 2.0 and report["rule"]["statistic"] == "median"
    assert report["median"] == 1.5 and [r["figure"] for r in report["results"]] == [1.5] * 5
    assert report["commit"] is None          # not in a git repository


def test_a_failed_run_is_bad_when_asked_and_a_nan_is_the_worst_figure(tmp_path):
    fail = subprocess.run([PY, str(SCRIPT), "--better", "lower", "--threshold", "2", "--regex", "x",
                           "--failed-run", "bad", "--", PY, "-c", "raise SystemExit(3)"], cwd=tmp_path,
                          env=clean_env(), capture_output=True, text=True, timeout=60)
    assert fail.returncode == 1 and "bad: run 1 of 3: python" in fail.stdout, fail.stdout + fail.stderr
    assert "exited with status 3 (--failed-run bad)" in fail.stdout and "error:" not in fail.stderr
    nan = subprocess.run([PY, str(SCRIPT), "--better", "lower", "--threshold", "2", "--regex", r"loss (\S+)",
                          "--", PY, "-c", "print('loss nan')"], cwd=tmp_path, env=clean_env(),
                         capture_output=True, text=True, timeout=60)
    assert nan.returncode == 1 and "bad: median inf is worse than the threshold 2" in nan.stdout, nan.stdout


def test_decide_median_margin_and_direction(bj):
    assert bj.decide([1.0, 1.45, 1.02], 1.2, "lower") == "good"         # one outlier outvoted
    assert bj.decide([1.5, 1.0, 1.52], 1.2, "lower") == "bad"
    assert bj.decide([800, 1000, 790], 950, "higher") == "bad"
    assert bj.decide([1.2], 1.2, "lower") == "good"                       # the threshold itself is good
    assert bj.decide([1.21], 1.2, "lower", margin_pct=2) == "undecided"   # within 2% of 1.2
    assert bj.decide([1.3], 1.2, "lower", margin_pct=2) == "bad"
    assert bj.decide([math.nan, math.nan, 0.5], 1.0, "lower") == "bad"    # NaN is the worst loss
    assert bj.decide([math.nan, 900, 1000], 950, "higher") == "bad"
    assert bj.lookup({"a": [{"b": 3}, {"b": 4}]}, bj.parse_key("a.-1.b")) == 4


def test_a_median_within_the_margin_is_measured_again_then_skipped(tmp_path):
    out = tmp_path / "v.json"
    done = subprocess.run([PY, str(SCRIPT), "--better", "lower", "--threshold", "1.0", "--margin", "5",
                           "--runs", "2", "--max-runs", "4", "--regex", r"loss (\S+)", "--json", str(out),
                           "--", PY, "-c", "print('loss 1.01')"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 125, done.stdout + done.stderr
    assert "run 4/4: 1.01" in done.stdout and "still within the margin of the threshold 1 after 4 runs" in done.stderr
    assert len(json.loads(out.read_text())["results"]) == 4


def test_sigterm_stops_the_judge_and_its_run(tmp_path):
    proc = subprocess.Popen([PY, str(SCRIPT), "--better", "lower", "--threshold", "1", "--regex", "x", "--",
                             PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        child = None
        while child is None:    # the judge runs git first; wait for the benchmark itself
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
            child = next((c for c in psutil.Process(proc.pid).children() if "time.sleep(60)" in " ".join(c.cmdline())),
                         None)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143 and "interrupted by SIGTERM" in err, err   # >= 128: git bisect stops
    _, alive = psutil.wait_procs([child], timeout=5)
    assert not alive, "the run outlived the judge"


FIG = ["--better", "lower", "--threshold", "1", "--regex", r"loss=(\S+)"]
JSONFIG = ["--better", "lower", "--threshold", "1", "--json-file", "out.json", "--key", "metrics.loss"]
ABORT, SKIP = 128, 125

BAD_INPUT = [
    Case("command-missing", [*FIG, "--", "no-such-benchmark"],
         r"command 'no-such-benchmark' not found \(not on PATH.*nothing was judged", status=ABORT),
    Case("no-command", FIG, "no command given: put it after --", status=ABORT),
    Case("figure-never-printed", [*FIG, "--", PY, "-c", "print('hello')"],
         r"skip \(125\): run 1 of 3: --regex 'loss=\(\\S\+\)' matched nothing in the command's output",
         status=SKIP),
    Case("figure-not-a-number", [*FIG, "--", PY, "-c", "print('loss=abc')"],
         r"skip \(125\): run 1 of 3: --regex matched 'loss=abc', and 'abc' is not a number", status=SKIP),
    Case("command-fails", [*FIG, "--", PY, "-c", "import sys; sys.exit('no GPU here')"],
         r"skip \(125\): run 1 of 3: python\S* exited with status 1: no GPU here", status=SKIP),
    Case("json-file-not-json", [*JSONFIG, "--", PY, "-c", "open('out.json', 'w').write('step 3 loss 1.2')"],
         r"skip \(125\): run 1 of 3: --json-file out.json: not valid JSON", status=SKIP),
    Case("json-key-missing", [*JSONFIG, "--", PY, "-c", "open('out.json', 'w').write('[1]')"],
         r"skip \(125\): run 1 of 3: --json-file out.json: --key metrics.loss: no metrics \(the top is a list",
         status=SKIP),
    # a file left by an earlier run is never read as this run's figure
    Case("json-file-stale", [*JSONFIG, "--", "true"],
         r"skip \(125\): run 1 of 3: --json-file out.json: the command did not write it \(it holds what",
         status=SKIP, files={"out.json": '{"metrics": {"loss": 0.5}}'}),
    Case("timeout", [*FIG, "--timeout-s", "0.5", "--", PY, "-c", "import time; time.sleep(30)"],
         r"skip \(125\): run 1 of 3: did not finish within --timeout-s 0.5 s \(its process group was killed\)",
         status=SKIP, limit_s=10),
    Case("not-a-repository", ["--check-ends", *FIG, "--", "true"], r"--check-ends: .* is not in a git repository",
         status=ABORT),
    Case("no-figure-source", ["--better", "lower", "--threshold", "1", "--", "true"],
         "give the figure's source: --regex RE, or --json-file PATH with --key", status=ABORT),
    Case("two-figure-sources", [*JSONFIG, "--regex", "x", "--", "true"], "give the figure's source", status=ABORT),
    Case("json-file-without-key", ["--better", "lower", "--threshold", "1", "--json-file", "o.json", "--", "true"],
         "--json-file needs --key", status=ABORT),
    Case("key-empty-part", [*FIG[:4], "--json-file", "o.json", "--key", "a..b", "--", "true"],
         r"argument --key: 'a..b' has an empty part", status=ABORT),
    Case("regex-invalid", ["--better", "lower", "--threshold", "1", "--regex", "loss=(", "--", "true"],
         r"argument --regex: 'loss=\(' is not a regular expression", status=ABORT),
    Case("regex-two-groups", ["--better", "lower", "--threshold", "1", "--regex", r"(\w+)=(\S+)", "--", "true"],
         r"has 2 groups: keep one, or name the figure's \(\?P<figure>", status=ABORT),
    Case("no-threshold", ["--better", "lower", "--regex", "x", "--", "true"], "give the threshold", status=ABORT),
    Case("threshold-and-baseline", [*FIG, "--baseline", "2", "--", "true"], "give the threshold", status=ABORT),
    Case("tolerance-without-baseline", [*FIG, "--tolerance", "3", "--", "true"], "--tolerance goes with --baseline",
         status=ABORT),
    Case("no-direction", ["--threshold", "1", "--regex", "x", "--", "true"], "the following arguments are required: "
         "--better", status=ABORT),
    Case("runs-zero", [*FIG, "--runs", "0", "--", "true"], "argument --runs: 0 must be >= 1", status=ABORT),
    Case("threshold-nan", ["--better", "lower", "--threshold", "nan", "--regex", "x", "--", "true"],
         "argument --threshold: 'nan' is not a finite number", status=ABORT),
    Case("timeout-zero", [*FIG, "--timeout-s", "0", "--", "true"], "argument --timeout-s: 0 must be > 0",
         status=ABORT),
    Case("max-runs-without-margin", [*FIG, "--max-runs", "9", "--", "true"], "--max-runs only matters with --margin",
         status=ABORT),
    Case("json-onto-json-file", [*JSONFIG, "--json", "out.json", "--", "true"], r"--json out.json: is also an input",
         status=ABORT),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/bisect_judge.py", case, tmp_path)


def test_check_ends_without_a_good_commit_is_refused(tmp_path):
    repo = tmp_path / "repo"
    shas = make_repo(repo, bad=5, commits=2)
    git(repo, "bisect", "start")
    git(repo, "bisect", "bad", shas[-1])
    check_refused("debug/bisect_judge.py", Case(
        "no-good-commit", ["--check-ends", *FIG, "--", "true"],
        r"--check-ends: no good commit is marked, so nothing bounds the search: mark the last commit "
        r"known to be good with git bisect good REV", status=ABORT), repo)
