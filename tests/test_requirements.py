"""The locks (requirements.txt, requirements/scripts.txt) agree with the direct dependencies listed
by purpose in requirements/*.in, so `make lock` was run after the last edit of a .in file."""

import re

import pytest

from tests.conftest import ROOT

IN_FILES = sorted((ROOT / "requirements").glob("*.in"))
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")


def pins(path) -> dict[str, str]:
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = PIN.match(line.split("#")[0].strip())
        if match:
            found[match[1].lower().replace("_", "-")] = match[2]
    return found


def test_there_are_dependency_lists_by_purpose():
    assert [p.name for p in IN_FILES] == ["book.in", "scripts.in", "tests.in"]


@pytest.mark.parametrize("listed", IN_FILES, ids=lambda p: p.name)
def test_every_direct_dependency_is_locked_at_its_version(listed):
    lock = pins(ROOT / "requirements.txt")
    wanted = pins(listed)
    assert wanted, f"{listed.name} pins nothing"
    wrong = {name: (version, lock.get(name)) for name, version in wanted.items() if lock.get(name) != version}
    assert not wrong, f"{listed.name} vs requirements.txt (wanted, locked): {wrong}; run `make lock`"


def test_the_scripts_lock_is_part_of_the_full_lock():
    full, scripts = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements" / "scripts.txt")
    assert set(pins(ROOT / "requirements" / "scripts.in")) <= set(scripts)
    assert {name: full.get(name) for name in scripts} == scripts


def test_torch_is_the_one_pin_for_cpu_and_cuda_machines():
    for lock in (ROOT / "requirements.txt", ROOT / "requirements" / "scripts.txt"):
        assert pins(lock)["torch"] == "2.13.0", f"{lock.name}: a local label (+cpu) would pin the CPU build everywhere"
