"""The script contract (CONTRIBUTING.md, "Script contract") is one block of code copied into every
Python script under scripts/, so that each stays a single file a reader can download. These tests
keep the copies identical and check that each script wires the block in: errors go through
``run_main`` and ``--debug`` shows the traceback."""

from __future__ import annotations

import ast
import os
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
SHARED_FUNCTIONS = ("load_checkpoint", "read_txt")


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


@pytest.fixture(scope="module")
def contract():
    """The block itself, run on its own: its functions, without any script around them."""
    import argparse, contextlib, math, os, tempfile, threading, traceback  # noqa: E401
    namespace = dict(argparse=argparse, contextlib=contextlib, math=math, os=os, sys=sys,
                     tempfile=tempfile, threading=threading, traceback=traceback)
    exec(block(SCRIPTS[0]), namespace)  # noqa: S102 - our own file, checked identical above
    return argparse, namespace


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "-1", "0", "x", "", "9" * 400])
def test_number_refuses_as_a_usage_error(contract, text):
    """Every refusal is argparse's ArgumentTypeError (a one-line usage error naming the option):
    a 400-digit integer once escaped as OverflowError from math.isfinite, a traceback."""
    argparse, c = contract
    for kind in (int, float):
        with pytest.raises(argparse.ArgumentTypeError):
            c["number"](kind, lo=0, lo_open=True, hi=1e300)(text)


def test_number_accepts_the_range(contract):
    _, c = contract
    assert c["number"](int, 1, 10)("10") == 10
    assert c["number"](float, 0, lo_open=True)("1e-9") == 1e-9
    assert c["number"](int)("9" * 400) == int("9" * 400)


def test_check_output_refuses_what_write_atomic_would_destroy(contract, tmp_path):
    """A rename over a FIFO or device replaces it with a plain file (as root, /dev/null once);
    an input named as the output would be emptied; a folder cannot be renamed over."""
    _, c = contract
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("{}\n")
    for path, inputs, words in ((fifo, (), "not a regular file"), ("/dev/null", (), "not a regular file"),
                                (corpus, (str(corpus),), "also an input"), (tmp_path, (), "is a folder"),
                                (tmp_path / "no" / "x.json", (), "does not exist"),
                                (corpus / "x.json", (), "is not a folder")):
        with pytest.raises(c["ScriptError"], match=words) as err:
            c["check_output"](str(path), "--json", inputs)
        assert err.value.status == c["EXIT_USAGE"] and "--json" in str(err.value)
    assert c["check_output"](str(tmp_path / "new.json"), "--json") == str(tmp_path / "new.json")
    assert fifo.exists() and not fifo.is_file() and not list(tmp_path.glob(".probe-*"))



# What a reader pipes into `head`: the calculators' tables (argparse's own --help already
# ignores a closed stdout, so it proves nothing here).
PIPED = [("storage/checkpoint_interval.py", []), ("inference/kv_cache_calculator.py", ["--list"]),
         ("models/model_calculator.py", ["--list"]), ("network/busbw_model.py", []),
         ("training/memory_estimator.py", ["--params", "7.5e9", "--dp", "64", "--zero", "1"]),
         ("training/communication_volume.py", [])]


@pytest.mark.parametrize("script, args", PIPED, ids=[s for s, _ in PIPED])
def test_a_reader_that_stopped_reading_is_no_error(script, args):
    """``script | head -1`` with the reader gone before the script writes: exit 0 and nothing on
    stderr, as ``cat`` does, so a ``set -o pipefail`` job does not fail because its reader
    wanted only the first line."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              env=clean_env(), timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (0, "")
