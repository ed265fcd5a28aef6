#!/usr/bin/env python
"""make_tiny_model.py: a tiny random-weight transformer, tokenizer and data set, made locally in a second.

Reproducing a bug on a 7B model costs minutes per attempt; the same code path on a 100k-parameter
model costs a second. With no download, this builds a data set (``--sentences`` sentences of a
small seeded grammar, learnable, so "loss goes down" is a test), a character tokenizer
(``CharTokenizer``) and a decoder-only transformer from a config dict (``TinyLM``: pre-LayerNorm,
causal, tied embeddings, random weights from ``seed``). ``--out DIR`` writes config.json,
model.pt, tokenizer.json and data.txt; ``--train-steps N`` trains it with AdamW on CPU and prints
the loss (cross-entropy, nats per character); ``--json PATH`` writes the config, the parameter
count and the loss curve.

Launch, or use as a library (with this file's folder on ``sys.path``)::

    python make_tiny_model.py --out /tmp/tiny                       # build and save
    python make_tiny_model.py --out /tmp/tiny --train-steps 200 --json tiny.json

    from make_tiny_model import TinyLM, CharTokenizer
    model = TinyLM.from_dir("/tmp/tiny"); tok = CharTokenizer.load("/tmp/tiny/tokenizer.json")

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/debug/make_tiny_model.py --out /tmp/tiny --train-steps 200
    # make_tiny_model.py: 72,960 parameters, vocab 28 characters, 2000 sentences; config {"vocab_size": 28, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128, "max_seq_len": 64, "dropout": 0.0, "seed": 0}
    step     1  loss 3.331
    step   100  loss 1.215
    step   200  loss 0.487
    # wrote config.json, model.pt, tokenizer.json, data.txt to /tmp/tiny

Exit status: 0 done, 1 failure, 2 usage, 130 interrupted (after writing what was trained so far).
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import pickle
import random
import signal
import sys
import tempfile
import time
import traceback

PROG = "make_tiny_model.py"
DEFAULT_CONFIG = {"vocab_size": 0, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128,
                  "max_seq_len": 64, "dropout": 0.0, "seed": 0}
SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]
# Upper bounds of the model options and config fields: a "tiny" model past these is a typo (or a
# hostile config.json) that eats the machine. The sizes multiply, so the parameters have a bound
# of their own, and a training step's largest tensor too; all are checked before torch allocates.
# scripts/training/mx_quantize.py reads these models with the same bounds.
CAPS = {"vocab_size": 1_000_000, "d_model": 8192, "n_layers": 128, "n_heads": 256, "d_ff": 65536,
        "max_seq_len": 65536, "seed": 2**63 - 1}
MAX_PARAMS = 50_000_000            # 200 MB of float32 weights; the default model has 72,960
MAX_STEP_VALUES = 1 << 28          # values of a training step's largest tensor (1 GiB of float32)
OUT_FILES = ("config.json", "model.pt", "tokenizer.json", "data.txt")   # what --out DIR holds

_WORDS = {"det": ["the", "a", "one", "every"], "adj": ["red", "big", "small", "old", "quick"],
          "noun": ["cat", "dog", "bird", "fish", "horse", "mouse"],
          "verb": ["sees", "likes", "chases", "finds", "follows"]}


def read_json_file(path: str, kind: str):
    """The JSON document at ``path`` (a model's config.json, a tokenizer.json), read bounded
    (``read_input``: a regular file or a pipe, at most 16 MiB). OSError when it does not exist;
    ValueError naming the file for anything else (a device, a FIFO without a writer, not UTF-8,
    not JSON, nested too deeply)."""
    if not os.path.lexists(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    try:
        return parse_json(read_input(path, "file", limit=16 << 20), "file", path)
    except ScriptError as exc:
        why = str(exc).removeprefix(f"file {path}: ")
        raise ValueError(f"{path}: not {kind} ({why})") from None


def make_corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences "det [adj] noun verb det [adj] noun ." from a fixed grammar, seeded.

    Returns a list of strings (lowercase ASCII, single spaces). Raises ValueError if n < 1.
    """
    if n < 1:
        raise ValueError(f"need at least one sentence, got {n}")
    rng = random.Random(seed)

    def phrase() -> list[str]:
        words = [rng.choice(_WORDS["det"])]
        if rng.random() < 0.5:
            words.append(rng.choice(_WORDS["adj"]))
        return words + [rng.choice(_WORDS["noun"])]

    return [" ".join(phrase() + [rng.choice(_WORDS["verb"])] + phrase() + ["."])
            for _ in range(n)]


class CharTokenizer:
    """Character-level tokenizer: one id per character seen in the training text, plus SPECIALS.

    ``encode(text, add_special=True)`` -> list[int] (``<bos>`` ... ``<eos>``; unknown characters map
    to ``<unk>``); ``decode(ids)`` drops special tokens. ``save(path)``/``load(path)``: JSON.
    """

    def __init__(self, chars: list[str]):
        self.itos = SPECIALS + [c for c in chars if c not in SPECIALS]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = range(4)

    @classmethod
    def train(cls, texts: list[str]) -> CharTokenizer:
        return cls(sorted({c for t in texts for c in t}))

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        ids = [self.stoi.get(c, self.unk_id) for c in text]
        return [self.bos_id, *ids, self.eos_id] if add_special else ids

    def decode(self, ids: list[int]) -> str:
        return "".join(self.itos[i] for i in ids if i >= len(SPECIALS))

    def save(self, path: str) -> None:
        write_atomic(path, json.dumps({"type": "char", "vocab": self.itos}, indent=0))

    @classmethod
    def load(cls, path: str) -> CharTokenizer:
        """Read what ``save`` wrote (bounded: ``read_json_file``); ValueError (naming the file,
        and the entry) for anything else."""
        data = read_json_file(path, "a CharTokenizer file")
        if not isinstance(data, dict) or data.get("type") != "char" or \
                not isinstance(data.get("vocab"), list) or data["vocab"][:len(SPECIALS)] != SPECIALS:
            raise ValueError(f"{path} is not a CharTokenizer file (expected type 'char' and a "
                             "vocab list starting with the special tokens)")
        if len(data["vocab"]) > CAPS["vocab_size"]:
            raise ValueError(f"{path}: vocab has {len(data['vocab']):,} entries, more than "
                             f"{CAPS['vocab_size']:,}")
        for i, entry in enumerate(data["vocab"]):
            if not isinstance(entry, str) or not entry:
                raise ValueError(f"{path}: vocab[{i}] must be a non-empty string, got "
                                 f"{json.dumps(entry)[:40]}")
        return cls(data["vocab"][len(SPECIALS):])


def tiny_params(cfg: dict) -> int:
    """Parameters of TinyLM(cfg), counted from its modules without building it: token and
    position embeddings, per layer attention (in-projection 3d x d + 3d, out-projection d x d + d),
    MLP (d x f + f, f x d + d) and two LayerNorms (4d), and the final LayerNorm (2d)."""
    d, f = cfg["d_model"], cfg["d_ff"]
    layer = 4 * d * d + 2 * d * f + f + 9 * d
    return (cfg["vocab_size"] + cfg["max_seq_len"]) * d + cfg["n_layers"] * layer + 2 * d


def check_config(cfg: dict) -> None:
    """Raise ValueError naming the first bad field of a model config: a size that is not an
    integer from 1 to its cap (CAPS), sizes that together make more than MAX_PARAMS parameters
    (checked before anything is allocated), a bad dropout or seed."""
    for key in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
        value = cfg.get(key)
        if value is None:
            raise ValueError(f"config field {key} is missing")
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CAPS[key]:
            raise ValueError(f"config field {key} must be an integer from 1 to {CAPS[key]:,}, "
                             f"got {value!r:.40}")
    if cfg["d_model"] % cfg["n_heads"]:
        raise ValueError(f"d_model {cfg['d_model']} is not divisible by n_heads {cfg['n_heads']}")
    params = tiny_params(cfg)
    if params > MAX_PARAMS:
        raise ValueError(f"vocab_size {cfg['vocab_size']:,}, d_model {cfg['d_model']:,}, n_layers "
                         f"{cfg['n_layers']:,}, d_ff {cfg['d_ff']:,} and max_seq_len "
                         f"{cfg['max_seq_len']:,} make {params:,} parameters, more than the "
                         f"{MAX_PARAMS:,} of a tiny model")
    dropout = cfg.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"config field dropout must be a number in [0, 1), got {dropout!r:.40}")
    seed = cfg.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= CAPS["seed"]:
        raise ValueError(f"config field seed must be an integer from 0 to 2^63 - 1, got {seed!r:.40}")


def _torch_classes():
    import torch
    import torch.nn as nn

    class TinyLM(nn.Module):
        """Decoder-only LM: tokens (batch, seq) int64 -> logits (batch, seq, vocab) float32."""

        def __init__(self, cfg: dict):
            check_config(cfg)
            super().__init__()
            self.cfg = dict(cfg)
            torch.manual_seed(cfg.get("seed", 0))
            d = cfg["d_model"]
            self.tok = nn.Embedding(cfg["vocab_size"], d)
            self.pos = nn.Embedding(cfg["max_seq_len"], d)
            layer = nn.TransformerEncoderLayer(d, cfg["n_heads"], cfg["d_ff"],
                                               cfg.get("dropout", 0.0),
                                               activation="gelu", batch_first=True,
                                               norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, cfg["n_layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            # Small embedding init: with the tied output layer, N(0, 1) embeddings would give
            # logits of std ~sqrt(d_model) and a first loss far above log(vocab).
            for emb in (self.tok, self.pos):
                nn.init.normal_(emb.weight, std=0.02)

        def forward(self, ids):
            t = ids.shape[1]
            if t > self.cfg["max_seq_len"]:
                raise ValueError(f"sequence of {t} tokens > max_seq_len {self.cfg['max_seq_len']}")
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
            x = self.blocks(x, mask=mask, is_causal=True)
            return self.norm(x) @ self.tok.weight.T       # tied output embedding

        def save(self, out_dir: str) -> None:
            write_atomic(os.path.join(out_dir, "config.json"), json.dumps(self.cfg, indent=1))
            buffer = io.BytesIO()
            torch.save(self.state_dict(), buffer)
            write_atomic(os.path.join(out_dir, "model.pt"), buffer.getvalue())

        @classmethod
        def from_dir(cls, out_dir: str) -> TinyLM:
            """The model ``save`` wrote to ``out_dir``. Raises ValueError naming the file for a
            config that is not this model's, and a model.pt that is truncated, damaged or of
            another shape; OSError for a missing file."""
            config, weights = os.path.join(out_dir, "config.json"), os.path.join(out_dir, "model.pt")
            cfg = read_json_file(config, "a model config")
            if not isinstance(cfg, dict):
                raise ValueError(f"{config}: not a model config (expected a JSON object)")
            try:
                check_config(cfg)
            except ValueError as exc:
                raise ValueError(f"{config}: {exc}") from None
            if os.path.lexists(weights) and not os.path.isfile(weights):
                raise ValueError(f"{weights}: not a regular file")
            if os.path.isfile(weights) and os.path.getsize(weights) > 8 * tiny_params(cfg) + (1 << 20):
                raise ValueError(f"{weights}: {os.path.getsize(weights):,} bytes, more than the "
                                 f"weights of {config}'s {tiny_params(cfg):,} parameters")
            model = cls(cfg)
            try:
                state = torch.load(weights, weights_only=True)
            except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
                raise ValueError(f"{weights}: truncated or damaged, or not a torch.save file "
                                 f"({type(exc).__name__})") from None
            try:
                model.load_state_dict(state)
            except (RuntimeError, TypeError, AttributeError) as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                raise ValueError(f"{weights}: does not match {config} ({first})") from None
            return model

    return torch, TinyLM


def __getattr__(name: str):
    # ``from make_tiny_model import TinyLM`` builds the class on first use, so that importing this
    # module (and --help) does not import torch.
    if name == "TinyLM":
        return _torch_classes()[1]
    raise AttributeError(name)


def batches(tok: CharTokenizer, texts: list[str], batch_size: int, seq_len: int, seed: int):
    """Endless (inputs, targets) int64 tensors of shape (batch_size, seq_len): random windows of
    the concatenated encoded corpus, the targets shifted by one token."""
    import torch
    stream = torch.tensor([i for t in texts for i in tok.encode(t)], dtype=torch.long)
    if len(stream) <= seq_len + 1:
        raise ValueError(f"corpus of {len(stream)} tokens is too short for seq_len {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    while True:
        start = torch.randint(len(stream) - seq_len - 1, (batch_size,), generator=gen)
        window = torch.stack([stream[s:s + seq_len + 1] for s in start.tolist()])
        yield window[:, :-1], window[:, 1:]




def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Make a tiny random-weight transformer, "
                                "a character tokenizer and a synthetic data set, locally.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--out", type=nonempty, help="directory to write config.json, model.pt, tokenizer.json, "
                   "data.txt (default: write nothing)")
    for key in ("d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "seed"):
        p.add_argument("--" + key.replace("_", "-").replace("n-layers", "layers")
                       .replace("n-heads", "heads"), dest=key,
                       type=number(int, 0 if key == "seed" else 1, CAPS[key]),
                       default=DEFAULT_CONFIG[key], help=f"(default {DEFAULT_CONFIG[key]})")
    p.add_argument("--sentences", type=number(int, 1, 1_000_000), default=2000,
                   help="sentences in the synthetic data set (default 2000)")
    p.add_argument("--train-steps", type=number(int, 0, 1_000_000), default=0, help="AdamW steps to train (default 0)")
    p.add_argument("--batch-size", type=number(int, 1, 4096), default=16, help="(default 16)")
    p.add_argument("--lr", type=number(float, 0, lo_open=True), default=3e-3, help="learning rate (default 3e-3)")
    p.add_argument("--log-every", type=number(int, 1), default=25, help="print loss every N steps (default 25)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write config, parameter count and losses here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it ignored:
    # restore it, so that Ctrl-C or `kill -INT` stops the run however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.time()
    try:
        texts = make_corpus(args.sentences, args.seed)
        tok = CharTokenizer.train(texts)
        cfg = {**DEFAULT_CONFIG, **{k: getattr(args, k) for k in DEFAULT_CONFIG if hasattr(args, k)},
               "vocab_size": len(tok)}
        check_config(cfg)
    except ValueError as exc:
        raise ScriptError(str(exc), EXIT_USAGE) from None
    tokens = sum(len(t) + 2 for t in texts)          # what batches() encodes: <bos> text <eos>
    seq, batch = cfg["max_seq_len"], args.batch_size
    largest = max(batch * seq * max(cfg["d_ff"], cfg["vocab_size"], 3 * cfg["d_model"]),
                  batch * cfg["n_heads"] * seq * seq)   # MLP, logits or qkv; attention scores
    if args.train_steps and largest > MAX_STEP_VALUES:
        raise ScriptError(f"--batch-size {batch} x --max-seq-len {seq} make a training step's "
                          f"largest tensor {largest:,} values, more than {MAX_STEP_VALUES:,} "
                          "(1 GiB); lower one of them", EXIT_USAGE)
    if args.train_steps and tokens <= cfg["max_seq_len"] + 1:
        raise ScriptError(f"--sentences {args.sentences} make {tokens} tokens, too few for "
                          f"windows of --max-seq-len {cfg['max_seq_len']} + 1", EXIT_USAGE)
    if args.out:
        check_output_dir(args.out, "--out")
        for name in OUT_FILES:
            check_output(os.path.join(args.out, name), "--out")
    if args.json:
        check_output(args.json, "--json")
    torch, TinyLM = _torch_classes()
    torch.set_num_threads(1)
    model = TinyLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"# {PROG}: {n_params:,} parameters, vocab {len(tok)} characters, "
          f"{len(texts)} sentences; config {json.dumps(cfg)}")
    print(f"# sample: {texts[0]!r} -> {tok.encode(texts[0])[:12]}...")
    losses, interrupted = [], False
    if args.train_steps:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
        data = batches(tok, texts, args.batch_size, cfg["max_seq_len"], args.seed)
        try:
            for step in range(1, args.train_steps + 1):
                x, y = next(data)
                loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if step % args.log_every == 0 or step == 1:
                    print(f"step {step:5d}  loss {loss.item():.3f}")
        except KeyboardInterrupt:       # Ctrl-C: keep what was trained, say so, exit 130
            interrupted = True
            print(f"# interrupted after {len(losses)} of {args.train_steps} steps; writing "
                  "what was trained", flush=True)
    if args.out:
        model.save(args.out)
        tok.save(os.path.join(args.out, "tokenizer.json"))
        write_atomic(os.path.join(args.out, "data.txt"), "\n".join(texts) + "\n")
        print(f"# wrote config.json, model.pt, tokenizer.json, data.txt to {args.out}")
    print(f"# done in {time.time() - t0:.1f} s")
    if args.json:
        write_atomic(args.json, json.dumps({
            "config": cfg, "parameters": n_params, "vocab": tok.itos, "sentences": len(texts),
            "train_steps": args.train_steps, "lr": args.lr, "batch_size": args.batch_size,
            "losses": losses, "interrupted": interrupted}, indent=1) + "\n")
    if interrupted:
        raise ScriptError(f"interrupted after {len(losses)} of {args.train_steps} steps (the "
                          "files hold the model as trained so far)", EXIT_INTERRUPTED)
    return 0


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def check_output_dir(path: str, option: str) -> str:
    """Check, before any work, that the folder ``path`` (given as ``option``) can receive results:
    creates it if missing and makes sure a file can be created in it. Returns the path; raises
    ScriptError naming the option and the offending path otherwise."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ScriptError(f"{option} {path}: {existing} is a file, not a folder", EXIT_USAGE)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write there ({err.strerror})", EXIT_USAGE) from None
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


def parse_json(data: bytes, option: str, path: str):
    """``data`` parsed as JSON; ScriptError (usage) naming the option and the path when it is not
    UTF-8, not JSON, nested too deep, or holds a number Python refuses (over 4300 digits)."""
    import json
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptError(f"{option} {path}: not UTF-8 text", EXIT_USAGE) from None
    except RecursionError:
        raise ScriptError(f"{option} {path}: nested too deeply to be JSON data", EXIT_USAGE) from None
    except ValueError as err:  # json.JSONDecodeError, and int() of a 5,000-digit number
        raise ScriptError(f"{option} {path}: not valid JSON ({str(err).splitlines()[0]})", EXIT_USAGE) from None
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
