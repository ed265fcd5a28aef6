"""Tests of scripts/insights/acceptance_suite.py.

One run of the real suite with --quick on CPU (the book's six scripts, two of them as two gloo
ranks under torchrun): it passes and its report validates, with each check's own JSON. The other
tests give the suite a stand-in scripts/ folder (--scripts) whose checks exit as told in a fraction
of a second, or inject a problem the real node_health_check detects (a saved kernel log with an
Xid), so that a failing, a broken, a hanging and an interrupted check cost no torch import.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import RANKS, REPO, import_script, interrupt_when
from tools.results import problems

NAME = "acceptance_suite.py"
SCRIPT = f"insights/{NAME}"
PATH = REPO / "scripts" / SCRIPT
SUITE = import_script(PATH)
XID = "[Sat Nov 28 10:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"

# A stand-in check: writes {"verdict": ...} to its --json, prints its pid, sleeps, exits as told.
STAND_IN = """import json, os, sys, time
args = sys.argv[1:]
path = args[args.index("--json") + 1]
status, sleep = {status}, {sleep}
print("pid", os.getpid(), flush=True)
time.sleep(sleep)
json.dump({{"verdict": "stand-in", "best": {{}}, "peak_GBps": {{}}}}, open(path, "w"))
sys.exit(status)
"""


def stand_ins(tmp: Path, **behaviour: tuple[int, float]) -> Path:
    """A scripts/ folder whose checks exit with the given (status, seconds) ((0, 0) by default)."""
    for name, rel in SUITE.SCRIPT_OF.items():
        status, sleep = behaviour.get(name, (0, 0))
        (tmp / "scripts" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "scripts" / rel).write_text(STAND_IN.format(status=status, sleep=sleep))
    return tmp / "scripts"


def report(path: Path) -> dict:
    doc = json.loads(path.read_text())
    assert problems(doc, str(path)) == []
    return doc


@RANKS
def test_the_quick_suite_runs_every_check_on_cpu(launch, tmp_path):
    require_tool("fio")
    res = launch.python(NAME, ["--quick", "--expect-gpus", "0", "--out", str(tmp_path / "run")], timeout=240)
    assert res.returncode == 0, res.output
    doc = report(tmp_path / "run" / "acceptance_suite.json")
    assert [row["check"] for row in doc["results"]] == list(SUITE.CHECKS)
    assert doc["verdict"] == "pass" and doc["device"] == "cpu" and doc["gpus"] == 0
    for row in doc["results"]:
        assert row["verdict"] == "pass" and row["exit_status"] == 0, row
        assert json.loads(Path(row["json_file"]).read_text()) == row["output"]
        if "benchmark" in row["output"] and row["check"] != "find_bad_rank":  # a results file
            assert problems(row["output"], row["check"]) == []
        if row["check"] in SUITE.DISTRIBUTED:
            assert "--nproc-per-node=2" in row["command"]
    figures = {row["check"]: row["figure"] for row in doc["results"]}
    assert figures["all_reduce_bench"] > 0 and figures["mamf_finder"] > 0 and figures["fio_scan"] > 0
    assert res.stdout.splitlines()[-1].startswith("PASS: 6 checks passed")


def test_a_problem_found_exits_3_and_names_the_check(launch, tmp_path):
    """The real node_health_check reads an injected kernel log with an Xid 79; fio is missing."""
    (tmp_path / "dmesg.txt").write_text(XID)
    res = launch.python(NAME, ["--checks", "node_health_check", "fio_scan", "--expect-gpus", "0",
                                 "--fio", str(tmp_path / "no-fio"), "--out", str(tmp_path / "run"),
                                 "--extra", f"node_health_check --dmesg {tmp_path / 'dmesg.txt'}"])
    assert res.returncode == 3, res.output
    assert res.stdout.splitlines()[-1].startswith("FAIL: node_health_check found a problem")
    doc = report(tmp_path / "run" / "acceptance_suite.json")
    health, fio = doc["results"]
    assert doc["verdict"] == "fail"
    assert health["verdict"] == "fail" and health["exit_status"] == 3 and health["reason"].startswith("xid: Xid 79")
    assert any("UNHEALTHY" in line for line in health["output_tail"])
    assert fio["verdict"] == "error" and fio["exit_status"] == 2 and fio["output"] is None
    assert any("no-fio" in line for line in fio["output_tail"])


def test_a_check_that_cannot_run_exits_1_in_one_line(launch, tmp_path):
    scripts = stand_ins(tmp_path, mem_bandwidth=(1, 0))
    res = launch.python(NAME, ["--scripts", str(scripts), "--checks", "mamf_finder", "mem_bandwidth",
                                 "--out", str(tmp_path / "run"), "--json", str(tmp_path / "r.json")])
    assert res.returncode == 1
    assert launch.error_lines(res.stderr) == [f"acceptance_suite.py: error: mem_bandwidth could not run; "
                                              f"report {tmp_path / 'r.json'}"]
    assert [row["verdict"] for row in report(tmp_path / "r.json")["results"]] == ["pass", "error"]


def test_a_one_gpu_node_skips_the_distributed_checks(launch, tmp_path):
    scripts = stand_ins(tmp_path)
    res = launch.python(NAME, ["--scripts", str(scripts), "--expect-gpus", "1", "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.output
    rows = {row["check"]: row for row in report(tmp_path / "run" / "acceptance_suite.json")["results"]}
    assert {name for name, row in rows.items() if row["verdict"] == "skip"} == set(SUITE.DISTRIBUTED)
    assert "--expect-gpus 1" in rows["node_health_check"]["command"]
    assert res.stdout.splitlines()[-1].startswith("PASS: 4 checks passed, 2 skipped")


def test_a_hanging_check_is_killed_at_its_time_limit(launch, tmp_path):
    scripts = stand_ins(tmp_path, node_health_check=(0, 60))
    start = time.monotonic()
    res = launch.python(NAME, ["--scripts", str(scripts), "--checks", "node_health_check", "--timeout-s", "1",
                                 "--out", str(tmp_path / "run")])
    assert res.returncode == 1 and time.monotonic() - start < 20
    row = report(tmp_path / "run" / "acceptance_suite.json")["results"][0]
    assert row["exit_status"] is None and "did not finish within 1 s" in row["reason"]
    pid = int((tmp_path / "run" / "node_health_check.log").read_text().split()[1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_sigterm_kills_the_running_check_and_keeps_the_report(tmp_path):
    scripts = stand_ins(tmp_path, mamf_finder=(0, 60))
    log = tmp_path / "run" / "mamf_finder.log"

    def mamf_started(lines: list[str]) -> bool:  # after the first check, once the second has started
        end = time.monotonic() + 20
        while lines[-1].startswith("node_health_check") and time.monotonic() < end:
            if log.is_file() and log.read_text().startswith("pid"):
                return True
            time.sleep(0.05)
        return False

    res = interrupt_when(PATH, ["--scripts", str(scripts), "--out", str(tmp_path / "run")], mamf_started,
                         signal.SIGTERM, timeout=20)
    assert res.returncode == 143 and res.stderr.strip().endswith("error: interrupted by SIGTERM")
    doc = report(tmp_path / "run" / "acceptance_suite.json")
    assert doc["interrupted"] and doc["verdict"] == "error"
    assert [row["check"] for row in doc["results"]] == ["node_health_check"]
    pid = int(log.read_text().split()[1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_figure_below_its_minimum_fails_the_check():
    args = SUITE.build_parser().parse_args(["--min-tflops", "500", "--min-busbw-GBps", "100"])
    mamf = {"best": {"bf16": {"dtype": "bf16", "max_tflops": 612.0}, "fp8": {"dtype": "fp8", "max_tflops": 410.0}}}
    assert SUITE.judge("mamf_finder", args, 0, "", mamf) == ("pass", "612 TFLOPS (bf16)", 612.0)
    verdict, reason, figure = SUITE.judge("all_reduce_bench", args, 0, "", {"peak_busbw_GBps": 88.5})
    assert (verdict, figure) == ("fail", 88.5) and "below the minimum 100" in reason
    assert SUITE.judge("mem_bandwidth", args, 0, "", {"peak_GBps": {"d2d": 2900.0}})[0] == "pass"
    assert SUITE.judge("fio_scan", args, 0, None or "", None)[0] == "error"
    found = {"findings": [{"kind": "slow_rank", "ranks": [3], "message": "rank 3 is slow"}]}
    assert SUITE.judge("find_bad_rank", args, 3, "", found) == ("fail", "rank 3 is slow", None)


CASES = [
    Case("unknown-check", ["--checks", "gpu_burn"], r"argument --checks: invalid choice: 'gpu_burn'"),
    Case("extra-unknown-check", ["--extra", "gpu_burn -x"], r"--extra 'gpu_burn -x': gpu_burn is not a check"),
    Case("extra-bad-quoting", ["--extra", "mamf_finder --dtype 'bf16"], r"--extra .*: No closing quotation"),
    Case("extra-empty", ["--extra", " "], r"argument --extra: must not be empty"),
    Case("timeout-zero", ["--timeout-s", "0"], r"argument --timeout-s: .*"),
    Case("timeout-nan", ["--timeout-s", "nan"], r"argument --timeout-s: 'nan' is not a finite number"),
    Case("negative-gpus", ["--expect-gpus", "-1"], r"argument --expect-gpus: .*"),
    Case("minimum-negative", ["--min-tflops", "-5"], r"argument --min-tflops: .*"),
    Case("scripts-not-the-book", ["--scripts", "{tmp}"], r"--scripts \S+: has no debug/node_health_check\.py"),
    Case("fio-dir-missing", ["--fio-dir", "{tmp}/nowhere"], r"--fio-dir \S+/nowhere: is not an existing folder"),
    Case("out-is-a-file", ["--out", "{tmp}/f"], r"--out \S+/f: .*is a file, not a folder", files={"f": "x"}),
    Case("json-is-the-out-folder", ["--out", "{tmp}/run", "--json", "{tmp}"], r"--json \S+: is a folder"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_careless_input_is_refused_before_any_check(case, tmp_path):
    check_refused(SCRIPT, case, tmp_path)
    assert not (tmp_path / "run").exists()
