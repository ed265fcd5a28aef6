"""The script contract (CONTRIBUTING.md, "Script contract") has one source, tools/script_contract.py,
whose `sync` writes into every Python script under scripts/ the part it uses, so that each stays a
single file a reader can download. These tests check the generator, keep every script's block what
it would write, test the source's functions, and check that each script wires the contract in:
errors go through ``run_main`` and ``--debug`` shows the traceback."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.launchers import REPO, clean_env
from tools import script_contract

SCRIPTS = sorted((REPO / "scripts").rglob("*.py"))


def test_every_script_carries_the_contract_it_uses():
    """Each script's block is what `python tools/script_contract.py sync` writes: the
    definitions of the one source that the script names, and theirs, just above its __main__
    guard (pre-commit runs the same check)."""
    stale = [path.relative_to(REPO).as_posix() for path in SCRIPTS
             if script_contract.synced(path.read_text(encoding="utf-8")) != path.read_text(encoding="utf-8")]
    assert not stale, f"run `python tools/script_contract.py sync`: out of date: {stale}"


def test_a_block_holds_what_its_names_need_in_source_order():
    """A script that names only check_output gets it with ScriptError, the exit codes and OUTPUTS
    it uses, and nothing it does not (no run_main, no read_input)."""
    block = script_contract.block_for("def main():\n    check_output('x', '--json')\n")
    defined = [getattr(node, "name", None) or ast.unparse(getattr(node, "target", None) or node.targets[0])
               for node in ast.parse(block).body]
    assert defined == ["(EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED)", "ScriptError",
                       "OUTPUTS", "check_output"]
    assert script_contract.block_for("print('no contract')\n") == ""


def test_the_block_goes_after_main_and_sync_is_stable():
    text = ('"""Doc."""\nimport sys\n\n\ndef main(argv=None):\n    return 0\n\n\n'
            'if __name__ == "__main__":\n    run_main(main)\n')
    once = script_contract.synced(text)
    assert once.index("def main") < once.index("def run_main") < once.index('if __name__ == "__main__"')
    assert script_contract.synced(once) == once
    assert script_contract.without_block(once) == script_contract.without_block(text)


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
    """The contract's one source (tools/script_contract.py), without any script around it."""
    import argparse
    return argparse, vars(script_contract)


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
