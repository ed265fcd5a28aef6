"""Tests of scripts/storage/prune_checkpoints.py on real folders of checkpoints: which ones it keeps,
that a dry run deletes nothing, that it leaves alone a checkpoint being written, never follows a
link out of its folder, finishes a deletion a crash interrupted, and keeps the script contract.

The checkpoints are small DCP-like folders (a shard and a .metadata), aged two hours with
os.utime so that --min-age-s keeps its default, as on a real file system."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script
from tests.storage.conftest import unprivileged

SCRIPT = REPO / "scripts" / "storage" / "prune_checkpoints.py"
SHARD = 4096


def age(path: Path, seconds: float = 7200) -> None:
    """Set the times of ``path`` and everything under it ``seconds`` back, links included."""
    t = time.time() - seconds
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(os.path.join(root, name), (t, t), follow_symlinks=False)
    os.utime(path, (t, t), follow_symlinks=False)


def make(ck: Path, steps, fmt: str = "step-{}", marker: bool = True) -> None:
    for step in steps:
        folder = ck / fmt.format(step)
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"\0" * SHARD)
        if marker:
            (folder / ".metadata").write_bytes(b"m")


def prune(tmp: Path, *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), sys.executable, str(SCRIPT), *args], cwd=tmp, env=clean_env(),
                          capture_output=True, text=True, timeout=30)


def actions(out: str) -> dict[str, str]:
    return {m[2]: m[1] for m in re.finditer(r"^(keep|delete|deleted|leave|failed)\s+(\S+)  ", out, re.M)}


def test_keeps_the_last_n_and_every_kth_step_and_deletes_only_with_delete(tmp_path):
    ck = tmp_path / "ck"
    make(ck, range(100, 1001, 100))
    (ck / "step-1000" / ".metadata").unlink()   # the newest save has not finished
    age(ck)
    args = ["ck", "--keep-last", "2", "--keep-every", "500", "--marker", ".metadata"]
    dry = prune(tmp_path, *args, "--json", "dry.json")
    assert dry.returncode == 0, dry.stderr
    expected = {f"step-{s}": "delete" for s in (100, 200, 300, 400, 600, 700)}
    expected.update({"step-500": "keep", "step-800": "keep", "step-900": "keep", "step-1000": "leave"})
    assert actions(dry.stdout) == expected, dry.stdout
    assert re.search(r"^leave\s+step-1000 .* being written: no \.metadata$", dry.stdout, re.M)
    assert f"would delete 6 checkpoints, {6 * (SHARD + 1) / 1000:.1f} kB" in dry.stdout
    assert sorted(p.name for p in ck.iterdir()) == sorted(expected)   # a dry run deletes nothing
    report = json.loads((tmp_path / "dry.json").read_text())
    assert report["dry_run"] and report["bytes_to_free"] == 6 * (SHARD + 1)
    done = prune(tmp_path, *args, "--delete", "--json", "done.json")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in ck.iterdir()) == ["step-1000", "step-500", "step-800", "step-900"]
    assert json.loads((tmp_path / "done.json").read_text())["bytes_freed"] == 6 * (SHARD + 1)
    # the last N are the last N complete ones: once step-1000 is complete, step-800 goes
    (ck / "step-1000" / ".metadata").write_bytes(b"m")
    age(ck)
    again = prune(tmp_path, *args, "--delete")
    assert sorted(p.name for p in ck.iterdir()) == ["step-1000", "step-500", "step-900"], again.stdout


def test_a_checkpoint_being_written_is_left_alone(tmp_path):
    ck = tmp_path / "ck"
    make(ck, [100, 200, 300, 400, 500, 600])
    (ck / "step-200" / ".metadata.tmp").write_bytes(b"")     # DCP's metadata before its rename
    (ck / "step-300" / "__1_0.distcp.partial").write_bytes(b"")
    (ck / "tmp-checkpoint-350").mkdir()                     # a temporary name for the whole folder
    age(ck)
    (ck / "step-400" / "__0_0.distcp").write_bytes(b"1")     # written to a moment ago
    done = prune(tmp_path, "ck", "--keep-last", "1", "--delete")
    assert done.returncode == 0, done.stderr
    got = actions(done.stdout)
    assert got == {"step-100": "deleted", "step-200": "leave", "step-300": "leave", "tmp-checkpoint-350": "leave",
                   "step-400": "leave", "step-500": "deleted", "step-600": "keep"}, done.stdout
    assert "being written: step-200/.metadata.tmp" in done.stdout
    assert re.search(r"step-400 .* changed \d s ago \(--min-age-s 600\)", done.stdout)


def test_links_are_removed_as_links_and_never_followed(tmp_path):
    """A link inside a checkpoint to a folder outside, a link loop, and a checkpoint that is itself
    a link to a folder outside: the deletion removes the links; what they point at is intact."""
    outside = tmp_path / "outside"
    (outside / "tokenizer").mkdir(parents=True)
    (outside / "tokenizer" / "vocab.json").write_text("{}")
    (outside / "step-200").mkdir()
    (outside / "step-200" / "model.bin").write_bytes(b"w" * 100)
    ck = tmp_path / "ck"
    make(ck, [100, 300])
    (ck / "step-100" / "tokenizer").symlink_to(outside / "tokenizer")
    (ck / "step-100" / "loop").symlink_to("..")
    (ck / "step-100" / "a").symlink_to("b")
    (ck / "step-100" / "b").symlink_to("a")
    (ck / "step-200").symlink_to(outside / "step-200")
    age(ck)
    done = prune(tmp_path, "ck", "--keep-last", "1", "--delete")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^deleted step-200\s+link$", done.stdout, re.M)
    assert re.search(rf"^deleted step-100\s+{(SHARD + 1) / 1000:.1f} kB$", done.stdout, re.M)  # links count 0
    assert sorted(p.name for p in ck.iterdir()) == ["step-300"]
    assert (outside / "tokenizer" / "vocab.json").read_text() == "{}"
    assert (outside / "step-200" / "model.bin").stat().st_size == 100


def test_a_deletion_that_a_crash_interrupted_is_finished_by_the_next_run(tmp_path):
    ck = tmp_path / "ck"
    make(ck, [100, 200])
    # what a run killed between its rename and the end of the removal leaves behind
    make(ck, [50], fmt=".deleting-step-{}")
    age(ck)
    dry = prune(tmp_path, "ck", "--keep-last", "5")
    assert "leftover  .deleting-step-50  (an interrupted deletion)" in dry.stdout
    assert (ck / ".deleting-step-50").is_dir()
    done = prune(tmp_path, "ck", "--keep-last", "5", "--delete")
    assert "finish  .deleting-step-50" in done.stdout and done.returncode == 0
    assert sorted(p.name for p in ck.iterdir()) == ["step-100", "step-200"]


def test_what_a_resume_would_load_is_kept(tmp_path):
    """DeepSpeed's latest file, Megatron-LM's latest_checkpointed_iteration.txt and a link
    each protect the checkpoint they name, though it is neither last nor k-th."""
    runs = {"ds": ("global_step{}", "latest", "global_step200"),
            "mg": ("iter_{:07d}", "latest_checkpointed_iteration.txt", "200"),
            "ln": ("checkpoint-{}", None, None)}
    for name, (fmt, pointer, text) in runs.items():
        make(tmp_path / name, [100, 200, 300, 400], fmt=fmt, marker=False)
        if pointer:
            (tmp_path / name / pointer).write_text(text + "\n")
        else:
            (tmp_path / name / "best").symlink_to("checkpoint-200")
        age(tmp_path / name)
        done = prune(tmp_path, name, "--keep-last", "1")
        got = actions(done.stdout)
        assert [k for k, v in got.items() if v == "keep"] == [fmt.format(200), fmt.format(400)], done.stdout
        assert re.search(rf"^keep\s+{fmt.format(200)} .* ({pointer} names it|the link best points at it)$",
                         done.stdout, re.M), done.stdout


def test_the_default_pattern_reads_the_usual_names():
    pattern = re.compile(import_script(SCRIPT).DEFAULT_PATTERN)
    names = {"step_001200": 1200, "step-1200": 1200, "global_step1200": 1200, "checkpoint-1200": 1200,
             "iter_0001200": 1200, "epoch=3-step=1200.ckpt": 1200, "checkpoint_1200.pt": 1200, "step1200": 1200}
    assert {n: int(pattern.search(n)[1]) for n in names} == names
    for other in ("latest", "checkpoint-best", "step_final", "run_1200", "mystep1200"):
        assert not pattern.search(other), other


def test_an_unreadable_checkpoint_is_left_and_a_failed_deletion_exits_1(tmp_path):
    ck = tmp_path / "ck"
    make(ck, [100, 200, 300])
    (ck / "step-100" / "private").mkdir()
    age(ck)
    prefix = unprivileged(ck / "step-100" / "private", 0)
    try:
        done = prune(tmp_path, "ck", "--keep-last", "1", "--delete", prefix=prefix)
    finally:
        (ck / "step-100" / "private").chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^leave\s+step-100 .* cannot read step-100/private: cannot list it \(Permission denied\)$",
                     done.stdout, re.M), done.stdout
    assert sorted(p.name for p in ck.iterdir()) == ["step-100", "step-300"]
    # a folder the run may read but not change: each deletion fails, in one line at the end
    age(ck)
    prefix = unprivileged(ck, 0o555)
    try:
        done = prune(tmp_path, "ck", "--keep-last", "1", "--delete", prefix=prefix)
    finally:
        ck.chmod(0o755)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == ("prune_checkpoints.py: error: 1 could not be deleted (the rest was): "
                                   "step-100: cannot delete it (Permission denied)")
    assert sorted(p.name for p in ck.iterdir()) == ["step-100", "step-300"]


BAD_INPUT = [
    Case("dir-missing", ["nope", "--keep-last", "2"], r"nope: does not exist$"),
    Case("dir-is-a-file", ["f", "--keep-last", "2"], r"f: is not a folder$", files={"f": "x"}),
    Case("keep-last-missing", ["."], r"the following arguments are required: --keep-last"),
    Case("keep-last-zero", [".", "--keep-last", "0"], r"--keep-last: 0 must be >= 1"),
    Case("min-age-nan", [".", "--keep-last", "1", "--min-age-s", "nan"], r"--min-age-s: 'nan' is not a finite"),
    Case("pattern-not-a-regex", [".", "--keep-last", "1", "--pattern", "step_(\\d+"], r"--pattern: not a regular "),
    Case("pattern-without-group", [".", "--keep-last", "1", "--pattern", "step_\\d+"],
         r"--pattern: needs exactly one group, the step number"),
    Case("marker-is-a-path", [".", "--keep-last", "1", "--marker", "../x"], r"--marker \.\./x: give a file name"),
    Case("json-inside-the-folder", ["ck", "--keep-last", "1", "--json", "ck/r.json"],
         r"--json ck/r\.json: is inside ck, which this run reads", files={"ck/step-1/a": "x"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    # standard library only: a fresh interpreter starts in 50 ms, sooner than the torch-preloaded server
    check_refused("storage/prune_checkpoints.py", dataclasses.replace(case, fresh_process=True), tmp_path)
