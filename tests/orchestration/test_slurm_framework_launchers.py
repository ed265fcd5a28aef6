"""The framework launcher templates (book/en/orchestration/launchers.md). Accelerate and
Lightning Fabric train a tiny model across the test suite's two slurmd nodes on CPU (gloo);
DeepSpeed, pyxis and Apptainer need GPUs or container runtimes, so their batch scripts run with
`srun`, `deepspeed` and `apptainer` replaced by stubs that record the command line they get."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

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
