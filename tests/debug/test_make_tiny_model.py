"""Tests of scripts/debug/make_tiny_model.py: built and trained as a process (loss goes down, files
written), then reloaded as a library (same logits, tokenizer round trip)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
import torch

from tests.bad_input import Case, check_refused

from tests.launchers import REPO

SCRIPT = "make_tiny_model.py"


def load_module():
    spec = importlib.util.spec_from_file_location("make_tiny_model",
                                                  REPO / "scripts" / "debug" / SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_model"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_tiny_model_trains_and_reloads(launch, tmp_path):
    out, report = tmp_path / "tiny", tmp_path / "tiny.json"
    res = launch.python(SCRIPT, ["--out", str(out), "--train-steps", "80", "--json", str(report),
                                 "--d-model", "32", "--heads", "2"], timeout=90)
    assert res.returncode == 0, res.output
    data = json.loads(report.read_text())
    losses = data["losses"]
    assert len(losses) == 80 and all(math.isfinite(v) for v in losses)
    vocab = data["config"]["vocab_size"]
    # Untrained: about log(vocab) nats per character; trained: clearly below.
    assert abs(losses[0] - math.log(vocab)) < 0.5
    assert sum(losses[-10:]) / 10 < 0.7 * sum(losses[:10]) / 10
    for name in ("config.json", "model.pt", "tokenizer.json", "data.txt"):
        assert (out / name).is_file()

    mod = load_module()
    model = mod.TinyLM.from_dir(str(out)).eval()
    assert sum(p.numel() for p in model.parameters()) == data["parameters"]
    tok = mod.CharTokenizer.load(str(out / "tokenizer.json"))
    assert len(tok) == vocab
    first = (out / "data.txt").read_text().splitlines()[0]
    ids = tok.encode(first)
    assert tok.decode(ids) == first and ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    x = torch.tensor([ids[:20]])
    with torch.no_grad():
        logits = model(x)
    assert logits.shape == (1, 20, vocab)
    # The trained model predicts the data better than chance.
    loss = torch.nn.functional.cross_entropy(logits[0, :-1], x[0, 1:])
    assert loss < math.log(vocab)


def test_corpus_and_model_are_seeded():
    mod = load_module()
    assert mod.make_corpus(50, seed=1) == mod.make_corpus(50, seed=1)
    assert mod.make_corpus(50, seed=1) != mod.make_corpus(50, seed=2)
    cfg = {**mod.DEFAULT_CONFIG, "vocab_size": 30, "d_model": 16, "n_heads": 2, "n_layers": 1}
    a, b = mod.TinyLM(cfg), mod.TinyLM(cfg)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


BAD_INPUT = [
    Case("heads-not-dividing", ["--d-model", "30", "--heads", "4"],
         "d_model 30 is not divisible by n_heads 4"),
    Case("d-model-huge", ["--d-model", "1000000"], "--d-model: 1000000 must be <= 8192"),
    Case("layers-zero", ["--layers", "0"], "--layers: 0 must be >= 1"),
    Case("lr-nan", ["--lr", "nan"], "--lr: 'nan' is not a finite number"),
    Case("train-steps-negative", ["--train-steps", "-1"], "--train-steps: -1 must be >= 0"),
    Case("out-empty", ["--out", ""], "--out: must not be empty"),
    Case("out-is-file", ["--out", "f"], "f is a file, not a folder", files={"f": "x"}),
    Case("out-unwritable", ["--out", "/proc/tiny"], "--out /proc/tiny: cannot write there"),
    Case("json-is-folder", ["--json", "{tmp}"], "--json .*: is a folder"),
    Case("json-folder-missing", ["--json", "no/t.json"], "no does not exist"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/make_tiny_model.py", case, tmp_path)


def test_loading_a_damaged_or_foreign_model_names_the_file(tmp_path):
    mod = load_module()
    cfg = {**mod.DEFAULT_CONFIG, "vocab_size": 30, "d_model": 16, "n_heads": 2, "n_layers": 1}
    mod.TinyLM(cfg).save(str(tmp_path))
    good = (tmp_path / "model.pt").read_bytes()
    (tmp_path / "model.pt").write_bytes(good[:100])
    with pytest.raises(ValueError, match=r"model.pt: truncated or damaged"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "model.pt").write_bytes(good)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "d_model": 32}))
    with pytest.raises(ValueError, match=r"model.pt: does not match .*config.json"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json: not a model config"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text('{"type": "bpe"}')
    with pytest.raises(ValueError, match=r"tokenizer.json is not a CharTokenizer file"):
        mod.CharTokenizer.load(str(tmp_path / "tokenizer.json"))
    assert not list(tmp_path.glob("*.tmp"))
