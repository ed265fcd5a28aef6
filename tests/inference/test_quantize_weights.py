"""Tests of scripts/inference/quantize_weights.py: the round-to-nearest quantizer's guarantees, the
bytes it reports, a real small run of the script, and careless inputs.

What must hold, and where it comes from (none of it is copied from a run of the script):
* Round-to-nearest with scale s puts every value within s / 2 of its original, provided no value
  is clamped; the scale is max|w| / (2^(B-1) - 1) (absmax) or (max - min) / (2^B - 1)
  (zero-point), rounded up to its stored format, so nothing is clamped (Dettmers et al. 2022,
  https://arxiv.org/abs/2208.07339, Section 2.1, for the two schemes).
* A value already on the grid (an integer times the scale) comes back exactly.
* The integers stay in the B-bit range: -2^(B-1)..2^(B-1)-1 signed, 0..2^B-1 with a zero-point.
* A group shares the scale of its own largest value, never a larger one, so a row with one
  outlier is quantized more finely in every group but the outlier's.
* Stored bits per weight = B + (scale bits + zero-point bits) / group size; for the script's model
  (per block: qkv 3W x W, proj W x W, MLP 4W x W and W x 4W, so 12 W^2 weights in 9 W rows) a
  per-channel fp16 scale costs 9 W * 16 / (12 W^2) = 12 / W bits per weight.
* bf16 keeps 8 significant bits, so rounding to it changes a value by at most 2^-9 of itself.
"""

from __future__ import annotations

import json
import math
import random
import signal
import subprocess
import sys

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script, interrupt_when
from tools.results import problems

torch = pytest.importorskip("torch")

SCRIPT = "quantize_weights.py"
CORPUS = REPO / "data" / "training" / "corpus.jsonl"
# A small real run: a 1 x 32 model that gets past the byte-frequency stage in about 2 s, so that
# 4-bit weights measurably cost it something (about 4 s with torch's import).
WIDTH = 32
CLI_RUN = ["--layers", "1", "--width", str(WIDTH), "--heads", "2", "--context", "32", "--steps", "400",
           "--batch", "32", "--lr", "1e-2", "--seed", "0", "--group-sizes", "16,32",
           "--schemes", "bf16,int8,int4,int4-gG,int4-g16-asym"]


@pytest.fixture(scope="module")
def qw(launch):
    return import_script(launch.scripts / SCRIPT)


@pytest.fixture(scope="module")
def run(launch, tmp_path_factory):
    out = tmp_path_factory.mktemp("quant") / "quant.json"
    res = launch.python(SCRIPT, [*CLI_RUN, "--json", str(out)], timeout=120)
    assert res.returncode == 0, res.output
    return res, json.loads(out.read_text())


def random_weight(gen, rows=24, cols=64):
    """Rows of very different magnitudes, some skewed to one sign, one row all zero."""
    w = torch.randn(rows, cols, generator=gen) * torch.logspace(-4, 1, rows)[:, None]
    w[1] = w[1].abs() + 0.5
    w[2] = -w[2].abs()
    w[3] = 0.0
    return w


# --- the quantizer ---

@pytest.mark.parametrize("symmetric", [True, False], ids=["absmax", "zero-point"])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("group_size", [None, 8, 32])
def test_round_trip_error_at_most_half_a_step(qw, symmetric, bits, group_size):
    gen = torch.Generator().manual_seed(bits * 10 + (group_size or 0))
    w = random_weight(gen)
    q, scale, zero = qw.quantize(w, bits, group_size, symmetric)
    g = group_size or w.shape[1]
    assert q.shape == w.shape and scale.shape == (w.shape[0], w.shape[1] // g)
    assert scale.dtype == torch.float16 and (scale > 0).all()
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)
    assert int(q.min()) >= lo and int(q.max()) <= hi
    assert (zero is None) == symmetric
    if zero is not None:
        assert zero.shape == scale.shape and int(zero.min()) >= 0 and int(zero.max()) <= hi
    err = (w - qw.dequantize(q, scale, zero)).abs().reshape(w.shape[0], -1, g)
    bound = scale.float()[..., None] / 2
    assert (err <= bound * (1 + 1e-5) + 1e-12).all(), float((err / bound).max())
    # a group whose values are all zero comes back as zeros
    assert (qw.dequantize(q, scale, zero)[3] == 0).all()


def test_symmetric_int4_and_int8_ranges(qw):
    w = random_weight(torch.Generator().manual_seed(1), 16, 128) * 1e3
    for bits, (lo, hi) in ((4, (-8, 7)), (8, (-128, 127))):
        q, scale, _ = qw.quantize(w, bits, 32)
        assert q.dtype == torch.int8 and int(q.min()) >= lo and int(q.max()) <= hi
        # absmax maps each group's largest magnitude to +-(2^(B-1) - 1), never to -2^(B-1)
        assert int(q.abs().max()) == hi
    q, _, zero = qw.quantize(w, 4, 32, symmetric=False)
    assert q.dtype == torch.uint8 and int(q.max()) <= 15 and int(zero.max()) <= 15


def test_scale_is_stored_rounded_up(qw):
    w = random_weight(torch.Generator().manual_seed(2))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        _, scale, _ = qw.quantize(w, 4, 16, scale_dtype=dtype)
        assert scale.dtype == dtype
        amax = w.reshape(w.shape[0], -1, 16).abs().amax(-1)
        assert (scale.float() * 7 >= amax * (1 - 1e-6)).all()  # fp32: amax / 7 itself
        # rounded up by less than one step of the format
        info = torch.finfo(dtype)  # one step: eps relative, or the subnormal step near zero
        assert (scale.float() <= torch.where(amax > 0, amax / 7, 1.0) * (1 + 2 * info.eps)
                + info.tiny * info.eps).all()


@pytest.mark.parametrize("symmetric", [True, False], ids=["absmax", "zero-point"])
@pytest.mark.parametrize("bits,group_size", [(4, 16), (8, None), (3, 8)])
def test_values_on_the_grid_round_trip_exactly(qw, symmetric, bits, group_size):
    gen = torch.Generator().manual_seed(bits)
    rows, cols = 12, 48
    g = group_size or cols
    groups = cols // g
    scale = 2.0 ** torch.randint(-12, 2, (rows, groups), generator=gen).float()
    if symmetric:
        top = 2 ** (bits - 1) - 1
        q = torch.randint(-top, top + 1, (rows, groups, g), generator=gen)
        q[..., 0] = top  # each group reaches the top of the range, so its scale is reproduced
        w = (q * scale[..., None]).reshape(rows, cols)
    else:
        top = 2 ** bits - 1
        zero = torch.randint(0, top + 1, (rows, groups), generator=gen)
        q = torch.randint(0, top + 1, (rows, groups, g), generator=gen)
        q[..., 0], q[..., 1] = 0, top  # the range is exactly [-z s, (top - z) s]
        w = ((q - zero[..., None]) * scale[..., None]).reshape(rows, cols)
    qq, s, z = qw.quantize(w, bits, group_size, symmetric)
    assert torch.equal(s.float(), scale)
    assert torch.equal(qw.dequantize(qq, s, z), w)
    if not symmetric:
        assert torch.equal(z.long(), zero)


def test_groups_confine_an_outlier(qw):
    """One weight per row 50 times the row's spread: per channel it sets the whole row's scale;
    group-wise only its own group's, so every row's largest error is no larger, and the groups
    without the outlier are quantized strictly more finely."""
    gen = torch.Generator().manual_seed(3)
    rows, cols = 32, 256
    w = torch.randn(rows, cols, generator=gen)
    where = torch.randint(0, cols, (rows,), generator=gen)
    w[torch.arange(rows), where] = 50.0 * torch.sign(torch.randn(rows, generator=gen))
    per_channel = (w - qw.dequantize(*qw.quantize(w, 4))).abs()
    for g in (16, 32, 64, 128):
        grouped = (w - qw.dequantize(*qw.quantize(w, 4, g))).abs()
        assert (grouped.amax(1) <= per_channel.amax(1)).all(), g
        outlier_group = (torch.arange(cols)[None, :] // g) == (where[:, None] // g)
        # the outlier's group has the row's scale: the same integers, the same errors
        assert torch.equal(grouped[outlier_group], per_channel[outlier_group])
        assert grouped[~outlier_group].max() < per_channel[~outlier_group].max() / 4
        assert torch.linalg.norm(grouped) < torch.linalg.norm(per_channel)


def test_refuses_what_it_cannot_store(qw):
    with pytest.raises(ValueError, match="group size 48 does not divide the input width 128"):
        qw.quantize(torch.ones(4, 128), 4, 48)
    with pytest.raises(ValueError, match="overflows"):  # 1e7 / 7 is beyond fp16's 65504
        qw.quantize(torch.full((2, 8), 1e7), 4)
    qw.quantize(torch.full((2, 8), 1e7), 4, scale_dtype=torch.float32)  # fits in fp32
    with pytest.raises(ValueError, match="nan or inf"):
        qw.quantize(torch.tensor([[1.0, math.nan]]), 8)
    with pytest.raises(ValueError, match="2-D"):
        qw.quantize(torch.ones(8), 8)


# --- bytes ---

def test_effective_bits_formula(qw):
    assert qw.effective_bits(4, 128) == 4.125
    assert qw.effective_bits(4, 128, asymmetric=True) == 4 + 20 / 128
    assert qw.effective_bits(8, 64) == 8.25
    assert qw.effective_bits(4, 128, scale_bits=32) == 4.25
    # storage_bytes of a whole matrix agrees with the per-weight formula, per group and per row
    for shape, g in (((384, 128), 128), ((128, 512), 32), ((128, 512), None)):
        for asym in (False, True):
            n = shape[0] * shape[1]
            assert qw.storage_bytes(shape, 4, g, asym) == qw.effective_bits(4, g or shape[1], asym) * n / 8
    assert qw.storage_bytes((128, 512), 4, 128) == 128 * 512 / 2 + 128 * 4 * 2  # int4 packed + fp16 scales


def test_scheme_names(qw):
    names = [s.name for s in qw.parse_scheme("int4-gG-asym", [32, 64])]
    assert names == ["int4-g32-asym", "int4-g64-asym"]
    s = qw.parse_scheme("int8", [128])[0]
    assert (s.bits, s.group_size, s.asymmetric) == (8, None, False)
    assert qw.parse_scheme("bf16", [])[0].float_dtype == "bf16"
    for bad in ("int4g128", "int9", "int1", "fp8", "int4-g0", "int4-asym-g128"):
        with pytest.raises(ValueError):
            qw.parse_scheme(bad, [128])


# --- the held-out measurement ---

def test_every_held_out_byte_counted_once(qw):
    rng = random.Random(0)
    docs = [bytes(rng.randrange(256) for _ in range(n)) for n in (33, 64, 65, 66, 100, 129, 20)]
    x, mask = qw.eval_windows(docs, 32)
    assert x.shape[1] == 33 and mask.shape == (x.shape[0], 32)
    counted = b"".join(bytes(row[1:][m].tolist()) for row, m in zip(x, mask, strict=True))
    assert counted == b"".join(d[1:] for d in docs if len(d) >= 33)


def test_bits_per_byte_of_a_uniform_model_is_8(qw):
    class Uniform(torch.nn.Module):
        def forward(self, idx):
            return torch.zeros(*idx.shape, 256)
    x, mask = qw.eval_windows([bytes(range(200))], 16)
    assert qw.bits_per_byte(Uniform(), x, mask) == pytest.approx(8.0, abs=1e-6)  # float32 log(256)


# --- a real run of the script ---

@pytest.mark.slow
def test_cli_run(run):
    res, doc = run
    assert problems(doc, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert doc["benchmark"] == "quantize_weights" and doc["torch_version"] and doc["date_utc"]
    assert doc["command"].startswith("python ") and doc["interrupted"] is False
    rows = {r["scheme"]: r for r in doc["results"]}
    assert list(rows) == ["fp32", "bf16", "int8", "int4", "int4-g16", "int4-g32", "int4-g16-asym"]
    for r in doc["results"]:
        for key in ("bits_per_byte", "delta_bits_per_byte", "ppl_per_byte", "rel_err_mean",
                    "rel_err_max", "quantized_bytes", "effective_bits", "saved_vs_bf16"):
            assert math.isfinite(r[key]), (r["scheme"], key)
        assert r["ppl_per_byte"] == pytest.approx(2 ** r["bits_per_byte"])
        assert r["delta_bits_per_byte"] == pytest.approx(r["bits_per_byte"] - rows["fp32"]["bits_per_byte"])
        assert r["scheme"] in res.stdout
    base = rows["fp32"]["bits_per_byte"]
    assert 0 < base < 8  # a trained model beats the uniform 8 bits per byte
    # the quality cost: 4-bit weights cost this model something, 8-bit ones much less
    assert rows["int4"]["delta_bits_per_byte"] > 0
    assert abs(rows["int8"]["delta_bits_per_byte"]) < rows["int4"]["delta_bits_per_byte"]
    assert rows["int8"]["rel_err_max"] < rows["int4"]["rel_err_mean"]
    assert rows["bf16"]["rel_err_max"] <= 2 ** -9
    # finer groups, finer weights
    assert rows["int4-g16"]["rel_err_mean"] < rows["int4-g32"]["rel_err_mean"] <= rows["int4"]["rel_err_mean"]
    # bytes: B + 16 / g per weight, 12 / W for per-channel rows (book/en/inference/quantization.md)
    n = doc["model"]["quantized_weights"]
    assert n == 12 * WIDTH ** 2  # 1 block, embedding not included
    expected = {"fp32": 32, "bf16": 16, "int8": 8 + 12 / WIDTH, "int4": 4 + 12 / WIDTH,
                "int4-g16": 5.0, "int4-g32": 4.5, "int4-g16-asym": 4 + 20 / 16}
    for name, bits in expected.items():
        r = rows[name]
        assert r["effective_bits"] == pytest.approx(bits), name
        assert r["quantized_bytes"] == pytest.approx(bits * n / 8), name
        assert r["saved_vs_bf16"] == pytest.approx(1 - bits / 16), name


def test_quantized_matrices(qw):
    """Every nn.Linear weight (4 per block), and the tied embedding only when asked."""
    model = qw.build_model(2, 16, 2, 8)
    plain = qw.quantized_tensors(model, include_embedding=False)
    assert len(plain) == 8 and all(name.startswith("blocks.") for name in plain)
    assert sum(p.numel() for p in plain.values()) == 2 * 12 * 16 ** 2
    with_embedding = qw.quantized_tensors(model, include_embedding=True)
    assert with_embedding["tok.weight"] is model.tok.weight and len(with_embedding) == 9
    assert not any(p.dim() == 1 for p in with_embedding.values())  # biases, LayerNorms never


@pytest.mark.slow
def test_interrupt_keeps_the_rows_done(launch, tmp_path):
    out = tmp_path / "partial.json"
    args = ["--layers", "1", "--width", "64", "--context", "64", "--steps", "0",
            "--schemes", ",".join(f"int{b}-gG" for b in range(2, 9)), "--group-sizes", "8,16,32,64", "--json", str(out)]
    res = interrupt_when(launch.scripts / SCRIPT, args, lambda lines: lines[-1].startswith("int2-g8 "),
                         signal.SIGTERM, timeout=60)
    assert res.returncode == 143, res.output
    assert "# interrupted:" in res.stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert [r["scheme"] for r in doc["results"]][:2] == ["fp32", "int2-g8"] and len(doc["results"]) < 29


def test_help_does_not_import_torch():
    code = ("import runpy, sys; sys.argv = [sys.argv[1], '--help']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('TORCH', 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "scripts" / "inference" / SCRIPT)],
                          env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "--schemes" in proc.stdout and "TORCH False" in proc.stdout


# --- careless inputs ---

GOOD = '{"text": "' + "the lantern above the composer was repaired slowly. " * 4 + '"}\n'
CASES = [
    Case("scheme-unknown", ["--schemes", "int8,int5x"], r"--schemes: unknown scheme 'int5x'"),
    Case("scheme-too-many-bits", ["--schemes", "int9"], r"--schemes: scheme 'int9': 9 bits; .* 2\.\.8 bits"),
    Case("scheme-one-bit", ["--schemes", "int1-g32"], r"scheme 'int1-g32': 1 bits"),
    Case("scheme-group-zero", ["--schemes", "int4-g0"], r"scheme 'int4-g0': group size must be >= 1"),
    Case("scheme-group-not-dividing", ["--schemes", "int4-g48"],
         r"--schemes: int4-g48: group size 48 does not divide 128, the input width of blocks\.0\.qkv"),
    Case("scheme-group-wider-than-width", ["--width", "64", "--schemes", "int4-g128"],
         r"group size 128 does not divide 64, the input width of blocks\.0\.qkv"),
    Case("group-sizes-not-dividing", ["--group-sizes", "32,96"],
         r"--group-sizes: int4-g96: group size 96 does not divide 128"),
    Case("group-sizes-zero", ["--group-sizes", "0"], r"--group-sizes.*group size 0 must be >= 1"),
    Case("group-sizes-nan", ["--group-sizes", "nan"], r"--group-sizes.*'nan' is not an integer"),
    Case("scheme-twice", ["--schemes", "int4-g32,int4-gG"], r"--schemes: int4-g32 given twice"),
    Case("scheme-empty-item", ["--schemes", "int8,,int4"], r"--schemes .*an empty name"),
    Case("schemes-empty", ["--schemes", " "], r"--schemes: must not be empty"),
    Case("schemes-too-many", ["--schemes", "int2-gG,int3-gG,int4-gG,int5-gG,int6-gG",
                              "--group-sizes", "1,2,4,8,16,32,64"], r"--schemes: 35 schemes; at most 32"),
    Case("scale-dtype-unknown", ["--scale-dtype", "fp8"], r"--scale-dtype: invalid choice: 'fp8'"),
    Case("corpus-missing", ["--corpus", "{tmp}/nope.jsonl"], r"--corpus .*nope\.jsonl: no such file"),
    Case("corpus-empty", ["--corpus", "empty.jsonl"], r"empty\.jsonl: is empty", files={"empty.jsonl": "\n\n"}),
    Case("corpus-not-json", ["--corpus", "bad.jsonl"], r"bad\.jsonl:3: not JSON",
         files={"bad.jsonl": GOOD * 2 + "not json\n"}),
    Case("corpus-no-text", ["--corpus", "t.jsonl"], r"t\.jsonl:1: not a JSON object with a string \"text\"",
         files={"t.jsonl": '{"txt": "a"}\n'}),
    Case("corpus-too-small", ["--corpus", "small.jsonl"], r"small\.jsonl: 2 documents of at least 129 bytes",
         files={"small.jsonl": GOOD * 2}),
    Case("corpus-is-folder", ["--corpus", "{tmp}"], r"--corpus .*: is not a regular file"),
    Case("lr-nan", ["--lr", "nan"], r"--lr.*not a finite number"),
    Case("steps-huge", ["--steps", "1000000000000"], r"--steps.*must be <= 100000"),
    Case("steps-negative", ["--steps", "-1"], r"--steps.*must be >= 0"),
    Case("heads-not-dividing-width", ["--width", "64", "--heads", "5"], r"--heads \(5\) must divide --width \(64\)"),
    Case("json-is-corpus", ["--corpus", "c.jsonl", "--json", "c.jsonl"], r"--json c\.jsonl: is also an input",
         files={"c.jsonl": GOOD * 30}),
]
if not torch.cuda.is_available():
    CASES.append(Case("cuda-missing", ["--device", "cuda", "--steps", "0"], r"--device cuda: CUDA is not available"))


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
    check_refused(f"inference/{SCRIPT}", case, tmp_path)


def test_corpus_size_bounds(tmp_path):
    """A corpus over 256 MiB is refused before it is read (a sparse file here), and a line over
    16 M characters as soon as it is."""
    with open(tmp_path / "big.jsonl", "wb") as f:
        f.truncate((256 << 20) + 1)
    check_refused(f"inference/{SCRIPT}", Case("corpus-over-256-mib", ["--corpus", "big.jsonl"],
                                            r"--corpus big\.jsonl: larger than 256 MiB"), tmp_path)
    (tmp_path / "long.jsonl").write_bytes(GOOD_LINE.encode() + b'{"text": "' + b"a" * (17 << 20) + b'"}\n')
    check_refused(f"inference/{SCRIPT}", Case("line-over-16-m", ["--corpus", "long.jsonl"],
                                            r"long\.jsonl:2: a line of more than 16 M characters"), tmp_path)


# --- CUDA ---

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_runs(qw, launch, tmp_path):
    w = random_weight(torch.Generator().manual_seed(5), 64, 256)
    for bits, g, sym in ((4, 128, True), (4, 32, False), (8, None, True)):
        cpu = qw.quantize(w, bits, g, sym)
        gpu = qw.quantize(w.cuda(), bits, g, sym)
        for a, b in zip(cpu, gpu, strict=True):
            if a is not None:
                assert torch.equal(a, b.cpu())
    out = tmp_path / "cuda.json"
    res = launch.python(SCRIPT, [*CLI_RUN, "--device", "cuda", "--json", str(out)], timeout=300)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["device_name"] == torch.cuda.get_device_name()
    assert all(math.isfinite(r["bits_per_byte"]) for r in doc["results"])
