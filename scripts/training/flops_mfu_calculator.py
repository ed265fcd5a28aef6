#!/usr/bin/env python
"""flops_mfu_calculator.py: training FLOPs per token, achieved TFLOPS, MFU and HFU of a transformer.

From a model shape (or a parameter count), a measured throughput and the accelerator's peak it
computes the model FLOPs per token, ``6N + 12LaT`` (PaLM, Chowdhery et al. 2022, appendix B; N
matmul parameters, L layers, a attention width, T sequence length; plain ``6N`` is printed too),
the hardware FLOPs per token (model FLOPs plus the forward work ``--recompute attention|full``
runs again), the achieved TFLOPS per device (FLOPs per token x tokens/s / devices; 1 TFLOPS =
1e12 FLOP/s), MFU (achieved model TFLOPS / peak) and HFU (achieved hardware TFLOPS / peak).
Throughput: ``--tokens-per-s`` (all devices), ``--step-time-s`` with ``--global-batch``, or
``--achieved-tflops``. Peak: ``--peak-tflops``, or ``--device`` (dense bf16 peaks copied from
data/compute/accelerators.yml; ``--list-devices``). The Performance chapter explains the
formulas and the two ways to count HFU under selective recomputation. Standard library only::

    python flops_mfu_calculator.py --layers 32 --hidden 4096 --heads 32 --vocab 32000 \\
        --seq-len 4096 --tokens-per-s 3.2e5 --devices 64 --device h100-sxm --json mfu.json

Exit status: 0 ok, 2 usage (one line naming the option, also for inputs that put a device above
its peak); ``--debug`` adds the traceback.

Example output (PaLM 540B at the paper's throughput; its Table 3 reports 46.2% MFU)::

    $ python scripts/training/flops_mfu_calculator.py --params 540.35e9 --layers 118 --heads 48 \\
          --head-dim 256 --seq-len 2048 --tokens-per-s 238.3e3 --devices 6144 --device tpu-v4
    ...
    achieved model TFLOPS/device    127.13
    MFU (with attention)            46.23 %
    MFU (6N only)                   45.73 %
    HFU                             46.23 %   nothing recomputed
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

PROG = "flops_mfu_calculator.py"
# Caps of the argparse types: no transformer has a dimension, vocabulary, sequence, batch or
# device count near 1e12 or 1e16 parameters, and far larger values overflow the float arithmetic.
MAX_COUNT = 10**12
MAX_PARAMS = 1e16

# --device: the row of the book's catalogue, data/compute/accelerators.yml, whose dense (no
# sparsity) bf16 peak is used; the figures are built in below (ACCELERATOR_ROWS), each row's source
# is the vendor's document. Vendors print bf16 "with sparsity" (H100 SXM: 1,979 on the product
# page); the dense rate is half, 989.4 in the Hopper whitepaper.
DEVICES = {
    "a100": "NVIDIA A100 SXM 80GB",
    "h100-sxm": "NVIDIA H100 SXM",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h200": "NVIDIA H200 SXM",
    "b200": "NVIDIA B200 (HGX)",
    "mi300x": "AMD MI300X",
    "tpu-v4": "Google TPU v4",
    "tpu-v5p": "Google TPU v5p",
}


def device_peak(key: str) -> float:
    """Dense bf16 peak TFLOPS of --device ``key`` (of DEVICES), from the built-in catalogue rows."""
    return float(row_named(ACCELERATOR_ROWS, DEVICES[key])["bf16_dense"])


class BadInput(ValueError):
    """Raised for impossible or missing inputs; main() turns it into a one-line error."""


def layer_params(hidden: int, attn_width: int, kv_width: int, ffn: int, gated: bool) -> int:
    """Matmul weights of one transformer layer (biases and norms ignored, they are <0.1%).

    Q and O projections: ``hidden x attn_width`` each; K and V: ``hidden x kv_width`` each
    (kv_width < attn_width for grouped-query attention); MLP: two ``hidden x ffn`` matrices, three
    if ``gated`` (SwiGLU). Returns a parameter count.
    """
    attention = 2 * hidden * attn_width + 2 * hidden * kv_width
    mlp = (3 if gated else 2) * hidden * ffn
    return attention + mlp


def flops_per_token(*, matmul_params: float, layer_matmul_params: float, layers: int,
                    attn_width: int, seq_len: int, recompute: str = "none") -> dict:
    """Training FLOPs per token (forward + backward), model and hardware counts.

    Args:
        matmul_params: N, parameters used in matmuls (layers + output projection), a count.
        layer_matmul_params: the part of N inside the transformer layers (what ``full``
            recomputation runs again); ``0 <= layer_matmul_params <= matmul_params``.
        layers, attn_width, seq_len: L, a (heads x head_dim) and T of ``12 L a T``.
        recompute: ``none``, ``attention`` or ``full`` (see HFU_CONVENTION).

    Returns a dict of FLOPs per token: ``dense`` (6N), ``attention`` (12LaT), ``model``
    (their sum, PaLM appendix B), ``recomputed`` (extra forward FLOPs), ``hardware`` (model +
    recomputed: this calculator's convention) and ``hardware_paper_convention``, the count behind
    Megatron-LM's published HFU: with ``attention`` it is Korthikanti et al. 2022's equation 8,
    ``72 B L s h^2 (1 + s/3h + V/12hL)`` per iteration (https://arxiv.org/abs/2205.05198,
    appendix A), that is model + 12LaT per token, three times the 4LaT forward of the attention
    core that their text says selective recomputation repeats; with ``none`` and ``full`` it equals
    ``hardware`` (Narayanan et al. 2021's 96 B s l h^2 (1 + s/6h + V/16lh) for ``full``).
    Raises BadInput on negative inputs or an unknown recompute mode.
    """
    if min(matmul_params, layer_matmul_params, layers, attn_width, seq_len) < 0:
        raise BadInput("model sizes must not be negative")
    if layer_matmul_params > matmul_params:
        raise BadInput("layer parameters exceed the total parameter count")
    dense = 6.0 * matmul_params                       # 2N forward + 4N backward (Kaplan et al.)
    attention = 12.0 * layers * attn_width * seq_len  # PaLM: 12 L H Q T
    if recompute == "none":
        extra = 0.0
    elif recompute == "attention":
        extra = attention / 3                         # the forward third of the attention term
    elif recompute == "full":
        extra = 2.0 * layer_matmul_params + attention / 3
    else:
        raise BadInput(f"unknown recompute mode {recompute!r} (none, attention, full)")
    model = dense + attention
    # Korthikanti et al. 2022, eq. 8: s/3h where eq. 7 has s/6h, i.e. the whole 12LaT again.
    paper = model + attention if recompute == "attention" else model + extra
    return {"dense": dense, "attention": attention, "model": model,
            "recomputed": extra, "hardware": model + extra, "hardware_paper_convention": paper}


# What the hardware FLOPs count on top of the model FLOPs, per --recompute: this calculator's
# convention, then the one behind Megatron-LM's published HFU (printed where the two differ).
HFU_CONVENTION = {
    "none": "no recomputation: hardware FLOPs = model FLOPs",
    "attention": "+4LaT per token: one more forward pass of the attention core (QK^T and "
                 "attention x V), what selective recomputation runs again",
    "full": "+2N_layers + 4LaT per token: one more forward pass of every layer (= Narayanan et "
            "al. 2021, 96 B s l h^2 (1 + s/6h + V/16lh) per step)",
}
HFU_SHORT = {"none": "nothing recomputed",
             "attention": "+4LaT: the attention core's forward, run again",
             "full": "+2N_layers + 4LaT: every layer's forward, run again"}
HFU_PAPER_CONVENTION = {
    "none": HFU_CONVENTION["none"],
    "attention": "+12LaT per token: Korthikanti et al. 2022, eq. 8, 72 B L s h^2 (1 + s/3h + "
                 "V/12hL) per iteration, behind Megatron-LM's published HFU (their Table 5)",
    "full": HFU_CONVENTION["full"],
}


def utilization(flops_token: float, tokens_per_s: float, devices: int, peak_tflops: float) -> tuple:
    """Achieved TFLOPS per device and its fraction of peak.

    ``flops_token`` FLOPs per token x ``tokens_per_s`` (all devices together) / ``devices``,
    in TFLOPS (1e12 FLOP/s); utilization = that / ``peak_tflops`` (a fraction, not %).
    Raises BadInput for non-positive devices or peak.
    """
    if devices <= 0 or peak_tflops <= 0:
        raise BadInput("devices and peak TFLOPS must be positive")
    achieved = flops_token * tokens_per_s / devices / 1e12
    return achieved, achieved / peak_tflops


def model_counts(args) -> dict:
    """Resolve N, the layer share of N and the attention width from the arguments."""
    attn_width = None
    for option, value in (("--head-dim", args.head_dim), ("--kv-heads", args.kv_heads)):
        if value is not None and args.heads is None:
            raise BadInput(f"{option} {value} needs --heads (it would be ignored)")
    if args.heads:
        head_dim = args.head_dim
        if head_dim is None:
            if not args.hidden:
                raise BadInput("--heads needs --hidden or --head-dim to know the head width")
            if args.hidden % args.heads:
                raise BadInput(f"--hidden {args.hidden} is not divisible by --heads {args.heads}")
            head_dim = args.hidden // args.heads
        attn_width = args.heads * head_dim
    elif args.hidden:
        attn_width = args.hidden
    if attn_width is None:
        raise BadInput("give --hidden or --heads/--head-dim for the attention term")
    if args.layers is None:
        raise BadInput("--layers is required")
    if args.kv_heads and args.heads and args.heads % args.kv_heads:
        raise BadInput(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    if args.params is not None:
        n = args.params
        layer_n = n  # unknown split: treat all as layer weights for full recomputation
        if args.hidden and args.vocab:
            layer_n = max(n - args.hidden * args.vocab, 0.0)
        source = "given"
    else:
        if not (args.hidden and args.vocab):
            raise BadInput("without --params, give --layers, --hidden and --vocab")
        kv_width = attn_width * args.kv_heads // args.heads if (args.kv_heads and args.heads) \
            else attn_width
        ffn = args.ffn or 4 * args.hidden
        layer_n = args.layers * layer_params(args.hidden, attn_width, kv_width, ffn, args.gated)
        n = layer_n + args.vocab * args.hidden  # output projection (tied or not, it is a matmul)
        source = "counted from the shape"
    return {"matmul_params": float(n), "layer_matmul_params": float(layer_n),
            "attn_width": attn_width, "source": source}


def compute(args) -> dict:
    """All results as a dict (what --json writes). Raises BadInput on bad combinations."""
    counts = model_counts(args)
    flops = flops_per_token(matmul_params=counts["matmul_params"],
                            layer_matmul_params=counts["layer_matmul_params"],
                            layers=args.layers, attn_width=counts["attn_width"],
                            seq_len=args.seq_len, recompute=args.recompute)
    if args.peak_tflops and args.device:
        raise BadInput("give --peak-tflops or --device, not both")
    if args.device:
        peak, peak_note = device_peak(args.device), f"{DEVICES[args.device]}, bf16_dense"
    elif args.peak_tflops:
        peak, peak_note = args.peak_tflops, "given"
    else:
        raise BadInput("give --peak-tflops or --device for MFU")
    given = [x is not None for x in (args.tokens_per_s, args.step_time_s, args.achieved_tflops)]
    if sum(given) != 1:
        raise BadInput("give exactly one of --tokens-per-s, --step-time-s (with "
                         "--global-batch) or --achieved-tflops")
    if args.step_time_s is not None:
        if args.global_batch is None:
            raise BadInput("--step-time-s needs --global-batch")
        tokens_per_s = args.global_batch * args.seq_len / args.step_time_s
    elif args.global_batch is not None:
        raise BadInput("--global-batch only goes with --step-time-s")
    elif args.achieved_tflops is not None:
        tokens_per_s = args.achieved_tflops * 1e12 * args.devices / flops["hardware"]
    else:
        tokens_per_s = args.tokens_per_s
    model_tflops, mfu = utilization(flops["model"], tokens_per_s, args.devices, peak)
    _, mfu_dense = utilization(flops["dense"], tokens_per_s, args.devices, peak)
    hw_tflops, hfu = utilization(flops["hardware"], tokens_per_s, args.devices, peak)
    _, hfu_paper = utilization(flops["hardware_paper_convention"], tokens_per_s, args.devices, peak)
    out = {
        "tool": PROG, "schema_version": 1,
        "model": {"matmul_params": counts["matmul_params"], "params_source": counts["source"],
                  "layer_matmul_params": counts["layer_matmul_params"], "layers": args.layers,
                  "attn_width": counts["attn_width"], "seq_len": args.seq_len},
        "recompute": args.recompute,
        "flops_per_token": flops,
        "devices": args.devices, "peak_tflops": peak, "peak_source": peak_note,
        "tokens_per_s": tokens_per_s, "tokens_per_s_per_device": tokens_per_s / args.devices,
        "achieved_model_tflops": model_tflops, "achieved_hardware_tflops": hw_tflops,
        "mfu": mfu, "mfu_without_attention": mfu_dense, "hfu": hfu,
        "hfu_convention": HFU_CONVENTION[args.recompute],
        "hfu_paper_convention": hfu_paper,
        "hfu_paper_convention_is": HFU_PAPER_CONVENTION[args.recompute],
    }
    if hfu > 1:
        raise BadInput(
            f"{given_inputs(args, counts)} mean {hw_tflops:.4g} TFLOPS per device, "
            f"{100 * hfu:.4g} % of the {peak:g} TFLOPS peak: no device runs above its peak, so "
            "one of them is wrong")
    if args.train_tokens:
        seconds = args.train_tokens / tokens_per_s
        out["train_tokens"] = args.train_tokens
        out["train_days"] = seconds / 86400
    bad = [k for k, v in out.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        extra = f", --train-tokens {args.train_tokens:g}" if args.train_tokens else ""
        raise BadInput(f"{given_inputs(args, counts)}{extra} give a non-finite {bad[0]} (the "
                         "numbers overflow double precision): check them")
    return out


def given_inputs(args, counts: dict) -> str:
    """The inputs that set the achieved FLOPS, as given ('--tokens-per-s 1e+09 on --devices 1
    with --device a100, N = 1.75e+11 parameters (given)'), for error messages."""
    if args.step_time_s is not None:
        rate = f"--step-time-s {args.step_time_s:g} with --global-batch {args.global_batch}"
    elif args.achieved_tflops is not None:
        rate = f"--achieved-tflops {args.achieved_tflops:g}"
    else:
        rate = f"--tokens-per-s {args.tokens_per_s:g}"
    peak = f"--device {args.device}" if args.device else f"--peak-tflops {args.peak_tflops:g}"
    return (f"{rate} on --devices {args.devices} with {peak}, N = "
            f"{counts['matmul_params']:.4g} parameters ({counts['source']})")


def report(r: dict, device: str | None) -> str:
    f, m = r["flops_per_token"], r["model"]
    lines = [
        f"# {PROG}: FLOPs per token, achieved TFLOPS and MFU (decimal units)",
        f"# model: N = {m['matmul_params'] / 1e9:.5g}e9 matmul parameters ({m['params_source']}), "
        f"L = {m['layers']}, attention width a = {m['attn_width']}, T = {m['seq_len']}",
        f"# peak: {r['peak_tflops']:.1f} TFLOPS per device ({device or r['peak_source']}) x "
        f"{r['devices']} devices; recompute: {r['recompute']}",
        "#",
        "# FLOPs per token              value        formula",
        f"model (with attention)        {f['model']:.4e}   6N + 12LaT",
        f"model (6N only)               {f['dense']:.4e}   6N",
        f"hardware                      {f['hardware']:.4e}   model + recomputed forward",
        "#",
        f"# throughput: {r['tokens_per_s']:.6g} tokens/s in total, "
        f"{r['tokens_per_s_per_device']:.4g} tokens/s per device",
        f"achieved model TFLOPS/device    {r['achieved_model_tflops']:.2f}",
        f"achieved hardware TFLOPS/device {r['achieved_hardware_tflops']:.2f}",
        f"MFU (with attention)            {100 * r['mfu']:.2f} %",
        f"MFU (6N only)                   {100 * r['mfu_without_attention']:.2f} %",
        f"HFU                             {100 * r['hfu']:.2f} %   {HFU_SHORT[r['recompute']]}",
    ]
    if r["hfu_paper_convention"] != r["hfu"]:
        lines.append(f"HFU, Megatron-LM convention     {100 * r['hfu_paper_convention']:.2f} %   "
                     "+12LaT: Korthikanti et al. 2022, eq. 8 (their Table 5)")
    if "train_days" in r:
        lines.append(f"time for {r['train_tokens']:.4g} tokens       {r['train_days']:.1f} days")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    positive_float = number(float, 0, lo_open=True)
    positive_int = number(int, 1, MAX_COUNT)
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Training FLOPs per token (6N + 12LaT, PaLM appendix B), achieved TFLOPS per "
                    "device, MFU and HFU, from a transformer's shape, a measured throughput and "
                    "the device's peak. Decimal units: 1 TFLOPS = 1e12 FLOP/s.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    m = p.add_argument_group("model (give --params, or the shape to count them)")
    m.add_argument("--params", type=number(float, 0, MAX_PARAMS, lo_open=True),
                   help="N, parameters used in matmuls (for MoE: the parameters active per token)")
    m.add_argument("--layers", type=positive_int, help="number of transformer layers L")
    m.add_argument("--hidden", type=positive_int, help="model width d")
    m.add_argument("--heads", type=positive_int, help="attention heads")
    m.add_argument("--head-dim", type=positive_int, help="per-head width (default hidden/heads)")
    m.add_argument("--kv-heads", type=positive_int, help="key/value heads (GQA; default heads)")
    m.add_argument("--ffn", type=positive_int, help="MLP inner width (default 4*hidden)")
    m.add_argument("--gated", action="store_true", help="gated MLP (SwiGLU: three matrices)")
    m.add_argument("--vocab", type=positive_int, help="vocabulary size V (output projection)")
    m.add_argument("--seq-len", type=positive_int, required=True, help="sequence length T")
    t = p.add_argument_group("throughput (one of)")
    t.add_argument("--tokens-per-s", type=positive_float, help="tokens per second, all devices")
    t.add_argument("--step-time-s", type=positive_float, help="seconds per optimizer step")
    t.add_argument("--global-batch", type=positive_int,
                   help="sequences per optimizer step (with --step-time-s)")
    t.add_argument("--achieved-tflops", type=positive_float,
                   help="measured hardware TFLOPS per device (Megatron-LM style)")
    d = p.add_argument_group("devices")
    d.add_argument("--devices", type=positive_int, default=1, help="number of devices (default 1)")
    d.add_argument("--peak-tflops", type=positive_float, help="peak TFLOPS per device")
    d.add_argument("--device", choices=sorted(DEVICES), help="take the peak from the built-in list")
    d.add_argument("--list-devices", action="store_true", help="print the built-in peaks and exit")
    p.add_argument("--recompute", choices=("none", "attention", "full"), default="none",
                   help="activation recomputation, for HFU (default none): attention is "
                   "Megatron-LM's selective recomputation of the attention core, full re-runs "
                   "every layer's forward pass")
    p.add_argument("--train-tokens", type=positive_float,
                   help="also print the time to train on this many tokens")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if argv is None:
        argv = sys.argv[1:]
    if "--list-devices" in argv:  # before parse_args, which would ask for the model's options
        rest = [a for a in argv if a not in ("--list-devices", "--debug")]
        if rest:
            parser.error(f"--list-devices takes no other option (got {' '.join(rest)})")
        print("# dense bf16 peaks, from data/compute/accelerators.yml (the row named; its source "
              "is the vendor's document)")
        for name, row in DEVICES.items():
            print(f"{name:10s} {device_peak(name):8.1f} TFLOPS  {row}")
        return 0
    args = parser.parse_args(argv)
    if args.json:
        check_output(args.json, "--json")
    try:
        result = compute(args)
    except BadInput as exc:
        parser.error(str(exc))  # prints "PROG: error: ..." and exits with status 2
    print(report(result, args.device))
    if args.json:
        write_atomic(args.json, json.dumps(result, indent=2) + "\n")
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


# data/compute/accelerators.yml: the figures scripts compute with, for the devices they offer by
# name: dense bf16 peak (TFLOPS), memory (GB), scale-up links over both directions (GBps).
ACCELERATOR_ROWS = [
    {'name': 'NVIDIA A100 SXM 80GB', 'bf16_dense': 312, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H100 SXM', 'bf16_dense': 989.4, 'mem_GB': 80, 'scaleup_GBps': 900},
    {'name': 'NVIDIA H100 PCIe', 'bf16_dense': 756, 'mem_GB': 80, 'scaleup_GBps': 600},
    {'name': 'NVIDIA H200 SXM', 'bf16_dense': 989.4, 'mem_GB': 141, 'scaleup_GBps': 900},
    {'name': 'NVIDIA B200 (HGX)', 'bf16_dense': 2250, 'mem_GB': 180, 'scaleup_GBps': 1800},
    {'name': 'NVIDIA GB200 (per GPU)', 'bf16_dense': 2500, 'mem_GB': 186, 'scaleup_GBps': 1800},
    {'name': 'AMD MI300X', 'bf16_dense': 1307.4, 'mem_GB': 192, 'scaleup_GBps': 896},
    {'name': 'AMD MI355X', 'bf16_dense': 2500, 'mem_GB': 288, 'scaleup_GBps': 1075.2},
    {'name': 'Google TPU v4', 'bf16_dense': 275, 'mem_GB': 34.4, 'scaleup_GBps': '—'},
    {'name': 'Google TPU v5p', 'bf16_dense': 459, 'mem_GB': 102, 'scaleup_GBps': 1200},
]


def row_named(rows: list[dict], value: str, key: str = "name") -> dict:
    """The row of ``rows`` (a ``data_rows`` table) whose ``key`` is ``value``. Raises KeyError
    naming the value when no row has it (a device the table was not built with)."""
    for row in rows:
        if row.get(key) == value:
            return row
    raise KeyError(f"no row with {key} {value!r} in the built-in table")
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
