"""Tests of scripts/inference/decode_bench.py: the KV cache gives the logits of a full pass, a
real CPU sweep reports figures that obey their formulas, interruption keeps the points done, and
careless inputs are refused (a gpu-marked test runs one CUDA point).

No speed is asserted. The expected figures are computed here from the model's shape, not taken
from a run: KV bytes = 2 x layers x kv_heads x head_dim x tokens x batch x bytes per element
(a key and a value per layer, kv head and token); a decode step reads all the weights plus the
cache it attends to, P + (N + 1)/2 tokens on average over N steps after a prompt of P; a matmul
costs 2 FLOPs per weight and token (Kaplan et al. 2020, https://arxiv.org/abs/2001.08361,
section 2.1, Table 1), attention 4 x layers x heads x head_dim per attended token.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script, interrupt_when
from tools.results import problems

SCRIPT = "decode_bench.py"
ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s")
# A tiny model: the sweep takes about a second on one core.
SHAPE = {"layers": 2, "dim": 32, "heads": 4, "kv_heads": 2, "vocab": 64}
SHAPE_ARGS = [a for k, v in SHAPE.items() for a in (f"--{k.replace('_', '-')}", str(v))]
SWEEP = [*SHAPE_ARGS, "--batch-sizes", "1,3", "--contexts", "5,9", "--new-tokens", "4",
         "--warmup", "1", "--repeats", "2", "--device", "cpu", "--threads", "1"]


@pytest.fixture(scope="module")
def db(launch):
    return import_script(launch.scripts / SCRIPT)


def expected_params(layers, dim, heads, kv_heads, vocab):
    """(all parameters, matmul weights) of the script's architecture, counted by hand: per
    layer q and o (dim x dim each), k and v (dim x kv_heads*head_dim each), MLP up and down
    (dim x 4 dim each), two norm vectors; the tied embedding; the final norm."""
    head_dim = dim // heads
    matmul = layers * (2 * dim * dim + 2 * dim * kv_heads * head_dim + 8 * dim * dim) + vocab * dim
    return matmul + (2 * layers + 1) * dim, matmul


# ---------------------------------------------------------------------------------------------
# The model and its cache
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
def test_cached_logits_equal_uncached(db, heads, kv_heads):
    """Greedy decoding with the KV cache must give, at every step, the logits that one causal
    pass over the prompt and the tokens generated so far gives at the same position."""
    model = db.build_model(2, 12 * heads, heads, kv_heads, 50, seed=1)  # head size 12
    prompt = torch.randint(50, (3, 7), generator=torch.Generator().manual_seed(0))
    new = 6
    tokens, cached = db.decode_with_cache(model, prompt, new)
    assert tokens.shape == (3, new + 1) and cached.shape == (3, new + 1, 50)
    with torch.inference_mode():
        full = db.forward_no_cache(model, torch.cat([prompt, tokens[:, :-1]], dim=1))
    # position P-1 predicts the first new token, P+i-1 the (i+1)-th
    torch.testing.assert_close(cached, full[:, prompt.shape[1] - 1:], atol=1e-4, rtol=1e-4)
    assert torch.equal(tokens, full[:, prompt.shape[1] - 1:].argmax(-1))
    assert cached.std() > 0.1  # logits of order 1: the tolerance is meaningful


def test_cache_is_preallocated_and_written_in_place(db):
    layers, dim, heads, kv_heads, batch, prompt_len, max_len = 3, 32, 4, 2, 2, 5, 9
    model = db.build_model(layers, dim, heads, kv_heads, 40, seed=2)
    cache = db.new_cache(model, batch, max_len)
    assert cache.shape == (layers, 2, batch, kv_heads, max_len, dim // heads)
    address = cache.data_ptr()
    with torch.inference_mode():
        logits = db.prefill(model, torch.randint(40, (batch, prompt_len)), cache)
        assert logits.shape == (batch, 40)
        filled = cache.abs().sum(dim=(0, 1, 2, 3, 5))
        assert (filled[:prompt_len] > 0).all() and (filled[prompt_len:] == 0).all()
        db.decode_step(model, logits.argmax(-1, keepdim=True), prompt_len, cache)
    filled = cache.abs().sum(dim=(0, 1, 2, 3, 5))
    assert (filled[:prompt_len + 1] > 0).all() and (filled[prompt_len + 1:] == 0).all()
    assert cache.data_ptr() == address


@pytest.mark.parametrize("shape", [(2, 32, 4, 2, 64), (3, 48, 6, 6, 100), (1, 16, 2, 1, 7)])
def test_parameter_counts(db, shape):
    model = db.build_model(*shape)
    total, matmul = expected_params(*shape)
    assert sum(p.numel() for p in model.parameters()) == total
    assert sum(p.numel() for p in model.parameters() if p.dim() == 2) == matmul
    counted = db.model_shape(*shape)
    assert (counted["total"], counted["matmul"]) == (total, matmul)


# ---------------------------------------------------------------------------------------------
# The command line, for real on CPU
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sweep(launch, tmp_path_factory):
    out = tmp_path_factory.mktemp("decode") / "decode.json"
    res = launch.python(SCRIPT, [*SWEEP, "--json", str(out)], timeout=120)
    assert res.returncode == 0, res.output
    return res, json.loads(out.read_text())


def check_rows(doc: dict, dtype_bytes: int) -> None:
    s, layers = doc["settings"], SHAPE["layers"]
    head_dim = SHAPE["dim"] // SHAPE["heads"]
    total, matmul = expected_params(**SHAPE)
    assert s["head_dim"] == head_dim and doc["model"]["parameters"] == total
    weight_bytes = total * dtype_bytes
    assert doc["model"]["weight_bytes"] == weight_bytes
    assert doc["model"]["kv_bytes_per_token"] == 2 * layers * SHAPE["kv_heads"] * head_dim * dtype_bytes
    assert [(r["batch"], r["context"]) for r in doc["results"]] == [
        (b, p) for p in s["contexts"] for b in s["batch_sizes"]]
    n = s["new_tokens"]
    for r in doc["results"]:
        b, p = r["batch"], r["context"]
        for key in ("ttft_ms", "tpot_ms", "tpot_median_ms", "tpot_min_ms"):
            assert math.isfinite(r[key]) and r[key] > 0, key
        assert r["tpot_min_ms"] <= r["tpot_median_ms"] and r["tpot_min_ms"] <= r["tpot_ms"]
        assert r["new_tokens"] == n and r["weight_bytes"] == weight_bytes
        assert r["decode_tokens_per_s"] == pytest.approx(b / (r["tpot_ms"] / 1e3), rel=1e-4)
        assert r["prefill_tokens_per_s"] == pytest.approx(b * p / (r["ttft_ms"] / 1e3), rel=1e-4)
        kv_heads = SHAPE["kv_heads"]
        assert r["kv_bytes"] == 2 * layers * kv_heads * head_dim * (p + n) * b * dtype_bytes
        attended = p + (n + 1) / 2
        assert r["mean_attended_tokens"] == attended
        assert r["bytes_per_step"] == weight_bytes + 2 * layers * kv_heads * head_dim * b * attended * dtype_bytes
        assert r["read_GBps"] == pytest.approx(r["bytes_per_step"] / (r["tpot_ms"] / 1e3) / 1e9, rel=1e-4)
        assert r["flops_per_step"] == 2 * matmul * b + 4 * layers * SHAPE["heads"] * head_dim * attended * b
        assert r["gflops"] == pytest.approx(r["flops_per_step"] / (r["tpot_ms"] / 1e3) / 1e9, rel=1e-4)


def test_sweep_json_obeys_the_formulas(sweep):
    _, doc = sweep
    assert problems(doc, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert doc["benchmark"] == "decode_bench" and doc["interrupted"] is False
    assert doc["device_type"] == "cpu" and doc["device"] and doc["dtype"] == "fp32"
    assert doc["torch_version"] == torch.__version__ and doc["threads"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date_utc"])
    assert SCRIPT in doc["command"] and "--batch-sizes 1,3" in doc["command"]
    s = doc["settings"]
    assert (s["batch_sizes"], s["contexts"], s["new_tokens"], s["repeats"]) == ([1, 3], [5, 9], 4, 2)
    assert {k: s[k] for k in SHAPE} == SHAPE
    check_rows(doc, dtype_bytes=4)


def test_table_rows_match_the_json(sweep):
    res, doc = sweep
    rows = [m for m in map(ROW.match, res.stdout.splitlines()) if m]
    assert [(int(m[1]), int(m[2])) for m in rows] == [(r["batch"], r["context"]) for r in doc["results"]]
    for m, r in zip(rows, doc["results"], strict=True):
        assert float(m[3]) == pytest.approx(r["decode_tokens_per_s"], abs=0.06)
    header = [line for line in res.stdout.splitlines() if "TPOT(ms)" in line]
    assert len(header) == 1 and "decode tok/s" in header[0] and "GFLOP/s" in header[0]
    assert "lower bound" in res.stdout  # the bytes/step caveat is printed with the table


def test_bf16_json_on_stdout(launch):
    res = launch.python(SCRIPT, [*SHAPE_ARGS, "--batch-sizes", "2", "--contexts", "3,6",
                                 "--new-tokens", "3", "--warmup", "0", "--repeats", "1",
                                 "--device", "cpu", "--dtype", "bf16", "--threads", "1",
                                 "--json", "-"], timeout=60)
    assert res.returncode == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("\n{") + 1:])
    assert doc["dtype"] == "bf16" and doc["model"]["dtype_bytes"] == 2
    check_rows(doc, dtype_bytes=2)


@pytest.mark.parametrize("sig,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["sigterm", "ctrl-c"])
def test_interrupt_writes_the_points_done(launch, tmp_path, sig, status):
    out = tmp_path / "partial.json"
    args = [*SHAPE_ARGS, "--batch-sizes", "1,2,3,4", "--contexts", ",".join(map(str, range(4, 54))),
            "--new-tokens", "50", "--warmup", "0", "--repeats", "1", "--device", "cpu",
            "--threads", "1", "--json", str(out)]
    res = interrupt_when(launch.scripts / SCRIPT, args, lambda lines: ROW.match(lines[-1]), sig)
    assert res.returncode == status, res.output
    name = signal.Signals(sig).name
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and re.fullmatch(
        rf"decode_bench\.py: error: interrupted by {name} after \d+ of 200 points", errors[0]), res.stderr
    assert "Traceback" not in res.stderr and "# interrupted:" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and 1 <= len(doc["results"]) < 200
    assert len(doc["results"]) == len([m for m in map(ROW.match, res.stdout.splitlines()) if m])
    assert [p.name for p in tmp_path.iterdir()] == ["partial.json"]  # no temporary file left


def test_help_does_not_import_torch(launch):
    proc = subprocess.run([sys.executable, "-X", "importtime", str(launch.scripts / SCRIPT), "--help"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0 and "--kv-heads" in proc.stdout
    assert not re.search(r"\|\s+torch$", proc.stderr, re.M), "torch imported for --help"


# ---------------------------------------------------------------------------------------------
# Careless inputs
# ---------------------------------------------------------------------------------------------

CASES = [
    Case("kv-heads-not-dividing-heads", ["--heads", "8", "--kv-heads", "3"],
         r"--kv-heads \(3\) must divide --heads \(8\)"),
    Case("heads-not-dividing-dim", ["--dim", "100", "--heads", "8", "--kv-heads", "8"],
         r"--heads \(8\) must divide --dim \(100\)"),
    Case("odd-head-size", ["--dim", "24", "--heads", "8", "--kv-heads", "8"], r"head size; it must be even"),
    Case("batch-sizes-empty", ["--batch-sizes", ""], r"--batch-sizes: '' is not a comma-separated list"),
    Case("contexts-empty-item", ["--contexts", "128,,512"], r"--contexts: .*an item is empty"),
    Case("contexts-zero", ["--contexts", "0"], r"--contexts: 0 must be >= 1"),
    Case("batch-sizes-negative", ["--batch-sizes", "4,-2"], r"--batch-sizes: -2 must be >= 1"),
    Case("batch-sizes-nan", ["--batch-sizes", "1,nan"], r"--batch-sizes: 'nan' is not an integer"),
    Case("batch-sizes-fraction", ["--batch-sizes", "1.5"], r"--batch-sizes: '1.5' is not an integer"),
    Case("new-tokens-zero", ["--new-tokens", "0"], r"--new-tokens: 0 must be >= 1"),
    Case("new-tokens-inf", ["--new-tokens", "inf"], r"--new-tokens: 'inf' is not an integer"),
    Case("repeats-zero", ["--repeats", "0"], r"--repeats: 0 must be >= 1"),
    Case("warmup-negative", ["--warmup", "-1"], r"--warmup: -1 must be >= 0"),
    Case("layers-huge", ["--layers", "100000"], r"--layers: 100000 must be <= 256"),
    Case("vocab-one", ["--vocab", "1"], r"--vocab: 1 must be >= 2"),
    Case("threads-zero", ["--threads", "0"], r"--threads: 0 must be >= 1"),
    Case("list-too-long", ["--contexts", ",".join(map(str, range(1, 66)))], r"--contexts: 65 values; at most 64"),
    Case("sweep-over-cap", ["--batch-sizes", ",".join(map(str, range(1, 18))),
                            "--contexts", ",".join(map(str, range(1, 17)))],
         r"--batch-sizes x --contexts is 272 points; at most 256"),
    Case("steps-over-cap", ["--new-tokens", "1000000", "--repeats", "10"],
         r"66,000,000 decode steps .* at most 10,000,000"),
    Case("fp16-on-cpu", ["--device", "cpu", "--dtype", "fp16"], r"--dtype fp16 runs on cuda only"),
    Case("device-unknown", ["--device", "tpu"], r"--device: invalid choice: 'tpu'"),
    Case("kv-cache-too-big", ["--device", "cpu", "--batch-sizes", "65536", "--contexts", "1048576",
                              "--new-tokens", "1", "--repeats", "1", "--warmup", "0"],
         r"--batch-sizes 65536 with --contexts 1048576 needs at least [\d.e+]+ GB .*KV cache"),
    Case("json-is-the-script", ["--json", "{script}"], r"--json .*decode_bench\.py: is also an input"),
]
if not torch.cuda.is_available():
    CASES.append(Case("cuda-missing", ["--device", "cuda"], r"--device cuda: torch sees no CUDA device"))


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_input_refused(case, tmp_path):
    check_refused(f"inference/{SCRIPT}", case, tmp_path)


# ---------------------------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_point_and_cache(db, launch, tmp_path):
    model = db.build_model(2, 64, 4, 2, 100, device="cuda", seed=3)
    prompt = torch.randint(100, (2, 9), device="cuda")
    tokens, cached = db.decode_with_cache(model, prompt, 5)
    with torch.inference_mode():
        full = db.forward_no_cache(model, torch.cat([prompt, tokens[:, :-1]], dim=1))
    torch.testing.assert_close(cached, full[:, 8:], atol=1e-3, rtol=1e-3)

    out = tmp_path / "cuda.json"
    res = launch.python(SCRIPT, [*SHAPE_ARGS, "--batch-sizes", "4", "--contexts", "64",
                                 "--new-tokens", "8", "--device", "cuda", "--dtype", "bf16",
                                 "--json", str(out)], timeout=300)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["device_type"] == "cuda" and doc["dtype"] == "bf16"
    assert doc["device"] == torch.cuda.get_device_name()
    check_rows(doc, dtype_bytes=2)


@pytest.mark.slow
def test_a_full_disk_loses_at_most_the_point_in_progress(tmp_path):
    """The --json file is rewritten after every point. With the file size limited (RLIMIT_FSIZE,
    which Python turns into EFBIG, as a full disk gives ENOSPC) to fit two points but not three,
    the run stops naming the file, and the file holds the first two points."""
    import resource
    out = tmp_path / "sweep.json"
    args = [sys.executable, str(REPO / "scripts" / "inference" / SCRIPT), *SWEEP, "--json", str(out)]
    assert subprocess.run(args, capture_output=True, timeout=120).returncode == 0
    full = json.loads(out.read_text())
    assert len(full["results"]) == 4

    def size(points: int) -> int:
        return len(json.dumps({**full, "interrupted": True, "results": full["results"][:points]}, indent=1)) + 1
    limit = (size(2) + size(3)) // 2
    out.unlink()
    res = subprocess.run(args, capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert res.returncode == 1, res.stderr
    assert res.stderr.strip().endswith(f"error: {out}: cannot write it (File too large); it keeps its "
                                       "previous content"), res.stderr
    kept = json.loads(out.read_text())
    points = [(r["batch"], r["context"]) for r in full["results"]]
    assert kept["interrupted"] is True
    assert [(r["batch"], r["context"]) for r in kept["results"]] == points[:2]
