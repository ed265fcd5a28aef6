"""Tests of scripts/training/mx_quantize.py: the quantizers against hand-computed examples from the
OCP MX v1.0 spec (E2M1 grid, shared scale 2^(floor(log2 amax) - emax_elem), E8M0 encoding), the
NVFP4 recipe (block scale amax / 6 rounded to E4M3), torch's own float8 dtypes as an independent
check of the fp8 rounding, every grid value and every tie of the small formats, a block with an
outlier against per-tensor scaling, the rebuilt tiny model against make_tiny_model.py's, the
--json output and careless invocations."""

from __future__ import annotations

import json
import math
from itertools import pairwise

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script
from tools.results import problems

SCRIPT = "mx_quantize.py"
SMALL = ("e2m1", "e2m3", "e3m2")


@pytest.fixture(scope="module")
def mx():
    return import_script(REPO / "scripts" / "training" / SCRIPT)


def t(values):
    return torch.tensor(values, dtype=torch.float64)


# --- element grids ---------------------------------------------------------------------------

def test_grids_are_the_spec_values(mx):
    assert mx.element_grid("e2m1") == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    e2m3, e3m2 = mx.element_grid("e2m3"), mx.element_grid("e3m2")
    assert len(e2m3) == len(e3m2) == 32                        # 5 magnitude bits, all codes numbers
    assert (e2m3[1], e2m3[8], e2m3[-1]) == (0.125, 1.0, 7.5)  # min subnormal, min normal, max
    assert (e3m2[1], e3m2[4], e3m2[-1]) == (0.0625, 0.25, 28.0)
    e4m3, e5m2 = mx.element_grid("e4m3"), mx.element_grid("e5m2")
    assert len(e4m3) == 127 and e4m3[-1] == 448 and e4m3[1] == 2**-9   # S.1111.111 is NaN
    assert len(e5m2) == 124 and e5m2[-1] == 57344 and e5m2[1] == 2**-16  # exponent 11111: Inf/NaN
    assert [mx.ELEMENTS[n].emax for n in ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1")] == [8, 15, 4, 2, 2]


@pytest.mark.parametrize("name", [*SMALL, "e4m3", "e5m2"])
def test_every_grid_value_maps_to_itself_and_ties_go_to_even(mx, name):
    grid = mx.element_grid(name)
    values = t(grid + [-v for v in grid])
    q, sat = mx.round_to_element(values, name)
    assert torch.equal(q, values) and not sat.any()
    # code i of a positive value is the grid index i: its last bit is the mantissa's last bit,
    # so a midpoint between neighbours rounds to the even index
    mids = t([(a + b) / 2 for a, b in pairwise(grid)])
    expect = t([grid[i] if i % 2 == 0 else grid[i + 1] for i in range(len(grid) - 1)])
    assert torch.equal(mx.round_to_element(mids, name)[0], expect)
    assert torch.equal(mx.round_to_element(-mids, name)[0], -expect)


@pytest.mark.parametrize("name,dtype", [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)])
def test_fp8_rounding_matches_torch_float8(mx, name, dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(20000, generator=gen, dtype=torch.float64) * \
        torch.exp2(torch.empty(20000, dtype=torch.float64).uniform_(-18, 15, generator=gen))
    x = x.clamp(-mx.ELEMENTS[name].max_normal, mx.ELEMENTS[name].max_normal)
    x = torch.cat([x, t(mx.element_grid(name))])
    ours, _ = mx.round_to_element(x, name)
    theirs = x.to(torch.float32).to(dtype).to(torch.float64)
    assert torch.equal(ours, theirs)


def test_saturation_at_the_largest_normal(mx):
    q, sat = mx.round_to_element(t([448, 460, 480, 1e6, -1e6]), "e4m3")
    assert q.tolist() == [448, 448, 448, 448, -448] and sat.tolist() == [False, True, True, True, True]
    q, sat = mx.round_to_element(t([57344, 61440, 1e9]), "e5m2")
    assert q.tolist() == [57344] * 3 and sat.tolist() == [False, True, True]
    q, _ = mx.round_to_element(t([6.9, 7.0, 100.0]), "e2m1")
    assert q.tolist() == [6, 6, 6]


def test_nan_and_inf_are_refused(mx):
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="NaN/Inf"):
            mx.mx_quantize(t([1.0, bad]), "e2m1")
    with pytest.raises(ValueError, match="unknown element format"):
        mx.round_to_element(t([1.0]), "e9m9")


def test_the_format_table_agrees(mx):
    """data/training/float_formats.yml (the chapter's tables) says what the quantizers do."""
    import yaml
    rows = {r["format"]: r for r in yaml.safe_load((REPO / "data/training/float_formats.yml").read_text())["rows"]}
    for fmt, name in (("fp6 E3M2", "e3m2"), ("fp6 E2M3", "e2m3"), ("fp4 E2M1", "e2m1")):
        grid, el = mx.element_grid(name), mx.ELEMENTS[name]
        assert rows[fmt]["bits"] == f"1 / {el.ebits} / {el.mbits}" and rows[fmt]["bias"] == el.bias
        assert (float(rows[fmt]["max"]), float(rows[fmt]["min_normal"]), float(rows[fmt]["min_subnormal"])) \
            == (grid[-1], el.min_normal, grid[1])
        assert float(rows[fmt]["eps"]) == 2.0 ** -el.mbits
    assert float(rows["E8M0 (MX scale)"]["max"]) == pytest.approx(float(mx.e8m0_decode(torch.tensor([254]))), rel=5e-3)
    assert float(rows["E8M0 (MX scale)"]["min_normal"]) == pytest.approx(2.0**-127, rel=5e-3)
    for fmt, ours in (("MXFP8", "mxfp8_e4m3"), ("MXFP6", "mxfp6_e2m3"), ("MXFP4", "mxfp4_e2m1"), ("NVFP4", "nvfp4")):
        assert float(rows[fmt]["bits_per_value"]) == mx.bits_per_element(ours)
    assert rows["NVFP4"]["block"] == mx.NVFP4_BLOCK and rows["MXFP4"]["block"] == mx.MX_BLOCK


# --- MX blocks -------------------------------------------------------------------------------

def test_mxfp4_block_with_amax_6_has_scale_one_and_rounds_to_the_grid(mx):
    # OCP rule: X = 2^(floor(log2 6) - emax_elem) = 2^(2 - 2) = 1; then nearest even on the grid
    x = t([6.0, 5.0, 2.5, 0.25, 0.75, 1.25, 3.5, -4.9])
    r = mx.mx_quantize(x, "e2m1", block_size=8)
    assert r.scale_exponents.tolist() == [[0]] and r.scales.tolist() == [[1.0]]
    assert r.values.tolist() == [6, 4, 2, 0, 1, 1, 4, -4]     # 5 -> 4, 2.5 -> 2, 0.25 -> 0 (even)


def test_scale_exponent_rules(mx):
    amax = t([6.0, 7.0, 448.0, 500.0, 1.0, 0.0])
    assert mx.mx_scale_exponent(amax, "e2m1", "floor").tolist() == [0, 0, 6, 6, -2, -127]
    assert mx.mx_scale_exponent(amax, "e2m1", "ceil").tolist() == [0, 1, 7, 7, -2, -127]
    assert mx.mx_scale_exponent(amax, "e4m3", "floor").tolist() == [-6, -6, 0, 0, -8, -127]
    assert mx.mx_scale_exponent(amax, "e4m3", "ceil").tolist() == [-6, -6, 0, 1, -8, -127]
    # floor: 7 lands in [4, 8) and saturates to 6; ceil: X = 2, 7 / 2 = 3.5 -> 4 (even) -> 8
    assert mx.mx_quantize(t([7.0, 1.0]), "e2m1", 2, "floor").values.tolist() == [6, 1]
    assert mx.mx_quantize(t([7.0, 1.0]), "e2m1", 2, "ceil").values.tolist() == [8, 1]
    assert mx.mx_scale_exponent(t([2.0**-140]), "e2m1").tolist() == [-127]   # E8M0 floor


def test_e8m0_encoding_matches_torch_float8_e8m0fnu(mx):
    k = torch.tensor([-127, -1, 0, 1, 127])
    assert mx.e8m0_encode(k).tolist() == [0, 126, 127, 128, 254]
    assert mx.e8m0_decode(torch.tensor([0, 127, 128, 254])).tolist() == [2.0**-127, 1, 2, 2.0**127]
    assert math.isnan(mx.e8m0_decode(torch.tensor([255])).item())
    with pytest.raises(ValueError, match="-127..127"):
        mx.e8m0_encode(torch.tensor([128]))
    if hasattr(torch, "float8_e8m0fnu"):
        powers = torch.ldexp(torch.ones(5, dtype=torch.float32), k.float())
        assert torch.equal(powers.to(torch.float8_e8m0fnu).view(torch.uint8), mx.e8m0_encode(k))
        codes = torch.arange(255, dtype=torch.uint8)
        assert torch.equal(codes.view(torch.float8_e8m0fnu).to(torch.float64), mx.e8m0_decode(codes))


def test_blocks_run_along_the_last_dimension_with_zero_padding(mx):
    x = torch.ones(3, 40)
    x[1, 35] = 96.0                     # row 1, second block (32..39): X = 2^(6 - 8), 96 / X = 384
    r = mx.mx_quantize(x, "e4m3")
    assert r.scales.shape == (3, 2) and r.values.shape == x.shape
    assert r.scale_exponents[1].tolist() == [-8, 6 - 8] and r.scale_exponents[0].tolist() == [-8, -8]
    assert torch.equal(r.values, x)     # 1 / 2^-8 = 256, 1 / 2^-2 = 4 and 384: all on the E4M3 grid


def test_one_outlier_hurts_its_block_only_not_the_tensor(mx):
    gen = torch.Generator().manual_seed(1)
    small = torch.rand(4, 32, generator=gen, dtype=torch.float64) * 1e-3 + 1e-3
    loud = torch.rand(1, 32, generator=gen, dtype=torch.float64)
    loud[0, 5] = 1e3
    x = torch.cat([small, loud])                                 # 5 blocks, one outlier
    for name in ("e4m3", "e2m1"):
        mx_err = (mx.mx_quantize(x, name).values.double() - x)[:4].norm() / x[:4].norm()
        pt_err = (mx.per_tensor_quantize(x, name).values.double() - x)[:4].norm() / x[:4].norm()
        assert mx_err < 0.2 * pt_err, (name, mx_err, pt_err)
    # per tensor, E4M3's scale 1000/448 pushes 1e-3 below half the smallest subnormal: zeros
    assert (mx.per_tensor_quantize(x, "e4m3").values[:4] == 0).float().mean() > 0.5


def test_per_tensor_fp8_matches_a_torch_cast(mx):
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(2)) * 3
    r = mx.per_tensor_quantize(x, "e4m3")
    s = float(r.scales[0])
    assert s == pytest.approx(float(x.abs().max()) / 448)
    assert torch.equal(r.values, ((x.double() / s).float().to(torch.float8_e4m3fn).double() * s).float())


# --- NVFP4 -----------------------------------------------------------------------------------

def test_nvfp4_block_scale_is_amax_over_6_rounded_to_e4m3(mx):
    x = torch.zeros(3, 16, dtype=torch.float64)
    x[0, :3] = t([3.0, -1.0, 0.2])       # 3 / 6 = 0.5: exact in E4M3
    x[1, 0] = 1.3                        # 1.3 / 6 = 0.2167 -> E4M3 step 2^-6 in [1/8, 1/4): 14/64
    x[2, 0] = 1.35                       # 0.225 -> 14.4/64 rounds down to 14/64: 1.35 saturates
    r = mx.nvfp4_quantize(x, tensor_scale=1.0)
    assert r.scales.flatten().tolist() == [0.5, 0.21875, 0.21875]
    assert r.values[0, :3].tolist() == [3.0, -1.0, 0.25]        # 0.2 / 0.5 = 0.4 -> 0.5 (x 0.5)
    assert r.values[1, 0].item() == pytest.approx(6 * 0.21875)   # 1.3 / 0.21875 = 5.94 -> 6
    assert r.values[2, 0].item() == pytest.approx(6 * 0.21875) and r.saturated[2, 0]
    assert not r.saturated[:2].any()


def test_nvfp4_default_tensor_scale(mx):
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    amax = float(x.abs().max())
    r = mx.nvfp4_quantize(x)
    # the block holding the tensor's amax gets s_block = 448 exactly, so its scale is amax / 6
    assert float(r.scales.max()) == pytest.approx(amax / 6)
    assert torch.equal(r.values, mx.nvfp4_quantize(x, tensor_scale=amax / 2688).values)
    assert mx.bits_per_element("nvfp4") == 4.5 and mx.bits_per_element("mxfp8_e4m3") == 8.25
    assert mx.bits_per_element("mxfp4_e2m1") == 4.25 and mx.bits_per_element("mxfp6_e2m3") == 6.25


# --- the tiny model --------------------------------------------------------------------------

def test_tiny_model_is_make_tiny_model_s(mx):
    mtm = import_script(REPO / "scripts" / "debug" / "make_tiny_model.py")
    vocab = len(mtm.CharTokenizer.train(mtm.make_corpus(2000)))
    assert vocab == mx.TINY_CONFIG["vocab_size"]
    theirs = mtm.TinyLM({**mtm.DEFAULT_CONFIG, "vocab_size": vocab}).state_dict()
    ours = mx.build_tiny_model(mx.TINY_CONFIG).state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in theirs)


def test_model_tensors_are_the_weights_and_matmul_inputs(mx):
    tensors = mx.model_tensors(mx.build_tiny_model(mx.TINY_CONFIG), batch=2, seq_len=8, seed=0)
    weights = {n: tuple(x.shape) for n, g, x in tensors if g == "weights"}
    acts = {n: tuple(x.shape) for n, g, x in tensors if g == "activations"}
    assert len(weights) == 10 and weights["blocks.layers.1.linear2.weight"] == (64, 128)
    assert weights["blocks.layers.0.self_attn.in_proj_weight"] == (192, 64)
    assert len(acts) == 7 and acts["blocks.layers.0.linear2:input"] == (16, 128)
    assert acts["head:input"] == (16, 64)


# --- the script ------------------------------------------------------------------------------

def test_json_output_and_its_numbers(launch, tmp_path, mx):
    out = tmp_path / "mx.json"
    res = launch.python(SCRIPT, ["--no-model", "--synthetic", "--formats",
                                 "fp8_e4m3,fp4_e2m1,mxfp4_e2m1,nvfp4", "--json", str(out)], timeout=60)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "mx_quantize" and doc["schema_version"] == 1 and doc["device"] is None
    assert problems(doc, "--json") == []
    assert doc["date_utc"].endswith("Z") and "torch" in doc["versions"] and "--synthetic" in doc["command"]
    rows = doc["results"]
    assert len(rows) == 3 * 4 + 4                      # 3 synthetic tensors and their sum, 4 formats
    assert all(isinstance(v, (str, int, float, type(None))) for r in rows for v in r.values())
    by = {(r["tensor"], r["format"]): r for r in rows}
    # blocks beat one scale at 4 bits; NVFP4's finer E4M3 scales beat MXFP4 on outlier channels
    assert by[("(all synthetic)", "mxfp4_e2m1")]["snr_db"] > by[("(all synthetic)", "fp4_e2m1")]["snr_db"]
    assert by[("outlier_channels", "nvfp4")]["snr_db"] > by[("outlier_channels", "mxfp4_e2m1")]["snr_db"]
    row = by[("outliers", "nvfp4")]
    assert (row["block_size"], row["scale_type"], row["bits_per_element"]) == (16, "E4M3+FP32", 4.5)
    # the file holds what the functions compute
    x = dict((n, x) for n, _, x in mx.synthetic_tensors(0, 100.0))["outliers"]
    assert row["rel_rms_error"] == pytest.approx(mx.error_stats(x, mx.nvfp4_quantize(x))["rel_rms_error"])
    assert "synthetic (3 tensors, 786,432 values)" in res.stdout and "  nvfp4 " in res.stdout


def test_checkpoint_folder_of_make_tiny_model(mx, tmp_path, capsys):
    mtm = import_script(REPO / "scripts" / "debug" / "make_tiny_model.py")
    model = mtm.TinyLM({**mtm.DEFAULT_CONFIG, "vocab_size": 28, "seed": 5})
    model.save(str(tmp_path))
    out = tmp_path / "r.json"
    assert mx.main(["--checkpoint", str(tmp_path), "--formats", "bf16,mxfp8_e4m3",
                    "--seq-len", "16", "--batch", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    w = [r for r in rows if r["tensor"] == "tok.weight" and r["format"] == "mxfp8_e4m3"][0]
    ref = mx.error_stats(model.tok.weight.detach(), mx.mx_quantize(model.tok.weight.detach(), "e4m3"))
    assert w["rel_rms_error"] == pytest.approx(ref["rel_rms_error"])
    assert "checkpoint" in capsys.readouterr().out


def test_help(launch):
    res = launch.python(SCRIPT, ["--help"], timeout=60)
    assert res.returncode == 0 and "--mx-scale" in res.stdout and "nvfp4" in res.stdout


BAD_INPUT = [
    Case("unknown-format", ["--formats", "mxfp3"], r"--formats: unknown format 'mxfp3'"),
    Case("empty-formats", ["--formats", ","], r"--formats: give at least one format"),
    Case("block-not-power-of-two", ["--mx-block", "24"], r"--mx-block: 24 is not a power of two"),
    Case("block-zero", ["--mx-block", "0"], r"--mx-block: 0 must be >= 1"),
    Case("outlier-nan", ["--outlier-scale", "nan"], r"--outlier-scale: 'nan' is not a finite number"),
    Case("batch-huge", ["--batch", "100000"], r"--batch: 100000 must be <= 1024"),
    Case("no-model-alone", ["--no-model"], r"--no-model leaves nothing"),
    Case("seq-len-too-long", ["--seq-len", "65"], r"--seq-len 65 > the model's max_seq_len 64"),
    Case("outlier-inf", ["--outlier-scale", "inf"], r"--outlier-scale: 'inf' is not a finite number"),
    Case("seq-len-zero", ["--seq-len", "0"], r"--seq-len: 0 must be >= 1"),
    Case("checkpoint-empty", ["--checkpoint", ""], r"--checkpoint: must not be empty"),
    Case("checkpoint-missing", ["--checkpoint", "{tmp}/none"], r"--checkpoint .*none: does not exist"),
    Case("checkpoint-without-model", ["--checkpoint", "{tmp}/ck"], r"--checkpoint: .*model\.pt does not exist",
         files={"ck/config.json": "{}"}),
    Case("checkpoint-config-not-json", ["--checkpoint", "{tmp}/ck"], r"config\.json is not a model config",
         files={"ck/config.json": "vocab=28\n", "ck/model.pt": b"junk"}),
    Case("checkpoint-damaged", ["--checkpoint", "{tmp}/ck"], r"model\.pt is truncated or damaged",
         files={"ck/config.json": json.dumps({"vocab_size": 28, "d_model": 64, "n_layers": 2, "n_heads": 4,
                                              "d_ff": 128, "max_seq_len": 64}), "ck/model.pt": b"junk"}),
    Case("json-is-the-checkpoint", ["--checkpoint", "{tmp}/ck", "--json", "{tmp}/ck/model.pt"],
         r"--json .*is also an input", files={"ck/config.json": "{}", "ck/model.pt": b"x"}),
    Case("cuda-missing", ["--device", "cuda", "--formats", "bf16"], r"--device cuda: CUDA is not available"),
]


# Issue 30: a checkpoint's config.json that is not a file, or holds bad or huge values. Each is one
# line naming the file and the field, before anything is allocated.
TINY = {"vocab_size": 28, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128, "max_seq_len": 64}


def checkpoint(config: str | dict, model: bytes = b"x") -> dict:
    return {"ck/config.json": config if isinstance(config, str) else json.dumps(config), "ck/model.pt": model}


CONFIG_CASES = [
    Case("config-fifo", ["--checkpoint", "{tmp}/ck"], r"--checkpoint: .*ck/config\.json is not a regular file",
         files={"ck/model.pt": b"x"}, fifos=("ck/config.json",)),
    Case("config-deep-json", ["--checkpoint", "{tmp}/ck"],
         r"ck/config\.json is not a model config \(nested too deeply to be JSON data\)",
         files=checkpoint("[" * 100_000)),
    Case("config-huge-number", ["--checkpoint", "{tmp}/ck"],
         r"ck/config\.json is not a model config \(not valid JSON \(Exceeds the limit",
         files=checkpoint('{"d_model": ' + "1" * 5000 + "}")),
    Case("config-over-1-mib", ["--checkpoint", "{tmp}/ck"],
         r"ck/config\.json is not a model config \(larger than 1 MiB", files=checkpoint(" " * ((1 << 20) + 10))),
    Case("config-missing-key", ["--checkpoint", "{tmp}/ck"], r"ck/config\.json: max_seq_len is missing",
         files=checkpoint({k: v for k, v in TINY.items() if k != "max_seq_len"})),
    Case("config-size-text", ["--checkpoint", "{tmp}/ck"],
         r"ck/config\.json: d_model must be an integer from 1 to 8,192 .*, got '64'",
         files=checkpoint({**TINY, "d_model": "64"})),
    Case("config-size-inf", ["--checkpoint", "{tmp}/ck"], r"ck/config\.json: d_ff must be an integer .*, got inf",
         files=checkpoint(json.dumps(TINY).replace('"d_ff": 128', '"d_ff": Infinity'))),
    Case("config-size-bool", ["--checkpoint", "{tmp}/ck"], r"ck/config\.json: n_layers must be an integer .*, got True",
         files=checkpoint({**TINY, "n_layers": True})),
    Case("config-seed-nan", ["--checkpoint", "{tmp}/ck"], r"ck/config\.json: seed must be an integer .*, got nan",
         files=checkpoint(json.dumps({**TINY, "seed": 0}).replace('"seed": 0', '"seed": NaN'))),
    # each field within its cap, 1.8e11 parameters together: was an allocator error
    Case("config-huge-model", ["--checkpoint", "{tmp}/ck"],
         r"ck/config\.json: vocab_size 1,000,000, d_model 8,192, .* make 180,545,404,928 parameters, more than "
         r"the 50,000,000", files=checkpoint({**TINY, "vocab_size": 1_000_000, "d_model": 8192, "n_layers": 128,
                                                 "d_ff": 65536, "max_seq_len": 65536})),
    Case("activations-huge", ["--checkpoint", "{tmp}/ck", "--batch", "1024", "--seq-len", "65536"],
         r"--batch 1024 x --seq-len 65536 on this model .* activation values at once, more than 67,108,864",
         files=checkpoint({**TINY, "max_seq_len": 65536})),
    Case("model-pt-larger-than-its-weights", ["--checkpoint", "{tmp}/ck"],
         r"ck/model\.pt holds 3,000,000 bytes, more than the weights of .*72,960 parameters",
         files=checkpoint(TINY, b"x" * 3_000_000)),
]


def test_parameter_count_and_bounds_agree_with_make_tiny_model(mx):
    mtm = import_script(REPO / "scripts" / "debug" / "make_tiny_model.py")
    odd = {**TINY, "vocab_size": 300, "d_model": 96, "n_heads": 3, "d_ff": 50, "max_seq_len": 17}
    for cfg in (mx.TINY_CONFIG, odd):
        counted = sum(p.numel() for p in mx.build_tiny_model(cfg).parameters())
        assert mx.tiny_params(cfg) == mtm.tiny_params(cfg) == counted
    assert mx.MAX_PARAMS == mtm.MAX_PARAMS and mx.CONFIG_CAPS == {k: mtm.CAPS[k] for k in mx.CONFIG_CAPS}
    assert mx.tiny_activations(mx.TINY_CONFIG, 8, 64) == 294_912  # "activations (7 tensors, 294,912 values)"


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT + CONFIG_CASES])
def test_bad_input(case, tmp_path):
    if case.id == "cuda-missing" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    check_refused(f"training/{SCRIPT}", case, tmp_path)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_gives_the_cpu_numbers(mx):
    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(4))
    for fn in (lambda v: mx.mx_quantize(v, "e2m1"), mx.nvfp4_quantize):
        assert torch.equal(fn(x).values, fn(x.cuda()).values.cpu())
