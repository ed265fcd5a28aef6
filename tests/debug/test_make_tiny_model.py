"""Tests of scripts/debug/make_tiny_model.py: built and trained as a process (loss goes down, files
written), then reloaded as a library (same logits, tokenizer round trip)."""

from __future__ import annotations

import json
import math
import signal

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script, interrupt_when

SCRIPT = "make_tiny_model.py"


def load_module():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


@pytest.mark.slow
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
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


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
    # --json onto one of the files --out writes: one of the two results would be lost
    Case("json-is-an-out-file", ["--out", "d", "--json", "d/model.pt"],
         "--json d/model.pt: --out writes there too; give each output its own path"),
    Case("seed-negative", ["--seed", "-1"], "--seed: -1 must be >= 0"),
    Case("lr-zero", ["--lr", "0"], "--lr: 0 must be > 0"),
    Case("sentences-huge", ["--sentences", "10000000000"], "--sentences: 10000000000 must be <= "),
    # training windows longer than the whole corpus: refused before torch, not a ValueError later
    Case("corpus-too-short-to-train", ["--sentences", "1", "--train-steps", "5"],
         r"--sentences 1 make \d+ tokens, too few for windows of --max-seq-len 64"),
]


# Issue 30: sizes that each pass their cap but together are no tiny model: refused before torch
# allocates (each was an allocator error or an out-of-memory kill).
SIZE_CASES = [
    Case("params-huge", ["--d-model", "8192", "--layers", "128", "--d-ff", "65536"],
         r"d_model 8,192, n_layers 128, d_ff 65,536 .* make 171,817,287,680 parameters, more than the "
         r"50,000,000 of a tiny model"),
    Case("training-step-huge", ["--batch-size", "4096", "--max-seq-len", "65536", "--train-steps", "1"],
         r"--batch-size 4096 x --max-seq-len 65536 make a training step's largest tensor .* values, more than "
         r"268,435,456"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT + SIZE_CASES])
def test_bad_input(case, tmp_path):
    check_refused("debug/make_tiny_model.py", case, tmp_path)


TINY = {"vocab_size": 30, "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 128, "max_seq_len": 64,
        "dropout": 0.0, "seed": 0}


def _fifo(path):
    import os
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path):
    path.unlink()
    path.symlink_to("/dev/zero")


# (id, file of the saved folder, how it is spoiled, the ValueError's message) for TinyLM.from_dir
# and CharTokenizer.load: files that are not files, deep or huge JSON, bad values inside.
LIBRARY_CASES = [
    ("config-dev-zero", "config.json", _dev_zero,
     r"config\.json: not a model config \(is not a regular file or a pipe\)"),
    ("config-deep", "config.json", "[" * 100_000, r"config\.json: not a model config \(nested too deeply"),
    ("config-huge-number", "config.json", '{"d_model": ' + "1" * 5000 + "}",
     r"config\.json: not a model config \(not valid JSON \(Exceeds the limit"),
    ("config-missing-key", "config.json", {k: v for k, v in TINY.items() if k != "n_heads"},
     r"config\.json: config field n_heads is missing"),
    ("config-size-text", "config.json", {**TINY, "d_model": "16"},
     r"config\.json: config field d_model must be an integer from 1 to 8,192, got '16'"),
    ("config-size-bool", "config.json", {**TINY, "n_layers": True},
     r"config\.json: config field n_layers must be an integer from 1 to 128, got True"),
    ("config-size-inf", "config.json", json.dumps(TINY).replace('"d_ff": 128', '"d_ff": Infinity'),
     r"config\.json: config field d_ff must be an integer from 1 to 65,536, got inf"),
    ("config-huge-model", "config.json", {**TINY, "vocab_size": 1_000_000, "d_model": 8192, "n_heads": 8},
     r"config\.json: vocab_size 1,000,000, d_model 8,192, .* parameters, more than the 50,000,000 of a tiny model"),
    ("model-pt-fifo", "model.pt", _fifo, r"model\.pt: not a regular file"),
    ("model-pt-too-large", "model.pt", b"x" * 3_000_000, r"model\.pt: 3,000,000 bytes, more than the weights of"),
    ("tokenizer-dev-zero", "tokenizer.json", _dev_zero,
     r"tokenizer\.json: not a CharTokenizer file \(is not a regular file or a pipe\)"),
    ("tokenizer-entry-not-string", "tokenizer.json",
     {"type": "char", "vocab": ["<pad>", "<unk>", "<bos>", "<eos>", "a", ["b"]]},
     r"tokenizer\.json: vocab\[5\] must be a non-empty string, got \[\"b\"\]"),
]


@pytest.mark.parametrize("name, spoil, message", [pytest.param(*c[1:], id=c[0]) for c in LIBRARY_CASES])
def test_loading_a_bad_file_names_it_and_the_field(name, spoil, message, tmp_path):
    mod = load_module()
    mod.TinyLM(TINY).save(str(tmp_path))
    mod.CharTokenizer(list("abc")).save(str(tmp_path / "tokenizer.json"))
    target = tmp_path / name
    if callable(spoil):
        spoil(target)
    elif isinstance(spoil, dict):
        target.write_text(json.dumps(spoil))
    else:
        target.write_bytes(spoil if isinstance(spoil, bytes) else spoil.encode())
    with pytest.raises(ValueError, match=message):
        if name == "tokenizer.json":
            mod.CharTokenizer.load(str(target))
        else:
            mod.TinyLM.from_dir(str(tmp_path))


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
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "dropout": "x"}))
    with pytest.raises(ValueError, match=r"config.json: config field dropout"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config.json: not a model config"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"config.json: not a model config"):
        mod.TinyLM.from_dir(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text('{"type": "bpe"}')
    with pytest.raises(ValueError, match=r"tokenizer.json is not a CharTokenizer file"):
        mod.CharTokenizer.load(str(tmp_path / "tokenizer.json"))
    assert not list(tmp_path.glob("*.tmp"))


def test_seed_zero_is_accepted():
    # the default seed is 0: the option must accept it (it once required >= 1)
    assert load_module().build_parser().parse_args(["--seed", "0"]).seed == 0


@pytest.mark.slow
def test_ctrl_c_during_training_writes_what_was_trained(tmp_path):
    out, report = tmp_path / "tiny", tmp_path / "tiny.json"
    res = interrupt_when(
        REPO / "scripts" / "debug" / SCRIPT,
        ["--out", str(out), "--json", str(report), "--train-steps", "1000000", "--log-every",
         "1", "--d-model", "16", "--heads", "2", "--layers", "1"],
        lambda lines: lines[-1].startswith("step     2"), signal.SIGINT)
    err = res.stderr
    assert res.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("make_tiny_model.py: error: interrupted after ")
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and len(data["losses"]) >= 2
    mod = load_module()
    assert sum(p.numel() for p in mod.TinyLM.from_dir(str(out)).parameters()) == data["parameters"]
