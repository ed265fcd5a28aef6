"""Tests of scripts/testing/dist_testing.py, the test helpers a reader copies into a project: each
helper imported and used as a reader's test would use it, for real (a process tree killed and
checked by id, a port bound, the tolerance table against torch.testing's own defaults, a 2-rank
gloo job under torchrun), and the command line's careless inputs."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import RANKS, REPO, clean_env, import_script

SCRIPT = REPO / "scripts" / "testing" / "dist_testing.py"


@pytest.fixture(scope="module")
def dt():
    return import_script(SCRIPT)


# A parent that starts two sleeping children, one of them in a session of its own (as torchrun
# starts its ranks), writes the three ids to a file, then sleeps too.
TREE = """import subprocess, sys, time
sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
kids = [subprocess.Popen(sleep, start_new_session=True), subprocess.Popen(sleep)]
with open(sys.argv[1] + ".part", "w") as f:
    f.write(" ".join(str(p) for p in [__import__("os").getpid(), *(k.pid for k in kids)]))
__import__("os").replace(sys.argv[1] + ".part", sys.argv[1])
time.sleep(300)
"""


def test_timeout_kills_the_whole_tree_and_nothing_else(dt, tmp_path):
    """Past its deadline the job, its child and its child in another session are all gone; a
    process the test started beside it, outside the tree, is untouched."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    try:
        pids_file = tmp_path / "pids"
        res = dt.run_command([sys.executable, "-c", TREE, str(pids_file)], timeout_s=1.5)
        assert res.timed_out and res.returncode is None, res.tail()
        assert "killed after" in res.tail()
        pids = [int(p) for p in pids_file.read_text().split()]
        assert len(pids) == 3
        survivors = [p for p in pids if dt.alive(p)]
        assert not survivors, f"still running after the timeout: {survivors}"
        assert bystander.poll() is None and dt.alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


def test_kill_tree_without_psutil_reads_proc(dt, monkeypatch, tmp_path):
    """The fallback for a machine without psutil finds the same children."""
    import psutil
    pids_file = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", TREE, str(pids_file)], start_new_session=True)
    try:
        end = time.monotonic() + 20
        while not pids_file.exists() and time.monotonic() < end:
            time.sleep(0.01)
        pids = [int(p) for p in pids_file.read_text().split()]
        assert sorted(dt.children(proc.pid)) == sorted(c.pid for c in psutil.Process(proc.pid).children())
        monkeypatch.setitem(sys.modules, "psutil", None)        # import psutil now fails
        assert sorted(dt.children(proc.pid)) == sorted(pids[1:])
        assert sorted(dt.kill_tree(proc.pid)) == sorted(pids)
        proc.wait(timeout=10)
        assert not [p for p in pids if dt.alive(p)]
    finally:
        proc.kill()
        proc.wait()


def test_free_port_is_bindable_and_below_the_ephemeral_range(dt):
    import socket
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    for _ in range(3):
        port = dt.free_port()
        assert 10000 <= port < max(low, 10001)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
            s.listen()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_tolerances_are_torch_testing_defaults(dt, dtype):
    from torch.testing._comparison import default_tolerances
    assert dt.tolerances(dtype) == default_tolerances(dtype)


def test_assert_close_for_uses_the_dtype_the_computation_ran_in(dt):
    """A float32 copy of a bfloat16 result is off by about one bfloat16 rounding: within bfloat16's
    tolerance, far outside float32's (torch's default for the float32 tensors compared)."""
    torch.manual_seed(0)
    exact = torch.randn(256)
    rounded = exact.to(torch.bfloat16).float()
    dt.assert_close_for(rounded, exact, torch.bfloat16)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(rounded, exact)
    with pytest.raises(AssertionError):
        dt.assert_close_for(rounded, exact)              # actual.dtype: float32
    assert dt.tolerances(torch.int64) == (0.0, 0.0)
    with pytest.raises(ValueError, match="no default tolerance for float8_e4m3fn"):
        dt.tolerances(torch.float8_e4m3fn)


def _a_test():
    def test_x(tmp_path):
        return tmp_path
    return test_x


def test_requires_gpus_skips_with_a_reason_or_fails_on_a_gpu_runner(dt, monkeypatch):
    monkeypatch.setattr(dt, "gpu_count", lambda: 1)
    monkeypatch.delenv(dt.REQUIRE_GPUS_ENV, raising=False)
    skipped = dt.requires_gpus(2)(_a_test())
    marks = {m.name: m for m in skipped.pytestmark}
    assert set(marks) == {"gpu", "skip"} and marks["skip"].kwargs["reason"] == "needs 2 CUDA GPUs, 1 visible"
    assert [m.name for m in dt.requires_gpus(1)(_a_test()).pytestmark] == ["gpu"]
    monkeypatch.setenv(dt.REQUIRE_GPUS_ENV, "1")
    failing = dt.requires_gpus(2)(_a_test())
    assert [m.name for m in failing.pytestmark] == ["gpu"]
    with pytest.raises(pytest.fail.Exception, match="needs 2 CUDA GPUs, 1 visible, and DIST_TESTING_REQUIRE_GPUS"):
        failing(tmp_path=None)


ALL_REDUCE = """import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
line = f"rank {dist.get_rank()} of {dist.get_world_size()}: {t.item()} RANK_LEAKED={os.environ.get('LEAK')}\\n"
os.write(1, line.encode())  # one write: unbuffered print() writes the text and the newline apart, and ranks interleave
dist.destroy_process_group()
"""


@RANKS
def test_two_rank_gloo_job_through_run_torchrun(dt, tmp_path, monkeypatch):
    """torchrun --standalone picks its own port; the job sees no launcher variable of ours."""
    (tmp_path / "job.py").write_text(ALL_REDUCE)
    monkeypatch.setenv("MASTER_PORT", "1")      # would break the rendezvous if it leaked
    res = dt.run_torchrun(tmp_path / "job.py", nproc=2, timeout_s=90, env={"LEAK": "no"}, cwd=str(tmp_path))
    assert res.ok, res.tail()
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("rank "))
    assert lines == ["rank 0 of 2: 3.0 RANK_LEAKED=no", "rank 1 of 2: 3.0 RANK_LEAKED=no"], res.tail()


def test_help_and_import_need_no_torch():
    probe = ("import runpy, sys\nsys.argv = [sys.argv[1], '--help']\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
             "print('EXIT', code, 'TORCH', 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", probe, str(SCRIPT)], env=clean_env({"CUDA_VISIBLE_DEVICES": ""}),
                         capture_output=True, text=True, timeout=60)
    assert "usage: dist_testing.py" in res.stdout and res.stdout.strip().endswith("EXIT 0 TORCH False"), res.stderr


BAD_INPUT = [
    Case("nothing-to-do", [], "give --check, or a script to run"),
    Case("check-and-script", ["--check", "train.py"], "give --check, or a script to run"),
    Case("script-missing", ["train.py"], r"script train\.py: not a file"),
    Case("script-is-folder", ["{tmp}"], r"script .*: not a file"),
    Case("timeout-nan", ["--timeout-s", "nan", "x.py"], "--timeout-s: 'nan' is not a finite number"),
    Case("timeout-zero", ["--timeout-s", "0", "x.py"], "--timeout-s: 0 must be > 0"),
    Case("nproc-zero", ["--nproc", "0", "x.py"], "--nproc: 0 must be >= 1"),
    Case("script-empty", [""], "script: must not be empty"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("testing/dist_testing.py", case, tmp_path)
