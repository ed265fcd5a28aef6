"""The framework launcher templates (book/en/orchestration/launchers.md). Accelerate and
Lightning Fabric train a tiny model across the test suite's two slurmd nodes on CPU (gloo);
DeepSpeed, pyxis and Apptainer need GPUs or container runtimes, so their batch scripts run with
`srun`, `deepspeed` and `apptainer` replaced by stubs that record the command line they get."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import require_module
from tests.launchers import RANKS, REPO

PAYLOADS = REPO / "tests" / "orchestration" / "payloads"


def train_two_nodes(slurm, tmp_path, template, payload):
    out, results = tmp_path / "job.out", tmp_path / "ranks.jsonl"
    job = slurm.sbatch(f"--output={out}", f"scripts/orchestration/{template}",
                       str(PAYLOADS / payload), str(results))
    slurm.wait_gone(job, timeout=120)
    info = slurm.job(job)
    log = out.read_text()
    assert info["JobState"] == "COMPLETED", log
    assert info["NodeList"] == "node[1-2]"
    ranks = sorted((json.loads(line) for line in results.read_text().splitlines()),
                   key=lambda r: r["rank"])
    assert [(r["rank"], r["world"]) for r in ranks] == [(0, 2), (1, 2)], log
    assert {r["sha"] for r in ranks} == {ranks[0]["sha"]}  # gradients were averaged across nodes
    for r in ranks:
        assert r["last"] < r["first"] / 4  # it trained
    return ranks, log


@RANKS
def test_accelerate_trains_on_two_nodes(slurm, tmp_path):
    require_module("accelerate")
    ranks, log = train_two_nodes(slurm, tmp_path, "accelerate-multinode.sbatch",
                                 "accelerate_train.py")
    assert {r["type"] for r in ranks} == {"DistributedType.MULTI_CPU"}, log
    assert "main process at 127.0.0.1:" in log


@RANKS
def test_lightning_fabric_trains_on_two_nodes(slurm, tmp_path):
    require_module("lightning_fabric")
    ranks, log = train_two_nodes(slurm, tmp_path, "lightning-multinode.sbatch",
                                 "fabric_train.py")
    assert {r["type"] for r in ranks} == {"SLURMEnvironment"}, log  # ranks came from SLURM


def render(tmp_path, template, *args, env=()):
    """Run a template's batch script with srun, scontrol and the launchers replaced by
    payloads/stub.py (a fake job 4242 on nodes gpu-a and gpu-b); the calls they received."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    for name in ("srun", "scontrol", "deepspeed", "python", "apptainer"):
        stub = bin_dir / name
        stub.write_text(f"#!{sys.executable}\n" + (PAYLOADS / "stub.py").read_text())
        stub.chmod(0o755)
    job_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "SLURM_JOB_ID": "4242",
               "SLURM_JOB_NODELIST": "gpu-[a-b]", "SLURM_NNODES": "2", "SLURM_GPUS_ON_NODE": "8",
               "IMAGE": "pytorch.sif", **dict(env)}
    res = subprocess.run(["bash", str(REPO / "scripts" / "orchestration" / template), *args],
                         cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stdout + res.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_deepspeed_template_command_line(tmp_path):
    calls = render(tmp_path, "deepspeed-multinode.sbatch", "train.py", "--deepspeed_config",
                   "ds.json")
    srun, *launchers = calls
    assert srun["prog"] == "srun" and srun["argv"][0] == "--kill-on-bad-exit=1"
    assert [c["prog"] for c in launchers] == ["deepspeed", "deepspeed"]
    for node, call in enumerate(launchers):  # one launcher per node, told its own node rank
        assert call["argv"] == ["--hostfile", "hostfile-4242", "--no_ssh", "--node_rank",
                                str(node), "--master_addr", "10.0.0.1", "--master_port",
                                str(20000 + 4242), "train.py", "--deepspeed_config", "ds.json"]
    assert (tmp_path / "hostfile-4242").read_text() == "gpu-a slots=8\ngpu-b slots=8\n"


def test_pyxis_template_command_line(tmp_path):
    calls = render(tmp_path, "pyxis-multinode.sbatch", "train.py", "--lr", "1e-4",
                   env={"CONTAINER_IMAGE": "nvcr.io#nvidia/pytorch:25.01-py3"})
    srun, *workers = calls
    assert srun["argv"][:5] == [
        "--kill-on-bad-exit=1", "--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
        f"--container-mounts={tmp_path}:/workspace,/data:/data:ro",
        "--container-workdir=/workspace", "--no-container-mount-home"]
    assert [(w["prog"], w["argv"]) for w in workers] == [("python", ["train.py", "--lr", "1e-4"])] * 2
    assert [(w["env"]["RANK"], w["env"]["WORLD_SIZE"]) for w in workers] == [("0", "2"), ("1", "2")]
    assert {w["env"]["MASTER_ADDR"] for w in workers} == {"10.0.0.1"}


def test_apptainer_template_command_line(tmp_path):
    calls = render(tmp_path, "apptainer-multinode.sbatch", "train.py")
    srun, *workers = calls
    assert srun["argv"][:8] == ["--kill-on-bad-exit=1", "apptainer", "exec", "--nv", "--bind",
                                f"{tmp_path}:/workspace,/data:/data:ro"
                                + (",/dev/infiniband" if os.path.isdir("/dev/infiniband") else ""),
                                "--pwd", "/workspace"]
    assert srun["argv"][8] == "pytorch.sif"
    assert [(w["prog"], w["argv"]) for w in workers] == [("python", ["train.py"])] * 2
    assert [w["env"]["RANK"] for w in workers] == ["0", "1"]
