"""Tests of scripts/inference/kv_cache_calculator.py against figures printed in papers and
vendor write-ups (each test names its source), against model_calculator.py's KV bytes for every
model of the data file, and on careless inputs.

Published figures reproduced:
* Kwon et al. 2023 (vLLM), https://arxiv.org/abs/2309.06180, section 3: OPT-13B's KV cache is
  800 KB per token (2 x 5120 hidden x 40 layers x 2 bytes of fp16) and up to 1.6 GB for one
  request of 2048 tokens.
* NVIDIA, "Mastering LLM Techniques: Inference Optimization" (2023),
  https://developer.nvidia.com/blog/mastering-llm-techniques-inference-optimization/: Llama 2 7B
  in 16-bit with a batch of 1 and 4096 tokens needs about 2 GB of KV cache.
* DeepSeek-V2, https://arxiv.org/abs/2405.04434: MLA caches (d_c + d_h^R) = 9/2 d_h values per
  layer and token (Table 1, d_c = 4 d_h, d_h^R = d_h / 2, d_h = 128); with the cache quantized to
  6 bits per element on average (section 3.2.3 deployment) that is 93.3% less KV cache than
  DeepSeek 67B (abstract). DeepSeek 67B's shape (95 layers, 64 heads, 8 key/value heads of 128):
  DeepSeek LLM, https://arxiv.org/abs/2401.02954, Table 2.
* Mistral 7B, https://arxiv.org/abs/2310.06825, section 2: the rolling buffer of a 4096-token
  window cuts the cache of a 32k-token sequence by 8x.
* GPU memory as nvidia-smi reports it (memory.total): an H100 SXM ("80 GB") 81,559 MiB
  (https://github.com/NVIDIA/nccl/issues/1264, an HGX H100 node), an A100 80GB 81,920 MiB and an
  L40S 46,068 MiB (https://github.com/modal-labs/modal-client/pull/2797); the vendors' figures
  are the catalogue's, data/compute/accelerators.yml.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.bad_input import Case, check_refused, models_data_cases
from tests.launchers import REPO, import_script
from tools.results import problems

SCRIPT = "kv_cache_calculator.py"
DATA = REPO / "data" / "models" / "architectures.yml"


@pytest.fixture(scope="module")
def kv(launch):
    return import_script(launch.scripts / SCRIPT)


@pytest.fixture(scope="module")
def models(kv):
    return {m["name"]: m for m in kv.load_models(str(DATA), counts=False)}


def llama(layers, hidden, heads, kv_heads=None, **extra):
    config = {"model_type": "llama", "num_hidden_layers": layers, "hidden_size": hidden,
              "num_attention_heads": heads, **extra}
    if kv_heads:
        config["num_key_value_heads"] = kv_heads
    return config


def test_opt_13b_matches_the_vllm_paper(kv):
    opt = kv.architecture(llama(40, 5120, 40), counts=False)  # OPT-13B's attention shape (MHA)
    assert kv.kv_bytes_per_token(opt, 2.0) == 2 * 5120 * 40 * 2 == 800 * 1024
    one_request = kv.kv_bytes_per_sequence(opt, 2048, 2.0)
    assert 1.6e9 <= one_request < 1.7e9  # "as much as 1.6 GB"


def test_llama2_7b_matches_nvidias_two_gigabytes(kv, models):
    seq = kv.kv_bytes_per_sequence(models["Llama 2 7B"], 4096, 2.0)
    assert seq == 4096 * 2 * 32 * 4096 * 2
    assert seq / 2**30 == 2.0  # "~2 GB": exactly 2 GiB


def test_mla_caches_four_and_a_half_head_sizes_per_layer(kv, models):
    v3 = models["DeepSeek-V3"]
    assert v3["mla"] and v3["values_per_layer"] == 9 * 128 // 2 == 576
    # whatever the number of heads: MLA's cache does not grow with them
    v2 = kv.architecture({"num_hidden_layers": 60, "num_attention_heads": 128, "kv_lora_rank": 512,
                          "qk_rope_head_dim": 64, "model_type": "deepseek_v2"}, counts=False)
    assert kv.kv_bytes_per_token(v2, 1.0) == 576 * 60


def test_deepseek_v2_cuts_the_cache_by_93_percent(kv):
    v2 = kv.architecture({"num_hidden_layers": 60, "num_attention_heads": 128, "kv_lora_rank": 512,
                          "qk_rope_head_dim": 64, "model_type": "deepseek_v2"}, counts=False)
    dense_67b = kv.architecture(llama(95, 8192, 64, kv_heads=8), counts=False)
    ratio = kv.kv_bytes_per_token(v2, 6 / 8) / kv.kv_bytes_per_token(dense_67b, 2.0)
    assert round(100 * (1 - ratio), 1) == 93.3


def test_mistral_rolling_buffer_saves_8x_at_32k(kv, models):
    mistral = models["Mistral 7B"]
    assert mistral["sliding_layers"] == 32 and mistral["sliding_window"] == 4096
    full = kv.kv_bytes_per_token(mistral, 2.0) * 32768
    assert full / kv.kv_bytes_per_sequence(mistral, 32768, 2.0) == 8


def test_gemma2_alternates_local_and_global_layers(kv, models):
    gemma = models["Gemma 2 9B"]
    per_layer_token = kv.kv_bytes_per_token(gemma, 2.0) / 42
    assert kv.kv_bytes_per_sequence(gemma, 4096, 2.0) == per_layer_token * 42 * 4096
    assert kv.kv_bytes_per_sequence(gemma, 8192, 2.0) == per_layer_token * (21 * 4096 + 21 * 8192)
    # layer_types, when the config lists them, decide instead of the pattern
    listed = kv.architecture(llama(4, 64, 4, sliding_window=16, layer_types=[
        "sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]), counts=False)
    assert listed["sliding_layers"] == 3


@pytest.mark.parametrize("context", [1, 4096, 8192, 131072])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_agrees_with_model_calculator_on_every_model(kv, models, context, dtype):
    calc = import_script(REPO / "scripts" / "models" / "model_calculator.py")
    element = {"bf16": 2, "fp8": 1}[dtype]
    for arch in calc.load_models(str(DATA)):
        shape = models[arch["name"]]
        assert kv.kv_bytes_per_token(shape, element) == calc.kv_bytes_per_token(arch, element)
        assert kv.kv_bytes_per_sequence(shape, context, element) == calc.kv_bytes(arch, context, element)


def test_tensor_parallel_splits_heads_then_replicates_them(kv, models):
    llama70 = models["Llama 3.1 70B"]  # 8 key/value heads
    whole = kv.kv_bytes_per_token(llama70, 2.0)
    for gpus in (1, 2, 4, 8):
        assert kv.kv_bytes_per_token(llama70, 2.0, gpus) * gpus == whole
    # 16 GPUs: one head each, every head on two GPUs
    assert kv.kv_bytes_per_token(llama70, 2.0, 16) == whole / 8
    with pytest.raises(ValueError, match="--gpus 3 neither divides the 8"):
        kv.kv_bytes_per_token(llama70, 2.0, 3)
    # MLA's latent is kept whole on every GPU
    v3 = models["DeepSeek-V3"]
    assert kv.kv_bytes_per_token(v3, 2.0, 8) == kv.kv_bytes_per_token(v3, 2.0)


def test_capacity_fills_the_free_memory_and_no_more(kv, models):
    model = models["Llama 3.1 8B"]
    for gpus, kv_dtype, overhead in ((1, "bf16", 0.0), (2, "fp8", 3.5), (4, "int4", 1.0)):
        b = kv.capacity(model, params=8.03e9, context=8192, kv_dtype=kv_dtype, weight_dtype="bf16",
                        gpu_memory_gb=80, gpus=gpus, memory_utilization=0.9, overhead_gb=overhead)
        assert b["usable"] == pytest.approx(72e9)
        assert b["weights"] == pytest.approx(8.03e9 * 2 / gpus)
        assert b["kv_free"] == pytest.approx(b["usable"] - b["weights"] - overhead * 1e9)
        assert b["sequences"] * b["kv_per_sequence"] <= b["kv_free"] < (b["sequences"] + 1) * b["kv_per_sequence"]
        assert b["tokens"] * b["kv_per_token"] <= b["kv_free"] < (b["tokens"] + 1) * b["kv_per_token"]
    # halving the element size doubles what fits (up to the floor)
    bf16, fp8 = (kv.capacity(model, params=8.03e9, context=8192, kv_dtype=d, weight_dtype="bf16",
                             gpu_memory_gb=80)["sequences"] for d in ("bf16", "fp8"))
    assert fp8 in (2 * bf16, 2 * bf16 + 1)
    # weights that do not fit leave no room, not a negative count
    big = kv.capacity(models["Llama 3.1 405B"], params=406e9, context=8192, kv_dtype="bf16",
                      weight_dtype="bf16", gpu_memory_gb=80)
    assert big["kv_free"] < 0 and big["sequences"] == 0 and big["tokens"] == 0


def test_capacity_takes_bytes_or_decimal_gigabytes(kv, models):
    model = models["Llama 3.1 8B"]
    common = dict(params=8.03e9, context=8192, kv_dtype="bf16", weight_dtype="bf16")
    by_gb = kv.capacity(model, gpu_memory_gb=80, **common)
    by_bytes = kv.capacity(model, gpu_memory_bytes=80e9, **common)
    assert by_gb == by_bytes and by_gb["usable"] == pytest.approx(0.9 * 80e9)
    with pytest.raises(ValueError, match="one of them"):
        kv.capacity(model, gpu_memory_gb=80, gpu_memory_bytes=80e9, **common)


@pytest.mark.parametrize("text, size", [
    ("80", 80e9), ("80GB", 80e9), ("80 gb", 80e9), ("80GiB", 80 * 2**30), ("80 GiB", 80 * 2**30),
    ("81559MiB", 81559 * 2**20), ("85.5e9B", 85.5e9), ("1.5TB", 1.5e12), ("0.5TiB", 2**39)])
def test_gpu_memory_units(kv, text, size):
    assert kv.parse_memory(text) == pytest.approx(size, rel=1e-15)


def test_device_memory_is_the_catalogues_device(kv):
    """The script keeps its own copy of the vendor figures (it runs when copied alone): each device
    must name a row of data/compute/accelerators.yml and carry its mem_GB, and the capacity the
    driver reports must be about that figure (a MiB or GB slip would be far off)."""
    catalogue = yaml.safe_load((REPO / "data" / "compute" / "accelerators.yml").read_text())
    rows = {row["name"]: row for row in catalogue["rows"]}
    assert kv.DEFAULT_DEVICE in kv.DEVICES
    for key, device in kv.DEVICES.items():
        assert device["row"] in rows, f"--device {key}: no row {device['row']!r} in the catalogue"
        assert device["mem_GB"] == rows[device["row"]]["mem_GB"], (
            f"--device {key}: {device['mem_GB']} GB, but the catalogue's row {device['row']!r} "
            f"has mem_GB = {rows[device['row']]['mem_GB']}")
        total = device["total_MiB"] * 2**20
        assert 0.9 * device["mem_GB"] * 1e9 <= total <= device["mem_GB"] * 2**30, key
        assert device["source"].startswith("https://"), key


def run_memory(launch, tmp_path, args, name="m.json"):
    out = tmp_path / name
    res = launch.python(SCRIPT, ["--model", "Llama 3.1 8B", *args, "--json", str(out)])
    assert res.returncode == 0, res.output
    return res, json.loads(out.read_text())


def test_an_h100_has_85_5e9_bytes_by_default(launch, tmp_path):
    """An "80 GB" H100 SXM: nvidia-smi reports 81,559 MiB (NVIDIA/nccl#1264), 85.52e9 bytes, not
    80e9. That is the default and --device h100-sxm; a bare --gpu-memory 80 is 80e9 bytes, as the
    help says, and --gpu-memory 80GiB is 80 x 2^30."""
    h100 = 81559 * 2**20
    res, default = run_memory(launch, tmp_path, [])
    assert default["gpu_memory"] == {"bytes": h100, "device": "h100-sxm", "from": default[
        "gpu_memory"]["from"]}
    assert "81,559 MiB" in default["gpu_memory"]["from"]
    assert default["results"][0]["usable"] == pytest.approx(0.9 * h100)
    assert f"GPU(s) of {h100 / 1e9:.2f} GB each (h100-sxm: 81,559 MiB" in res.stdout
    assert "1 GB = 1e9 bytes" in res.stdout and "GB (1e9 bytes)" in default["units"][
        "inputs.gpu_memory"]
    assert default["inputs"]["gpu_memory"] == h100 / 1e9 and default["inputs"]["device"] is None
    _, named = run_memory(launch, tmp_path, ["--device", "h100-sxm"], "n.json")
    _, mib = run_memory(launch, tmp_path, ["--gpu-memory", "81559MiB"], "mib.json")
    assert named["results"] == default["results"] == mib["results"]
    assert mib["gpu_memory"]["from"] == "--gpu-memory 81559MiB" and mib["gpu_memory"]["device"] is None
    res, bare = run_memory(launch, tmp_path, ["--gpu-memory", "80"], "b.json")
    assert bare["gpu_memory"]["bytes"] == 80e9 and "80.00 GB each (--gpu-memory 80)" in res.stdout
    _, gib = run_memory(launch, tmp_path, ["--gpu-memory", "80GiB"], "g.json")
    assert gib["results"][0]["usable"] == pytest.approx(0.9 * 80 * 2**30)
    _, l40s = run_memory(launch, tmp_path, ["--device", "l40s"], "l.json")
    assert l40s["gpu_memory"]["bytes"] == 46068 * 2**20


@pytest.mark.parametrize("text, value", [("70.6B", 70.6e9), ("405b", 405e9), ("7.24e9", 7.24e9),
                                         ("850M", 850e6), ("1.2T", 1.2e12), ("12345", 12345)])
def test_parameter_counts_as_printed(kv, text, value):
    assert kv.parse_count(text) == pytest.approx(value)


def test_cli_single_model_and_json(launch, tmp_path):
    out = tmp_path / "kv.json"
    res = launch.python(SCRIPT, ["--model", "llama-3.1-70b", "--gpus", "4", "--context", "8192",
                                 "--kv-dtype", "fp8", "--json", str(out)])
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    (m,) = doc["results"]
    assert problems(doc, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert doc["benchmark"] == "kv_cache_calculator" and doc["device"] is None
    assert m["name"] == "Llama 3.1 70B" and doc["inputs"]["gpus"] == 4
    assert m["kv_per_token_model"] == 80 * 2 * 8 * 128 * 1
    assert m["cache_shape"]["kv_heads_per_gpu"] == 2
    assert m["params"] == pytest.approx(70.6e9)  # the publisher's count, from the data file
    assert f"{m['sequences']:>14,}" in res.stdout and "1 GB = 1e9 bytes" in res.stdout


def test_cli_config_and_every_model(launch, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(llama(2, 64, 4, kv_heads=2)))
    res = launch.python(SCRIPT, ["--config", str(config), "--params", "1.5M", "--gpu-memory", "1",
                                 "--json", "-"])
    assert res.returncode == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["results"][0]["kv_per_token"] == 2 * 2 * 2 * 16 * 2
    res = launch.python(SCRIPT, ["--model", "all", "--kv-dtype", "int4"])
    assert res.returncode == 0, res.output
    names = [m["name"] for m in import_script(launch.scripts / SCRIPT).load_models(str(DATA), counts=False)]
    assert all(name in res.stdout for name in names)
    listing = launch.python(SCRIPT, ["--list"])
    assert listing.returncode == 0 and "DeepSeek-V3" in listing.stdout and "MLA" in listing.stdout


GOOD = json.dumps(llama(2, 64, 4))
BAD_INPUT = [
    Case("nothing", [], "give one of --model NAME, --model all, --config PATH or --list"),
    Case("model-and-list", ["--model", "all", "--list"], "got --model and --list"),
    Case("model-unknown", ["--model", "gpt-5"], r"--model 'gpt-5': not in .*architectures.yml \(see --list\)"),
    Case("config-without-params", ["--config", "c.json"], "--config needs --params COUNT",
         files={"c.json": GOOD}),
    Case("config-missing", ["--config", "{tmp}/none.json", "--params", "1B"],
         "--config .*none.json: does not exist"),
    Case("config-folder", ["--config", "{tmp}", "--params", "1B"], "--config .*: is a folder; give a file"),
    Case("config-not-json", ["--config", "c.json", "--params", "1B"], "--config c.json: not valid JSON",
         files={"c.json": "model_type: llama\n"}),
    Case("config-heads-missing", ["--config", "c.json", "--params", "1B"],
         "num_attention_heads is missing", files={"c.json": '{"num_hidden_layers": 2}'}),
    Case("config-kv-heads-not-dividing", ["--config", "c.json", "--params", "1B"],
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3",
         files={"c.json": json.dumps(llama(2, 64, 4, kv_heads=3))}),
    Case("config-head-dim-zero", ["--config", "c.json", "--params", "1B"],
         "head_dim must be an integer >= 1, got 0",
         files={"c.json": json.dumps(llama(2, 64, 4, head_dim=0))}),
    Case("config-window-unknown-layers", ["--config", "c.json", "--params", "1B"],
         "sliding_window 16 without layer_types or sliding_window_pattern",
         files={"c.json": json.dumps(llama(2, 64, 4, sliding_window=16))}),
    Case("config-layer-types-short", ["--config", "c.json", "--params", "1B"],
         r"layer_types must list one string per layer \(2\), got \['sliding_attention'\]",
         files={"c.json": json.dumps(llama(2, 64, 4, sliding_window=16,
                                          layer_types=["sliding_attention"]))}),
    Case("config-mla-without-rope", ["--config", "c.json", "--params", "1B"],
         "qk_rope_head_dim is missing", files={"c.json": json.dumps(llama(2, 64, 4, kv_lora_rank=32))}),
    Case("params-text", ["--model", "all", "--params", "seventy"], "--params: not a parameter count"),
    Case("params-zero", ["--model", "all", "--params", "0B"], "--params: not a parameter count"),
    Case("gpus-not-splitting-heads", ["--model", "Llama 3.1 8B", "--gpus", "3"],
         "--gpus 3 neither divides the 8 key/value heads"),
    Case("gpus-zero", ["--model", "all", "--gpus", "0"], "--gpus: 0 must be >= 1"),
    Case("gpu-memory-nan", ["--model", "all", "--gpu-memory", "nan"],
         "--gpu-memory: 'nan' is not a finite size"),
    Case("gpu-memory-zero", ["--model", "all", "--gpu-memory", "0"],
         "--gpu-memory: 0 must be more than 0 bytes"),
    # --gpu-memory takes a unit: a G or a gig could be GB or GiB, 7% apart
    Case("gpu-memory-ambiguous-unit", ["--model", "all", "--gpu-memory", "80G"],
         r"--gpu-memory: '80G': unknown unit 'G'; say GB \(1e9 bytes\) or GiB \(2\^30 bytes\)"),
    Case("gpu-memory-word-unit", ["--model", "all", "--gpu-memory", "80 gigs"],
         "--gpu-memory: '80 gigs': unknown unit 'gigs'"),
    Case("gpu-memory-negative", ["--model", "all", "--gpu-memory=-80GiB"],
         "--gpu-memory: -80GiB must be more than 0 bytes"),
    Case("gpu-memory-inf-with-unit", ["--model", "all", "--gpu-memory", "infGiB"],
         "--gpu-memory: 'infGiB' is not a finite size"),
    Case("gpu-memory-huge", ["--model", "all", "--gpu-memory", "1e30"],
         r"--gpu-memory: 1e30 must be at most 100 TB"),
    Case("gpu-memory-comma", ["--model", "all", "--gpu-memory", "80,5"],
         "--gpu-memory: '80,5' is not a memory size"),
    Case("gpu-memory-empty", ["--model", "all", "--gpu-memory", ""],
         "--gpu-memory: '' is not a memory size"),
    Case("gpu-memory-unit-only", ["--model", "all", "--gpu-memory", "GiB"],
         "--gpu-memory: 'GiB' is not a memory size"),
    Case("gpu-memory-long", ["--model", "all", "--gpu-memory", "8" * 5000 + "GB"],
         r"--gpu-memory: 888888888888\.\.\. \(5002 characters\) must be at most 100 TB"),
    Case("gpu-memory-and-device", ["--model", "all", "--device", "l40s", "--gpu-memory", "80GiB"],
         r"give --device or --gpu-memory, not both \(--device l40s has 46,068 MiB\)"),
    Case("device-unknown", ["--model", "all", "--device", "h100"],
         "--device: invalid choice: 'h100'"),
    Case("utilization-above-one", ["--model", "all", "--memory-utilization", "1.5"],
         "--memory-utilization: 1.5"),
    Case("overhead-negative", ["--model", "all", "--overhead-gb", "-1"], "--overhead-gb"),
    Case("context-inf", ["--model", "all", "--context", "inf"], "--context: 'inf' is not an integer"),
    Case("kv-dtype-unknown", ["--model", "all", "--kv-dtype", "fp6"], "--kv-dtype: invalid choice"),
    Case("json-over-config", ["--config", "c.json", "--params", "1B", "--json", "c.json"],
         "--json c.json: is also an input", files={"c.json": GOOD}),
    Case("config-path-empty", ["--config", "", "--params", "1B"], "--config: must not be empty"),
    Case("data-missing", ["--list", "--data", "{tmp}/none.yml"],
         r"--data .*none.yml: cannot read it \(does not exist\)"),
]


# Issue 30: inputs that are not files, and bad values inside the data file or a config.json. Each
# is one line naming the file, the row (and the model) and the field.
ROW = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
       "intermediate_size": 128, "vocab_size": 100, "published_total": "1B"}


def data_row(**fields) -> str:
    """A data file (YAML) of one model, ``fields`` (YAML text) added to, or as None removed
    from, a valid row."""
    row = {k: json.dumps(v) for k, v in ROW.items()}
    row.update({k: v for k, v in fields.items() if v is not None})
    for k in [k for k, v in fields.items() if v is None]:
        del row[k]
    return "rows:\n  - {" + ", ".join(f"{k}: {v}" for k, v in row.items()) + "}\n"


DATA_FILE_CASES = [
    Case("data-dev-zero", ["--list", "--data", "/dev/zero"],
         r"--data /dev/zero: cannot read it \(is not a regular file or a pipe\)"),
    Case("data-deep-json", ["--list", "--data", "d.json"], r"d\.json: nested too deeply",
         files={"d.json": "[" * 100_000}),
    Case("data-deep-yaml", ["--list", "--data", "d.yml"], r"d\.yml: nested too deeply",
         files={"d.yml": "rows: " + "[" * 100_000}),
    Case("data-huge-number", ["--list", "--data", "d.json"], r"d\.json: not valid JSON \(Exceeds the limit",
         files={"d.json": '{"rows": [' + "1" * 5000 + "]}"}),
    Case("data-not-utf8", ["--list", "--data", "d.yml"], r"d\.yml: not UTF-8 text", files={"d.yml": b"rows: [\xff]\n"}),
    Case("data-name-not-string", ["--model", "x", "--data", "d.yml"],
         r"d\.yml: row 1: name must be a non-empty string, got 123", files={"d.yml": data_row(name="123")}),
    Case("data-name-list-json", ["--list", "--data", "d.json"],
         r"d\.json: row 1: name must be a non-empty string, got \['a'\]",
         files={"d.json": '{"rows": [{"name": ["a"], "num_hidden_layers": 2}]}'}),
    Case("data-missing-key", ["--list", "--data", "d.yml"], r"d\.yml: row 1 \(a\): num_attention_heads is missing",
         files={"d.yml": data_row(name="a", num_attention_heads=None)}),
    Case("data-published-total-inf", ["--model", "all", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_total must be a count as printed, such as '6\.74B', got inf",
         files={"d.yml": data_row(name="a", published_total=".inf")}),
    Case("data-published-total-json-infinity", ["--model", "all", "--data", "d.json"],
         r"d\.json: row 1 \(a\): published_total must be a count as printed, .*, got inf",
         files={"d.json": json.dumps({"rows": [{**ROW, "name": "a"}]}).replace('"1B"', "Infinity")}),
    Case("data-published-total-list", ["--model", "all", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_total must be a count as printed, .*, got \[1\]",
         files={"d.yml": data_row(name="a", published_total="[1]")}),
    Case("data-published-total-words", ["--model", "all", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_total must be a count as printed, .*, got 'many'",
         files={"d.yml": data_row(name="a", published_total="many")}),
    Case("data-size-inf", ["--list", "--data", "d.yml"], r"row 1 \(a\): head_dim must be an integer >= 1, got inf",
         files={"d.yml": data_row(name="a", head_dim=".inf")}),
    Case("data-size-huge", ["--list", "--data", "d.yml"],
         r"row 1 \(a\): num_hidden_layers must be an integer >= 1 and <= 2147483647, got 1000000000000",
         files={"d.yml": data_row(name="a", num_hidden_layers="1000000000000")}),
    Case("data-window-nan", ["--list", "--data", "d.yml"],
         r"row 1 \(a\): sliding_window must be an integer >= 1, got nan",
         files={"d.yml": data_row(name="a", sliding_window=".nan")}),
    Case("config-text-config-not-object", ["--config", "c.json", "--params", "1B"],
         r"--config c\.json: text_config is not a JSON object", files={"c.json": '{"text_config": 5}'}),
    Case("config-use-sliding-window-text", ["--config", "c.json", "--params", "1B"],
         r"--config c\.json: use_sliding_window must be true or false, got 'false'",
         files={"c.json": json.dumps(llama(2, 64, 4, sliding_window=16, use_sliding_window="false"))}),
    Case("config-size-nan", ["--config", "c.json", "--params", "1B"],
         r"--config c\.json: num_hidden_layers must be an integer >= 1, got nan",
         files={"c.json": GOOD.replace('"num_hidden_layers": 2', '"num_hidden_layers": NaN')}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT + models_data_cases() + DATA_FILE_CASES])
def test_bad_input_is_refused_in_one_line(case, tmp_path):
    check_refused(f"inference/{SCRIPT}", case, tmp_path)


@pytest.mark.parametrize("name", ["kv_cache_calculator-all-1x80gb.json", "kv_cache_calculator-all-8x80gb.json"])
def test_the_kv_cache_pages_tables_are_current(launch, tmp_path, name):
    """The KV cache page renders these files: they must equal what the calculator gives today
    for the same inputs (a changed data file or formula must be recomputed, not left stale)."""
    recorded = json.loads((REPO / "results" / "inference" / name).read_text())
    i = recorded["inputs"]
    out = tmp_path / "now.json"
    memory = ["--device", i["device"]] if i["device"] else ["--gpu-memory", f"{i['gpu_memory']!r}GB"]
    res = launch.python(SCRIPT, ["--model", i["model"], "--context", str(i["context"]),
                                 "--gpus", str(i["gpus"]), *memory,
                                 "--memory-utilization", str(i["memory_utilization"]),
                                 "--kv-dtype", i["kv_dtype"], "--weight-dtype", i["weight_dtype"],
                                 "--overhead-gb", str(i["overhead_gb"]), "--json", str(out)])
    assert res.returncode == 0, res.output
    now = json.loads(out.read_text())
    for run_specific in ("date_utc", "command", "versions"):  # the envelope: when, how, with what
        assert now.pop(run_specific) and recorded.pop(run_specific)
    assert now == recorded, f"recompute results/inference/{name}"


def test_null_fields_of_a_config_mean_the_default(kv):
    """transformers reads "head_dim": null (Mistral-7B-Instruct-v0.3's config.json) as
    hidden_size / heads, and "num_key_value_heads": null as the number of heads (MHA)."""
    config = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": None, "num_hidden_layers": 32, "head_dim": None}
    arch = kv.architecture(config, counts=False)
    assert (arch["num_key_value_heads"], arch["head_dim"]) == (32, 128)
