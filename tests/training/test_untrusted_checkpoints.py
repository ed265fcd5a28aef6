"""A checkpoint folder from someone else cannot run code when train_example.py or
dcp_resume_example.py resumes from it, by any of their resume routes.

DCP unpickles a checkpoint's .metadata, and torch.load(weights_only=False)s its non-tensor
entries; both scripts load them through read_dcp_metadata, checked_dcp_load and load_checkpoint
instead (tools/script_shared.py, generated into both: tests/test_script_contract.py checks that
each carries them), which these tests attack.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

SCRIPTS = ("training/train_example.py", "training/dcp_resume_example.py")
SMALL = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--batch-size", "4",
         "--vocab", "256"]


class RunsCode:
    """Unpickling this creates the file ``marker``: the proof that a load ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def hostile_metadata(tmp: Path, folder: str) -> dict[str, bytes]:
    return {f"{folder}/.metadata": pickle.dumps(RunsCode(tmp / "PWNED")),
            f"{folder}/__0_0.distcp": b""}


ROUTES = [  # script, arguments, the checkpoint folder they resume from
    ("training/train_example.py", ["--steps", "2", *SMALL, "--resume-from", "ck"], "ck"),
    ("training/train_example.py", ["--steps", "2", *SMALL, "--checkpoint-dir", "cks"],
     "cks/step_00000001"),
    ("training/dcp_resume_example.py", ["--steps", "2", "--resume", "ck"], "ck"),
    ("training/dcp_resume_example.py", ["--steps", "2", "--resume", "auto", "--ckpt-dir", "cks"],
     "cks/step-1"),
]


@pytest.mark.parametrize("script, args, folder", ROUTES,
                         ids=[f"{s.split('/')[1][:-3]}-{a[-1]}" for s, a, _ in ROUTES])
def test_hostile_metadata_is_refused_by_every_resume_route(script, args, folder, tmp_path):
    check_refused(script, Case("hostile-metadata", args,
                               rf"{folder}/\.metadata: refused: it names posix\.system, which is no "
                               r"part of a DCP checkpoint's metadata \(unpickling it could run code\)",
                               status=1, files=hostile_metadata(tmp_path, folder)), tmp_path)
    assert not (tmp_path / "PWNED").exists(), "the checkpoint ran code"


@pytest.mark.parametrize("script", SCRIPTS)
def test_hostile_entry_is_refused_before_dcp_unpickles_it(script, tmp_path):
    """DCP's planner loads non-tensor entries with torch.load(weights_only=False): a hostile one
    must be refused by name, and a plain one still load."""
    import torch
    import torch.distributed.checkpoint as dcp
    module = import_script(REPO / "scripts" / script)
    with pytest.warns(UserWarning):  # no process group: DCP assumes a single process
        dcp.save({"meta": RunsCode(tmp_path / "PWNED"), "w": torch.ones(3)},
                 checkpoint_id=str(tmp_path / "hostile"))
        dcp.save({"meta": 7, "w": torch.ones(3)}, checkpoint_id=str(tmp_path / "plain"))
    with pytest.warns(UserWarning), pytest.raises(BaseException) as caught:
        module.checked_dcp_load(dcp, {"meta": 0, "w": torch.zeros(3)}, tmp_path / "hostile")
    errors = [e[0] if isinstance(e, tuple) else e for e in caught.value.failures.values()]
    assert [str(e) for e in errors] == [f"{tmp_path / 'hostile'}: refused: entry 'meta' names "
                                        "posix.system (unpickling it could run code)"]
    assert not (tmp_path / "PWNED").exists(), "the checkpoint ran code"
    state = {"meta": 0, "w": torch.zeros(3)}
    with pytest.warns(UserWarning):
        module.checked_dcp_load(dcp, state, tmp_path / "plain")
    assert state["meta"] == 7 and state["w"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("content, message", [
    (None, r"cannot open \(No such file or directory\)"),
    ("fifo", "not a regular file"),
    (pickle.dumps({"not": "metadata"}), "holds a dict, not DCP metadata"),
    (b"\x80\x04garbage", r"cannot read the checkpoint's metadata \(UnpicklingError"),
], ids=["missing", "fifo", "other-object", "garbage"])
def test_metadata_that_is_not_dcp_metadata(script, content, message, tmp_path):
    module = import_script(REPO / "scripts" / script)
    folder = tmp_path / "ck"
    folder.mkdir()
    if content == "fifo":
        os.mkfifo(folder / ".metadata")
    elif content is not None:
        (folder / ".metadata").write_bytes(content)
    with pytest.raises(module.ScriptError, match=rf"^{re.escape(str(folder))}/\.metadata: {message}"):
        module.read_dcp_metadata(folder)
