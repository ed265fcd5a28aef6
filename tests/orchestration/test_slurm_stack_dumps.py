"""scripts/debug/stack_dumps.py --slurm-job on the test suite's 2-node cluster
(tests/orchestration/conftest.py): a hung 4-rank job (2 per node) in which ranks 0-2 wait in a
barrier and rank 3, on node2, is held in data loading. The script runs itself on both nodes as one
``srun --overlap`` step, merges the answers and names rank 3 (exit 3). A finished job, a pending
one and an id the cluster never gave each get their one line and exit 1.

The job's barrier is the fixture's standard-library one (``--barrier file``): what is tested here
is the collection across nodes, and 4 ranks importing torch would cost the suite ~8 s; the gloo
barrier is tests/debug/test_stack_dumps.py's.
"""

from __future__ import annotations

import json
import shlex
import sys
import time

from tests.launchers import RANKS, REPO

pytestmark = RANKS  # starts SLURM jobs

SCRIPT = REPO / "scripts" / "debug" / "stack_dumps.py"
FIXTURE = REPO / "tests" / "debug" / "fixtures" / "hung_ranks.py"


def dumps(slurm, *args: str):
    return slurm.run([sys.executable, str(SCRIPT), *args], timeout=120, check=False)


def test_hung_slurm_job_names_the_odd_rank_then_ended_pending_and_unknown_jobs(slurm, tmp_path):
    ready, release, out = tmp_path / "ready", tmp_path / "release", tmp_path / "stacks.json"
    ready.mkdir()
    rank = shlex.join(["python", str(FIXTURE), "--barrier", "file", "--ready-dir", str(ready),
                       "--release", str(release), "--hold-s", "60"])
    job = slurm.sbatch("-N", "2", "--ntasks-per-node=2", f"--output={tmp_path / 'job.out'}", "--wrap",
                       f"srun {rank}")
    end = time.monotonic() + 60
    while len(list(ready.glob("rank*"))) < 4:
        assert time.monotonic() < end, f"ranks not ready: {slurm.job(job)}"
        time.sleep(0.1)
    time.sleep(0.3)
    try:
        res = dumps(slurm, "--slurm-job", str(job), "--json", str(out))
    finally:
        release.touch()
    assert res.returncode == 3, res.stdout + res.stderr
    assert f"4 ranks dumped (2 hosts, job {job}, 2 of 2 nodes): 2 different stacks" in res.stdout, res.stdout
    assert "3 ranks (ranks 0-2, hosts node1, node2):" in res.stdout, res.stdout
    finding = res.stdout.splitlines()[-1]
    assert finding.startswith("stack_dumps.py: finding: rank 3 (host node2, pid "), res.stdout
    assert "is in load_next_batch (hung_ranks.py:" in finding and "other 3 ranks are in file_barrier" in finding
    doc = json.loads(out.read_text())
    assert doc["job"] == str(job) and [g["ranks"] for g in doc["groups"]] == [[0, 1, 2], [3]]
    assert sorted((r["rank"], r["host"], r["local_rank"]) for r in doc["results"]) == [
        (0, "node1", "0"), (1, "node1", "1"), (2, "node2", "0"), (3, "node2", "1")]

    slurm.wait_gone(job)
    ended = dumps(slurm, "--slurm-job", str(job))
    assert ended.returncode == 1 and ended.stderr.strip() == (
        f"stack_dumps.py: error: job {job} is COMPLETED: it is not running, so it has no ranks to dump")

    later = slurm.sbatch("--begin=now+3600", "--wrap", "true")
    slurm.wait_reason(later, {"BeginTime"})
    pending = dumps(slurm, "--slurm-job", str(later))
    assert pending.returncode == 1 and pending.stderr.strip() == (
        f"stack_dumps.py: error: job {later} is PENDING (BeginTime): it has not started, so it has no ranks to dump")

    unknown = dumps(slurm, "--slurm-job", "987654")
    assert unknown.returncode == 1 and unknown.stderr.strip() == (
        "stack_dumps.py: error: --slurm-job 987654: neither squeue nor sacct knows this job: it ended long ago, "
        "or never existed")
