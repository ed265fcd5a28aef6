"""Tests of scripts/training/communication_volume.py: bytes one GPU sends per step for each
parallelism. Hand-computed layouts (the arithmetic in the comments), agreement with the closed
forms and the enumeration of notebooks/training/communication_volume.py (its function
definitions are read from the notebook's source and run here, without its plots), the --json
document, the examples in the docstring and the chapter, and careless inputs."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script

SCRIPT = "communication_volume.py"
PATH = REPO / "scripts" / "training" / SCRIPT
NOTEBOOK = REPO / "notebooks" / "training" / "communication_volume.py"
BW1 = {dim: 1.0 for dim in ("dp", "tp", "pp", "cp", "ep")}  # 1 GBps everywhere: time = bytes/1e9


@pytest.fixture(scope="module")
def cv():
    return import_script(PATH)


@pytest.fixture(scope="module")
def nb():
    """The notebook's functions (sent, v_*, enumerate_*, total), without running its cells."""
    tree = ast.parse(NOTEBOOK.read_text(encoding="utf-8"))
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)
            and node.name != "layout_rows"]
    namespace = {"math": math}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(NOTEBOOK), "exec"), namespace)
    return namespace


def by(rows, strategy, collective):
    found = [r for r in rows if r["strategy"] == strategy and r["collective"] == collective]
    assert len(found) == 1, (strategy, collective, rows)
    return found[0]


# ---------------------------------------------------------------- hand-computed layouts

def test_small_3d_layout_by_hand(cv):
    # Psi = 1000, L = 2, h = 4, s = 8, b = 1, m = 3, d = 4, t = 2, p = 2, DDP, bf16.
    # DP: a rank holds 1000 / (2 x 2) = 250 parameters = 500 bytes of gradients;
    #     all-reduce over 4: 2 x 3/4 x 500 = 750 bytes, once per step.
    # TP: 1 layer per stage, b s h B = 1 x 8 x 4 x 2 = 64 bytes per all-reduce;
    #     4 per layer x 1 layer x 3 micro-batches = 12, each 2 x 1/2 x 64 = 64 bytes: 768.
    # PP: p = 2, each stage sends one tensor per micro-batch: 3 x 64 = 192.
    rows = cv.volumes(params=1000, layers=2, hidden=4, seq_len=8, grad_accum=3, dp=4, tp=2,
                      pp=2, zero=0, busbw_GBps=BW1)
    assert [(r["strategy"], r["collective"], r["ranks"], r["count"]) for r in rows] == [
        ("DP", "all_reduce", 4, 1), ("TP", "all_reduce", 2, 12), ("PP", "send", 2, 3)]
    assert [r["message_bytes"] for r in rows] == [500, 64, 64]
    assert [r["sent_bytes"] for r in rows] == [750, 768, 192]
    assert cv.totals(rows) == {"sent_bytes": 1710, "time_s": pytest.approx(1710 / 1e9)}
    # an inner stage (p = 3) sends forward and backward: 2 x 3 x 64 = 384
    rows = cv.volumes(params=1000, layers=3, hidden=4, seq_len=8, grad_accum=3, pp=3,
                      busbw_GBps=BW1)
    assert [(r["strategy"], r["count"], r["sent_bytes"]) for r in rows] == [("PP", 6, 384)]


def test_zero_stages_by_hand(cv):
    # Psi_local = 800 parameters (t = p = 1), d = 5, grads 2 bytes, params 2 bytes, m = 2.
    # DDP: 2 x 4/5 x 1600 = 2560. ZeRO-1: RS 4/5 x 1600 + AG 4/5 x 1600 = 2560 (the same).
    # ZeRO-2: RS after each of the m = 2 micro-batches, AG once: 3 x 1280 = 3840.
    # ZeRO-3: per micro-batch AG twice and RS once, per layer (2 layers of 400 parameters):
    #   AG count 2 x 2 x 2 = 8 messages of 800 bytes, RS 4 of 800: 12 x 4/5 x 800 = 7680
    #   = 3 x 4/5 x 1600 x m, the ZeRO paper's 3 Psi per pass.
    common = dict(params=800, layers=2, hidden=4, seq_len=4, grad_accum=2, dp=5, busbw_GBps=BW1)
    sent = {z: cv.totals(cv.volumes(zero=z, **common))["sent_bytes"] for z in range(4)}
    assert sent == {0: 2560, 1: 2560, 2: 3840, 3: 7680}
    z3 = cv.volumes(zero=3, **common)
    assert [(r["collective"], r["count"], r["message_bytes"]) for r in z3] == [
        ("all_gather", 8, 800), ("reduce_scatter", 4, 800)]
    # fp32 gradient reduction doubles the reduce-scatter only: 4/5 x 3200 + 4/5 x 1600
    assert cv.totals(cv.volumes(zero=1, grad_bytes=4, **common))["sent_bytes"] == 3840


def test_sequence_parallel_sends_what_tp_sends(cv):
    # Korthikanti 2022: each all-reduce becomes an all-gather and a reduce-scatter of the same
    # size, (t-1)/t + (t-1)/t = 2 (t-1)/t.
    common = dict(params=1e6, layers=4, hidden=64, seq_len=32, micro_batch=2, grad_accum=5,
                  tp=4, busbw_GBps=BW1)
    tp = cv.volumes(**common)
    sp = cv.volumes(sequence_parallel=True, **common)
    assert [r["collective"] for r in sp] == ["all_gather", "reduce_scatter"]
    assert cv.totals(sp)["sent_bytes"] == pytest.approx(cv.totals(tp)["sent_bytes"])
    # 8 x 3/4 x b s h B per layer per micro-batch = 6 x 2 x 32 x 64 x 2 x 4 layers x 5
    assert cv.totals(tp)["sent_bytes"] == 6 * 2 * 32 * 64 * 2 * 4 * 5


def test_context_and_expert_parallelism_by_hand(cv):
    # s = 16, c = 4: 4 tokens per rank; h = 8, heads 8, kv-heads 4: h_kv = 4; t = 1; L = 1, m = 1.
    # Ring forward: 3 sends of K and V, 2 x 4 x 4 x 2 bytes = 64 each: 192; backward twice: 384.
    # Gradients: DP x CP = 4 ranks (d = 1) all-reduce 2 x 3/4 x 100 x 2 = 300.
    ring = cv.volumes(params=100, layers=1, hidden=8, heads=8, kv_heads=4, seq_len=16, cp=4,
                      zero=0, busbw_GBps=BW1)
    assert [(r["strategy"], r["ranks"], r["count"], r["sent_bytes"]) for r in ring] == [
        ("DP", 4, 1, 300), ("CP ring", 4, 3, 192), ("CP ring", 4, 3, 384)]
    # Ulysses: 4 all-to-alls of Q/output (4 x 8 x 2 = 64 bytes) and 4 of K/V (4 x 4 x 2 = 32),
    # (c-1)/c of each: 3/4 x (256 + 128) = 288; with h_kv = h, 8 (c-1)/c b (s/c) h B = 384.
    uly = cv.volumes(params=100, layers=1, hidden=8, heads=8, kv_heads=4, seq_len=16, cp=4,
                     cp_algo="ulysses", zero=0, busbw_GBps=BW1)
    assert sum(r["sent_bytes"] for r in uly if r["strategy"] == "CP Ulysses") == 288
    mha = cv.volumes(params=100, layers=1, hidden=8, seq_len=16, cp=4, cp_algo="ulysses",
                     zero=0, busbw_GBps=BW1)
    assert sum(r["sent_bytes"] for r in mha if r["strategy"] == "CP Ulysses") == 384
    # EP: d = 4, e = 2, k = 2, b s h B = 1 x 16 x 8 x 2 = 256 bytes of tokens, 2 layers, m = 1:
    # 4 all-to-alls per MoE layer of k x 256 = 512 bytes, 1/2 of it sent: 4 x 2 x 256 = 2048.
    # Experts: 60 of the 100 parameters, 30 per EP rank, reduced over 4 / 2 = 2 ranks:
    # 2 x 1/2 x 60 = 60; dense 40 over 4 ranks: 2 x 3/4 x 80 = 120.
    ep = cv.volumes(params=100, expert_params=60, layers=2, hidden=8, seq_len=16, dp=4, ep=2,
                    experts_top_k=2, zero=0, busbw_GBps=BW1)
    assert [(r["strategy"], r["ranks"], r["count"], r["sent_bytes"]) for r in ep] == [
        ("DP", 4, 1, 120), ("DP experts", 2, 1, 60), ("EP", 2, 8, 2048)]


def test_time_is_message_times_factor_over_busbw(cv):
    # nccl-tests: busbw = algbw x factor, algbw = S / t, so t = S x factor / busbw.
    rows = cv.volumes(params=70e9, layers=80, hidden=8192, seq_len=4096, grad_accum=64, dp=16,
                      tp=8, pp=4, zero=1, busbw_GBps={**BW1, "dp": 40.0, "tp": 360.0,
                                                      "pp": 25.0})
    for r in rows:
        assert r["factor"] == cv.send_factor(r["collective"], r["ranks"])
        assert r["time_s"] == pytest.approx(
            r["count"] * r["message_bytes"] * r["factor"] / (r["busbw_GBps"] * 1e9), rel=1e-12)
    assert [r["busbw_GBps"] for r in rows] == [40, 40, 360, 25]
    assert cv.send_factor("all_reduce", 8) == 2 * 7 / 8 and cv.send_factor("send", 2) == 1
    assert cv.send_factor("all_to_all", 4) == cv.send_factor("all_gather", 4) == 3 / 4


def test_hsdp_by_hand(cv):
    # Psi_local = 800 parameters in 2 layers, d = 8 ranks: shard groups of S = 4 (a node),
    # R = 2 replicas, m = 1, bf16. Per layer (400 parameters = 800 bytes):
    #   all-gather twice over 4: 2 x 3/4 x 800 = 1200, x 2 layers = 2400
    #   reduce-scatter over 4: 3/4 x 800 = 600, x 2 = 1200
    #   all-reduce of the 1/4 a rank keeps (200 bytes) over 2: 2 x 1/2 x 200 = 200, x 2 = 400
    # 4000 in all, against ZeRO-3's 3 x 7/8 x 1600 = 4200: HSDP moves most of it into the node
    # and sends only 2(R-1)/R Psi/S of gradients between nodes.
    common = dict(params=800, layers=2, hidden=4, seq_len=4, dp=8, zero=3,
                  busbw_GBps={**BW1, "node": 2.0})
    rows = cv.volumes(hsdp=4, node_ranks=4, **common)
    assert [(r["strategy"], r["collective"], r["ranks"], r["count"], r["sent_bytes"], r["span"])
            for r in rows] == [("HSDP shard", "all_gather", 4, 4, 2400, "node"),
                               ("HSDP shard", "reduce_scatter", 4, 2, 1200, "node"),
                               ("HSDP replicate", "all_reduce", 2, 2, 400, "rail")]
    assert [r["busbw_GBps"] for r in rows] == [2, 2, 1]        # the node's bandwidth in the node
    assert cv.totals(cv.volumes(**common))["sent_bytes"] == 4200
    # leaving the node: only the replicas' all-reduce, from each of the node's 4 ranks
    assert cv.cross_node_bytes(rows, 4) == 4 * 400
    # shard groups larger than a node run at the DP bandwidth and cross nodes
    wide = cv.volumes(hsdp=4, node_ranks=2, **common)
    assert [r["span"] for r in wide] == ["nodes", "nodes", "nodes"]
    assert [r["busbw_GBps"] for r in wide] == [1, 1, 1]


@pytest.mark.parametrize("parts,paper_M", [
    ((), 3.0),                           # ZeRO-3: forward all-gather, backward, reduce-scatter
    (("qwz",), 2.5),                     # int8 forward all-gather: 0.5 M instead of M
    (("hpz",), 2.0),                     # backward all-gather stays in the node
    (("qgz",), 2.25),                    # int4 gradients: 0.25 M instead of M
    (("qwz", "hpz", "qgz"), 0.75),       # the paper's 3M -> 0.75M, "4x less communication"
])
def test_zeropp_cross_node_volume_is_the_papers(cv, parts, paper_M):
    # Wang et al. 2023 (arXiv:2306.10209): per step a node sends M = 2 Psi bytes (fp16 model)
    # across nodes three times under ZeRO-3, and 0.5 M + 0 + 0.25 M with qwZ, hpZ and qgZ.
    # The (n-1)/n of the ring and (N-1)/N of the all-to-all across N nodes tend to 1: 2048
    # nodes of 16 ranks brings them within 0.1% of the paper's round figures.
    psi, g, nodes = 1e9, 16, 2048
    rows = cv.volumes(params=psi, layers=4, hidden=64, seq_len=8, dp=g * nodes, zero=3,
                      zeropp=parts, node_ranks=g, busbw_GBps={**BW1, "node": 1.0})
    assert cv.cross_node_bytes(rows, g) / (2 * psi) == pytest.approx(paper_M, rel=1e-3)


def test_zeropp_rows_by_hand(cv):
    # Psi_local = 1600 parameters, 1 layer, d = 8 in nodes of g = 4, bf16, m = 1.
    # qwZ: all-gather of 1600 int8 bytes over 8: 7/8 x 1600 = 1400
    # hpZ: all-gather of 3200 bf16 bytes over the node's 4: 3/4 x 3200 = 2400
    # qgZ: all-to-all of 800 int4 bytes in the node: 3/4 x 800 = 600; then the quarter kept,
    #      200 bytes, over the 2 nodes: 1/2 x 200 = 100
    rows = cv.volumes(params=1600, layers=1, hidden=4, seq_len=4, dp=8, zero=3, node_ranks=4,
                      zeropp=("qwz", "hpz", "qgz"), busbw_GBps={**BW1, "node": 1.0})
    assert [(r["strategy"], r["collective"], r["ranks"], r["sent_bytes"]) for r in rows] == [
        ("ZeRO++ qwZ", "all_gather", 8, 1400), ("ZeRO++ hpZ", "all_gather", 4, 2400),
        ("ZeRO++ qgZ", "all_to_all", 4, 600), ("ZeRO++ qgZ", "all_to_all", 2, 100)]
    with pytest.raises(ValueError, match="data-parallel rows only"):
        cv.cross_node_bytes(cv.volumes(params=1e6, layers=4, hidden=64, seq_len=32, tp=2,
                                       busbw_GBps=BW1), 8)


# ---------------------------------------------------------------- agreement with the notebook

L, H, S, KV, FFN, V = 80, 8192, 4096, 8, 28672, 32000
LAYER_PSI = 2 * H * H + 2 * H * KV * (H // 64) + 3 * H * FFN
PSI = L * LAYER_PSI + 2 * V * H  # the notebook's 70B-class model, 68,975,329,280 parameters


def test_notebook_layout_b(cv, nb):
    # t = 8, p = 4, d = 16 with ZeRO-1, m = 1024 / 16 = 64 micro-batches of one sequence.
    rows = cv.volumes(params=PSI, layers=L, hidden=H, heads=64, kv_heads=8, seq_len=S,
                      grad_accum=64, dp=16, tp=8, pp=4, zero=1,
                      busbw_GBps={**BW1, "dp": 40, "tp": 360, "pp": 40})
    dp = sum(r["sent_bytes"] for r in rows if r["strategy"] == "ZeRO-1")
    assert dp == pytest.approx(nb["v_ddp"](PSI / 32, 16), rel=1e-12)
    assert by(rows, "TP", "all_reduce")["sent_bytes"] == pytest.approx(
        nb["v_tp_layer"](1, S, H, 8) * (L // 4) * 64, rel=1e-12)
    assert by(rows, "PP", "send")["sent_bytes"] == pytest.approx(
        nb["v_pp_microbatch"](1, S, H) * 64, rel=1e-12)
    # the page's "about 600 GB per GPU per step" for TP
    assert by(rows, "TP", "all_reduce")["sent_bytes"] / 1e9 == pytest.approx(601.3, abs=0.05)


def test_notebook_layout_a_fsdp(cv, nb):
    # d = 512, 1024 sequences: 2 per GPU, one pass (micro-batch 2, no accumulation).
    rows = cv.volumes(params=PSI, layers=L, hidden=H, seq_len=S, micro_batch=2, dp=512,
                      zero=3, busbw_GBps={**BW1, "dp": 320})
    assert cv.totals(rows)["sent_bytes"] == pytest.approx(nb["v_zero3"](PSI, 512), rel=1e-12)
    layer_params = [PSI / L] * L
    assert cv.totals(rows)["sent_bytes"] == pytest.approx(
        nb["total"](nb["enumerate_zero3"](layer_params, 512)), rel=1e-12)
    assert cv.totals(rows)["time_s"] == pytest.approx(nb["v_zero3"](PSI, 512) / 320e9)


@pytest.mark.parametrize("t,sp", [(2, False), (4, True), (8, True)])
def test_tp_agrees_with_the_notebooks_enumeration(cv, nb, t, sp):
    b, s, h, layers = 2, 1024, 512, 6
    rows = cv.volumes(params=1.2e6, layers=layers, hidden=h, seq_len=s, micro_batch=b, tp=t,
                      sequence_parallel=sp, busbw_GBps=BW1)
    assert cv.totals(rows)["sent_bytes"] == pytest.approx(
        nb["total"](nb["enumerate_tp"](layers, b, s, h, t, sp=sp)), rel=1e-12)


@pytest.mark.parametrize("k,e", [(1, 2), (2, 8), (8, 64)])
def test_ep_agrees_with_the_notebook(cv, nb, k, e):
    b, s, h = 2, 1024, 512
    rows = cv.volumes(params=1e9, expert_params=5e8, layers=4, hidden=h, seq_len=s,
                      micro_batch=b, grad_accum=3, dp=e, ep=e, experts_top_k=k, moe_layers=2,
                      busbw_GBps=BW1)
    assert by(rows, "EP", "all_to_all")["sent_bytes"] == pytest.approx(
        nb["v_ep_layer"](b, s, h, k, e) * 2 * 3, rel=1e-12)
    assert nb["total"](nb["enumerate_ep"](b, s, h, k, e)) == pytest.approx(
        nb["v_ep_layer"](b, s, h, k, e))


# ---------------------------------------------------------------- CLI, JSON, docstring

def run(args, cwd=REPO, **kwargs):
    return subprocess.run([sys.executable, str(PATH), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=60, **kwargs)


CHAPTERS = [REPO / "book" / lang / "training" / "model-parallelism.md" for lang in ("en", "zh")]


def test_chapter_example_is_the_real_output():
    """The chapter (en and zh) shows the default run's whole output."""
    proc = run([])
    assert proc.returncode == 0 and proc.stderr == ""
    for chapter in CHAPTERS:
        text = chapter.read_text(encoding="utf-8")
        start = text.index("$ python scripts/training/communication_volume.py\n")
        block = text[start:text.index("\n```", start)].splitlines()
        assert proc.stdout.splitlines() == block[1:], chapter


SHARDING = [REPO / "book" / lang / "training" / "sharding.md" for lang in ("en", "zh")]


def test_sharding_chapter_examples_are_the_real_output():
    """The sharding page's worked example (en and zh): each command it shows, with its output."""
    outputs = {}
    for chapter in SHARDING:
        text = chapter.read_text(encoding="utf-8")
        blocks = re.findall(r"```text\n\$ python scripts/training/communication_volume.py([^\n]*)\n(.*?)\n```",
                            text, re.S)
        assert len(blocks) == 3, chapter
        for args, shown in blocks:
            if args not in outputs:
                proc = run(args.split())
                assert proc.returncode == 0 and proc.stderr == "", proc.stderr
                outputs[args] = proc.stdout.rstrip("\n")
            assert shown == outputs[args], (chapter, args)


def test_docstring_example_is_part_of_the_real_output(cv):
    """The docstring's short example: the default run's lines, in order ('...' skips some)."""
    doc = cv.__doc__
    start = doc.index("    $ python scripts/training/communication_volume.py\n")
    shown = [line[4:] for line in doc[start:].rstrip().splitlines()[1:]]
    out = iter(run([]).stdout.splitlines())
    for line in shown:
        if line != "...":
            assert line in out, line  # consumes the output up to this line: keeps the order


def test_json_document(cv, tmp_path):
    out = tmp_path / "cv.json"
    out.write_text("old\n")
    args = ["--dp", "8", "--tp", "4", "--pp", "2", "--cp", "2", "--sequence-parallel",
            "--zero", "2", "--gpus", "128", "--tp-busbw-GBps", "300", "--json", str(out)]
    proc = run(args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert list(doc) == ["tool", "schema_version", "inputs", "strategies", "total"]
    assert doc["tool"] == "communication_volume" and doc["schema_version"] == 1
    inputs = doc["inputs"]
    assert inputs["world_size"] == 128 and inputs["zero"] == 2 and inputs["cp_algo"] == "ring"
    assert inputs["busbw_GBps_by_dimension"] == {"dp": 40, "tp": 300, "pp": 40, "cp": 40, "ep": 40,
                                                 "node": 300}
    parser_keys = {a.dest for a in cv.build_parser()._actions} - {"help", "debug", "json"}
    assert parser_keys <= set(inputs), parser_keys - set(inputs)
    expect = cv.volumes(params=70e9, layers=80, hidden=8192, seq_len=4096, grad_accum=64, dp=8,
                        tp=4, pp=2, cp=2, zero=2, sequence_parallel=True,
                        busbw_GBps={"dp": 40, "tp": 300, "pp": 40, "cp": 40, "ep": 40})
    assert doc["strategies"] == json.loads(json.dumps(expect))
    assert doc["total"] == pytest.approx(cv.totals(expect))
    for row in doc["strategies"]:
        assert {"message_bytes", "sent_bytes", "time_s", "busbw_GBps"} <= set(row)
        assert f"{row['sent_bytes'] / 1e9:.2f}" in proc.stdout  # the table shows the same rows
    # deterministic: a second run, elsewhere, writes the same bytes; '-' prints the same document
    first = out.read_bytes()
    assert run(args, cwd=REPO).returncode == 0 and out.read_bytes() == first
    printed = run([a if a != str(out) else "-" for a in args])
    assert printed.returncode == 0 and json.loads(printed.stdout) == doc
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_json_is_written_even_when_the_reader_closes_stdout(tmp_path):
    out = tmp_path / "cv.json"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        subprocess.run([sys.executable, str(PATH), "--json", str(out)], cwd=tmp_path,
                       env=clean_env(), stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert json.loads(out.read_text())["inputs"]["world_size"] == 512


def test_json_write_is_atomic(cv, tmp_path, monkeypatch):
    out = tmp_path / "cv.json"
    out.write_text("previous\n")

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(cv.os, "replace", broken)
    with pytest.raises(cv.ScriptError, match=rf"^{re.escape(str(out))}: cannot write it \(disk full\)"):
        cv.main(["--json", str(out)])
    assert out.read_text() == "previous\n" and os.listdir(tmp_path) == ["cv.json"]


def test_import_has_no_side_effects():
    # The browser runs these functions under Pyodide: no output, no thread, no torch or numpy.
    code = ("import sys, threading, importlib.util as u; n = threading.active_count(); "
            "s = u.spec_from_file_location('m', sys.argv[1]); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); assert threading.active_count() == n; "
            "assert not {'torch', 'numpy', 'yaml'} & set(sys.modules); "
            "print(m.totals(m.volumes(params=1000, layers=2, hidden=4, seq_len=8, dp=4, "
            "busbw_GBps={'dp': 1.0}))['sent_bytes'])")
    proc = subprocess.run([sys.executable, "-c", code, str(PATH)], capture_output=True,
                          text=True, timeout=30, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "3000.0\n" and proc.stderr == ""  # 2 x 3/4 x 2000 bytes


@pytest.mark.parametrize("kwargs,message", [
    (dict(params=math.nan), "params must be a finite number > 0"),
    (dict(tp=2.0), "tp must be an integer"),
    (dict(tp=3), "--tp 3 does not divide --hidden 64"),
    (dict(zero=4), "zero must be 0, 1, 2 or 3"),
    (dict(dp=2, busbw_GBps={}), r"busbw_GBps\['dp'\] must be a number"),
    (dict(ep=2, dp=2, experts_top_k=1, tp=2), "needs --sequence-parallel"),
])
def test_functions_raise_value_error(cv, kwargs, message):
    base = dict(params=1e6, layers=4, hidden=64, seq_len=32, busbw_GBps=BW1)
    with pytest.raises(ValueError, match=message):
        cv.volumes(**{**base, **kwargs})


# ---------------------------------------------------------------- careless input

BAD_INPUT = [
    Case("params-nan", ["--params", "nan"], r"--params: 'nan' is not a finite number"),
    Case("params-zero", ["--params", "0"], r"--params: 0 must be > 0"),
    Case("params-negative", ["--params=-7e9"], r"--params: -7e9 must be > 0"),
    Case("expert-params-inf", ["--expert-params", "inf"], r"--expert-params: 'inf' is not a finite"),
    Case("expert-params-too-many", ["--expert-params", "80e9", "--ep", "2", "--experts-top-k", "2",
                                    "--sequence-parallel"], r"--expert-params 8e\+10 must be below"),
    Case("expert-params-without-ep", ["--expert-params", "1e9"], r"--expert-params needs --ep > 1"),
    Case("layers-zero", ["--layers", "0"], r"--layers: 0 must be >= 1"),
    Case("hidden-float", ["--hidden", "4096.5"], r"--hidden: '4096.5' is not an integer"),
    Case("seq-len-text", ["--seq-len", "long"], r"--seq-len: 'long' is not an integer"),
    Case("micro-batch-negative", ["--micro-batch=-1"], r"--micro-batch: -1 must be >= 1"),
    Case("grad-accum-zero", ["--grad-accum", "0"], r"--grad-accum: 0 must be >= 1"),
    Case("grad-bytes-zero", ["--grad-bytes", "0"], r"--grad-bytes: 0 must be > 0"),
    Case("act-bytes-nan", ["--act-bytes", "nan"], r"--act-bytes: 'nan' is not a finite number"),
    Case("dp-float", ["--dp", "1.5"], r"--dp: '1.5' is not an integer"),
    Case("tp-zero", ["--tp", "0"], r"--tp: 0 must be >= 1"),
    Case("pp-inf", ["--pp", "inf"], r"--pp: 'inf' is not an integer"),
    Case("zero-four", ["--zero", "4"], r"--zero: invalid choice: 4"),
    Case("gpus-mismatch", ["--gpus", "256"], r"--gpus 256 is not --dp x --tp x --pp x --cp = "
                                             r"16 x 8 x 4 x 1 = 512"),
    Case("tp-not-dividing-heads", ["--heads", "12", "--hidden", "768", "--tp", "8"],
         r"--tp 8 does not divide --heads 12"),
    Case("tp-not-dividing-hidden", ["--tp", "3"], r"--tp 3 does not divide --hidden 8192"),
    Case("heads-not-dividing-hidden", ["--heads", "48"], r"--heads 48 does not divide --hidden"),
    Case("kv-heads-not-dividing", ["--heads", "64", "--kv-heads", "5"],
         r"--kv-heads 5 does not divide --heads 64"),
    Case("kv-heads-without-heads", ["--kv-heads", "8"], r"--kv-heads needs --heads"),
    Case("pp-not-dividing-layers", ["--pp", "3"], r"--pp 3 does not divide --layers 80"),
    Case("cp-not-dividing-seq", ["--cp", "3"], r"--cp 3 does not divide --seq-len 4096"),
    Case("ulysses-heads", ["--cp", "4", "--cp-algo", "ulysses", "--heads", "16"],
         r"--cp 4 \(ulysses\) x --tp 8 does not divide --heads 16"),
    Case("cp-algo-unknown", ["--cp", "2", "--cp-algo", "star"], r"--cp-algo: invalid choice"),
    Case("sp-without-tp", ["--tp", "1", "--sequence-parallel"], r"--sequence-parallel needs --tp > 1"),
    Case("zero-without-dp", ["--dp", "1", "--zero", "3"], r"--zero 3 needs more than one DP x CP"),
    Case("ep-not-dividing-dp", ["--ep", "3", "--experts-top-k", "2", "--sequence-parallel"],
         r"--ep 3 does not divide --dp x --cp = 16"),
    Case("ep-without-k", ["--ep", "2", "--sequence-parallel"], r"--ep 2 needs --experts-top-k"),
    Case("ep-tp-without-sp", ["--ep", "2", "--experts-top-k", "2"], r"--ep 2 with --tp 8 needs "
                                                                   r"--sequence-parallel"),
    Case("top-k-without-ep", ["--experts-top-k", "2"], r"--experts-top-k needs --ep > 1"),
    Case("moe-layers-too-many", ["--ep", "2", "--experts-top-k", "2", "--sequence-parallel",
                                 "--moe-layers", "81"], r"--moe-layers 81 must be at most"),
    Case("busbw-zero", ["--busbw-GBps", "0"], r"--busbw-GBps: 0 must be > 0"),
    Case("busbw-nan", ["--tp-busbw-GBps", "nan"], r"--tp-busbw-GBps: 'nan' is not a finite"),
    Case("busbw-negative", ["--dp-busbw-GBps=-40"], r"--dp-busbw-GBps: -40 must be > 0"),
    Case("abbreviated-option", ["--busbw", "40"], r"unrecognized arguments: --busbw"),
    Case("hsdp-without-zero-3", ["--hsdp", "4"], r"--hsdp is a variant of ZeRO-3: give --zero 3"),
    Case("hsdp-not-dividing", ["--zero", "3", "--hsdp", "3"], r"--hsdp 3 must divide --dp x --cp = 16"),
    Case("hsdp-all-ranks", ["--zero", "3", "--hsdp", "16"], r"\(--hsdp 16 is plain ZeRO-3\)"),
    Case("hsdp-one", ["--zero", "3", "--hsdp", "1"], r"--hsdp: 1 must be >= 2"),
    Case("zeropp-and-hsdp", ["--zero", "3", "--hsdp", "4", "--zeropp", "qwz"],
         r"--hsdp and --zeropp are alternatives"),
    Case("zeropp-unknown-part", ["--zero", "3", "--zeropp", "qxz"], r"--zeropp: invalid choice: 'qxz'"),
    Case("zeropp-one-node", ["--zero", "3", "--zeropp", "hpz", "--node-ranks", "16"],
         r"--node-ranks 16 must divide --dp x --cp = 16 and be smaller"),
    Case("node-ranks-zero", ["--node-ranks", "0"], r"--node-ranks: 0 must be >= 1"),
    Case("node-busbw-nan", ["--node-busbw-GBps", "nan"], r"--node-busbw-GBps: 'nan' is not a finite"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_careless_input_is_refused(case, tmp_path):
    check_refused(f"training/{SCRIPT}", case, tmp_path)
