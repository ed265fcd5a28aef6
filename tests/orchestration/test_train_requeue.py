"""scripts/orchestration/train_requeue.py on its own (no SLURM): arguments, checkpoints on
signals and periodically, and bit-identical resumption. The SLURM side (requeue, node failure,
chains) is in test_slurm_long_trainings.py."""

from __future__ import annotations

import argparse
import io
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import clean_env

# One process a test, so not tests.launchers.RANKS; but each trains and is signalled for real.
pytestmark = pytest.mark.slow

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


def test_help_lists_the_options(launch):
    res = launch.python(SCRIPT, ["--help"])
    assert res.returncode == 0
    for option in ("--ckpt-dir", "--steps", "--save-every", "--run-steps", "--lr", "--no-requeue",
                   "--json", "--debug", "--save-switch", "--kill-switch", "--switch-every"):
        assert option in res.stdout


def saved(state) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def this_scripts_checkpoint(dim: int) -> bytes:
    model = torch.nn.Linear(dim, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, dim)).sum().backward()
    opt.step()
    return saved({"step": 3, "model": model.state_dict(), "optimizer": opt.state_dict()})


CK = ["--ckpt-dir", "ck", "--steps", "5"]
BAD_INPUT = [
    Case("lr-negative", [*CK, "--lr", "-1"], "--lr: -1 must be > 0"),
    Case("lr-nan", [*CK, "--lr", "nan"], "--lr: 'nan' is not a finite number"),
    Case("steps-zero", ["--ckpt-dir", "ck", "--steps", "0"], "--steps: 0 must be >= 1"),
    Case("run-steps-zero", [*CK, "--run-steps", "0"], "--run-steps: 0 must be >= 1"),
    Case("step-time-inf", [*CK, "--step-time", "inf"], "--step-time: 'inf' is not a finite"),
    Case("step-time-huge", [*CK, "--step-time", "1e300"], "--step-time: 1e300 must be <= 3600"),
    Case("steps-huge", ["--ckpt-dir", "ck", "--steps", str(10**20)], "--steps: .* must be <= 1e"),
    Case("seed-negative", [*CK, "--seed", "-1"], "--seed: -1 must be >= 0"),
    Case("batch-too-big", [*CK, "--batch", "1000000", "--dim", "1000000"],
         r"--batch 1000000 x --dim 1000000 = 1,000,000,000,000 floats per batch, more than"),
    Case("ckpt-dir-missing-option", ["--steps", "5"], "required: --ckpt-dir"),
    Case("ckpt-dir-empty", ["--ckpt-dir", ""], "--ckpt-dir: must not be empty"),
    Case("ckpt-dir-is-file", ["--ckpt-dir", "f"], "f is a file, not a folder", files={"f": "x"}),
    Case("ckpt-dir-parent-is-file", ["--ckpt-dir", "f/ck"], "f is a file, not a folder",
         files={"f": "x"}),
    Case("ckpt-dir-unwritable", ["--ckpt-dir", "/proc/ck"], "--ckpt-dir /proc/ck: cannot write"),
    Case("json-is-the-checkpoint", [*CK, "--json", "ck/checkpoint.pt"], "is also an input"),
    Case("env-restart-count-text", CK, "SLURM_RESTART_COUNT='x' is not an integer",
         env={"SLURM_RESTART_COUNT": "x"}),
    Case("env-procid-text", CK, "SLURM_PROCID='abc' is not an integer",
         env={"SLURM_PROCID": "abc"}),
    Case("switch-every-zero", [*CK, "--switch-every", "0"], "--switch-every: 0 must be >= 1"),
    Case("kill-switch-folder-missing", [*CK, "--kill-switch", "nowhere/STOP"],
         r"--kill-switch nowhere/STOP: folder .*nowhere does not exist"),
    Case("save-switch-is-folder", [*CK, "--save-switch", "d"], "--save-switch d: is a folder",
         files={"d/x": "x"}),
    Case("switch-is-the-checkpoint", [*CK, "--save-switch", "ck/checkpoint.pt"],
         "is the checkpoint or the --json file"),
    Case("switches-same-file", [*CK, "--save-switch", "S", "--kill-switch", "./S"],
         r"--save-switch and --kill-switch are the same file"),
    Case("kill-switch-empty", [*CK, "--kill-switch", ""], "--kill-switch: must not be empty"),
    Case("checkpoint-is-folder", CK, "ck/checkpoint.pt is not a file", files={"ck/checkpoint.pt/x": "x"}),
    # A loss that turned inf/nan ends the run instead of saving (and finishing with) nan weights.
    Case("lr-diverges", [*CK, "--steps", "100", "--lr", "10"],
         r"loss is (nan|inf) at step \d+: the training diverged \(--lr 10 too high\?\)", status=1),
    Case("checkpoint-garbage", CK, r"checkpoint ck/checkpoint.pt: truncated or damaged",
         status=1, files={"ck/checkpoint.pt": b"not a checkpoint"}),
    Case("checkpoint-truncated", CK, r"checkpoint ck/checkpoint.pt: truncated or damaged",
         status=1, files={"ck/checkpoint.pt": this_scripts_checkpoint(16)[:200]}),
    Case("checkpoint-foreign", CK, r"expected a dict with step, model and optimizer .*found "
         r"\['weights'\]", status=1,
         files={"ck/checkpoint.pt": saved({"weights": torch.ones(3)})}),
    Case("checkpoint-with-objects", CK, "holds a argparse.Namespace object, which this script will not unpickle",
         status=1, files={"ck/checkpoint.pt": saved({"step": 1, "args": argparse.Namespace(lr=1)})}),
    Case("checkpoint-step-not-int", CK, r"expected a step count .*found float 1\.5", status=1,
         files={"ck/checkpoint.pt": saved({"step": 1.5, "model": {}, "optimizer": {}})}),
    Case("checkpoint-other-dim", [*CK, "--dim", "8"], r"does not fit this model \(written with "
         r"another --dim\?\)", status=1, files={"ck/checkpoint.pt": this_scripts_checkpoint(16)}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("orchestration/train_requeue.py", case, tmp_path)


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


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_stop_signal_saves_and_exits_128_plus_signal(launch, tmp_path, sig, status):
    # SIGTERM is what SLURM sends at the time limit; SIGINT is Ctrl-C: both keep the work done.
    proc = start(launch, ["--ckpt-dir", str(tmp_path), "--steps", "1000", "--step-time", "0.02",
                          "--save-every", "1000"])
    wait_for_line(proc, r"^step 20 ")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    saved_step = int(re.search(rf"{sig.name}: saved step (\d+) to ", out)[1])
    assert saved_step >= 20
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["step"] == saved_step
    assert "Traceback" not in err


SWITCHED = ["--steps", "100", "--step-time", "0.02", "--save-every", "1000", "--switch-every", "5"]


def test_save_switch_saves_once_and_training_goes_on(launch, tmp_path, reference_hash):
    ckpt, switch = tmp_path / "ck", tmp_path / "SAVE"
    proc = start(launch, ["--ckpt-dir", str(ckpt), "--save-switch", str(switch), *SWITCHED])
    wait_for_line(proc, r"^step 20 ")
    assert not (ckpt / "checkpoint.pt").exists()  # no periodic save before step 1000
    switch.touch()  # the operator, from any shell
    lines = wait_for_line(proc, r"save switch ")
    saved_step = int(re.search(r"saved step (\d+) to ", lines[-1])[1])
    assert saved_step % 5 == 0 and 20 <= saved_step < 100
    assert f"renamed the switch to {switch}.done" in lines[-1]
    # The checkpoint holds the step it announced (read before the final save replaces it).
    assert torch.load(ckpt / "checkpoint.pt", weights_only=True)["step"] == saved_step
    assert not switch.exists() and (tmp_path / "SAVE.done").exists()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.count("save switch ") == 0  # fired once: the rest of stdout has no second save
    assert FINISHED.search(out)[2] == reference_hash(100)  # saving did not change the training


def test_kill_switch_stops_at_a_step_boundary_and_the_resumed_run_matches(launch, tmp_path,
                                                                          reference_hash):
    ckpt, switch = tmp_path / "ck", tmp_path / "STOP"
    args = ["--ckpt-dir", str(ckpt), "--kill-switch", str(switch), *SWITCHED]
    proc = start(launch, args)
    wait_for_line(proc, r"^step 20 ")
    switch.touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    stopped = int(re.search(rf"kill switch {switch}: saved step (\d+) to .*stopping without "
                            r"requeue", out)[1])
    assert stopped % 5 == 0 and 20 <= stopped < 100
    assert "finished step" not in out
    assert torch.load(ckpt / "checkpoint.pt", weights_only=True)["step"] == stopped
    assert switch.exists()  # kept: a requeued or chained job must not train on
    res = launch.python(SCRIPT, args)
    assert res.returncode == 0, res.output
    assert "present: not starting" in res.stdout and "resumed" not in res.stdout
    switch.unlink()
    res = launch.python(SCRIPT, args)
    assert res.returncode == 0, res.output
    assert f"resumed from step {stopped}" in res.stdout
    assert FINISHED.search(res.stdout)[2] == reference_hash(100)
