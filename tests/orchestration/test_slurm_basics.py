"""What the SLURM chapter says about submitting and inspecting jobs, checked on the test suite's
2-node cluster (tests/orchestration/conftest.py): the variables a task sees, salloc and srun
--pty sessions, pending reasons, singleton, draining a node, sacct without a database, and the
common mistakes the chapter lists."""

from __future__ import annotations

from tests.conftest import require_tool
from tests.launchers import RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs


def test_task_variables_follow_the_block_layout(slurm):
    res = slurm.run(["srun", "-N", "2", "--ntasks-per-node=2", "bash", "-c",
                     "echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME "
                     "$SLURM_NTASKS $SLURM_NNODES $SLURM_JOB_NODELIST"])
    rows = sorted(line.split() for line in res.stdout.splitlines())
    # Global rank, local rank, node index: ranks 0-1 on the first node, 2-3 on the second.
    assert rows == [["0", "0", "0", "node1", "4", "2", "node[1-2]"],
                    ["1", "1", "0", "node1", "4", "2", "node[1-2]"],
                    ["2", "0", "1", "node2", "4", "2", "node[1-2]"],
                    ["3", "1", "1", "node2", "4", "2", "node[1-2]"]]


def test_batch_script_sees_submit_dir_and_expands_nodelist(slurm, tmp_path):
    out = tmp_path / "env.out"
    job = slurm.sbatch("-N", "2", f"--output={out}", "--cpus-per-task=2", "--wrap",
                       'echo "$SLURM_SUBMIT_DIR $SLURM_CPUS_PER_TASK $SLURMD_NODENAME"; '
                       'scontrol show hostnames "$SLURM_JOB_NODELIST"', cwd=tmp_path)
    slurm.wait_gone(job)
    lines = out.read_text().split("\n")
    # The batch script runs once, on the first node, in the directory sbatch was called from.
    assert lines[0] == f"{tmp_path} 2 node1"
    assert lines[1:3] == ["node1", "node2"]


def test_salloc_then_srun_runs_on_the_allocation(slurm):
    res = slurm.run(["salloc", "-N", "2", "--time=5", "srun", "--ntasks-per-node=1",
                     "printenv", "SLURMD_NODENAME"])
    assert sorted(res.stdout.split()) == ["node1", "node2"]
    assert "Granted job allocation" in res.stderr


def test_srun_pty_gives_an_interactive_shell(slurm):
    require_tool("script")  # util-linux's, from bsdutils
    # `script` supplies the terminal a person would have; srun --pty gives the task a pty.
    res = slurm.run(["script", "-qec", "srun -N1 --pty bash -c 'tty; echo on=$SLURMD_NODENAME'",
                     "/dev/null"])
    assert "/dev/pts/" in res.stdout
    assert "on=node" in res.stdout


def test_pending_reasons(slurm):
    blocker = slurm.sbatch("-N", "2", "--wrap", "sleep 30")
    slurm.wait_state(blocker, {"RUNNING"})
    jobs = {
        "Resources": slurm.sbatch("-N", "1", "--cpus-per-task=2", "--wrap", "true"),
        "BeginTime": slurm.sbatch("--begin=now+3600", "--wrap", "true"),
        "JobHeldUser": slurm.sbatch("--hold", "--wrap", "true"),
        "Dependency": slurm.sbatch(f"--dependency=afterok:{blocker}", "--wrap", "true"),
        "PartitionNodeLimit": slurm.sbatch("-N", "3", "--wrap", "true"),
    }
    for reason, job in jobs.items():
        slurm.wait_reason(job, {reason})
    # squeue shows the same reason in its default NODELIST(REASON) column.
    res = slurm.run(["squeue", "-h", "-j", str(jobs["JobHeldUser"])])
    assert "(JobHeldUser)" in res.stdout


def test_singleton_runs_same_name_jobs_one_at_a_time(slurm, tmp_path):
    first = slurm.sbatch("--job-name=single", "--dependency=singleton", "--wrap", "sleep 2")
    second = slurm.sbatch("--job-name=single", "--dependency=singleton", "--wrap", "sleep 1")
    slurm.wait_state(first, {"RUNNING", "COMPLETED"})
    info = slurm.job(second)
    if info["JobState"] == "PENDING":
        assert info["Reason"] == "Dependency"
    slurm.wait_gone(second)
    a, b = slurm.job(first), slurm.job(second)
    assert a["JobState"] == b["JobState"] == "COMPLETED"
    assert b["StartTime"] >= a["EndTime"]


def test_drained_node_takes_no_new_jobs_until_resumed(slurm):
    slurm.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=bad gpu"])
    assert "bad gpu" in slurm.run(["sinfo", "-R", "-h"]).stdout
    job = slurm.sbatch("-N", "2", "--wrap", "true")
    # scontrol -o writes the reason with underscores for spaces.
    info = slurm.wait_reason(job, {"ReqNodeNotAvail", "Nodes_required_for_job_are_DOWN,_DRAINED_"
                                   "or_reserved_for_jobs_in_higher_priority_partitions"})
    assert "node2" in slurm.run(["sinfo", "-h", "-t", "drain", "-o", "%N"]).stdout, info
    slurm.run(["scontrol", "update", "nodename=node2", "state=resume"])
    slurm.wait_gone(job)
    assert slurm.job(job)["JobState"] == "COMPLETED"


def test_sacct_reads_the_job_completion_log(slurm):
    ok = slurm.sbatch("--wrap", "true")
    bad = slurm.sbatch("--wrap", "exit 3")
    slurm.wait_gone(ok)
    slurm.wait_gone(bad)
    res = slurm.run(["sacct", "-c", "-n", "-X", "-o", "JobID,State,ExitCode", "-j", f"{ok},{bad}"],
                    check=False)
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines() if line.strip()}
    assert rows[str(ok)][0] == "COMPLETED", res.stdout + res.stderr
    assert rows[str(bad)][0] == "FAILED", res.stdout + res.stderr
    assert slurm.job(bad)["ExitCode"] == "3:0"


def test_mistake_missing_output_directory_fails_the_job(slurm, tmp_path):
    job = slurm.sbatch(f"--output={tmp_path}/logs/%j.out", "--wrap", "echo hi")
    slurm.wait_gone(job)
    info = slurm.job(job)
    assert (info["JobState"], info["Reason"]) == ("FAILED", "JobLaunchFailure")
    assert not (tmp_path / "logs").exists()


def test_mistake_more_memory_than_any_node_is_rejected_at_submission(slurm):
    res = slurm.run(["sbatch", "--mem=100G", "--wrap", "true"], check=False)
    assert res.returncode != 0
    assert "Requested node configuration is not available" in res.stderr


def test_mistake_sbatch_directives_after_a_command_or_with_variables(slurm, tmp_path):
    script = tmp_path / "late.sbatch"
    script.write_text("#!/bin/bash\n"
                      "#SBATCH --job-name=$USER\n"      # not expanded: the name is literally $USER
                      "echo started\n"
                      "#SBATCH --time=00:07:00\n")      # after a command: ignored
    job = slurm.sbatch(f"--output={tmp_path}/late.out", str(script))
    slurm.wait_gone(job)
    info = slurm.job(job)
    assert info["JobName"] == "$USER"
    assert info["TimeLimit"] != "00:07:00"


def test_srun_overlap_attaches_to_a_running_job(slurm):
    job = slurm.sbatch("-N", "1", "--wrap", "sleep 30")
    info = slurm.wait_state(job, {"RUNNING"})
    res = slurm.run(["srun", f"--jobid={job}", "--overlap", "bash", "-c",
                     "echo $SLURM_JOB_ID $SLURMD_NODENAME"])
    assert res.stdout.split() == [str(job), info["NodeList"]]
