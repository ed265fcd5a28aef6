"""Inputs that are not ordinary files (issue 30): JSON nested 100,000 deep or holding a 5,000-digit
number, /dev/zero, a FIFO with no writer, and a pipe (`<(cmd)`), given to every script option that
reads a JSON document. Each answers in one line naming the option and the file, within its bound;
the pipe is read. The scripts share one reader, the script contract's read_input and parse_json
(tools/script_contract.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

CARRIERS = sorted(p for p in (REPO / "scripts").rglob("*.py") if "\ndef read_input(" in p.read_text(encoding="utf-8"))
H100 = str(REPO / "results" / "compute" / "mamf_finder-h100.json")

# script, arguments with {input} for the file under test, the option the error names
READERS = [
    ("inference/kv_cache_calculator.py", ["--config", "{input}", "--params", "1B"], "--config"),
    ("models/model_calculator.py", ["--config", "{input}"], "--config"),
    ("debug/shrink_model.py", ["--config", "{input}"], "--config"),
    ("inference/serving_simulator.py", ["--fit", "{input}"], "--fit"),
    ("debug/activation_diff.py", ["compare", "{input}", "{input}"], "run_a"),
    ("debug/trace_summary.py", ["{input}"], "trace"),
    ("compute/upgrade_cost.py", ["--params", "7e9", "--tokens", "1e12", "--device", "h100",
                                 "--mamf-json", "{input}", "--usd-per-hour", "3"], "--mamf-json"),
    ("compute/upgrade_cost.py", ["--params", "7e9", "--breakdown", "{input}", "--device", "a:1:1",
                                 "--mem-gbps", "1", "--link-gbps", "1"], "--breakdown"),
]
# A JSON document read from inside a folder option: script, arguments, the document, the other files
# the folder needs, how the error line names the document (what follows is the reader's reason). Its
# name is fixed, so no /dev/zero here: mx_quantize's own table gives it a FIFO. make_tiny_model.py
# reads JSON only in its Python API (TinyLM.from_dir, CharTokenizer.load), through no option:
# tests/debug/test_make_tiny_model.py gives those the same files.
IN_FOLDERS = [
    ("training/mx_quantize.py", ["--checkpoint", "ck"], "ck/config.json", {"ck/model.pt": "x"},
     r"--checkpoint: ck/config\.json is not a model config \("),
]
# JSON Lines corpora: a bad line is named by file and line number
CORPORA = [("training/minhash_dedup.py", ["{input}"]), ("training/text_quality_filters.py", ["{input}"])]

BAD = {"deep": "[" * 100_000, "huge-number": "1" * 5000}


def test_every_reader_carries_the_contracts_read_input():
    """The readers' read_input is the contract's (tools/script_contract.py, generated into each
    script that calls it; tests/test_script_contract.py keeps the copies what sync writes)."""
    readers = {script for script, _, _ in READERS} | {script for script, *_ in IN_FOLDERS}
    assert readers <= {p.relative_to(REPO / "scripts").as_posix() for p in CARRIERS}


MESSAGES = {"deep": "nested too deeply to be JSON data", "huge-number": r"not valid JSON \(Exceeds the limit"}


def cases():
    for script, args, option in READERS:
        for name, content in BAD.items():
            yield script, Case(name, [a.replace("{input}", "f.json") for a in args],
                               rf"{option} f\.json: {MESSAGES[name]}", files={"f.json": content})
        yield script, Case("dev-zero", [a.replace("{input}", "/dev/zero") for a in args],
                           rf"{option} /dev/zero: is not a regular file or a pipe")
    for script, args, document, others, named in IN_FOLDERS:
        for name, content in BAD.items():
            yield script, Case(name, args, named + MESSAGES[name], files={**others, document: content})
    for script, args in CORPORA:
        for name, content in BAD.items():
            yield script, Case(name, [a.replace("{input}", "c.jsonl") for a in args], r"c\.jsonl:1: not valid JSON",
                               files={"c.jsonl": content + "\n"})


CASES = list(cases())


@pytest.mark.parametrize("script, case", CASES, ids=[f"{s.split('/')[1][:-3]}-{c.id}" for s, c in CASES])
def test_bad_input(script, case, tmp_path):
    check_refused(script, case, tmp_path)


def test_a_fifo_without_writer_is_refused_within_the_wait(tmp_path):
    module = import_script(CARRIERS[0])
    os.mkfifo(tmp_path / "pipe")
    start = time.monotonic()
    with pytest.raises(module.ScriptError, match=r"^--config .*/pipe: a pipe that gave no end of data within 0\.5 s$"):
        module.read_input(str(tmp_path / "pipe"), "--config", wait_s=0.5)
    assert time.monotonic() - start < 5


def test_a_pipe_is_read_to_its_end_and_bounded(tmp_path):
    module = import_script(CARRIERS[0])
    os.mkfifo(tmp_path / "pipe")

    def write(data: bytes):
        try:
            with open(tmp_path / "pipe", "wb") as f:  # blocks until the reader opens it
                for i in range(0, len(data), 1000):
                    f.write(data[i:i + 1000])
                    f.flush()
        except BrokenPipeError:  # the reader stopped at its limit
            pass
    threading.Thread(target=write, args=(b'{"a": 1}' * 1000,), daemon=True).start()
    assert module.read_input(str(tmp_path / "pipe"), "--x", wait_s=30) == b'{"a": 1}' * 1000
    threading.Thread(target=write, args=(b"x" * (3 << 20),), daemon=True).start()
    with pytest.raises(module.ScriptError, match=r"larger than 2 MiB"):
        module.read_input(str(tmp_path / "pipe"), "--x", limit=2 << 20, wait_s=30)


def test_process_substitution_is_read(tmp_path):
    """`--config <(cat config.json)`: the natural way to pass a command's output is a pipe."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
                      '"intermediate_size": 128, "vocab_size": 256}')
    script = REPO / "scripts" / "models" / "model_calculator.py"
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" "{script}" --config <(cat "{config}")'],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "total" in proc.stdout, proc.stderr


def test_node_health_check_reads_saved_outputs_from_pipes(tmp_path):
    """`--nvidia-smi-xml <(nvidia-smi -q -x)`: each saved output may come from a pipe."""
    fixtures = REPO / "tests" / "debug" / "fixtures"
    xml = sorted((fixtures / "nvidia-smi").glob("*.xml"))[0]
    dmesg, nvlink = fixtures / "dmesg" / "clean.txt", fixtures / "nvlink" / "h100x8-ok.txt"
    script = REPO / "scripts" / "debug" / "node_health_check.py"
    line = (f'"{sys.executable}" "{script}" --nvidia-smi-xml <(cat "{xml}") --dmesg <(cat "{dmesg}") '
            f'--nvlink-status <(cat "{nvlink}") --json "{tmp_path / "r.json"}"')
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
    assert "error:" not in proc.stderr, proc.stderr
    assert (tmp_path / "r.json").exists()
