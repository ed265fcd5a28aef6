"""Tests of scripts/training/capture_env.py: run as a process inside a throw-away git repository
(commit hash, branch and dirty flag must match what git itself says), imported for the secret
filter, and with bad arguments (one-line errors)."""

from __future__ import annotations

import json
import platform
import subprocess

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import import_script

SCRIPT = "capture_env.py"


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture()
def repo(tmp_path):
    """A git repository with one commit on branch 'main' and a clean tree."""
    from tests.conftest import require_tool
    require_tool("git")
    r = tmp_path / "code"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "train.py").write_text("print('train')\n")
    git(r, "add", "train.py")
    git(r, "commit", "-q", "-m", "first")
    return r


@pytest.fixture(scope="module")
def capture_env(launch):
    return import_script(launch.scripts / SCRIPT)


def run_capture(launch, repo, out, *extra, env=None):
    r = launch.python(SCRIPT, ["--json", str(out), "--repo", str(repo), *extra], env=env)
    assert r.returncode == 0, r.output
    return json.loads(out.read_text())


def test_clean_then_dirty_repo(launch, repo, tmp_path):
    out = tmp_path / "run" / "env.json"
    info = run_capture(launch, repo, out, "--", "torchrun", "--nproc-per-node", "8", "train.py",
                       "--lr", "3e-4")
    assert info["git"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert info["git"]["branch"] == "main"
    assert info["git"]["dirty"] is False and info["git"]["dirty_files"] == []
    # The command after -- is recorded verbatim, argv and joined line.
    assert info["command"]["argv"] == ["torchrun", "--nproc-per-node", "8", "train.py",
                                       "--lr", "3e-4"]
    assert info["command"]["line"] == "torchrun --nproc-per-node 8 train.py --lr 3e-4"
    assert info["versions"]["python"] == platform.python_version()
    import torch
    assert info["versions"]["torch"] == torch.__version__
    assert info["hardware"]["cpu_count"] >= 1 and info["hardware"]["memory_bytes"] > 0

    # A modified tracked file and a new untracked file both make the tree dirty.
    (repo / "train.py").write_text("print('changed')\n")
    (repo / "notes.txt").write_text("x\n")
    info = run_capture(launch, repo, out)
    assert info["git"]["dirty"] is True
    assert sorted(info["git"]["dirty_files"]) == ["notes.txt", "train.py"]
    assert info["git"]["commit"] == git(repo, "rev-parse", "HEAD")

    # After a commit on a detached HEAD: new hash, no branch, clean again.
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")
    git(repo, "checkout", "-q", "--detach")
    info = run_capture(launch, repo, out)
    assert info["git"]["commit"] == git(repo, "rev-parse", "HEAD")
    assert info["git"]["branch"] is None and info["git"]["dirty"] is False


def test_outside_git_and_env_filter(launch, tmp_path):
    out = tmp_path / "env.json"
    secret = "s3cr3t-value-123"
    env = {"NCCL_DEBUG": "INFO", "SLURM_JOB_ID": "42", "HF_TOKEN": secret,
           "WANDB_API_KEY": secret, "NCCL_SOCKET_IFNAME": "eth0",
           "HF_ENDPOINT": f"https://user:{secret}@hub.example.com/x",
           "UNRELATED_VAR": "not recorded"}
    plain = tmp_path / "plain"
    plain.mkdir()
    info = run_capture(launch, plain, out, env=env)
    assert info["git"]["commit"] is None and "not a git repository" in info["git"]["git_error"]
    assert info["env"]["NCCL_DEBUG"] == "INFO" and info["env"]["SLURM_JOB_ID"] == "42"
    assert info["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert info["env"]["HF_TOKEN"] == "<redacted>" == info["env"]["WANDB_API_KEY"]
    assert info["env"]["HF_ENDPOINT"] == "https://<redacted>@hub.example.com/x"
    assert "UNRELATED_VAR" not in info["env"]
    assert secret not in out.read_text()


def test_importable_api(capture_env, repo, tmp_path):
    info = capture_env.write(tmp_path / "a" / "b.json", ["train.py", "--x"], repo,
                             packages=["pytest", "surely-not-installed-pkg"])
    assert json.loads((tmp_path / "a" / "b.json").read_text()) == info
    assert info["command"]["argv"] == ["train.py", "--x"]
    assert info["versions"]["packages"]["pytest"] == pytest.__version__
    assert info["versions"]["packages"]["surely-not-installed-pkg"] is None
    assert capture_env.redact("MY_PASSWORD", "x") == "<redacted>"
    assert capture_env.redact("NCCL_IB_HCA", "mlx5") == "mlx5"


BAD_INPUT = [
    Case("repo-missing", ["--json", "e.json", "--repo", "/nonexistent/dir"],
         "--repo /nonexistent/dir: not a directory"),
    Case("repo-empty", ["--json", "e.json", "--repo", ""], "--repo: must not be empty"),
    Case("packages-without-value", ["--json", "e.json", "--packages"],
         "--packages: expected one argument"),
    Case("json-missing", [], "the following arguments are required: --json"),
    Case("json-parent-is-file", ["--json", "f/e.json"], "f is a file, not a folder",
         files={"f": "x"}),
    Case("json-unwritable", ["--json", "/proc/e.json"], "--json /proc: cannot write there"),
    Case("repo-is-a-file", ["--json", "e.json", "--repo", "f"], "--repo f: not a directory",
         files={"f": "x"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("training/capture_env.py", case, tmp_path)



@pytest.mark.gpu
def test_gpus_recorded(capture_env):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    info = capture_env.capture(["x"])
    assert len(info["hardware"]["gpus"]) == torch.cuda.device_count()
    assert info["versions"]["cuda"] == torch.version.cuda
    assert info["versions"]["nccl"]
