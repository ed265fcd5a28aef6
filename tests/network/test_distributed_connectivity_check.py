"""Tests of scripts/network/distributed_connectivity_check.py, run for real as multi-process jobs
(gloo on CPU; nccl on all GPUs in the gpu-marked test)."""

from __future__ import annotations

import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, clean_env

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "distributed_connectivity_check.py"
INFO_KEYS = ("rank", "local_rank", "world_size", "host", "device", "backend", "torch", "cuda",
             "nccl")
OK_LINE = re.compile(r"^OK: (\d+) ranks on (\d+) hosts$", re.MULTILINE)


def parse_rank_lines(stdout: str) -> dict[int, dict[str, str]]:
    """The per-rank ``key=value`` lines, by rank."""
    lines = {}
    for line in stdout.splitlines():
        if line.startswith("rank="):
            fields = dict(item.split("=", 1) for item in shlex.split(line))
            lines[int(fields["rank"])] = fields
    return lines


@pytest.fixture(scope="module")
def gloo_run(launch, tmp_path_factory):
    json_path = tmp_path_factory.mktemp("connectivity") / "summary.json"
    res = launch.torchrun(SCRIPT, ["--backend", "gloo", "--timeout-s", "30", "--size", "64K",
                                   "--json", str(json_path)])
    return res, json_path


def test_help_lists_options_without_gpu(launch):
    res = launch.python(SCRIPT, ["--help"], env={"CUDA_VISIBLE_DEVICES": ""}, timeout=30)
    assert res.returncode == 0, res.stderr
    for option in ("--backend", "--timeout-s", "--size", "--json"):
        assert option in res.stdout
    assert "CONNECTIVITY_CHECK_CORRUPT_RANK" in res.stdout


def test_two_process_run_says_ok(gloo_run):
    res, _ = gloo_run
    assert res.returncode == 0, res.output
    ok = OK_LINE.search(res.stdout)
    assert ok, res.stdout
    assert (int(ok[1]), int(ok[2])) == (2, 1)  # 2 ranks, both on this host


def test_every_rank_prints_its_line(gloo_run):
    res, _ = gloo_run
    lines = parse_rank_lines(res.stdout)
    assert sorted(lines) == [0, 1]
    for rank, fields in lines.items():
        assert all(k in fields for k in INFO_KEYS), fields
        assert fields["local_rank"] == str(rank)
        assert fields["world_size"] == "2"
        assert fields["host"] == socket.gethostname()
        assert fields["device"] == "cpu"
        assert fields["backend"] == "gloo"
        assert fields["torch"] == torch.__version__


def test_json_summary(gloo_run):
    res, json_path = gloo_run
    assert res.returncode == 0, res.output
    summary = json.loads(json_path.read_text())
    assert summary["check"] == "distributed_connectivity"
    assert summary["ok"] is True
    assert summary["world_size"] == 2
    assert summary["nhosts"] == 1
    assert summary["hosts"] == {socket.gethostname(): [0, 1]}
    assert [r["rank"] for r in summary["ranks"]] == [0, 1]
    assert all(set(INFO_KEYS) <= set(r) for r in summary["ranks"])
    assert summary["errors"] == []


def test_single_process_run(launch):
    res = launch.python(SCRIPT, ["--backend", "gloo", "--size", "4K"], timeout=60)
    assert res.returncode == 0, res.output
    assert OK_LINE.search(res.stdout)[1] == "1"


def test_srun_style_launch(launch):
    results = launch.srun_like(SCRIPT, ["--backend", "gloo", "--timeout-s", "30",
                                        "--size", "4K"])
    for rank, res in enumerate(results):
        assert res.returncode == 0, f"rank {rank}: {res.output}"
        assert sorted(parse_rank_lines(res.stdout)) == [rank]  # each rank prints its own line
    assert OK_LINE.search(results[0].stdout)
    assert not OK_LINE.search(results[1].stdout)  # only rank 0 prints the verdict


BAD_INPUT = [
    Case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: 0 must be > 0"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not a finite number"),
    Case("timeout-inf", ["--timeout-s", "inf"], "--timeout-s: 'inf' is not a finite number"),
    Case("size-too-small", ["--size", "2"], "--size"),
    Case("size-suffix", ["--size", "1X"], "--size"),
    Case("backend-unknown", ["--backend", "mpi"], "--backend"),
    Case("size-beyond-memory", ["--size", "64T", "--backend", "gloo"],
         r"--size: 70368744177664 bytes do not fit in this machine's .* GiB of host memory"),
    *launcher_cases([], ["--timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("network/distributed_connectivity_check.py", case, tmp_path)


def test_ctrl_c_ends_with_status_130(launch):
    """Ctrl-C while a rank waits (here: the self-test stall) ends it with 130 and one line
    saying where it was, even when started as a background job (SIGINT ignored)."""
    proc = subprocess.Popen([sys.executable, str(launch.scripts / SCRIPT), "--backend", "gloo"],
                            env=clean_env({"CONNECTIVITY_CHECK_STALL_RANK": "0"}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout.readline().startswith("rank=0 "), "no rank line"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines() == [f"{SCRIPT}: error: rank 0 on {socket.gethostname()}: "
                                        "interrupted during starting"], err


def test_srun_without_master_addr_fails_clearly(launch):
    res = launch.python(SCRIPT, [], env={"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, timeout=30)
    assert res.returncode != 0
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and "MASTER_ADDR" in errors[0], res.stderr


def test_corrupted_result_fails_naming_rank_and_host(launch):
    res = launch.torchrun(SCRIPT, ["--backend", "gloo", "--timeout-s", "30", "--size", "4K"],
                          env={"CONNECTIVITY_CHECK_CORRUPT_RANK": "1"})
    assert res.returncode != 0
    assert not OK_LINE.search(res.stdout)
    host = re.escape(socket.gethostname())
    assert re.search(rf"rank 1 on {host}: wrong all-reduce result", res.stderr), res.stderr
    assert re.search(rf"FAILED: 1 of 2 ranks .*rank 1 on {host}", res.stderr), res.stderr


def test_dead_rank_fails_instead_of_hanging(launch):
    # launch.torchrun fails the test if the job is still running after `timeout` seconds.
    res = launch.torchrun(SCRIPT, ["--backend", "gloo", "--timeout-s", "5"],
                          env={"CONNECTIVITY_CHECK_EXIT_RANK": "1"}, timeout=60)
    assert res.returncode != 0
    assert not OK_LINE.search(res.stdout)


def test_missing_rank_times_out_with_message(launch):
    # Rank 1 never joins: rank 0 must give up after --timeout-s and say where it was waiting.
    res = launch.torchrun(SCRIPT, ["--backend", "gloo", "--timeout-s", "3"],
                          env={"CONNECTIVITY_CHECK_STALL_RANK": "1"}, timeout=60)
    assert res.returncode != 0
    assert not OK_LINE.search(res.stdout)
    host = re.escape(socket.gethostname())
    assert re.search(rf"rank 0 on {host}: waiting for peers in init_process_group .*failed",
                     res.stderr), res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nccl_run_on_all_gpus(launch, tmp_path):
    n = torch.cuda.device_count()
    json_path = tmp_path / "nccl.json"
    res = launch.torchrun(SCRIPT, ["--backend", "nccl", "--timeout-s", "60",
                                   "--json", str(json_path)], nproc=n, timeout=300)
    assert res.returncode == 0, res.output
    assert OK_LINE.search(res.stdout)[1] == str(n)
    lines = parse_rank_lines(res.stdout)
    assert sorted(lines) == list(range(n))
    assert all(lines[r]["device"].startswith(f"cuda:{r}") for r in lines)
    summary = json.loads(json_path.read_text())
    assert summary["ok"] is True and summary["backend"] == "nccl"
