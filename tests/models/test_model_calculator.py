"""Tests of scripts/models/model_calculator.py against published counts.

Sources (each test names the one it uses):
* data/models/architectures.yml: every model's config.json values and the parameter count its
  publisher prints (the row's second source: the Hugging Face model page, whose "Model size" is
  counted from the checkpoint, or the paper or announcement).
* Gemma 2 report, Gemma Team 2024, https://arxiv.org/abs/2408.00118, Table 2: 9B model,
  917,504,000 embedding and 8,324,201,984 non-embedding parameters.
* DeepSeek-V2, https://arxiv.org/abs/2405.04434, section 2.1.2 and Table 1: MLA caches
  (d_c + d_h^R) * l elements per token, with d_c = 4 d_h and d_h^R = d_h / 2, i.e. 4.5 d_h l.
* PaLM appendix B (https://arxiv.org/abs/2204.02311): training FLOPs per token 6N + 12 L a T, the
  convention of scripts/training/flops_mfu_calculator.py, which must agree for a dense model.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest

from tests.bad_input import Case, check_refused, models_data_cases
from tests.launchers import REPO, import_script

SCRIPT = "model_calculator.py"
DATA = REPO / "data" / "models" / "architectures.yml"


@pytest.fixture(scope="module")
def calc(launch):
    return import_script(launch.scripts / SCRIPT)


@pytest.fixture(scope="module")
def models(calc):
    return {m["name"]: m for m in calc.load_models(str(DATA))}


def tolerance(printed: str) -> tuple[float, float]:
    """(value, allowed difference) of a count printed like '46.7B': 0.5% of it, or half a unit
    of its last printed digit when the publisher printed fewer digits than that (a '13B' stands
    for anything from 12.5B to 13.5B)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)B", printed)
    assert match, f"published count {printed!r} is not like '46.7B'"
    digits = Decimal(match.group(1))
    value = float(digits) * 1e9
    half_unit = 0.5 * 10.0 ** digits.as_tuple().exponent * 1e9
    return value, max(0.005 * value, half_unit)


def test_data_file_has_at_least_14_models_dense_and_moe(models):
    kinds = [m["kind"] for m in models.values()]
    assert len(models) >= 14 and kinds.count("MoE") >= 4 and kinds.count("dense") >= 8
    assert all(m["source"][0].endswith("config.json") and len(m["source"]) == 2
               for m in models.values())


def test_every_total_matches_its_published_count(calc, models):
    for name, m in models.items():
        value, allowed = tolerance(m["published_total"])
        total = calc.count_params(m)["total"]
        assert abs(total - value) <= allowed, f"{name}: {total:,} vs published {m['published_total']}"


def test_every_moe_active_count_matches_its_published_count(calc, models):
    checked = 0
    for name, m in models.items():
        if m.get("published_active", "—") == "—":
            continue
        value, allowed = tolerance(m["published_active"])
        counts = calc.count_params(m)
        key = ("active_without_input_embedding"
               if m.get("published_active_excludes_input_embedding") else "active")
        assert abs(counts[key] - value) <= allowed, f"{name}: {counts[key]:,} vs {m['published_active']}"
        checked += 1
    assert checked >= 4  # Mixtral 8x7B and 8x22B, OLMoE, DeepSeek-V3


def test_llama2_7b_and_gemma2_9b_exact_counts(calc, models):
    # Llama 2 7B, by hand from its config: 32 layers x (4 x 4096^2 attention + 3 x 4096 x 11008
    # MLP + 2 x 4096 norms) + 2 x 32000 x 4096 untied embeddings + 4096 final norm.
    layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert calc.count_params(models["Llama 2 7B"])["total"] == 32 * layer + 2 * 32000 * 4096 + 4096
    # Gemma 2 report, Table 2 (exact figures).
    gemma = calc.count_params(models["Gemma 2 9B"])
    assert gemma["embedding"] == 917_504_000
    assert gemma["total"] - gemma["embedding"] == 8_324_201_984
    assert gemma["output"] == 0  # tied to the embedding


def test_attention_and_kind_labels_agree_with_the_config(models):
    for name, m in models.items():
        heads, kv = m["num_attention_heads"], m["num_key_value_heads"]
        expected = ("MLA" if m["mla"] else "MHA" if kv == heads else "MQA" if kv == 1 else "GQA")
        assert m["attention"] == expected, name
        assert (m["kind"] == "MoE") == bool(m["num_experts"]), name


def test_kv_bytes_per_token(calc, models):
    # GQA: 2 (K and V) x 8 KV heads x 128 x 32 layers x 2 bytes = 128 KiB per token.
    assert calc.kv_bytes_per_token(models["Llama 3.1 8B"]) == 2 * 8 * 128 * 32 * 2 == 131072
    # MHA caches all 32 heads: four times as much.
    assert calc.kv_bytes_per_token(models["Llama 2 7B"]) == 4 * 131072
    # DeepSeek-V2 Table 1: MLA caches 4.5 d_h elements per layer (d_h = 128 per head).
    v3 = models["DeepSeek-V3"]
    assert calc.kv_bytes_per_token(v3, dtype_bytes=1) == 4.5 * 128 * 61
    assert calc.kv_bytes_per_token(v3, dtype_bytes=2) * 1 < calc.kv_bytes_per_token(
        models["Llama 3.1 8B"])  # 671B parameters, half the cache per token of an 8B GQA model


def test_sliding_windows_cap_the_cache(calc, models):
    mistral = models["Mistral 7B"]  # every layer slides over 4096 tokens
    assert calc.kv_bytes(mistral, 32768) == calc.kv_bytes(mistral, 4096) == \
        4096 * calc.kv_bytes_per_token(mistral)
    gemma = models["Gemma 2 27B"]  # every other layer slides, the others see everything
    per_token = calc.kv_bytes_per_token(gemma)
    assert calc.kv_bytes(gemma, 8192) == per_token * (4096 + 8192) // 2
    assert calc.kv_bytes(gemma, 1000) == per_token * 1000  # below the window nothing changes


def test_training_flops_agree_with_flops_mfu_calculator(calc, models):
    mfu = import_script(REPO / "scripts" / "training" / "flops_mfu_calculator.py")
    m = models["Llama 3.1 8B"]
    ours = calc.flops_per_token(m, 8192)
    layer = mfu.layer_params(4096, 4096, 1024, 14336, True)
    n = 32 * layer + 128256 * 4096  # layers + output projection, as that script counts N
    theirs = mfu.flops_per_token(matmul_params=n, layer_matmul_params=32 * layer, layers=32,
                                 attn_width=4096, seq_len=8192)
    assert ours["matmul_params"] == n
    assert ours["training"] == theirs["model"] and ours["training_6n"] == theirs["dense"]
    assert ours["forward"] == 2 * n + 4 * 32 * 4096 * 8192  # QK^T and AV of one new token


def test_moe_flops_use_active_experts_only(calc, models):
    mixtral = models["Mixtral 8x7B"]
    counts = calc.count_params(mixtral)
    n = calc.flops_per_token(mixtral, 4096)["matmul_params"]
    # Two of eight experts: N sits near the active count (embedding lookup and norms aside),
    # far below the total.
    assert n == pytest.approx(counts["active"] - counts["embedding"], rel=1e-3)
    assert n < 0.3 * counts["total"]


def hf_config(row: dict, **renamed) -> dict:
    """A config.json as the Hub has it: the row's keys with the family's own spelling."""
    config = {k: v for k, v in row.items() if k not in (
        "name", "kind", "attention", "published_total", "published_active", "source",
        "published_active_excludes_input_embedding", "qkv_bias", "sliding_window_pattern")}
    for ours, theirs in renamed.items():
        config[theirs] = config.pop(ours)
    return config


def test_config_json_spellings_give_the_same_counts(calc):
    import yaml
    rows = {r["name"]: r for r in yaml.safe_load(DATA.read_text())["rows"]}
    for name, renamed in (("Mixtral 8x7B", {"num_experts": "num_local_experts"}),
                          ("DeepSeek-V3", {"num_experts": "n_routed_experts"}),
                          ("Qwen2.5 7B", {}), ("Gemma 2 9B", {})):
        row = rows[name]
        config = hf_config(row, **renamed)
        if name == "Mixtral 8x7B":
            del config["moe_intermediate_size"]  # Mixtral's experts use intermediate_size
        if name == "Qwen2.5 7B":
            config.update(sliding_window=131072, use_sliding_window=False)
        expected = calc.count_params(calc.architecture(row, name))
        got = calc.architecture(config, name)
        assert calc.count_params(got) == expected, name
        assert got["sliding_layers"] == calc.architecture(row, name)["sliding_layers"], name
    # A multimodal config wraps the language model in text_config.
    wrapped = {"model_type": "llava", "text_config": hf_config(rows["Llama 3.1 8B"])}
    assert calc.count_params(calc.architecture(wrapped))["total"] == \
        calc.count_params(calc.architecture(rows["Llama 3.1 8B"]))["total"]


def test_cli_all_models_json_and_table(launch, tmp_path):
    out = tmp_path / "models.json"
    res = launch.python(SCRIPT, ["--model", "all", "--context", "8192", "--json", str(out)], timeout=30)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["inputs"]["context"] == 8192 and len(doc["models"]) >= 14
    v3 = next(d for d in doc["models"] if d["name"] == "DeepSeek-V3")
    assert v3["kv_cache"]["bytes_per_sequence"] == 8192 * 576 * 61 * 2
    assert re.search(r"^DeepSeek-V3\s+671\.03\s+671B\s+37\.55\s+37B", res.stdout, re.M), res.stdout


def test_cli_config_json_single_model(launch, tmp_path):
    import yaml
    row = next(r for r in yaml.safe_load(DATA.read_text())["rows"] if r["name"] == "OLMoE-1B-7B")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_config(row)))
    res = launch.python(SCRIPT, ["--config", str(path), "--kv-dtype", "fp8", "--json", "-"], timeout=30)
    assert res.returncode == 0, res.output
    assert re.search(r"^  total\s+6\.92$", res.stdout, re.M) and "KV cache (fp8)" in res.stdout
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert doc["models"][0]["kv_cache"]["bytes_per_token"] == 2 * 16 * 128 * 16  # MHA, 1 byte


def test_help_and_list_work_without_torch(launch):
    res = launch.python(SCRIPT, ["--help"], timeout=30)
    assert res.returncode == 0 and "--kv-dtype" in res.stdout
    res = launch.python(SCRIPT, ["--list"], timeout=30)
    assert res.returncode == 0 and "DeepSeek-V3" in res.stdout and "deepseek_v3" in res.stdout


GOOD = ('{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, '
        '"intermediate_size": 128, "vocab_size": 100}')
BAD_INPUT = [
    Case("nothing", [], "give one of --model NAME, --model all, --config PATH or --list"),
    Case("model-and-config", ["--model", "all", "--config", "c.json"],
         "got --model and --config"),
    Case("model-unknown", ["--model", "gpt-5"], r"--model 'gpt-5': not in .*architectures.yml \(see --list\)"),
    Case("model-empty", ["--model", " "], "--model: must not be empty"),
    Case("config-missing", ["--config", "{tmp}/none.json"], "--config .*none.json: does not exist"),
    Case("config-folder", ["--config", "{tmp}"], "--config .*: is a folder; give a file"),
    Case("config-not-json", ["--config", "c.json"], "--config c.json: not valid JSON",
         files={"c.json": "model_type: llama\n"}),
    Case("config-list", ["--config", "c.json"], "--config c.json: not a JSON object",
         files={"c.json": "[1, 2]"}),
    Case("config-unknown-family", ["--config", "c.json"],
         "model_type 'gpt2' is not one the calculator knows", files={"c.json": '{"model_type": "gpt2"}'}),
    Case("config-layers-text", ["--config", "c.json"],
         "num_hidden_layers must be an integer >= 1, got '2'",
         files={"c.json": GOOD.replace('"num_hidden_layers": 2', '"num_hidden_layers": "2"')}),
    Case("config-layers-missing", ["--config", "c.json"], "num_hidden_layers is missing",
         files={"c.json": GOOD.replace('"num_hidden_layers": 2, ', "")}),
    Case("config-kv-heads-not-dividing", ["--config", "c.json"],
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3",
         files={"c.json": GOOD[:-1] + ', "num_key_value_heads": 3}'}),
    Case("config-topk-above-experts", ["--config", "c.json"],
         r"num_experts_per_tok must be between 1 and num_experts \(4\), got 9",
         files={"c.json": GOOD.replace("llama", "mixtral")[:-1]
                + ', "num_local_experts": 4, "num_experts_per_tok": 9}'}),
    Case("config-partial-moe", ["--config", "c.json"], "decoder_sparse_step = 2 .* not supported",
         files={"c.json": GOOD.replace("llama", "qwen3_moe")[:-1]
                + ', "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, '
                  '"decoder_sparse_step": 2}'}),
    Case("config-with-data", ["--config", "c.json", "--data", "d.yml"], "--data is for --model",
         files={"c.json": GOOD, "d.yml": "rows: []\n"}),
    Case("data-missing", ["--list", "--data", "{tmp}/none.yml"],
         r"--data .*none.yml: cannot read it \(does not exist\)"),
    Case("data-not-yaml", ["--list", "--data", "d.yml"], "--data|d.yml: not valid YAML",
         files={"d.yml": "rows: [\n"}),
    Case("data-row-without-name", ["--list", "--data", "d.yml"], "row 1: needs a name",
         files={"d.yml": "rows:\n  - {model_type: llama}\n"}),
    Case("context-zero", ["--model", "all", "--context", "0"], "--context: 0 must be >= 1"),
    Case("context-nan", ["--model", "all", "--context", "nan"], "--context: 'nan' is not an integer"),
    Case("kv-dtype-int4", ["--model", "all", "--kv-dtype", "int4"], "--kv-dtype: invalid choice"),
    Case("json-over-config", ["--config", "c.json", "--json", "c.json"],
         "--json c.json: is also an input", files={"c.json": GOOD}),
    Case("config-path-empty", ["--config", ""], "--config: must not be empty"),
    Case("context-inf", ["--model", "all", "--context", "inf"], "--context: 'inf' is not an integer"),
]


# Issue 30: inputs that are not files, and bad values inside the data file or a config.json. Each
# is one line naming the file, the row (and the model) and the field.
ROW = ("model_type: llama, num_hidden_layers: 2, hidden_size: 64, num_attention_heads: 4, "
       "intermediate_size: 128, vocab_size: 100, source: 'https://example.org/config.json'")


def data_row(**fields) -> str:
    """A data file of one model, ``fields`` added to (or, as None, removed from) a valid row."""
    row = dict(part.split(": ", 1) for part in ROW.split(", "))
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
    Case("data-not-utf8", ["--list", "--data", "d.yml"], r"d\.yml: not UTF-8 text",
         files={"d.yml": b"rows: [\xff]\n"}),
    Case("data-name-not-string", ["--model", "x", "--data", "d.yml"],
         r"d\.yml: row 1: name must be a non-empty string, got 123", files={"d.yml": data_row(name="123")}),
    Case("data-name-list-json", ["--list", "--data", "d.json"],
         r"d\.json: row 1: name must be a non-empty string, got \['a'\]",
         files={"d.json": '{"rows": [{"name": ["a"], "model_type": "llama"}]}'}),
    Case("data-missing-key", ["--list", "--data", "d.yml"], r"d\.yml: row 1 \(a\): num_hidden_layers is missing",
         files={"d.yml": data_row(name="a", num_hidden_layers=None)}),
    Case("data-published-total-inf", ["--model", "all", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_total must be a count as printed, such as '6\.74B', got inf",
         files={"d.yml": data_row(name="a", published_total=".inf")}),
    Case("data-published-total-json-infinity", ["--model", "all", "--data", "d.json"],
         r"d\.json: row 1 \(a\): published_total must be .*, got inf",
         files={"d.json": '{"rows": [{"name": "a", "published_total": Infinity}]}'}),
    Case("data-published-total-words", ["--list", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_total must be a count as printed, such as '6\.74B', got 'many'",
         files={"d.yml": data_row(name="a", published_total="many")}),
    Case("data-published-active-list", ["--model", "all", "--data", "d.yml"],
         r"d\.yml: row 1 \(a\): published_active must be .*, got \[1\]",
         files={"d.yml": data_row(name="a", published_active="[1]")}),
    Case("data-kind-not-string", ["--list", "--data", "d.yml"], r"row 1 \(a\): kind must be a string, got \[\]",
         files={"d.yml": data_row(name="a", kind="[]")}),
    Case("data-size-inf", ["--list", "--data", "d.yml"], r"row 1 \(a\): head_dim must be an integer >= 1, got inf",
         files={"d.yml": data_row(name="a", head_dim=".inf")}),
    Case("data-size-huge", ["--list", "--data", "d.yml"],
         r"row 1 \(a\): hidden_size must be an integer >= 1 and <= 2147483647, got 1000000000000",
         files={"d.yml": data_row(name="a", hidden_size="1000000000000")}),
    Case("data-window-nan", ["--list", "--data", "d.yml"],
         r"row 1 \(a\): sliding_window must be an integer >= 1, got nan",
         files={"d.yml": data_row(name="a", sliding_window=".nan")}),
    Case("data-bias-text", ["--list", "--data", "d.yml"], r"row 1 \(a\): qkv_bias must be true or false, got 'no'",
         files={"d.yml": data_row(name="a", qkv_bias="'no'")}),
    Case("data-experts-text", ["--list", "--data", "d.yml"],
         r"row 1 \(a\): num_local_experts must be an integer >= 1, got '8'",
         files={"d.yml": data_row(name="a", model_type="mixtral", num_local_experts="'8'")}),
    Case("config-text-config-not-object", ["--config", "c.json"], r"--config c\.json: text_config is not a JSON object",
         files={"c.json": '{"text_config": 5}'}),
    Case("config-model-type-list", ["--config", "c.json"], r"--config c\.json: model_type \['llama'\] is not one",
         files={"c.json": '{"model_type": ["llama"]}'}),
    Case("config-layer-types-short", ["--config", "c.json"],
         r"--config c\.json: layer_types must list one string per layer \(2\)",
         files={"c.json": GOOD[:-1] + ', "sliding_window": 8, "layer_types": ["sliding_attention"]}'}),
    Case("config-size-nan", ["--config", "c.json"], r"--config c\.json: vocab_size must be an integer >= 1, got nan",
         files={"c.json": GOOD.replace('"vocab_size": 100', '"vocab_size": NaN')}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT + models_data_cases() + DATA_FILE_CASES])
def test_bad_input_is_refused_in_one_line(case, tmp_path):
    check_refused(f"models/{SCRIPT}", case, tmp_path)


# Mistral-7B-Instruct-v0.3's published config.json has "head_dim": null, which transformers reads
# as hidden_size / num_attention_heads = 128. With it the count is 7,248,023,552: untied embedding
# and output 2 x 32768 x 4096, and 32 layers of attention (2 x 4096^2 + 2 x 4096 x 1024), gated MLP
# (3 x 4096 x 14336) and two norms, plus the final norm.
MISTRAL_7B_V03 = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
                  "vocab_size": 32768, "head_dim": None, "tie_word_embeddings": False}


def test_null_fields_of_a_config_mean_the_default(calc):
    a = calc.architecture(MISTRAL_7B_V03)
    assert (a["head_dim"], calc.count_params(a)["total"]) == (128, 7_248_023_552)
    mha = calc.architecture({**MISTRAL_7B_V03, "num_key_value_heads": None})
    assert mha["num_key_value_heads"] == 32


def test_mlp_bias_is_counted_and_is_not_a_matmul_parameter(calc):
    plain = calc.count_params(calc.architecture({**MISTRAL_7B_V03, "model_type": "llama"}))
    biased = calc.count_params(calc.architecture({**MISTRAL_7B_V03, "model_type": "llama", "mlp_bias": True}))
    assert biased["total"] - plain["total"] == 32 * (2 * 14336 + 4096)  # gate, up, down per layer
    assert biased["matmul_active"] == plain["matmul_active"]
    with pytest.raises(ValueError, match="mlp_bias must be true or false"):
        calc.architecture({**MISTRAL_7B_V03, "mlp_bias": "yes"})
