"""Tests of scripts/compute/step_time_breakdown.py: a training step split into attention, MLP,
communication, optimizer and other time.

The decomposition is checked on a real run: the isolated parts add up to the measured step
within TOLERANCE on one CPU process, "other" is exactly the step minus the parts, the fractions
sum to 1 and the file validates against tools/schemas/step_time_breakdown.schema.json. A 2-rank
gloo run must time a nonzero all-reduce. The arithmetic of ``summarize`` is checked on
hand-made timings. A run stopped by SIGTERM still writes the figures of its completed rounds.
"""

from __future__ import annotations

import json
import re
import signal

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import ONE_PROCESS, RANKS, REPO, import_script, interrupt_when
from tools.results import problems

SCRIPT = "step_time_breakdown.py"
# Sum of the isolated parts over the measured step, on one CPU process of a machine that other
# jobs share: the parts miss the norms, embedding and loss (so fall short) and pay their own
# synchronization (so can overshoot); +-35% holds with room on the 2-core build machine.
TOLERANCE = 0.35
SMALL = ["--device", "cpu", "--hidden", "192", "--layers", "2", "--heads", "2", "--seq-len", "128", "--vocab", "256",
         "--warmup", "1", "--iters", "7"]


@pytest.fixture(scope="module")
def stb():
    return import_script(REPO / "scripts" / "compute" / SCRIPT)


def test_summarize_by_hand(stb):
    # medians 10, 20, 5, 5 ms over a 50 ms step: the parts are 40 ms, other 10 ms (20%)
    times = {"attention": [0.009, 0.010, 0.012], "mlp": [0.020] * 3, "communication": [0.005] * 3,
             "optimizer": [0.004, 0.005, 0.006], "step": [0.049, 0.050, 0.060]}
    s = stb.summarize(times)
    assert s["sum_of_parts_ms"] == pytest.approx(40)
    assert s["other_ms"] == pytest.approx(10)
    assert s["fractions"] == pytest.approx({"attention": 0.2, "mlp": 0.4, "communication": 0.1,
                                            "optimizer": 0.1, "other": 0.2})
    assert (s["parts"]["attention"]["min_ms"], s["parts"]["attention"]["max_ms"]) == \
        pytest.approx((9, 12))
    # parts longer than the step (60 ms of parts, 50 ms step): other is negative in ms, 0 as a
    # share, and the parts share the whole
    times["mlp"] = [0.040] * 3
    s = stb.summarize(times)
    assert s["other_ms"] == pytest.approx(-10)
    assert s["fractions"]["other"] == 0
    assert s["fractions"]["mlp"] == pytest.approx(40 / 60)
    assert sum(s["fractions"].values()) == pytest.approx(1)


@pytest.mark.slow  # a real run of 8 rounds: ~3 s
def test_parts_add_up_to_the_step(launch, tmp_path):
    out = tmp_path / "b.json"
    res = launch.python(SCRIPT, [*SMALL, "--json", str(out)], timeout=60)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc["interrupted"] is False and "iters_done" not in doc
    rows = {r["part"]: r for r in doc["results"]}
    parts = sum(rows[p]["median_ms"] for p in ("attention", "mlp", "communication", "optimizer"))
    step = rows["step"]["median_ms"]
    assert abs(parts / step - 1) <= TOLERANCE, res.stdout
    assert doc["other_ms"] == pytest.approx(step - parts)
    assert sum(doc["fractions"].values()) == pytest.approx(1)
    assert rows["communication"]["median_ms"] == 0 and doc["world_size"] == 1
    assert "communication: 0, none to do" in res.stdout and "\nother " in res.stdout
    for p in ("attention", "mlp", "optimizer", "step"):
        assert 0 < rows[p]["min_ms"] <= rows[p]["median_ms"] <= rows[p]["max_ms"]


@RANKS
@pytest.mark.slow  # torchrun starts two interpreters that import torch: ~6 s
def test_two_ranks_time_a_nonzero_all_reduce(launch, tmp_path):
    out = tmp_path / "b.json"
    res = launch.torchrun(SCRIPT, [*SMALL[:-2], "--iters", "3",
                                   "--json", str(out)], timeout=90)
    assert res.returncode in (0, 3), res.output  # 3: the parts overshoot on a loaded machine
    doc = json.loads(out.read_text())
    assert problems(doc) == []
    assert (doc["world_size"], doc["backend"]) == (2, "gloo")
    comm = next(r for r in doc["results"] if r["part"] == "communication")
    assert comm["min_ms"] > 0 and doc["fractions"]["communication"] > 0
    # one flat fp32 buffer of every gradient: 4 bytes per parameter
    assert doc["grad_bytes"] == 4 * doc["params"]
    assert "2 ranks (gloo)" in res.stdout


@pytest.mark.slow  # waits for the first timed round before signalling it: ~4 s
def test_sigterm_writes_the_rounds_done(tmp_path):
    """SIGTERM among the rounds: 143, one line, and the figures of the rounds completed in a
    valid file marked interrupted."""
    out = tmp_path / "b.json"
    args = ["--device", "cpu", "--hidden", "32", "--layers", "1", "--heads", "2", "--seq-len", "8",
            "--vocab", "64", "--warmup", "0", "--iters", "10000", "--json", str(out)]
    res = interrupt_when(REPO / "scripts/compute" / SCRIPT, args,
                         lambda lines: lines[-1].startswith("# round 1 of 10000:"), signal.SIGTERM)
    assert res.returncode == 143, res.output
    assert re.fullmatch(rf"{SCRIPT}: error: interrupted by SIGTERM after \d+ of 10000 rounds\n",
                        res.stderr), res.stderr
    doc = json.loads(out.read_text())
    assert problems(doc) == [] and doc["interrupted"] is True
    printed = sum(line.startswith("# round ") for line in res.stdout.splitlines())
    # a round is kept, then printed: SIGTERM may fall between the two
    assert 1 <= printed <= doc["iters_done"] <= printed + 1 < 10000
    step = next(r for r in doc["results"] if r["part"] == "step")
    assert 0 < step["min_ms"] <= step["median_ms"] <= step["max_ms"]
    assert sum(doc["fractions"].values()) == pytest.approx(1)


BAD_INPUT = [
    Case("heads-do-not-divide", ["--hidden", "100", "--heads", "3"],
         r"--hidden 100 is not a multiple of --heads 3"),
    Case("iters-zero", ["--iters", "0"], r"--iters: 0 must be >= 1"),
    Case("hidden-negative", ["--hidden", "-64"], r"--hidden: -64 must be >= 1"),
    Case("seq-len-nan", ["--seq-len", "nan"], r"--seq-len: 'nan' is not"),
    Case("layers-text", ["--layers", "four"], r"--layers: 'four' is not"),
    Case("shape-too-large", ["--hidden", "65536", "--seq-len", "65536", "--heads", "1"],
         r"--batch x --seq-len x --ffn is over"),
    Case("tolerance-zero", ["--tolerance", "0"], r"--tolerance: 0 must be > 0"),
    Case("device-unknown", ["--device", "tpu"], r"--device: invalid choice: 'tpu'"),
    Case("dtype-unknown", ["--dtype", "fp8"], r"--dtype: invalid choice: 'fp8'"),
    Case("cuda-absent", ["--device", "cuda", "--iters", "1"], r"--device cuda, but torch sees no CUDA",
         status=1, env={"CUDA_VISIBLE_DEVICES": ""}),
    Case("world-without-master", ["--device", "cpu"], r"MASTER_ADDR and MASTER_PORT must be set",
         env={"RANK": "0", "WORLD_SIZE": "2"}),
    Case("rank-not-a-number", ["--device", "cpu"], r"RANK", env={"RANK": "zero", "WORLD_SIZE": "2"}),
    Case("abbreviated-option", ["--hid", "64"], r"unrecognized arguments: --hid"),
]


@ONE_PROCESS
@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_careless_input_is_refused(case, tmp_path):
    check_refused(f"compute/{SCRIPT}", case, tmp_path)
