"""The script contract (CONTRIBUTING.md, "Script contract") has one source, tools/script_contract.py,
and the code two or more scripts share beyond it another, tools/script_shared.py (with the rows of
data/ built into scripts); `python tools/script_contract.py sync` writes into every Python script
under scripts/ the part of them it uses, so that each stays a single file a reader can download.
These tests check the generator, keep every script's block what it would write (the shared code
and the built-in rows included), test the source's functions, check that each script wires the
contract in (errors go through ``run_main``, ``--debug`` shows the traceback), and run the
scripts that need the book's data copied alone into an empty folder."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


# Code two or more scripts share (tools/script_shared.py): each of these scripts carries it in its
# generated block and keeps no copy of its own. This replaces the tests that compared hand-kept
# copies (the bounded-corpus and untrusted-DCP blocks, load_checkpoint and read_txt).
MODELS = ("architecture", "select_models", "read_config", "load_models", "tokens_per_layer",
          "parse_count", "MODEL_ROWS")
CORPUS = ("load_corpus", "split_documents", "HELD_OUT_EVERY")
BOUNDED = ("InputError", "read_chunks", "read_lines", "read_txt", "check_field", "MAX_CORPUS_BYTES")
DCP = ("read_dcp_metadata", "checked_dcp_load", "load_checkpoint")
SHARED = {"inference/kv_cache_calculator.py": MODELS, "models/model_calculator.py": MODELS,
          "training/parallelism_planner.py": ("architecture", "select_models", "MODEL_ROWS", "count_params",
                                              "arch_flops_per_token", "state_bytes_per_param",
                                              "activation_bytes_per_layer"),
          "inference/quantize_weights.py": (*CORPUS, "train_lm"),
          "inference/speculative_decoding.py": (*CORPUS, "train_lm"), "models/dpo_tiny.py": CORPUS,
          "training/minhash_dedup.py": BOUNDED, "training/text_quality_filters.py": BOUNDED,
          "training/train_example.py": DCP, "training/dcp_resume_example.py": DCP,
          "compute/mamf_finder.py": ("_cpu_name",), "inference/decode_bench.py": ("_cpu_name",),
          "storage/prune_checkpoints.py": ("IN_PROGRESS", "walk_tree", "decimal_size"),
          "storage/checksum_manifest.py": ("IN_PROGRESS", "walk_tree", "decimal_size")}


def defined_at_top(code: str) -> set[str]:
    return {name for node in ast.parse(code).body for name in (
        [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
        [n.id for t in getattr(node, "targets", [getattr(node, "target", None)]) if t
         for n in ast.walk(t) if isinstance(n, ast.Name)])}


def generated_block(text: str) -> str:
    return text[text.index(script_contract.BEGIN):text.index(script_contract.END)]


@pytest.mark.parametrize("script, names", SHARED.items(), ids=list(SHARED))
def test_shared_code_is_generated_into_each_script_that_uses_it(script, names):
    text = (REPO / "scripts" / script).read_text(encoding="utf-8")
    assert set(names) <= defined_at_top(generated_block(text))
    assert not set(names) & defined_at_top(script_contract.without_block(text)), "a copy of its own"


def test_every_shared_definition_is_used_by_a_script():
    """No dead code in tools/script_shared.py: each of its definitions is in some script's block."""
    shared = set().union(*(defines for defines, _, _ in script_contract.pieces())) - defined_at_top(
        script_contract._source(*script_contract.SOURCES[0]))  # less the contract's
    used = set().union(*(defined_at_top(generated_block(p.read_text(encoding="utf-8")))
                         for p in SCRIPTS if script_contract.BEGIN in p.read_text(encoding="utf-8")))
    assert shared and shared <= used, sorted(shared - used)


def test_a_script_may_not_keep_its_own_copy_of_shared_code():
    """A script that defines a name the sources define, and uses it, is refused by sync: one of
    the two copies would shadow the other."""
    with pytest.raises(ValueError, match="defines load_corpus itself"):
        script_contract.block_for("def load_corpus(path):\n    pass\n\n\ndef main():\n    load_corpus('x')\n")
    assert script_contract.main(["sync", "--check", str(REPO / "scripts" / "models" / "dpo_tiny.py")]) == 0


def built_in_rows(script: str, name: str = "MODEL_ROWS") -> list[dict]:
    block = ast.parse(generated_block((REPO / "scripts" / script).read_text(encoding="utf-8")))
    (node,) = [n for n in block.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == name]
    return ast.literal_eval(node.value)


def test_built_in_rows_are_the_data_file_and_a_change_to_it_makes_the_scripts_stale(monkeypatch):
    """MODEL_ROWS in a script is data/models/architectures.yml's rows, each without the keys no
    script reads; the same `sync --check` that keeps the shared code fails when the file changes."""
    import yaml
    rows = yaml.safe_load((REPO / "data" / "models" / "architectures.yml").read_text(encoding="utf-8"))["rows"]
    expected = [{k: v for k, v in row.items() if k not in ("source", "max_position_embeddings")} for row in rows]
    for script in ("inference/kv_cache_calculator.py", "models/model_calculator.py"):
        assert built_in_rows(script) == expected, script
    text = (REPO / "scripts" / "models" / "model_calculator.py").read_text(encoding="utf-8")
    changed = [dict(expected[0], num_hidden_layers=expected[0]["num_hidden_layers"] + 1), *expected[1:]]
    monkeypatch.setattr(script_contract, "data_rows", lambda *args, **kwargs: changed)
    script_contract.pieces.cache_clear()
    try:
        assert script_contract.synced(text) != text
    finally:
        monkeypatch.undo()
        script_contract.pieces.cache_clear()
    assert script_contract.synced(text) == text


def test_built_in_rows_keep_the_chosen_keys_of_the_chosen_rows_of_data_and_results():
    """``keep`` and ``where`` choose columns and rows; a path under results/ reads a measured
    results file's ``results``: what the planner's built-in catalogue and MAMF tables are."""
    import yaml
    catalogue = yaml.safe_load((REPO / "data/compute/accelerators.yml").read_text(encoding="utf-8"))["rows"]
    names = ("AMD MI300X", "NVIDIA H100 SXM")
    rows = script_contract.data_rows("compute/accelerators.yml", keep=("name", "bf16_dense"),
                                     where={"name": names})
    assert rows == [{"name": r["name"], "bf16_dense": r["bf16_dense"]} for r in catalogue if r["name"] in names]
    assert len(rows) == 2
    path = "results/compute/mamf_finder-published-various-2026-11-25.json"
    results = json.loads((REPO / path).read_text(encoding="utf-8"))["results"]
    fp8 = script_contract.data_rows(path, leave_out=("settings", "source"), where={"dtype": ("fp8",)})
    assert fp8 == [{k: v for k, v in r.items() if k not in ("settings", "source")}
                   for r in results if r["dtype"] == "fp8"]
    assert fp8 and len(fp8) < len(results)
    with pytest.raises(KeyError):
        script_contract.data_rows("compute/accelerators.yml", keep=("no_such_column",))
    built = built_in_rows("training/parallelism_planner.py", "MAMF_ROWS")
    assert built == [{"device": r["device"], "mean_tflops": r["mean_tflops"]} for r in results if r["dtype"] == "bf16"]


def test_built_in_rows_are_wrapped_within_the_line_length():
    """sync writes each row's pairs filled into lines within WIDTH (ruff's line-length) columns;
    the literal reads back as the rows, a pair longer than a line stands on a line of its own."""
    rows = [{"name": "a", **{f"key_{i}": i * 1000 for i in range(40)}}, {},
            {"long": "x" * (2 * script_contract.WIDTH), "short": 1}, {"one": True}]
    text = script_contract._literal(rows)
    assert ast.literal_eval(text) == rows
    lines = text.splitlines()
    assert all(len(line) <= script_contract.WIDTH for line in lines if "xxx" not in line)
    assert len(lines) > len(rows) + 2 and "    {'one': True}," in lines


FIXTURES = REPO / "tests" / "debug" / "fixtures"
# The scripts whose main use needs data of the book, and that main use: copied alone into an empty
# folder and run by a plain `python -I -S` (no site-packages: no PyYAML, no clone, no tools/), each
# must print what it prints in the repository. The calculators' rows are built in (MODEL_ROWS);
# flops_mfu_calculator's peaks, kv_cache_calculator's GPU memory and node_health_check's Xid codes
# are tables of the script, checked against data/ by their tests.
ALONE = [("inference/kv_cache_calculator.py", ["--model", "Llama 3.1 8B", "--json", "-"]),
         ("inference/kv_cache_calculator.py", ["--list"]),
         ("models/model_calculator.py", ["--model", "Llama 3.1 8B", "--json", "-"]),
         ("models/model_calculator.py", ["--model", "all", "--context", "8192"]),
         ("training/parallelism_planner.py", ["--model", "Llama 3.1 70B", "--nodes", "4", "--global-batch",
                                              "64", "--seq", "4096", "--json", "-"]),
         ("training/flops_mfu_calculator.py", ["--layers", "32", "--hidden", "4096", "--heads", "32",
                                               "--vocab", "32000", "--seq-len", "4096", "--tokens-per-s",
                                               "3.2e5", "--devices", "64", "--device", "h100-sxm"]),
         ("debug/node_health_check.py", ["--nvidia-smi-xml", str(FIXTURES / "nvidia-smi" / "h100x8-ecc-remap.xml"),
                                         "--dmesg", str(FIXTURES / "dmesg" / "xid-79-94.txt"), "--expect-gpus", "8"])]


def _run(path, args, cwd, isolated=False):
    proc = subprocess.run([sys.executable, *(["-I", "-S"] if isolated else []), str(path), *args], cwd=cwd,
                          env=clean_env(), capture_output=True, text=True, timeout=120)
    # what only says when and how the run was made: the --json envelope's date and command line
    masked = [line for line in proc.stdout.splitlines() if not line.lstrip().startswith(('"date_utc"', '"command"'))]
    return proc.returncode, masked, proc.stderr


@pytest.mark.parametrize("script, args", ALONE, ids=[f"{s}-{a[0]}" for s, a in ALONE])
def test_a_script_copied_alone_prints_what_it_prints_in_the_repository(script, args, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    copy = Path(shutil.copy(REPO / "scripts" / script, alone))
    in_place = _run(REPO / "scripts" / script, args, tmp_path)
    copied = _run(copy, args, alone, isolated=True)
    assert in_place[0] in (0, 3), in_place  # node_health_check's fixture is a finding (3)
    assert copied == in_place
    assert sorted(p.name for p in alone.iterdir()) == [copy.name]  # it wrote nothing beside it


def test_data_takes_precedence_over_the_built_in_rows(tmp_path):
    """--data PATH, when given, is what --model and --list read, even for a script copied alone."""
    data = tmp_path / "d.json"
    row = dict(built_in_rows("models/model_calculator.py")[0], name="Mine")
    data.write_text(json.dumps({"rows": [row]}))
    for script in ("inference/kv_cache_calculator.py", "models/model_calculator.py"):
        copy = Path(shutil.copy(REPO / "scripts" / script, tmp_path))
        status, lines, err = _run(copy, ["--list", "--data", str(data)], tmp_path, isolated=True)
        assert status == 0 and len(lines) == 1 and lines[0].startswith("Mine "), (lines, err)


# The scripts that train on the book's corpus: it is too large to build in (280 kB), so a copy
# alone asks for --corpus in one line, and runs when given it.
CORPUS_SCRIPTS = [("inference/quantize_weights.py", ["--layers", "1", "--width", "32", "--heads", "2",
                                                      "--context", "32", "--steps", "2", "--schemes", "int8"]),
                  ("inference/speculative_decoding.py", None), ("models/dpo_tiny.py", None)]


@pytest.mark.slow
@pytest.mark.parametrize("script, args", CORPUS_SCRIPTS, ids=[s for s, _ in CORPUS_SCRIPTS])
def test_a_corpus_script_copied_alone_asks_for_the_corpus(script, args, tmp_path):
    copy = Path(shutil.copy(REPO / "scripts" / script, tmp_path))
    status, lines, err = _run(copy, [], tmp_path)
    assert status == 2 and lines == [] and "Traceback" not in err, err
    assert err.count("\n") == 1 and "no such file; give --corpus PATH: the book's data/training/corpus.jsonl" in err
    if args:
        corpus = str(REPO / "data" / "training" / "corpus.jsonl")
        status, lines, err = _run(copy, ["--corpus", corpus, *args], tmp_path)
        assert status == 0 and any(line.startswith("int8 ") for line in lines), err


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


# --- stop signals, the hard exit of a rank, a reader that left, the rank layout, the envelope ---

@pytest.fixture
def own_signal_handlers():
    """on_stop_signals replaces the SIGINT and SIGTERM handlers: pytest gets its own back."""
    import signal
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_stop_signals_raise_interrupted_with_128_plus_the_signal(contract, own_signal_handlers):
    """Ctrl-C and SIGTERM (scancel, a job's time limit) raise Interrupted, a KeyboardInterrupt
    naming the signal, whose status is 128 + it; the list returned records each as it comes (for
    the code that sees the exception only wrapped)."""
    import signal
    _, c = contract
    stopped = c["on_stop_signals"]()
    for sig, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        with pytest.raises(KeyboardInterrupt) as err:
            signal.raise_signal(sig)
        assert isinstance(err.value, c["Interrupted"])
        assert (err.value.signum, err.value.name, err.value.status) == (sig, sig.name, status)
    assert stopped == [signal.SIGTERM, signal.SIGINT]


def test_a_stop_signal_inside_popen_kills_the_new_process(contract, own_signal_handlers, monkeypatch):
    """SIGTERM landing after Popen has forked but before it returns (the window in which
    bisect_judge once left its benchmark running after it exited) is held until Popen returns,
    then kills the new process's group and is raised as Interrupted."""
    import signal
    _, c = contract
    real_popen, started = subprocess.Popen, []

    def popen_then_sigterm(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        signal.raise_signal(signal.SIGTERM)  # scancel, while Popen is still returning
        return started[-1]
    monkeypatch.setattr(subprocess, "Popen", popen_then_sigterm)
    c["on_stop_signals"]()
    try:
        with pytest.raises(c["Interrupted"]) as err:
            c["start_process"]([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        assert err.value.signum == signal.SIGTERM
        assert started[0].poll() == -signal.SIGKILL, "the process outlived the signal"
    finally:
        if started and started[0].poll() is None:
            os.killpg(started[0].pid, signal.SIGKILL)
            started[0].wait()
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the stop handler is back
    with pytest.raises(FileNotFoundError):  # without a signal, Popen's own error
        c["start_process"](["/nonexistent/command"])


@pytest.mark.parametrize("raised, status, line", [
    ("Interrupted(15)", 143, "interrupted by SIGTERM"), ("Interrupted(2)", 130, "interrupted"),
    ("KeyboardInterrupt()", 130, "interrupted")], ids=["SIGTERM", "SIGINT", "Ctrl-C"])
def test_run_main_exits_with_the_status_of_the_signal(contract, capsys, raised, status, line):
    _, c = contract

    def main(argv):
        raise eval(raised, c)
    with pytest.raises(SystemExit) as exit_:
        c["run_main"](main, [])
    assert exit_.value.code == status
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {line}")


# Run in a child whose stdout is a pipe that nobody reads any more (`| head -1` after its line):
# the contract's names, then CODE. What the child prints after "ready" goes to the closed pipe.
CHILD = ("import sys, os, time\nsys.path.insert(0, {tools!r})\nfrom script_contract import *\n"
         "sys.argv[0] = 'prog.py'\n{code}\n")


def _with_reader_gone(code: str) -> tuple[int, str]:
    read, write = os.pipe()
    os.close(read)
    env = clean_env()
    del env["PYTHONUNBUFFERED"]  # stdout buffered, as in a job: output can be pending at the exit
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD.format(tools=str(REPO / "tools"), code=code)],
                              stdout=write, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              env=env, timeout=60)
    finally:
        os.close(write)
    return proc.returncode, proc.stderr


READER_GONE = {
    # run_main: a failure raised from the reader's BrokenPipeError is no error either
    "run_main-raised-from": ("def main(argv):\n    try:\n        print('x' * 100000)\n"
                             "    except BrokenPipeError as e:\n        raise ScriptError('wrapped') from e\n"
                             "run_main(main, [])", 0, ""),
    # die() in a catch-all that caught the reader's BrokenPipeError: quiet, status 0, at once
    "die-in-catch-all": ("try:\n    print('x' * 100000, flush=True)\nexcept Exception:\n"
                         "    die('a failure', 1)", 0, ""),
    # die() for a real failure: its line and status, though the reader left with output pending
    "die-with-output-pending": ("sys.stdout.write('x' * 100)\ndie('rank 0: it broke\\nmore', 7)",
                                7, "prog.py: error: rank 0: it broke\n"),
    "die-without-a-line": ("print('x')\ndie(None, 5)", 5, ""),
    # say(): a rank goes on (the others would wait for it in their next collective)
    "say-goes-on": ("say('first')\nsay('x' * 100000)\nsay('third')\nsys.stderr.write('went on\\n')",
                    0, "went on\n"),
}


@pytest.mark.parametrize("case", READER_GONE, ids=list(READER_GONE))
def test_a_reader_that_left_is_no_error_for_run_main_die_and_say(case):
    code, status, err = READER_GONE[case]
    assert _with_reader_gone(code) == (status, err)


def test_die_prints_the_traceback_with_debug_and_say_writes_one_line_at_once(contract, capsys):
    _, c = contract
    proc = subprocess.run([sys.executable, "-c", CHILD.format(tools=str(REPO / "tools"), code=(
        "try:\n    1 / 0\nexcept ZeroDivisionError:\n    die('rank 1: division', debug=True)"))],
        capture_output=True, text=True, env=clean_env(), timeout=60)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.splitlines()[-1] == "prog.py: error: rank 1: division"

    class Stream(list):
        def flush(self):
            self.append("<flush>")
    stream = Stream()
    stream.write = stream.append
    c["say"]("rank 3: entering all_reduce", stream)
    assert stream == ["rank 3: entering all_reduce\n", "<flush>"]


LAYOUTS = [  # (environment, min_world) -> (launcher, rank, world, local_rank, master)
    ({}, 1, ("python", 0, 1, 0, None)),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
      "TORCHELASTIC_RUN_ID": "x"}, 2, ("torchrun", 1, 2, 1, "n1:29500")),
    ({"RANK": "0", "WORLD_SIZE": "1"}, 1, ("env", 0, 1, 0, None)),  # one rank needs no rendezvous
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "MASTER_ADDR": "n1",
      "MASTER_PORT": "1"}, 1, ("srun", 3, 4, 1, "n1:1")),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, 1, ("python", 0, 1, 0, None)),  # srun of one task
]
REFUSED = [  # (environment, min_world, the message)
    ({"RANK": "abc", "WORLD_SIZE": "2"}, 1, "environment variable RANK='abc' is not an integer"),
    ({"RANK": "0"}, 1, "environment variable WORLD_SIZE is not set"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, 1, "environment variable WORLD_SIZE=0 must be >= 1"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}, 1, "environment variable LOCAL_RANK='x' is not"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "x"}, 1, "environment variable SLURM_NTASKS='x' is not"),
    ({"RANK": "5", "WORLD_SIZE": "2"}, 1, "rank 5 is outside world size 2 (check RANK and WORLD_SIZE)"),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, 1,
     "rank 2 is outside world size 2 (check SLURM_PROCID and SLURM_NTASKS)"),
    ({}, 2, "needs at least 2 ranks (world size is 1); launch with torchrun --nproc-per-node 2 (or more)"),
    ({"RANK": "0", "WORLD_SIZE": "2"}, 1, "MASTER_ADDR and MASTER_PORT must be set for rank 0 of 2 "
     "(launched by env): environment variables MASTER_ADDR and MASTER_PORT are not set; export them"),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_PORT": "1"}, 1,
     "MASTER_ADDR and MASTER_PORT must be set for rank 1 of 2 (launched by srun): environment "
     "variable MASTER_ADDR is not set; export it"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, 1,
     "environment variable MASTER_PORT=70000 is not a TCP port (1-65535)"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "p"}, 1,
     "environment variable MASTER_PORT='p' is not an integer"),
]


def _launch_env(monkeypatch, env: dict) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("env, min_world, expected", LAYOUTS, ids=[e[2][0] + str(i) for i, e in enumerate(LAYOUTS)])
def test_launch_reads_torchrun_srun_or_a_lone_process(contract, monkeypatch, env, min_world, expected):
    _, c = contract
    _launch_env(monkeypatch, env)
    launch = c["Launch"](min_world)
    assert (launch.launcher, launch.rank, launch.world, launch.local_rank, launch.master) == expected
    assert launch.me() == f"rank {launch.rank} on {launch.host}" and launch.host


@pytest.mark.parametrize("env, min_world, message", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_launch_refuses_a_careless_layout_as_a_usage_error(contract, monkeypatch, env, min_world, message):
    _, c = contract
    _launch_env(monkeypatch, env)
    with pytest.raises(c["ScriptError"]) as err:
        c["Launch"](min_world)
    assert str(err.value).startswith(message) and err.value.status == c["EXIT_USAGE"]


def test_the_command_line_of_a_run(contract, monkeypatch, tmp_path):
    """``python SCRIPT ARGS`` from here; under torchrun and srun, their line in front; main
    called in-process with argv names the script, not the program that called it."""
    _, c = contract
    script = tmp_path / "sub" / "bench.py"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "--sizes", "1K 4K"])
    assert c["command_line"]() == "python sub/bench.py --sizes '1K 4K'"
    assert c["command_line"](["--x"], "bench.py") == "python sub/bench.py --x"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest", "-k", "x"])
    assert c["command_line"](["--x"], "bench.py") == "python bench.py --x"
    monkeypatch.setattr(sys, "argv", [str(script), "--x"])
    _launch_env(monkeypatch, {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "2",
                              "TORCHELASTIC_RUN_ID": "1", "MASTER_ADDR": "h", "MASTER_PORT": "2"})
    assert c["Launch"]().command() == "torchrun --nnodes 2 --nproc-per-node 2 sub/bench.py --x"
    _launch_env(monkeypatch, {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "MASTER_ADDR": "h", "MASTER_PORT": "2"})
    assert c["Launch"]().command() == "srun --ntasks 4 python sub/bench.py --x"


def test_the_envelope_is_what_the_schema_asks_for(contract, monkeypatch):
    """benchmark, schema_version, date_utc, command, versions and device, in that order, valid
    against tools/schemas/envelope.schema.json once the script adds its results."""
    import datetime
    import platform
    import re

    from jsonschema import Draft202012Validator
    _, c = contract
    monkeypatch.setattr(sys, "argv", ["mamf_finder.py", "--m", "256"])
    doc = {**c["envelope"]("mamf_finder", "NVIDIA H100", {"torch": "2.9.0"}), "results": []}
    assert list(doc) == ["benchmark", "schema_version", "date_utc", "command", "versions", "device", "results"]
    assert doc["command"] == "python mamf_finder.py --m 256" and doc["device"] == "NVIDIA H100"
    assert doc["versions"] == {"python": platform.python_version(), "torch": "2.9.0"}
    schema = json.loads((REPO / "tools" / "schemas" / "envelope.schema.json").read_text())
    assert list(Draft202012Validator(schema).iter_errors(doc)) == []
    assert c["envelope"]("x", None, command="torchrun x.py")["command"] == "torchrun x.py"
    stamp = c["date_utc"]()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    now = datetime.datetime.now(datetime.UTC)
    assert abs((datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
                - now).total_seconds()) < 5
