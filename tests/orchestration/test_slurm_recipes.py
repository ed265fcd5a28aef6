"""The recipes of book/<lang>/orchestration/slurm-recipes.md, run on a 2-node localhost cluster
of their own (tests/orchestration/conftest.py's ``running_cluster``) that differs from the shared
one in two settings: ``TaskPlugin=task/affinity`` (so --cpu-bind binds, which task/none ignores)
and ``PriorityType=priority/multifactor`` (so sprio has factors to show). Starting it costs about
2 s; the shared cluster keeps the settings the other tests were written for.

Each test checks the shape of what the page's transcript shows (nodes, states, reasons, masks),
never a job id. What the cluster cannot show (GPUs, FairShare from slurmdbd, pdsh,
hyper-threads) is said on the page and not tested here."""

from __future__ import annotations

import re
import time

import pytest
import yaml

from tests.launchers import RANKS, REPO, require_ranks
from tests.orchestration.conftest import running_cluster

pytestmark = RANKS  # starts SLURM jobs

RECIPES = REPO / "scripts" / "orchestration" / "recipes"
SETTINGS = {
    "TaskPlugin": "task/affinity",
    "PriorityType": "priority/multifactor",
    "PriorityWeightAge": "1000",
    "PriorityWeightJobSize": "100",
    "PriorityWeightPartition": "10",
}


@pytest.fixture(scope="module")
def cluster():
    require_ranks("SLURM jobs")
    with running_cluster(SETTINGS) as started:
        yield started


@pytest.fixture
def slurm(cluster):
    """The recipes' cluster, idle at the start of the test and reset after it."""
    cluster.wait_idle()
    yield cluster
    cluster.run(["scontrol", "delete", "reservationname=maint"], check=False)
    cluster.reset()


def wait_step(slurm, job: int, timeout: float = 30) -> None:
    """Poll until the job's first step (JOBID.0) is running."""
    deadline = time.monotonic() + timeout
    while f"{job}.0" not in slurm.run(["squeue", "-h", "-s", "-j", str(job), "-o", "%i"]).stdout:
        if time.monotonic() > deadline:
            pytest.fail(f"step {job}.0 not running after {timeout} s: {slurm.job(job)}")
        time.sleep(0.2)


def test_salloc_no_shell_keeps_an_allocation_to_come_back_to(slurm):
    res = slurm.run(["salloc", "--no-shell", "--nodes=2", "--time=5", "--job-name=dev"])
    assert re.search(r"Granted job allocation \d+", res.stderr), res.stderr
    job = slurm.run(["squeue", "-h", "--me", "--name=dev", "-o", "%i %T %D"]).stdout.split()
    assert job[1:] == ["RUNNING", "2"]  # salloc has returned; the allocation stays
    # Coming back: a step on every node of it.
    res = slurm.run(["srun", f"--jobid={job[0]}", "--nodes=2", "--ntasks-per-node=1",
                     "printenv", "SLURMD_NODENAME"])
    assert sorted(res.stdout.split()) == ["node1", "node2"]
    # Pitfall: a step started from outside sees its own nodes as the job's, not the allocation's.
    res = slurm.run(["srun", f"--jobid={job[0]}", "--ntasks=1",
                     str(RECIPES / "hostfile.sh")])
    assert res.stdout.splitlines() == ["node1 slots=1"]
    slurm.run(["scancel", job[0]])
    slurm.wait_gone(job[0])
    assert slurm.job(job[0])["JobState"] == "CANCELLED"


def test_hostfile_and_a_command_on_every_node_of_a_busy_job(slurm, tmp_path):
    # The batch script writes the hostfile, then a step holds every CPU of both nodes.
    job = slurm.sbatch("--nodes=2", "--ntasks-per-node=2", f"--output={tmp_path}/job.out",
                       "--wrap", f"{RECIPES}/hostfile.sh > {tmp_path}/hostfile; "
                       f"{RECIPES}/hostfile.sh 8 > {tmp_path}/hostfile8; srun sleep 30")
    wait_step(slurm, job)
    assert (tmp_path / "hostfile").read_text().splitlines() == ["node1 slots=2", "node2 slots=2"]
    assert (tmp_path / "hostfile8").read_text().splitlines() == ["node1 slots=8", "node2 slots=8"]
    # --overlap: the new step shares the CPUs the running one holds, instead of waiting for them.
    res = slurm.run(["bash", str(RECIPES / "on-every-node.sh"), str(job), "printenv",
                     "SLURMD_NODENAME"])
    assert sorted(res.stdout.splitlines()) == ["node1: node1", "node2: node2"]
    failing = slurm.run(["bash", str(RECIPES / "on-every-node.sh"), str(job), "false"],
                        check=False)
    assert failing.returncode != 0  # the command's failure is the script's
    slurm.run(["scancel", str(job)])
    slurm.wait_gone(job)
    gone = slurm.run(["bash", str(RECIPES / "on-every-node.sh"), str(job), "true"], check=False)
    assert gone.returncode == 1
    assert gone.stderr.strip() == (f"on-every-node.sh: error: job {job} is not running "
                                   "(squeue says: not in the queue)")


def test_nodelist_and_exclude(slurm):
    def nodes(*args: str) -> list[str]:
        return sorted(slurm.run(["srun", *args, "printenv", "SLURMD_NODENAME"]).stdout.split())

    assert nodes("--nodelist=node2") == ["node2"]
    # --nodelist is the nodes the job must have, not all it may have: -N 2 adds another.
    assert nodes("--nodes=2", "--nodelist=node1") == ["node1", "node2"]
    assert nodes("--nodes=1", "--exclude=node1") == ["node2"]
    bad = slurm.run(["srun", "--nodelist=node9", "true"], check=False)
    assert bad.returncode != 0 and "Invalid node name specified" in bad.stderr
    short = slurm.run(["srun", "--nodes=2", "--exclude=node1", "true"], check=False)
    assert short.returncode != 0
    assert "Requested node configuration is not available" in short.stderr


def test_array_with_throttle_one_runs_tasks_in_order_and_past_a_failure(slurm, tmp_path):
    # Task 1 fails; with %1 the tasks still run one at a time, and task 2 starts anyway.
    job = slurm.sbatch("--array=0-3%1", "--job-name=chain", f"--output={tmp_path}/chain-%a.out",
                       "--wrap", 'echo "part $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID"; '
                                 '[ "$SLURM_ARRAY_TASK_ID" != 1 ]')
    slurm.wait_gone(job)
    tasks = sorted(slurm.jobs(job), key=lambda t: int(t["ArrayTaskId"]))
    assert [t["JobState"] for t in tasks] == ["COMPLETED", "FAILED", "COMPLETED", "COMPLETED"]
    assert {t["ArrayTaskThrottle"] for t in tasks} == {"1"}
    for before, after in zip(tasks, tasks[1:], strict=False):
        assert after["StartTime"] >= before["EndTime"]
    assert (tmp_path / "chain-2.out").read_text() == f"part 2 of {job}\n"


def test_heterogeneous_job(slurm, tmp_path):
    out = tmp_path / "het.out"
    job = slurm.sbatch(f"--output={out}", str(RECIPES / "het.sbatch"))
    slurm.wait_gone(job)
    components = slurm.jobs(job)
    assert [(c["HetJobOffset"], c["JobState"]) for c in components] == [("0", "COMPLETED"),
                                                                        ("1", "COMPLETED")]
    assert [(c["NumTasks"], c["CPUs/Task"]) for c in components] == [("1", "2"), ("2", "1")]
    first, second = (c["NodeList"] for c in components)
    # A step started while the previous one is still being torn down waits, and srun says so on
    # stderr (the job's output file): "step creation temporarily disabled, retrying", then
    # "Step created". Those two notices are SLURM's timing, not the recipe's output.
    retry = re.compile(r"srun: (Job \d+ step creation temporarily disabled, retrying .*|Step created for job \d+)")
    lines = [line for line in out.read_text().splitlines() if not retry.fullmatch(line)]
    assert lines[0] == (f"batch script on {first}; components: 2; nodes: {first} and {second}")
    assert sorted(lines[1:4]) == [f"component 0: task 0 on {first}",
                                  f"component 1: task 0 on {second}",
                                  f"component 1: task 1 on {second}"]
    # One step over both components numbers the tasks across them.
    assert lines[4:] == [f"one step: task 0 of 3 on {first}",
                         f"one step: task 1 of 3 on {second}",
                         f"one step: task 2 of 3 on {second}"]


def test_reading_a_failed_job(slurm, tmp_path):
    jobs = {
        "exit3": slurm.sbatch(f"--output={tmp_path}/exit3.out", "--wrap",
                              "echo step 1; exit 3"),
        "hidden": slurm.sbatch(f"--output={tmp_path}/hidden.out", "--wrap",
                               "srun false; echo done"),
        "set-e": slurm.sbatch(f"--output={tmp_path}/set-e.out", "--wrap",
                              "set -e; srun false; echo done"),
        "signal": slurm.sbatch(f"--output={tmp_path}/signal.out", "--wrap",
                               'srun bash -c "kill -9 \\$\\$"'),
    }
    for job in jobs.values():
        slurm.wait_gone(job)
    info = {name: slurm.job(job) for name, job in jobs.items()}
    assert [info["exit3"][k] for k in ("JobState", "Reason", "ExitCode")] == [
        "FAILED", "NonZeroExitCode", "3:0"]
    assert info["exit3"]["StdOut"] == f"{tmp_path}/exit3.out"
    assert (tmp_path / "exit3.out").read_text() == "step 1\n"
    # The batch script's own status decides: a failed step followed by `echo` is a success.
    assert (info["hidden"]["JobState"], info["hidden"]["ExitCode"]) == ("COMPLETED", "0:0")
    assert re.fullmatch(r"srun: error: node\d: task 0: Exited with exit code 1\ndone\n",
                        (tmp_path / "hidden.out").read_text())
    assert (info["set-e"]["JobState"], info["set-e"]["ExitCode"]) == ("FAILED", "1:0")
    # A task killed by a signal: srun exits 128 + 9, which the batch shell returns.
    assert (info["signal"]["JobState"], info["signal"]["ExitCode"]) == ("FAILED", "137:0")
    res = slurm.run(["sacct", "-c", "-o", "JobID,State,ExitCode", "-j",
                     ",".join(map(str, jobs.values()))])
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()[2:]}
    assert rows[str(jobs["exit3"])] == ["FAILED", "3:0"]
    assert rows[str(jobs["hidden"])] == ["COMPLETED", "0:0"]


def test_why_is_my_job_pending_priority_and_sprio(slurm):
    running = slurm.sbatch("--exclusive", "--nodes=2", "--time=1", "--wrap", "sleep 30")
    slurm.wait_state(running, {"RUNNING"})
    big = slurm.sbatch("--nodes=2", "--time=1", "--job-name=big", "--wrap", "true")
    small = slurm.sbatch("--nodes=1", "--time=1", "--job-name=small", "--wrap", "true")
    polite = slurm.sbatch("--nodes=1", "--time=1", "--job-name=polite", "--nice=100",
                          "--wrap", "true")
    # The first in line waits for resources, the ones behind it for their priority.
    slurm.wait_reason(big, {"Resources"})
    slurm.wait_reason(small, {"Priority"})
    slurm.wait_reason(polite, {"Priority"})
    res = slurm.run(["sprio", "-h", "-o", "%i %Y %J %P %N"])
    prio = {int(row[0]): [int(x) for x in row[1:]] for row in map(str.split, res.stdout.splitlines())}
    # Job size counts (multifactor's default favours larger jobs); nice subtracts.
    assert prio[big][0] > prio[small][0] > prio[polite][0]
    assert prio[big][1] > prio[small][1] == prio[polite][1]
    assert prio[polite][3] == 100 and prio[small][3] == 0
    weights = slurm.run(["sprio", "-w"]).stdout.splitlines()[1].split()
    assert weights[0] == "Weights" and weights[-3:] == ["1000", "100", "10"]


def test_reservation_then_undrain(slurm, tmp_path):
    res = slurm.run(["scontrol", "create", "reservation", "reservationname=maint",
                     "starttime=now", "duration=10", "nodes=node2", "users=root",
                     "flags=maint"])
    assert res.stdout.strip() == "Reservation created: maint"
    outside = slurm.sbatch("--nodelist=node2", "--wrap", "true")
    inside = slurm.sbatch("--reservation=maint", "--nodelist=node2",
                          f"--output={tmp_path}/in.out", "--wrap", "echo $SLURMD_NODENAME")
    slurm.wait_gone(inside)
    assert slurm.job(inside)["Reservation"] == "maint"
    assert (tmp_path / "in.out").read_text() == "node2\n"
    info = slurm.wait_reason(outside, {"ReqNodeNotAvail,_May_be_reserved_for_other_job"})
    assert info["JobState"] == "PENDING"
    slurm.run(["scontrol", "delete", "reservationname=maint"])
    slurm.wait_gone(outside)
    assert slurm.job(outside)["JobState"] == "COMPLETED"
    # Undraining: a drained node says why in sinfo -R until it is resumed.
    slurm.run(["scontrol", "update", "nodename=node1", "state=drain", "reason=ECC errors"])
    assert re.search(r"ECC errors\s+root\s+\S+\s+node1", slurm.run(["sinfo", "-R"]).stdout)
    slurm.run(["scontrol", "update", "nodename=node1", "state=resume"])
    state = slurm.node("node1")["State"]  # IDLE, sometimes with +NOT_RESPONDING for a moment
    assert state.split("+")[0] == "IDLE" and "DRAIN" not in state, state
    assert slurm.run(["sinfo", "-R", "-h"]).stdout.strip() == ""


def test_cpu_binding_and_what_a_data_loader_sees(slurm):
    def masks(*args: str) -> list[str]:
        res = slurm.run(["srun", "--nodes=1", *args, "true"])
        return sorted(re.findall(r"task +\d+ +\d+ \[\d+\]: mask (0x[0-9a-f]+) set", res.stderr))

    # One core per task, a different one for each; two CPUs per task when asked.
    assert masks("--ntasks=2", "--cpu-bind=verbose,cores") == ["0x1", "0x2"]
    assert masks("--ntasks=1", "--cpus-per-task=2", "--cpu-bind=verbose") == ["0x3"]
    assert masks("--ntasks=2", "--cpu-bind=verbose,map_cpu:1,0") == ["0x1", "0x2"]
    assert masks("--ntasks=2", "--hint=nomultithread", "--cpu-bind=verbose") == ["0x1", "0x2"]

    def usable(*args: str) -> list[str]:
        res = slurm.run(["srun", "--nodes=1", *args, "python3", "-c",
                         "import os; print(os.cpu_count(), len(os.sched_getaffinity(0)))"])
        return res.stdout.splitlines()

    # What a data loader should size its workers from: the CPUs its process may run on, not
    # os.cpu_count(), which counts the whole machine.
    assert usable("--ntasks=1", "--cpus-per-task=1") == ["2 1"]
    assert usable("--ntasks=1", "--cpus-per-task=2") == ["2 2"]
    assert usable("--ntasks=2") == ["2 1", "2 1"]
    # Unbound, two tasks each believe they have both cores: twice the workers the node has.
    assert usable("--ntasks=2", "--cpu-bind=none") == ["2 2", "2 2"]


def test_job_sets_the_variables_of_the_table(slurm, tmp_path):
    rows = yaml.safe_load((REPO / "data" / "orchestration" / "slurm_env.yml").read_text())["rows"]
    listed = {re.search(r"SLURM\w*", row["name"])[0]: row["scope"] for row in rows}
    untestable = {"gpu": "no GPUs on this cluster",
                  "requeue": "test_slurm_long_trainings checks it after a requeue",
                  "het": "test_heterogeneous_job prints it"}
    assert set(listed.values()) <= {"job", "task", "array", *untestable}
    job = slurm.sbatch("--array=0", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
                       f"--output={tmp_path}/env.out", "--wrap",
                       "env | sed 's/^/batch /'; srun env | sed 's/^/task /'")
    slurm.wait_gone(job)
    seen: dict[str, set[str]] = {"batch": set(), "task": set()}
    for line in (tmp_path / "env.out").read_text().splitlines():
        where, _, assignment = line.partition(" ")
        seen[where].add(assignment.split("=")[0])
    for name, scope in listed.items():
        if scope in untestable:
            continue
        assert name in seen["task"], name
        if scope in ("job", "array"):
            assert name in seen["batch"], name
    # Pitfall: torchrun's workers inherit the agent's SLURM_PROCID (here one agent: 0 for
    # both), so under torchrun the rank is RANK, never SLURM_PROCID.
    res = slurm.run(["srun", "--nodes=1", "--ntasks=1", "--cpus-per-task=2", "torchrun",
                     "--standalone", "--nproc-per-node=2", "--no-python", "bash", "-c",
                     'echo "RANK=$RANK LOCAL_RANK=$LOCAL_RANK SLURM_PROCID=$SLURM_PROCID"'],
                    timeout=60)
    assert sorted(res.stdout.splitlines()) == ["RANK=0 LOCAL_RANK=0 SLURM_PROCID=0",
                                               "RANK=1 LOCAL_RANK=1 SLURM_PROCID=0"]
