#!/usr/bin/env python
"""layer_bench.py: four micro-benchmarks of one pre-norm transformer block that a reader repeats.

The block: LayerNorm, causal attention (q/k/v projection, scaled_dot_product_attention, output
projection), LayerNorm, SwiGLU MLP, each with a residual; no biases, no dropout. Subcommands:

- ``compile``: a training step (forward + backward) in eager mode and under ``torch.compile``:
  ms per step, the first compiled call's seconds (the compile), and the recompiles counted when
  a second sequence length is fed (``--dynamic`` avoids them).
- ``swiglu``: TFLOPS of the SwiGLU MLP (6 * batch * seq * hidden * ffn FLOPs forward) for MLP
  widths around 8/3 * hidden, each marked by the largest of 256/128/64 it is a multiple of.
- ``fwd-bwd``: forward and backward ms per layer type and their ratio (about 2 for matmuls).
- ``activations``: bytes the block saves for backward, counted exactly with
  ``torch.autograd.graph.saved_tensors_hooks`` (unique storages, parameters left out), against
  this block's formula (``block_activation_bytes``); with ``--ddp``, the bytes of DDP's
  gradient buckets on a 1-rank gloo group against the gradients' bytes.

Times are medians of ``--iters`` runs after ``--warmup`` (CUDA: synchronized; CPU: perf_counter).
The CUDA path (default when a GPU is present, bf16) was not run for the book's results, which
are CPU measurements. Method and results: book/en/training/performance.md.

    python layer_bench.py swiglu --device cpu --hidden 768 --json swiglu.json
    python layer_bench.py compile --backend inductor --json compile.json

Example output (``fwd-bwd --device cpu --threads 1``, a shared 2-vCPU machine; rows cut)::

               layer      forward_ms     backward_ms    bwd_over_fwd
              linear           1.747           4.634           2.653
           attention           6.105          15.445           2.530
              swiglu          17.708          34.609           1.954

Rows print as they are measured. Ctrl-C or SIGTERM (``scancel``, a job's time limit) stops the
run: the rows measured so far are written (``"interrupted": true``) and it exits 130 or 143.

Exit status: 0 ok, 1 failure (no CUDA, a backend that fails), 2 usage, 130/143 interrupted;
``--debug`` adds the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import traceback

PROG = "layer_bench.py"
BENCHMARK = "layer_bench"
TESTS = ("compile", "swiglu", "fwd-bwd", "activations")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
LAYERS = ("linear", "attention", "layernorm", "rmsnorm", "softmax", "embedding", "swiglu")
MAX_ELEMENTS = 2**28  # one activation tensor, batch x seq x the widest feature


# ----------------------------------------------------------------------------------------------
# The block and the timer
# ----------------------------------------------------------------------------------------------

def build_block(torch, hidden: int, heads: int, ffn: int):
    """A pre-norm block: x + attn(LN(x)), then + SwiGLU(LN(.)). Input and output (batch, seq,
    hidden). SwiGLU: w2(silu(w1 x) * w3 x) (Shazeer 2020, https://arxiv.org/abs/2002.05202)."""
    nn, F = torch.nn, torch.nn.functional

    class SwiGLU(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3 = nn.Linear(hidden, ffn, bias=False), nn.Linear(hidden, ffn, bias=False)
            self.w2 = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(hidden, bias=False), nn.LayerNorm(hidden, bias=False)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
            self.mlp = SwiGLU()

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, hidden))
            return x + self.mlp(self.norm2(x))

    return Block(), SwiGLU


def timed(torch, fn, device: str, warmup: int, iters: int) -> list[float]:
    """Seconds per call of ``fn``: ``warmup`` untimed calls, then ``iters`` timed ones. On CUDA,
    CUDA events around each call and a synchronize before reading them; on CPU, perf_counter."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return times


def ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


# ----------------------------------------------------------------------------------------------
# The four methods
# ----------------------------------------------------------------------------------------------

def bench_compile(torch, a, dev, dtype, rows: list[dict]) -> None:
    """Eager vs torch.compile(backend=a.backend, dynamic=a.dynamic or None) of one fwd+bwd step.
    Recompiles: the frames dynamo compiled (``torch._dynamo.utils.counters["frames"]["ok"]``)
    when the compiled step, already run at seq-len, first runs at 2 x seq-len."""
    from torch._dynamo.utils import counters
    torch.manual_seed(0)
    block = build_block(torch, a.hidden, a.heads, a.ffn)[0].to(dev, dtype)
    x = torch.randn(a.batch, a.seq_len, a.hidden, device=dev, dtype=dtype)
    x2 = torch.randn(a.batch, 2 * a.seq_len, a.hidden, device=dev, dtype=dtype)

    def step(model, inp):
        return lambda: model(inp).float().square().mean().backward()

    keep(rows, {"mode": "eager", "step_ms": ms(timed(torch, step(block, x), dev.type, a.warmup, a.iters)),
                "compile_s": 0.0, "recompiles": 0})
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(block, backend=a.backend, dynamic=True if a.dynamic else None)
    t0 = time.perf_counter()
    step(compiled, x)()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    step_ms = ms(timed(torch, step(compiled, x), dev.type, a.warmup, a.iters))
    frames = counters["frames"]["ok"]
    step(compiled, x2)()  # a second shape: a guard on the sequence length fails unless dynamic
    keep(rows, {"mode": f"compile ({a.backend})", "step_ms": step_ms, "compile_s": compile_s,
                "recompiles": counters["frames"]["ok"] - frames})


def swiglu_flops(batch: int, seq: int, hidden: int, ffn: int) -> int:
    """Forward FLOPs of a SwiGLU MLP: three matmuls of hidden x ffn, 2 FLOPs per multiply-add
    (the elementwise silu and product, ~4 * ffn per token, are left out)."""
    return 3 * 2 * batch * seq * hidden * ffn


def bench_swiglu(torch, a, dev, dtype, rows: list[dict]) -> None:
    """TFLOPS of the SwiGLU MLP forward for ffn from 8/3 h - span to 8/3 h + span by step."""
    centre = 8 * a.hidden / 3
    lo = max(a.step, int((centre - a.span) // a.step * a.step))
    for ffn in range(lo, int(centre + a.span) + 1, a.step):
        torch.manual_seed(0)
        mlp = build_block(torch, a.hidden, a.heads, ffn)[1]().to(dev, dtype)
        x = torch.randn(a.batch, a.seq_len, a.hidden, device=dev, dtype=dtype)
        with torch.no_grad():
            t = ms(timed(torch, lambda m=mlp, x=x: m(x), dev.type, a.warmup, a.iters))
        multiple = next((m for m in (256, 128, 64) if ffn % m == 0), 0)
        keep(rows, {"ffn": ffn, "multiple_of": multiple, "forward_ms": t,
                    "tflops": swiglu_flops(a.batch, a.seq_len, a.hidden, ffn) / (t / 1e3) / 1e12})


def layer_fns(torch, name: str, a, dev, dtype):
    """(forward, input) for one layer type at batch x seq x hidden (attention: causal SDPA on
    heads; embedding: a vocabulary of 4 x hidden rows)."""
    F, nn = torch.nn.functional, torch.nn
    b, t, h = a.batch, a.seq_len, a.hidden
    x = torch.randn(b, t, h, device=dev, dtype=dtype, requires_grad=True)
    if name == "linear":
        return nn.Linear(h, h, bias=False).to(dev, dtype), x
    if name == "attention":
        q = torch.randn(3, b, a.heads, t, h // a.heads, device=dev, dtype=dtype, requires_grad=True)
        return (lambda qkv: F.scaled_dot_product_attention(*qkv, is_causal=True)), q
    if name == "layernorm":
        return nn.LayerNorm(h).to(dev, dtype), x
    if name == "rmsnorm":
        return nn.RMSNorm(h).to(dev, dtype), x
    if name == "softmax":
        s = torch.randn(b, a.heads, t, t, device=dev, dtype=dtype, requires_grad=True)
        return (lambda z: z.softmax(-1)), s
    if name == "embedding":
        ids = torch.randint(0, 4 * h, (b, t), device=dev)
        return nn.Embedding(4 * h, h).to(dev, dtype), ids
    return build_block(torch, h, a.heads, a.ffn)[1]().to(dev, dtype), x


def bench_fwd_bwd(torch, a, dev, dtype, rows: list[dict]) -> None:
    """Forward ms, backward ms (one backward of a kept graph, ``retain_graph``) and their ratio
    per layer type. A matmul's backward does two matmuls of the forward's size (input and weight
    gradients), hence ~2 (Narayanan et al. 2021, https://arxiv.org/abs/2104.04473, Sec. 5.1)."""
    for name in a.layers:
        torch.manual_seed(0)
        fn, inp = layer_fns(torch, name, a, dev, dtype)
        fwd = ms(timed(torch, lambda f=fn, i=inp: f(i), dev.type, a.warmup, a.iters))
        out = fn(inp)
        grad = torch.randn_like(out)
        bwd = ms(timed(torch, lambda o=out, g=grad: o.backward(g, retain_graph=True), dev.type,
                       a.warmup, a.iters))
        keep(rows, {"layer": name, "forward_ms": fwd, "backward_ms": bwd, "bwd_over_fwd": bwd / fwd})


def saved_bytes(torch, module, x) -> int:
    """Bytes of the unique storages that autograd saves for backward while ``module(x)`` runs,
    parameters left out (they are not activations). A storage saved twice counts once.
    """
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


def block_activation_bytes(seq: int, batch: int, hidden: int, heads: int, ffn: int, e: int,
                           stat: int) -> int:
    """Bytes this block saves for backward, ``e`` bytes per element; derived op by op as
    Korthikanti et al. 2022 (https://arxiv.org/abs/2205.05198, Sec. 4.1) do for theirs:
    the two LN inputs 2sbh, LN outputs (the q/k/v and MLP inputs) 2sbh, q/k/v 3sbh, attention
    output (a view of it is the projection's input) sbh; SwiGLU w1 and w3 outputs, silu output
    and product 4sbf; all times ``e``. Plus LN mean and rstd, 4sb of ``stat`` bytes (the input
    dtype on CPU, fp32 on CUDA), and SDPA's fp32 log-sum-exp, 4sba. Their sbh(34 + ...) assumes
    16-bit, dropout and a GeLU MLP (2sbf)."""
    sb = seq * batch
    return e * sb * (8 * hidden + 4 * ffn) + 4 * sb * stat + 4 * sb * heads


def bench_activations(torch, a, dev, dtype, rows: list[dict]) -> None:
    """Measured saved bytes of the block vs block_activation_bytes for (batch, seq) points."""
    torch.manual_seed(0)
    block = build_block(torch, a.hidden, a.heads, a.ffn)[0].to(dev, dtype)
    e = torch.empty(0, dtype=dtype).element_size()
    stat = 4 if dev.type == "cuda" else e
    for batch, seq in a.points:
        x = torch.randn(batch, seq, a.hidden, device=dev, dtype=dtype, requires_grad=True)
        measured = saved_bytes(torch, block, x)
        keep(rows, {"batch": batch, "seq_len": seq, "measured_bytes": measured,
                    "formula_bytes": block_activation_bytes(seq, batch, a.hidden, a.heads, a.ffn, e, stat)})


def ddp_bucket_bytes(torch, a, dev, dtype) -> dict:
    """Bytes of DDP's gradient buckets on a 1-rank gloo group, from DDP's own logging data
    (``bucket_sizes``), and the gradients' bytes. With the default gradient_as_bucket_view=False
    the buckets are flat tensors beside the gradients: a second copy of them."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    block = build_block(torch, a.hidden, a.heads, a.ffn)[0].to(dev, dtype)
    grads = sum(p.numel() * p.element_size() for p in block.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            ddp = DDP(block, bucket_cap_mb=a.bucket_cap_mb)
            sizes = [int(s) for s in ddp._get_ddp_logging_data()["bucket_sizes"].split(", ")]
        finally:
            dist.destroy_process_group()
    return {"grad_bytes": grads, "bucket_bytes": sum(sizes), "buckets": len(sizes),
            "bucket_cap_mb": a.bucket_cap_mb}


# ----------------------------------------------------------------------------------------------
# The report and the command line
# ----------------------------------------------------------------------------------------------

def keep(rows: list[dict], row: dict) -> None:
    """Append ``row`` and print it at once (the header before the first), so that a sweep shows
    its progress and one stopped by Ctrl-C or SIGTERM has printed and kept every row it measured."""
    if not rows:
        print("".join(f"{k:>16}" for k in row), flush=True)
    rows.append(row)
    print("".join(f"{v:>16.3f}" if isinstance(v, float) else f"{v!s:>16}" for v in row.values()),
          flush=True)


def point(text: str) -> tuple[int, int]:
    """An argparse type for BATCHxSEQ, e.g. 2x128."""
    try:
        b, s = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not BATCHxSEQ (e.g. 2x128)") from None
    if not (1 <= b <= 4096 and 1 <= s <= 1 << 20):
        raise argparse.ArgumentTypeError(f"{text}: batch must be in 1..4096, seq in 1..{1 << 20}")
    return b, s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Micro-benchmarks of a transformer block: torch.compile vs eager, SwiGLU "
                    "widths, forward vs backward per layer, activation memory.",
        epilog="Example: %(prog)s swiglu --device cpu --json swiglu.json")
    p.add_argument("test", choices=TESTS, help="which benchmark")
    count = number(int, 1, 1 << 16)
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present, else cpu")
    p.add_argument("--dtype", choices=tuple(DTYPES),
                   help="default: bf16 on cuda and for activations, else fp32")
    p.add_argument("--hidden", type=count, default=256, help="hidden size (default 256)")
    p.add_argument("--heads", type=count, default=4, help="attention heads (default 4)")
    p.add_argument("--ffn", type=count, help="SwiGLU width (default 8/3 hidden, up to 64)")
    p.add_argument("--seq-len", type=count, default=256, help="tokens per sequence (default 256)")
    p.add_argument("--batch", type=count, default=2, help="sequences (default 2)")
    p.add_argument("--threads", type=number(int, 1, 1024),
                   help="torch CPU threads (default: torch's; 1 is steadier on a shared machine)")
    p.add_argument("--warmup", type=number(int, 0, 1000), default=3, help="untimed runs (3)")
    p.add_argument("--iters", type=number(int, 1, 10000), default=10, help="timed runs (10)")
    p.add_argument("--backend", default="inductor", type=nonempty,
                   help="compile: torch.compile backend (default inductor)")
    p.add_argument("--dynamic", action="store_true", help="compile: dynamic=True")
    p.add_argument("--span", type=number(int, 0, 4096), default=64,
                   help="swiglu: widths from 8/3 h - span to + span (default 64)")
    p.add_argument("--step", type=number(int, 1, 4096), default=8,
                   help="swiglu: width step (default 8)")
    p.add_argument("--layers", nargs="+", choices=LAYERS, default=list(LAYERS),
                   help="fwd-bwd: layer types (default all)")
    p.add_argument("--points", nargs="+", type=point, default=[(1, 128), (2, 128), (2, 256)],
                   help="activations: BATCHxSEQ points (default 1x128 2x128 2x256)")
    p.add_argument("--ddp", action="store_true",
                   help="activations: also DDP's gradient buckets on a 1-rank gloo group")
    p.add_argument("--bucket-cap-mb", type=number(float, 0, 1 << 16, lo_open=True), default=25,
                   help="activations --ddp: DDP bucket_cap_mb (default 25)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    a = build_parser().parse_args(argv)
    a.ffn = a.ffn or max(64, round(8 * a.hidden / 3 / 64) * 64)
    if a.hidden % a.heads:
        raise ScriptError(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}", EXIT_USAGE)
    widest = max(a.ffn, 3 * a.hidden, a.heads * a.seq_len, int(8 * a.hidden / 3 + a.span))
    tokens = max([a.batch * a.seq_len * 2] + [b * s for b, s in a.points])
    if tokens * widest > MAX_ELEMENTS:
        raise ScriptError(f"batch x seq-len x the widest layer is over {MAX_ELEMENTS:,} elements; "
                          "make the shape smaller", EXIT_USAGE)
    if (2 * a.span) // a.step + 1 > 1000:
        raise ScriptError("--span / --step gives over 1000 widths; raise --step", EXIT_USAGE)
    if a.json:
        check_output(a.json, "--json")
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise ScriptError("--device cuda, but torch sees no CUDA device")
    a.dtype = a.dtype or ("bf16" if a.device == "cuda" or a.test == "activations" else "fp32")
    dev, dtype = torch.device(a.device), getattr(torch, DTYPES[a.dtype])
    bench = {"compile": bench_compile, "swiglu": bench_swiglu, "fwd-bwd": bench_fwd_bwd,
             "activations": bench_activations}[a.test]
    rows, extra, stopped = [], {}, None
    on_stop_signals()  # Ctrl-C, scancel, a job's time limit: keep the rows measured so far
    try:
        bench(torch, a, dev, dtype, rows)
        extra = ddp_bucket_bytes(torch, a, dev, dtype) if a.test == "activations" and a.ddp else {}
    except Interrupted as stop:
        stopped = stop
        print(f"# interrupted after {len(rows)} row(s)")
    except (RuntimeError, torch._dynamo.exc.BackendCompilerFailed) as exc:
        raise ScriptError(f"{a.test} failed: {str(exc).splitlines()[0][:300]}") from exc
    if extra:
        print("# DDP: " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    if a.json and rows:
        doc = {**envelope(BENCHMARK, name, {"torch": torch.__version__}, command=command_line(argv)),
               "origin": "measured", "test": a.test, "device_type": a.device, "dtype": a.dtype,
               "threads": torch.get_num_threads(),
               "model": {k: getattr(a, k) for k in ("hidden", "heads", "ffn", "seq_len", "batch")},
               "warmup": a.warmup, "iters": a.iters,
               "units": {"time": "ms, median of iters", "tflops": "1e12 FLOP/s",
                         "memory": "bytes"},
               "results": rows}
        if a.test == "compile":
            doc.update(backend=a.backend, dynamic=a.dynamic)
        if extra:
            doc["ddp"] = extra
        if stopped:
            doc["interrupted"] = True
        write_atomic(a.json, json.dumps(doc, indent=2) + "\n")
        print(f"# wrote {a.json}")
    return stopped.status if stopped else EXIT_OK


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
