#!/usr/bin/env python
"""quantize_weights.py: weight-only quantization of a small trained LM, and what it costs in quality.

Trains a small byte-level causal LM (default 2 transformer blocks of width 128) on a JSONL corpus
(``--corpus``, default the book's ``data/training/corpus.jsonl``; every 10th document held out),
measures its held-out bits per byte, then, for each scheme of ``--schemes``, replaces the weight
of every nn.Linear by its round-to-nearest quantized-then-dequantized value, measures again and
puts the weights back. Schemes: ``int<B>`` (2..8 bits, one scale per output channel),
``int<B>-g<N>`` (one scale per group of N inputs), ``-asym`` (a zero-point), ``bf16``, ``fp16``.
Per scheme: bits per byte and its change from fp32, perplexity per byte, the relative weight
error ||W - W'||_F / ||W||_F, the stored bytes and bits per weight, scales included (bits per
byte of text, 1 MB = 1e6 bytes). The model runs in fp32 (fake quantization): quality and bytes,
not kernel speed. The method in full: book/en/inference/quantization.md.

Plain ``python`` on CPU (deterministic for a seed), or on one GPU with ``--device cuda``::

    python quantize_weights.py                                   # defaults, about 80 s on one core
    python quantize_weights.py --schemes int8,int4,int4-gG,int3-g64,int2-g32 --group-sizes 16,32,64
    python quantize_weights.py --include-embedding --scale-dtype bf16 --json q.json

Example output (4 of its 10 schemes; results/inference/quantize_weights-cpu.json)::

    scheme          bits/w weight MB   saved bits/byte   change       % ppl/byte err mean  err max
    fp32            32.000    1.5729 -100.0%    1.4659  +0.0000  +0.00%   2.7623  0.00000  0.00000
    int8             8.094    0.3978   49.4%    1.4659  -0.0000  -0.00%   2.7623  0.00705  0.00847
    int4             4.094    0.2012   74.4%    1.5555  +0.0896  +6.11%   2.9393  0.12792  0.15322
    int4-g32         4.500    0.2212   71.9%    1.5146  +0.0487  +3.32%   2.8572  0.09840  0.10432

Exit status: 0 ok, 1 failure, 2 usage (checked before training), 130/143 interrupted by
Ctrl-C/SIGTERM (during the schemes, the rows done are printed and written, "interrupted": true).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

PROG = "quantize_weights.py"
# The book's corpus, when this script sits in its clone (scripts/<part>/); .parent, unlike
# .parents[2], also works for a copy at the top of a file system.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "data" / "training" / "corpus.jsonl"
MAX_STEPS = 100_000
MAX_SCHEMES = 32
SCALE_BITS = {"fp16": 16, "bf16": 16, "fp32": 32}
FLOAT_SCHEMES = {"bf16": 16, "fp16": 16}
DEFAULT_SCHEMES = "bf16,int8,int8-g128,int4,int4-gG,int4-asym,int4-g128-asym"
SCHEME_RE = re.compile(r"int(\d+)(?:-g(\d+|G))?(-asym)?")


# --- quantization: pure functions of one weight matrix ---

@dataclass(frozen=True)
class Scheme:
    """One way to store the weights: ``bits``-bit integers with one scale per ``group_size``
    inputs of a row (None: per output channel, the whole row), with a zero-point when
    ``asymmetric``; or a 16-bit float format (``float_dtype``: "bf16" or "fp16")."""
    name: str
    bits: int
    group_size: int | None = None
    asymmetric: bool = False
    float_dtype: str | None = None


def parse_scheme(name: str, group_sizes: list[int]) -> list[Scheme]:
    """The scheme(s) a name stands for (``int4-gG``: one per group size); ValueError says why a
    name is not one."""
    if name in FLOAT_SCHEMES:
        return [Scheme(name, FLOAT_SCHEMES[name], float_dtype=name)]
    m = SCHEME_RE.fullmatch(name)
    if not m:
        raise ValueError(f"unknown scheme {name!r}; expected bf16, fp16, int<B>, int<B>-g<N>, "
                         "int<B>-gG, each optionally ending in -asym (e.g. int4-g128-asym)")
    bits = int(m.group(1))
    if not 2 <= bits <= 8:
        raise ValueError(f"scheme {name!r}: {bits} bits; this script quantizes to 2..8 bits")
    asym = bool(m.group(3))
    if m.group(2) is None:
        return [Scheme(name, bits, None, asym)]
    sizes = group_sizes if m.group(2) == "G" else [int(m.group(2))]
    out = []
    for g in sizes:
        if g < 1:
            raise ValueError(f"scheme {name!r}: group size must be >= 1")
        out.append(Scheme(f"int{bits}-g{g}" + ("-asym" if asym else ""), bits, g, asym))
    return out


def qrange(bits: int, symmetric: bool) -> tuple[int, int]:
    """The integer range of ``bits``-bit values: signed for symmetric, unsigned with a zero-point."""
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if symmetric else (0, 2 ** bits - 1)


def effective_bits(bits: int, group_size: int, asymmetric: bool = False, scale_bits: int = 16) -> float:
    """Stored bits per weight: the weight's ``bits`` plus its share of the group's scale
    (``scale_bits``) and, when asymmetric, of its ``bits``-bit zero-point."""
    return bits + (scale_bits + (bits if asymmetric else 0)) / group_size


def storage_bytes(shape: tuple[int, int], bits: int, group_size: int | None, asymmetric: bool = False,
                  scale_bits: int = 16) -> float:
    """Bytes of an out x in matrix stored as packed ``bits``-bit integers plus one scale (and
    zero-point) per group of ``group_size`` inputs of a row (None: per row)."""
    out, inp = shape
    groups = out * (inp // (group_size or inp))
    return (out * inp * bits + groups * (scale_bits + (bits if asymmetric else 0))) / 8


def _round_up_to(x, dtype):
    """``x`` (float32, >= 0) rounded up to a value of ``dtype`` (returned in ``dtype``), so that a
    scale stored in that format never shrinks and w / s never leaves the integer range."""
    import torch
    y = x.to(dtype)
    if dtype == torch.float32:
        return y
    return torch.where(y.float() < x, torch.nextafter(y, torch.full_like(y, math.inf)), y)


def quantize(w, bits: int, group_size: int | None = None, symmetric: bool = True, scale_dtype=None):
    """Round-to-nearest quantization of the 2-D weight ``w`` (out x in): one scale per
    ``group_size`` consecutive inputs of each row (None: per output channel). Returns
    ``(q, scale, zero)``: q (out x in) int8 (symmetric, in -2^(B-1)..2^(B-1)-1) or uint8
    (asymmetric, in 0..2^B-1); scale (out x groups) in ``scale_dtype`` (default float16); zero
    (out x groups, uint8) or None when symmetric. Every element of dequantize(q, scale, zero) is
    within scale / 2 of ``w``. Raises ValueError for a shape, a group size or a value it cannot
    take."""
    import torch
    scale_dtype = torch.float16 if scale_dtype is None else scale_dtype
    if w.dim() != 2:
        raise ValueError(f"expected a 2-D weight (out x in), got shape {tuple(w.shape)}")
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be in 2..8, got {bits}")
    out, inp = w.shape
    g = inp if group_size is None else group_size
    if g < 1 or inp % g:
        raise ValueError(f"group size {g} does not divide the input width {inp}")
    wg = w.detach().float().reshape(out, inp // g, g)
    if not torch.isfinite(wg).all():
        raise ValueError("the weight holds nan or inf")
    lo_q, hi_q = qrange(bits, symmetric)
    if symmetric:
        amax = wg.abs().amax(dim=-1)
        scale = _round_up_to(torch.where(amax > 0, amax / hi_q, torch.ones_like(amax)), scale_dtype)
        s = scale.float()[..., None]
        q = torch.clamp(torch.round(wg / s), lo_q, hi_q).to(torch.int8)
        zero = None
    else:
        lo = torch.clamp(wg.amin(dim=-1), max=0.0)
        hi = torch.clamp(wg.amax(dim=-1), min=0.0)
        span = hi - lo
        scale = _round_up_to(torch.where(span > 0, span / hi_q, torch.ones_like(span)), scale_dtype)
        s = scale.float()
        zero = torch.clamp(torch.round(-lo / s), 0, hi_q)
        q = torch.clamp(torch.round(wg / s[..., None]) + zero[..., None], 0, hi_q).to(torch.uint8)
        zero = zero.to(torch.uint8)
    if not torch.isfinite(scale).all():
        raise ValueError(f"a scale overflows {scale_dtype} (largest |weight| "
                         f"{wg.abs().max().item():.3g}); use a wider --scale-dtype")
    return q.reshape(out, inp), scale, zero


def dequantize(q, scale, zero=None):
    """The float32 weight that ``(q, scale, zero)`` of :func:`quantize` stands for: s q, or
    s (q - z) with a zero-point; the group size follows from the shapes."""
    out, inp = q.shape
    groups = scale.shape[1]
    qg = q.reshape(out, groups, inp // groups).float()
    if zero is not None:
        qg = qg - zero.float()[..., None]
    return (qg * scale.float()[..., None]).reshape(out, inp)


def fake_quantize(w, scheme: Scheme, scale_dtype):
    """``w`` after storing it as ``scheme`` and reading it back (float32)."""
    import torch
    if scheme.float_dtype:
        return w.detach().to(torch.bfloat16 if scheme.float_dtype == "bf16" else torch.float16).float()
    return dequantize(*quantize(w, scheme.bits, scheme.group_size, not scheme.asymmetric, scale_dtype))


def scheme_bytes(shape: tuple[int, int], scheme: Scheme, scale_bits: int) -> float:
    if scheme.float_dtype:
        return shape[0] * shape[1] * 2
    return storage_bytes(shape, scheme.bits, scheme.group_size, scheme.asymmetric, scale_bits)


# --- data, model, training and the measurement ---
# (Reading the corpus, load_corpus and split_documents, and the training loop, train_lm, are
# shared with other scripts: they are in the generated block at the end.)

def build_model(layers: int, width: int, heads: int, context: int):
    """A small pre-LayerNorm causal transformer over bytes (vocabulary 256, tied embedding)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (z.transpose(1, 2) for z in
                       self.qkv(self.ln1(x)).view(b, t, 3, heads, width // heads).unbind(2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, width))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.context = context
            self.tok = nn.Embedding(VOCAB, width)
            self.pos = nn.Parameter(torch.zeros(context, width))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos, std=0.02)

        def forward(self, idx):
            x = self.tok(idx) + self.pos[:idx.shape[1]]
            for block in self.blocks:
                x = block(x)
            return self.ln(x) @ self.tok.weight.T

    return TinyLM()


def quantized_tensors(model, include_embedding: bool) -> dict:
    """name -> parameter of every weight this script quantizes: each nn.Linear's weight, and the
    tied token embedding (also the output head) with ``include_embedding``."""
    import torch.nn as nn
    out = {f"{name}.weight": m.weight for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if include_embedding:
        out["tok.weight"] = model.tok.weight
    return out


def eval_windows(docs: list[bytes], context: int):
    """Windows of ``context`` + 1 bytes and a mask of the predicted bytes to count, such that
    every byte of every document but its first is counted exactly once: windows start at 0,
    context, 2 context, ...; a document's remainder gets one last window ending with the document,
    counting only the bytes no earlier window counted. Documents shorter than a window are
    skipped. Returns (x long (n, context + 1), mask bool (n, context))."""
    import torch
    rows, masks = [], []
    for d in docs:
        if len(d) < context + 1:
            continue
        start = 0
        while start + context + 1 <= len(d):
            rows.append(list(d[start:start + context + 1]))
            masks.append([True] * context)
            start += context
        counted_to = start + 1  # bytes 1 .. start have been predicted
        if counted_to < len(d):
            s = len(d) - context - 1
            rows.append(list(d[s:]))
            masks.append([s + 1 + j >= counted_to for j in range(context)])
    return torch.tensor(rows, dtype=torch.long), torch.tensor(masks, dtype=torch.bool)


def bits_per_byte(model, x, mask, batch: int = 64) -> float:
    """Mean -log2 p(byte | earlier bytes of its window) over the bytes ``mask`` selects."""
    import torch
    total = 0.0
    with torch.inference_mode():
        for i in range(0, x.shape[0], batch):
            xb, mb = x[i:i + batch], mask[i:i + batch].to(x.device)
            nll = torch.nn.functional.cross_entropy(model(xb[:, :-1]).transpose(1, 2), xb[:, 1:],
                                                    reduction="none")
            total += nll[mb].double().sum().item()
    return total / int(mask.sum()) / math.log(2)


def train_and_measure(model, train: list[bytes], x, mask, args, rng: random.Random,
                      sync) -> tuple[list[float], float, float, float]:
    """Train the model, then measure its fp32 held-out bits per byte. Returns (the loss of every
    step, training seconds, bits per byte, measuring seconds); an interruption is an error, with
    nothing written."""
    losses: list[float] = []
    try:
        sync()
        t0 = time.perf_counter()
        train_lm(model, train, args.steps, args.batch, args.lr, rng, args.device, done=losses)
        sync()
        train_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        base = bits_per_byte(model, x, mask)
        sync()
        base_eval_s = time.perf_counter() - t0
    except Interrupted as stop:
        raise ScriptError(f"interrupted during training (step {len(losses)} of {args.steps}) or the "
                          "fp32 measurement; nothing written", stop.status) from None
    return losses, train_s, base, base_eval_s


def measure_scheme(model, x, mask, scheme: Scheme, targets: dict, originals: dict, scale_dtype,
                   scale_bits: int, sync) -> tuple[float, float, dict, float, float]:
    """Store every weight of ``targets`` as ``scheme`` and read it back, measure the held-out
    bits per byte, then put the ``originals`` back. Returns (bits per byte, bytes as stored,
    relative error per matrix, seconds to quantize, seconds to measure)."""
    import torch
    sync()
    t0 = time.perf_counter()
    errs, qbytes = {}, 0.0
    with torch.no_grad():
        for name, p in targets.items():
            w = originals[name]
            wq = fake_quantize(w, scheme, scale_dtype)
            errs[name] = (torch.linalg.norm(w.float() - wq) / torch.linalg.norm(w.float())).item()
            qbytes += scheme_bytes(tuple(w.shape), scheme, scale_bits)
            p.copy_(wq)
    sync()
    quantize_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        bpb = bits_per_byte(model, x, mask)
        sync()
        eval_s = time.perf_counter() - t0
    finally:
        with torch.no_grad():
            for name, p in targets.items():
                p.copy_(originals[name])
    return bpb, qbytes, errs, quantize_s, eval_s


# --- the report ---

HEADER = (f"{'scheme':<15} {'bits/w':>6} {'weight MB':>9} {'saved':>7} {'bits/byte':>9} "
          f"{'change':>8} {'%':>7} {'ppl/byte':>8} {'err mean':>8} {'err max':>8}")


def format_row(r: dict) -> str:
    return (f"{r['scheme']:<15} {r['effective_bits']:>6.3f} {r['quantized_bytes'] / 1e6:>9.4f} "
            f"{100 * r['saved_vs_bf16']:>6.1f}% {r['bits_per_byte']:>9.4f} "
            f"{r['delta_bits_per_byte']:>+8.4f} {r['delta_pct']:>+6.2f}% {r['ppl_per_byte']:>8.4f} "
            f"{r['rel_err_mean']:>8.5f} {r['rel_err_max']:>8.5f}")


def scheme_result(run: dict, name: str, bpb: float, qbytes: float, errs: dict, **extra) -> dict:
    """One row of the table and the JSON: scheme ``name`` measured at ``bpb`` bits per byte,
    stored in ``qbytes``, with relative errors ``errs`` per matrix, against the fp32 ``run``."""
    base, n_weights, bf16_bytes = run["base"], run["n_weights"], 2 * run["n_weights"]
    worst = max(errs, key=errs.get) if errs else None
    return {"scheme": name, **extra, "bits_per_byte": bpb, "delta_bits_per_byte": bpb - base,
            "delta_pct": 100 * (bpb - base) / base, "ppl_per_byte": 2 ** bpb,
            "nats_per_byte": bpb * math.log(2),
            "rel_err_mean": sum(errs.values()) / len(errs) if errs else 0.0,
            "rel_err_max": errs[worst] if errs else 0.0, "rel_err_worst_layer": worst,
            "rel_err_per_layer": errs, "quantized_bytes": qbytes,
            "effective_bits": 8 * qbytes / n_weights, "bf16_bytes": bf16_bytes,
            "saved_vs_bf16": 1 - qbytes / bf16_bytes,
            "model_bytes": qbytes + 2 * (run["n_params"] - n_weights)}


def print_header(args, run: dict) -> None:
    losses = run["losses"]
    print(f"# {PROG}: {args.layers} x {args.width} byte-level LM, {run['n_params']} parameters, "
          f"{run['train_docs']} training / {run['held_docs']} held-out documents, {args.device}, "
          f"{args.threads} thread(s)")
    print(f"# trained {args.steps} steps of {args.batch} x {args.context} bytes in {run['train_s']:.1f} s, "
          + (f"loss {losses[0]:.3f} -> {sum(losses[-10:]) / len(losses[-10:]):.3f} nats/byte"
             if losses else "untrained"))
    print(f"# quantized: {len(run['targets'])} weight matrices, {run['n_weights']} values"
          + (" (nn.Linear + tied embedding)" if args.include_embedding else
             " (every nn.Linear; embedding, biases, LayerNorms, positions not)")
          + f"; scales {args.scale_dtype}; held-out text: {run['eval_bytes']} bytes")
    print(HEADER)


def print_footer(rows: list[dict], elapsed: float, interrupted: bool) -> None:
    worst = max(rows[1:], key=lambda r: r["delta_bits_per_byte"], default=None)
    print("# bits/w: stored bits per quantized weight (scales and zero-points included); saved: "
          "1 - bytes / (bytes of the same weights in bf16)")
    print("# change, %: held-out bits/byte minus fp32's; ppl/byte = 2^(bits/byte); err: "
          "||W - W'||_F / ||W||_F, mean and max over the matrices"
          + (f" (max of {worst['scheme']} in {worst['rel_err_worst_layer']})" if worst else ""))
    print(f"# {elapsed:.1f} s in all" + (" (interrupted)" if interrupted else ""))


def json_report(args, run: dict, rows: list[dict], interrupted: bool, elapsed: float) -> dict:
    """The --json document (tools/schemas/quantize_weights.schema.json)."""
    torch_version, device_name, losses = run["torch_version"], run["device_name"], run["losses"]
    settings = {k: getattr(args, k) for k in (
        "schemes", "group_sizes", "scale_dtype", "include_embedding", "layers", "width", "heads",
        "context", "steps", "batch", "lr", "seed", "threads", "device")}
    settings["corpus"] = os.path.basename(args.corpus)
    return {**envelope("quantize_weights", device_name, {"torch": torch_version}),
            "torch_version": torch_version, "device_name": device_name,
            "settings": settings,
            "documents": {"train": run["train_docs"], "held_out": run["held_docs"]},
            "model": {"parameters": run["n_params"], "quantized_weights": run["n_weights"],
                      "quantized_matrices": list(run["targets"]),
                      "train_loss_first": losses[0] if losses else None,
                      "train_loss_last10": sum(losses[-10:]) / len(losses[-10:]) if losses else None,
                      "train_s": round(run["train_s"], 2)},
            "eval": {"bytes": run["eval_bytes"], "windows": run["windows"], "context": args.context},
            "units": {"bits_per_byte": "bits (log2) per byte of held-out text",
                      "ppl_per_byte": "2^bits_per_byte", "bytes": "bytes (1 MB = 1e6 bytes)",
                      "effective_bits": "stored bits per quantized weight, scales and zero-points included",
                      "rel_err": "||W - W'||_F / ||W||_F", "times": "seconds (wall clock)",
                      "model_bytes": "quantized matrices as stored + every other parameter in bf16"},
            "results": rows, "interrupted": interrupted, "elapsed_s": round(elapsed, 2)}


# --- command line ---

def int_list(text: str, what: str, lo: int, hi: int, most: int) -> list[int]:
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in items):
        raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of {what}s")
    if len(items) > most:
        raise argparse.ArgumentTypeError(f"{len(items)} {what}s; at most {most}")
    parse = number(int, lo, hi)
    values = []
    for s in items:
        try:
            v = parse(s)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"{what} {err}") from None
        if v in values:
            raise argparse.ArgumentTypeError(f"{what} {v} given twice")
        values.append(v)
    return values


def group_sizes(text: str) -> list[int]:
    return int_list(text, "group size", 1, 1 << 20, 16)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Weight-only round-to-nearest quantization (int8/int4, per channel or "
        "per group, symmetric or with a zero-point) of a small byte-level LM trained on the book's "
        "corpus: held-out bits per byte, weight error and bytes per scheme.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--corpus", type=nonempty, default=str(DEFAULT_CORPUS),
                   help="JSONL file, one object with a \"text\" string per line "
                   "(default: the book's data/training/corpus.jsonl)")
    p.add_argument("--schemes", type=nonempty, default=DEFAULT_SCHEMES, metavar="S,S,...",
                   help="schemes to measure: bf16, fp16, int<B> (per output channel), int<B>-g<N> "
                   "(groups of N inputs), int<B>-gG (one per --group-sizes), each with an optional "
                   f"-asym suffix (zero-point); B in 2..8 (default {DEFAULT_SCHEMES})")
    p.add_argument("--group-sizes", type=group_sizes, default=[32, 64, 128], metavar="N,N,...",
                   help="group sizes that -gG in --schemes stands for (default 32,64,128)")
    p.add_argument("--scale-dtype", choices=tuple(SCALE_BITS), default="fp16",
                   help="format of the stored scales (default fp16: 2 bytes per group or row)")
    p.add_argument("--include-embedding", action="store_true",
                   help="quantize the token embedding (tied to the output head) too (default: no)")
    p.add_argument("--layers", type=number(int, 1, 64), default=2, help="transformer blocks (default 2)")
    p.add_argument("--width", type=number(int, 8, 8192), default=128, help="model width (default 128)")
    p.add_argument("--heads", type=number(int, 1, 64), default=4, help="attention heads (default 4)")
    p.add_argument("--context", type=number(int, 8, 4096), default=128,
                   help="bytes per training and evaluation window (default 128)")
    p.add_argument("--steps", type=number(int, 0, MAX_STEPS), default=1500,
                   help=f"training steps (default 1500, at most {MAX_STEPS})")
    p.add_argument("--batch", type=number(int, 1, 4096), default=8, help="training windows per step (default 8)")
    p.add_argument("--lr", type=number(float, 0, 1, lo_open=True), default=3e-3,
                   help="peak AdamW learning rate (default 3e-3, cosine decay to 10%%)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=number(int, 1, 1024), default=1,
                   help="torch CPU threads (default 1: deterministic and polite)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the model runs (default cpu)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write settings and one result per scheme as JSON ('-': stdout)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.width % args.heads:
        parser.error(f"--heads ({args.heads}) must divide --width ({args.width})")
    names = [s.strip() for s in args.schemes.split(",")]
    if any(not s for s in names):
        parser.error(f"--schemes {args.schemes!r}: an empty name; give a comma list such as int8,int4-g128")
    schemes: list[Scheme] = []
    for name in names:
        try:
            expanded = parse_scheme(name, args.group_sizes)
        except ValueError as err:
            parser.error(f"--schemes: {err}")
        for s in expanded:
            if s.group_size is not None and args.width % s.group_size:
                where = "--group-sizes" if name.endswith(("-gG", "-gG-asym")) else "--schemes"
                divisors = ", ".join(str(d) for d in range(1, args.width + 1) if args.width % d == 0
                                     and d >= 8)
                parser.error(f"{where}: {s.name}: group size {s.group_size} does not divide "
                             f"{args.width}, the input width of blocks.0.qkv (and of every layer "
                             f"fed by the --width {args.width} residual stream); use one of "
                             f"{divisors or args.width}")
            if any(s.name == t.name for t in schemes):
                parser.error(f"--schemes: {s.name} given twice")
            schemes.append(s)
    if len(schemes) > MAX_SCHEMES:
        parser.error(f"--schemes: {len(schemes)} schemes; at most {MAX_SCHEMES} per run "
                     "(each costs one pass over the held-out text)")
    args.scheme_list = schemes
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=[args.corpus])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    texts = load_corpus(args.corpus, args.context + 1, "--context")  # before torch: a bad corpus fails fast

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ScriptError("--device cuda: CUDA is not available (torch "
                          f"{torch.__version__}); use --device cpu", EXIT_USAGE)
    device = args.device
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    started = time.monotonic()
    scale_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.scale_dtype]
    scale_bits = SCALE_BITS[args.scale_dtype]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    on_stop_signals()  # Ctrl-C, scancel and a job's time limit: during the schemes, keep the rows
    train, held = split_documents(texts)
    model = build_model(args.layers, args.width, args.heads, args.context).to(device)
    x, mask = eval_windows(held, args.context)
    x = x.to(device)
    losses, train_s, base, base_eval_s = train_and_measure(model, train, x, mask, args, rng, sync)
    targets = quantized_tensors(model, args.include_embedding)
    run = {"n_params": sum(p.numel() for p in model.parameters()),
           "n_weights": sum(p.numel() for p in targets.values()), "targets": targets, "base": base,
           "losses": losses, "train_s": train_s, "train_docs": len(train), "held_docs": len(held),
           "eval_bytes": int(mask.sum()), "windows": int(x.shape[0]), "torch_version": torch.__version__,
           "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
    rows = [scheme_result(run, "fp32", base, 4 * run["n_weights"], {}, bits=32, group_size=None,
                          asymmetric=False, quantize_s=0.0, eval_s=base_eval_s)]
    print_header(args, run)
    print(format_row(rows[0]), flush=True)

    originals = {name: p.detach().clone() for name, p in targets.items()}
    stopped = None
    try:
        for scheme in args.scheme_list:
            bpb, qbytes, errs, quantize_s, eval_s = measure_scheme(
                model, x, mask, scheme, targets, originals, scale_dtype, scale_bits, sync)
            rows.append(scheme_result(run, scheme.name, bpb, qbytes, errs, bits=scheme.bits,
                                      group_size=scheme.group_size, asymmetric=scheme.asymmetric,
                                      quantize_s=quantize_s, eval_s=eval_s))
            print(format_row(rows[-1]), flush=True)
    except Interrupted as stop:
        stopped = stop
        print(f"# interrupted: {len(rows) - 1} of {len(args.scheme_list)} schemes done")
    elapsed = time.monotonic() - started
    print_footer(rows, elapsed, bool(stopped))
    if args.json:
        text = json.dumps(json_report(args, run, rows, bool(stopped), elapsed), indent=1)
        if args.json == "-":
            print(text)
        else:
            write_atomic(args.json, text + "\n")
            print(f"# wrote {args.json}")
    return stopped.status if stopped else 0


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


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM (scancel, a job's time limit), raised where the main thread is
    by the handler ``on_stop_signals`` installs. ``signum`` is the signal, ``name`` its name and
    ``status`` the exit status of a run it stops, 128 + signum (130, 143). A KeyboardInterrupt,
    so what catches Ctrl-C catches both; run_main exits with ``status``."""

    def __init__(self, signum: int = 2):  # SIGINT
        import signal
        self.signum, self.status, self.name = signum, 128 + signum, signal.Signals(signum).name
        super().__init__(self.name)


def on_stop_signals() -> list[int]:
    """From now on Ctrl-C and SIGTERM raise Interrupted, so that a run writes what it has before
    it exits with 128 + the signal; Ctrl-C too where a shell started the job with SIGINT ignored
    (a background job). Returns the list that receives each signal as it comes, for the code that
    sees the exception only wrapped (DCP wraps what a save raises)."""
    import signal
    stopped_by: list[int] = []

    def stop(signum, frame):
        stopped_by.append(signum)
        raise Interrupted(signum)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    return stopped_by


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


def command_line(argv=None, script: str | None = None) -> str:
    """``python SCRIPT ARGS``, how this script was run, for a results file's ``command``: SCRIPT
    is sys.argv[0] relative to the current folder, ARGS sys.argv[1:]; where main was called with
    ``argv`` (a test, a calculator page) ARGS are ``argv``, and SCRIPT is ``script`` (the file's
    name) when sys.argv[0] names another program."""
    import shlex
    path = sys.argv[0]
    if argv is not None and script and os.path.basename(path) != script:
        path = script
    path = os.path.relpath(path) if os.path.exists(path) else path
    return shlex.join(["python", path, *(sys.argv[1:] if argv is None else argv)])


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def envelope(benchmark: str, device: str | None, versions: dict | None = None,
             command: str | None = None, argv=None) -> dict:
    """The keys every results file starts with (tools/schemas/envelope.schema.json), in order:
    ``benchmark`` (the script's file stem), ``schema_version`` 1, ``date_utc`` (now),
    ``command`` (``command``, else ``command_line(argv)``), ``versions`` (Python's, and
    ``versions``: {"torch": ...}) and ``device`` (None where the result does not depend on the
    hardware). The script adds its own keys and ``results``."""
    import platform
    return {"benchmark": benchmark, "schema_version": 1, "date_utc": date_utc(),
            "command": command or command_line(argv, f"{benchmark}.py"),
            "versions": {"python": platform.python_version(), **(versions or {})}, "device": device}


HELD_OUT_EVERY = 10  # every 10th usable document is held out


VOCAB = 256  # bytes


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


def split_documents(texts: list[str]) -> tuple[list[bytes], list[bytes]]:
    """(training, held-out) documents as bytes: every HELD_OUT_EVERY-th one is held out."""
    docs = [t.encode("utf-8") for t in texts]
    held = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY == 0]
    train = [d for i, d in enumerate(docs) if i % HELD_OUT_EVERY != 0]
    return train, held


def train_lm(model, docs: list[bytes], steps: int, batch: int, lr: float, rng,
             device: str = "cpu", done: list | None = None) -> list[float]:
    """``steps`` AdamW steps of next-byte cross-entropy on random windows of ``docs`` (those at
    least as long as the model's context + 1, for the shifted target), drawn with ``rng`` (a
    random.Random); returns the loss of every step (nats/byte). ``done``, when given, receives
    each step's loss as it is taken (what an interrupted run has)."""
    import torch
    window = model.context + 1
    usable = [d for d in docs if len(d) >= window]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = max(1, steps // 20)
    model.train()
    losses = [] if done is None else done
    for step in range(steps):
        rows = []
        for _ in range(batch):
            d = usable[rng.randrange(len(usable))]
            s = rng.randrange(len(d) - window + 1)
            rows.append(list(d[s:s + window]))
        x = torch.tensor(rows, dtype=torch.long, device=device)
        for group in opt.param_groups:  # linear warm-up, then cosine decay to 10% of lr
            group["lr"] = lr * min(1.0, (step + 1) / warmup) * (0.55 + 0.45 * math.cos(math.pi * step / steps))
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
