"""Long trainings under SLURM, on the test suite's 2-node cluster (tests/orchestration/conftest.py):
checkpoint on a signal and requeue, surviving a node failure, a chain of jobs, a self-rescheduling
job. The payload is scripts/orchestration/train_requeue.py on CPU. Every resumed training must end
with the same weights hash as an uninterrupted run of the same length."""

from __future__ import annotations

import os
import re
import time
from itertools import pairwise

from tests.launchers import RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

TEMPLATE = "scripts/orchestration/train-requeue.sbatch"
FINISHED = re.compile(r"finished step (\d+) loss \S+ weights_sha256 ([0-9a-f]{64})")


def resumed_steps(log: str) -> list[int]:
    return [int(s) for s in re.findall(r"resumed from step (\d+)", log)]


def test_signal_checkpoints_requeues_and_resumes(slurm, tmp_path, reference_hash):
    out = tmp_path / "train.out"
    job = slurm.sbatch(f"--output={out}", TEMPLATE, "--steps", "100", "--step-time", "0.02",
                       "--save-every", "1000", env={"CKPT_DIR": str(tmp_path / "ckpt")})
    slurm.wait_file_text(out, "step 20 loss")
    # What --signal=B:USR1@T does before the time limit, now: USR1 to the batch shell only.
    slurm.run(["scancel", "--signal=USR1", "--batch", str(job)])
    slurm.wait_gone(job, timeout=90)
    info = slurm.job(job)
    log = out.read_text()
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", log
    assert "batch shell: SIGUSR1 received" in log
    assert f"requeueing job {job}" in log
    assert f"job {job} restart 1 " in log  # the same job id ran the script again
    (resumed,) = resumed_steps(log)
    assert 20 <= resumed < 100  # from the signal's checkpoint, not from scratch (no periodic one)
    assert FINISHED.search(log)[2] == reference_hash(100)


def test_node_failure_requeues_and_resumes_from_last_checkpoint(slurm, tmp_path, reference_hash):
    out = tmp_path / "train.out"
    job = slurm.sbatch(f"--output={out}", TEMPLATE, "--steps", "100", "--step-time", "0.02",
                       "--save-every", "10", env={"CKPT_DIR": str(tmp_path / "ckpt")})
    slurm.wait_file_text(out, "step 40 loss")
    first_node = slurm.job(job)["NodeList"]
    slurm.run(["scontrol", "update", f"nodename={first_node}", "state=down",
               "reason=test: node failure"])
    # Keep it out of service (ReturnToService=2 would take it back as soon as its slurmd
    # registers): the requeued job has to run on the other node.
    slurm.run(["scontrol", "update", f"nodename={first_node}", "state=drain",
               "reason=test: node failure"])
    slurm.wait_gone(job, timeout=90)
    info = slurm.job(job)
    log = out.read_text()
    assert info["JobState"] == "COMPLETED", log
    assert info["Restarts"] == "1", log
    assert info["NodeList"] != first_node  # ran again on the node that is still up
    assert f"Node failure on {first_node}" in log  # srun's message
    # Resumed from step 40 or later: the last periodic checkpoint, or a later one if the step
    # got SIGTERM before it was killed (slurmd is alive here; a dead node sends nothing, see
    # test_train_requeue.py for a SIGKILL).
    (resumed,) = resumed_steps(log)
    assert resumed >= 40
    assert FINISHED.search(log)[2] == reference_hash(100)
    assert "test: node failure" in slurm.node(first_node)["Reason"]


def test_chain_of_jobs_resumes_slice_by_slice(slurm, tmp_path, reference_hash):
    res = slurm.run(["bash", "scripts/orchestration/chain.sh", "3", f"--output={tmp_path}/chain-%j.out",
                     TEMPLATE, "--steps", "100", "--run-steps", "40"],
                    env={"CKPT_DIR": str(tmp_path / "ckpt")})
    jobs = [int(x) for x in res.stdout.split()]
    assert len(jobs) == 3
    assert slurm.job(jobs[1])["Dependency"] == f"afterany:{jobs[0]}(unfulfilled)"
    for job in jobs:
        slurm.wait_gone(job, timeout=90)
    infos = [slurm.job(j) for j in jobs]
    assert [i["JobState"] for i in infos] == ["COMPLETED"] * 3
    for before, after in pairwise(infos):
        assert after["StartTime"] >= before["EndTime"]  # ISO timestamps compare as strings
    logs = [(tmp_path / f"chain-{j}.out").read_text() for j in jobs]
    assert "start at step 0" in logs[0] and "saved step 40" in logs[0]
    assert resumed_steps(logs[1]) == [40] and resumed_steps(logs[2]) == [80]
    assert FINISHED.search(logs[2])[2] == reference_hash(100)


def test_cron_job_reschedules_itself(slurm, tmp_path):
    clean = tmp_path / "clean"
    clean.mkdir()
    old, new = clean / "old.log", clean / "new.log"
    old.write_text("old")
    new.write_text("new")
    ten_days_ago = time.time() - 10 * 86400
    os.utime(old, (ten_days_ago, ten_days_ago))
    env = {"CLEAN_DIR": str(clean), "CRON_INTERVAL": "2",
           "SBATCH_OUTPUT": f"{tmp_path}/cron-%j.out"}  # inherited by the resubmitted jobs
    first = slurm.sbatch("scripts/orchestration/cron.sbatch", env=env)
    slurm.wait_gone(first)
    first_log = (tmp_path / f"cron-{first}.out").read_text()
    assert slurm.job(first)["JobState"] == "COMPLETED", first_log
    assert not old.exists() and new.exists()
    assert str(old) in first_log  # find -print lists what it deleted
    second = int(re.search(r"next run: job (\d+)", first_log)[1])
    info = slurm.job(second)
    assert info["JobName"] == "cron-cleanup"
    # It waits for its start time, then runs and schedules a third.
    second_log = slurm.wait_file_text(tmp_path / f"cron-{second}.out", "next run: job")
    third = int(re.search(r"next run: job (\d+)", second_log)[1])
    third_info = slurm.job(third)
    assert third_info["JobState"] == "PENDING"
    assert third_info["Reason"] in ("BeginTime", "Dependency")
    slurm.run(["scancel", "--name=cron-cleanup"])
    slurm.wait_gone(third)
