"""The orchestration shell scripts refuse careless input in one line with status 2, before they
submit or start anything (no SLURM or torchrun needed: they must stop first)."""

from __future__ import annotations

import subprocess

import pytest

from tests.launchers import RANKS, REPO, clean_env

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

CASES = [
    ("chain.sh", ["0", "job.sbatch"], {}, "N must be a positive integer"),
    ("chain.sh", ["abc", "job.sbatch"], {}, "N must be a positive integer"),
    ("chain.sh", ["100000", "job.sbatch"], {}, "N must be at most 1000"),
    ("chain.sh", ["3"], {}, "no job script given"),
    ("two_nodes_one_host.sh", ["nope.py"], {}, "no such script: nope.py"),
    ("two_nodes_one_host.sh", ["x.py"], {"MASTER_PORT": "abc"}, "MASTER_PORT=abc is not a TCP port"),
    ("two_nodes_one_host.sh", ["x.py"], {"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not"),
    ("two_nodes_one_host.sh", ["x.py"], {"NPROC_PER_NODE": "0"}, "NPROC_PER_NODE=0 is not"),
    ("pipeline.sh", [], {"OUT_DIR": "{tmp}/x.py/sweep"}, "x.py is a file, not a folder"),
    ("recipes/hostfile.sh", [], {"SLURM_JOB_NODELIST": ""}, "SLURM_JOB_NODELIST is not set"),
    ("recipes/hostfile.sh", ["0"], {"SLURM_JOB_NODELIST": "n1"}, "SLOTS must be a positive"),
    ("recipes/hostfile.sh", ["8x"], {"SLURM_JOB_NODELIST": "n1"}, "SLOTS must be a positive"),
    ("recipes/on-every-node.sh", ["abc", "true"], {}, "JOBID must be a job number"),
    ("recipes/on-every-node.sh", ["12"], {}, "no command given"),
]


@pytest.mark.parametrize("script, args, env, message", CASES,
                         ids=[f"{c[0].split('/')[-1]}-{i}" for i, c in enumerate(CASES)])
def test_shell_scripts_refuse_bad_input(tmp_path, script, args, env, message):
    (tmp_path / "x.py").write_text("")
    env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
    res = subprocess.run(["bash", str(REPO / "scripts" / "orchestration" / script), *args],
                         cwd=tmp_path, env=clean_env(env), capture_output=True, text=True,
                         timeout=30)
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    name = script.split("/")[-1]
    assert errors[0].startswith(f"{name}: error: ") and message in errors[0], res.stderr
