"""Tests of scripts/training/dcp_resume_example.py, run for real: 2 CPU processes under torchrun
(gloo) and single processes.

The core claim is bit-exact resumption: a run that crashes after a checkpoint and is relaunched
with --resume auto must produce the same losses (compared as float.hex strings), the same next
batch on every rank, the same next loss and the same parameter and optimizer bytes (SHA-256) as
a run that never stopped. The --forget runs prove the comparison is sensitive: dropping the
saved RNG states or data position must change the result.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "dcp_resume_example.py"
STEPS, SAVE_AT, CRASH_AT = 20, 15, 18      # 12 steps per epoch with 2 ranks: saved mid-epoch 2


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def same_run(a: dict, b: dict, from_step: int) -> None:
    """Assert ``b`` (resumed) continued ``a`` (uninterrupted) bit for bit after ``from_step``."""
    assert b["last_step"] == a["last_step"] == STEPS
    steps = [str(s) for s in range(from_step + 1, STEPS + 1)]
    assert [b["losses_hex"][s] for s in steps] == [a["losses_hex"][s] for s in steps]
    assert b["next_batch"] == a["next_batch"]
    assert b["next_loss_hex"] == a["next_loss_hex"]
    assert b["params_sha256"] == a["params_sha256"]
    assert b["optim_sha256"] == a["optim_sha256"]
    assert (b["epoch"], b["batches_done"]) == (a["epoch"], a["batches_done"])


@pytest.fixture(scope="module")
def two_rank_runs(launch, tmp_path_factory):
    """An uninterrupted run (async saves + export) and a crashed-then-auto-resumed run."""
    tmp = tmp_path_factory.mktemp("dcp2")
    common = ["--steps", str(STEPS), "--quiet", "--timeout-s", "30"]
    full = launch.torchrun(SCRIPT, [*common, "--save-at", f"5,{SAVE_AT}", "--async-save",
                                    "--ckpt-dir", str(tmp / "full"), "--export",
                                    str(tmp / "full.pt"), "--json", str(tmp / "full.json")])
    assert full.returncode == 0, full.output
    crashed = launch.torchrun(SCRIPT, [*common, "--save-at", f"5,{SAVE_AT}", "--ckpt-dir",
                                       str(tmp / "job"), "--resume", "auto"],
                              env={"DCP_RESUME_EXAMPLE_CRASH_AT": str(CRASH_AT)})
    resumed = launch.torchrun(SCRIPT, [*common, "--save-at", f"5,{SAVE_AT}", "--ckpt-dir",
                                       str(tmp / "job"), "--resume", "auto", "--json",
                                       str(tmp / "resumed.json")])
    assert resumed.returncode == 0, resumed.output
    return {"tmp": tmp, "full": read(tmp / "full.json"), "crashed": crashed,
            "resumed": read(tmp / "resumed.json"), "resumed_out": resumed.output}


def test_crash_then_resume_is_bit_exact(two_rank_runs):
    full, resumed, crashed = (two_rank_runs[k] for k in ("full", "resumed", "crashed"))
    # The crashed attempt failed loudly (non-zero, one-line error from the surviving rank).
    assert crashed.returncode != 0
    assert f"rank 1 exits at step {CRASH_AT}" in crashed.stderr
    assert full["world_size"] == resumed["world_size"] == 2
    assert resumed["resumed_from"].endswith(f"step-{SAVE_AT}")   # the newest complete one
    same_run(full, resumed, SAVE_AT)
    assert len(full["next_batch"]) == 2 and all(len(b) == 4 for b in full["next_batch"])
    # The two ranks read disjoint samples.
    assert not set(full["next_batch"][0]) & set(full["next_batch"][1])


def test_async_save_and_export(two_rank_runs):
    import torch
    tmp = two_rank_runs["tmp"]
    for step in (5, SAVE_AT):
        assert (tmp / "full" / f"step-{step}" / ".metadata").is_file()
    exported = torch.load(tmp / "full.pt", weights_only=False)
    # One file with every key of the checkpoint, including one RNG entry per rank.
    assert {"model", "optim", "sched", "data", "rng_rank0", "rng_rank1", "meta"} <= set(exported)
    assert exported["meta"] == {"world_size": 2, "step": SAVE_AT}
    # Mid-epoch: step 15 is batch 3 of epoch 1 (12 batches per epoch).
    assert exported["data"] == {"epoch": 1, "batches_done": SAVE_AT - 12}
    assert not torch.equal(exported["rng_rank0"]["torch"], exported["rng_rank1"]["torch"])
    assert set(exported["model"]) == {"0.weight", "0.bias", "3.weight", "3.bias"}
    # written through a temporary file and a rename: none left over, permissions as any file's
    assert not list(tmp.glob(".full.pt.*")), "the export left its temporary file"
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp / "full.pt").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.fixture(scope="module")
def one_rank_runs(launch, tmp_path_factory):
    """Single-process runs: uninterrupted, and stopped by a signal (saves, exits 0)."""
    tmp = tmp_path_factory.mktemp("dcp1")
    full = launch.python(SCRIPT, ["--steps", str(STEPS), "--quiet", "--ckpt-dir",
                                  str(tmp / "full"), "--json", str(tmp / "full.json")])
    assert full.returncode == 0, full.output
    stopped = launch.python(SCRIPT, ["--steps", str(STEPS), "--quiet", "--ckpt-dir",
                                     str(tmp / "job"), "--json", str(tmp / "stopped.json")],
                            env={"DCP_RESUME_EXAMPLE_SIGNAL_AT": "7"})
    assert stopped.returncode == 0, stopped.output
    return {"tmp": tmp, "full": read(tmp / "full.json"), "stopped": read(tmp / "stopped.json"),
            "stopped_out": stopped.output}


def test_signal_saves_then_resume_is_exact(launch, one_rank_runs):
    tmp, stopped = one_rank_runs["tmp"], one_rank_runs["stopped"]
    assert "stop requested by a signal: saved step 7" in one_rank_runs["stopped_out"]
    assert stopped["last_step"] == 7 and (tmp / "job" / "step-7" / ".metadata").is_file()
    r = launch.python(SCRIPT, ["--steps", str(STEPS), "--quiet", "--ckpt-dir", str(tmp / "job"),
                               "--resume", "auto", "--json", str(tmp / "resumed.json")])
    assert r.returncode == 0, r.output
    same_run(one_rank_runs["full"], read(tmp / "resumed.json"), 7)


@pytest.mark.parametrize("forget", ["rng", "data"])
def test_forgetting_state_changes_the_run(launch, one_rank_runs, forget):
    tmp, full = one_rank_runs["tmp"], one_rank_runs["full"]
    out = tmp / f"forget-{forget}.json"
    r = launch.python(SCRIPT, ["--steps", str(STEPS), "--quiet", "--resume",
                               str(tmp / "job" / "step-7"), "--forget", forget, "--json",
                               str(out)])
    assert r.returncode == 0, r.output
    res = read(out)
    assert res["params_sha256"] != full["params_sha256"]
    assert res["next_loss_hex"] != full["next_loss_hex"]
    if forget == "rng":
        # Same data position, so the same batches; only the noise and dropout masks differ.
        assert res["next_batch"] == full["next_batch"]
    else:
        assert res["next_batch"] != full["next_batch"]
        assert (res["epoch"], res["batches_done"]) != (full["epoch"], full["batches_done"])


def test_resume_with_other_world_size_fails(launch, one_rank_runs):
    ckpt = one_rank_runs["tmp"] / "job" / "step-7"       # written by 1 rank
    r = launch.torchrun(SCRIPT, ["--steps", str(STEPS), "--resume", str(ckpt), "--timeout-s",
                                 "30"])
    assert r.returncode != 0
    lines = launch.error_lines(r.stderr)
    assert lines and all("written by 1 ranks and this run has 2" in line for line in lines), \
        r.stderr


BAD_INPUT = [
    # Outputs into the checkpoint being resumed, or onto another output (issue 30): refused before
    # anything runs, and the files are untouched (check_refused compares them).
    Case("json-into-the-resumed-checkpoint", ["--steps", "2", "--resume", "ck", "--json", "ck/.metadata"],
         r"--json ck/\.metadata: is inside ck, which this run reads",
         files={"ck/.metadata": b"x", "ck/__0_0.distcp": b"\x00" * 64}),
    Case("export-into-the-resumed-checkpoint", ["--steps", "2", "--resume", "ck", "--export", "ck/__0_0.distcp"],
         r"--export ck/__0_0\.distcp: is inside ck, which this run reads",
         files={"ck/.metadata": b"x", "ck/__0_0.distcp": b"\x00" * 64}),
    Case("json-into-the-auto-resumed-checkpoint", ["--steps", "2", "--resume", "auto", "--ckpt-dir", "cks",
                                                   "--json", "cks/step-1/.metadata"],
         r"--json cks/step-1/\.metadata: is inside cks/step-1, which this run reads",
         files={"cks/step-1/.metadata": b"x", "cks/step-1/__0_0.distcp": b"\x00" * 64}),
    Case("json-is-export", ["--steps", "2", "--json", "r.json", "--export", "./r.json"],
         r"--export \./r\.json: --json writes there too; give each output its own path"),
    Case("save-after-last-step", ["--steps", "10", "--save-at", "12"],
         r"--save-at 12 is after the last step \(--steps 10\)"),
    Case("save-at-zero", ["--save-at", "0"], "steps start at 1"),
    Case("save-at-text", ["--save-at", "x"], "invalid step list 'x'"),
    Case("stop-without-save", ["--stop-after-save"], "--stop-after-save needs --save-at"),
    Case("forget-without-resume", ["--forget", "rng"], "--forget only applies with --resume"),
    Case("resume-missing", ["--resume", "/nonexistent/ckpt"],
         r"--resume /nonexistent/ckpt: expected a complete DCP checkpoint folder .*found nothing"),
    Case("resume-empty-folder", ["--resume", "{tmp}"],
         r"expected a complete DCP checkpoint folder .*found an empty folder"),
    Case("resume-torch-save-file", ["--resume", "model.pt"],
         r"--resume model.pt: expected a complete DCP checkpoint folder .*found a file",
         files={"model.pt": b"PK\x03\x04 not a DCP folder"}),
    Case("resume-interrupted-save", ["--resume", "ck"],
         r"found a folder without \.metadata \(__0_0\.distcp: an interrupted save",
         files={"ck/__0_0.distcp": b"\x00" * 64}),
    Case("resume-damaged-metadata", ["--steps", "2", "--resume", "ck"],
         r"ck/\.metadata: cannot read the checkpoint's metadata \(.*\): it is truncated or damaged", status=1,
         files={"ck/.metadata": b"\x80\x04garbage", "ck/__0_0.distcp": b"\x00" * 64}),
    Case("steps-huge", ["--steps", "1e12"], "--steps: '1e12' is not an integer"),
    Case("steps-too-many", ["--steps", "2000000"], "--steps: 2000000 must be <= 1e\\+06"),
    Case("samples-too-many", ["--samples", "99999999999"], "--samples: 99999999999 must be <="),
    Case("seed-overflow", ["--seed", str(2**64)], "--seed: 18446744073709551616 must be <="),
    Case("timeout-negative", ["--timeout-s", "-5"], "--timeout-s: -5 must be >= 1"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not an integer"),
    Case("timeout-huge", ["--timeout-s", "99999999999"], "--timeout-s: 99999999999 must be <="),
    Case("batch-size-zero", ["--batch-size", "0"], "must be >= 1"),
    Case("samples-too-few", ["--samples", "4", "--batch-size", "8"], "do not fill one global batch"),
    Case("lr-nan", ["--lr", "nan"], "--lr: 'nan' is not a finite number"),
    Case("lr-negative", ["--lr", "-1"], "--lr: -1 must be > 0"),
    Case("ckpt-dir-empty", ["--save-at", "2", "--ckpt-dir", ""], "--ckpt-dir: must not be empty"),
    Case("ckpt-dir-is-file", ["--save-at", "2", "--ckpt-dir", "f"], "f is a file, not a folder",
         files={"f": "x"}),
    Case("ckpt-dir-parent-is-file", ["--save-at", "2", "--ckpt-dir", "f/ck"],
         "f is a file, not a folder", files={"f": "x"}),
    Case("ckpt-step-is-file", ["--steps", "2", "--save-at", "2", "--ckpt-dir", "ck"],
         r"--ckpt-dir ck: ck/step-2 is a file; the checkpoint of step 2 goes there as a folder",
         files={"ck/step-2": "x"}),
    Case("ckpt-dir-unwritable", ["--save-at", "2", "--ckpt-dir", "/proc/ck"],
         "--ckpt-dir /proc/ck: cannot write there"),
    Case("export-folder-missing", ["--export", "no/m.pt"], "--export no/m.pt: .*no does not exist"),
    Case("export-is-folder", ["--export", "{tmp}"], "--export .*: is a folder"),
    Case("export-unwritable", ["--export", "/proc/m.pt"], "--export /proc/m.pt: cannot write in"),
    Case("env-crash-at-text", ["--steps", "2"], "DCP_RESUME_EXAMPLE_CRASH_AT='x' is not an integer",
         env={"DCP_RESUME_EXAMPLE_CRASH_AT": "x"}),
    *launcher_cases(["--steps", "2"], ["--timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("training/dcp_resume_example.py", case, tmp_path)


def test_foreign_and_truncated_checkpoints_are_explained(one_rank_runs, tmp_path):
    """Resuming from another script's checkpoint, or from one with a truncated shard, names the
    checkpoint and says what was expected and what was found, in one line."""
    import torch
    import torch.distributed.checkpoint as dcp
    with pytest.warns(UserWarning):  # no process group: DCP assumes a single process
        dcp.save({"weights": torch.ones(4)}, checkpoint_id=str(tmp_path / "foreign"))
    check_refused("training/dcp_resume_example.py", Case(
        "foreign", ["--steps", "9", "--resume", "foreign"],
        r"foreign: not a checkpoint of dcp_resume_example.py: it has no 'meta.world_size'.*"
        r"another script", status=1), tmp_path)
    shutil.copytree(one_rank_runs["tmp"] / "job" / "step-7", tmp_path / "truncated")
    shard = sorted((tmp_path / "truncated").glob("*.distcp"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    check_refused("training/dcp_resume_example.py", Case(
        "truncated", ["--steps", "9", "--resume", "truncated"],
        r"truncated: .*cannot read .*\(EOFError.*truncated or damaged",
        status=1), tmp_path)


@pytest.mark.gpu
def test_resume_exact_on_gpus(launch, tmp_path):
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA devices")
    args = ["--steps", str(STEPS), "--quiet", "--backend", "nccl"]
    full = launch.torchrun(SCRIPT, [*args, "--json", str(tmp_path / "a.json")])
    stop = launch.torchrun(SCRIPT, [*args, "--save-at", str(SAVE_AT), "--stop-after-save",
                                    "--ckpt-dir", str(tmp_path / "ck")])
    res = launch.torchrun(SCRIPT, [*args, "--resume", str(tmp_path / "ck" / f"step-{SAVE_AT}"),
                                   "--json", str(tmp_path / "b.json")])
    assert full.returncode == stop.returncode == res.returncode == 0, res.output
    same_run(read(tmp_path / "a.json"), read(tmp_path / "b.json"), SAVE_AT)
