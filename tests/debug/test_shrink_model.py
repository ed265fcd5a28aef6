"""Tests of scripts/debug/shrink_model.py: every row of data/models/architectures.yml shrinks to a
model of its own architecture whose parameters model_calculator.py counts exactly; masks, GQA's
head grouping, the BPE tokenizer, a config.json run as a process and reloaded; careless inputs."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

SCRIPT = "shrink_model.py"


def load_module():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


@pytest.fixture(scope="module")
def shrunk():
    """(the script as a module, ShrunkLM, the calculator, a BPE tokenizer trained on the grammar)."""
    mod = load_module()
    torch.set_num_threads(1)
    calc = import_script(REPO / "scripts" / "models" / "model_calculator.py")
    return mod, mod._torch_classes()[1], calc, mod.BPETokenizer.train(mod.make_sample(200), 300)


def _rows():
    return [pytest.param(row, id=row["name"].replace(" ", "-")) for row in load_module().MODEL_ROWS]


@pytest.mark.parametrize("row", _rows())
def test_every_row_shrinks_to_its_own_architecture(row, shrunk):
    mod, ShrunkLM, calc, tok = shrunk
    config, changed = mod.shrink(row, len(tok), where=row["name"])
    real, tiny = calc.architecture(row), calc.architecture(config)
    model = ShrunkLM(config)
    counted = sum(p.numel() for p in model.parameters())
    # the book's calculator, reading the tiny config.json, counts exactly the weights built
    assert calc.count_params(tiny)["total"] == counted < 2_000_000
    assert tiny["num_hidden_layers"] == 2 and tiny["vocab_size"] == len(tok) < real["vocab_size"]
    # the attention keeps its kind: MLA, MHA, MQA, or GQA with the same ratio and 2+ KV heads
    assert tiny["mla"] == real["mla"]
    if not real["mla"]:
        n, kv, tn, tkv = (real["num_attention_heads"], real["num_key_value_heads"],
                          tiny["num_attention_heads"], tiny["num_key_value_heads"])
        assert tn // tkv == n // kv and tn % tkv == 0 and (tkv == 1) == (kv == 1)
        assert (tkv == tn) == (kv == n) and (tkv >= 2 or kv == 1)
    # MoE stays MoE with the same top-k, fewer experts; the rest of what the count depends on
    assert tiny["num_experts_per_tok"] == real["num_experts_per_tok"]
    assert real["num_experts_per_tok"] <= tiny["num_experts"] <= real["num_experts"]
    assert bool(tiny["first_k_dense_replace"]) == bool(real["first_k_dense_replace"]) or not real["num_experts"]
    for key in ("tie_word_embeddings", "qkv_bias", "qk_norm", "norms_per_layer", "router_bias",
                "n_shared_experts", "model_type"):
        assert tiny[key] == real[key], key
    assert bool(tiny["sliding_window"]) == bool(real["sliding_window"])
    assert (model.lm_head is None) == real["tie_word_embeddings"]
    # the real model's keys, spelled as it spells them; what changed is recorded
    assert set(config) == set(row) - {"name", "kind", "attention", "published_total", "published_active",
                                      "published_active_excludes_input_embedding"}
    assert changed["num_hidden_layers"] == [row["num_hidden_layers"], 2]
    ids = torch.randint(len(tok), (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(ids)
    assert logits.shape == (2, 16, len(tok))
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    assert abs(loss.item() - math.log(len(tok))) < 0.5         # random weights: about uniform
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_masks_of_a_shrunk_model(shrunk):
    mod, ShrunkLM, _, tok = shrunk
    row = next(r for r in mod.MODEL_ROWS if r["name"] == "Mistral 7B")   # every layer slides
    config, _ = mod.shrink(row, len(tok), seq=32, where="Mistral 7B")
    model = ShrunkLM(config).eval()
    window = config["sliding_window"]
    ids = torch.randint(len(tok), (1, 32), generator=torch.Generator().manual_seed(1))
    other = ids.clone()
    other[0, 0] = (ids[0, 0] + 1) % len(tok)
    with torch.no_grad():
        a, b = model(ids), model(other)
    changed = (a - b).abs().amax(-1)[0] > 1e-6
    # token 0 reaches the positions within 2 windows (2 sliding layers), and no further
    assert changed[:2 * window - 1].all() and not changed[2 * window:].any(), (window, changed)


def test_bpe_tokenizer_round_trips_any_text(shrunk, tmp_path):
    mod, _, _, tok = shrunk
    assert tok.merges == mod.BPETokenizer.train(mod.make_sample(200), 300).merges   # deterministic
    text = "the quick cat  sees\tünïcödé 猫 .\n"                # unseen bytes: still encoded
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and tok.decode(ids[1:-1]) == text
    sentence = mod.make_sample(1, seed=3)[0]
    assert len(tok.encode(sentence, add_special=False)) < len(sentence.encode()) / 2   # merges apply
    tok.save(str(tmp_path / "tokenizer.json"))
    assert mod.BPETokenizer.load(str(tmp_path / "tokenizer.json")).encode(text) == ids
    (tmp_path / "bad.json").write_text(json.dumps({"type": "byte_bpe", "specials": mod.SPECIALS,
                                                   "merges": [[4, 5], [4, 261]]}))
    with pytest.raises(ValueError, match=r"bad\.json: merges\[1\] must be two ids of earlier tokens"):
        mod.BPETokenizer.load(str(tmp_path / "bad.json"))


# A reader's own config.json, as the Hub writes it: Mixtral's spelling of the experts
# (num_local_experts, one intermediate_size), fields no shrinking touches.
MIXTRAL_LIKE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 1024,
                "intermediate_size": 3584, "num_hidden_layers": 8, "num_attention_heads": 16,
                "num_key_value_heads": 4, "num_local_experts": 8, "num_experts_per_tok": 2,
                "vocab_size": 32000, "max_position_embeddings": 4096, "rope_theta": 1e6,
                "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
                "torch_dtype": "bfloat16", "sliding_window": None}


def test_config_json_is_shrunk_saved_and_reloaded(launch, tmp_path, shrunk):
    mod, ShrunkLM, calc, _ = shrunk
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL_LIKE))
    out, report = tmp_path / "tiny", tmp_path / "tiny.json"
    res = launch.python(SCRIPT, ["--config", str(tmp_path / "config.json"), "--out", str(out),
                                 "--json", str(report), "--sentences", "100"], timeout=60)
    assert res.returncode == 0, res.output
    data = json.loads(report.read_text())
    config = json.loads((out / "config.json").read_text())
    assert set(MIXTRAL_LIKE) <= set(config) and "num_experts" not in config   # its own spellings
    assert config["num_local_experts"] == 4 and config["num_experts_per_tok"] == 2
    assert config["num_attention_heads"] // config["num_key_value_heads"] == 4
    assert (config["rope_theta"], config["torch_dtype"]) == (1e6, "bfloat16")
    record = config["shrunk_from"]
    assert record["source"] == str(tmp_path / "config.json") and record["changed"]["num_local_experts"] == [8, 4]
    model = mod.ShrunkLM.from_dir(str(out))
    assert sum(p.numel() for p in model.parameters()) == data["parameters"] == \
        calc.count_params(calc.architecture(config))["total"]
    tok = mod.BPETokenizer.load(str(out / "tokenizer.json"))
    first = json.loads((out / "data.jsonl").read_text().splitlines()[0])["text"]
    assert tok.decode(tok.encode(first)[1:-1]) == first and len(tok) == config["vocab_size"]
    with torch.no_grad():
        again = ShrunkLM(config)                          # rebuilt from config and seed 0
        assert torch.equal(again(torch.tensor([tok.encode(first)])), model(torch.tensor([tok.encode(first)])))


@pytest.mark.slow
def test_shrunk_model_learns(shrunk):
    mod, ShrunkLM, _, tok = shrunk
    row = next(r for r in mod.MODEL_ROWS if r["name"] == "Gemma 2 9B")   # sandwich norms, GeGLU, window
    model = ShrunkLM(mod.shrink(row, len(tok), seq=32, where="Gemma 2 9B")[0])
    args = argparse.Namespace(train_steps=40, lr=3e-3, batch_size=8, seed=0, log_every=100, max_seq_len=32)
    losses = mod.train(torch, model, tok, mod.make_sample(300), args)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses


CONFIG = json.dumps(MIXTRAL_LIKE)
BAD_INPUT = [
    Case("unknown-model", ["--from-model", "llama 3 8b"],
         r"--from-model 'llama 3 8b': not a model of data/models/architectures\.yml; did you mean 'Llama 3\.1 8B'"),
    Case("model-and-config", ["--from-model", "Mistral 7B", "--config", "c.json"],
         "argument --config: not allowed with argument --from-model", files={"c.json": CONFIG}),
    Case("config-missing", ["--config", "nope.json"], "--config nope.json: does not exist"),
    Case("config-not-json", ["--config", "c.json"], r"--config c\.json: not valid JSON",
         files={"c.json": "model_type: llama\n"}),
    Case("config-a-list", ["--config", "c.json"], r"--config c\.json: not a JSON object", files={"c.json": "[1]"}),
    Case("config-huge", ["--config", "c.json"], r"--config c\.json: larger than 1 MiB",
         files={"c.json": '{"pad": "' + "x" * (2 << 20) + '"}'}),
    Case("config-missing-key", ["--config", "c.json"], r"--config c\.json: hidden_size is missing",
         files={"c.json": json.dumps({k: v for k, v in MIXTRAL_LIKE.items() if k != "hidden_size"})}),
    Case("config-unknown-family", ["--config", "c.json"], r"model_type 'gpt2' is not one the calculator knows",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "model_type": "gpt2"})}),
    Case("config-heads-not-dividing", ["--config", "c.json"],
         r"hidden_size 1000 is not a multiple of num_attention_heads 16",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "hidden_size": 1000})}),
    Case("config-top-k-huge", ["--config", "c.json"], r"num_experts_per_tok 100 is more than a tiny model's 64",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "num_local_experts": 1000, "num_experts_per_tok": 100})}),
    Case("config-size-text", ["--config", "c.json"], r"num_attention_heads must be an integer >= 1, got '16'",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "num_attention_heads": "16"})}),
    Case("config-rope-theta-text", ["--config", "c.json"], r"rope_theta must be a number > 0, got '1e6'",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "rope_theta": "1e6"})}),
    Case("config-unknown-activation", ["--config", "c.json"], r"hidden_act 'relu2' is not one of silu",
         files={"c.json": json.dumps({**MIXTRAL_LIKE, "hidden_act": "relu2"})}),
    Case("width-odd-heads", ["--from-model", "Llama 2 7B", "--d-model", "30", "--heads", "4"],
         r"--d-model 30 is not a multiple of 2 x --heads 4"),
    Case("out-is-the-config", ["--config", "d/config.json", "--out", "d"],
         r"--out d/config\.json: is also an input", files={"d/config.json": CONFIG}),
    Case("json-is-the-corpus", ["--from-model", "Llama 2 7B", "--corpus", "c.jsonl", "--json", "c.jsonl"],
         r"--json c\.jsonl: is also an input", files={"c.jsonl": '{"text": "a"}\n'}),
    Case("no-model", ["--corpus", "c.jsonl"], "one of the arguments --from-model --config is required",
         files={"c.jsonl": '{"text": "a"}\n'}),
    Case("layers-zero", ["--from-model", "Llama 2 7B", "--layers", "0"], "--layers: 0 must be >= 1"),
    Case("lr-nan", ["--from-model", "Llama 2 7B", "--lr", "nan"], "--lr: 'nan' is not a finite number"),
    Case("step-too-large", ["--from-model", "Llama 2 7B", "--train-steps", "1", "--batch-size", "4096",
                            "--max-seq-len", "4096"], r"make a training step's largest tensor .* more than"),
    Case("out-unwritable", ["--from-model", "Llama 2 7B", "--out", "/proc/tiny"],
         "--out /proc/tiny: cannot write there"),
    Case("sample-too-short", ["--from-model", "Llama 2 7B", "--sentences", "1", "--train-steps", "1"],
         r"--sentences 1 make \d+ tokens, too few for windows of --max-seq-len 64 \+ 1"),
    Case("corpus-too-small", ["--from-model", "Llama 2 7B", "--corpus", "c.jsonl"],
         r"--corpus c\.jsonl: 1 documents of at least 1 bytes; need 20", files={"c.jsonl": '{"text": "a"}\n'}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/shrink_model.py", case, tmp_path)


def test_gqa_groups_query_heads_in_place(shrunk):
    # Llama 3.1 8B: 4 query heads per KV head; query head i must read KV head i // 4 (what
    # transformers' repeat_kv does), not i % 2 (tiling the KV heads: runs, and is wrong)
    mod, ShrunkLM, _, tok = shrunk
    row = next(r for r in mod.MODEL_ROWS if r["name"] == "Llama 3.1 8B")
    attn = ShrunkLM(mod.shrink(row, len(tok), where="Llama 3.1 8B")[0]).layers[0].self_attn
    n, kv, d = attn.a["num_attention_heads"], attn.a["num_key_value_heads"], attn.a["head_dim"]
    attn.o_proj = torch.nn.Identity()                    # the heads' outputs, side by side
    x = torch.randn(1, 8, attn.a["hidden_size"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = attn(x).view(1, 8, n, d)
        attn.v_proj.weight[d:2 * d] = 0                  # KV head 1's values: zero
        after = attn(x).view(1, 8, n, d)
    group = torch.arange(n) // (n // kv)
    assert kv == 2 and torch.equal(after[:, :, group == 0], before[:, :, group == 0])
    assert after[:, :, group == 1].abs().max() == 0 < before[:, :, group == 1].abs().max()


def test_a_foreign_folder_is_refused_before_torch_allocates(tmp_path, shrunk):
    mod, _, _, tok = shrunk
    row = next(r for r in mod.MODEL_ROWS if r["name"] == "Mixtral 8x7B")
    config, _ = mod.shrink(row, len(tok), where="Mixtral 8x7B")
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1000}))
    with pytest.raises(ValueError, match=r"config\.json: num_hidden_layers 1,000 is more than a tiny model's 32"):
        mod.ShrunkLM.from_dir(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"model\.pt: damaged, or not of .*config\.json"):
        mod.ShrunkLM.from_dir(str(tmp_path))
