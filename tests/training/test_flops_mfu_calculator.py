"""Tests of scripts/training/flops_mfu_calculator.py against published numbers.

Sources (each test names the one it uses):
* PaLM: Chowdhery et al. 2022, https://arxiv.org/abs/2204.02311. Table 3: PaLM 540B trained at
  46.2% MFU; section 4 / appendix B: 238.3K tokens/s on 6144 TPU v4 chips; model FLOPs per token
  6N + 12LHQT with N = 540.35B, L = 118, H = 48 heads, Q = 256, T = 2048. Peak 275 TFLOPS per chip
  (https://cloud.google.com/tpu/docs/v4).
* Megatron-LM: Narayanan et al. 2021, https://arxiv.org/abs/2104.04473. Section 5.1: FLOPs per
  iteration with full recomputation F = 96 B s l h^2 (1 + s/6h + V/16lh); training-time estimate
  8TP/(nX): GPT-3 (175B, 300B tokens, 1024 A100s at 140 TFLOPS each) in about 34 days, the 1T
  model (450B tokens, 3072 A100s at 163 TFLOPS) in about 84 days. Table 1: 163 TFLOPS per GPU is
  52% of the A100's 312 TFLOPS peak and 502 PFLOPS in aggregate on 3072 GPUs.
* Korthikanti et al. 2022, https://arxiv.org/abs/2205.05198. Appendix A: model FLOPs per
  iteration 72 B L s h^2 (1 + s/6h + v/12hL) (eq. 7); selective recomputation repeats the attention
  matrix computation and attention over values, 2 B s^2 h FLOPs each per layer, yet eq. 8 gives
  hardware FLOPs 72 B L s h^2 (1 + s/3h + v/12hL). Table 3: the four models (heads, hidden size,
  layers, GPUs, global batch), s = 2048, v = 51200, A100s (312 TFLOPS). Table 5: iteration time
  of the present work (sequence parallelism + selective recomputation) and its MFU and HFU.
* The catalogue data/compute/accelerators.yml: the peaks the script copies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

SCRIPT = "flops_mfu_calculator.py"

PALM = ["--params", "540.35e9", "--layers", "118", "--heads", "48", "--head-dim", "256",
        "--seq-len", "2048", "--tokens-per-s", "238.3e3", "--devices", "6144",
        "--device", "tpu-v4"]
GPT3 = ["--layers", "96", "--hidden", "12288", "--heads", "96", "--vocab", "51200",
        "--seq-len", "2048"]
ONE_T = ["--layers", "128", "--hidden", "25600", "--heads", "160", "--vocab", "51200",
         "--seq-len", "2048"]


@pytest.fixture(scope="module")
def calc(launch):
    return import_script(launch.scripts / SCRIPT)


def run_json(launch, tmp_path, args):
    path = tmp_path / "out.json"
    res = launch.python(SCRIPT, [*args, "--json", str(path)], timeout=30)
    assert res.returncode == 0, res.output
    return res, json.loads(path.read_text())


def test_palm_540b_mfu_is_46_2_percent(launch, tmp_path):
    # PaLM Table 3: 46.2% MFU (rounded to 0.1 point, hence the 0.05 tolerance).
    res, r = run_json(launch, tmp_path, PALM)
    assert 100 * r["mfu"] == pytest.approx(46.2, abs=0.05)
    assert "MFU (with attention)            46.2" in res.stdout
    # No recomputation requested, so hardware and model FLOPs coincide.
    assert r["hfu"] == r["mfu"]
    # Without the attention term the same run is about half a point lower.
    assert 100 * r["mfu_without_attention"] == pytest.approx(45.7, abs=0.05)


def test_palm_attention_term_is_12LHQT(calc):
    f = calc.flops_per_token(matmul_params=540.35e9, layer_matmul_params=535e9, layers=118,
                             attn_width=48 * 256, seq_len=2048)
    assert f["attention"] == 12 * 118 * 48 * 256 * 2048
    assert f["dense"] == 6 * 540.35e9
    assert f["model"] == f["dense"] + f["attention"]


@pytest.mark.parametrize("shape,layers,h,v", [(GPT3, 96, 12288, 51200), (ONE_T, 128, 25600, 51200)])
def test_full_recompute_matches_megatron_formula(launch, tmp_path, shape, layers, h, v):
    # Narayanan et al. 2021: 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs (l layers) per iteration of B sequences
    # of s tokens with full activation recomputation; per token divide by B s.
    s = 2048
    megatron = 96 * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    _, r = run_json(launch, tmp_path, [*shape, "--recompute", "full", "--achieved-tflops", "100",
                                       "--device", "a100"])
    assert r["flops_per_token"]["hardware"] == pytest.approx(megatron, rel=1e-12)
    # Model FLOPs leave the recomputed forward out: 72 instead of 96, 12 instead of 16.
    assert r["flops_per_token"]["model"] == pytest.approx(
        72 * layers * h**2 * (1 + s / (6 * h) + v / (12 * layers * h)), rel=1e-12)


@pytest.mark.parametrize("shape,gpus,tflops,tokens,days", [
    (GPT3, 1024, 140, 300e9, 34),   # "34 days" for GPT-3 175B
    (ONE_T, 3072, 163, 450e9, 84),  # "84 days" for the 1T model
])
def test_megatron_training_time_estimates(launch, tmp_path, shape, gpus, tflops, tokens, days):
    res, r = run_json(launch, tmp_path, [*shape, "--recompute", "full", "--devices", str(gpus),
                                         "--achieved-tflops", str(tflops), "--device", "a100",
                                         "--train-tokens", str(tokens)])
    # The paper rounds 8TP/(nX), which ignores the attention and logit terms; our exact count
    # is within 3% of it.
    assert r["train_days"] == pytest.approx(days, rel=0.03)
    n = r["model"]["matmul_params"]
    approx_days = 8 * tokens * n / (gpus * tflops * 1e12) / 86400
    assert approx_days == pytest.approx(days, abs=0.5)
    assert r["achieved_hardware_tflops"] == pytest.approx(tflops, rel=1e-9)
    assert "days" in res.stdout


def test_megatron_1t_is_52_percent_of_peak_and_502_pflops(launch, tmp_path):
    # Narayanan et al. 2021, Table 1: 163 TFLOPS per GPU, 52% of peak, 502 PFLOPS on 3072 GPUs.
    _, r = run_json(launch, tmp_path, [*ONE_T, "--recompute", "full", "--devices", "3072",
                                       "--achieved-tflops", "163", "--device", "a100"])
    assert 100 * r["hfu"] == pytest.approx(52, abs=0.5)
    # 163 is rounded to whole TFLOPS (+-0.5, i.e. +-0.3%), hence the tolerance on the aggregate.
    assert r["achieved_hardware_tflops"] * 3072 / 1e3 == pytest.approx(502, rel=0.004)
    # Their 52% counts recomputed FLOPs; as MFU the same run is lower.
    assert r["mfu"] < r["hfu"]
    assert r["mfu"] / r["hfu"] == pytest.approx(
        r["flops_per_token"]["model"] / r["flops_per_token"]["hardware"], rel=1e-12)


# Korthikanti et al. 2022: Table 3 (heads a, hidden h, layers L, GPUs, global batch B) and Table 5
# (iteration time in s of the present work, MFU %, HFU %), s = 2048, v = 51200, A100 peak 312.
KORTHIKANTI = [
    ("22B", 64, 6144, 48, 8, 4, 1.10, 41.5, 43.7),
    ("175B", 96, 12288, 96, 64, 64, 13.75, 51.4, 52.8),
    ("530B", 128, 20480, 105, 280, 280, 37.83, 56.0, 57.0),
    ("1T", 160, 25600, 128, 512, 512, 71.49, 56.3, 57.0),
]


def published_within_rounding(flops_per_iteration, gpus, seconds, percent):
    """True when the paper's ``percent`` (one decimal) is what ``flops_per_iteration`` gives on
    ``gpus`` A100s for an iteration time printed as ``seconds`` (two decimals): the interval the
    rounded time allows overlaps the one the rounded percentage stands for."""
    low = 100 * flops_per_iteration / ((seconds + 0.005) * gpus * 312e12)
    high = 100 * flops_per_iteration / ((seconds - 0.005) * gpus * 312e12)
    return low <= percent + 0.05 and high >= percent - 0.05


@pytest.mark.parametrize("name,a,h,layers,gpus,batch,seconds,mfu,hfu", KORTHIKANTI,
                         ids=[row[0] for row in KORTHIKANTI])
def test_selective_recompute_reproduces_korthikanti_table_5(launch, tmp_path, name, a, h, layers,
                                                            gpus, batch, seconds, mfu, hfu):
    s, v = 2048, 51200
    model = 72 * batch * layers * s * h**2 * (1 + s / (6 * h) + v / (12 * h * layers))  # eq. 7
    eq8 = 72 * batch * layers * s * h**2 * (1 + s / (3 * h) + v / (12 * h * layers))    # eq. 8
    # their text: the attention core's forward again, 2 B s^2 h + 2 B s^2 h per layer
    text = model + layers * (2 + 2) * batch * s**2 * h
    res, r = run_json(launch, tmp_path, [
        "--layers", str(layers), "--hidden", str(h), "--heads", str(a), "--vocab", str(v),
        "--seq-len", str(s), "--recompute", "attention", "--devices", str(gpus),
        "--step-time-s", str(seconds), "--global-batch", str(batch), "--device", "a100"])
    peak_flops = seconds * gpus * 312e12
    assert r["mfu"] == pytest.approx(model / peak_flops, rel=1e-12)
    assert r["hfu_paper_convention"] == pytest.approx(eq8 / peak_flops, rel=1e-12)
    assert r["hfu"] == pytest.approx(text / peak_flops, rel=1e-12)
    # The published MFU and HFU are eq. 7 and eq. 8 at the published iteration time.
    assert published_within_rounding(model, gpus, seconds, mfu)
    assert published_within_rounding(eq8, gpus, seconds, hfu)
    # The calculator's own count (the work selective recomputation repeats) is below Table 5's.
    assert not published_within_rounding(text, gpus, seconds, hfu)
    # Both figures are printed, each with its convention.
    assert "+4LaT" in r["hfu_convention"] and "eq. 8" in r["hfu_paper_convention_is"]
    assert f"HFU                             {100 * r['hfu']:.2f} %   +4LaT" in res.stdout
    assert f"HFU, Megatron-LM convention     {100 * r['hfu_paper_convention']:.2f} %" in res.stdout


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_paper_convention_is_printed_only_where_it_differs(launch, tmp_path, recompute):
    res, r = run_json(launch, tmp_path, [*GPT3, "--recompute", recompute, "--tokens-per-s", "1e5",
                                         "--devices", "1024", "--device", "a100"])
    assert r["hfu_paper_convention"] == r["hfu"]
    assert r["hfu_convention"] == r["hfu_paper_convention_is"]
    assert "Megatron-LM convention" not in res.stdout


def test_device_peaks_are_the_catalogues(calc):
    """One figure, one place: each --device names a catalogue row, and its peak is that row's
    dense bf16 figure (the built-in rows are filtered by name: a renamed row would vanish)."""
    catalogue = yaml.safe_load((REPO / "data" / "compute" / "accelerators.yml").read_text())
    rows = {row["name"]: row for row in catalogue["rows"]}
    assert calc.DEVICES
    for key, row in calc.DEVICES.items():
        assert row in rows, f"--device {key}: no row {row!r} in the catalogue"
        assert calc.device_peak(key) == rows[row]["bf16_dense"], key


def test_counted_parameters_match_gpt3_and_1t(launch, tmp_path):
    # Narayanan et al. 2021, Table 1 lists 174.6B and 1008.0B parameters for these shapes.
    _, r = run_json(launch, tmp_path, [*GPT3, "--tokens-per-s", "1", "--device", "a100"])
    assert r["model"]["matmul_params"] / 1e9 == pytest.approx(174.6, abs=0.1)
    _, r = run_json(launch, tmp_path, [*ONE_T, "--tokens-per-s", "1", "--device", "a100"])
    assert r["model"]["matmul_params"] / 1e9 == pytest.approx(1008.0, abs=0.1)


def test_step_time_and_tokens_per_s_agree(launch, tmp_path):
    base = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000",
            "--seq-len", "4096", "--devices", "64", "--peak-tflops", "989"]
    _, a = run_json(launch, tmp_path, [*base, "--step-time-s", "2", "--global-batch", "256"])
    _, b = run_json(launch, tmp_path, [*base, "--tokens-per-s", str(256 * 4096 / 2)])
    assert a["mfu"] == pytest.approx(b["mfu"], rel=1e-12)
    assert a["achieved_model_tflops"] == pytest.approx(
        a["flops_per_token"]["model"] * a["tokens_per_s"] / 64 / 1e12, rel=1e-12)


def test_recompute_modes_order_hardware_flops(calc):
    kw = dict(matmul_params=7e9, layer_matmul_params=6.8e9, layers=32, attn_width=4096,
              seq_len=4096)
    none = calc.flops_per_token(**kw, recompute="none")
    attn = calc.flops_per_token(**kw, recompute="attention")
    full = calc.flops_per_token(**kw, recompute="full")
    assert none["hardware"] == none["model"]
    assert attn["hardware"] - none["model"] == pytest.approx(4 * 32 * 4096 * 4096)
    assert full["hardware"] - none["model"] == pytest.approx(2 * 6.8e9 + 4 * 32 * 4096 * 4096)


def test_gqa_and_gated_mlp_parameter_count(calc):
    # Llama-2-7B-like block: d = 4096, 32 heads, MLP 11008 (SwiGLU): 4d^2 + 3 d f per layer.
    assert calc.layer_params(4096, 4096, 4096, 11008, True) == 4 * 4096**2 + 3 * 4096 * 11008
    # 8 KV heads of 128 shrink K and V to 1024 columns each.
    assert calc.layer_params(4096, 4096, 1024, 11008, True) == \
        2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 11008


SHAPE = ["--layers", "2", "--hidden", "64", "--vocab", "10", "--seq-len", "8"]
BAD_INPUT = [
    Case("list-devices-with-junk", ["--list-devices", "--bogus"],
         r"--list-devices takes no other option \(got --bogus\)"),
    Case("no-throughput", [*SHAPE, "--device", "a100"], "exactly one of --tokens-per-s"),
    Case("no-peak", [*SHAPE, "--tokens-per-s", "5"], "--peak-tflops or --device"),
    Case("tokens-negative", [*SHAPE, "--tokens-per-s", "-5", "--device", "a100"],
         "--tokens-per-s: -5 must be > 0"),
    Case("tokens-inf", [*SHAPE, "--tokens-per-s", "inf", "--device", "a100"],
         "--tokens-per-s: 'inf' is not a finite number"),
    Case("peak-nan", [*SHAPE, "--tokens-per-s", "5", "--peak-tflops", "nan"],
         "--peak-tflops: 'nan' is not a finite number"),
    Case("layers-float", ["--layers", "2.5", "--hidden", "64", "--vocab", "10", "--seq-len", "8"],
         "--layers: '2.5' is not an integer"),
    Case("hidden-not-divisible", ["--layers", "2", "--hidden", "60", "--heads", "8", "--vocab",
                                  "10", "--seq-len", "8", "--tokens-per-s", "5", "--device",
                                  "a100"], "not divisible by --heads"),
    Case("no-params-no-vocab", ["--layers", "2", "--hidden", "64", "--seq-len", "8",
                                "--tokens-per-s", "5", "--device", "a100"], "without --params"),
    Case("step-time-without-batch", [*SHAPE, "--step-time-s", "1", "--device", "a100"],
         "needs --global-batch"),
    # options that were silently ignored without --heads
    Case("kv-heads-without-heads", [*SHAPE, "--kv-heads", "2", "--tokens-per-s", "5", "--device",
                                    "a100"], "--kv-heads 2 needs --heads"),
    Case("head-dim-without-heads", [*SHAPE, "--head-dim", "128", "--tokens-per-s", "5",
                                    "--device", "a100"], "--head-dim 128 needs --heads"),
    Case("device-unknown", [*SHAPE, "--tokens-per-s", "5", "--device", "b9000"], "invalid choice"),
    # 175e9 parameters at 1e9 tokens/s on one A100 would be thousands of times its peak: the
    # script printed an MFU of millions of percent and exited 0.
    Case("mfu-above-100-percent", ["--params", "175e9", "--layers", "96", "--hidden", "12288",
                                   "--vocab", "51200", "--seq-len", "2048", "--tokens-per-s",
                                   "1e9", "--device", "a100"],
         r"--tokens-per-s 1e\+09 on --devices 1 with --device a100, N = 1\.75e\+11 parameters "
         r".*% of the 312 TFLOPS peak: no device runs above its peak"),
    Case("step-time-above-peak", [*SHAPE, "--step-time-s", "1e-9", "--global-batch", "100",
                                  "--peak-tflops", "5"],
         r"--step-time-s 1e-09 with --global-batch 100 on --devices 1 with --peak-tflops 5.*"
         r"no device runs above its peak"),
    # counts that overflow the float arithmetic (an OverflowError traceback before)
    Case("devices-huge", [*SHAPE, "--tokens-per-s", "5", "--device", "a100", "--devices",
                          "1" + "0" * 400], r"--devices: 10{11}\.\.\. \(401 characters\) must be <= "),
    Case("devices-above-cap", [*SHAPE, "--tokens-per-s", "5", "--device", "a100", "--devices",
                               "1" + "0" * 30], r"--devices: 10+ must be <= 1e\+12"),
    Case("layers-huge", [*SHAPE, "--layers", "1" + "0" * 30], r"--layers: 10+ must be <= 1e\+12"),
    Case("params-huge", [*SHAPE, "--params", "1e308"], r"--params: 1e308 must be <= 1e\+16"),
    Case("train-days-overflow", ["--params", "1e3", *SHAPE, "--tokens-per-s", "1e-300",
                                 "--device", "a100", "--train-tokens", "1e308"],
         r"--train-tokens 1e\+308 give a non-finite train_days"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("training/flops_mfu_calculator.py", case, tmp_path)



def test_list_devices_and_help_need_no_torch(launch):
    res = launch.python(SCRIPT, ["--list-devices"], timeout=30)
    assert res.returncode == 0 and "tpu-v4" in res.stdout and "275.0" in res.stdout
    code = (f"import runpy, sys\nsys.argv = [{str(launch.scripts / SCRIPT)!r}, '--help']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert "TORCH_NOT_IMPORTED" in res.stdout and "--recompute" in res.stdout


@pytest.mark.parametrize("kv_heads,gated", [(4, False), (2, True)])
def test_formula_matches_torch_flop_counter_on_a_real_transformer(calc, kv_heads, gated):
    # torch.utils.flop_counter counts every matmul of the forward and backward passes of a real
    # model; the calculator's 6N + 12LaT (PaLM appendix B) must match it exactly. Attention is
    # written as explicit matmuls (the counter sees bmm; a fused CPU kernel might be skipped)
    # and, like PaLM's count, covers the full s x s score matrix under the causal mask.
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    layers, h, heads, ffn, vocab, s, b = 2, 64, 4, 96, 128, 16, 3
    hd = h // heads
    lin = torch.nn.Linear

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = lin(h, h, False), lin(h, kv_heads * hd, False), \
                lin(h, kv_heads * hd, False)
            self.o = lin(h, h, False)
            self.up, self.down = lin(h, ffn, False), lin(ffn, h, False)
            self.gate = lin(h, ffn, False) if gated else None

        def forward(self, x):
            q = self.q(x).view(b, s, heads, hd).transpose(1, 2)
            k = self.k(x).view(b, s, kv_heads, hd).transpose(1, 2)
            v = self.v(x).view(b, s, kv_heads, hd).transpose(1, 2)
            k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
            att = (q @ k.transpose(-1, -2)).masked_fill(
                torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, h))
            u = self.up(x)
            u = torch.nn.functional.silu(self.gate(x)) * u if gated else torch.nn.functional.gelu(u)
            return x + self.down(u)

    emb, blocks, head = torch.nn.Embedding(vocab, h), [Block() for _ in range(layers)], \
        lin(h, vocab, False)
    idx = torch.randint(vocab, (b, s))
    with FlopCounterMode(display=False) as counter:
        x = emb(idx)
        for block in blocks:
            x = block(x)
        torch.nn.functional.cross_entropy(head(x).view(-1, vocab), idx.view(-1)).backward()

    per_layer = calc.layer_params(h, h, kv_heads * hd, ffn, gated)
    n = layers * per_layer + vocab * h
    f = calc.flops_per_token(matmul_params=n, layer_matmul_params=layers * per_layer,
                             layers=layers, attn_width=h, seq_len=s)
    assert counter.get_total_flops() == f["model"] * b * s
