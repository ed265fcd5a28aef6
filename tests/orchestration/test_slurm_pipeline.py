"""pipeline.sh and array.sbatch on the test suite's 2-node cluster (tests/orchestration/conftest.py):
a job array with a throttle, then afterok and afterany dependencies, when every task succeeds and
when one fails."""

from __future__ import annotations

import re

from tests.launchers import RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs


def run_pipeline(slurm, tmp_path, *sbatch_args, env=None):
    # A space and glob characters in the folder: every job must still write into it, not into
    # a stray ./sweep (the --wrap commands once split the path at the space).
    out_dir = tmp_path / "my sweep [1] *"
    res = slurm.run(["bash", "scripts/orchestration/pipeline.sh", *sbatch_args],
                    env={"OUT_DIR": str(out_dir), "STEPS": "30", **(env or {})})
    sweep, best, report = (int(x) for x in res.stdout.split())
    assert slurm.job(best)["Dependency"].startswith(f"afterok:{sweep}_*")
    for job in (sweep, best, report):
        slurm.wait_gone(job, timeout=120)
    return out_dir, sweep, best, report


def intervals(out_dir):
    """(start, end) times in seconds of each array task, from the tasks' output files."""
    spans = []
    for path in sorted(out_dir.glob("sweep-*_*.out")):
        text = path.read_text()
        start, end = re.search(r" start ([\d.]+)", text), re.search(r" end ([\d.]+)", text)
        if start and end:
            spans.append((float(start[1]), float(end[1])))
    return spans


def test_sweep_array_then_dependent_jobs(slurm, tmp_path):
    out_dir, sweep, best, report = run_pipeline(slurm, tmp_path, "--array=0-3%2",
                                                env={"LRS": "0.2 0.1 0.05 0.02"})
    tasks = slurm.jobs(sweep)
    assert sorted(t["ArrayTaskId"] for t in tasks) == ["0", "1", "2", "3"]
    assert {t["JobState"] for t in tasks} == {"COMPLETED"}
    results = sorted(line.split() for p in out_dir.glob("task-*.txt")
                     for line in p.read_text().splitlines())
    assert len(results) == 4
    lowest = min(results, key=lambda r: float(r[1]))
    assert (out_dir / "best.txt").read_text().split() == lowest
    assert slurm.job(best)["JobState"] == "COMPLETED"
    assert (out_dir / "report.txt").read_text().startswith("4 results; best (lr loss):")
    # The throttle: never more than 2 tasks running at the same time.
    spans = intervals(out_dir)
    assert len(spans) == 4
    for t, _ in spans:
        assert sum(s <= t < e for s, e in spans) <= 2
    # afterany: the report started only after the others ended.
    assert slurm.job(report)["StartTime"] >= slurm.job(best)["EndTime"]


def test_failed_task_cancels_afterok_job_but_afterany_still_runs(slurm, tmp_path):
    # A negative learning rate makes task 1 exit with an error.
    out_dir, sweep, best, report = run_pipeline(slurm, tmp_path, "--array=0-2",
                                                env={"LRS": "0.1 -1 0.05"})
    states = {t["ArrayTaskId"]: t["JobState"] for t in slurm.jobs(sweep)}
    assert states == {"0": "COMPLETED", "1": "FAILED", "2": "COMPLETED"}
    best_info = slurm.job(best)
    assert best_info["JobState"] == "CANCELLED"  # --kill-on-invalid-dep=yes, not pending forever
    assert not (out_dir / "best.txt").exists()
    assert slurm.job(report)["JobState"] == "COMPLETED"
    assert (out_dir / "report.txt").read_text().startswith("2 results; best (lr loss): none")
