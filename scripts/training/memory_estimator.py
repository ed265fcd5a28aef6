#!/usr/bin/env python
"""memory_estimator.py: estimate the GPU memory one rank needs to train a transformer.

For one GPU (the first pipeline stage, which holds the most activations) it prints the weights,
the gradients, the optimizer states (fp32 master weights, fp32 main gradients where the recipe
keeps them, the optimizer's statistics), their sum (the model states that ZeRO divides), the
activations kept for the backward pass, the ZeRO-3/FSDP gathered layers and the total, for a
precision recipe, an optimizer, a ZeRO stage, DP/TP/PP degrees and a recomputation mode. The
Memory chapter derives every term: model states from the ZeRO paper (Rajbhandari et al. 2019),
activations from Korthikanti et al. 2022, the parameter count from Narayanan et al. 2021. Not
counted: the CUDA context, NCCL buffers, fragmentation, DDP's gradient buckets (measure them with
gpu_memory_monitor.py). Units: bytes in ``--json PATH`` (``-``: stdout); the table prints GB
(1e9 bytes, the ZeRO paper's unit) and GiB (2**30 bytes, PyTorch's). Standard library only::

    python memory_estimator.py --params 7.5e9 --dp 64 --zero 1
    python memory_estimator.py --layers 32 --hidden 4096 --heads 32 --vocab 32000 --seq 4096 \\
        --micro-batch 1 --recipe bf16-fp32-grads --dp 8 --zero 1 --recompute selective

Exit status: 0 ok, 2 usage (one line naming the option); ``--debug`` adds the traceback.

Example output (the ZeRO paper's Figure 1: 7.5B parameters on 64 GPUs, stage 1)::

    $ python scripts/training/memory_estimator.py --params 7.5e9 --dp 64 --zero 1
    ...
    component                   divided by        GB        GiB
    weights                          tp*pp    15.000     13.970
    gradients                        tp*pp    15.000     13.970
    optimizer states              tp*pp*dp     1.406      1.310
    model states                              31.406     29.249
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
from dataclasses import asdict, dataclass

PROG = "memory_estimator.py"
GB = 1e9
GIB = 2**30
# Caps of the argparse types: no model has 1e16 parameters, nor a dimension, sequence, batch or
# parallel degree near 1e9; far larger values overflow the arithmetic (an OverflowError, or "inf"
# printed as a size).
MAX_PARAMS = 1e16
MAX_COUNT = 10**9
SHAPE = ("layers", "hidden", "heads", "vocab", "seq", "micro_batch")  # options of the model shape


@dataclass(frozen=True)
class Model:
    """Transformer shape: L layers, hidden size h, a heads, vocabulary V, sequence length s,
    micro-batch b (sequences), MLP size ffn (4h by default)."""
    layers: int
    hidden: int
    heads: int
    vocab: int
    seq: int
    micro_batch: int
    ffn: int

    def layer_params(self) -> int:
        """Parameters of one layer: QKV and output projections 4h^2 + 4h, MLP 2*h*ffn + ffn + h,
        two layer norms 4h. For ffn = 4h this is 12h^2 + 13h (Narayanan et al. 2021)."""
        h, f = self.hidden, self.ffn
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h

    def params(self) -> int:
        """Total parameters: L layers + token embedding V*h (tied with the output layer) +
        learned position embedding s*h (Narayanan et al. 2021, Section 5.1) + the final layer
        norm's 2h, which that formula leaves out."""
        return self.layers * self.layer_params() + (self.vocab + self.seq + 2) * self.hidden


def model_state_bytes(params: float, recipe: str = "mixed", optimizer: str = "adamw",
                      zero: int = 0, dp: int = 1, tp: int = 1, pp: int = 1) -> dict[str, float]:
    """Per-GPU bytes of weights, gradients and optimizer states, and their sum.

    ``params`` is the whole model's parameter count. TP and PP divide everything by tp*pp; ZeRO
    stage 1 divides the optimizer states by dp, stage 2 also the gradients, stage 3 also the
    weights (Rajbhandari et al. 2019, Section 5 and Figure 1). Returns bytes (floats) under keys
    weights, gradients, optimizer_states, model_states. Raises ValueError for a stage outside
    0..3 or a degree below 1.
    """
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3 (got {zero})")
    for name, value in (("dp", dp), ("tp", tp), ("pp", pp)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1 (got {value})")
    per = state_bytes_per_param(recipe, optimizer)
    local = params / (tp * pp)
    out = {
        "weights": local * per["weights"] / (dp if zero >= 3 else 1),
        "gradients": local * per["gradients"] / (dp if zero >= 2 else 1),
        "optimizer_states": local * per["optimizer_states"] / (dp if zero >= 1 else 1),
    }
    out["model_states"] = out["weights"] + out["gradients"] + out["optimizer_states"]
    return out


def activation_bytes(model: Model, tp: int = 1, pp: int = 1, sequence_parallel: bool = False,
                     recompute: str = "none", flash_attention: bool = False) -> dict[str, float]:
    """Activation bytes on the first pipeline stage with 1F1B scheduling.

    That stage runs L/pp layers and holds pp micro-batches in flight, hence L * per-layer bytes
    (Korthikanti et al. 2022, Section 4.2.3; assumes at least pp micro-batches per step). Adds the
    Section 4.3 terms: embedding dropout mask s*b*h*pp (over t with sequence parallelism) and, for
    pp = 1, final norm + output-layer input 4sbh (over t with sequence parallelism) and fp32
    logits 4sbv/t. Returns bytes under keys layers, other, activations.
    """
    if pp < 1 or model.layers % pp:
        raise ValueError(f"pp ({pp}) must divide the number of layers ({model.layers})")
    per_layer = activation_bytes_per_layer(model.seq, model.micro_batch, model.hidden,
                                           model.heads, tp, sequence_parallel, recompute,
                                           flash_attention, model.ffn)
    sbh = model.seq * model.micro_batch * model.hidden
    t_sp = tp if sequence_parallel else 1
    other = sbh * pp / t_sp
    if pp == 1:
        other += 4 * sbh / t_sp + 4 * model.seq * model.micro_batch * model.vocab / tp
    layers = model.layers * per_layer
    return {"layers": layers, "other": other, "activations": layers + other}


def zero3_gather_bytes(model: Model, recipe: str, tp: int = 1, prefetch: int = 2) -> float:
    """Temporary bytes of ZeRO-3/FSDP: the full (unsharded) weights of ``prefetch`` layers
    gathered at once (the one computing and the next one being fetched), in the weights dtype.
    A rough lower bound: implementations keep 1-3 layers or buckets in flight."""
    return prefetch * model.layer_params() / tp * RECIPES[recipe].weights


def estimate(params: float | None = None, model: Model | None = None, recipe: str = "mixed",
             optimizer: str = "adamw", zero: int = 0, dp: int = 1, tp: int = 1, pp: int = 1,
             sequence_parallel: bool = False, recompute: str = "none",
             flash_attention: bool = False) -> dict:
    """The whole per-GPU estimate, in bytes: model states, activations (None without a model
    shape), temporary buffers and total. Give ``params`` or ``model`` (or both: ``params`` then
    overrides the count derived from the shape). Raises ValueError on inconsistent input."""
    if params is None and model is None:
        raise ValueError("give a parameter count or a model shape")
    n = float(params if params is not None else model.params())
    if not n > 0:
        raise ValueError(f"the parameter count must be > 0 (got {n:g})")
    states = model_state_bytes(n, recipe, optimizer, zero, dp, tp, pp)
    acts = None
    temp = 0.0
    if model is not None:
        if model.heads < 1 or model.hidden % model.heads:
            raise ValueError(f"heads ({model.heads}) must divide hidden ({model.hidden})")
        if model.heads % tp:
            raise ValueError(f"tp ({tp}) must divide the number of heads ({model.heads})")
        acts = activation_bytes(model, tp, pp, sequence_parallel, recompute, flash_attention)
        if zero == 3:
            temp = zero3_gather_bytes(model, recipe, tp)
    total = states["model_states"] + (acts["activations"] if acts else 0.0) + temp
    return {"params": n, "params_per_gpu": n / (tp * pp),
            "bytes_per_param": state_bytes_per_param(recipe, optimizer),
            "per_gpu_bytes": {**states,
                              "activations": acts["activations"] if acts else None,
                              "activations_layers": acts["layers"] if acts else None,
                              "activations_other": acts["other"] if acts else None,
                              "temporary": temp, "total": total}}


def report(args: argparse.Namespace, est: dict) -> str:
    """The human-readable table for an estimate."""
    per = est["bytes_per_param"]
    b = est["per_gpu_bytes"]
    source = "from the shape" if args.params is None else "given"
    n_states = OPTIMIZERS[args.optimizer][0]
    state_each = per["states"] / n_states if n_states else 0
    opt_parts = []
    if per["master"]:
        opt_parts.append(f"master {per['master']:g}")
    if per["main_grads"]:
        opt_parts.append(f"main grads {per['main_grads']:g}")
    opt_parts.append(f"states {n_states} x {state_each:g}" if n_states else "no states")
    div = {"weights": "tp*pp" + ("*dp" if args.zero >= 3 else ""),
           "gradients": "tp*pp" + ("*dp" if args.zero >= 2 else ""),
           "optimizer_states": "tp*pp" + ("*dp" if args.zero >= 1 else "")}
    lines = [
        f"# {PROG}: training memory per GPU (first pipeline stage)",
        f"# model: {est['params']:.3e} parameters ({source}) | recipe {args.recipe} | "
        f"optimizer {args.optimizer}",
        f"# parallelism: dp {args.dp} x tp {args.tp} x pp {args.pp} = "
        f"{args.dp * args.tp * args.pp} GPU{'s' if args.dp * args.tp * args.pp > 1 else ''} | "
        f"ZeRO stage {args.zero} | recompute {args.recompute}"
        + (" | sequence parallel" if args.sequence_parallel else "")
        + (" | flash attention" if args.flash_attention else ""),
        f"# bytes/param: weights {per['weights']:g}, gradients {per['gradients']:g}, optimizer "
        f"states {per['optimizer_states']:g} ({', '.join(opt_parts)})",
        "# 1 GB = 1e9 bytes, 1 GiB = 2^30 bytes",
        f"{'component':<26}{'divided by':>12}{'GB':>10}{'GiB':>11}",
    ]

    def row(name: str, value: float | None, divided: str = "", note: str = "") -> str:
        if value is None:
            return f"{name:<26}{divided:>12}{'n/a':>10}{'n/a':>11}  {note}".rstrip()
        return f"{name:<26}{divided:>12}{value / GB:>10.3f}{value / GIB:>11.3f}  {note}".rstrip()

    lines.append(row("weights", b["weights"], div["weights"]))
    lines.append(row("gradients", b["gradients"], div["gradients"]))
    lines.append(row("optimizer states", b["optimizer_states"], div["optimizer_states"]))
    lines.append(row("model states", b["model_states"]))
    if b["activations"] is None:
        lines.append(row("activations", None, note="(give --layers/--hidden/...)"))
    else:
        lines.append(row("activations", b["activations"],
                         "tp" if args.tp > 1 else "",
                         f"(layers {b['activations_layers'] / GB:.3f} GB, "
                         f"embedding/output {b['activations_other'] / GB:.3f} GB)"))
    lines.append(row("temporary (ZeRO-3 gather)", b["temporary"]))
    lines.append(row("total", b["total"]))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    _positive_number = number(float, 0, MAX_PARAMS, lo_open=True)
    _positive_int = number(int, 1, MAX_COUNT)
    p = argparse.ArgumentParser(
        prog=PROG, description="Estimate per-GPU training memory (weights, gradients, optimizer "
        "states, activations) for a transformer under ZeRO/FSDP, TP, PP and recomputation.",
        epilog="Recipes: " + "; ".join(f"{k}: {r.description}" for k, r in RECIPES.items()))
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    m = p.add_argument_group("model (give --params, or the shape, or both)")
    m.add_argument("--params", type=_positive_number, help="parameter count, e.g. 7.5e9")
    m.add_argument("--layers", type=_positive_int, help="transformer layers L")
    m.add_argument("--hidden", type=_positive_int, help="hidden size h")
    m.add_argument("--heads", type=_positive_int, help="attention heads a")
    m.add_argument("--vocab", type=_positive_int, help="vocabulary size V")
    m.add_argument("--seq", type=_positive_int, help="sequence length s (tokens)")
    m.add_argument("--micro-batch", type=_positive_int, help="micro-batch size b (sequences)")
    m.add_argument("--ffn-hidden", type=_positive_int, help="MLP hidden size (default 4h)")
    t = p.add_argument_group("training setup")
    t.add_argument("--recipe", choices=sorted(RECIPES), default="mixed",
                   help="precision recipe (default mixed: ZeRO paper's 16 bytes/param)")
    t.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adamw")
    t.add_argument("--zero", type=number(int), choices=(0, 1, 2, 3), default=0,
                   help="ZeRO stage over the dp ranks (FSDP FULL_SHARD = 3, SHARD_GRAD_OP = 2)")
    t.add_argument("--fsdp", action="store_true", help="same as --zero 3")
    t.add_argument("--dp", type=_positive_int, default=1, help="data-parallel degree")
    t.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel degree")
    t.add_argument("--pp", type=_positive_int, default=1, help="pipeline-parallel degree")
    t.add_argument("--sequence-parallel", action="store_true",
                   help="Megatron sequence parallelism (with --tp > 1)")
    t.add_argument("--recompute", choices=RECOMPUTE, default="none",
                   help="activation recomputation (default none)")
    t.add_argument("--flash-attention", action="store_true",
                   help="attention that does not store the s x s scores")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the estimate as JSON to PATH ('-': stdout)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check arguments; problems exit through parser.error (one line, status 2).
    Adds ``args.model`` (a Model or None)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fsdp:
        if args.zero not in (0, 3):
            parser.error(f"--fsdp means ZeRO stage 3 and contradicts --zero {args.zero}")
        args.zero = 3
    given = [k for k in SHAPE if getattr(args, k) is not None]
    if given and len(given) < len(SHAPE):
        missing = ", ".join("--" + k.replace("_", "-") for k in SHAPE if k not in given)
        parser.error(f"an incomplete model shape: also give {missing}")
    if not given and args.params is None:
        parser.error("give --params or the model shape (--layers --hidden --heads --vocab "
                     "--seq --micro-batch)")
    if args.ffn_hidden is not None and not given:
        parser.error("--ffn-hidden needs the model shape")
    args.model = None
    if given:
        if args.hidden % args.heads:
            parser.error(f"--heads ({args.heads}) must divide --hidden ({args.hidden})")
        if args.heads % args.tp:
            parser.error(f"--tp ({args.tp}) must divide --heads ({args.heads})")
        if args.layers % args.pp:
            parser.error(f"--pp ({args.pp}) must divide --layers ({args.layers})")
        args.model = Model(args.layers, args.hidden, args.heads, args.vocab, args.seq,
                           args.micro_batch, args.ffn_hidden or 4 * args.hidden)
    if args.sequence_parallel and args.tp == 1:
        parser.error("--sequence-parallel needs --tp > 1")
    if args.json and args.json != "-":
        check_output(args.json, "--json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        est = estimate(args.params, args.model, args.recipe, args.optimizer, args.zero, args.dp,
                       args.tp, args.pp, args.sequence_parallel, args.recompute,
                       args.flash_attention)
    except ValueError as err:  # parse_args checks the same things; this is a safety net
        build_parser().error(str(err))
    print(report(args, est))
    if args.json:
        inputs = {k: getattr(args, k) for k in (
            "params", "recipe", "optimizer", "zero", "dp", "tp", "pp", "sequence_parallel",
            "recompute", "flash_attention")}
        inputs["model"] = asdict(args.model) if args.model else None
        doc = {"tool": "memory_estimator", "schema_version": 1, "units": "bytes",
               "inputs": inputs, **est}
        text = json.dumps(doc, indent=2)
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


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter of each model-state tensor in a precision recipe.

    ``weights``/``grads``: the model's parameters and the gradients backward writes into;
    ``main_grads``: a separate fp32 gradient copy the optimizer reads (0 if none);
    ``master``: fp32 master weights (0 if the optimizer updates ``weights`` directly);
    ``state``: bytes of each optimizer statistic (Adam has two) unless the optimizer fixes it.
    """
    weights: int
    grads: int
    main_grads: int
    master: int
    state: int
    description: str


RECIPES = {
    # ZeRO paper, Section 3.1: fp16 weights and gradients, fp32 master weights, momentum and
    # variance: 2 + 2 + 12 = 16 bytes per parameter with Adam. bf16 in place of fp16 is the same.
    "mixed": Recipe(2, 2, 0, 4, 4, "16-bit weights and gradients, fp32 master weights and "
                    "optimizer states (ZeRO paper, 16 B/param with Adam)"),
    # Megatron-LM with fp16: the optimizer also keeps fp32 main gradients: 20 B/param with Adam.
    "mixed-fp32-main-grads": Recipe(2, 2, 4, 4, 4, "16-bit weights and gradients plus fp32 "
                                    "main gradients, master weights and states (Megatron-LM fp16, "
                                    "20 B/param)"),
    # Megatron-LM with bf16: gradients accumulated (and reduced) in fp32 and used directly as the
    # optimizer's main gradients: 2 + 4 + 12 = 18 B/param with Adam.
    "bf16-fp32-grads": Recipe(2, 4, 0, 4, 4, "bf16 weights, fp32 gradient accumulation, fp32 "
                              "master weights and states (Megatron-LM bf16, 18 B/param)"),
    # Everything in fp32 (also PyTorch FSDP's MixedPrecision, which keeps fp32 sharded parameters
    # and computes with bf16 copies gathered on the fly): 4 + 4 + 8 = 16 B/param with Adam.
    "fp32": Recipe(4, 4, 0, 0, 4, "fp32 weights, gradients and optimizer states (16 B/param)"),
    # Pure bf16: no master copy, optimizer states in bf16: 2 + 2 + 4 = 8 B/param with Adam.
    "bf16": Recipe(2, 2, 0, 0, 2, "bf16 weights, gradients and optimizer states, no master "
                   "copy (8 B/param)"),
}


# optimizer -> (number of per-parameter statistics, bytes of each or None for the recipe's)
OPTIMIZERS = {
    "adamw": (2, None),        # exp_avg and exp_avg_sq (Kingma & Ba 2014; Loshchilov & Hutter 2017)
    "adam": (2, None),
    "adamw-8bit": (2, 1),      # block-wise quantized states, 1 byte each (Dettmers et al. 2021);
                               # the per-block scales add well under 1% and are ignored
    "sgd-momentum": (1, None),  # the momentum buffer
    "sgd": (0, None),
}


RECOMPUTE = ("none", "selective", "full")


def state_bytes_per_param(recipe: str, optimizer: str) -> dict[str, float]:
    """Bytes per parameter of each model-state term, before any sharding.

    Returns keys weights, gradients, master, main_grads, states and optimizer_states (the sum of
    the last three, the ZeRO paper's K). Raises KeyError for an unknown recipe or optimizer.
    """
    r = RECIPES[recipe]
    n_states, state_bytes = OPTIMIZERS[optimizer]
    states = n_states * (r.state if state_bytes is None else state_bytes)
    return {"weights": r.weights, "gradients": r.grads, "master": r.master,
            "main_grads": r.main_grads, "states": states,
            "optimizer_states": r.master + r.main_grads + states}


def activation_bytes_per_layer(seq: int, micro_batch: int, hidden: int, heads: int,
                               tp: int = 1, sequence_parallel: bool = False,
                               recompute: str = "none", flash_attention: bool = False,
                               ffn: int | None = None) -> float:
    """Bytes of activations one transformer layer keeps for the backward pass, per micro-batch.

    Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198): Eq. 1 (sbh(34 + 5as/h)), Eq. 2
    (tensor parallel: sbh(10 + 24/t + 5as/(ht))), Eq. 4 (tensor + sequence parallel:
    sbh(34 + 5as/h)/t), selective recomputation (drops the 5as/h term) and full recomputation
    (2sbh: only the layer input is stored; 2sbh/t with sequence parallelism). 16-bit activations,
    1-byte dropout masks. ``ffn`` (default 4h) replaces 34 by 18 + 4*ffn/h. ``flash_attention``
    replaces the 5as/h term by an fp32 log-sum-exp per row and head (sbh * 4a/h bytes).
    Raises ValueError for an unknown ``recompute`` or non-positive sizes.
    """
    for name, value in (("seq", seq), ("micro_batch", micro_batch), ("hidden", hidden),
                        ("heads", heads), ("tp", tp)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1 (got {value})")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {', '.join(RECOMPUTE)} (got {recompute!r})")
    s, b, h, a, t = seq, micro_batch, hidden, heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    f = 4 * h if ffn is None else ffn
    linear = 18 + 4 * f / h           # 34 for ffn = 4h: 11 (attention) + 19 (MLP) + 4 (norms)
    replicated = 10                   # norms 4, two dropout masks 2, QKV and MLP inputs 4
    if recompute == "selective":
        score = 0.0
    elif flash_attention:
        score = 4 * a / h             # fp32 log-sum-exp: 4 bytes per (row, head) = 4*a*s*b
    else:
        score = 5 * a * s / h         # softmax output 2, dropout mask 1, dropout output 2
    if t == 1 or sequence_parallel:
        return sbh * (linear + score) / t
    return sbh * (replicated + (linear - replicated) / t + score / t)
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
