#!/usr/bin/env python
"""model_calculator.py: parameters, FLOPs per token and KV-cache bytes of a decoder-only LLM,
from its Hugging Face ``config.json`` or from a row of the book's ``data/models/architectures.yml``.

Prints the parameters by component (embedding, output, attention, mlp, experts, shared experts,
router, norms), the total and the active parameters of one token, the training FLOPs per token
(6N plus the attention matmuls over a sequence of ``--context`` tokens) and those of one
generated token with ``--context`` tokens cached, and the KV cache per token and per sequence in
``--kv-dtype``. Covers MHA, MQA, GQA, MLA, mixtures of experts and sliding windows in the families
llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma2, olmo2, olmoe, deepseek_v2 and
deepseek_v3; any other is refused. Units: plain counts (1 B = 1e9), FLOP (1 GFLOP = 1e9), bytes
(1 GB = 1e9). Formulas and sources: book/en/models/architecture.md.

Plain ``python``; no torch, no GPU (the data file needs PyYAML, a config.json does not)::

    python model_calculator.py --list
    python model_calculator.py --model "Llama 3.1 8B" --context 8192
    python model_calculator.py --model all --json models.json
    python model_calculator.py --config path/to/config.json --kv-dtype fp8

Example output (4 of the 20 lines of ``--model "Mixtral 8x7B" --context 32768``)::

    # model_calculator.py: Mixtral 8x7B (mixtral); 1 B = 1e9, 1 GB = 1e9 bytes
      total                                46.70
      training, T = 32768                 128.03
      bytes per token                     131072

Exit status: 0 ok, 2 usage (an unknown model, an unreadable or inconsistent ``config.json``, an
unusable output path), in one line naming the option, file or key.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import traceback

PROG = "model_calculator.py"

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "olmo2",
            "olmoe", "deepseek_v2", "deepseek_v3")
QK_NORM = {"qwen3": "head", "qwen3_moe": "head", "olmo2": "full", "olmoe": "full"}
NORMS_PER_LAYER = {"gemma2": 4}  # every other family: one before attention, one before the MLP
KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
MAX_SIZE = 2**31 - 1  # config.json sizes are int32 in every framework that reads them
# Fields of a data-file row beside the config.json ones: (key, the type it must have, in words).
ROW_LABELS = (("kind", str, "a string"), ("attention", str, "a string"),
              ("published_total", str, "a count as printed, such as '6.74B'"),
              ("published_active", str, "a count as printed, such as '6.74B', or '—'"),
              ("published_active_excludes_input_embedding", bool, "true or false"))


# ---------------------------------------------------------------------------------------------
# Reading a configuration

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


def _bool(config: dict, key: str, where: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"{where}: {key} must be true or false, got {_shown(value)}")
    return value


def from_config(config: dict, name: str | None = None, where: str = "config") -> dict:
    """The calculator's view of a model: ``config`` (a parsed Hugging Face config.json, or a row
    of data/models/architectures.yml) with the fields that set parameters, FLOPs and KV cache,
    each family's spelling mapped onto one (num_local_experts and n_routed_experts become
    num_experts, ...). Raises ValueError naming ``where`` and the key for an unknown
    ``model_type``, a missing or non-integer size, or sizes that do not fit together."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    if "text_config" in config and "num_hidden_layers" not in config:
        config = config["text_config"]  # a multimodal wrapper: the language model's part
        if not isinstance(config, dict):
            raise ValueError(f"{where}: text_config is not a JSON object")
    family = config.get("model_type")
    if not isinstance(family, str) or family not in FAMILIES:
        raise ValueError(f"{where}: model_type {_shown(family)} is not one the calculator knows "
                         f"({', '.join(FAMILIES)})")
    label = name or config.get("name") or config.get("_name_or_path")
    arch = {"name": label if isinstance(label, str) and label.strip() else family,
            "model_type": family}
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"):
        value = _int(config, key, where)
        if value is None:
            raise ValueError(f"{where}: {key} is missing")
        arch[key] = value
    heads = arch["num_attention_heads"]
    arch["num_key_value_heads"] = _int(config, "num_key_value_heads", where, heads)
    arch["head_dim"] = _int(config, "head_dim", where, arch["hidden_size"] // heads)
    if config.get("head_dim") is None and arch["hidden_size"] % heads:
        raise ValueError(f"{where}: hidden_size {arch['hidden_size']} is not a multiple of "
                         f"num_attention_heads {heads} and there is no head_dim")
    if heads % arch["num_key_value_heads"]:
        raise ValueError(f"{where}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {arch['num_key_value_heads']}")
    default_tied = family == "gemma2"  # Gemma 2 ties them by default; the others do not
    arch["tie_word_embeddings"] = _bool(config, "tie_word_embeddings", where, default_tied)
    # Biases: Qwen2 hard-codes them on q, k, v; others may set attention_bias (q, k, v and o).
    arch["qkv_bias"] = _bool(config, "qkv_bias", where, family == "qwen2")
    arch["attention_bias"] = _bool(config, "attention_bias", where, False) and family != "qwen2"
    # Llama's mlp_bias: biases on the dense MLP's gate, up and down projections.
    arch["mlp_bias"] = _bool(config, "mlp_bias", where, False)
    arch["qk_norm"] = QK_NORM.get(family)
    arch["norms_per_layer"] = NORMS_PER_LAYER.get(family, 2)

    _moe_fields(config, arch, where)
    dense_layers = arch["first_k_dense_replace"]
    arch["intermediate_size"] = _int(config, "intermediate_size", where)
    if dense_layers and arch["intermediate_size"] is None:
        raise ValueError(f"{where}: intermediate_size is missing")

    _mla_fields(config, arch, family, where)
    _window_fields(config, arch, family, where)
    return arch


def _moe_fields(config: dict, arch: dict, where: str) -> None:
    """Mixture of experts: the number of experts (whichever the family calls it), the experts per
    token, their width, the shared experts and the dense layers before the first MoE layer, into
    ``arch``; zeros for a dense model. Raises ValueError for what the calculator cannot count."""
    spelling = next((k for k in ("num_experts", "num_local_experts", "n_routed_experts")
                     if config.get(k)), "num_experts")
    arch["num_experts"] = _int(config, spelling, where) if config.get(spelling) else 0
    if arch["num_experts"]:
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
    else:
        arch.update(num_experts_per_tok=0, moe_intermediate_size=0, n_shared_experts=0,
                    first_k_dense_replace=arch["num_hidden_layers"], router_bias=False)


def _mla_fields(config: dict, arch: dict, family: str, where: str) -> None:
    """Multi-head latent attention (DeepSeek-V2/V3): its ranks and head sizes, into ``arch``."""
    arch["mla"] = family.startswith("deepseek")
    if arch["mla"]:
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            arch[key] = _int(config, key, where)
            if arch[key] is None:
                raise ValueError(f"{where}: {key} is missing (multi-head latent attention)")
        arch["q_lora_rank"] = _int(config, "q_lora_rank", where)  # None: a full q projection


def _window_fields(config: dict, arch: dict, family: str, where: str) -> None:
    """Sliding windows: which layers keep only the last ``sliding_window`` tokens, into ``arch``
    (``sliding_window``, ``sliding_layers``)."""
    use_window = _bool(config, "use_sliding_window", where, None)
    if family == "qwen2" and use_window:
        raise ValueError(f"{where}: use_sliding_window with max_window_layers is not supported")
    arch["sliding_window"] = None if use_window is False else _int(config, "sliding_window", where)
    arch["sliding_layers"] = 0
    if arch["sliding_window"]:
        layers = arch["num_hidden_layers"]
        types = config.get("layer_types")
        if types is not None and (not isinstance(types, list) or len(types) != layers
                                  or not all(isinstance(t, str) for t in types)):
            raise ValueError(f"{where}: layer_types must list one string per layer "
                             f"({layers}), got {_shown(types)}")
        if types is not None:
            arch["sliding_layers"] = sum(t == "sliding_attention" for t in types)
        else:
            pattern = _int(config, "sliding_window_pattern", where, 2 if family == "gemma2" else None)
            # Pattern p: every p-th layer (1-based) is global, the others slide (Gemma 2 and 3).
            arch["sliding_layers"] = layers - layers // pattern if pattern else layers


def load_architectures(path: str, option: str = "--data") -> list[dict]:
    """The models of the book's data file ``path`` (data/models/architectures.yml): see
    ``parse_architectures``. The file is read bounded (``read_input``: a regular file or a pipe,
    at most 64 MiB, never /dev/zero or a FIFO without a writer). Raises ScriptError (usage)
    naming ``option`` and the file when it cannot be read, ValueError naming the file, the row
    and the field for a malformed one."""
    try:
        data = read_input(path, option)
    except ScriptError as err:
        why = str(err).removeprefix(f"{option} {path}: ")
        raise ScriptError(f"{option} {path}: cannot read it ({why})", EXIT_USAGE) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_architectures(text, path)


def parse_architectures(text: str, where: str = "architectures.yml") -> list[dict]:
    """The models of the data file's ``text``, each through ``from_config`` with its label
    and published counts kept (``kind``, ``attention``, ``published_total``,
    ``published_active``, ``source``). The text is YAML (needs PyYAML) or the same data as
    JSON (what the book's calculator pages give the script). Raises ValueError naming ``where``,
    the row and the field for a malformed file (a name that is not a string, a missing or
    non-integer size, a published count that is a number, inf or nan, ...)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a data file") from None
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # JSON, but int() of a 5,000-digit number
            raise ValueError(f"{where}: not valid JSON ({str(err).splitlines()[0]})") from None
        try:
            import yaml
        except ImportError:
            raise ValueError("reading the data file needs PyYAML (pip install pyyaml); or give "
                             "--config") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None
        except RecursionError:
            raise ValueError(f"{where}: nested too deeply to be a data file") from None
        except ValueError as err:  # int() of a 5,000-digit number
            raise ValueError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{where}: no 'rows' list")
    models = []
    for number, row in enumerate(rows, 1):
        label = f"{where}: row {number}"
        if not isinstance(row, dict) or row.get("name") is None:
            raise ValueError(f"{label}: needs a name")
        name = row["name"]
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{label}: name must be a non-empty string, got {_shown(name)}")
        label = f"{label} ({name})"
        for key, kind, words in ROW_LABELS:
            if key in row and not isinstance(row[key], kind):
                raise ValueError(f"{label}: {key} must be {words}, got {_shown(row[key])}")
        arch = from_config(row, name, label)
        arch.update({k: row[k] for k in ("kind", "attention", "published_total",
                                          "published_active",
                                          "published_active_excludes_input_embedding",
                                          "source") if k in row})
        models.append(arch)
    return models


# ---------------------------------------------------------------------------------------------
# Counting

def _layer_attention(a: dict) -> tuple[int, int]:
    """(weights and biases, norm weights) of one layer's attention block."""
    h, heads, kv, d = a["hidden_size"], a["num_attention_heads"], a["num_key_value_heads"], a["head_dim"]
    if a["mla"]:
        qk = a["qk_nope_head_dim"] + a["qk_rope_head_dim"]
        if a["q_lora_rank"]:
            q = h * a["q_lora_rank"] + a["q_lora_rank"] * heads * qk
            norms = a["q_lora_rank"]  # q_a_layernorm
        else:
            q, norms = h * heads * qk, 0
        kv_down = h * (a["kv_lora_rank"] + a["qk_rope_head_dim"])
        kv_up = a["kv_lora_rank"] * heads * (a["qk_nope_head_dim"] + a["v_head_dim"])
        out = heads * a["v_head_dim"] * h
        return q + kv_down + kv_up + out, norms + a["kv_lora_rank"]  # + kv_a_layernorm
    weights = h * heads * d + 2 * h * kv * d + heads * d * h
    if a["qkv_bias"] or a["attention_bias"]:
        weights += heads * d + 2 * kv * d + (h if a["attention_bias"] else 0)
    norms = {"head": 2 * d, "full": heads * d + kv * d, None: 0}[a["qk_norm"]]
    return weights, norms


def _attention_widths(a: dict) -> tuple[int, int]:
    """(query/key width, value width) summed over the heads: the sizes of the two attention
    matmuls of one token."""
    heads = a["num_attention_heads"]
    if a["mla"]:
        return heads * (a["qk_nope_head_dim"] + a["qk_rope_head_dim"]), heads * a["v_head_dim"]
    return heads * a["head_dim"], heads * a["head_dim"]


def count_params(a: dict) -> dict:
    """Parameters of model ``a`` (from ``from_config``) by component, as ints: embedding,
    output, attention, mlp, experts, shared_experts, router, norms, total, active,
    active_without_input_embedding and matmul_active (book/en/models/architecture.md)."""
    h, layers = a["hidden_size"], a["num_hidden_layers"]
    attention, qk_norms = _layer_attention(a)
    dense = a["first_k_dense_replace"]
    moe = layers - dense
    mlp = dense * 3 * h * (a["intermediate_size"] or 0)
    mlp_biases = dense * (2 * (a["intermediate_size"] or 0) + h) if a.get("mlp_bias") else 0
    mlp += mlp_biases
    one_expert = 3 * h * a["moe_intermediate_size"]
    experts = moe * a["num_experts"] * one_expert
    shared = moe * a["n_shared_experts"] * one_expert
    router = moe * (h * a["num_experts"] + (a["num_experts"] if a["router_bias"] else 0))
    embedding = a["vocab_size"] * h
    output = 0 if a["tie_word_embeddings"] else embedding
    norms = layers * (a["norms_per_layer"] * h + qk_norms) + h  # + the final norm
    counts = {"embedding": embedding, "output": output, "attention": layers * attention,
              "mlp": mlp, "experts": experts, "shared_experts": shared, "router": router,
              "norms": norms}
    counts["total"] = sum(counts.values())
    unused = moe * (a["num_experts"] - a["num_experts_per_tok"]) * one_expert
    counts["active"] = counts["total"] - unused
    counts["active_without_input_embedding"] = counts["active"] - embedding
    biases = 0
    if a["qkv_bias"] or a["attention_bias"]:
        d, heads, kv = a["head_dim"], a["num_attention_heads"], a["num_key_value_heads"]
        biases = layers * (heads * d + 2 * kv * d + (h if a["attention_bias"] else 0))
    counts["matmul_active"] = (counts["attention"] - biases + mlp - mlp_biases + experts - unused + shared
                               + moe * h * a["num_experts"] + embedding)  # output projection
    return counts


def _context_per_layer(a: dict, context: int) -> list[int]:
    """The tokens each layer attends to (or caches) at ``context``: the sliding layers at most
    their window."""
    sliding = a["sliding_layers"]
    window = min(context, a["sliding_window"] or context)
    return [window] * sliding + [context] * (a["num_hidden_layers"] - sliding)


def flops_per_token(a: dict, context: int) -> dict:
    """FLOPs per token of model ``a`` for a sequence (or cache) of ``context`` tokens:
    ``training`` (6N plus the attention matmuls forward and backward over the full T x T
    matrix), ``training_6n`` (6N alone), ``forward`` (one generated token attending to
    ``context`` cached tokens), ``matmul_params`` (N). Formulas: book/en/models/architecture.md."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    n = count_params(a)["matmul_active"]
    qk, v = _attention_widths(a)
    attended = sum(_context_per_layer(a, context))
    return {"matmul_params": n, "training_6n": 6 * n,
            "training": 6 * n + 6 * (qk + v) * attended,
            "forward": 2 * n + 2 * (qk + v) * attended}


def kv_bytes_per_token(a: dict, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache one token adds across all layers (before any window is full), with
    ``dtype_bytes`` bytes per value. MHA/MQA/GQA: 2 * kv_heads * head_dim values per layer;
    MLA: kv_lora_rank + qk_rope_head_dim."""
    if a["mla"]:
        per_layer = a["kv_lora_rank"] + a["qk_rope_head_dim"]
    else:
        per_layer = 2 * a["num_key_value_heads"] * a["head_dim"]
    return per_layer * a["num_hidden_layers"] * dtype_bytes


def kv_bytes(a: dict, context: int, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache of one sequence of ``context`` tokens (sliding-window layers keep at
    most their window)."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    per_layer_token = kv_bytes_per_token(a, dtype_bytes) // a["num_hidden_layers"]
    return per_layer_token * sum(_context_per_layer(a, context))


def describe(a: dict, context: int, kv_dtype: str) -> dict:
    """Everything the CLI prints about model ``a``, as a JSON-ready dict."""
    dtype_bytes = KV_DTYPES[kv_dtype]
    doc = {"name": a["name"], "model_type": a["model_type"], "params": count_params(a),
           "flops_per_token": flops_per_token(a, context),
           "kv_cache": {"dtype": kv_dtype, "bytes_per_token": kv_bytes_per_token(a, dtype_bytes),
                        "context": context, "bytes_per_sequence": kv_bytes(a, context, dtype_bytes)}}
    for key in ("published_total", "published_active"):
        if key in a:
            doc[key] = a[key]
    return doc


# ---------------------------------------------------------------------------------------------
# Reading the inputs

def default_data_path() -> str:
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                         os.pardir, "data", "models", "architectures.yml"))


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def read_config(path: str) -> dict:
    """The parsed config.json at ``path``; ScriptError (usage) naming the file otherwise."""
    return parse_json(read_input(path, "--config"), "--config", path)


def select_models(args: argparse.Namespace) -> list[dict]:
    if args.config:
        config = read_config(args.config)
        try:
            return [from_config(config, where=f"--config {args.config}")]
        except ValueError as err:
            raise ScriptError(str(err), EXIT_USAGE) from None
    path = args.data or default_data_path()
    option = "--data" if args.data else "the data file (give --data PATH or --config)"
    try:
        models = load_architectures(path, option)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    if args.list or _key(args.model) == "all":
        return models
    wanted = [m for m in models if _key(m["name"]) == _key(args.model)]
    if not wanted:
        raise ScriptError(f"--model {args.model!r}: not in {path} (see --list)", EXIT_USAGE)
    return wanted


# ---------------------------------------------------------------------------------------------
# The report

def _b(count: int) -> str:
    return f"{count / 1e9:.2f}"


def report_one(doc: dict) -> str:
    p, f, kv = doc["params"], doc["flops_per_token"], doc["kv_cache"]
    lines = [f"# {PROG}: {doc['name']} ({doc['model_type']}); 1 B = 1e9, 1 GB = 1e9 bytes",
             f"{'parameters':<34}{'B':>10}"]
    for key in ("embedding", "output", "attention", "mlp", "experts", "shared_experts", "router",
                "norms", "total", "active", "active_without_input_embedding", "matmul_active"):
        if p[key] or key in ("total", "active"):
            lines.append(f"  {key.replace('_', ' '):<32}{_b(p[key]):>10}")
    for key in ("published_total", "published_active"):
        if key in doc:
            lines.append(f"  {key.replace('_', ' '):<32}{doc[key]:>10}")
    lines += [f"{'FLOPs per token':<34}{'GFLOP':>10}",
              f"  {'training, T = ' + str(kv['context']):<32}{f['training'] / 1e9:>10.2f}",
              f"  {'training, 6N only':<32}{f['training_6n'] / 1e9:>10.2f}",
              f"  {'forward at context ' + str(kv['context']):<32}{f['forward'] / 1e9:>10.2f}",
              f"KV cache ({kv['dtype']})",
              f"  {'bytes per token':<32}{kv['bytes_per_token']:>10}",
              f"  {'GB per sequence of ' + str(kv['context']):<32}{kv['bytes_per_sequence'] / 1e9:>10.3f}"]
    return "\n".join(lines)


def report_table(docs: list[dict], context: int, kv_dtype: str) -> str:
    lines = [f"# {PROG}: {len(docs)} models; 1 B = 1e9 parameters; training FLOPs at T = {context}; "
             f"KV cache in {kv_dtype}, 1 GB = 1e9 bytes",
             f"{'model':<16}{'total B':>9}{'published':>10}{'active B':>10}{'published':>10}"
             f"{'train GFLOP/tok':>17}{'KV B/token':>12}{'KV GB/seq':>11}"]
    for d in docs:
        p = d["params"]
        lines.append(f"{d['name']:<16}{_b(p['total']):>9}{str(d.get('published_total', '')):>10}"
                     f"{_b(p['active']):>10}{str(d.get('published_active', '')):>10}"
                     f"{d['flops_per_token']['training'] / 1e9:>17.1f}"
                     f"{d['kv_cache']['bytes_per_token']:>12}"
                     f"{d['kv_cache']['bytes_per_sequence'] / 1e9:>11.3f}")
    return "\n".join(lines)


def json_report(docs: list[dict], args: argparse.Namespace) -> dict:
    """The --json document: the inputs and ``describe``'s dict per model."""
    return {"tool": "model_calculator", "schema_version": 1,
            "units": {"params": "count", "flops": "FLOP per token", "kv_cache": "bytes"},
            "inputs": {"context": args.context, "kv_dtype": args.kv_dtype,
                       "config": args.config, "model": args.model},
            "models": docs}


# ---------------------------------------------------------------------------------------------
# Command line

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Parameters, FLOPs per token and KV-cache bytes of a decoder-only "
        "LLM from its config.json or the book's data file (decimal units: 1 B = 1e9).")
    parser.add_argument("--model", type=nonempty, metavar="NAME",
                        help='a model of the data file (see --list; case, spaces and dashes '
                        'do not matter), or "all"')
    parser.add_argument("--config", type=nonempty, metavar="PATH",
                        help="a Hugging Face config.json instead of the data file")
    parser.add_argument("--data", type=nonempty, metavar="PATH",
                        help="the data file (default: data/models/architectures.yml of the book)")
    parser.add_argument("--list", action="store_true", help="list the data file's models and exit")
    parser.add_argument("--context", type=number(int, 1, 10**8), default=4096, metavar="TOKENS",
                        help="sequence length for training FLOPs, cache length for the forward "
                        "FLOPs and the KV cache per sequence (default 4096)")
    parser.add_argument("--kv-dtype", choices=sorted(KV_DTYPES), default="bf16",
                        help="KV-cache element type (default bf16)")
    parser.add_argument("--json", type=nonempty, metavar="PATH", help="write the results as JSON ('-': print)")
    parser.add_argument("--debug", action="store_true", help="show the traceback of a failure")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    chosen = [opt for opt, on in (("--model", args.model), ("--config", args.config),
                                  ("--list", args.list)) if on]
    if len(chosen) != 1:
        parser.error("give one of --model NAME, --model all, --config PATH or --list"
                     + (f" (got {' and '.join(chosen)})" if chosen else ""))
    if args.config and args.data:
        parser.error("--data is for --model and --list; --config reads its own file")
    if args.json and args.json != "-":
        check_output(args.json, "--json", [p for p in (args.config, args.data) if p])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = select_models(args)
    if args.list:
        for m in models:
            print(f"{m['name']:<16} {m['model_type']:<12} {m.get('kind', ''):<6} {m.get('attention', '')}")
        return 0
    docs = [describe(m, args.context, args.kv_dtype) for m in models]
    print(report_one(docs[0]) if len(docs) == 1 else report_table(docs, args.context, args.kv_dtype))
    if args.json:
        text = json.dumps(json_report(docs, args), indent=2)
        if args.json == "-":
            print(text)
        else:
            write_atomic(args.json, text + "\n")
    return 0


# --- script contract (CONTRIBUTING.md, "Script contract"): the part this script uses, ---
# --- generated from tools/script_contract.py by `python tools/script_contract.py sync`. ---

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
            raise argparse.ArgumentTypeError(f"{shown!r} is not {'an integer' if kind is int else 'a number'}")
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


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED, anything
    else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the traceback as well. A reader
    that closed stdout (``| head -1``) ends the run quietly, with the status it had (0)."""
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
        if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):
            status, message = EXIT_INTERRUPTED, "interrupted"
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
