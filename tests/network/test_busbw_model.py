"""Tests of scripts/network/busbw_model.py: hand-computed cases of the alpha-beta model, its
agreement with the Network chapter's ring and tree formulas when a node has one GPU (the
notebook notebooks/network/allreduce_cost_model.py uses the same ones), the CLI's table and
--json, and careless inputs. Everything runs in-process except the CLI and bad-input cases."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script
from tools.results import problems

SCRIPT = "busbw_model.py"
GB = 1e9


@pytest.fixture(scope="module")
def bm(launch):
    return import_script(launch.scripts / SCRIPT)


def run(bm, algo, nodes, g=8, size=2**30, intra=450.0, inter=50.0, a_in=1.0, a_out=5.0):
    return bm.predict(algo, nodes, g, size, intra, inter, a_in, a_out)


def test_one_node_is_the_chapters_ring_formula(bm):
    """1 node of 8: T = 2(n-1) alpha + 2(n-1)/n S/B, all on the intra-node link."""
    S, B, a = 2**30, 450 * GB, 1e-6
    r = run(bm, "ring", 1, size=S, a_out=99.0)  # the inter-node alpha must not matter
    assert r["time_us"] == pytest.approx((2 * 7 * a + 2 * 7 / 8 * S / B) * 1e6, rel=1e-12)
    assert r["latency_us"] == pytest.approx(14.0) and r["limited_by"] == "intra-node"
    assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * 7 / 8, rel=1e-12)


@pytest.mark.parametrize("n", [3, 4, 7, 16, 100, 1024])
def test_one_gpu_per_node_reduces_to_the_chapters_formulas(bm, n):
    """With g = 1 the model is the page's T_ring and T_tree (notebook: t_ring, t_tree)."""
    S, B, a = 3e8, 40 * GB, 10e-6
    ring = run(bm, "ring", n, g=1, size=S, inter=40.0, a_out=10.0, intra=1.0, a_in=123.0)
    tree = run(bm, "tree", n, g=1, size=S, inter=40.0, a_out=10.0, intra=1.0, a_in=123.0)
    assert ring["time_us"] == pytest.approx((2 * (n - 1) * a + 2 * (n - 1) / n * S / B) * 1e6, rel=1e-12)
    assert tree["time_us"] == pytest.approx((2 * math.ceil(math.log2(n)) * a + 2 * S / B) * 1e6, rel=1e-12)


def test_ring_busbw_approaches_the_link_rate_for_large_messages(bm):
    # one node: the intra-node rate
    assert run(bm, "ring", 1, size=2**50)["busbw_GBps"] == pytest.approx(450, rel=1e-6)
    # across nodes, one NIC per GPU: g x the per-GPU NIC rate (8 x 50), below intra x g/(g-1)
    big = run(bm, "ring", 4, size=2**50)
    assert big["busbw_GBps"] == pytest.approx(400, rel=1e-6) and big["limited_by"] == "inter-node"
    # a slow intra-node link takes over: 100 x 8/7
    slow = run(bm, "ring", 4, size=2**50, intra=100.0)
    assert slow["busbw_GBps"] == pytest.approx(100 * 8 / 7, rel=1e-6) and slow["limited_by"] == "intra-node"
    # busbw stays below the rate for every finite size, and rises with the size
    values = [run(bm, "ring", 4, size=2**k)["busbw_GBps"] for k in range(10, 41, 5)]
    assert values == sorted(values) and values[-1] < 400


def test_small_messages_are_latency_bound(bm):
    """8 bytes on 64 nodes of 8: the time is the latency term, 2(512-64) x 1 us + 2 x 63 x 5 us."""
    r = run(bm, "ring", 64, size=8)
    assert r["limited_by"] == "latency"
    assert r["latency_us"] == pytest.approx(2 * 448 * 1 + 2 * 63 * 5)
    assert r["time_us"] == pytest.approx(r["latency_us"], rel=1e-6)
    # doubling a latency-bound message barely changes the time
    assert run(bm, "ring", 64, size=16)["time_us"] == pytest.approx(r["time_us"], rel=1e-6)
    # tree: 2(g-1) intra steps and 2 log2(64) = 12 inter steps
    assert run(bm, "tree", 64, size=8)["latency_us"] == pytest.approx(2 * 7 * 1 + 12 * 5)


def test_two_nodes_tree_exceeds_the_network_rate(bm):
    """Each node of a two-node double tree sends S, not 2S (why NCCL devs force RING on 2 nodes)."""
    r = run(bm, "tree", 2, size=2**50, intra=10_000.0)
    assert r["busbw_GBps"] == pytest.approx(2 * 400 * 15 / 16, rel=1e-6)
    assert r["busbw_GBps"] > run(bm, "ring", 2, size=2**50, intra=10_000.0)["busbw_GBps"]


def test_tree_and_ring_cross_over(bm):
    """g = 1: the crossover is the notebook's S* = n(n-1-ceil(log2 n)) alpha beta; with g = 8 a
    crossover exists too: tree faster below it, ring above it."""
    for n in (8, 64, 512):
        s_star = bm.crossover_bytes(n, 1, 1.0, 50.0, 0.0, 5.0)
        assert s_star == pytest.approx(n * (n - 1 - math.ceil(math.log2(n))) * 5e-6 * 50e9, rel=1e-9)
    s = bm.crossover_bytes(4, 8, 450.0, 50.0, 1.0, 5.0)
    assert s is not None
    assert run(bm, "tree", 4, size=s / 4)["time_us"] < run(bm, "ring", 4, size=s / 4)["time_us"]
    assert run(bm, "tree", 4, size=s * 4)["time_us"] > run(bm, "ring", 4, size=s * 4)["time_us"]
    # one node of 8: the same latency, and the ring sends less: no crossover
    assert bm.crossover_bytes(1, 8, 450.0, 50.0, 1.0, 5.0) is None


def test_ring_latency_grows_linearly_and_tree_logarithmically(bm):
    ring = [run(bm, "ring", N, size=8)["latency_us"] for N in (16, 32, 64)]
    tree = [run(bm, "tree", N, size=8)["latency_us"] for N in (16, 32, 64)]
    assert ring[2] - ring[1] == pytest.approx(2 * (ring[1] - ring[0]))
    assert tree[2] - tree[1] == pytest.approx(tree[1] - tree[0]) == pytest.approx(2 * 5)


def test_innet_sends_each_buffer_once_plus_its_share(bm):
    """NVLS on 8 GPUs: each sends S + S/8 over NVLink, so algbw is 8/9 of the link rate and
    busbw 14/9 of it, above the link rate (the network chapter's derivation)."""
    one = run(bm, "innet", 1, size=2**50)
    assert one["algbw_GBps"] == pytest.approx(450 * 8 / 9, rel=1e-6)
    assert one["busbw_GBps"] == pytest.approx(450 * 14 / 9, rel=1e-6)  # 700, above the link rate
    assert one["limited_by"] == "intra-node"
    # across nodes: NVLink carries 9/8 S per GPU, the NIC S/8; here 450 x 8/9 = 8 x 50, a tie
    many = run(bm, "innet", 16, size=2**50)
    assert many["algbw_GBps"] == pytest.approx(400, rel=1e-6)
    slow_nic = run(bm, "innet", 16, size=2**50, inter=25.0)
    assert slow_nic["algbw_GBps"] == pytest.approx(8 * 25, rel=1e-6)
    assert slow_nic["limited_by"] == "inter-node"
    # one GPU per node: SHARP alone, S up through the NIC and S back
    assert run(bm, "innet", 4, g=1, size=2**50)["algbw_GBps"] == pytest.approx(50, rel=1e-6)
    assert many["latency_us"] == run(bm, "innet", 1024, size=2**50)["latency_us"] == pytest.approx(6.0)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 72])
def test_innet_matches_the_nvls_formula_of_nccl_tests_pr_239(bm, n):
    """One NVLink domain of n GPUs, link rate B: NCCL's maintainer gives algbw = busbw x n/(n+1)
    for NVLS, busbw there being the bandwidth on the links
    (https://github.com/NVIDIA/nccl-tests/pull/239), and nccl-tests multiplies algbw by 2(n-1)/n
    (src/all_reduce.cu, AllReduceGetBw). Both computed here from the formulas, with no latency."""
    B = 450.0
    r = run(bm, "innet", 1, g=n, size=2**40, intra=B, a_in=0.0, a_out=0.0)
    algbw = B * n / (n + 1)
    assert r["algbw_GBps"] == pytest.approx(algbw, rel=1e-12)
    assert r["busbw_GBps"] == pytest.approx(algbw * 2 * (n - 1) / n, rel=1e-12)
    # going back from what nccl-tests prints to the bandwidth on the links gives B again
    assert r["busbw_GBps"] * (n + 1) / (2 * (n - 1)) == pytest.approx(B, rel=1e-12)


def test_model_rows_and_refusals(bm):
    rows = bm.model((1, 4), 8, 2**20, 450.0, 50.0, 1.0, 5.0, ("ring", "tree", "innet"))
    assert [(r["nodes"], r["algorithm"]) for r in rows] == [
        (1, "ring"), (1, "tree"), (1, "innet"), (4, "ring"), (4, "tree"), (4, "innet")]
    with pytest.raises(ValueError, match="one rank has nothing"):
        run(bm, "ring", 1, g=1)
    with pytest.raises(ValueError, match="unknown algorithm 'nvls'"):
        run(bm, "nvls", 2)
    with pytest.raises(ValueError, match="inter_GBps must be a finite number > 0"):
        run(bm, "ring", 2, inter=float("nan"))


def test_cli_table_and_json(launch, tmp_path):
    out = tmp_path / "m.json"
    res = launch.python(SCRIPT, ["--nodes", "1,2,16", "--size", "64M", "--algos", "ring,innet",
                                 "--json", str(out)])
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "busbw_model" and doc["schema_version"] == 1 and doc["device"] is None
    assert problems(doc, "--json") == []
    assert doc["date_utc"].endswith("Z") and doc["command"].startswith("python ")
    assert "busbw_model.py --nodes 1,2,16" in doc["command"]
    assert set(doc["versions"]) == {"python"}
    assert [(r["nodes"], r["ranks"], r["algorithm"]) for r in doc["results"]] == [
        (1, 8, "ring"), (1, 8, "innet"), (2, 16, "ring"), (2, 16, "innet"), (16, 128, "ring"),
        (16, 128, "innet")]
    for r in doc["results"]:
        assert r["size_bytes"] == 64 * 2**20
        assert f"{r['busbw_GBps']:.2f}" in res.stdout  # the table shows the same numbers
    printed = launch.python(SCRIPT, ["--nodes", "2", "--json", "-"])
    assert printed.returncode == 0 and json.loads(printed.stdout)["results"][0]["nodes"] == 2


def test_json_is_written_even_when_the_reader_closes_stdout(tmp_path):
    """`busbw_model.py ... --json f | head -1` must still leave the whole file: stdout here is a
    pipe whose reading end is already closed, so the first print fails."""
    out = tmp_path / "m.json"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        subprocess.run([sys.executable, str(REPO / "scripts" / "network" / SCRIPT), "--nodes", "1,2,4,8,16,32",
                        "--json", str(out)],
                       cwd=tmp_path, env=clean_env(), stdout=write_end, stderr=subprocess.PIPE,
                       timeout=60)
    finally:
        os.close(write_end)
    assert [r["nodes"] for r in json.loads(out.read_text())["results"]][-1] == 32


def test_json_is_written_atomically(bm, tmp_path, monkeypatch):
    """A failure while writing leaves the old file whole and no temporary file behind."""
    out = tmp_path / "m.json"
    out.write_text("old\n")

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(bm.os, "replace", broken)
    with pytest.raises(bm.ScriptError, match=rf"^{re.escape(str(out))}: cannot write it \(disk full\)"):
        bm.main(["--nodes", "2", "--json", str(out)])
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
    monkeypatch.undo()
    assert bm.main(["--nodes", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["results"][0]["nodes"] == 2


BAD_INPUT = [
    Case("nodes-empty", ["--nodes", ""], "--nodes: '': give node counts separated by commas"),
    Case("nodes-trailing-comma", ["--nodes", "1,2,"], "--nodes: '1,2,': give node counts"),
    Case("nodes-zero", ["--nodes", "0,2"], "--nodes: 0 must be between 1 and"),
    Case("nodes-text", ["--nodes", "two"], "--nodes: 'two' is not an integer"),
    Case("nodes-float", ["--nodes", "2.5"], "--nodes: '2.5' is not an integer"),
    Case("nodes-repeated", ["--nodes", "2,4,2"], "--nodes: 2 is listed twice"),
    Case("nodes-too-many", ["--nodes", ",".join(str(i) for i in range(1, 66))],
         "--nodes: 65 node counts: at most 64"),
    Case("nodes-huge", ["--nodes", "10000000"], "--nodes: 10000000 must be between 1 and 1,000,000"),
    Case("single-rank", ["--nodes", "1,2", "--gpus-per-node", "1"],
         "--nodes 1 with --gpus-per-node 1 is a single rank"),
    Case("gpus-zero", ["--gpus-per-node", "0"], "--gpus-per-node: 0 must be >= 1"),
    Case("gpus-float", ["--gpus-per-node", "8.5"], "--gpus-per-node: '8.5' is not an integer"),
    Case("size-zero", ["--size", "0"], "--size: 0 must be between 1 byte and 1 PiB"),
    Case("size-negative", ["--size=-1M"], "--size: invalid size '-1M'"),
    Case("size-decimal-suffix", ["--size", "1GB/s"], "--size: invalid size"),
    Case("size-huge", ["--size", "2048T"], "--size: 2048T must be between 1 byte and 1 PiB"),
    Case("intra-nan", ["--intra-GBps", "nan"], "--intra-GBps: 'nan' is not a finite number"),
    Case("inter-zero", ["--inter-GBps", "0"], "--inter-GBps: 0 must be > 0"),
    Case("inter-inf", ["--inter-GBps", "inf"], "--inter-GBps: 'inf' is not a finite number"),
    Case("alpha-negative", ["--alpha-inter-us", "-5"], "--alpha-inter-us: -5 must be >= 0"),
    Case("alpha-text", ["--alpha-intra-us", "fast"], "--alpha-intra-us: 'fast' is not a number"),
    Case("algo-unknown", ["--algos", "ring,nvls"], "--algos: unknown algorithm 'nvls'"),
    Case("algo-repeated", ["--algos", "ring,ring"], "--algos: 'ring,ring' lists an algorithm twice"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input_is_refused_in_one_line(case, tmp_path):
    check_refused(f"network/{SCRIPT}", case, tmp_path)
