"""Tests of scripts/storage/checkpoint_io_bench.py, run for real with torchrun (2 CPU processes,
gloo) and tiny checkpoints, and on a GPU in the gpu-marked test. Bandwidths vary, so the tests
check which methods ran, the byte counts, GBps = bytes / time, the read-back verification, the
clean-up and the refusals."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys

import pytest

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, interrupt_when
from tools.results import problems

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "checkpoint_io_bench.py"
SIZE = 2 * 1024 ** 2


def check(report, world, ops):
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert report["benchmark"] == "checkpoint_io_bench" and report["schema_version"] == 1
    assert report["world_size"] == world
    assert report["verified"] is True and report["cold_read"] is True
    assert [(r["method"], r["op"]) for r in report["results"]] == ops
    for r in report["results"]:
        assert r["bytes"] == SIZE == report["size_bytes"]
        assert len(r["times_s"]) == report["iters"]
        assert r["time_s"] == pytest.approx(statistics.median(r["times_s"]), rel=1e-4)
        assert r["GBps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9, rel=1e-3)
    res = {(r["method"], r["op"]): r for r in report["results"]}
    if ("dcp_async", "save_blocking") in res:
        # training is blocked for part of the asynchronous save, never longer than all of it
        for blocked, total in zip(res["dcp_async", "save_blocking"]["times_s"],
                                  res["dcp_async", "save"]["times_s"], strict=True):
            assert blocked <= total


def test_two_ranks_torch_save_dcp_and_async(launch, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    out = tmp_path / "ck.json"
    res = launch.torchrun(SCRIPT, ["--dir", str(ckpt), "--size", "2M", "--tensor-size", "256K",
                                   "--iters", "2", "--async-save", "--timeout", "60",
                                   "--json", str(out)], nproc=2, timeout=120)
    assert res.returncode == 0, res.output
    check(json.loads(out.read_text()), 2,
          [("torch.save", "save"), ("torch.save", "load"), ("dcp", "save"), ("dcp", "load"),
           ("dcp_async", "save_blocking"), ("dcp_async", "save"), ("dcp_async", "load")])
    assert "verified: every tensor read back equals what was written" in res.stdout
    assert list(ckpt.iterdir()) == [], "checkpoint files left behind"


def test_single_process_keep(launch, tmp_path):
    out = tmp_path / "ck.json"
    res = launch.python(SCRIPT, ["--dir", str(tmp_path), "--size", "2M", "--iters", "1",
                                 "--methods", "dcp", "--dtype", "float32", "--keep",
                                 "--json", str(out)], timeout=60)
    assert res.returncode == 0, res.output
    report = json.loads(out.read_text())
    check(report, 1, [("dcp", "save"), ("dcp", "load")])
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".distcp"]
    assert sum(p.stat().st_size for p in kept) >= SIZE


SMALL = ["--size", "1M", "--timeout", "30"]
BAD_INPUT = [
    Case("dir-unwritable", [*SMALL, "--dir", "/proc"], "--dir /proc: cannot write there"),
    Case("dir-missing", [*SMALL, "--dir", "{tmp}/missing"], "missing does not exist"),
    Case("dir-is-file", [*SMALL, "--dir", "f"], "--dir f: f is a file, not a folder",
         files={"f": "x"}),
    Case("dir-parent-is-file", [*SMALL, "--dir", "f/ck"], "--dir f/ck: f is a file, not a folder",
         files={"f": "x"}),
    # (on CUDA the state is not held in host memory: only the free space is checked)
    Case("size-exceeds-disk", ["--size", "1000T", "--dir", "{tmp}", "--device", "cuda"],
         r"--size 1099511.628 GB x 1 copy does not fit in the .* GB free in --dir"),
    Case("size-exceeds-memory", ["--size", "1000T", "--dir", "{tmp}"],
         r"--size 1099511.628 GB needs about 2199023.256 GB of memory on this node"),
    Case("timeout-inf", ["--size", "1M", "--timeout", "inf"], "--timeout: 'inf' is not a finite"),
    Case("timeout-huge", ["--size", "1M", "--timeout", "1e12"], "--timeout: 1e12 must be <= 604800"),
    Case("dir-empty", [*SMALL, "--dir", ""], "--dir: must not be empty"),
    Case("methods-unknown", [*SMALL, "--methods", "pickle"], "--methods must name"),
    Case("iters-zero", [*SMALL, "--iters", "0"], "--iters: 0 must be >= 1"),
    Case("iters-huge", [*SMALL, "--iters", "1e9"], "--iters: '1e9' is not an integer"),
    Case("timeout-nan", ["--size", "1M", "--timeout", "nan"], "--timeout: 'nan' is not a finite"),
    Case("timeout-negative", ["--size", "1M", "--timeout", "-5"], "--timeout: -5 must be > 0"),
    Case("size-suffix", ["--size", "12X"], "--size"),
    *launcher_cases([*SMALL, "--dir", "{tmp}"], ["--timeout", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("storage/checkpoint_io_bench.py", case, tmp_path)
    assert not list(tmp_path.glob("ckpt_bench.*")), "a refused run left its work folder"


@pytest.mark.gpu
def test_cuda_state(launch, tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    out = tmp_path / "ck.json"
    res = launch.python(SCRIPT, ["--dir", str(tmp_path), "--size", "2M", "--iters", "1",
                                 "--device", "cuda", "--async-save", "--json", str(out)],
                        timeout=120)
    assert res.returncode == 0, res.output
    check(json.loads(out.read_text()), 1,
          [("torch.save", "save"), ("torch.save", "load"), ("dcp", "save"), ("dcp", "load"),
           ("dcp_async", "save_blocking"), ("dcp_async", "save"), ("dcp_async", "load")])


def test_dead_rank_fails_fast_instead_of_hanging(launch, tmp_path):
    # plain processes with srun's variables: no torchrun to kill the survivor, so only the
    # script's own collective timeout (or gloo noticing the closed connection) can end rank 0
    results = launch.srun_like(SCRIPT, ["--dir", str(tmp_path), "--size", "1M", "--timeout", "4"],
                               ntasks=2, env={"CHECKPOINT_IO_BENCH_EXIT_RANK": "1"}, timeout=60)
    assert results[1].returncode == 3
    assert results[0].returncode == 1, results[0].output
    errors = [ln for ln in results[0].stderr.splitlines()
              if ln.startswith("checkpoint_io_bench.py: error: rank 0:")]
    assert len(errors) == 1, results[0].stderr
    assert list(tmp_path.iterdir()) == [], "rank 0 left its run directory behind"


def test_srun_without_master_addr_is_refused(launch, tmp_path):
    res = launch.python(SCRIPT, ["--dir", str(tmp_path), "--size", "1M"],
                        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"},
                        timeout=30)
    assert res.returncode == 2
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and "MASTER_ADDR and MASTER_PORT must be set" in errors[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_keeps_the_methods_finished(tmp_path, sig):
    """Ctrl-C or SIGTERM during the second method: --json still holds the first, marked
    interrupted; no checkpoint file is left in --dir; the status is 128 + the signal."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "ck.json"
    ckpt.mkdir()
    res = interrupt_when(  # after the first method's progress line: the second is running
        REPO / "scripts" / "storage" / SCRIPT,
        ["--dir", str(ckpt), "--size", "1M", "--iters", "200", "--methods", "torch.save,dcp",
         "--warm-read", "--json", str(out)],
        lambda lines: lines[-1].startswith("# finished torch.save"), sig)
    err = res.stderr
    assert res.returncode == 128 + sig, err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert errors == [f"{SCRIPT}: error: rank 0: interrupted by {signal.Signals(sig).name} "
                      f"after 2 results; wrote them to {out}"], err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    assert [(r["method"], r["op"]) for r in report["results"]] == [("torch.save", "save"),
                                                                   ("torch.save", "load")]
    assert list(ckpt.iterdir()) == [], "checkpoint files left behind"


def test_sigterm_inside_a_save_is_an_interruption(tmp_path):
    """DCP catches what a save raises, the KeyboardInterrupt of a signal too, and wraps it in a
    CheckpointException: a SIGTERM that lands inside dcp.save must still end the run as an
    interruption (143), not as a failed checkpoint (1). The signal is sent from inside the save
    (dcp.save wrapped before the script runs), so it lands there every time."""
    script = REPO / "scripts" / "storage" / SCRIPT
    driver = (
        "import os, runpy, signal, sys\n"
        "import torch.distributed.checkpoint as dcp\n"
        "from torch.distributed.checkpoint.api import CheckpointException\n"
        "real = dcp.save\n"
        "def save(*args, **kwargs):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return real(*args, **kwargs)\n"
        "    except BaseException as exc:\n"
        "        raise CheckpointException('save', {0: (exc, None)})\n"
        "dcp.save = save\n"
        f"sys.argv = [{str(script)!r}, *sys.argv[1:]]\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
    (tmp_path / "ckpt").mkdir()
    res = subprocess.run([sys.executable, "-c", driver, "--dir", str(tmp_path / "ckpt"), "--size", "1M",
                          "--iters", "2", "--methods", "dcp"], capture_output=True, text=True,
                         timeout=120, env=clean_env())
    assert res.returncode == 128 + signal.SIGTERM, res.stderr
    assert [ln for ln in res.stderr.splitlines() if ": error: " in ln] == \
        [f"{SCRIPT}: error: rank 0: interrupted by SIGTERM after 0 results"], res.stderr
