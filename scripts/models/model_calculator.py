#!/usr/bin/env python
"""model_calculator.py: parameters, FLOPs per token and KV-cache bytes of a decoder-only LLM,
from its Hugging Face ``config.json`` or from a row of the book's ``data/models/architectures.yml``
(``--model``: read from ``--data PATH`` if given, else from the copy built into this script).

Prints the parameters by component (embedding, output, attention, mlp, experts, shared experts,
router, norms), the total and the active parameters of one token, the training FLOPs per token
(6N plus the attention matmuls over a sequence of ``--context`` tokens) and those of one
generated token with ``--context`` tokens cached, and the KV cache per token and per sequence in
``--kv-dtype``. Covers MHA, MQA, GQA, MLA, mixtures of experts and sliding windows in the families
llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma2, olmo2, olmoe, deepseek_v2 and
deepseek_v3; any other is refused. Units: plain counts (1 B = 1e9), FLOP (1 GFLOP = 1e9), bytes
(1 GB = 1e9). Formulas and sources: book/en/models/architecture.md.

Plain ``python``; no torch, no GPU, no clone of the book (``--data`` in YAML needs PyYAML)::

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

KV_DTYPES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


# ---------------------------------------------------------------------------------------------
# Counting. A model (``a``) is what the shared ``architecture`` makes of a config.json or a row of
# the data file (in the generated block below, with the rows built in): every family's spelling
# mapped onto one (num_local_experts and n_routed_experts become num_experts, ...). Its parameters
# (``count_params``) and FLOPs per token (``arch_flops_per_token``) are counted in that block too,
# shared with parallelism_planner.py.

def flops_per_token(a: dict, context: int) -> dict:
    """``arch_flops_per_token`` (in the shared block below): FLOPs per token of model ``a`` for
    a sequence of ``context`` tokens, under the name the notebooks import."""
    return arch_flops_per_token(a, context)


def kv_bytes_per_token(a: dict, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache one token adds across all layers (before any window is full), with
    ``dtype_bytes`` bytes per value: ``values_per_layer`` of them per layer (MHA/MQA/GQA: 2 x
    kv_heads x head_dim; MLA: kv_lora_rank + qk_rope_head_dim)."""
    return a["values_per_layer"] * a["num_hidden_layers"] * dtype_bytes


def kv_bytes(a: dict, context: int, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache of one sequence of ``context`` tokens (sliding-window layers keep at
    most their window)."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    per_layer_token = kv_bytes_per_token(a, dtype_bytes) // a["num_hidden_layers"]
    return per_layer_token * sum(tokens_per_layer(a, context))


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
                        help="a data file in the format of the book's data/models/architectures.yml, "
                        "YAML or JSON (default: the copy of that file built into this script)")
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


def tokens_per_layer(arch: dict, context: int) -> list[int]:
    """The tokens each layer of ``arch`` attends to (and caches) in a sequence of ``context``
    tokens: the sliding layers at most their window."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    window = min(context, arch["sliding_window"] or context)
    sliding = arch["sliding_layers"]
    return [window] * sliding + [context] * (arch["num_hidden_layers"] - sliding)


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
    """Parameters of model ``a`` (from ``architecture``) by component, as ints: embedding,
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


def arch_flops_per_token(a: dict, context: int) -> dict:
    """FLOPs per token of model ``a`` for a sequence (or cache) of ``context`` tokens:
    ``training`` (6N plus the attention matmuls forward and backward over the full T x T
    matrix), ``training_6n`` (6N alone), ``forward`` (one generated token attending to
    ``context`` cached tokens), ``matmul_params`` (N). Formulas: book/en/models/architecture.md."""
    if context < 1:
        raise ValueError(f"context must be >= 1, got {context}")
    n = count_params(a)["matmul_active"]
    qk, v = _attention_widths(a)
    attended = sum(tokens_per_layer(a, context))
    return {"matmul_params": n, "training_6n": 6 * n,
            "training": 6 * n + 6 * (qk + v) * attended,
            "forward": 2 * n + 2 * (qk + v) * attended}


def parse_count(text: str) -> float:
    """A parameter count as printed: ``70.6B``, ``405b``, ``7.24e9``, ``850M``. Raises
    ValueError for anything else, for a non-finite value or for one not above 0."""
    import re
    match = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", str(text))
    if not match:
        raise ValueError(f"not a parameter count: {text!r} (give e.g. 70.6B or 7.24e9)")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9,
                                      "t": 1e12}[match.group(2).lower()]
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"not a parameter count: {text!r} (must be finite and > 0)")
    return value


def models_from_rows(rows, where: str, counts: bool = True) -> list[dict]:
    """The models of a data file's ``rows`` (data/models/architectures.yml's format), each
    ``architecture`` with the row's labels kept (``kind``, ``attention``, ``published_total``,
    ``published_active``, ``source``, ...) and ``params``, the published total as a number.
    Raises ValueError naming ``where``, the row and the field for a malformed row (a name that
    is not a string, a missing or non-integer size, a published count that is a number, inf,
    nan or no count, ...)."""
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
        arch = architecture(row, name, label, counts)
        arch.update({k: row[k] for k in [k for k, _, _ in ROW_LABELS] + ["source"] if k in row})
        if "published_total" in row:
            try:
                arch["params"] = parse_count(row["published_total"])
            except ValueError:
                raise ValueError(f"{label}: published_total must be {ROW_LABELS[2][2]}, got "
                                 f"{_shown(row['published_total'])}") from None
        models.append(arch)
    return models


def load_models(path: str, option: str = "--data", counts: bool = True) -> list[dict]:
    """The models of the data file ``path`` (``parse_models``), read bounded (``read_input``: a
    regular file or a pipe, at most 64 MiB, never /dev/zero or a FIFO without a writer). Raises
    ScriptError (usage) naming ``option`` and the file when it cannot be read, ValueError naming
    the file (the row and the field) when it is not UTF-8, JSON or YAML, or malformed."""
    try:
        raw = read_input(path, option)
    except ScriptError as err:
        why = str(err).removeprefix(f"{option} {path}: ")
        raise ScriptError(f"{option} {path}: cannot read it ({why})", EXIT_USAGE) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return parse_models(text, path, counts)


def parse_models(text: str, where: str = "architectures.yml", counts: bool = True) -> list[dict]:
    """The models of a data file's ``text`` (``models_from_rows``): YAML (needs PyYAML), or the
    same data as JSON (what the book's calculator pages hold). Raises ValueError naming ``where``
    (the row and the field) when it is neither, or malformed."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a data file") from None
    except ValueError as err:
        if not isinstance(err, json.JSONDecodeError):  # JSON, but int() of a 5,000-digit number
            raise ValueError(f"{where}: not valid JSON ({str(err).splitlines()[0]})") from None
        data = _yaml(text, where)
    return models_from_rows(data.get("rows") if isinstance(data, dict) else None, where, counts)


def _yaml(text: str, path: str):
    try:
        import yaml
    except ImportError:
        raise ValueError(f"{path}: reading a YAML data file needs PyYAML (pip install pyyaml); "
                         "or give it as JSON") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a data file") from None
    except ValueError as err:  # int() of a 5,000-digit number
        raise ValueError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None


def read_config(path: str) -> dict:
    """The parsed config.json at ``path``; ScriptError (usage) naming the file otherwise."""
    return parse_json(read_input(path, "--config"), "--config", path)


def _model_key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def select_models(args, counts: bool = True) -> list[dict]:
    """The models a calculator's command line asks for (``architecture``): ``--config``'s, or
    ``--model``'s (a name, in any case and spacing, or "all") or ``--list``'s, from ``--data``
    when given, else from MODEL_ROWS, the copy of data/models/architectures.yml built into the
    script. Raises ScriptError (usage) naming the option, the file, the row and the field."""
    if args.config:
        config = read_config(args.config)
        try:
            return [architecture(config, where=f"--config {args.config}", counts=counts)]
        except ValueError as err:
            raise ScriptError(str(err), EXIT_USAGE) from None
    where = args.data or "the built-in copy of data/models/architectures.yml"
    try:
        models = load_models(args.data, counts=counts) if args.data else \
            models_from_rows(MODEL_ROWS, where, counts)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    if args.list or _model_key(args.model) == "all":
        return models
    wanted = [m for m in models if _model_key(m["name"]) == _model_key(args.model)]
    if not wanted:
        raise ScriptError(f"--model {args.model!r}: not in {where} (see --list)", EXIT_USAGE)
    return wanted


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
