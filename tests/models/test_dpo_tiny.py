"""Tests of scripts/models/dpo_tiny.py: a real DPO run on CPU, determinism and careless inputs.

Expected values come from the DPO loss itself, not from a run of the script: Rafailov et al. 2023,
https://arxiv.org/abs/2305.18290, Eq. 7, L = -log sigmoid(beta * (log pi/pi_ref)(y_w) - beta *
(log pi/pi_ref)(y_l)). At step 0 the policy is the reference, so both implicit rewards are 0 and
the loss is -log sigmoid(0) = ln 2 exactly. Training must then lower the loss and, on pairs from
documents it never saw, make the chosen completion's reward exceed the rejected one's (a positive
margin, accuracy above chance 0.5).
"""

from __future__ import annotations

import json
import math
import signal

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import interrupt_when

SCRIPT = "dpo_tiny.py"
# Settings of the learning test: about 15 s on one core (the defaults take about 30 s).
RUN = ["--sft-steps", "150", "--steps", "60", "--batch", "32", "--train-pairs", "4096",
       "--eval-pairs", "256", "--beta", "0.5", "--seed", "0"]
SMALL = ["--sft-steps", "5", "--steps", "4", "--batch", "4", "--train-pairs", "32",
         "--eval-pairs", "16", "--seed", "3"]


@pytest.fixture(scope="module")
def run(launch, tmp_path_factory):
    out = tmp_path_factory.mktemp("dpo") / "dpo.json"
    res = launch.python(SCRIPT, [*RUN, "--json", str(out)], timeout=120)
    assert res.returncode == 0, res.output
    return res, json.loads(out.read_text())


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_loss_starts_at_ln2(run):
    _, doc = run
    first = doc["log"][0]
    assert abs(first["loss"] - math.log(2)) < 1e-4
    assert abs(first["reward_chosen"]) < 1e-5 and abs(first["reward_rejected"]) < 1e-5
    start = doc["held_out"]["start"]
    assert abs(start["loss"] - math.log(2)) < 1e-4 and abs(start["margin"]) < 1e-5


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_loss_falls_and_margin_grows(run):
    res, doc = run
    losses = [e["loss"] for e in doc["log"]]
    assert len(losses) == 60
    assert sum(losses[-10:]) / 10 < math.log(2) - 0.05
    # the margin is the difference of the logged rewards
    for e in doc["log"]:
        assert e["margin"] == pytest.approx(e["reward_chosen"] - e["reward_rejected"], abs=1e-5)
    end, start = doc["held_out"]["end"], doc["held_out"]["start"]
    assert end["margin"] > start["margin"] and end["margin"] > 0
    assert end["accuracy"] > 0.5
    assert "held-out end" in res.stdout and "dpo_loss" in res.stdout


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_same_seed_same_json(launch, tmp_path):
    docs = []
    for name in ("a.json", "b.json"):
        res = launch.python(SCRIPT, [*SMALL, "--json", str(tmp_path / name)], timeout=60)
        assert res.returncode == 0, res.output
        doc = json.loads((tmp_path / name).read_text())
        doc.pop("elapsed_s")
        docs.append(doc)
    assert docs[0] == docs[1]
    assert len(docs[0]["log"]) == 4


@pytest.mark.slow
def test_ctrl_c_writes_partial_log(launch, tmp_path):
    out = tmp_path / "partial.json"
    res = interrupt_when(launch.scripts / SCRIPT,
                         [*SMALL[:2], "--steps", "100000", "--batch", "4", "--train-pairs", "32",
                          "--eval-pairs", "16", "--json", str(out)],
                         lambda lines: lines[-1].split()[:1] == ["0"], signal.SIGINT)
    assert res.returncode == 130, res.stderr
    assert launch.error_lines(res.stderr) == ["dpo_tiny.py: error: interrupted"]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and 1 <= len(doc["log"]) < 100000
    assert doc["log"][0]["loss"] == pytest.approx(math.log(2), abs=1e-4)


GOOD = '{"text": "' + "the lantern above the composer was repaired slowly. " * 4 + '"}\n'
CASES = [
    Case("corpus-missing", ["--corpus", "{tmp}/nope.jsonl"], r"--corpus .*nope\.jsonl: no such file"),
    Case("corpus-empty", ["--corpus", "empty.jsonl"], r"empty\.jsonl: is empty",
         files={"empty.jsonl": "\n\n"}),
    Case("corpus-not-json", ["--corpus", "bad.jsonl"], r"bad\.jsonl:3: not JSON",
         files={"bad.jsonl": GOOD * 2 + "not json\n"}),
    Case("corpus-too-small", ["--corpus", "small.jsonl"], r"small\.jsonl: 2 documents",
         files={"small.jsonl": GOOD * 2}),
    Case("beta-nan", ["--beta", "nan"], r"--beta.*not a finite number"),
    Case("beta-zero", ["--beta", "0"], r"--beta.*must be > 0"),
    Case("beta-negative", ["--beta", "-1"], r"--beta.*must be > 0"),
    Case("steps-zero", ["--steps", "0"], r"--steps.*must be >= 1"),
    Case("steps-huge", ["--steps", "1000000000000"], r"--steps.*must be <= 100000"),
    Case("json-is-corpus", ["--corpus", "c.jsonl", "--json", "c.jsonl"], r"--json c\.jsonl: is also an input",
         files={"c.jsonl": GOOD * 30}),
    Case("corpus-is-folder", ["--corpus", "{tmp}"], r"--corpus .*: is not a regular file"),
    Case("corpus-path-empty", ["--corpus", ""], r"--corpus: must not be empty"),
    Case("lr-inf", ["--lr", "inf"], r"--lr.*not a finite number"),
    Case("heads-not-dividing-width", ["--width", "64", "--heads", "5"], r"--heads \(5\) must divide --width \(64\)"),
]


# Issue 30: a corpus that is not a file, or holds bad values: one line naming the file and line.
GOOD_LINE = '{"text": "a document long enough"}\n'
CORPUS_CASES = [
    Case("corpus-dev-zero", ["--corpus", "/dev/zero"], r"--corpus /dev/zero: is not a regular file"),
    Case("corpus-fifo", ["--corpus", "c.fifo"], r"--corpus c\.fifo: is not a regular file", fifos=("c.fifo",)),
    Case("corpus-deep-json", ["--corpus", "c.jsonl"], r"c\.jsonl:2: not JSON",
         files={"c.jsonl": GOOD_LINE + "[" * 100_000 + "\n"}),
    Case("corpus-huge-number", ["--corpus", "c.jsonl"], r"c\.jsonl:2: not JSON \(Exceeds the limit",
         files={"c.jsonl": GOOD_LINE + '{"text": "x", "n": ' + "1" * 5000 + "}\n"}),
    Case("corpus-record-without-text", ["--corpus", "c.jsonl"], r"c\.jsonl:2: not a JSON object with a string \"text\"",
         files={"c.jsonl": GOOD_LINE + '{"body": "x"}\n'}),
    Case("corpus-text-infinity", ["--corpus", "c.jsonl"], r"c\.jsonl:2: not a JSON object with a string \"text\"",
         files={"c.jsonl": GOOD_LINE + '{"text": Infinity}\n'}),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES + CORPUS_CASES])
def test_bad_input_refused(case, tmp_path):
    check_refused(f"models/{SCRIPT}", case, tmp_path)


def test_corpus_size_bounds(tmp_path):
    """A corpus over 256 MiB is refused before it is read (a sparse file here), and a line over
    16 M characters as soon as it is."""
    with open(tmp_path / "big.jsonl", "wb") as f:
        f.truncate((256 << 20) + 1)
    check_refused(f"models/{SCRIPT}", Case("corpus-over-256-mib", ["--corpus", "big.jsonl"],
                                            r"--corpus big\.jsonl: larger than 256 MiB"), tmp_path)
    (tmp_path / "long.jsonl").write_bytes(GOOD_LINE.encode() + b'{"text": "' + b"a" * (17 << 20) + b'"}\n')
    check_refused(f"models/{SCRIPT}", Case("line-over-16-m", ["--corpus", "long.jsonl"],
                                            r"long\.jsonl:2: a line of more than 16 M characters"), tmp_path)
