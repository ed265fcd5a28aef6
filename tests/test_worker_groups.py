"""The suite's pytest-xdist scheduler (tests/worker_groups.py) runs every test of one group on one
worker, and each file's other tests on one worker: checked on a made-up suite of four files, each
holding one test of group "jobs" and three of its own, run with two workers."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CONFTEST = """
from tests import worker_groups

def pytest_configure(config):
    worker_groups.name_the_run(config)

def pytest_collection_modifyitems(config, items):
    worker_groups.publish(config, items)

def pytest_xdist_make_scheduler(config, log):
    return worker_groups.scheduler(config, log)
"""

TEST_FILE = """
import json, os, pytest

def record(request):
    with open({log!r}, "a") as f:
        f.write(json.dumps([request.node.nodeid, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

@pytest.mark.xdist_group("jobs")
def test_job(request):
    record(request)

@pytest.mark.parametrize("i", range(3))
def test_own(request, i):
    record(request)
"""


@pytest.mark.slow  # two pytest workers start
def test_a_group_runs_on_one_worker_and_a_file_on_one_worker(tmp_path):
    log = tmp_path / "ran.jsonl"
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    for name in "abcd":
        (tmp_path / f"test_{name}.py").write_text(TEST_FILE.format(log=str(log)), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadscope", "-q", "-p",
                          "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    ran = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(ran) == 16
    jobs = {worker for nodeid, worker in ran if nodeid.endswith("::test_job")}
    assert len(jobs) == 1, f"group 'jobs' ran on {sorted(jobs)}"
    by_file = {}
    for nodeid, worker in ran:
        if not nodeid.endswith("::test_job"):
            by_file.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert all(len(workers) == 1 for workers in by_file.values()), by_file
    # Both workers had work. Not "both ran a file": a worker slowed by a loaded machine may still
    # be on the group's four tests while the other has run all four files (seen once in CI).
    assert len({worker for _, worker in ran}) == 2, "one worker ran everything"
