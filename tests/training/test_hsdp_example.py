"""Tests of scripts/training/hsdp_example.py: FSDP2 over a 1-D mesh and HSDP over a 2-D (replicate
x shard) mesh on 4 CPU ranks (gloo), 2 "nodes" of 2, against an unsharded model trained in one
process; the parameters each rank holds and the bytes FSDP2 hands to each collective against
communication_volume.py's HSDP and ZeRO-3 rows; careless input."""

from __future__ import annotations

import json

import pytest

from tests import preloaded
from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, free_port, import_script, require_ranks
from tools.results import problems

pytestmark = RANKS  # starts two or more ranks

SCRIPT = REPO / "scripts" / "training" / "hsdp_example.py"
WIDTH, LAYERS = 8, 2          # small: the ranks' time is start-up and the rendezvous


def run_ranks(world: int, args: list[str], tmp_path) -> list:
    """``world`` ranks forked from the torch-preloaded server with torchrun's variables, as
    LOCAL_WORLD_SIZE = 2: two "nodes" of two ranks."""
    require_ranks(f"{world} ranks of {SCRIPT.name}")
    port = str(free_port())
    procs = [preloaded.start(SCRIPT, args, tmp_path, clean_env({
        "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r % 2), "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})) for r in range(world)]
    return [p.wait(120) for p in procs]


def test_fsdp_and_hsdp_equal_the_unsharded_model(tmp_path):
    out = tmp_path / "hsdp.json"
    done = run_ranks(4, ["--width", str(WIDTH), "--layers", str(LAYERS), "--steps", "2",
                         "--json", str(out)], tmp_path)
    assert [d.returncode for d in done] == [0] * 4, "\n".join(d.stdout + d.stderr for d in done)
    report = json.loads(out.read_text())
    assert problems(report, "--json") == []
    assert report["settings"]["shard"] == 2                      # LOCAL_WORLD_SIZE: one "node"
    rows = report["results"]
    assert sorted((r["layout"], r["rank"]) for r in rows) == sorted(
        (lay, r) for lay in ("fsdp", "hsdp") for r in range(4))
    assert {r["mesh"] for r in rows if r["layout"] == "hsdp"} == {"2x2"}
    # after two AdamW steps every rank's parameters equal the one-process model's (fp32)
    for r in rows:
        assert r["max_abs_err"] <= 1e-5, r
    assert "8 of 8 ranks within 1e-05" in done[0].stdout
    assert "AG bytes" in done[0].stdout
    # each rank holds 1/W of the parameters under FSDP, 1/S under HSDP
    psi = LAYERS * (WIDTH * WIDTH + WIDTH)
    for r in rows:
        assert r["params_total"] == psi
        assert r["params_held"] == psi // (4 if r["layout"] == "fsdp" else 2)
    # the bytes FSDP2 handed to its collectives are communication_volume.py's rows (fp32, one
    # unit per layer, one micro-batch): ZeRO-3 over 4, and HSDP shard 2 x replicate 2
    cv = import_script(REPO / "scripts" / "training" / "communication_volume.py")
    common = dict(params=psi, layers=LAYERS, hidden=WIDTH, seq_len=1, dp=4, zero=3,
                  grad_bytes=4, param_bytes=4, node_ranks=2,
                  busbw_GBps={d: 1.0 for d in cv.DIMENSIONS})
    for layout, expect in (("fsdp", cv.volumes(**common)), ("hsdp", cv.volumes(hsdp=2, **common))):
        by_collective = {c: sum(e["sent_bytes"] for e in expect if e["collective"] == c)
                         for c in ("all_gather", "reduce_scatter", "all_reduce")}
        for r in (r for r in rows if r["layout"] == layout):
            got = {c: r[f"{c}_bytes_per_step"] for c in by_collective}
            assert got == pytest.approx(by_collective, rel=1e-12), (layout, got, by_collective)


FOUR = {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "{port}"}
BAD_INPUT = [
    Case("shard-not-dividing", ["--shard", "3"], r"--shard 3 does not divide the world size 4", env=FOUR),
    Case("width-not-divisible", ["--width", "6"], r"--width 6 is not divisible by the world size 4", env=FOUR),
    Case("shard-zero", ["--shard", "0"], "--shard: 0 must be >= 1"),
    Case("width-nan", ["--width", "nan"], "--width: 'nan' is not an integer"),
    Case("layers-huge", ["--layers", "100000"], "--layers: 100000 must be <= 256"),
    Case("steps-zero", ["--steps", "0"], "--steps: 0 must be >= 1"),
    Case("lr-inf", ["--lr", "inf"], "--lr: 'inf' is not a finite number"),
    Case("lr-zero", ["--lr", "0"], "--lr: 0 must be > 0"),
    Case("tolerance-negative", ["--tolerance=-1"], "--tolerance: -1 must be > 0"),
    Case("layout-unknown", ["--layout", "ddp"], "--layout: invalid choice: 'ddp'"),
    Case("json-onto-the-script", ["--json", "{script}"], "--json .*: is also an input"),
    *launcher_cases(["--steps", "1"], ["--timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("training/hsdp_example.py", case, tmp_path)
