#!/usr/bin/env python
"""kv_cache_calculator.py: how much KV cache a served LLM needs, and how many sequences fit on a GPU.

From a Hugging Face ``config.json`` (``--config``) or a row of the book's
``data/models/architectures.yml`` (``--model``), for MHA, MQA, GQA, MLA and sliding-window
layers: the KV bytes per token (all layers, in ``--kv-dtype``, per GPU when ``--gpus`` GPUs split
the heads with tensor parallelism) and per sequence of ``--context`` tokens, then how many tokens
and sequences fit in one GPU's memory (``--device``'s as nvidia-smi reports it, or
``--gpu-memory 80GiB``) times ``--memory-utilization``, less the weights (``--params`` x
``--weight-dtype``) and ``--overhead-gb``. Units: bytes and decimal GB (1 GB = 1e9 bytes).
Formulas, sources and what it leaves out: book/en/inference/kv-cache.md.

Plain ``python``; no torch, no GPU; ``--model`` reads the data file with PyYAML::

    python kv_cache_calculator.py --list
    python kv_cache_calculator.py --model "Llama 3.1 70B" --gpus 4 --context 8192
    python kv_cache_calculator.py --model all --kv-dtype fp8 --json kv.json
    python kv_cache_calculator.py --config config.json --params 8.03B --gpu-memory 24GiB

Example output of the second command (5 of its 12 lines)::

    # kv_cache_calculator.py: Llama 3.1 70B: 80 layers, 8 KV heads x 128, 2 per GPU
    # 4 GPU(s) of 85.52 GB each (h100-sxm: 81,559 MiB by nvidia-smi, sold as 80 GB)
    # 0.9 usable; weights bf16, KV cache bf16; 1 GB = 1e9 bytes
      tokens in the cache                            508,651
      sequences of 8192 tokens at once                    62

Exit status: 0 ok, 2 usage (an unknown model, a bad config.json, ``--gpus`` that cannot split
the heads), in one line naming the option, file or key.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import shlex
import sys
import tempfile
import traceback

PROG = "kv_cache_calculator.py"

ELEMENT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# Families whose configs mean "every layer slides" when they give a window and nothing else.
ALL_LAYERS_SLIDE = ("mistral", "mixtral")
DEFAULT_PATTERN = {"gemma2": 2}
MAX_SIZE = 2**31 - 1  # config.json sizes are int32 in every framework that reads them

# What the driver reports as the GPU's memory (nvidia-smi's memory.total, in MiB), per device:
# a vendor's "80 GB" is not 80e9 bytes (an H100 SXM has 81,559 MiB = 85.52e9 bytes). Each row
# names its row of the book's accelerator catalogue, data/compute/accelerators.yml, and copies
# its vendor figure `mem_GB`; tests/inference/test_kv_cache_calculator.py fails when they differ.
# `source` is where the MiB figure was read: nvidia-smi output of that GPU.
DEVICES = {
    "a100-80gb": {"row": "NVIDIA A100 SXM 80GB", "mem_GB": 80, "total_MiB": 81920,
                  "source": "https://github.com/modal-labs/modal-client/pull/2797"},
    "h100-sxm": {"row": "NVIDIA H100 SXM", "mem_GB": 80, "total_MiB": 81559,
                 "source": "https://github.com/NVIDIA/nccl/issues/1264"},
    "l40s": {"row": "NVIDIA L40S", "mem_GB": 48, "total_MiB": 46068,
             "source": "https://github.com/modal-labs/modal-client/pull/2797"},
}
DEFAULT_DEVICE = "h100-sxm"
MEMORY_UNITS = {"b": 1, "mb": 1e6, "mib": 2**20, "gb": 1e9, "gib": 2**30, "tb": 1e12,
                "tib": 2**40}
MAX_GPU_MEMORY = 1e14  # bytes: 100 TB, far above any device


# ---------------------------------------------------------------------------------------------
# The model's cache shape, the cache it needs and what fits

def _shown(value) -> str:
    """``value`` for an error line, cut short when long (a hostile file may hold megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _positive_int(config: dict, key: str, where: str, default=None) -> int | None:
    value = config.get(key)
    if value is None:  # absent, or null: transformers then uses the default too
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
        raise ValueError(f"{where}: {key} must be an integer >= 1"
                         + (f" and <= {MAX_SIZE}" if isinstance(value, int) and value > MAX_SIZE else "")
                         + f", got {_shown(value)}")
    return value


def cache_shape(config: dict, name: str | None = None, where: str = "config") -> dict:
    """The fields of ``config`` (a parsed config.json, or a row of the data file) that set the
    KV cache: ``name``, ``layers``, ``kv_heads``, ``head_dim``, ``mla`` (bool),
    ``values_per_layer`` (cached values per token and layer), ``sliding_window`` (tokens or
    None) and ``sliding_layers`` (how many layers use it). Raises ValueError naming ``where``
    and the key for a missing or non-integer size, heads that do not fit together, or a window
    whose layers the config does not say."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: not a JSON object")
    if "text_config" in config and "num_hidden_layers" not in config:
        config = config["text_config"]  # a multimodal wrapper: the language model's part
        if not isinstance(config, dict):
            raise ValueError(f"{where}: text_config is not a JSON object")
    family = config.get("model_type")
    label = name or config.get("name") or config.get("_name_or_path")
    shape = {"name": label if isinstance(label, str) and label.strip() else str(family)}
    if config.get("use_sliding_window") is not None and not isinstance(config["use_sliding_window"], bool):
        raise ValueError(f"{where}: use_sliding_window must be true or false, got "
                         f"{_shown(config['use_sliding_window'])}")
    for key in ("num_hidden_layers", "num_attention_heads"):
        if _positive_int(config, key, where) is None:
            raise ValueError(f"{where}: {key} is missing")
    shape["layers"] = config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    shape["mla"] = "kv_lora_rank" in config
    if shape["mla"]:
        rank = _positive_int(config, "kv_lora_rank", where)
        rope = _positive_int(config, "qk_rope_head_dim", where)
        if rope is None:
            raise ValueError(f"{where}: qk_rope_head_dim is missing (multi-head latent attention)")
        shape.update(kv_heads=None, head_dim=None, values_per_layer=rank + rope)
    else:
        kv = _positive_int(config, "num_key_value_heads", where, heads)
        if heads % kv:
            raise ValueError(f"{where}: num_attention_heads {heads} is not a multiple of "
                             f"num_key_value_heads {kv}")
        head_dim = _positive_int(config, "head_dim", where)
        if head_dim is None:
            hidden = _positive_int(config, "hidden_size", where)
            if hidden is None:
                raise ValueError(f"{where}: hidden_size is missing (and there is no head_dim)")
            if hidden % heads:
                raise ValueError(f"{where}: hidden_size {hidden} is not a multiple of "
                                 f"num_attention_heads {heads} and there is no head_dim")
            head_dim = hidden // heads
        shape.update(kv_heads=kv, head_dim=head_dim, values_per_layer=2 * kv * head_dim)

    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    elif config.get("use_sliding_window") and config.get("max_window_layers") is not None:
        raise ValueError(f"{where}: use_sliding_window with max_window_layers is not supported")
    shape["sliding_window"] = _positive_int({"sliding_window": window}, "sliding_window", where)
    shape["sliding_layers"] = 0
    if shape["sliding_window"]:
        layers = shape["layers"]
        types = config.get("layer_types")
        if isinstance(types, list):
            if len(types) != layers:
                raise ValueError(f"{where}: layer_types lists {len(types)} layers, "
                                 f"num_hidden_layers is {layers}")
            shape["sliding_layers"] = sum(t == "sliding_attention" for t in types)
        else:
            pattern = _positive_int(config, "sliding_window_pattern", where,
                                    DEFAULT_PATTERN.get(family))
            if pattern:  # every pattern-th layer (1-based) is global, the others slide
                shape["sliding_layers"] = layers - layers // pattern
            elif family in ALL_LAYERS_SLIDE:
                shape["sliding_layers"] = layers
            else:
                raise ValueError(f"{where}: sliding_window {window} without layer_types or "
                                 f"sliding_window_pattern: which layers slide is not known "
                                 f"for model_type {family!r}")
    return shape


def tokens_per_layer(shape: dict, context: int) -> list[int]:
    """Tokens each layer caches for a sequence of ``context`` tokens."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    window = min(context, shape["sliding_window"] or context)
    sliding = shape["sliding_layers"]
    return [window] * sliding + [context] * (shape["layers"] - sliding)


def kv_heads_per_gpu(shape: dict, gpus: int) -> int | None:
    """Key/value heads each of ``gpus`` tensor-parallel GPUs keeps (None for MLA: the latent is
    not split). Raises ValueError when ``gpus`` neither divides the heads nor is a multiple of
    them."""
    kv = shape["kv_heads"]
    if kv is None:
        return None
    if kv % gpus == 0:
        return kv // gpus
    if gpus % kv == 0:
        return 1  # each head replicated on gpus // kv GPUs
    raise ValueError(f"--gpus {gpus} neither divides the {kv} key/value heads nor is a multiple "
                     "of them")


def kv_bytes_per_token(shape: dict, element_bytes: float, gpus: int = 1) -> float:
    """KV-cache bytes one token adds on one GPU of ``gpus`` (all layers, before any window is
    full): values_per_layer x layers x element_bytes, the heads split over the GPUs."""
    per_layer = shape["values_per_layer"]
    if not shape["mla"]:
        per_layer = 2 * kv_heads_per_gpu(shape, gpus) * shape["head_dim"]
    return per_layer * shape["layers"] * element_bytes


def kv_bytes_per_sequence(shape: dict, context: int, element_bytes: float, gpus: int = 1) -> float:
    """KV-cache bytes of one sequence of ``context`` tokens on one GPU of ``gpus``."""
    per_layer_token = kv_bytes_per_token(shape, element_bytes, gpus) / shape["layers"]
    return per_layer_token * sum(tokens_per_layer(shape, context))


def capacity(shape: dict, *, params: float, context: int, kv_dtype: str, weight_dtype: str,
             gpu_memory_gb: float | None = None, gpus: int = 1, memory_utilization: float = 0.9,
             overhead_gb: float = 0.0, gpu_memory_bytes: float | None = None) -> dict:
    """Memory budget of one GPU of a tensor-parallel group of ``gpus`` serving the model, whose
    memory is ``gpu_memory_bytes`` bytes, or ``gpu_memory_gb`` decimal GB (1e9 bytes; one of the
    two), of which the server uses ``memory_utilization``: a dict
    of bytes (``usable``, ``weights``, ``overhead``, ``kv_free``, ``kv_per_token``,
    ``kv_per_sequence``, whole-model ``kv_per_token_model``) and counts (``tokens``: tokens the
    free memory caches, each layer holding every token; ``sequences``: sequences of ``context``
    tokens decoded at once). ``kv_free`` is negative and the counts 0 when the weights and
    overhead do not fit. Raises ValueError for sizes out of range."""
    if not params > 0:
        raise ValueError(f"params must be > 0, got {params}")
    if (gpu_memory_gb is None) == (gpu_memory_bytes is None):
        raise ValueError("give gpu_memory_bytes or gpu_memory_gb, one of them")
    if gpu_memory_bytes is None:
        gpu_memory_bytes = gpu_memory_gb * 1e9
    kv_b, w_b = ELEMENT_BYTES[kv_dtype], ELEMENT_BYTES[weight_dtype]
    usable = gpu_memory_bytes * memory_utilization
    weights = params * w_b / gpus
    overhead = overhead_gb * 1e9
    free = usable - weights - overhead
    per_token = kv_bytes_per_token(shape, kv_b, gpus)
    per_sequence = kv_bytes_per_sequence(shape, context, kv_b, gpus)
    return {"usable": usable, "weights": weights, "overhead": overhead, "kv_free": free,
            "kv_per_token_model": kv_bytes_per_token(shape, kv_b, 1),
            "kv_per_token": per_token, "kv_per_sequence": per_sequence,
            "tokens": max(0, math.floor(free / per_token)),
            "sequences": max(0, math.floor(free / per_sequence))}


# ---------------------------------------------------------------------------------------------
# The GPU's memory

def parse_memory(text: str) -> float:
    """A GPU's memory as given to ``--gpu-memory``: a number and a unit, ``80GiB`` (2^30 bytes),
    ``85.5GB`` (1e9 bytes), ``81559MiB``, ``B``, ``MB``, ``TB``, ``TiB`` (any case, a space
    allowed); a bare number is GB. Returns bytes; raises ValueError for anything else (an
    ambiguous ``80G`` included), a non-finite size, 0 or less, or more than 100 TB."""
    shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
    match = re.fullmatch(r"\s*([-+]?[0-9.]+(?:[eE][+-]?[0-9]+)?|[-+]?(?:infinity|inf|nan))"
                         r"\s*([A-Za-z]*)\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"{shown!r} is not a memory size (give e.g. 80GiB, 85.5GB or 81559MiB)")
    try:
        value = float(match.group(1))
    except ValueError:
        raise ValueError(f"{shown!r} is not a memory size (give e.g. 80GiB, 85.5GB or 81559MiB)") from None
    unit = match.group(2).lower() or "gb"
    if unit not in MEMORY_UNITS:
        raise ValueError(f"{shown!r}: unknown unit {match.group(2)!r}; say GB (1e9 bytes) or GiB "
                         "(2^30 bytes), or MB, MiB, TB, TiB, B")
    if math.isnan(value) or "inf" in match.group(1).lower():
        raise ValueError(f"{shown!r} is not a finite size")
    size = value * MEMORY_UNITS[unit]  # inf for a literal beyond a float's range: refused below
    if not size > 0:
        raise ValueError(f"{shown} must be more than 0 bytes")
    if size > MAX_GPU_MEMORY:
        raise ValueError(f"{shown} must be at most 100 TB (1e14 bytes)")
    return size


def argparse_memory(text: str) -> tuple[float, str]:
    """``--gpu-memory``'s argparse type: (bytes, the text as given)."""
    try:
        return parse_memory(text), text
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def gpu_memory(args: argparse.Namespace) -> tuple[float, str]:
    """The bytes of one GPU's memory from ``--gpu-memory`` or ``--device`` (default
    DEFAULT_DEVICE), and where the figure comes from, in words."""
    if args.gpu_memory is not None:
        return args.gpu_memory[0], f"--gpu-memory {args.gpu_memory[1].strip()}"
    name = args.device or DEFAULT_DEVICE
    device = DEVICES[name]
    return (device["total_MiB"] * 2**20,
            f"{name}: {device['total_MiB']:,} MiB by nvidia-smi, sold as {device['mem_GB']} GB")


# ---------------------------------------------------------------------------------------------
# Reading the inputs

def parse_count(text: str) -> float:
    """A parameter count as printed: ``70.6B``, ``405b``, ``7.24e9``, ``850M``. Raises
    ValueError for anything else, for a non-finite value or for one not above 0."""
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not match:
        raise ValueError(f"not a parameter count: {text!r} (give e.g. 70.6B or 7.24e9)")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9,
                                      "t": 1e12}[match.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"not a parameter count: {text!r} (must be finite and > 0)")
    return value


def argparse_count(text: str) -> float:
    try:
        return parse_count(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def default_data_path() -> str:
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                         os.pardir, "data", "models", "architectures.yml"))


def load_models(path: str, option: str = "--data") -> list[dict]:
    """The data file's models: each ``cache_shape`` with its ``published_total`` (as printed)
    and ``params`` (that count as a number). The file is YAML (needs PyYAML) or the same data
    as JSON (what the book's calculator pages give the script), read bounded (``read_input``: a
    regular file or a pipe, at most 64 MiB, never /dev/zero or a FIFO without a writer). Raises
    ScriptError (usage) naming ``option`` and the file when it cannot be read, and ValueError
    naming the file, the row and the field for a malformed one (a name that is not a string, a
    missing size, a ``published_total`` of inf, ...)."""
    try:
        raw = read_input(path, option)
    except ScriptError as err:
        why = str(err).removeprefix(f"{option} {path}: ")
        raise ScriptError(f"{option} {path}: cannot read it ({why})", EXIT_USAGE) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a data file") from None
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # JSON, but int() of a 5,000-digit number
            raise ValueError(f"{path}: not valid JSON ({str(err).splitlines()[0]})") from None
        try:
            import yaml
        except ImportError:
            raise ValueError("reading the data file needs PyYAML (pip install pyyaml); or give "
                             "--config") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
        except RecursionError:
            raise ValueError(f"{path}: nested too deeply to be a data file") from None
        except ValueError as err:  # int() of a 5,000-digit number
            raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: no 'rows' list")
    models = []
    for number, row in enumerate(rows, 1):
        where = f"{path}: row {number}"
        if not isinstance(row, dict) or row.get("name") is None:
            raise ValueError(f"{where}: needs a name")
        name = row["name"]
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: name must be a non-empty string, got {_shown(name)}")
        where = f"{where} ({name})"
        shape = cache_shape(row, name, where)
        if "published_total" in row:
            total = row["published_total"]
            try:
                if isinstance(total, bool) or not isinstance(total, (str, int, float)):
                    raise ValueError(f"not a parameter count: {_shown(total)} (give e.g. 70.6B)")
                shape["params"] = parse_count(total)
            except ValueError as err:
                raise ValueError(f"{where}: published_total: {err}") from None
            shape["published_total"] = str(total)
        models.append(shape)
    return models


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def read_config(path: str) -> dict:
    """The parsed config.json at ``path``; ScriptError (usage) naming the file otherwise."""
    return parse_json(read_input(path, "--config"), "--config", path)


def select_models(args: argparse.Namespace) -> list[dict]:
    if args.config:
        config = read_config(args.config)
        try:
            return [cache_shape(config, where=f"--config {args.config}")]
        except ValueError as err:
            raise ScriptError(str(err), EXIT_USAGE) from None
    path = args.data or default_data_path()
    option = "--data" if args.data else "the data file (give --data PATH or --config)"
    try:
        models = load_models(path, option)
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

def describe(shape: dict, args: argparse.Namespace) -> dict:
    """Everything the CLI reports about one model, JSON-ready. ScriptError (usage) when
    ``--gpus`` cannot split its heads or it has no parameter count."""
    params = args.params if args.params is not None else shape.get("params")
    if params is None:
        raise ScriptError(f"{shape['name']}: no published_total in the data file; give --params",
                          EXIT_USAGE)
    try:
        budget = capacity(shape, params=params, context=args.context, kv_dtype=args.kv_dtype,
                          weight_dtype=args.weight_dtype, gpu_memory_bytes=args.gpu_memory_bytes,
                          gpus=args.gpus, memory_utilization=args.memory_utilization,
                          overhead_gb=args.overhead_gb)
    except ValueError as err:
        raise ScriptError(f"{shape['name']}: {err}", EXIT_USAGE) from None
    cache = {k: shape[k] for k in ("layers", "kv_heads", "head_dim", "mla", "values_per_layer",
                                   "sliding_window", "sliding_layers")}
    cache["kv_heads_per_gpu"] = kv_heads_per_gpu(shape, args.gpus)
    return {"name": shape["name"], "params": params, "cache_shape": cache, **budget}


def _gb(value: float) -> str:
    return f"{value / 1e9:.2f}"


def report_one(doc: dict, args: argparse.Namespace) -> str:
    c = doc["cache_shape"]
    heads = ("MLA latent" if c["mla"] else
             f"{c['kv_heads']} KV heads x {c['head_dim']}, {c['kv_heads_per_gpu']} per GPU")
    window = (f"; {c['sliding_layers']} of {c['layers']} layers keep {c['sliding_window']} tokens"
              if c["sliding_window"] else "")
    lines = [f"# {PROG}: {doc['name']}: {c['layers']} layers, {heads}{window}",
             f"# {args.gpus} GPU(s) of {args.gpu_memory_bytes / 1e9:.2f} GB each "
             f"({args.gpu_memory_from})",
             f"# {args.memory_utilization:g} usable; weights {args.weight_dtype}, KV cache "
             f"{args.kv_dtype}; 1 GB = 1e9 bytes",
             f"  {'KV bytes per token, whole model':<40}{doc['kv_per_token_model']:>14,.0f}",
             f"  {'KV bytes per token, per GPU':<40}{doc['kv_per_token']:>14,.0f}",
             f"  {'KV GB per sequence of ' + str(args.context) + ', per GPU':<40}"
             f"{doc['kv_per_sequence'] / 1e9:>14.3f}",
             f"  {'usable GB per GPU':<40}{_gb(doc['usable']):>14}",
             f"  {'weights GB per GPU':<40}{_gb(doc['weights']):>14}",
             f"  {'overhead GB per GPU':<40}{_gb(doc['overhead']):>14}",
             f"  {'free for the KV cache, GB per GPU':<40}{_gb(doc['kv_free']):>14}",
             f"  {'tokens in the cache':<40}{doc['tokens']:>14,}",
             f"  {'sequences of ' + str(args.context) + ' tokens at once':<40}{doc['sequences']:>14,}"]
    if doc["kv_free"] <= 0:
        lines.append("# the weights and overhead do not fit: add GPUs or quantize the weights")
    return "\n".join(lines)


def report_table(docs: list[dict], args: argparse.Namespace) -> str:
    lines = [f"# {PROG}: {len(docs)} models; {args.gpus} GPU(s) of "
             f"{args.gpu_memory_bytes / 1e9:.2f} GB each ({args.gpu_memory_from})",
             f"# {args.memory_utilization:g} usable; weights {args.weight_dtype}, KV "
             f"{args.kv_dtype}; context {args.context}; 1 GB = 1e9 bytes, per GPU",
             f"{'model':<16}{'KV B/token':>12}{'KV GB/seq':>11}{'weights GB':>12}"
             f"{'free GB':>9}{'tokens':>12}{'sequences':>11}"]
    for d in docs:
        lines.append(f"{d['name']:<16}{d['kv_per_token']:>12,.0f}"
                     f"{d['kv_per_sequence'] / 1e9:>11.3f}{_gb(d['weights']):>12}"
                     f"{_gb(d['kv_free']):>9}{d['tokens']:>12,}{d['sequences']:>11,}")
    return "\n".join(lines)


def json_report(docs: list[dict], args: argparse.Namespace) -> dict:
    """The --json document (tools/schemas/kv_cache_calculator.schema.json): the inputs, the
    GPU's memory and where its figure comes from, and ``describe``'s dict per model."""
    return {"benchmark": "kv_cache_calculator", "schema_version": 1,
            "device": None,  # computed, not measured
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": "python " + shlex.join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
            "versions": {"python": platform.python_version()},
            "units": {"memory": "bytes", "params": "count",
                      "inputs.gpu_memory": "GB (1e9 bytes): one GPU's memory, "
                      "--device's or --gpu-memory's (where a bare number is GB)",
                      "inputs.overhead_gb": "GB (1e9 bytes)"},
            "inputs": {**{k: getattr(args, k) for k in (
                "model", "config", "params", "context", "kv_dtype", "weight_dtype", "device")},
                "gpu_memory": args.gpu_memory_bytes / 1e9,
                **{k: getattr(args, k) for k in ("gpus", "memory_utilization", "overhead_gb")}},
            "gpu_memory": {"bytes": args.gpu_memory_bytes,
                           "device": None if args.gpu_memory else (args.device or DEFAULT_DEVICE),
                           "from": args.gpu_memory_from},
            "results": docs}


# ---------------------------------------------------------------------------------------------
# Command line

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="KV-cache bytes per token and per sequence of a decoder-only LLM, "
        "and how many sequences fit on a GPU after the weights (decimal units: 1 GB = 1e9 bytes).")
    parser.add_argument("--model", type=nonempty, metavar="NAME",
                        help='a model of the data file (see --list; case, spaces and dashes do '
                        'not matter), or "all"')
    parser.add_argument("--config", type=nonempty, metavar="PATH",
                        help="a Hugging Face config.json instead of the data file (needs --params)")
    parser.add_argument("--data", type=nonempty, metavar="PATH",
                        help="the data file (default: data/models/architectures.yml of the book)")
    parser.add_argument("--list", action="store_true", help="list the data file's models and exit")
    parser.add_argument("--params", type=argparse_count, metavar="COUNT",
                        help="parameters, e.g. 70.6B or 7.24e9 (default with --model: the "
                        "publisher's count in the data file)")
    parser.add_argument("--context", type=number(int, 1, 10**8), default=8192, metavar="TOKENS",
                        help="tokens per sequence, prompt plus output (default 8192)")
    parser.add_argument("--kv-dtype", choices=sorted(ELEMENT_BYTES), default="bf16",
                        help="KV-cache element type (default bf16)")
    parser.add_argument("--weight-dtype", choices=sorted(ELEMENT_BYTES), default="bf16",
                        help="weight element type (default bf16)")
    parser.add_argument("--device", choices=sorted(DEVICES), metavar="GPU",
                        help="the GPU, for its memory as the driver reports it: "
                        f"{', '.join(sorted(DEVICES))} (default {DEFAULT_DEVICE}, whose "
                        "vendor's 80 GB are 85.52e9 bytes)")
    parser.add_argument("--gpu-memory", type=argparse_memory, metavar="SIZE",
                        help="memory of one GPU instead of --device's, with a unit: 80GiB "
                        "(2^30 bytes), 85.5GB (1e9 bytes), 81559MiB; a bare number is GB "
                        "(80 = 80e9 bytes)")
    parser.add_argument("--gpus", type=number(int, 1, 1024), default=1, metavar="N",
                        help="GPUs the model is split over with tensor parallelism (default 1)")
    parser.add_argument("--memory-utilization", type=number(float, 0, 1, lo_open=True),
                        default=0.9, metavar="FRACTION",
                        help="fraction of the GPU's memory the server may use (default 0.9)")
    parser.add_argument("--overhead-gb", type=number(float, 0, 10**5), default=0.0, metavar="GB",
                        help="memory per GPU for activations, CUDA graphs and buffers (default 0)")
    parser.add_argument("--json", type=nonempty, metavar="PATH",
                        help="write the results as JSON ('-': print)")
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
    if args.config and args.params is None:
        parser.error("--config needs --params COUNT to size the weights (model_calculator.py "
                     "--config prints it)")
    if args.device and args.gpu_memory is not None:
        parser.error(f"give --device or --gpu-memory, not both (--device {args.device} has "
                     f"{DEVICES[args.device]['total_MiB']:,} MiB)")
    args.gpu_memory_bytes, args.gpu_memory_from = gpu_memory(args)
    if args.json and args.json != "-":
        check_output(args.json, "--json", [p for p in (args.config, args.data) if p])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    models = select_models(args)
    if args.list:
        for m in models:
            kind = "MLA" if m["mla"] else f"{m['kv_heads']} KV heads x {m['head_dim']}"
            print(f"{m['name']:<16} {m['layers']:>4} layers  {kind}")
        return 0
    docs = [describe(m, args) for m in models]
    print(report_one(docs[0], args) if len(docs) == 1 else report_table(docs, args))
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
