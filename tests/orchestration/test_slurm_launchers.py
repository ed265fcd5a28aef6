"""The launcher templates, submitted to the test suite's 2-node SLURM cluster (tests/orchestration/
conftest.py): srun + torchrun on two nodes, srun without torchrun, a failing rank, and the
two-torchruns-on-one-host emulation. The payload is the Network chapter's all-reduce benchmark
on CPU (gloo)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.launchers import RANKS, REPO, clean_env, free_port, require_ranks

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

BENCH_ARGS = ["--sizes", "4K", "64K", "--iters", "3", "--warmup", "1", "--backend", "gloo"]


def submit_bench(slurm, template, tmp_path, extra_args=(), env=None, timeout_s=60):
    out = tmp_path / "job.out"
    job = slurm.sbatch(f"--output={out}", f"scripts/orchestration/{template}", *BENCH_ARGS,
                       "--timeout-s", str(timeout_s), *extra_args, env=env)
    return job, out


@pytest.mark.parametrize("template", ["torchrun-multinode.sbatch", "srun-python.sbatch"])
def test_two_node_all_reduce(slurm, tmp_path, template):
    json_path = tmp_path / "ar.json"
    job, out = submit_bench(slurm, template, tmp_path, ["--json", str(json_path)])
    slurm.wait_gone(job, timeout=90)
    info = slurm.job(job)
    log = out.read_text()
    assert info["JobState"] == "COMPLETED", log
    assert info["NodeList"] == "node[1-2]"
    report = json.loads(json_path.read_text())
    assert report["world_size"] == 2
    assert report["backend"] == "gloo"
    assert [r["size_bytes"] for r in report["results"]] == [4096, 65536]
    assert report["verified"] is True
    if template == "torchrun-multinode.sbatch":
        # one torchrun per node, each knowing there are 2 nodes: a real multi-node rendezvous
        assert report["launcher"] == "torchrun"
        assert report["command"].startswith("torchrun --nnodes 2 --nproc-per-node 1 ")
        assert "rendezvous at 127.0.0.1:" in log  # MASTER_ADDR taken from the node's NodeAddr
    else:
        assert report["launcher"] == "env"  # RANK/WORLD_SIZE exported from SLURM_PROCID/NTASKS


@pytest.mark.parametrize("template", ["torchrun-multinode.sbatch", "srun-python.sbatch"])
def test_failing_rank_fails_the_job_instead_of_hanging(slurm, tmp_path, template):
    # Rank 1 exits right after init; rank 0 would wait in its first collective for the whole
    # --timeout-s (300 s). --kill-on-bad-exit must end the job long before that.
    job, out = submit_bench(slurm, template, tmp_path, env={"ALL_REDUCE_BENCH_EXIT_RANK": "1"},
                            timeout_s=300)
    slurm.wait_gone(job, timeout=90)
    info = slurm.job(job)
    assert info["JobState"] == "FAILED", out.read_text()
    assert info["ExitCode"] != "0:0"


def test_two_torchruns_on_one_host(tmp_path):
    require_ranks("two torchruns")
    json_path = tmp_path / "ar.json"
    # torchrun from the same environment as the tests (the script calls it by name).
    env = clean_env({"MASTER_PORT": str(free_port()),
                     "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"})
    proc = subprocess.Popen(
        ["bash", "scripts/orchestration/two_nodes_one_host.sh", "scripts/network/all_reduce_bench.py",
         *BENCH_ARGS, "--timeout-s", "60", "--json", str(json_path)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("two_nodes_one_host.sh hung")
    assert proc.returncode == 0, out
    report = json.loads(json_path.read_text())
    assert report["world_size"] == 2
    assert report["command"].startswith("torchrun --nnodes 2 --nproc-per-node 1 ")
    assert "[node 0] # backend gloo | device cpu | world_size 2" in out  # rank 0 prints
