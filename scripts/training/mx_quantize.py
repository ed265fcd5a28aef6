#!/usr/bin/env python
"""mx_quantize.py: emulate block-scaled low precision (MXFP8, MXFP6, MXFP4, NVFP4) on CPU and measure its error.

Each tensor is quantized to a format, dequantized back to fp32 ("fake quantization") and compared
with the original: the weights and matmul inputs of the book's tiny transformer (the model of
make_tiny_model.py in scripts/debug, rebuilt from its config and seed, or read with
``--checkpoint``) and, with ``--synthetic``, three Gaussian matrices (plain, with rare outliers,
with outlier channels). Formats (``--formats``): ``bf16``; ``fp8_e4m3`` and ``fp4_e2m1`` with
one fp32 scale per tensor; OCP MX v1.0 ``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp6_e3m2``,
``mxfp6_e2m3`` and ``mxfp4_e2m1`` (``--mx-block`` elements share an E8M0 scale; ``--mx-scale``
floor is the spec's rule, ceil Transformer Engine's); ``nvfp4`` (E2M1 in blocks of 16 with an
E4M3 scale, and an fp32 scale per tensor). The Tensor precision chapter gives the rules, the
results schema (tools/schemas/mx_quantize.schema.json) each measured column. A float64
emulation (stdlib and torch, one process): it shows the numerics, not the speed::

    python mx_quantize.py                              # tiny model, random init (seed 0)
    python mx_quantize.py --checkpoint /tmp/tiny --mx-scale ceil --json mx.json

Exit status: 0 ok, 1 failure (a tensor with NaN/Inf), 2 usage (also a --checkpoint that is
unreadable or too large), 130/143 interrupted (``--json`` keeps the rows measured so far).

Example output (2-core VM, torch 2.13.0+cpu; the chapter shows all of it)::

    $ python scripts/training/mx_quantize.py
    ...
    weights (10 tensors, 71,424 values)
      format       bits   rel_rms  SNR_dB   max_abs   zero%    sat%
      bf16        16.00  1.67e-03    55.5  4.88e-04   0.000   0.000
      ...
      nvfp4        4.50  1.02e-01    19.8  2.55e-02   4.441   3.131
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

PROG = "mx_quantize.py"


# --- formats ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Element:
    """A sign-exponent-mantissa element format without Inf (the MX and NVFP4 element types).

    ``ebits``/``mbits``: exponent and stored mantissa bits; ``bias``: exponent bias;
    ``max_normal``: the largest finite magnitude (E4M3 stops at 448 because S.1111.111 is NaN;
    the FP6 and FP4 types use every code for numbers). Derived: ``emax`` = floor(log2 max_normal),
    ``emin`` = 1 - bias (exponent of the smallest normal), ``min_subnormal`` = 2^(emin - mbits).
    Values: OCP MX v1.0 section 5.3 (FP8 per OFP8, FP6 E3M2/E2M3, FP4 E2M1)."""
    name: str
    ebits: int
    mbits: int
    bias: int
    max_normal: float

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def emax(self) -> int:
        return math.floor(math.log2(self.max_normal))

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (self.emin - self.mbits)


ELEMENTS = {
    "e4m3": Element("E4M3", 4, 3, 7, 448.0),
    "e5m2": Element("E5M2", 5, 2, 15, 57344.0),
    "e3m2": Element("E3M2", 3, 2, 3, 28.0),
    "e2m3": Element("E2M3", 2, 3, 1, 7.5),
    "e2m1": Element("E2M1", 2, 1, 1, 6.0),
}
E8M0_BIAS, E8M0_NAN = 127, 255          # OCP MX v1.0 section 5.4.1: 2^-127 .. 2^127, 0xFF = NaN
MX_BLOCK, NVFP4_BLOCK = 32, 16

# format name -> (kind, element, scale bits per block); the block size comes from the options
FORMATS = {
    "bf16": ("cast", None, 0),
    "fp8_e4m3": ("tensor", "e4m3", 0),
    "fp4_e2m1": ("tensor", "e2m1", 0),
    "mxfp8_e4m3": ("mx", "e4m3", 8),
    "mxfp8_e5m2": ("mx", "e5m2", 8),
    "mxfp6_e3m2": ("mx", "e3m2", 8),
    "mxfp6_e2m3": ("mx", "e2m3", 8),
    "mxfp4_e2m1": ("mx", "e2m1", 8),
    "nvfp4": ("nvfp4", "e2m1", 8),
}
SCALE_RULES = ("floor", "ceil")


def element(name) -> Element:
    """The Element for ``name`` ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1") or an Element itself;
    ValueError for anything else."""
    if isinstance(name, Element):
        return name
    if name not in ELEMENTS:
        raise ValueError(f"unknown element format {name!r} (known: {', '.join(ELEMENTS)})")
    return ELEMENTS[name]


def element_grid(name) -> list[float]:
    """Every non-negative value of the element format, ascending (E2M1: 0, 0.5, 1, 1.5, 2, 3, 4, 6).
    Built from the bit patterns: subnormals (exponent field 0) and normals up to max_normal."""
    el = element(name)
    values = set()
    for field in range(2 ** el.ebits):
        for m in range(2 ** el.mbits):
            if field == 0:
                v = m * 2.0 ** (el.emin - el.mbits)
            else:
                v = (1 + m / 2 ** el.mbits) * 2.0 ** (field - el.bias)
            if v <= el.max_normal:
                values.add(v)
    return sorted(values)


def _check_finite(x, what: str = "input"):
    import torch
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"{what} must be a floating-point torch.Tensor, not {type(x).__name__}")
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        raise ValueError(f"{what} has {bad} NaN/Inf value(s); block formats have no encoding for them "
                         "here (a NaN would poison its whole block's scale)")


def round_to_element(x, name):
    """Round every value of ``x`` (a float tensor, any shape, already divided by its scale) to the
    nearest value of element format ``name``, ties to even, saturating beyond the largest normal.

    Returns (q, saturated): q a float64 tensor of x's shape holding values of the format's grid
    (with x's signs, -0 for negative values that round to zero), saturated a bool tensor marking
    |x| > max_normal (clamped to ±max_normal). Within the range the spacing is 2^(e - mbits) for a
    value in [2^e, 2^(e+1)), and 2^(emin - mbits) below the smallest normal (subnormals), so this is
    IEEE-style round-to-nearest-even restricted to the format (OCP MX v1.0 section 6.3: normal
    numbers beyond the element range are clamped to the max normal). Raises ValueError for NaN/Inf
    values, TypeError for a non-float input."""
    import torch
    el = element(name)
    _check_finite(x)
    x = x.to(torch.float64)
    a = x.abs()
    _, e = torch.frexp(a)                        # a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1
    e = (e.to(torch.int64) - 1).clamp(min=el.emin)
    step = torch.ldexp(torch.ones_like(a), (e - el.mbits).to(a.dtype))
    q = torch.round(a / step) * step             # torch.round: half to even; a / step is exact
    saturated = a > el.max_normal
    q = q.clamp(max=el.max_normal)
    return torch.copysign(q, x), saturated


def e8m0_encode(exponent):
    """E8M0 bytes (uint8) for integer scale exponents k (the scale is 2^k): k + 127. Raises
    ValueError if some k is outside [-127, 127] (byte 255 is NaN). OCP MX v1.0 section 5.4.1."""
    import torch
    k = torch.as_tensor(exponent).to(torch.int64)
    if bool(((k < -E8M0_BIAS) | (k > E8M0_BIAS)).any()):
        raise ValueError(f"E8M0 holds exponents -127..127, got {int(k.min())}..{int(k.max())}")
    return (k + E8M0_BIAS).to(torch.uint8)


def e8m0_decode(code):
    """The scales (float64) that E8M0 bytes encode: 2^(byte - 127); byte 255 decodes to NaN."""
    import torch
    b = torch.as_tensor(code).to(torch.int64)
    out = torch.ldexp(torch.ones(b.shape, dtype=torch.float64), (b - E8M0_BIAS).to(torch.float64))
    return torch.where(b == E8M0_NAN, torch.full_like(out, math.nan), out)


def _blocks(x, block_size: int):
    """x (any shape, last dim n) as float64 blocks (rows, ceil(n / block_size), block_size), zero
    padded; and a function that undoes it."""
    import torch
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block size must be a positive integer, got {block_size!r}")
    shape = x.shape
    n = shape[-1] if x.dim() else 1
    flat = x.reshape(-1, n).to(torch.float64)
    pad = (-n) % block_size
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    blocks = flat.reshape(flat.shape[0], -1, block_size)

    def unblock(b):
        return b.reshape(flat.shape[0], -1)[:, :n].reshape(shape)
    return blocks, unblock


@dataclass
class Quantized:
    """Result of a quantizer: ``values`` (float32, the input's shape: the dequantized tensor),
    ``saturated`` (bool, the input's shape: clamped elements), ``scales`` (float64, one per block,
    shape (rows, blocks); one element for a per-tensor scale), ``scale_exponents`` (int64, MX only:
    log2 of each scale, which E8M0 stores as exponent + 127)."""
    values: object
    saturated: object
    scales: object
    scale_exponents: object = None


def mx_scale_exponent(amax, name, rule: str = "floor"):
    """The shared-scale exponent k (scale 2^k) of MX blocks whose largest magnitude is ``amax``
    (a float tensor): rule "floor" (OCP MX v1.0 section 6.3; Rouhani et al. 2023, Algorithm 1)
    k = floor(log2 amax) - emax_elem; rule "ceil" (Transformer Engine, cuDNN) k = ceil(log2(amax /
    max_normal)). Clamped to E8M0's -127..127; an all-zero block gets -127. int64 out. Raises
    ValueError for an unknown rule or format."""
    import torch
    el = element(name)
    if rule not in SCALE_RULES:
        raise ValueError(f"unknown scale rule {rule!r} (known: {', '.join(SCALE_RULES)})")
    a = amax.to(torch.float64)
    zero = a == 0
    a = torch.where(zero, torch.ones_like(a), a)
    mant, e = torch.frexp(a)                     # a = mant * 2^e, mant in [0.5, 1)
    floor_log2 = e.to(torch.int64) - 1
    if rule == "floor":
        k = floor_log2 - el.emax
    else:
        r = a / el.max_normal
        mant, e = torch.frexp(r)
        k = e.to(torch.int64) - 1 + (mant != 0.5).to(torch.int64)   # ceil(log2 r)
    k = torch.where(zero, torch.full_like(k, -E8M0_BIAS), k)
    return k.clamp(-E8M0_BIAS, E8M0_BIAS)


def mx_quantize(x, name: str = "e2m1", block_size: int = MX_BLOCK, rule: str = "floor") -> Quantized:
    """Quantize ``x`` (float tensor, any shape; blocks of ``block_size`` along the last dimension,
    zero-padded) to an MX format with element type ``name`` and one E8M0 scale per block, and
    dequantize it. Per block: k = mx_scale_exponent(amax, name, rule), elements =
    round_to_element(x / 2^k) (nearest even, saturating), values = elements * 2^k. The concrete MX
    formats of OCP MX v1.0 (section 5, table 1) use block_size 32. Raises ValueError for NaN/Inf
    input, an unknown format or rule, or a block size < 1."""
    import torch
    _check_finite(x)
    blocks, unblock = _blocks(x, block_size)
    k = mx_scale_exponent(blocks.abs().amax(dim=-1), name, rule)
    scale = torch.ldexp(torch.ones_like(blocks[..., 0]), k.to(torch.float64))
    q, sat = round_to_element(blocks / scale[..., None], name)
    return Quantized(unblock(q * scale[..., None]).to(torch.float32), unblock(sat), scale, k)


def nvfp4_quantize(x, block_size: int = NVFP4_BLOCK, tensor_scale: float | None = None) -> Quantized:
    """Quantize ``x`` (float tensor, any shape; blocks along the last dimension) to NVFP4 and back:
    s_global = ``tensor_scale`` or, if None, amax(x) / (448 * 6) (1.0 for an all-zero tensor);
    per block s_block = round_to_element(amax_block / 6 / s_global, "e4m3") (an E4M3 value,
    nearest even, saturating at 448); elements = round_to_element(x / (s_block * s_global),
    "e2m1"); values = elements * s_block * s_global. A block whose s_block rounds to 0 (amax_block
    below 2^-10 * 6 * s_global) becomes all zeros. Transformer Engine NVFP4 recipe, arXiv:2509.25149.
    ``scales`` holds s_block * s_global. Raises ValueError for NaN/Inf input or tensor_scale <= 0."""
    import torch
    _check_finite(x)
    e2m1, e4m3 = ELEMENTS["e2m1"], ELEMENTS["e4m3"]
    blocks, unblock = _blocks(x, block_size)
    if tensor_scale is None:
        amax = float(blocks.abs().max()) if blocks.numel() else 0.0
        tensor_scale = amax / (e4m3.max_normal * e2m1.max_normal) if amax > 0 else 1.0
    if not (isinstance(tensor_scale, (int, float)) and math.isfinite(tensor_scale) and tensor_scale > 0):
        raise ValueError(f"tensor_scale must be a finite number > 0, got {tensor_scale!r}")
    s_block, _ = round_to_element(blocks.abs().amax(dim=-1) / e2m1.max_normal / tensor_scale, e4m3)
    scale = s_block * tensor_scale
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q, sat = round_to_element(blocks / safe[..., None], e2m1)
    values = torch.where(scale[..., None] > 0, q * scale[..., None], torch.zeros_like(q))
    sat = sat & (scale[..., None] > 0)
    return Quantized(unblock(values).to(torch.float32), unblock(sat), scale)


def per_tensor_quantize(x, name: str = "e4m3") -> Quantized:
    """One fp32 scale for the whole tensor, s = amax(x) / max_normal (Transformer Engine's "current
    scaling"), elements = round_to_element(x / s, name), values = elements * s. An all-zero tensor
    stays zero. Raises ValueError for NaN/Inf input or an unknown format."""
    import torch
    el = element(name)
    _check_finite(x)
    x64 = x.to(torch.float64)
    amax = float(x64.abs().max()) if x64.numel() else 0.0
    s = float(torch.tensor(amax / el.max_normal, dtype=torch.float32)) if amax > 0 else 1.0
    q, sat = round_to_element(x64 / s, el)
    return Quantized((q * s).to(torch.float32), sat, torch.tensor([s], dtype=torch.float64))


def quantize(x, fmt: str, mx_block: int = MX_BLOCK, rule: str = "floor") -> Quantized:
    """Dispatch ``fmt`` (a key of FORMATS) to the quantizers above; ValueError for an unknown one."""
    import torch
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    kind, el, _ = FORMATS[fmt]
    if kind == "cast":
        _check_finite(x)
        return Quantized(x.to(torch.bfloat16).to(torch.float32), torch.zeros(x.shape, dtype=torch.bool),
                         torch.ones(1, dtype=torch.float64))
    if kind == "tensor":
        return per_tensor_quantize(x, el)
    if kind == "mx":
        return mx_quantize(x, el, mx_block, rule)
    return nvfp4_quantize(x)


def bits_per_element(fmt: str, mx_block: int = MX_BLOCK) -> float:
    """Storage bits per element including the block scales (per-tensor scales ignored)."""
    kind, el, scale_bits = FORMATS[fmt]
    if kind == "cast":
        return 16.0
    bits = ELEMENTS[el].bits
    if kind == "mx":
        return bits + scale_bits / mx_block
    if kind == "nvfp4":
        return bits + scale_bits / NVFP4_BLOCK
    return float(bits)


def error_stats(x, q: Quantized) -> dict:
    """Error of ``q.values`` against ``x`` (same shape): sums of squares (signal, error), count,
    rel_rms_error, snr_db (inf when exact), max_abs_error, zero_fraction (non-zero inputs that
    became 0), saturated_fraction. Plain Python numbers."""
    import torch
    x64 = x.detach().to(torch.float64)
    err = q.values.to(torch.float64) - x64
    signal_ss, error_ss, n = float((x64 * x64).sum()), float((err * err).sum()), x64.numel()
    zeros = int(((q.values == 0) & (x64 != 0)).sum())
    return _finish({"signal_ss": signal_ss, "error_ss": error_ss, "count": n,
                    "max_abs_error": float(err.abs().max()) if n else 0.0,
                    "zeros": zeros, "saturated": int(q.saturated.sum())})


def _finish(s: dict) -> dict:
    n = s["count"]
    s["rel_rms_error"] = math.sqrt(s["error_ss"] / s["signal_ss"]) if s["signal_ss"] > 0 else 0.0
    s["snr_db"] = (10 * math.log10(s["signal_ss"] / s["error_ss"]) if s["error_ss"] > 0
                   else math.inf)
    s["zero_fraction"] = s["zeros"] / n if n else 0.0
    s["saturated_fraction"] = s["saturated"] / n if n else 0.0
    return s


def combine(stats: list[dict]) -> dict:
    """Error statistics of a group of tensors, as if they were one: sums of squares and counts
    add, max_abs_error is the largest."""
    total = {"signal_ss": 0.0, "error_ss": 0.0, "count": 0, "max_abs_error": 0.0, "zeros": 0,
             "saturated": 0}
    for s in stats:
        for key in ("signal_ss", "error_ss", "count", "zeros", "saturated"):
            total[key] += s[key]
        total["max_abs_error"] = max(total["max_abs_error"], s["max_abs_error"])
    return _finish(total)


# --- the tensors -----------------------------------------------------------------------------

# scripts/debug/make_tiny_model.py's DEFAULT_CONFIG with its vocabulary of 28 characters
TINY_CONFIG = {"vocab_size": 28, "d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128,
               "max_seq_len": 64, "dropout": 0.0, "seed": 0}
CONFIG_KEYS = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len")
# The largest value of each field a checkpoint's config.json may hold, and, since the fields
# multiply, the most parameters and recorded activation values this CPU emulation takes: the
# checks run before anything is allocated (a "tiny" model of 10^11 parameters is a typo or a
# hostile file, and would end as an allocator error). make_tiny_model.py has the same bounds.
CONFIG_CAPS = {"vocab_size": 1_000_000, "d_model": 8192, "n_layers": 128, "n_heads": 256,
               "d_ff": 65536, "max_seq_len": 65536}
MAX_PARAMS = 50_000_000            # 200 MB of float32 weights; the default tiny model has 72,960
MAX_ACTIVATIONS = 1 << 26          # values of one forward pass's recorded inputs, or its scores


def tiny_params(cfg: dict) -> int:
    """Parameters of the tiny model of ``cfg``, counted from its modules without building it:
    token and position embeddings, per layer attention (in-projection 3d x d + 3d, out-projection
    d x d + d), MLP (d x f + f, f x d + d) and two LayerNorms (4d), and the final LayerNorm (2d)."""
    d, f = cfg["d_model"], cfg["d_ff"]
    layer = 4 * d * d + 2 * d * f + f + 9 * d
    return (cfg["vocab_size"] + cfg["max_seq_len"]) * d + cfg["n_layers"] * layer + 2 * d


def tiny_activations(cfg: dict, batch: int, seq_len: int) -> int:
    """The most values of any one thing a forward pass of ``batch`` x ``seq_len`` tokens holds at
    once: the matmul inputs model_tensors records (per layer 2 x d + d_ff per token, and d at the
    head), the attention scores of one layer (batch x heads x seq_len^2), or the logits."""
    tokens = batch * seq_len
    recorded = tokens * (cfg["n_layers"] * (2 * cfg["d_model"] + cfg["d_ff"]) + cfg["d_model"])
    return max(recorded, batch * cfg["n_heads"] * seq_len * seq_len, tokens * cfg["vocab_size"])


def build_tiny_model(cfg: dict):
    """make_tiny_model.py's TinyLM, rebuilt: same modules, same construction order, same seed, so
    the same weights for the same config (the tests compare them). Returns an nn.Module whose
    forward maps token ids (batch, seq) to logits."""
    import torch
    import torch.nn as nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(cfg.get("seed", 0))
            d = cfg["d_model"]
            self.tok = nn.Embedding(cfg["vocab_size"], d)
            self.pos = nn.Embedding(cfg["max_seq_len"], d)
            layer = nn.TransformerEncoderLayer(d, cfg["n_heads"], cfg["d_ff"], cfg.get("dropout", 0.0),
                                               activation="gelu", batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, cfg["n_layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            for emb in (self.tok, self.pos):
                nn.init.normal_(emb.weight, std=0.02)

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
            x = self.blocks(x, mask=mask, is_causal=True)
            return self.norm(x) @ self.tok.weight.T

    return TinyLM()


def check_checkpoint(folder: str) -> dict:
    """The config of a make_tiny_model.py ``--out`` folder (config.json next to model.pt), read
    without torch and bounded (``read_input``, at most 1 MiB). Raises ScriptError (usage) naming
    the file, and the field, for a missing or foreign one, a field that is not a positive integer
    within CONFIG_CAPS, a model of more than MAX_PARAMS parameters, or a model.pt larger than
    such a model's weights."""
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"--checkpoint {folder}: {what} (expected the --out folder of "
                          "make_tiny_model.py)", EXIT_USAGE)
    config, weights = os.path.join(folder, "config.json"), os.path.join(folder, "model.pt")
    for path in (config, weights):
        if not os.path.isfile(path):
            what = "is not a regular file" if os.path.exists(path) else "does not exist"
            raise ScriptError(f"--checkpoint: {path} {what} (expected config.json and "
                              "model.pt from make_tiny_model.py --out)", EXIT_USAGE)
    try:
        cfg = parse_json(read_input(config, "--checkpoint", limit=1 << 20), "--checkpoint", config)
    except ScriptError as exc:
        why = str(exc).removeprefix(f"--checkpoint {config}: ")
        raise ScriptError(f"--checkpoint: {config} is not a model config ({why})", EXIT_USAGE) from None
    if not isinstance(cfg, dict):
        raise ScriptError(f"--checkpoint: {config} is not a model config (not a JSON object)", EXIT_USAGE)
    for key in CONFIG_KEYS:
        value = cfg.get(key)
        if value is None:
            raise ScriptError(f"--checkpoint: {config}: {key} is missing (a make_tiny_model.py "
                              f"config has {', '.join(CONFIG_KEYS)})", EXIT_USAGE)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= CONFIG_CAPS[key]:
            shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:30]}..."
            raise ScriptError(f"--checkpoint: {config}: {key} must be an integer from 1 to "
                              f"{CONFIG_CAPS[key]:,} (a make_tiny_model.py config), got {shown}", EXIT_USAGE)
    if cfg["d_model"] % cfg["n_heads"]:
        raise ScriptError(f"--checkpoint: {config}: d_model {cfg['d_model']} is not divisible by "
                          f"n_heads {cfg['n_heads']}", EXIT_USAGE)
    seed = cfg.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ScriptError(f"--checkpoint: {config}: seed must be an integer from 0 to 2^63 - 1, "
                          f"got {seed!r:.40}", EXIT_USAGE)
    params = tiny_params(cfg)
    if params > MAX_PARAMS:
        raise ScriptError(f"--checkpoint: {config}: vocab_size {cfg['vocab_size']:,}, d_model "
                          f"{cfg['d_model']:,}, n_layers {cfg['n_layers']:,}, d_ff {cfg['d_ff']:,} and "
                          f"max_seq_len {cfg['max_seq_len']:,} make {params:,} parameters, more than "
                          f"the {MAX_PARAMS:,} this CPU emulation takes (a tiny model)", EXIT_USAGE)
    size = os.path.getsize(weights)
    if size > 8 * params + (1 << 20):  # float64 weights, plus torch.save's framing
        raise ScriptError(f"--checkpoint: {weights} holds {size:,} bytes, more than the weights of "
                          f"{config}'s {params:,} parameters", EXIT_USAGE)
    return cfg


def load_tiny_model_dir(folder: str, cfg: dict):
    """The tiny model of ``cfg`` with the weights of ``folder``/model.pt. Raises ScriptError
    (usage) naming the file for a truncated, damaged or mismatched one."""
    import torch
    config, weights = os.path.join(folder, "config.json"), os.path.join(folder, "model.pt")
    try:
        state = torch.load(weights, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - torch.load raises RuntimeError, EOFError, struct.error, ...
        raise ScriptError(f"--checkpoint: {weights} is truncated or damaged, or not a torch.save "
                          f"file ({type(exc).__name__})", EXIT_USAGE) from None
    model = build_tiny_model({**cfg, "dropout": 0.0})
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise ScriptError(f"--checkpoint: {weights} does not match {config} ({first})", EXIT_USAGE) from None
    return model


def model_tensors(model, batch: int, seq_len: int, seed: int) -> list[tuple[str, str, object]]:
    """(name, group, tensor) for every weight matrix (2-D parameter) of the tiny model and for the
    activations that enter its matmuls during one forward pass on ``batch`` x ``seq_len`` random
    token ids (seeded): per layer the attention input (after norm1), the MLP input (after norm2)
    and the MLP's second matmul input (after GELU), and the input of the output head. Activations
    are (batch * seq_len, d) matrices."""
    import torch
    out = [(name, "weights", p.detach().clone()) for name, p in model.named_parameters() if p.dim() == 2]
    acts: list[tuple[str, str, object]] = []

    def keep(name):
        def hook(module, args, *rest):
            x = rest[0] if rest else args[0]
            acts.append((name, "activations", x.detach().reshape(-1, x.shape[-1]).clone()))
        return hook

    handles = []
    for i, layer in enumerate(model.blocks.layers):
        prefix = f"blocks.layers.{i}."
        handles.append(layer.self_attn.register_forward_pre_hook(keep(prefix + "self_attn:input")))
        handles.append(layer.linear1.register_forward_pre_hook(keep(prefix + "linear1:input")))
        handles.append(layer.linear2.register_forward_pre_hook(keep(prefix + "linear2:input")))
    handles.append(model.norm.register_forward_hook(keep("head:input")))
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(model.tok.num_embeddings, (batch, seq_len), generator=gen)
    model.train()      # dropout is 0; train mode keeps PyTorch off the fused path that skips hooks
    try:
        with torch.no_grad():
            model(ids.to(model.tok.weight.device))
    finally:
        for h in handles:
            h.remove()
    return out + acts


def synthetic_tensors(seed: int, outlier_scale: float, rows: int = 256, cols: int = 1024):
    """Three (rows, cols) float32 matrices from a seeded generator: "gaussian" N(0, 1);
    "outliers": the same with 0.1% of the elements (random positions) multiplied by
    ``outlier_scale``; "outlier_channels": the same with 4 columns multiplied by it, the pattern of
    LLM activations (a few hidden dimensions much larger than the rest)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, cols, generator=gen)
    spots = torch.rand(rows, cols, generator=gen) < 1e-3
    outliers = torch.where(spots, base * outlier_scale, base)
    channels = base.clone()
    cols_hit = torch.randperm(cols, generator=gen)[:4]
    channels[:, cols_hit] *= outlier_scale
    return [("gaussian", "synthetic", base), ("outliers", "synthetic", outliers),
            ("outlier_channels", "synthetic", channels)]


# --- the measurement -------------------------------------------------------------------------

def measure(tensors: list, args: argparse.Namespace, device) -> tuple[list, dict, Interrupted | None]:
    """Quantize every tensor to every format of ``--formats`` and measure the error. Returns the
    JSON rows, the stats by (tensor, format) and the Interrupted that stopped it early, or None:
    Ctrl-C or SIGTERM ends the loop, keeping what was measured."""
    on_stop_signals()
    rows: list[dict] = []
    stats: dict[tuple[str, str], dict] = {}
    stopped = None
    try:
        for name, group, t in tensors:
            t = t.to(device)
            for fmt in args.formats:
                s = error_stats(t, quantize(t, fmt, args.mx_block, args.mx_scale))
                stats[(name, fmt)] = s
                rows.append(row(name, group, tuple(t.shape), fmt, bits_per_element(fmt, args.mx_block), s, args))
    except Interrupted as stop:
        stopped = stop
    return rows, stats, stopped


# --- the report ------------------------------------------------------------------------------

HEADER = f"  {'format':<11} {'bits':>5} {'rel_rms':>9} {'SNR_dB':>7} {'max_abs':>9} {'zero%':>7} {'sat%':>7}"


def format_row(fmt: str, bits: float, s: dict) -> str:
    snr = "inf" if math.isinf(s["snr_db"]) else f"{s['snr_db']:.1f}"
    return (f"  {fmt:<11} {bits:>5.2f} {s['rel_rms_error']:>9.2e} {snr:>7} {s['max_abs_error']:>9.2e} "
            f"{100 * s['zero_fraction']:>7.3f} {100 * s['saturated_fraction']:>7.3f}")


def _json_number(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


def row(tensor: str, group: str, shape, fmt: str, bits: float, s: dict, args) -> dict:
    kind, el, _ = FORMATS[fmt]
    block = args.mx_block if kind == "mx" else NVFP4_BLOCK if kind == "nvfp4" else None
    return {"tensor": tensor, "group": group, "shape": "x".join(str(d) for d in shape),
            "elements": s["count"], "format": fmt, "element_type": ELEMENTS[el].name if el else "BF16",
            "block_size": block,
            "scale_type": {"mx": "E8M0", "nvfp4": "E4M3+FP32", "tensor": "FP32", "cast": None}[kind],
            "scale_rule": args.mx_scale if kind == "mx" else None,
            "bits_per_element": bits, "rel_rms_error": s["rel_rms_error"],
            "snr_db": _json_number(s["snr_db"]), "max_abs_error": s["max_abs_error"],
            "zero_fraction": s["zero_fraction"], "saturated_fraction": s["saturated_fraction"]}


def print_groups(tensors: list, stats: dict, args: argparse.Namespace) -> list[dict]:
    """One table per group of tensors (weights, activations, synthetic), and with
    ``--per-tensor`` one per tensor; returns the groups' JSON rows."""
    groups = list(dict.fromkeys(g for _, g, _ in tensors))
    summary = []
    for group in groups:
        names = [n for n, g, _ in tensors if g == group]
        done = [n for n in names if all((n, f) in stats for f in args.formats)]
        print(f"{group} ({len(done)} tensors, {sum(stats[(n, args.formats[0])]['count'] for n in done):,} values)")
        print(HEADER)
        for fmt in args.formats:
            s = combine([stats[(n, fmt)] for n in done])
            bits = bits_per_element(fmt, args.mx_block)
            print(format_row(fmt, bits, s))
            summary.append(row(f"(all {group})", group, (s["count"],), fmt, bits, s, args))
        if args.per_tensor:
            for n in done:
                shape = "x".join(str(d) for d in next(t.shape for m, _, t in tensors if m == n))
                print(f"  -- {n} [{shape}]")
                for fmt in args.formats:
                    print(format_row(fmt, bits_per_element(fmt, args.mx_block), stats[(n, fmt)]))
    return summary


def json_document(args: argparse.Namespace, torch_version: str, results: list[dict],
                  interrupted: bool) -> dict:
    """The ``--json`` document, in the results envelope (tools/schemas/mx_quantize.schema.json)."""
    settings = {k: getattr(args, k) for k in ("formats", "checkpoint", "synthetic", "no_model",
                                              "outlier_scale", "mx_block", "mx_scale", "seed",
                                              "batch", "seq_len")}
    return {**envelope("mx_quantize", None, {"torch": torch_version}), "settings": settings, "interrupted": interrupted,
            "results": results}


# --- command line ----------------------------------------------------------------------------

def format_list(text: str) -> list[str]:
    """argparse type for --formats: a comma list of known format names, or "all"."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one format")
    if names == ["all"]:
        return list(FORMATS)
    unknown = [n for n in names if n not in FORMATS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown format {unknown[0]!r} (known: {', '.join(FORMATS)}, or all)")
    return list(dict.fromkeys(names))


def power_of_two(text: str) -> int:
    value = number(int, 1, 1024)(text)
    if value & (value - 1):
        raise argparse.ArgumentTypeError(f"{value} is not a power of two")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Quantize the tiny model's weights and "
                                "activations (and synthetic tensors) to MXFP8/6/4 and NVFP4 on CPU, "
                                "and measure the error against bf16 and per-tensor fp8.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--formats", type=format_list, default=list(FORMATS),
                   help=f"comma list of {', '.join(FORMATS)} (default all)")
    p.add_argument("--checkpoint", metavar="DIR", type=nonempty,
                   help="the --out folder of make_tiny_model.py (config.json, model.pt); default: "
                   "build the tiny model with random weights from --seed")
    p.add_argument("--synthetic", action="store_true",
                   help="also quantize three synthetic 256 x 1024 matrices (with outliers)")
    p.add_argument("--no-model", action="store_true", help="skip the model (use with --synthetic)")
    p.add_argument("--outlier-scale", type=number(float, 1, 1e6), default=100.0,
                   help="factor of the synthetic outliers (default 100)")
    p.add_argument("--mx-block", type=power_of_two, default=MX_BLOCK,
                   help="elements per MX block, a power of two up to 1024 (default 32, the spec's)")
    p.add_argument("--mx-scale", choices=SCALE_RULES, default="floor",
                   help="MX scale rule: floor (OCP spec, default) or ceil (Transformer Engine)")
    p.add_argument("--seed", type=number(int, 0, 2**63 - 1), default=0,
                   help="model init (without --checkpoint), token ids, synthetic data (default 0)")
    p.add_argument("--batch", type=number(int, 1, 1024), default=8, help="sequences (default 8)")
    p.add_argument("--seq-len", type=number(int, 1, 65536), default=64,
                   help="tokens per sequence, at most the model's max_seq_len (default 64)")
    p.add_argument("--per-tensor", action="store_true", help="print every tensor, not only the groups")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="(default cpu)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON here")
    return p


def check_args(args: argparse.Namespace) -> dict | None:
    """Refuse contradictory options, an unusable --json, an unreadable or too large
    --checkpoint and a forward pass too large, before torch is imported; returns the model's
    config (None with --no-model)."""
    if args.no_model and not args.synthetic:
        raise ScriptError("--no-model leaves nothing to quantize; add --synthetic", EXIT_USAGE)
    if args.no_model and args.checkpoint:
        raise ScriptError("--no-model and --checkpoint contradict each other", EXIT_USAGE)
    inputs = []
    if args.checkpoint:
        inputs = [os.path.join(args.checkpoint, n) for n in ("config.json", "model.pt")]
    if args.json:
        check_output(args.json, "--json", inputs)
    if args.no_model:
        return None
    cfg = check_checkpoint(args.checkpoint) if args.checkpoint else {**TINY_CONFIG, "seed": args.seed}
    if args.seq_len > cfg["max_seq_len"]:
        raise ScriptError(f"--seq-len {args.seq_len} > the model's max_seq_len {cfg['max_seq_len']}",
                          EXIT_USAGE)
    values = tiny_activations(cfg, args.batch, args.seq_len)
    if values > MAX_ACTIVATIONS:
        raise ScriptError(f"--batch {args.batch} x --seq-len {args.seq_len} on this model "
                          f"({cfg['n_layers']} layers, d_model {cfg['d_model']}, d_ff {cfg['d_ff']}, "
                          f"{cfg['n_heads']} heads, vocab {cfg['vocab_size']:,}) hold {values:,} "
                          f"activation values at once, more than {MAX_ACTIVATIONS:,}; lower "
                          "--batch or --seq-len", EXIT_USAGE)
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = check_args(args)
    started = time.monotonic()
    import torch
    torch.set_num_threads(1)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ScriptError("--device cuda: CUDA is not available on this machine", EXIT_USAGE)
    device = torch.device(args.device)
    tensors, source = [], None
    if cfg is not None:
        if args.checkpoint:
            model = load_tiny_model_dir(args.checkpoint, cfg)
            source = f"checkpoint {args.checkpoint}"
        else:
            model = build_tiny_model(cfg)
            source = f"random init, seed {args.seed}"
        for name, p in model.named_parameters():
            if not bool(torch.isfinite(p).all()):
                raise ScriptError(f"weight {name} has NaN/Inf values; nothing to quantize")
        tensors += model_tensors(model.to(device), args.batch, args.seq_len, args.seed)
        source = (f"tiny model ({source}: {cfg['n_layers']} layers, d_model {cfg['d_model']}, "
                  f"d_ff {cfg['d_ff']}; activations of {args.batch} x {args.seq_len} random tokens)")
    if args.synthetic:
        tensors += synthetic_tensors(args.seed, args.outlier_scale)
    for name, group, t in tensors:
        if not bool(torch.isfinite(t).all()):
            raise ScriptError(f"{group} tensor {name} has NaN/Inf values (a diverged model?)")
    print(f"# {PROG}: " + "; ".join(filter(None, [
        source, "synthetic 256 x 1024 matrices (outlier scale "
        f"{args.outlier_scale:g})" if args.synthetic else None])))
    print(f"# {len(tensors)} tensors; elements rounded to nearest even, saturating at the largest "
          f"normal; MX: E8M0 scale per {args.mx_block} elements, rule {args.mx_scale}; NVFP4: E4M3 "
          f"scale per 16 + fp32 per tensor; {device}, torch {torch.__version__}")

    rows, stats, stopped = measure(tensors, args, device)
    summary = print_groups(tensors, stats, args)
    print("# bits: storage per element incl. block scales; rel_rms: ||q - x|| / ||x||; SNR_dB: "
          "10 log10(sum x^2 / sum (q - x)^2); zero%: non-zero inputs that became 0; sat%: clamped")
    print(f"# done in {time.monotonic() - started:.1f} s" + (" (interrupted)" if stopped else ""))
    if args.json:
        doc = json_document(args, torch.__version__, summary + rows, bool(stopped))
        write_atomic(args.json, json.dumps(doc, indent=1) + "\n")
    if stopped:
        raise ScriptError(f"interrupted after {len(rows)} of {len(tensors) * len(args.formats)} "
                          "measurements" + (f"; {args.json} holds them" if args.json else ""),
                          stopped.status)
    return EXIT_OK


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
