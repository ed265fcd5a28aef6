"""Tests of scripts/training/context_parallel.py: ring attention and Ulysses on 2 and 4 CPU ranks
(gloo) against full attention, forward and backward, with and without a causal mask; the bytes
each rank sends against the page's formulas; the zigzag layout's balance; careless input."""

from __future__ import annotations

import json

import pytest

from tests import preloaded
from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, free_port, require_ranks
from tools.results import problems

pytestmark = RANKS  # starts two or more ranks

SCRIPT = REPO / "scripts" / "training" / "context_parallel.py"
SEQ, HEADS, DIM = 32, 4, 8   # small: the ranks' time is start-up, not attention


def run_ranks(world: int, args: list[str], tmp_path) -> list:
    """``world`` ranks of the script, forked from the torch-preloaded server with the variables
    torchrun sets (a torchrun launch pays an interpreter and an ``import torch`` per rank)."""
    require_ranks(f"{world} ranks of {SCRIPT.name}")
    port = str(free_port())
    procs = [preloaded.start(SCRIPT, args, tmp_path, clean_env({
        "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})) for r in range(world)]
    return [p.wait(90) for p in procs]


def check_run(world: int, layouts: list[str], tmp_path) -> list[dict]:
    out = tmp_path / "cp.json"
    done = run_ranks(world, ["--check", "--seq", str(SEQ), "--heads", str(HEADS), "--head-dim", str(DIM),
                             "--repeat", "1", "--layout", *layouts, "--json", str(out)], tmp_path)
    assert [d.returncode for d in done] == [0] * world, "\n".join(d.stdout + d.stderr for d in done)
    report = json.loads(out.read_text())
    assert problems(report, "--json") == []
    rows = report["results"]
    cases = {(r["method"], r["layout"], r["causal"]) for r in rows}
    assert cases == {("ring", lay, c) for lay in layouts for c in (False, True)} | \
        {("ulysses", "contiguous", c) for c in (False, True)}
    assert sorted(r["rank"] for r in rows) == sorted(list(range(world)) * len(cases))
    # every rank's output and the gradients of q, k, v equal full attention (float64) within fp32's
    # tolerance; the line rank 0 prints says so
    for r in rows:
        for name in ("out", "dq", "dk", "dv"):
            assert r[f"max_abs_err_{name}"] <= 1e-4, r
    assert f"{4 * len(rows)} of {4 * len(rows)} checks within 0.0001" in done[0].stdout
    # bytes sent per rank, as the page derives them: a k or v slice is B*H*(S/W)*D fp32 values
    kv = HEADS * SEQ // world * DIM * 4
    for r in rows:
        if r["method"] == "ring":   # k, v to the next rank W-1 times; backward: again, plus dk, dv W times
            assert (r["bytes_sent_fwd"], r["bytes_sent_bwd"]) == (2 * kv * (world - 1), 2 * kv * (2 * world - 1))
        else:                       # 4 all-to-alls each way, each keeping 1/W of the slice at home
            assert r["bytes_sent_fwd"] == r["bytes_sent_bwd"] == 4 * kv * (world - 1) // world
    return rows


def pairs(rows, method, layout, causal):
    return [r["score_pairs"] for r in sorted(rows, key=lambda r: r["rank"])
            if (r["method"], r["layout"], r["causal"]) == (method, layout, causal)]


def test_two_ranks_both_layouts(tmp_path):
    rows = check_run(2, ["zigzag", "contiguous"], tmp_path)
    c = SEQ // 2
    # under a causal mask the contiguous ring is unbalanced (rank 1 sees both halves), zigzag not
    assert pairs(rows, "ring", "contiguous", True) == [HEADS * c * (c + 1) // 2, HEADS * (c * c + c * (c + 1) // 2)]
    assert len(set(pairs(rows, "ring", "zigzag", True))) == 1
    assert sum(pairs(rows, "ring", "zigzag", True)) == HEADS * SEQ * (SEQ + 1) // 2


def test_four_ranks(tmp_path):
    rows = check_run(4, ["zigzag"], tmp_path)
    for method, layout in (("ring", "zigzag"), ("ulysses", "contiguous")):
        assert pairs(rows, method, layout, True) == [HEADS * SEQ * (SEQ + 1) // 2 // 4] * 4
        assert pairs(rows, method, layout, False) == [HEADS * SEQ * SEQ // 4] * 4


@ONE_PROCESS
def test_check_reports_an_error_above_the_tolerance(tmp_path):
    done = preloaded.run(SCRIPT, ["--check", "--seq", "8", "--repeat", "1", "--tolerance", "1e-30"],
                         tmp_path, clean_env(), timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "0 of 16 checks within 1e-30" in done.stdout


FOUR = {"RANK": "0", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}
BAD_INPUT = [
    Case("heads-not-divisible", ["--heads", "6"], r"--heads 6 is not divisible by the world size 4", env=FOUR),
    Case("seq-not-divisible-zigzag", ["--seq", "36"], r"--seq 36 is not divisible by 8 \(zigzag", env=FOUR),
    Case("seq-not-divisible-contiguous", ["--method", "ulysses", "--seq", "6"],
         r"--seq 6 is not divisible by 4 \(each rank", env=FOUR),
    Case("seq-zero", ["--seq", "0"], "--seq: 0 must be >= 1"),
    Case("seq-nan", ["--seq", "nan"], "--seq: 'nan' is not an integer"),
    Case("seq-huge", ["--seq", "99999999"], r"--seq: 99999999 must be <= 1e\+06"),
    Case("heads-negative", ["--heads", "-2"], "--heads: -2 must be >= 1"),
    Case("repeat-zero", ["--repeat", "0"], "--repeat: 0 must be >= 1"),
    Case("tolerance-nan", ["--tolerance", "nan"], "--tolerance: 'nan' is not a finite number"),
    Case("tolerance-zero", ["--tolerance", "0"], "--tolerance: 0 must be > 0"),
    Case("timeout-inf", ["--timeout-s", "inf"], "--timeout-s: 'inf' is not a finite number"),
    Case("method-unknown", ["--method", "tree"], "--method: invalid choice: 'tree'"),
    Case("check-too-large", ["--check", "--seq", "65536"], "--check computes full attention .* over 4 GiB"),
    Case("json-onto-the-script", ["--json", "{script}"], "--json .*: is also an input"),
    *launcher_cases(["--seq", "8"], ["--timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("training/context_parallel.py", case, tmp_path)
