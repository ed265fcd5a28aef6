"""The script contract (CONTRIBUTING.md, "Script contract") is one block of code copied into every
Python script under scripts/, so that each stays a single file a reader can download. These tests
keep the copies identical and check that each script wires the block in: errors go through
``run_main`` and ``--debug`` shows the traceback."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.launchers import REPO, clean_env

BEGIN = "# --- script contract"
END = "# --- end of script contract ---"
SCRIPTS = sorted((REPO / "scripts").rglob("*.py"))


def block(path) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.count(BEGIN) == 1 and text.count(END) == 1, \
        f"{path.relative_to(REPO)}: needs exactly one contract block ({BEGIN!r} ... {END!r})"
    return text[text.index(BEGIN):text.index(END) + len(END)]


def test_every_script_has_the_same_block():
    blocks = {path.relative_to(REPO).as_posix(): block(path) for path in SCRIPTS}
    versions: dict[str, list[str]] = {}
    for name, text in blocks.items():
        versions.setdefault(text, []).append(name)
    majority = max(versions.values(), key=len)
    odd = sorted(name for names in versions.values() if names is not majority for name in names)
    assert not odd, f"contract block differs from the one in {len(majority)} scripts: {odd}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_script_uses_the_block(path):
    """The block is only as good as its use: the entry point runs through run_main, and the
    parser accepts --debug (run_main honours it)."""
    text = path.read_text(encoding="utf-8")
    tail = text[text.rindex('if __name__ == "__main__":'):]
    assert "run_main(" in tail, "the __main__ guard must call run_main(main)"
    assert '"--debug"' in text, "the parser must accept --debug"


def test_debug_shows_the_traceback_and_plain_run_does_not(tmp_path):
    """A runtime failure (an input file that is not JSON) is one line without --debug and a
    traceback plus the same line with it."""
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not utf-8\n")
    script = REPO / "scripts" / "training" / "text_quality_filters.py"
    runs = {flag: subprocess.run([sys.executable, str(script), str(bad), *flag], cwd=tmp_path,
                                 env=clean_env(), capture_output=True, text=True, timeout=60)
            for flag in ((), ("--debug",))}
    plain, debug = runs[()], runs[("--debug",)]
    assert plain.returncode == debug.returncode != 0
    assert "Traceback" not in plain.stderr and "Traceback" in debug.stderr
    line = [ln for ln in plain.stderr.splitlines() if ": error: " in ln]
    assert len(line) == 1 and line[0] in debug.stderr and "bad.jsonl" in line[0]


# Helpers that more than one script needs, copied verbatim (a script stays one file).
SHARED_FUNCTIONS = ("load_checkpoint",)


@pytest.mark.parametrize("name", SHARED_FUNCTIONS)
def test_shared_helpers_are_identical_copies(name):
    copies = {}
    for path in SCRIPTS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                copies[path.relative_to(REPO).as_posix()] = ast.get_source_segment(
                    path.read_text(encoding="utf-8"), node)
    assert len(copies) >= 2, f"{name} is no longer shared: {sorted(copies)}"
    assert len(set(copies.values())) == 1, f"copies of {name} differ: {sorted(copies)}"
