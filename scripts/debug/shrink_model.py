#!/usr/bin/env python
"""shrink_model.py: a real model's architecture, shrunk to a tiny random-weight model, with a byte-level BPE tokenizer and data.

A bug in GQA's head grouping, an MoE router or a sliding-window mask shows on a model of 100k
parameters as on the real one, if the tiny model keeps that part. ``--from-model NAME`` (a row of
data/models/architectures.yml, built in) or ``--config PATH`` (a Hugging Face config.json of a
family model_calculator.py counts) is shrunk (``shrink``) to ``--layers`` layers, width about
``--d-model``, about ``--heads`` query heads, other widths scaled alike. Kept: the query-to-KV
head ratio with 2+ KV heads (or MLA), RoPE, RMSNorm where the family puts it, QK norms, biases,
the gated MLP, experts (a few, same top-k, shared, router bias), tied embeddings, sliding-window
layers (window: a quarter of ``--max-seq-len`` tokens). ``ShrunkLM`` builds it, seeded; its
parameters equal model_calculator.py's count of the tiny config.json. The data is ``--sentences``
sentences of a seeded grammar (learnable: "loss goes down" is a test) or documents of
``--corpus`` (JSONL of {"text": ...}), the tokenizer a byte-level BPE of ``--merges`` merges
trained on it. ``--out DIR``: config.json (the real keys and spellings, and ``shrunk_from``:
what changed), model.pt, tokenizer.json, data.jsonl; ``--train-steps N``: AdamW on CPU, printing
the loss (nats per token); ``--json PATH``: config, parameter count, losses.

    python shrink_model.py --from-model "Llama 3.1 8B" --out /tmp/tl --train-steps 100
    python shrink_model.py --config config.json --corpus corpus.jsonl --out /tmp/mine
    from shrink_model import ShrunkLM, BPETokenizer      # as a library, this folder on sys.path
    model, tok = ShrunkLM.from_dir("/tmp/tl"), BPETokenizer.load("/tmp/tl/tokenizer.json")

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/debug/shrink_model.py --from-model "Llama 3.1 8B" --out /tmp/tl --train-steps 100 --log-every 50
    # shrink_model.py: Llama 3.1 8B shrunk to 149,312 parameters, vocab 332 (BPE); changed {"num_hidden_layers": [32, 2], "vocab_size": [128256, 332], "hidden_size": [4096, 64], "num_attention_heads": [32, 8], "num_key_value_heads": [8, 2], "intermediate_size": [14336, 224]}
    # sample: 'every cat chases every fish .' -> [2, 274, 286, 315, 295, 293, 261, 3]...
    step     1  loss 5.835
    step    50  loss 1.304
    step   100  loss 1.236
    # wrote config.json, model.pt, tokenizer.json, data.jsonl to /tmp/tl
    # done in 6.4 s

Exit status: 0 done, 1 failure, 2 usage, 130 interrupted (Ctrl-C; nothing written).
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import math
import os
import pickle
import random
import re
import sys
import tempfile
import time
import traceback
from collections import Counter

PROG = "shrink_model.py"
SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]
# The largest value of each size of a tiny config (checked before torch allocates anything).
TINY_CAPS = {"num_hidden_layers": 32, "hidden_size": 2048, "num_attention_heads": 256,
             "num_key_value_heads": 256, "head_dim": 512, "intermediate_size": 16384,
             "moe_intermediate_size": 16384, "num_experts": 256, "num_experts_per_tok": 64,
             "n_shared_experts": 16, "vocab_size": 1_000_000, "q_lora_rank": 2048,
             "kv_lora_rank": 2048, "qk_nope_head_dim": 512, "qk_rope_head_dim": 512, "v_head_dim": 512}
MAX_PARAMS = 50_000_000          # 200 MB of float32 weights
MAX_STEP_VALUES = 1 << 28        # values of a training step's largest tensor (1 GiB of float32)
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_new": "gelu_tanh"}     # config.json's hidden_act -> the function ShrunkLM runs
FLOAT_KEYS = ("rope_theta", "rms_norm_eps", "initializer_range", "routed_scaling_factor",
              "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar")
NORM_PLACES = {"olmo2": "post", "gemma2": "sandwich"}   # every other family: norm before each block
OUT_FILES = ("config.json", "model.pt", "tokenizer.json", "data.jsonl")
WORDS = {"det": ["the", "a", "one", "every"], "adj": ["red", "big", "small", "old", "quick"],
         "noun": ["cat", "dog", "bird", "fish", "horse", "mouse"],
         "verb": ["sees", "likes", "chases", "finds", "follows"]}


def make_sample(n: int, seed: int = 0) -> list[str]:
    """``n`` sentences "det [adj] noun verb det [adj] noun ." of a fixed grammar, seeded."""
    rng = random.Random(seed)

    def phrase() -> list[str]:
        adj = [rng.choice(WORDS["adj"])] if rng.random() < 0.5 else []
        return [rng.choice(WORDS["det"]), *adj, rng.choice(WORDS["noun"])]
    return [" ".join([*phrase(), rng.choice(WORDS["verb"]), *phrase(), "."]) for _ in range(n)]


class BPETokenizer:
    """Byte-level BPE: ids 0-3 are SPECIALS, 4-259 the 256 bytes (so any text encodes), then one
    id per merge in the order learnt. ``encode(text, add_special=True)`` -> ``<bos>`` ids
    ``<eos>``; ``decode(ids)``; ``save(path)``/``load(path)``: JSON."""

    def __init__(self, merges: list[tuple[int, int]]):
        self.merges = [tuple(m) for m in merges]
        self.rank = {pair: i for i, pair in enumerate(self.merges)}
        self.pieces = [b""] * len(SPECIALS) + [bytes([b]) for b in range(256)]
        for a, b in self.merges:
            self.pieces.append(self.pieces[a] + self.pieces[b])
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = range(4)

    @staticmethod
    def _words(text: str) -> list[str]:
        return re.findall(r" ?\S+|\s+", text)    # a word with its leading space; lossless

    @staticmethod
    def _merge(ids: list[int], pair: tuple[int, int], new: int) -> list[int]:
        out, i = [], 0
        while i < len(ids):
            hit = i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair
            out.append(new if hit else ids[i])
            i += 2 if hit else 1
        return out

    @classmethod
    def train(cls, texts: list[str], merges: int) -> BPETokenizer:
        """Learn up to ``merges`` merges, each the most frequent pair (ties: the lowest ids);
        fewer when no pair is left (a small grammar runs out after 72)."""
        counts = Counter(w for t in texts for w in cls._words(t))
        seqs = {w: [b + len(SPECIALS) for b in w.encode("utf-8")] for w in counts}
        learnt: list[tuple[int, int]] = []
        for _ in range(merges):
            pairs: Counter = Counter()
            for w, n in counts.items():
                for pair in zip(seqs[w], seqs[w][1:], strict=False):
                    pairs[pair] += n
            if not pairs:
                break
            learnt.append(max(pairs, key=lambda p: (pairs[p], -p[0], -p[1])))
            seqs = {w: cls._merge(s, learnt[-1], len(SPECIALS) + 255 + len(learnt)) for w, s in seqs.items()}
        return cls(learnt)

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        ids = []
        for word in self._words(text):
            w = [b + len(SPECIALS) for b in word.encode("utf-8")]
            while len(w) > 1:    # apply the earliest-learnt merge present, as training did
                rank, pair = min((self.rank.get(p, len(self.rank)), p) for p in zip(w, w[1:], strict=False))
                if rank == len(self.rank):
                    break
                w = self._merge(w, pair, len(SPECIALS) + 256 + rank)
            ids += w
        return [self.bos_id, *ids, self.eos_id] if add_special else ids

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")

    def save(self, path: str) -> None:
        write_atomic(path, json.dumps({"type": "byte_bpe", "specials": SPECIALS, "merges": self.merges}) + "\n")

    @classmethod
    def load(cls, path: str) -> BPETokenizer:
        """Read what ``save`` wrote (bounded: at most 16 MiB); ValueError naming the file, and
        the merge, for anything else."""
        data = parse_json(read_input(path, "tokenizer", limit=16 << 20), "tokenizer", path)
        if not isinstance(data, dict) or data.get("type") != "byte_bpe" or \
                data.get("specials") != SPECIALS or not isinstance(data.get("merges"), list):
            raise ValueError(f"{path} is not a BPETokenizer file (expected type 'byte_bpe', the "
                             "special tokens and a merges list)")
        for i, m in enumerate(data["merges"]):    # a merge joins two tokens that exist before it
            if i >= TINY_CAPS["vocab_size"] or not (isinstance(m, list) and len(m) == 2 and all(
                    type(x) is int and len(SPECIALS) <= x < len(SPECIALS) + 256 + i for x in m)):
                raise ValueError(f"{path}: merges[{i}] must be two ids of earlier tokens, got {json.dumps(m)[:40]}")
        return cls(data["merges"])


def check_tiny(config: dict, where: str) -> dict:
    """``architecture(config)`` plus "act", the activation to run; ValueError naming ``where`` and
    the key for what ShrunkLM cannot build, or that exceeds TINY_CAPS or MAX_PARAMS parameters."""
    a = architecture(config, where=where)
    act = config.get("hidden_act") or config.get("hidden_activation") or \
        ("gelu_pytorch_tanh" if a["model_type"] == "gemma2" else "silu")
    if act not in ACTIVATIONS:
        raise ValueError(f"{where}: hidden_act {act!r:.40} is not one of {', '.join(ACTIVATIONS)}")
    a["act"] = ACTIVATIONS[act]
    for key in FLOAT_KEYS:
        value = config.get(key)
        if value is not None and not (type(value) in (int, float) and 0 < value < math.inf):
            raise ValueError(f"{where}: {key} must be a number > 0, got {value!r:.40}")
    for key, cap in TINY_CAPS.items():
        if (a.get(key) or 0) > cap:
            raise ValueError(f"{where}: {key} {a[key]:,} is more than a tiny model's {cap:,}")
    h = a["hidden_size"]
    per_head = max(a["head_dim"] or 0, a.get("v_head_dim") or 0,
                   (a.get("qk_nope_head_dim") or 0) + (a.get("qk_rope_head_dim") or 0))
    attn = 4 * max(h, a.get("q_lora_rank") or 0, a.get("kv_lora_rank") or 0) * a["num_attention_heads"] * per_head
    ffn = 3 * h * ((a["intermediate_size"] or 0)
                   + (a["num_experts"] + a["n_shared_experts"] + 1) * a["moe_intermediate_size"])
    bound = a["num_hidden_layers"] * (attn + ffn + h * a["num_experts"]) + 2 * a["vocab_size"] * h
    if bound > MAX_PARAMS:
        raise ValueError(f"{where}: sizes that make up to {bound:,} parameters, more than the "
                         f"{MAX_PARAMS:,} of a tiny model")
    return a


def shrink(config: dict, vocab: int, layers: int = 2, hidden: int = 64, heads: int = 4,
           seq: int = 64, where: str = "config") -> tuple[dict, dict]:
    """(the tiny config, {key: [original, tiny]} of what changed) of a real model's ``config``:
    ``layers`` layers, width about ``hidden``, ``heads`` query heads (more where the GQA ratio
    needs them, so that 2 KV heads remain and a repeat bug shows), other widths scaled alike (at
    least 8), a few experts with the same top-k, a sliding window of ``seq`` / 4; the original's
    keys and spellings. ValueError naming ``where`` and the key for what cannot stay tiny."""
    a = architecture(config, where=where)
    new = {"num_hidden_layers": layers, "vocab_size": vocab,
           "max_position_embeddings": seq if "max_position_embeddings" in config else None}

    def width(value: int, factor: float) -> int:
        return min(1024, max(8, 2 * round(value * factor / 2)))
    if a["mla"]:
        dim, f = width(a["v_head_dim"], 16 / a["v_head_dim"]), hidden / a["hidden_size"]
        new.update(hidden_size=hidden, num_attention_heads=heads, v_head_dim=dim,
                   qk_nope_head_dim=width(a["qk_nope_head_dim"], dim / a["v_head_dim"]),
                   qk_rope_head_dim=width(a["qk_rope_head_dim"], dim / a["v_head_dim"]),
                   kv_lora_rank=width(a["kv_lora_rank"], f),
                   q_lora_rank=width(a["q_lora_rank"], f) if a["q_lora_rank"] else None)
        kv_tiny = heads
    else:
        n, kv = a["num_attention_heads"], a["num_key_value_heads"]
        kv_tiny = heads if kv == n else 1 if kv == 1 else max(2, heads // (n // kv))
        n_tiny = heads if kv in (1, n) else kv_tiny * (n // kv)
        if config.get("head_dim"):      # its own key: keep it, and keep hidden_size apart from it
            new.update(hidden_size=hidden, head_dim=hidden // heads)
        else:                           # head_dim = hidden_size / heads, as in the original
            new["hidden_size"] = n_tiny * max(8, 2 * round(hidden / n_tiny / 2))
        new["num_attention_heads"] = n_tiny
    if "num_key_value_heads" in config:
        new["num_key_value_heads"] = kv_tiny
    f = new["hidden_size"] / a["hidden_size"]
    for key in ("intermediate_size", "moe_intermediate_size"):
        if config.get(key):
            new[key] = width(config[key], f)
    if a["num_experts"]:
        spelling = next(s for s in ("num_experts", "num_local_experts", "n_routed_experts") if config.get(s))
        new[spelling] = min(a["num_experts"], max(4, 2 * a["num_experts_per_tok"]))   # checked: top-k <= 64
        new["n_shared_experts"] = min(a["n_shared_experts"], 2) if "n_shared_experts" in config else None
        if config.get("first_k_dense_replace"):
            new["first_k_dense_replace"] = min(a["first_k_dense_replace"], layers - 1)
        new.update({key: 1 for key in ("n_group", "topk_group") if key in config})  # one group
    if a["sliding_window"]:
        new["sliding_window"] = max(2, seq // 4)
        if isinstance(config.get("layer_types"), list):
            new["layer_types"] = config["layer_types"][:layers]
    labels = {"name"} | {key for key, _, _ in ROW_LABELS}    # a data-file row's, not config.json keys
    tiny = {k: v for k, v in config.items() if k not in labels}
    changed = {k: [config.get(k), v] for k, v in new.items() if v is not None and config.get(k) != v}
    tiny.update({k: v for k, v in new.items() if v is not None})
    check_tiny(tiny, f"{where} (shrunk)")
    return tiny, changed


def _blocks():
    """rope, the gated MLP and the MoE layer (torch is imported here: --help does not need it)."""
    import torch
    import torch.nn as nn

    def rope(x, theta: float):
        """Rotary position embedding of x (batch, heads, seq, dim), the rotate-half layout."""
        d, t = x.shape[-1], x.shape[-2]
        angle = torch.arange(t, dtype=torch.float32)[:, None] * theta ** (-torch.arange(0, d, 2) / d)
        cos, sin = angle.cos().repeat(1, 2), angle.sin().repeat(1, 2)
        return x * cos + torch.cat((-x[..., d // 2:], x[..., :d // 2]), -1) * sin

    class MLP(nn.Module):                   # gated: down(act(gate(x)) * up(x)), SwiGLU or GeGLU
        def __init__(self, h: int, f: int, fn, bias: bool = False):
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(h, f, bias), nn.Linear(h, f, bias)
            self.down_proj, self.fn = nn.Linear(f, h, bias), fn

        def forward(self, x):
            return self.down_proj(self.fn(self.gate_proj(x)) * self.up_proj(x))

    class MoE(nn.Module):
        """Router, top-k of num_experts, shared experts; DeepSeek's noaux_tc: sigmoid scores and
        a per-expert bias that only picks the experts (set by a balancing rule, not gradients)."""

        def __init__(self, c: dict, a: dict, fn):
            super().__init__()
            h, f, e = a["hidden_size"], a["moe_intermediate_size"], a["num_experts"]
            self.gate = nn.Linear(h, e, bias=False)
            self.e_score_correction_bias = nn.Parameter(torch.zeros(e), requires_grad=False) \
                if a["router_bias"] else None
            self.experts = nn.ModuleList(MLP(h, f, fn) for _ in range(e))
            self.shared_experts = MLP(h, f * a["n_shared_experts"], fn) if a["n_shared_experts"] else None
            self.k, self.scale = a["num_experts_per_tok"], c.get("routed_scaling_factor") or 1.0
            self.norm = c.get("norm_topk_prob", a["model_type"] == "mixtral")

        def forward(self, x):
            flat = x.reshape(-1, x.shape[-1])
            logits = self.gate(flat)
            bias = self.e_score_correction_bias
            scores = logits.softmax(-1) if bias is None else logits.sigmoid()
            top = (scores if bias is None else scores + bias).topk(self.k, -1).indices
            weight = scores.gather(-1, top)
            if self.norm:
                weight = weight / weight.sum(-1, keepdim=True)
            out = torch.zeros_like(flat)
            for e, expert in enumerate(self.experts):
                rows, slot = (top == e).nonzero(as_tuple=True)
                if len(rows):
                    out = out.index_add(0, rows, expert(flat[rows]) * weight[rows, slot, None] * self.scale)
            if self.shared_experts is not None:
                out = out + self.shared_experts(flat)
            return out.view_as(x)

    return rope, MLP, MoE


def _attention(rope):
    import torch
    import torch.nn as nn

    class Attention(nn.Module):
        """MHA, GQA, MQA (with per-head or full QK norms, biases) or MLA; causal, windowed or not."""

        def __init__(self, c: dict, a: dict, window: int | None):
            super().__init__()
            h, n, eps = a["hidden_size"], a["num_attention_heads"], c.get("rms_norm_eps") or 1e-6
            self.a, self.window, self.theta = a, window, c.get("rope_theta") or 10000.0
            self.softcap = c.get("attn_logit_softcapping")
            if a["mla"]:
                qk, rank = a["qk_nope_head_dim"] + a["qk_rope_head_dim"], a["q_lora_rank"]
                if rank:
                    self.q_a_proj, self.q_a_layernorm = nn.Linear(h, rank, bias=False), nn.RMSNorm(rank, eps)
                    self.q_b_proj = nn.Linear(rank, n * qk, bias=False)
                else:
                    self.q_proj = nn.Linear(h, n * qk, bias=False)
                self.kv_a_proj_with_mqa = nn.Linear(h, a["kv_lora_rank"] + a["qk_rope_head_dim"], bias=False)
                self.kv_a_layernorm = nn.RMSNorm(a["kv_lora_rank"], eps)
                self.kv_b_proj = nn.Linear(a["kv_lora_rank"], n * (a["qk_nope_head_dim"] + a["v_head_dim"]),
                                           bias=False)
                self.o_proj = nn.Linear(n * a["v_head_dim"], h, bias=False)
                self.scale = qk ** -0.5
                return
            d, kv, bias = a["head_dim"], a["num_key_value_heads"], a["qkv_bias"] or a["attention_bias"]
            self.q_proj, self.o_proj = nn.Linear(h, n * d, bias), nn.Linear(n * d, h, a["attention_bias"])
            self.k_proj, self.v_proj = nn.Linear(h, kv * d, bias), nn.Linear(h, kv * d, bias)
            if a["qk_norm"]:        # "head": one norm of head_dim; "full": over all heads at once
                self.q_norm = nn.RMSNorm(d if a["qk_norm"] == "head" else n * d, eps)
                self.k_norm = nn.RMSNorm(d if a["qk_norm"] == "head" else kv * d, eps)
            self.scale = (c.get("query_pre_attn_scalar") or d) ** -0.5

        def forward(self, x):
            a, (b, t, _) = self.a, x.shape
            n = a["num_attention_heads"]
            if a["mla"]:
                nope, r = a["qk_nope_head_dim"], a["qk_rope_head_dim"]
                q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if a["q_lora_rank"] else self.q_proj(x)
                q_nope, q_rope = q.view(b, t, n, nope + r).transpose(1, 2).split([nope, r], -1)
                latent, k_rope = self.kv_a_proj_with_mqa(x).split([a["kv_lora_rank"], r], -1)
                kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, t, n, -1).transpose(1, 2)
                k_nope, v = kv.split([nope, a["v_head_dim"]], -1)
                k_rope = rope(k_rope.view(b, 1, t, r), self.theta).expand(b, n, t, r)  # one for all heads
                q, k = torch.cat((q_nope, rope(q_rope, self.theta)), -1), torch.cat((k_nope, k_rope), -1)
            else:
                d, kv = a["head_dim"], a["num_key_value_heads"]
                q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
                if a["qk_norm"] == "full":
                    q, k = self.q_norm(q), self.k_norm(k)
                q = q.view(b, t, n, d).transpose(1, 2)
                k, v = (y.view(b, t, kv, d).transpose(1, 2) for y in (k, v))
                if a["qk_norm"] == "head":
                    q, k = self.q_norm(q), self.k_norm(k)
                q, k = rope(q, self.theta), rope(k, self.theta)
                # GQA: query head i reads KV head i // (n / kv), so each KV head is repeated in place
                k, v = k.repeat_interleave(n // kv, 1), v.repeat_interleave(n // kv, 1)
            scores = q @ k.transpose(-1, -2) * self.scale
            if self.softcap:
                scores = self.softcap * torch.tanh(scores / self.softcap)
            i = torch.arange(t)
            allowed = i[:, None] >= i[None, :]
            if self.window:
                allowed &= i[:, None] - i[None, :] < self.window
            out = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
            return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    return Attention


def _torch_classes():
    """(torch, ShrunkLM)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    functions = {"silu": F.silu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}
    rope, MLP, MoE = _blocks()
    Attention = _attention(rope)

    class Layer(nn.Module):
        def __init__(self, c: dict, a: dict, index: int, window: int | None, fn):
            super().__init__()
            self.self_attn = Attention(c, a, window)
            self.mlp = MLP(a["hidden_size"], a["intermediate_size"], fn, a["mlp_bias"]) \
                if index < a["first_k_dense_replace"] else MoE(c, a, fn)
            self.place = NORM_PLACES.get(a["model_type"], "pre")
            self.norms = nn.ModuleList(nn.RMSNorm(a["hidden_size"], c.get("rms_norm_eps") or 1e-6)
                                       for _ in range(a["norms_per_layer"]))

        def forward(self, x):
            norm = self.norms
            for i, block in enumerate((self.self_attn, self.mlp)):
                if self.place == "post":                # OLMo 2: norm the block's output
                    x = x + norm[i](block(x))
                elif self.place == "sandwich":          # Gemma 2: norm its input and its output
                    x = x + norm[2 * i + 1](block(norm[2 * i](x)))
                else:
                    x = x + block(norm[i](x))
            return x

    class ShrunkLM(nn.Module):
        """A decoder-only LM of a Hugging Face-style config (``shrink``'s): tokens (batch, seq)
        int64 -> logits (batch, seq, vocab_size); read, as the calculators read it, through
        ``architecture``; weights from N(0, initializer_range) seeded by ``seed``."""

        def __init__(self, config: dict, seed: int = 0, where: str = "config"):
            super().__init__()
            a = check_tiny(config, where)
            self.config, self.arch = dict(config), a
            torch.manual_seed(seed)
            # which layers slide, as ``architecture`` read them (it checked these keys)
            types = config.get("layer_types") if a["sliding_window"] else None
            pattern = config.get("sliding_window_pattern") or SLIDING_PATTERN.get(a["model_type"])
            slides = [bool(a["sliding_window"]) and (
                types[i] == "sliding_attention" if types else
                (i + 1) % pattern != 0 if pattern else a["model_type"] in ALL_LAYERS_SLIDE)
                for i in range(a["num_hidden_layers"])]
            self.embed_tokens = nn.Embedding(a["vocab_size"], a["hidden_size"])
            self.layers = nn.ModuleList(Layer(config, a, i, a["sliding_window"] if slides[i] else None,
                                              functions[a["act"]])
                                        for i in range(a["num_hidden_layers"]))
            self.norm = nn.RMSNorm(a["hidden_size"], config.get("rms_norm_eps") or 1e-6)
            self.lm_head = None if a["tie_word_embeddings"] else \
                nn.Linear(a["hidden_size"], a["vocab_size"], bias=False)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=config.get("initializer_range") or 0.02)
                elif name.endswith("bias"):
                    nn.init.zeros_(p)

        def forward(self, ids):
            x = self.embed_tokens(ids)
            if self.arch["model_type"] == "gemma2":   # Gemma scales the embedding by sqrt(width)
                x = x * self.arch["hidden_size"] ** 0.5
            for layer in self.layers:
                x = layer(x)
            logits = self.norm(x) @ (self.embed_tokens if self.lm_head is None else self.lm_head).weight.T
            cap = self.config.get("final_logit_softcapping")
            return cap * torch.tanh(logits / cap) if cap else logits

        def save(self, out_dir: str) -> None:
            write_atomic(os.path.join(out_dir, "config.json"), json.dumps(self.config, indent=1) + "\n")
            buffer = io.BytesIO()
            torch.save(self.state_dict(), buffer)
            write_atomic(os.path.join(out_dir, "model.pt"), buffer.getvalue())

        @classmethod
        def from_dir(cls, out_dir: str) -> ShrunkLM:
            """The model ``save`` wrote; ValueError (ScriptError when unreadable) naming the file."""
            config, weights = os.path.join(out_dir, "config.json"), os.path.join(out_dir, "model.pt")
            model = cls(parse_json(read_input(config, "config", limit=1 << 20), "config", config), where=config)
            if not os.path.isfile(weights) or os.path.getsize(weights) > 8 * sum(
                    p.numel() for p in model.parameters()) + (1 << 20):
                raise ValueError(f"{weights}: not a regular file of this model's size")
            try:
                model.load_state_dict(torch.load(weights, weights_only=True))
            except (RuntimeError, EOFError, TypeError, AttributeError, pickle.UnpicklingError) as exc:
                first = (str(exc).strip().splitlines() or [""])[0]
                raise ValueError(f"{weights}: damaged, or not of {config} ({first[:100]})") from None
            return model

    return torch, ShrunkLM


def __getattr__(name: str):
    # ``from shrink_model import ShrunkLM`` builds the class on first use (importing torch then)
    if name == "ShrunkLM":
        return _torch_classes()[1]
    raise AttributeError(name)


def train(torch, model, tok, texts: list[str], args) -> list[float]:
    """``args.train_steps`` AdamW steps on random windows of ``args.max_seq_len`` + 1 tokens of
    the encoded ``texts``, printing the loss; returns the losses."""
    stream = torch.tensor([i for t in texts for i in tok.encode(t)])
    gen = torch.Generator().manual_seed(args.seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    losses: list[float] = []
    for step in range(1, args.train_steps + 1):
        start = torch.randint(len(stream) - args.max_seq_len - 1, (args.batch_size,), generator=gen)
        window = torch.stack([stream[s:s + args.max_seq_len + 1] for s in start.tolist()])
        loss = torch.nn.functional.cross_entropy(model(window[:, :-1]).flatten(0, 1), window[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step % args.log_every == 0 or step == 1:
            print(f"step {step:5d}  loss {loss.item():.3f}")
    return losses


def original_config(args) -> tuple[dict, dict]:
    """(the real model's config, where it came from) for --from-model or --config; ScriptError
    (usage) for a name not in the data file (with the closest names), or a config file that
    cannot be read, is not JSON or is not an object."""
    if args.from_model:
        rows = {_model_key(r["name"]): r for r in MODEL_ROWS}
        if _model_key(args.from_model) not in rows:
            close = difflib.get_close_matches(args.from_model, [r["name"] for r in MODEL_ROWS], 3, 0.4)
            hint = f"did you mean {' or '.join(map(repr, close))}?" if close else \
                "the models are: " + ", ".join(r["name"] for r in MODEL_ROWS)
            raise ScriptError(f"--from-model {args.from_model!r}: not a model of "
                              f"data/models/architectures.yml; {hint}", EXIT_USAGE)
        row = rows[_model_key(args.from_model)]
        return row, {"name": row["name"], "source": "data/models/architectures.yml (built in)"}
    config = parse_json(read_input(args.config, "--config", limit=1 << 20), "--config", args.config)
    if isinstance(config, dict) and "num_hidden_layers" not in config and isinstance(config.get("text_config"), dict):
        config = config["text_config"]          # a multimodal model's language part
    if not isinstance(config, dict):
        raise ScriptError(f"--config {args.config}: not a JSON object (a config.json is one)", EXIT_USAGE)
    name = config.get("_name_or_path") or config.get("model_type")
    return config, {"name": str(name)[:200], "source": os.path.abspath(args.config)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Shrink a real model's architecture to a tiny "
                                "random-weight model, with a byte-level BPE tokenizer and data, locally.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    real = p.add_mutually_exclusive_group(required=True)
    real.add_argument("--from-model", metavar="NAME", type=nonempty,
                      help="a model of data/models/architectures.yml (built in), e.g. 'Llama 3.1 8B'")
    real.add_argument("--config", metavar="PATH", type=nonempty, help="a Hugging Face config.json")
    p.add_argument("--corpus", metavar="PATH", type=nonempty, help="take the data sample from this JSONL "
                   "file of {\"text\": ...} lines (the book's data/training/corpus.jsonl), not the grammar")
    p.add_argument("--sentences", type=number(int, 1, 1_000_000), default=2000,
                   help="sentences of the grammar, or documents of --corpus (default 2000)")
    p.add_argument("--merges", type=number(int, 0, 100_000), default=300, help="BPE merges (default 300)")
    p.add_argument("--layers", type=number(int, 1, 32), default=2, help="(default 2)")
    p.add_argument("--d-model", type=number(int, 2, 2048), default=64, help="width (default 64)")
    p.add_argument("--heads", type=number(int, 1, 256), default=4, help="query heads, about (default 4)")
    p.add_argument("--max-seq-len", type=number(int, 2, 65536), default=64,
                   help="tokens of a training window (default 64)")
    p.add_argument("--seed", type=number(int, 0, 2**63 - 1), default=0, help="(default 0)")
    p.add_argument("--train-steps", type=number(int, 0, 1_000_000), default=0, help="AdamW steps (default 0)")
    p.add_argument("--batch-size", type=number(int, 1, 4096), default=16, help="(default 16)")
    p.add_argument("--lr", type=number(float, 0, lo_open=True), default=3e-3, help="learning rate (default 3e-3)")
    p.add_argument("--log-every", type=number(int, 1), default=25, help="print loss every N steps (default 25)")
    p.add_argument("--out", metavar="DIR", type=nonempty, help="write " + ", ".join(OUT_FILES) + " here")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write config, parameter count and losses here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    t0, inputs = time.time(), [p for p in (args.config, args.corpus) if p]
    if args.out:
        check_output_dir(args.out, "--out")
        for name in OUT_FILES:
            check_output(os.path.join(args.out, name), "--out", inputs)
    if args.json:
        check_output(args.json, "--json", inputs)
    if args.d_model % (2 * args.heads):
        raise ScriptError(f"--d-model {args.d_model} is not a multiple of 2 x --heads {args.heads} "
                          "(each head's width must be even, for RoPE)", EXIT_USAGE)
    config, record = original_config(args)
    where = f"--from-model {record['name']!r}" if args.from_model else f"--config {args.config}"
    texts = load_corpus(args.corpus, 1, "nothing (every non-empty document counts)")[:args.sentences] \
        if args.corpus else make_sample(args.sentences, args.seed)
    tok = BPETokenizer.train(texts, args.merges)
    try:
        cfg, changed = shrink(config, len(tok), args.layers, args.d_model, args.heads, args.max_seq_len, where)
    except ValueError as exc:
        raise ScriptError(str(exc), EXIT_USAGE) from None
    cfg["shrunk_from"] = {**record, "changed": changed, "seed": args.seed,
                          "tokenizer": f"byte-level BPE of {len(tok.merges)} merges"}
    # Refuse, before torch, a training step whose largest tensor (logits, MLP or experts, the
    # attention scores) is over MAX_STEP_VALUES, or a sample too short for one window.
    a, tokens = architecture(cfg), sum(len(tok.encode(t)) for t in texts)
    widest = max(len(tok), 4 * a["hidden_size"], 3 * (a["intermediate_size"] or 0),
                 a["num_experts"] * a["moe_intermediate_size"], a["num_attention_heads"] * args.max_seq_len)
    if args.train_steps and args.batch_size * args.max_seq_len * widest > MAX_STEP_VALUES:
        raise ScriptError(f"--batch-size {args.batch_size} x --max-seq-len {args.max_seq_len} make a training "
                          f"step's largest tensor {args.batch_size * args.max_seq_len * widest:,} values, more "
                          f"than {MAX_STEP_VALUES:,} (1 GiB); lower one of them", EXIT_USAGE)
    if args.train_steps and tokens <= args.max_seq_len + 1:
        raise ScriptError(f"--sentences {args.sentences} make {tokens} tokens, too few for windows of "
                          f"--max-seq-len {args.max_seq_len} + 1", EXIT_USAGE)
    torch, ShrunkLM = _torch_classes()
    torch.set_num_threads(1)
    model = ShrunkLM(cfg, args.seed, where)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"# {PROG}: {record['name']} shrunk to {n_params:,} parameters, vocab {len(tok)} (BPE); "
          f"changed {json.dumps(changed)}")
    print(f"# sample: {texts[0][:60]!r} -> {tok.encode(texts[0])[:12]}...")
    losses = train(torch, model, tok, texts, args)
    if args.out:
        model.save(args.out)
        tok.save(os.path.join(args.out, "tokenizer.json"))
        write_atomic(os.path.join(args.out, "data.jsonl"), "".join(json.dumps({"text": t}) + "\n" for t in texts))
        print(f"# wrote {', '.join(OUT_FILES)} to {args.out}")
    print(f"# done in {time.time() - t0:.1f} s")
    if args.json:
        write_atomic(args.json, json.dumps({
            "config": cfg, "parameters": n_params, "vocab": len(tok), "documents": len(texts),
            "train_steps": args.train_steps, "lr": args.lr, "batch_size": args.batch_size,
            "losses": losses}, indent=1) + "\n")
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


# The families whose parameters model_calculator counts (their biases, norms and experts differ);
# the KV cache needs only the attention's shape, so kv_cache_calculator reads any family.
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "olmo2",
            "olmoe", "deepseek_v2", "deepseek_v3")


MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")  # multi-head latent attention, whatever else the config says


QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "olmo2": "full", "olmoe": "full"}


NORMS_PER_LAYER = {"gemma2": 4}  # every other family: one before attention, one before the MLP


# Sliding windows without layer_types: every p-th layer (1-based) is global, the others slide
# (Gemma 2 and 3; sliding_window_pattern, else this default), or every layer slides (these).
SLIDING_PATTERN = {"gemma2": 2}


ALL_LAYERS_SLIDE = ("mistral", "mixtral")


MAX_SIZE = 2**31 - 1  # config.json sizes are int32 in every framework that reads them


# Fields of a data-file row beside the config.json ones: (key, the type it must have, in words).
ROW_LABELS = (("kind", str, "a string"), ("attention", str, "a string"),
              ("published_total", str, "a count as printed, such as '6.74B'"),
              ("published_active", str, "a count as printed, such as '6.74B', or '—'"),
              ("published_active_excludes_input_embedding", bool, "true or false"))


def _shown(value) -> str:
    """``value`` for an error line, cut short when long (a hostile file may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _int(config: dict, key: str, where: str, default=None, lo: int = 1) -> int | None:
    value = config.get(key)
    if value is None:  # absent, or null: transformers then uses the default too
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= MAX_SIZE:
        raise ValueError(f"{where}: {key} must be an integer >= {lo}"
                         + (f" and <= {MAX_SIZE}" if isinstance(value, int) and value > MAX_SIZE else "")
                         + f", got {_shown(value)}")
    return value


def _bool(config: dict, key: str, where: str, default: bool | None) -> bool | None:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {key} must be true or false, got {_shown(value)}")
    return value


def architecture(config: dict, name: str | None = None, where: str = "config",
                 counts: bool = True) -> dict:
    """The model ``config`` describes (a parsed Hugging Face config.json, a multimodal one's
    ``text_config``, or a row of data/models/architectures.yml), each family's spelling mapped
    onto one: a dict of sizes (ints: counts of layers, heads or values, never bytes):

    name, model_type          ``name``, else the config's name or _name_or_path, else model_type
    num_hidden_layers, num_attention_heads, hidden_size, vocab_size (None when absent)
    num_key_value_heads, head_dim    per-head keys and values; None with ``mla``
    mla                       multi-head latent attention (DeepSeek-V2/V3, or a kv_lora_rank):
                              kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim,
                              q_lora_rank (None: a full q projection)
    values_per_layer          values one token adds to one layer's KV cache: 2 x
                              num_key_value_heads x head_dim, or kv_lora_rank + qk_rope_head_dim
    sliding_window, sliding_layers   a window in tokens (or None) and how many layers keep it

    With ``counts`` (model_calculator: parameters and FLOPs) the family must be one of
    FAMILIES, hidden_size, vocab_size and MLA's four sizes are required, and the dict also
    holds tie_word_embeddings, qkv_bias, attention_bias, mlp_bias, qk_norm, norms_per_layer,
    intermediate_size and the experts' num_experts (num_local_experts, n_routed_experts),
    num_experts_per_tok, moe_intermediate_size, n_shared_experts, first_k_dense_replace and
    router_bias (zeros for a dense model). Without (kv_cache_calculator: the cache alone) any
    family is read and only the attention's shape is required.

    Keys, spellings and defaults (a key absent or null takes transformers' default) are those of
    Hugging Face transformers' configuration_<model_type>.py; the formulas that use them, and
    their sources: book/en/models/architecture.md and book/en/inference/kv-cache.md.

    Raises ValueError naming ``where`` and the key for an unknown family (with ``counts``), a
    missing or non-integer size (or one above 2^31 - 1), sizes that do not fit together, a
    window whose layers the config does not say, or what the calculators cannot count."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    if "text_config" in config and "num_hidden_layers" not in config:
        config = config["text_config"]  # a multimodal wrapper: the language model's part
        if not isinstance(config, dict):
            raise ValueError(f"{where}: text_config is not a JSON object")
    family = config.get("model_type")
    if counts and (not isinstance(family, str) or family not in FAMILIES):
        raise ValueError(f"{where}: model_type {_shown(family)} is not one the calculator knows "
                         f"({', '.join(FAMILIES)})")
    label = name or config.get("name") or config.get("_name_or_path")
    arch = {"name": label if isinstance(label, str) and label.strip() else str(family),
            "model_type": family}
    use_window = _bool(config, "use_sliding_window", where, None)
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size") if counts \
        else ("num_hidden_layers", "num_attention_heads")
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        arch[key] = _int(config, key, where)
        if arch[key] is None and key in required:
            raise ValueError(f"{where}: {key} is missing")
    family = family if isinstance(family, str) else ""  # for the tables below
    _attention_fields(config, arch, family, where, counts)
    _window_fields(config, arch, family, use_window, where)
    if counts:
        _count_fields(config, arch, family, where)
    return arch


def _attention_fields(config: dict, arch: dict, family: str, where: str, counts: bool) -> None:
    """The keys and values a token adds to the cache, into ``arch``: per head (MHA, MQA, GQA) or
    a latent (MLA, whose ranks and head sizes ``counts`` needs all of)."""
    heads, hidden = arch["num_attention_heads"], arch["hidden_size"]
    kv_heads = _int(config, "num_key_value_heads", where, heads)
    head_dim = _int(config, "head_dim", where)
    arch["mla"] = family in MLA_FAMILIES or config.get("kv_lora_rank") is not None
    if arch["mla"]:
        needed = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") if counts \
            else ("kv_lora_rank", "qk_rope_head_dim")
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank"):
            arch[key] = _int(config, key, where)
            if arch[key] is None and key in needed:
                raise ValueError(f"{where}: {key} is missing (multi-head latent attention)")
        arch.update(num_key_value_heads=None, head_dim=None,
                    values_per_layer=arch["kv_lora_rank"] + arch["qk_rope_head_dim"])
        return
    if head_dim is None:
        if hidden is None:
            raise ValueError(f"{where}: hidden_size is missing (and there is no head_dim)")
        if hidden % heads:
            raise ValueError(f"{where}: hidden_size {hidden} is not a multiple of "
                             f"num_attention_heads {heads} and there is no head_dim")
        head_dim = hidden // heads
    if heads % kv_heads:
        raise ValueError(f"{where}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv_heads}")
    arch.update(num_key_value_heads=kv_heads, head_dim=head_dim, values_per_layer=2 * kv_heads * head_dim)


def _window_fields(config: dict, arch: dict, family: str, use_window: bool | None, where: str) -> None:
    """Sliding windows: which layers keep only the last ``sliding_window`` tokens, into ``arch``
    (``sliding_window``, ``sliding_layers``). ``use_sliding_window: false`` turns the window off
    (Qwen2's configs give one anyway); with max_window_layers it applies to some layers only,
    which is not supported."""
    if use_window and config.get("max_window_layers") is not None:
        raise ValueError(f"{where}: use_sliding_window with max_window_layers is not supported")
    window = None if use_window is False else config.get("sliding_window")
    arch["sliding_window"] = _int({"sliding_window": window}, "sliding_window", where)
    arch["sliding_layers"] = 0
    if not arch["sliding_window"]:
        return
    layers = arch["num_hidden_layers"]
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
            raise ValueError(f"{where}: layer_types must list one string per layer "
                             f"({layers}), got {_shown(types)}")
        arch["sliding_layers"] = sum(t == "sliding_attention" for t in types)
        return
    pattern = _int(config, "sliding_window_pattern", where, SLIDING_PATTERN.get(family))
    if pattern:  # every pattern-th layer (1-based) is global, the others slide
        arch["sliding_layers"] = layers - layers // pattern
    elif family in ALL_LAYERS_SLIDE:
        arch["sliding_layers"] = layers
    else:
        raise ValueError(f"{where}: sliding_window {arch['sliding_window']} without layer_types or "
                         f"sliding_window_pattern: which layers slide is not known for model_type "
                         f"{config.get('model_type')!r}")


def _count_fields(config: dict, arch: dict, family: str, where: str) -> None:
    """What the parameter count needs beyond the attention's shape, into ``arch``: tied
    embeddings, biases, norms, the dense MLP's width and the experts."""
    arch["tie_word_embeddings"] = _bool(config, "tie_word_embeddings", where, family == "gemma2")
    # Biases: Qwen2 hard-codes them on q, k, v; others may set attention_bias (q, k, v and o).
    arch["qkv_bias"] = _bool(config, "qkv_bias", where, family == "qwen2")
    arch["attention_bias"] = _bool(config, "attention_bias", where, False) and family != "qwen2"
    if arch["mla"] and (arch["qkv_bias"] or arch["attention_bias"]):
        raise ValueError(f"{where}: attention biases with multi-head latent attention are not supported")
    # Llama's mlp_bias: biases on the dense MLP's gate, up and down projections.
    arch["mlp_bias"] = _bool(config, "mlp_bias", where, False)
    arch["qk_norm"] = QK_NORM.get(family)
    arch["norms_per_layer"] = NORMS_PER_LAYER.get(family, 2)
    _moe_fields(config, arch, where)
    arch["intermediate_size"] = _int(config, "intermediate_size", where)
    if arch["first_k_dense_replace"] and arch["intermediate_size"] is None:
        raise ValueError(f"{where}: intermediate_size is missing")


def _moe_fields(config: dict, arch: dict, where: str) -> None:
    """Mixture of experts: the number of experts (whichever the family calls it), the experts per
    token, their width, the shared experts and the dense layers before the first MoE layer, into
    ``arch``; zeros for a dense model. Raises ValueError for what the calculator cannot count."""
    spelling = next((k for k in ("num_experts", "num_local_experts", "n_routed_experts")
                     if config.get(k)), "num_experts")
    arch["num_experts"] = _int(config, spelling, where) if config.get(spelling) else 0
    if not arch["num_experts"]:
        arch.update(num_experts_per_tok=0, moe_intermediate_size=0, n_shared_experts=0,
                    first_k_dense_replace=arch["num_hidden_layers"], router_bias=False)
        return
    arch["num_experts_per_tok"] = _int(config, "num_experts_per_tok", where)
    if arch["num_experts_per_tok"] is None or arch["num_experts_per_tok"] > arch["num_experts"]:
        raise ValueError(f"{where}: num_experts_per_tok must be between 1 and num_experts "
                         f"({arch['num_experts']}), got {config.get('num_experts_per_tok')!r}")
    spelling = "moe_intermediate_size" if config.get("moe_intermediate_size") else "intermediate_size"
    arch["moe_intermediate_size"] = _int(config, spelling, where)
    if arch["moe_intermediate_size"] is None:
        raise ValueError(f"{where}: moe_intermediate_size is missing")
    arch["n_shared_experts"] = _int(config, "n_shared_experts", where, 0, lo=0)
    arch["first_k_dense_replace"] = _int(config, "first_k_dense_replace", where, 0, lo=0)
    if arch["first_k_dense_replace"] >= arch["num_hidden_layers"]:
        raise ValueError(f"{where}: first_k_dense_replace {arch['first_k_dense_replace']} "
                         f"leaves no MoE layer in {arch['num_hidden_layers']}")
    for key, plain in (("decoder_sparse_step", 1), ("moe_layer_freq", 1)):
        if config.get(key, plain) != plain:
            raise ValueError(f"{where}: {key} = {_shown(config[key])} (MoE only in some layers) "
                             "is not supported")
    if config.get("mlp_only_layers"):
        raise ValueError(f"{where}: mlp_only_layers is not supported")
    if arch["mlp_bias"]:
        raise ValueError(f"{where}: mlp_bias with experts is not supported")
    if config.get("shared_expert_intermediate_size"):
        raise ValueError(f"{where}: shared_expert_intermediate_size (Qwen2-MoE's gated "
                         "shared expert) is not supported")
    # DeepSeek-V3's auxiliary-loss-free balancing keeps a learnt bias per expert.
    arch["router_bias"] = config.get("topk_method") == "noaux_tc"
    if not isinstance(config.get("topk_method", ""), str):
        raise ValueError(f"{where}: topk_method must be a string, got {_shown(config['topk_method'])}")


def _model_key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


# data/models/architectures.yml, without its sources and the context lengths no script reads.
MODEL_ROWS = [
    {'name': 'Llama 2 7B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'llama', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 32, 'intermediate_size': 11008,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '6.74B'},
    {'name': 'Llama 2 13B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'llama', 'num_hidden_layers': 40,
     'hidden_size': 5120, 'num_attention_heads': 40, 'num_key_value_heads': 40, 'intermediate_size': 13824,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '13B'},
    {'name': 'Llama 2 70B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 28672,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'published_total': '69B'},
    {'name': 'Llama 3.1 8B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '8.03B'},
    {'name': 'Llama 3.1 70B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 28672,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '70.6B'},
    {'name': 'Llama 3.1 405B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'llama', 'num_hidden_layers': 126,
     'hidden_size': 16384, 'num_attention_heads': 128, 'num_key_value_heads': 8, 'intermediate_size': 53248,
     'vocab_size': 128256, 'tie_word_embeddings': False, 'published_total': '406B'},
    {'name': 'Mistral 7B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'mistral', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'sliding_window': 4096, 'published_total': '7.24B'},
    {'name': 'Mixtral 8x7B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'mixtral', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 8, 'intermediate_size': 14336,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'num_experts': 8, 'num_experts_per_tok': 2,
     'n_shared_experts': 0, 'moe_intermediate_size': 14336, 'published_total': '46.7B', 'published_active': '12.9B'},
    {'name': 'Mixtral 8x22B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'mixtral', 'num_hidden_layers': 56,
     'hidden_size': 6144, 'num_attention_heads': 48, 'num_key_value_heads': 8, 'intermediate_size': 16384,
     'vocab_size': 32000, 'tie_word_embeddings': False, 'num_experts': 8, 'num_experts_per_tok': 2,
     'n_shared_experts': 0, 'moe_intermediate_size': 16384, 'published_total': '141B', 'published_active': '39B'},
    {'name': 'Qwen2.5 7B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'qwen2', 'num_hidden_layers': 28,
     'hidden_size': 3584, 'num_attention_heads': 28, 'num_key_value_heads': 4, 'intermediate_size': 18944,
     'vocab_size': 152064, 'tie_word_embeddings': False, 'qkv_bias': True, 'published_total': '7.61B'},
    {'name': 'Qwen2.5 72B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'qwen2', 'num_hidden_layers': 80,
     'hidden_size': 8192, 'num_attention_heads': 64, 'num_key_value_heads': 8, 'intermediate_size': 29568,
     'vocab_size': 152064, 'tie_word_embeddings': False, 'qkv_bias': True, 'published_total': '72.7B'},
    {'name': 'Qwen3-30B-A3B', 'kind': 'MoE', 'attention': 'GQA', 'model_type': 'qwen3_moe', 'num_hidden_layers': 48,
     'hidden_size': 2048, 'num_attention_heads': 32, 'num_key_value_heads': 4, 'head_dim': 128,
     'intermediate_size': 6144, 'vocab_size': 151936, 'tie_word_embeddings': False, 'num_experts': 128,
     'num_experts_per_tok': 8, 'n_shared_experts': 0, 'moe_intermediate_size': 768, 'published_total': '30.5B',
     'published_active': '—'},
    {'name': 'Gemma 2 9B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'gemma2', 'num_hidden_layers': 42,
     'hidden_size': 3584, 'num_attention_heads': 16, 'num_key_value_heads': 8, 'head_dim': 256,
     'intermediate_size': 14336, 'vocab_size': 256000, 'tie_word_embeddings': True, 'sliding_window': 4096,
     'sliding_window_pattern': 2, 'published_total': '9.24B'},
    {'name': 'Gemma 2 27B', 'kind': 'dense', 'attention': 'GQA', 'model_type': 'gemma2', 'num_hidden_layers': 46,
     'hidden_size': 4608, 'num_attention_heads': 32, 'num_key_value_heads': 16, 'head_dim': 128,
     'intermediate_size': 36864, 'vocab_size': 256000, 'tie_word_embeddings': True, 'sliding_window': 4096,
     'sliding_window_pattern': 2, 'published_total': '27.2B'},
    {'name': 'OLMo 2 7B', 'kind': 'dense', 'attention': 'MHA', 'model_type': 'olmo2', 'num_hidden_layers': 32,
     'hidden_size': 4096, 'num_attention_heads': 32, 'num_key_value_heads': 32, 'intermediate_size': 11008,
     'vocab_size': 100352, 'tie_word_embeddings': False, 'published_total': '7.3B'},
    {'name': 'OLMoE-1B-7B', 'kind': 'MoE', 'attention': 'MHA', 'model_type': 'olmoe', 'num_hidden_layers': 16,
     'hidden_size': 2048, 'num_attention_heads': 16, 'num_key_value_heads': 16, 'intermediate_size': 1024,
     'vocab_size': 50304, 'tie_word_embeddings': False, 'num_experts': 64, 'num_experts_per_tok': 8,
     'n_shared_experts': 0, 'moe_intermediate_size': 1024, 'published_total': '6.9B', 'published_active': '1.3B'},
    {'name': 'DeepSeek-V3', 'kind': 'MoE', 'attention': 'MLA', 'model_type': 'deepseek_v3', 'num_hidden_layers': 61,
     'hidden_size': 7168, 'num_attention_heads': 128, 'num_key_value_heads': 128, 'intermediate_size': 18432,
     'vocab_size': 129280, 'tie_word_embeddings': False, 'q_lora_rank': 1536, 'kv_lora_rank': 512,
     'qk_nope_head_dim': 128, 'qk_rope_head_dim': 64, 'v_head_dim': 128, 'first_k_dense_replace': 3, 'num_experts': 256,
     'num_experts_per_tok': 8, 'n_shared_experts': 1, 'moe_intermediate_size': 2048, 'topk_method': 'noaux_tc',
     'published_total': '671B', 'published_active': '37B', 'published_active_excludes_input_embedding': True},
]


HELD_OUT_EVERY = 10  # every 10th usable document is held out


# The corpus is held in memory: at most this much of it, and no line longer than a document can be.
CORPUS_MAX_BYTES = 256 << 20


CORPUS_MAX_LINE_CHARS = 16 << 20


def load_corpus(path: str, min_len: int, shorten: str) -> list[str]:
    """The ``text`` of every JSON line of ``path`` (given as --corpus) at least ``min_len`` bytes
    long. Raises ScriptError (usage) naming the file, and the line for a line that is not a JSON
    object with a string ``text``; a device (/dev/zero), a FIFO, a file over CORPUS_MAX_BYTES or
    a line over CORPUS_MAX_LINE_CHARS is refused before it is read whole; fewer than
    2 x HELD_OUT_EVERY documents long enough is refused naming the options to ``shorten``."""
    option = f"--corpus {path}"
    if not os.path.exists(path):
        raise ScriptError(f"{option}: no such file; give --corpus PATH: the book's "
                          "data/training/corpus.jsonl (from its repository or its site), or any "
                          "JSONL file of {\"text\": ...} lines", EXIT_USAGE)
    if not os.path.isfile(path):
        raise ScriptError(f"{option}: is not a regular file", EXIT_USAGE)
    if os.path.getsize(path) > CORPUS_MAX_BYTES:
        raise ScriptError(f"{option}: larger than {CORPUS_MAX_BYTES >> 20} MiB, more than this "
                          "script holds in memory; give a smaller corpus", EXIT_USAGE)
    texts, lines = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(iter(lambda: f.readline(CORPUS_MAX_LINE_CHARS + 1), ""), 1):
                if len(line) > CORPUS_MAX_LINE_CHARS:
                    raise ScriptError(f"{path}:{line_no}: a line of more than {CORPUS_MAX_LINE_CHARS >> 20} M "
                                      "characters; expected one JSON object per line", EXIT_USAGE)
                if not line.strip():
                    continue
                lines += 1
                try:
                    doc = json.loads(line)
                except (ValueError, RecursionError) as err:
                    raise ScriptError(f"{path}:{line_no}: not JSON ({getattr(err, 'msg', err)}); expected one JSON "
                                      "object per line", EXIT_USAGE) from None
                if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                    raise ScriptError(f"{path}:{line_no}: not a JSON object with a string "
                                      "\"text\" field", EXIT_USAGE)
                if len(doc["text"].encode("utf-8")) >= min_len:
                    texts.append(doc["text"])
    except UnicodeDecodeError as err:
        raise ScriptError(f"{option}: not UTF-8 text ({err.reason} at byte {err.start})",
                          EXIT_USAGE) from None
    except OSError as err:
        raise ScriptError(f"{option}: cannot read ({err.strerror})", EXIT_USAGE) from None
    if lines == 0:
        raise ScriptError(f"{option}: is empty (no JSON lines)", EXIT_USAGE)
    if len(texts) < 2 * HELD_OUT_EVERY:
        raise ScriptError(f"{option}: {len(texts)} documents of at least {min_len} bytes; need "
                          f"{2 * HELD_OUT_EVERY} (shorten {shorten} or give a larger corpus)", EXIT_USAGE)
    return texts
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
