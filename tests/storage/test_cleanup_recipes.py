"""The cleanup recipes of book/en/storage/file-systems.md, run on a staged folder.

Each recipe is a pair of the page's bash blocks, ``# recipe: NAME list`` and ``# recipe: NAME
delete``, whose ``dir=`` line names the folder it cleans. The test points that line at a staged
folder and runs both blocks as the page shows them. The listing must print exactly the
files the deletion then removes, and the deletion must keep what it should: new files, files with
other names, files of another user (created with os.chown when the tests run as root), and
whatever a symbolic link out of the folder points to, which must still be there.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.launchers import REPO

PAGE = REPO / "book" / "en" / "storage" / "file-systems.md"
OTHER_UID = 65534  # nobody
DAY = 86400


def recipe(name: str, step: str, folder: Path) -> str:
    """The page's bash block ``# recipe: NAME STEP`` with its ``dir=`` line set to ``folder``."""
    blocks = re.findall(r"```bash\n(# recipe: (\S+) (list|delete)\n.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    found = [body for body, n, s in blocks if (n, s) == (name, step)]
    assert len(found) == 1, f"{PAGE.name}: expected one block '# recipe: {name} {step}', found {len(found)}"
    body, count = re.subn(r"^dir=.*$", f"dir={folder}", found[0], flags=re.M)
    assert count == 1, f"recipe {name} {step}: no single dir= line"
    return body


def bash(script: str) -> list[str]:
    res = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, script + res.stdout + res.stderr
    return sorted(res.stdout.splitlines())


def make(path: Path, age_s: float = 0, owner: int | None = None, content: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return age(path, age_s, owner)


def age(path: Path, age_s: float, owner: int | None = None) -> Path:
    if owner is not None:
        os.chown(path, owner, owner, follow_symlinks=False)
    when = time.time() - age_s
    os.utime(path, (when, when), follow_symlinks=False)
    return path


def others_allowed() -> bool:
    return os.geteuid() == 0


def run_recipe(name: str, folder: Path, removed: list[Path], kept: list[Path]) -> None:
    listed = bash(recipe(name, "list", folder))
    assert listed == sorted(map(str, removed)), "the listing differs from what must go"
    bash(recipe(name, "delete", folder))
    gone = [p for p in removed if os.path.lexists(p)]
    assert not gone, f"not removed: {gone}"
    lost = [p for p in kept if not os.path.lexists(p)]
    assert not lost, f"removed, though it must stay: {lost}"


def test_stale_tmp(tmp_path):
    require_tool("find")
    tmp, outside = tmp_path / "tmp", tmp_path / "outside"
    old = 4 * DAY
    removed = [make(tmp / "mine-old", old), make(tmp / "job" / "nested-old", old)]
    kept = [make(tmp / "mine-new"), make(outside / "old-too", old)]
    os.symlink(outside, tmp / "link-out")
    age(tmp / "link-out", old)
    kept.append(tmp / "link-out")
    if others_allowed():
        kept.append(make(tmp / "theirs-old", old, OTHER_UID))
    run_recipe("stale-tmp", tmp, removed, kept)
    assert (tmp / "job").is_dir()  # folders stay, as the page says


def test_shm(tmp_path):
    require_tool("find")
    shm, outside = tmp_path / "shm", tmp_path / "outside"
    old = 2 * 3600
    removed = [make(shm / "torch_123_456_0", old), make(shm / "nccl-AbC123", old)]
    kept = [make(shm / "torch_123_789_1"),               # new: a job may be using it
            make(shm / "other-app.dat", old),            # not a torch or NCCL segment
            make(shm / "sub" / "torch_1_2_3", old),      # not at the top of /dev/shm
            make(outside / "torch_9_9_9", old)]
    os.symlink(outside / "torch_9_9_9", shm / "torch_link")
    age(shm / "torch_link", old)
    kept.append(shm / "torch_link")
    if others_allowed():
        kept.append(make(shm / "torch_555_1_0", old, OTHER_UID))
    run_recipe("shm", shm, removed, kept)


def test_cache(tmp_path):
    require_tool("find")
    cache, outside = tmp_path / "triton-cache", tmp_path / "outside"
    old = 40 * DAY
    make(cache / "OLDKERNEL" / "kernel.cubin", old)
    make(cache / "NEWKERNEL" / "kernel.cubin")
    make(outside / "precious.bin", old)
    os.symlink(outside, cache / "old-link")
    removed = [age(cache / "OLDKERNEL", old), age(cache / "old-link", old)]
    kept = [cache / "NEWKERNEL" / "kernel.cubin", outside / "precious.bin"]
    if others_allowed():
        make(cache / "THEIRS" / "kernel.cubin", old, OTHER_UID)
        kept.append(age(cache / "THEIRS", old, OTHER_UID))
    run_recipe("cache", cache, removed, kept)
    assert (outside / "precious.bin").read_bytes() == b"x", "rm followed the link out of the cache"


@pytest.mark.parametrize("name", ["stale-tmp", "shm", "cache"])
def test_every_recipe_keeps_the_five_rules(name, tmp_path):
    """Both steps of each recipe: only the user's files (-user), one file system (-xdev), an age
    test, and the listing is the deletion with -print in place of the deleting action."""
    listing, deletion = (recipe(name, step, tmp_path) for step in ("list", "delete"))
    for body in (listing, deletion):
        assert '-user "$(id -u)"' in body and "-xdev" in body and re.search(r"-m(time|min) \+\d+", body)
        assert "-L " not in body and "-follow" not in body
    assert re.sub(r" -print$", "", listing.splitlines()[-1]) == \
        re.sub(r" (-delete|-exec .*)$", "", deletion.splitlines()[-1])
