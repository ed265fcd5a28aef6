#!/usr/bin/env python
"""decode_bench.py: measure prefill and KV-cache decode of a small decoder-only transformer.

A decoder-only transformer with random weights (grouped-query attention, rotary positions, a GELU
MLP, a tied output layer) is timed at every point (batch B, prompt length P) of ``--batch-sizes`` x
``--contexts``: the prefill of a B x P prompt into a preallocated KV cache, then ``--new-tokens``
greedy decode steps. Per point: TTFT (prefill + first token) and TPOT (one decode step) in ms,
decode and prefill tokens/s, the KV cache, the bytes a step reads at least (the weights + the
cache it attends to) with the GB/s they make, and FLOPs per step. Decimal units (1 MB = 1e6
bytes, 1 GB = 1e9 bytes); on CUDA each time is taken between torch.cuda.synchronize() calls.
Formulas and how to read a run: book/en/inference/prefill-decode.md.

One device per process::

    python decode_bench.py                                      # defaults: 10-15 s on 2 CPU cores
    python decode_bench.py --batch-sizes 1,2,4,8,16 --contexts 128,512 --json decode.json
    python decode_bench.py --device cuda --layers 24 --dim 2048 --heads 16 --kv-heads 4 \\
        --vocab 32000 --batch-sizes 1,8,32,128 --contexts 512,2048 --json gpu.json

Example output (one thread of a 2-vCPU AMD EPYC VM; results/inference/decode_bench-cpu.json)::

    # batch  context   TTFT(ms)   TPOT(ms)   TPOTmed  decode tok/s  prefill tok/s    KV(MB)  read/step(MB)     GB/s  GFLOP/step   GFLOP/s
          1      128     37.663      6.711     6.658         149.0         3398.6     0.737         50.428     7.51      0.0262      3.90
         16      128    596.058     16.049    15.348         997.0         3435.9    11.796         60.415     3.76      0.4192     26.12
         16      512   2669.350     20.703    19.642         772.8         3068.9    40.108         88.727     4.29      0.4759     22.99

Exit status: 0 ok, 1 failure, 2 usage (checked before any measurement), 130/143 interrupted by
Ctrl-C/SIGTERM (the points so far are printed and written with "interrupted": true).
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import traceback

PROG = "decode_bench.py"
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MAX_POINTS = 256  # batch sizes x contexts in one run
MAX_LIST = 64  # values in one comma list
MAX_STEPS = 10_000_000  # decode steps of a run, warm-up included
MLP_RATIO = 4
ROPE_BASE = 10_000.0


# ----------------------------------------------------------------------------------------------
# The method: the model's size, the model, its KV cache, the two ways of running it
# ----------------------------------------------------------------------------------------------

def model_shape(layers: int, dim: int, heads: int, kv_heads: int, vocab: int) -> dict:
    """Parameter counts of the model ``build_model`` makes, from its shape alone.
    ``matmul`` counts the weights of matrix multiplications (every linear layer and the tied
    output layer); ``total`` adds the norm weights."""
    head_dim = dim // heads
    per_layer = (dim * heads * head_dim * 2          # query and output projections
                 + dim * kv_heads * head_dim * 2     # key and value projections
                 + dim * MLP_RATIO * dim * 2)        # MLP up and down
    matmul = layers * per_layer + vocab * dim        # + the tied embedding / output layer
    return {"head_dim": head_dim, "matmul": matmul, "total": matmul + (2 * layers + 1) * dim}


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of KV cache per token of one sequence: a key and a value per layer and kv head."""
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def point_figures(*, layers: int, heads: int, kv_heads: int, head_dim: int, matmul_params: int,
                  weight_bytes: int, dtype_bytes: int, batch: int, context: int,
                  new_tokens: int, tpot_s: float, ttft_s: float) -> dict:
    """The derived figures of one point (the formulas: book/en/inference/prefill-decode.md)."""
    per_token = kv_bytes_per_token(layers, kv_heads, head_dim, dtype_bytes)
    # Decode step i (1..N) attends to context + i tokens: context + (N + 1) / 2 on average.
    # Twice that is an integer, so the byte count stays exact.
    twice_attended = 2 * context + new_tokens + 1
    bytes_per_step = weight_bytes + per_token * batch * twice_attended // 2
    flops_per_step = (2 * matmul_params * batch
                      + 2 * layers * heads * head_dim * twice_attended * batch)
    return {
        "decode_tokens_per_s": batch / tpot_s,
        "prefill_tokens_per_s": batch * context / ttft_s,
        "kv_bytes": per_token * batch * (context + new_tokens),
        "mean_attended_tokens": twice_attended / 2,
        "bytes_per_step": bytes_per_step,
        "read_GBps": bytes_per_step / tpot_s / 1e9,
        "flops_per_step": flops_per_step,
        "gflops": flops_per_step / tpot_s / 1e9,
    }


def build_model(layers: int, dim: int, heads: int, kv_heads: int, vocab: int, *,
                device="cpu", dtype=None, seed: int = 0):
    """A decoder-only transformer with random weights (book/en/inference/prefill-decode.md says
    which), in eval mode on ``device`` in ``dtype`` (a torch dtype; default float32). Weights are
    drawn on the CPU in float32 from ``seed``, so the same seed gives the same model on every
    device."""
    import torch
    import torch.nn as nn

    head_dim = dim // heads

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.mlp_norm = RMSNorm(), RMSNorm()
            self.wq = nn.Linear(dim, heads * head_dim, bias=False)
            self.wk = nn.Linear(dim, kv_heads * head_dim, bias=False)
            self.wv = nn.Linear(dim, kv_heads * head_dim, bias=False)
            self.wo = nn.Linear(heads * head_dim, dim, bias=False)
            self.up = nn.Linear(dim, MLP_RATIO * dim, bias=False)
            self.down = nn.Linear(MLP_RATIO * dim, dim, bias=False)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Parameter(torch.randn(vocab, dim) / math.sqrt(dim))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = RMSNorm()

    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = Decoder()
    finally:
        torch.random.set_rng_state(gen_state)
    model.shape = {"layers": layers, "dim": dim, "heads": heads, "kv_heads": kv_heads,
                   "head_dim": head_dim, "vocab": vocab}
    return model.to(device=device, dtype=dtype or torch.float32).eval()


def new_cache(model, batch: int, max_len: int):
    """A zeroed KV cache for ``batch`` sequences of up to ``max_len`` tokens:
    [layers, 2 (key, value), batch, kv_heads, max_len, head_dim] in the model's dtype."""
    import torch
    s = model.shape
    p = model.embed
    return torch.zeros(s["layers"], 2, batch, s["kv_heads"], max_len, s["head_dim"],
                       dtype=p.dtype, device=p.device)


def _rotate(x, start: int):
    """Rotary position embedding of x [B, n_heads, T, head_dim] at positions start..start+T-1,
    computed in float32."""
    import torch
    t, half = x.shape[2], x.shape[3] // 2
    inv = ROPE_BASE ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angle = torch.arange(start, start + t, device=x.device, dtype=torch.float32)[:, None] * inv
    cos, sin = angle.cos(), angle.sin()
    xf = x.float()
    a, b = xf[..., :half], xf[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(x.dtype)


def _attention(block, x, s: dict, cache, layer: int, start: int):
    """Self-attention of x [B, T, dim] at positions start..start+T-1. Without ``cache`` the
    keys are those of x alone (causal). With it, the keys and values of x are written into
    ``cache[layer]`` at those positions and the queries attend to positions 0..start+T-1."""
    import torch.nn.functional as F
    b, t, _ = x.shape
    h, kvh, hd = s["heads"], s["kv_heads"], s["head_dim"]
    q = _rotate(block.wq(x).view(b, t, h, hd).transpose(1, 2), start)
    k = _rotate(block.wk(x).view(b, t, kvh, hd).transpose(1, 2), start)
    v = block.wv(x).view(b, t, kvh, hd).transpose(1, 2)
    if cache is not None:
        cache[layer, 0, :, :, start:start + t] = k
        cache[layer, 1, :, :, start:start + t] = v
        k = cache[layer, 0, :, :, :start + t]
        v = cache[layer, 1, :, :, :start + t]
    if t == 1:
        # One new token per sequence sees every cached position: no mask. The query heads that
        # share a kv head become rows of one query block, so the cache is read as it is.
        y = F.scaled_dot_product_attention(q.reshape(b, kvh, h // kvh, hd), k, v)
    else:
        if start != 0:
            raise ValueError("a multi-token pass must start at position 0 (no chunked prefill)")
        if kvh != h:
            k, v = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return block.wo(y.reshape(b, h, t, hd).transpose(1, 2).reshape(b, t, h * hd))


def _forward(model, tokens, cache, start: int, last_only: bool):
    import torch.nn.functional as F
    s = model.shape
    x = model.embed[tokens]
    for layer, block in enumerate(model.blocks):
        x = x + _attention(block, block.attn_norm(x), s, cache, layer, start)
        x = x + block.down(F.gelu(block.up(block.mlp_norm(x))))
    if last_only:
        x = x[:, -1]
    return model.norm(x) @ model.embed.T


def forward_no_cache(model, tokens):
    """Logits [B, T, vocab] of every position of ``tokens`` [B, T]: one causal pass, no cache."""
    return _forward(model, tokens, None, 0, last_only=False)


def prefill(model, tokens, cache):
    """Run the prompt ``tokens`` [B, P] through the model, writing its keys and values into
    ``cache`` at positions 0..P-1; returns the logits [B, vocab] of the last position."""
    return _forward(model, tokens, cache, 0, last_only=True)


def decode_step(model, token, position: int, cache):
    """One decode step: ``token`` [B, 1] at ``position`` (the cache holds positions before it);
    writes its keys and values into ``cache`` and returns the logits [B, vocab]."""
    return _forward(model, token, cache, position, last_only=True)


def decode_with_cache(model, prompt, new_tokens: int):
    """Greedy generation with a KV cache: prefill ``prompt`` [B, P], then ``new_tokens`` decode
    steps. Returns (tokens [B, new_tokens + 1], logits [B, new_tokens + 1, vocab]): the first
    token and its logits come from the prefill, the others from the decode steps."""
    import torch
    with torch.inference_mode():
        cache = new_cache(model, prompt.shape[0], prompt.shape[1] + new_tokens)
        logits = [prefill(model, prompt, cache)]
        tokens = [logits[-1].argmax(-1, keepdim=True)]
        for i in range(new_tokens):
            logits.append(decode_step(model, tokens[-1], prompt.shape[1] + i, cache))
            tokens.append(logits[-1].argmax(-1, keepdim=True))
        return torch.cat(tokens, dim=1), torch.stack(logits, dim=1)


def time_point(model, batch: int, context: int, new_tokens: int, warmup: int, repeats: int,
               sync, seed: int) -> tuple[list[float], list[float]]:
    """Prefill a random B x P prompt and decode ``new_tokens`` steps, ``warmup`` + ``repeats``
    times over one preallocated cache; returns the TTFTs and the decode step times (s) of the
    timed repeats."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(model.shape["vocab"], (batch, context), generator=gen)
    prompt = prompt.to(model.embed.device)
    ttfts, steps = [], []
    with torch.inference_mode():
        cache = new_cache(model, batch, context + new_tokens)
        for repeat in range(warmup + repeats):
            sync()
            t0 = time.perf_counter()
            token = prefill(model, prompt, cache).argmax(-1, keepdim=True)
            sync()
            t1 = time.perf_counter()
            ttft, times = t1 - t0, []
            for i in range(new_tokens):
                token = decode_step(model, token, context + i, cache).argmax(-1, keepdim=True)
                sync()
                t2 = time.perf_counter()
                times.append(t2 - t1)
                t1 = t2
            if repeat >= warmup:
                ttfts.append(ttft)
                steps.extend(times)
    return ttfts, steps


def measure_point(model, args, run: dict, batch: int, context: int, seed: int, sync) -> dict:
    """One point of the sweep: time it (``time_point``) and derive its figures; the row of the
    table and of the JSON, floats to 6 significant digits."""
    ttfts, steps = time_point(model, batch, context, args.new_tokens, args.warmup, args.repeats,
                              sync, seed)
    ttft, tpot = statistics.median(ttfts), statistics.fmean(steps)
    row = {"batch": batch, "context": context, "new_tokens": args.new_tokens,
           "ttft_ms": ttft * 1e3, "tpot_ms": tpot * 1e3,
           "tpot_median_ms": statistics.median(steps) * 1e3,
           "tpot_min_ms": min(steps) * 1e3, "weight_bytes": run["weight_bytes"]}
    row.update(point_figures(
        layers=args.layers, heads=args.heads, kv_heads=args.kv_heads, head_dim=run["head_dim"],
        matmul_params=run["matmul"], weight_bytes=run["weight_bytes"],
        dtype_bytes=run["dtype_bytes"], batch=batch, context=context,
        new_tokens=args.new_tokens, tpot_s=tpot, ttft_s=ttft))
    return {k: _g(v) if isinstance(v, float) and k != "mean_attended_tokens" else v
            for k, v in row.items()}


# ----------------------------------------------------------------------------------------------
# The device
# ----------------------------------------------------------------------------------------------

def _free_host_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def open_device(args):
    """Import torch, settle ``--device auto`` and ``--dtype auto`` and set ``--threads``. Returns
    (torch, the device, its name, its free bytes or None, sync: waits for the device's work)."""
    import torch  # only now: --help and argument errors never import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        args.parser.error("--device cuda: torch sees no CUDA device "
                          f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})")
    args.device_type = args.device if args.device != "auto" else (
        "cuda" if torch.cuda.is_available() else "cpu")
    if args.dtype == "auto":
        args.dtype = "bf16" if args.device_type == "cuda" else "fp32"
    if args.dtype == "fp16" and args.device_type != "cuda":
        args.parser.error("--dtype fp16 runs on cuda only (--device auto found no GPU); "
                          "use fp32 or bf16 on cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device_type == "cuda":
        device = torch.device("cuda")
        name = torch.cuda.get_device_name(device)
        free = torch.cuda.mem_get_info(device)[0]

        def sync():
            torch.cuda.synchronize(device)
    else:
        device, name, free = torch.device("cpu"), _cpu_name(), _free_host_bytes()

        def sync():
            pass
    return torch, device, name, free, sync


def check_fits(args, shape: dict, dtype_bytes: int, free: int | None) -> None:
    """Refuse (usage error) a sweep whose largest point's weights + KV cache + logits do not fit
    in ``free`` bytes (activations come on top: this only catches the hopeless cases)."""
    if free is None:
        return
    weights = shape["total"] * dtype_bytes
    per_token = kv_bytes_per_token(args.layers, args.kv_heads, shape["head_dim"], dtype_bytes)
    b, p = max(args.batch_sizes), max(args.contexts)
    kv = per_token * b * (p + args.new_tokens)
    logits = b * args.vocab * 4
    need = weights + kv + logits
    if need > free:
        raise ScriptError(f"--batch-sizes {b} with --contexts {p} needs at least {need / 1e9:.3g} GB "
                          f"(weights {weights / 1e9:.3g} GB + KV cache {kv / 1e9:.3g} GB + logits); "
                          f"the {args.device_type} has {free / 1e9:.3g} GB free", EXIT_USAGE)


def load_model(torch, args, shape: dict, device):
    """The model of the arguments on ``device`` in ``--dtype``, its parameters counted against
    ``model_shape`` (the formulas rely on that count)."""
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    model = build_model(args.layers, args.dim, args.heads, args.kv_heads, args.vocab,
                        device=device, dtype=torch_dtype, seed=args.seed)
    params = sum(p.numel() for p in model.parameters())
    if params != shape["total"]:  # the formulas below rely on this count
        raise ScriptError(f"internal: model has {params} parameters, model_shape says {shape['total']}")
    return model


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _g(x: float) -> float:
    """A measured float to 6 significant digits for the JSON."""
    return float(f"{x:.6g}")


def _table_header(width: int) -> str:
    return (f"# {'batch':>{width}} {'context':>8} {'TTFT(ms)':>10} {'TPOT(ms)':>10} {'TPOTmed':>9} "
            f"{'decode tok/s':>13} {'prefill tok/s':>14} {'KV(MB)':>9} {'read/step(MB)':>14} "
            f"{'GB/s':>8} {'GFLOP/step':>11} {'GFLOP/s':>9}")


def _table_row(r: dict, width: int) -> str:
    return (f"  {r['batch']:>{width}} {r['context']:>8} {r['ttft_ms']:>10.3f} {r['tpot_ms']:>10.3f} "
            f"{r['tpot_median_ms']:>9.3f} {r['decode_tokens_per_s']:>13.1f} "
            f"{r['prefill_tokens_per_s']:>14.1f} {r['kv_bytes'] / 1e6:>9.3f} "
            f"{r['bytes_per_step'] / 1e6:>14.3f} {r['read_GBps']:>8.2f} "
            f"{r['flops_per_step'] / 1e9:>11.4f} {r['gflops']:>9.2f}")


def print_header(args, run: dict) -> int:
    """Print what runs where and the table's header; returns the width of the batch column."""
    print(f"# {PROG}: prefill + KV-cache decode, {run['params'] / 1e6:.2f} M parameters "
          f"({run['weight_bytes'] / 1e6:.1f} MB {args.dtype}): {args.layers} layers, dim {args.dim}, "
          f"{args.heads} heads / {args.kv_heads} kv heads of {run['head_dim']}, vocab {args.vocab}")
    print(f"# device {args.device_type} ({run['where']}), torch {run['torch']}, "
          f"new tokens {args.new_tokens}, warmup {args.warmup}, repeats {args.repeats}")
    print(f"# TTFT = prefill + first token (median of {args.repeats}); TPOT = one decode step "
          f"(mean, median of {args.repeats} x {args.new_tokens}); read/step = weights + KV cache "
          "so far (a lower bound on traffic); 1 MB = 1e6, 1 GB = 1e9 bytes")
    width = max(5, len(str(max(args.batch_sizes))))
    print(_table_header(width), flush=True)
    return width


def json_report(args, run: dict, results: list[dict], interrupted: bool, started: float) -> dict:
    """The --json report of the points done so far (tools/schemas/decode_bench.schema.json)."""
    elapsed = time.monotonic() - started
    report = {
        **envelope("decode_bench", run["name"], {"torch": run["torch"]}),
        "device_type": args.device_type, "dtype": args.dtype, "threads": run["threads"],
        "torch_version": run["torch"], "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "settings": {"layers": args.layers, "dim": args.dim, "heads": args.heads,
                     "kv_heads": args.kv_heads, "head_dim": run["head_dim"], "vocab": args.vocab,
                     "mlp_ratio": MLP_RATIO, "batch_sizes": args.batch_sizes,
                     "contexts": args.contexts, "new_tokens": args.new_tokens,
                     "warmup": args.warmup, "repeats": args.repeats, "seed": args.seed},
        "model": {"parameters": run["params"], "matmul_parameters": run["matmul"],
                  "weight_bytes": run["weight_bytes"], "dtype_bytes": run["dtype_bytes"],
                  "kv_bytes_per_token": kv_bytes_per_token(args.layers, args.kv_heads,
                                                           run["head_dim"], run["dtype_bytes"])},
        "interrupted": interrupted, "elapsed_s": round(elapsed, 2), "results": results,
        "units": {
            "ttft_ms": "prefill of the prompt + first token, ms, median of the repeats",
            "tpot_ms": "one decode step (one token per sequence), ms, mean of new_tokens x "
                       "repeats steps (tpot_median_ms, tpot_min_ms: their median, minimum)",
            "decode_tokens_per_s": "batch / TPOT", "prefill_tokens_per_s": "batch * context / TTFT",
            "kv_bytes": "KV cache filled at the end of the point: kv_bytes_per_token * batch * "
                        "(context + new_tokens)",
            "bytes_per_step": "weight_bytes + kv_bytes_per_token * batch * mean_attended_tokens; "
                              "a lower bound on the memory traffic of a step",
            "mean_attended_tokens": "context + (new_tokens + 1) / 2",
            "read_GBps": "bytes_per_step / TPOT / 1e9",
            "flops_per_step": "2 * matmul_parameters * batch + 4 * layers * heads * head_dim * "
                              "mean_attended_tokens * batch",
            "gflops": "flops_per_step / TPOT / 1e9"},
    }
    return report


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def int_list(lo: int, hi: int):
    """An argparse ``type`` for a comma-separated list of integers in [lo, hi]: at most MAX_LIST
    values, no empty item, duplicates dropped (first kept)."""
    check = number(int, lo, hi)

    def parse(text: str) -> list[int]:
        items = [item.strip() for item in text.split(",")]
        if not text.strip() or any(not item for item in items):
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers "
                                             "(an item is empty)")
        if len(items) > MAX_LIST:
            raise argparse.ArgumentTypeError(f"{len(items)} values; at most {MAX_LIST}")
        return list(dict.fromkeys(check(item) for item in items))
    parse.__name__ = "list"
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Time prefill (TTFT) and KV-cache decode steps (TPOT) of a small "
        "decoder-only transformer over a sweep of batch sizes and prompt lengths; reports "
        "tokens/s, bytes read and FLOPs per step.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--layers", type=number(int, 1, 256), default=4, help="transformer blocks (default 4)")
    p.add_argument("--dim", type=number(int, 2, 65536), default=256, help="model width (default 256)")
    p.add_argument("--heads", type=number(int, 1, 1024), default=8, help="query heads (default 8)")
    p.add_argument("--kv-heads", type=number(int, 1, 1024), default=2,
                   help="key/value heads; must divide --heads (default 2: grouped-query attention; "
                   "= --heads for multi-head, 1 for multi-query attention)")
    p.add_argument("--vocab", type=number(int, 2, 1_000_000), default=8192,
                   help="vocabulary size (default 8192)")
    p.add_argument("--batch-sizes", type=int_list(1, 65536), default=[1, 4, 16], metavar="B1,B2,...",
                   help="batch sizes, comma-separated (default 1,4,16)")
    p.add_argument("--contexts", type=int_list(1, 1_048_576), default=[128, 512], metavar="P1,P2,...",
                   help="prompt lengths in tokens, comma-separated (default 128,512)")
    p.add_argument("--new-tokens", type=number(int, 1, 1_000_000), default=32,
                   help="decode steps timed per point and repeat (default 32)")
    p.add_argument("--warmup", type=number(int, 0, 1000), default=1,
                   help="untimed prefill + decode runs per point (default 1)")
    p.add_argument("--repeats", type=number(int, 1, 1000), default=3,
                   help="timed prefill + decode runs per point (default 3)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto (default): cuda when available, else cpu")
    p.add_argument("--dtype", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="weights, activations and cache; auto (default): bf16 on cuda, fp32 on "
                   "cpu; fp16 on cuda only")
    p.add_argument("--threads", type=number(int, 1, 1024), default=None,
                   help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0,
                   help="seed of the weights and prompts (default 0)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write settings and per-point results as JSON ('-': stdout, after the table)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.heads % args.kv_heads:
        parser.error(f"--kv-heads ({args.kv_heads}) must divide --heads ({args.heads})")
    if args.dim % args.heads:
        parser.error(f"--heads ({args.heads}) must divide --dim ({args.dim})")
    if (args.dim // args.heads) % 2:
        parser.error(f"--dim / --heads = {args.dim // args.heads} is the head size; it must be "
                     "even (rotary embedding turns pairs of dimensions)")
    points = len(args.batch_sizes) * len(args.contexts)
    if points > MAX_POINTS:
        parser.error(f"--batch-sizes x --contexts is {points} points; at most {MAX_POINTS} in one "
                     "run (split the sweep)")
    steps = points * (args.warmup + args.repeats) * args.new_tokens
    if steps > MAX_STEPS:
        parser.error(f"the sweep makes {steps:,} decode steps (points x (--warmup + --repeats) x "
                     f"--new-tokens); at most {MAX_STEPS:,} in one run")
    if args.dtype == "fp16" and args.device == "cpu":
        parser.error("--dtype fp16 runs on cuda only; use fp32 or bf16 on cpu")
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=[__file__])  # not over the script itself
    args.parser = parser
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    on_stop_signals()  # Ctrl-C and scancel stop the sweep with the points measured so far
    torch, device, name, free, sync = open_device(args)
    dtype_bytes = DTYPE_BYTES[args.dtype]
    shape = model_shape(args.layers, args.dim, args.heads, args.kv_heads, args.vocab)
    check_fits(args, shape, dtype_bytes, free)

    started = time.monotonic()
    model = load_model(torch, args, shape, device)
    threads = torch.get_num_threads()
    run = {"name": name, "threads": threads, "torch": torch.__version__,
           "where": f"{name}, {threads} thread(s)" if args.device_type == "cpu" else name,
           "params": shape["total"], "matmul": shape["matmul"], "head_dim": shape["head_dim"],
           "dtype_bytes": dtype_bytes, "weight_bytes": shape["total"] * dtype_bytes}
    width = print_header(args, run)

    points = [(b, p) for p in args.contexts for b in args.batch_sizes]
    results: list[dict] = []

    def write_json(interrupted: bool) -> None:
        # Rewritten after every point: a failure (a full disk, a crash, a kill) loses at most
        # the point in progress.
        report = json_report(args, run, results, interrupted, started)
        write_atomic(args.json, json.dumps(report, indent=1) + "\n")

    interrupted, stopped = False, None
    try:
        for index, (batch, context) in enumerate(points):
            results.append(measure_point(model, args, run, batch, context, args.seed + 1 + index, sync))
            print(_table_row(results[-1], width), flush=True)
            if args.json and args.json != "-":
                write_json(interrupted=index + 1 < len(points))
    except Interrupted as stop:
        interrupted, stopped = True, stop
        print(f"# interrupted: {len(results)} of {len(points)} points done")
    elapsed = time.monotonic() - started
    print(f"# {len(results)} points in {elapsed:.1f} s")
    if args.json == "-":
        print(json.dumps(json_report(args, run, results, interrupted, started), indent=1))
    elif args.json:
        write_json(interrupted)
        print(f"# wrote {args.json}")
    if stopped:
        raise ScriptError(f"interrupted by {stopped.name} after {len(results)} of "
                          f"{len(points)} points", stopped.status)
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


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
