"""scripts/orchestration/train_requeue.py on its own (no SLURM): arguments, checkpoints on
signals and periodically, and bit-identical resumption. The SLURM side (requeue, node failure,
chains) is in test_slurm_long_trainings.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.launchers import clean_env

SCRIPT = "train_requeue.py"
FINISHED = re.compile(r"finished step (\d+) loss \S+ weights_sha256 ([0-9a-f]{64})")


def start(launch, args):
    return subprocess.Popen([sys.executable, str(launch.scripts / SCRIPT), *args],
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def wait_for_line(proc, pattern, timeout=60):
    """Read proc's stdout until a line matches ``pattern``; return the lines read."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    proc.kill()
    pytest.fail(f"no line matching {pattern!r}: {''.join(lines)}")


def test_help_and_bad_arguments(launch, tmp_path):
    res = launch.python(SCRIPT, ["--help"])
    assert res.returncode == 0
    for option in ("--ckpt-dir", "--steps", "--save-every", "--run-steps", "--lr", "--no-requeue",
                   "--json"):
        assert option in res.stdout
    for bad, message in ((["--lr", "-1"], "--lr must be > 0"),
                         (["--steps", "0"], "--steps must be >= 1"),
                         (["--run-steps", "0"], "--run-steps must be >= 1")):
        res = launch.python(SCRIPT, ["--ckpt-dir", str(tmp_path), *bad])
        assert res.returncode == 2
        assert launch.error_lines(res.stderr) == [f"{SCRIPT}: error: {message} (got "
                                                  f"{bad[1]})"]


def test_help_does_not_import_torch(launch):
    code = ("import runpy, sys\n"
            f"sys.argv = [{str(launch.scripts / SCRIPT)!r}, '--help']\n"
            "try:\n"
            "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env=clean_env())
    assert "TORCH_NOT_IMPORTED" in res.stdout, res.stdout + res.stderr


def test_unreadable_checkpoint_is_a_one_line_error(launch, tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    res = launch.python(SCRIPT, ["--ckpt-dir", str(tmp_path), "--steps", "5"])
    assert res.returncode == 1
    (line,) = launch.error_lines(res.stderr)
    assert line.startswith(f"{SCRIPT}: error: cannot load checkpoint {tmp_path}/checkpoint.pt")


def test_sigusr1_and_sigkill_then_resume_match_an_uninterrupted_run(launch, tmp_path,
                                                                    reference_hash):
    expected = reference_hash(100)

    ckpt = tmp_path / "interrupted"
    common = ["--ckpt-dir", str(ckpt), "--steps", "100", "--save-every", "10",
              "--step-time", "0.02"]
    # SIGUSR1 outside SLURM: save after the current step and exit 0, no requeue.
    proc = start(launch, common)
    wait_for_line(proc, r"^step 20 ")
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    saved = int(re.search(r"SIGUSR1: saved step (\d+) .*; exiting", out)[1])
    assert saved >= 20
    # SIGKILL (a node that dies): nothing is saved, the last periodic checkpoint remains.
    proc = start(launch, common)
    lines = wait_for_line(proc, r"^step 60 ")
    assert f"resumed from step {saved}" in "".join(lines)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    res = launch.python(SCRIPT, common)
    assert res.returncode == 0, res.output
    resumed = int(re.search(r"resumed from step (\d+)", res.stdout)[1])
    assert resumed >= 60 and resumed % 10 == 0
    assert FINISHED.search(res.stdout)[2] == expected


def test_sigterm_saves_and_exits_143(launch, tmp_path):
    proc = start(launch, ["--ckpt-dir", str(tmp_path), "--steps", "1000", "--step-time", "0.02",
                          "--save-every", "1000"])
    wait_for_line(proc, r"^step 20 ")
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert re.search(r"SIGTERM: saved step \d+ to ", out)
    assert (tmp_path / "checkpoint.pt").exists()
