"""The GitHub workflow's lanes run every test: the book lane (`make test-book`) and one lane per
part (`make test PART=name`) together cover every test file and notebook that `make test` runs."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK_OWN = {"build", "notebooks", "tools"}  # tests/ folders of `make test-book`


def workflow() -> dict:
    return yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text(encoding="utf-8"))


def test_every_part_has_a_lane():
    lanes = set(workflow()["jobs"]["part"]["strategy"]["matrix"]["part"])
    parts = {d.name for base in ("tests", "notebooks") for d in (ROOT / base).iterdir()
             if d.is_dir() and not d.name.startswith((".", "_")) and any(d.rglob("*.*"))} - BOOK_OWN
    assert lanes == parts, f"missing lanes: {sorted(parts - lanes)}; lanes for no part: {sorted(lanes - parts)}"
    assert set(workflow()["jobs"]["publish"]["needs"]) == {"book", "part"}


def test_every_test_file_is_in_a_lane():
    lanes = BOOK_OWN | set(workflow()["jobs"]["part"]["strategy"]["matrix"]["part"])
    for path in (ROOT / "tests").rglob("test_*.py"):
        rel = path.relative_to(ROOT / "tests")
        # a top-level file (make test-book takes tests/test_*.py) or in a folder that has a lane
        assert len(rel.parts) == 1 or rel.parts[0] in lanes, rel
