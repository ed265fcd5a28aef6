#!/usr/bin/env python
"""context_parallel.py: ring attention and all-to-all (Ulysses) context parallelism, checked against full attention.

Each rank holds one slice of the sequence of q, k and v (context parallelism, CP). ``ring``
passes the k/v blocks around the ranks with send/recv and merges the partial results with their
log-sum-exp (online softmax); its backward is written out by hand, with the gradients of k and v
travelling around the ring behind their blocks. ``ulysses`` re-shards with an all-to-all from
sequence slices to head groups, runs full attention on its heads, and re-shards back; autograd
runs the backward through the all-to-alls. With a causal mask the ring uses the zigzag layout
(rank r holds chunks r and 2W-1-r of 2W chunks) so every rank does the same work;
``--layout contiguous`` shows the unbalanced naive layout. ``--check`` compares each rank's
output and the gradients of q, k and v with full attention computed in float64 on one rank.
Times are milliseconds (median of ``--repeat`` runs); bytes are what this rank sent.

How to launch (CPU/gloo; nccl where CUDA is available, one GPU per rank)::

    torchrun --standalone --nproc-per-node 4 context_parallel.py --check
    torchrun --standalone --nproc-per-node 2 context_parallel.py --check --layout zigzag contiguous --json cp.json
    torchrun --standalone --nproc-per-node 8 context_parallel.py --seq 65536 --heads 32 --dtype bf16

Example output (2-core cloud VM, torch 2.13.0+cpu, gloo; the columns after ``err dv``, forward and
backward ms, bytes sent each way and score pairs per rank, are cut here)::

    $ torchrun --standalone --nproc-per-node 2 scripts/training/context_parallel.py --check
    method   layout      mask    rank  err out  err dq   err dk   err dv
    ring     zigzag      none    0     3.7e-07  3.8e-07  3.6e-07  3.8e-07
    ring     zigzag      none    1     3.4e-07  4.5e-07  3.3e-07  5.3e-07
    ring     zigzag      causal  0     4.7e-07  4.1e-07  4.8e-07  1.7e-06
    ring     zigzag      causal  1     5.6e-07  4.8e-07  5.4e-07  3.8e-07
    ulysses  contiguous  none    0     3.2e-07  3.6e-07  2.7e-07  4.5e-07
    ulysses  contiguous  none    1     3.4e-07  3.5e-07  3.8e-07  2.4e-07
    ulysses  contiguous  causal  0     3.1e-07  4.1e-07  7.8e-07  1.7e-06
    ulysses  contiguous  causal  1     3.8e-07  5.0e-07  2.7e-07  4.3e-07
    32 of 32 checks within 0.0001 of full attention (fp32; largest error 1.7e-06)

Exit status: 0 done (and ``--check`` passed), 1 a rank or a collective failed, 2 usage (an
option, a size the world size does not divide, a launcher variable), 3 ``--check`` found an error
above the tolerance, 130/143 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback

PROG = "context_parallel.py"
TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2, "fp16": 5e-3}  # max abs error vs float64, inputs ~N(0, 1)


class Stats:
    """What one rank did in one pass: bytes it sent and (query, key) score pairs it computed."""
    sent = pairs = 0


# --- the layout: which tokens each rank holds ---------------------------------------------------

def chunks_of(rank: int, world: int, seq: int, layout: str) -> list[tuple[int, int]]:
    """The [start, end) token ranges rank holds: one slice of seq/W (contiguous), or chunks rank
    and 2W-1-rank of 2W equal chunks (zigzag: an early chunk paired with a late one)."""
    if layout == "contiguous":
        c = seq // world
        return [(rank * c, (rank + 1) * c)]
    c = seq // (2 * world)
    return [(rank * c, (rank + 1) * c), ((2 * world - 1 - rank) * c, (2 * world - rank) * c)]


def relation(q: tuple[int, int], k: tuple[int, int], causal: bool) -> str:
    """How a query chunk sees a key chunk of the same length: all of it ("full"), its lower
    triangle ("diagonal", the same chunk), or nothing ("skip", every key comes later)."""
    if not causal or k[1] <= q[0]:
        return "full"
    return "diagonal" if k[0] == q[0] else "skip"


# --- ring attention: blocks, the online-softmax merge, the ring ---------------------------------

def block_scores(q, k, kind: str):
    s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if kind == "diagonal":
        s = s.masked_fill(~s.new_ones(s.shape[-2:], dtype=bool).tril(), float("-inf"))
    return s


def ring_pass(tensors, world: int, rank: int, tag: int, stats: Stats):
    """Send ``tensors`` to the next rank and receive as many from the previous one, without
    waiting: returns the receive buffers and the requests to wait on."""
    import torch.distributed as dist
    bufs = [t.new_empty(t.shape) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), (rank + 1) % world, tag=tag) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, (rank - 1) % world, tag=tag) for b in bufs]
    stats.sent += sum(t.numel() * t.element_size() for t in tensors)
    return bufs, dist.batch_isend_irecv(ops)


def ring_forward(q, k, v, mine, pos, causal, world, rank, stats):
    """Attention of local q over every rank's k/v. ``mine``: this rank's chunks; ``pos(src)``:
    those of rank src. Returns the output and the log-sum-exp of each query row (float32)."""
    import torch
    c = mine[0][1] - mine[0][0]
    out = q.new_zeros(q.shape, dtype=torch.float32)
    lse = q.new_full((*q.shape[:-1], 1), float("-inf"), dtype=torch.float32)
    for t in range(world):
        src = (rank - t) % world                        # whose k/v this rank holds at step t
        if t < world - 1:                               # start passing them on, compute meanwhile
            (k_next, v_next), reqs = ring_pass([k, v], world, rank, 1, stats)
        for i, qc in enumerate(mine):
            rows = slice(i * c, (i + 1) * c)
            for j, kc in enumerate(pos(src)):
                kind = relation(qc, kc, causal)
                if kind == "skip":
                    continue
                s = block_scores(q[..., rows, :], k[..., j * c:(j + 1) * c, :], kind)
                stats.pairs += s.shape[0] * s.shape[1] * (c * c if kind == "full" else c * (c + 1) // 2)
                block_lse = s.logsumexp(-1, keepdim=True)
                block_out = torch.exp(s - block_lse).to(v.dtype) @ v[..., j * c:(j + 1) * c, :]
                new = torch.logaddexp(lse[..., rows, :], block_lse)   # online softmax: rescale both
                out[..., rows, :] = (out[..., rows, :] * torch.exp(lse[..., rows, :] - new)
                                     + block_out.float() * torch.exp(block_lse - new))
                lse[..., rows, :] = new
        if t < world - 1:
            for r in reqs:
                r.wait()
            k, v = k_next, v_next
    return out, lse


def ring_backward(q, k, v, out, lse, dout, mine, pos, causal, world, rank, stats):
    """The gradients of q, k and v. k/v go around the ring again; each block's dk/dv accumulator
    follows it one step behind and, after the last step, goes home to the rank that owns it."""
    import torch
    c = mine[0][1] - mine[0][0]
    scale = 1 / math.sqrt(q.shape[-1])
    delta = (dout.float() * out).sum(-1, keepdim=True)     # rowsum(dO * O), as in FlashAttention
    dq, dk, dv = (t.new_zeros(t.shape, dtype=torch.float32) for t in (q, k, v))
    grads, grad_reqs = (dk, dv), []
    for t in range(world):
        src = (rank - t) % world
        if t > 0:                                       # dk/dv of block src, from the previous rank
            for r in grad_reqs:
                r.wait()
            dk, dv = grads
        if t < world - 1:
            (k_next, v_next), reqs = ring_pass([k, v], world, rank, 1, stats)
        for i, qc in enumerate(mine):
            rows = slice(i * c, (i + 1) * c)
            for j, kc in enumerate(pos(src)):
                kind = relation(qc, kc, causal)
                if kind == "skip":
                    continue
                cols = slice(j * c, (j + 1) * c)
                p = torch.exp(block_scores(q[..., rows, :], k[..., cols, :], kind) - lse[..., rows, :])
                do = dout[..., rows, :].float()
                dv[..., cols, :] += p.transpose(-1, -2) @ do
                ds = p * (do @ v[..., cols, :].float().transpose(-1, -2) - delta[..., rows, :])
                dq[..., rows, :] += ds @ k[..., cols, :].float() * scale
                dk[..., cols, :] += ds.transpose(-1, -2) @ q[..., rows, :].float() * scale
        if world > 1:                                   # on to the next rank
            grads, grad_reqs = ring_pass([dk, dv], world, rank, 2, stats)
        if t < world - 1:
            for r in reqs:
                r.wait()
            k, v = k_next, v_next
    for r in grad_reqs:
        r.wait()
    return dq, *grads


def ring_attention(q, k, v, mine, pos, causal, world, rank, stats):
    import torch

    class Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = ring_forward(q, k, v, mine, pos, causal, world, rank, stats)
            ctx.save_for_backward(q, k, v, out, lse)
            return out.to(q.dtype)

        @staticmethod
        def backward(ctx, dout):
            grads = ring_backward(*ctx.saved_tensors, dout, mine, pos, causal, world, rank, stats)
            return tuple(g.to(dout.dtype) for g in grads)
    return Ring.apply(q, k, v)


# --- Ulysses: all-to-all from sequence slices to head groups and back ---------------------------

def all_to_all(x, stats: Stats):
    """all_to_all_single of ``x`` (dim 0 = destination rank), with autograd: the backward of an
    even all-to-all is the same all-to-all of the gradient."""
    import torch
    import torch.distributed as dist

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.contiguous()
            y = torch.empty_like(x)
            dist.all_to_all_single(y, x)
            stats.sent += x.numel() * x.element_size() * (x.shape[0] - 1) // x.shape[0]
            return y

        @staticmethod
        def backward(ctx, dy):
            return AllToAll.apply(dy)
    return AllToAll.apply(x)


def ulysses_attention(q, k, v, causal, world, stats):
    """(B, H, S/W, D) per rank -> all-to-all -> (B, H/W, S, D), attention, and back."""
    import torch.nn.functional as F
    b, h, s_local, d = q.shape

    def seq_to_heads(x):
        x = all_to_all(x.reshape(b, world, h // world, s_local, d).transpose(0, 1), stats)
        return x.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * s_local, d)

    def heads_to_seq(x):
        x = all_to_all(x.reshape(b, h // world, world, s_local, d).permute(2, 0, 1, 3, 4), stats)
        return x.transpose(0, 1).reshape(b, h, s_local, d)
    o = F.scaled_dot_product_attention(seq_to_heads(q), seq_to_heads(k), seq_to_heads(v), is_causal=causal)
    s = world * s_local
    stats.pairs += b * (h // world) * (s * (s + 1) // 2 if causal else s * s)
    return heads_to_seq(o)


# --- the run ------------------------------------------------------------------------------------

def reference(q, k, v, dout, causal):
    """Full attention and the gradients of q, k, v, in float64, on this rank alone."""
    import torch
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=bool).tril(), float("-inf"))
    out = torch.softmax(s, -1) @ v
    out.backward(dout.double())
    return out.detach(), q.grad, k.grad, v.grad


def run_one(args, method, layout, causal, world, rank, device):
    """One method x layout x mask: forward and backward ``--repeat`` times; the row of results."""
    import torch
    import torch.distributed as dist
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    g = torch.Generator().manual_seed(args.seed)          # every rank draws the same full tensors
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    full = [torch.randn(shape, generator=g).to(dtype) for _ in range(4)]   # q, k, v, dout
    mine = chunks_of(rank, world, args.seq, layout)
    index = torch.cat([torch.arange(a, e) for a, e in mine])
    q, k, v, dout = (t[:, :, index].to(device) for t in full)
    fwd_ms, bwd_ms = [], []
    for _ in range(args.repeat):
        stats = Stats()                                   # the Functions count into it
        qi, ki, vi = (t.clone().requires_grad_() for t in (q, k, v))
        dist.barrier()
        start = time.perf_counter()
        if method == "ring":
            out = ring_attention(qi, ki, vi, mine, lambda src: chunks_of(src, world, args.seq, layout),
                                 causal, world, rank, stats)
        else:
            out = ulysses_attention(qi, ki, vi, causal, world, stats)
        fwd_ms.append((time.perf_counter() - start) * 1e3)
        sent_fwd = stats.sent
        dist.barrier()
        start = time.perf_counter()
        out.backward(dout)
        bwd_ms.append((time.perf_counter() - start) * 1e3)
    row = {"method": method, "layout": layout, "causal": causal, "rank": rank,
           "fwd_ms": statistics.median(fwd_ms), "bwd_ms": statistics.median(bwd_ms),
           "bytes_sent_fwd": sent_fwd, "bytes_sent_bwd": stats.sent - sent_fwd, "score_pairs": stats.pairs}
    if args.check:
        ref = reference(*full[:3], full[3], causal)
        got = (out.detach(), qi.grad, ki.grad, vi.grad)
        for name, r, x in zip(("out", "dq", "dk", "dv"), ref, got, strict=True):
            row[f"max_abs_err_{name}"] = (x.double().cpu() - r[:, :, index]).abs().max().item()
    return row


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Ring attention and all-to-all (Ulysses) "
                                "context parallelism, timed, and with --check compared with full attention.")
    p.add_argument("--method", nargs="+", choices=("ring", "ulysses"), default=["ring", "ulysses"],
                   help="methods to run (default both)")
    p.add_argument("--mask", nargs="+", choices=("none", "causal"), default=["none", "causal"],
                   help="attention masks to run (default both)")
    p.add_argument("--layout", nargs="+", choices=("zigzag", "contiguous"), default=["zigzag"],
                   help="the ring's sequence layout: zigzag (chunks r and 2W-1-r, balanced under a "
                        "causal mask) or contiguous (default zigzag; Ulysses is always contiguous)")
    p.add_argument("--seq", type=number(int, 1, 1_000_000), default=128, help="total sequence length (default 128)")
    p.add_argument("--heads", type=number(int, 1, 1024), default=4, help="attention heads (default 4)")
    p.add_argument("--head-dim", type=number(int, 1, 1024), default=16, help="head dimension (default 16)")
    p.add_argument("--batch", type=number(int, 1, 1024), default=1, help="batch size (default 1)")
    p.add_argument("--dtype", choices=tuple(TOLERANCE), default="fp32", help="q, k, v dtype (default fp32)")
    p.add_argument("--repeat", type=number(int, 1, 1000), default=3,
                   help="forward+backward passes per case; times are their median (default 3)")
    p.add_argument("--seed", type=number(int, 0, 2**63 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--check", action="store_true",
                   help="compare output and gradients with full attention in float64 (exit 3 above tolerance)")
    p.add_argument("--tolerance", type=number(float, 0, lo_open=True),
                   help="largest max abs error --check accepts (default: 1e-4 fp32, 5e-3 fp16, 5e-2 bf16)")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the results as JSON (rank 0)")
    p.add_argument("--timeout-s", type=number(float, 0, 3600, lo_open=True), default=60.0,
                   help="deadline of the rendezvous and of each collective, seconds (default 60)")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def check_sizes(args, world: int) -> None:
    """Refuse, before any work, the sizes the world size does not divide or the check cannot hold."""
    def refuse(message):
        raise ScriptError(message, EXIT_USAGE)
    if "ulysses" in args.method and args.heads % world:
        refuse(f"--heads {args.heads} is not divisible by the world size {world}: Ulysses gives "
               f"each rank heads/{world} of them; use a multiple of {world}, or --method ring")
    parts = 2 * world if "ring" in args.method and "zigzag" in args.layout else world
    if args.seq % parts:
        why = "zigzag cuts it into 2 x world chunks" if parts > world else "each rank holds seq/world tokens"
        refuse(f"--seq {args.seq} is not divisible by {parts} ({why}); use a multiple of {parts}")
    if args.check and args.batch * args.heads * args.seq ** 2 * 8 * 3 > 4 << 30:
        refuse(f"--check computes full attention in float64 on every rank: {args.batch} x "
               f"{args.heads} x {args.seq}^2 scores need over 4 GiB; use a smaller --seq")


def show(rows: list[dict], check: bool) -> None:
    def size(n):
        return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"
    head = f"{'method':<8} {'layout':<11} {'mask':<7} {'rank':<5}"
    head += "".join(f" {'err ' + n:<8}" for n in ("out", "dq", "dk", "dv")) if check else ""
    say(head + f" {'fwd ms':>7} {'bwd ms':>7} {'sent fwd':>10} {'sent bwd':>10} {'score pairs':>12}")
    for r in rows:
        line = f"{r['method']:<8} {r['layout']:<11} {'causal' if r['causal'] else 'none':<7} {r['rank']:<5}"
        if check:
            line += "".join(f" {r['max_abs_err_' + n]:<8.1e}" for n in ("out", "dq", "dk", "dv"))
        say(line + f" {r['fwd_ms']:>7.1f} {r['bwd_ms']:>7.1f} {size(r['bytes_sent_fwd']):>10} "
            f"{size(r['bytes_sent_bwd']):>10} {r['score_pairs']:>12,}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tolerance = args.tolerance or TOLERANCE[args.dtype]
    launch = Launch()
    rank, world = launch.rank, launch.world
    check_sizes(args, world)
    if args.json:
        check_output(args.json, "--json", inputs=[os.path.abspath(__file__)])
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch
    import torch.distributed as dist
    backend = "nccl" if torch.cuda.is_available() else "gloo"     # one GPU per rank, or CPUs
    device = torch.device("cuda", launch.local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32 for the check
    init = {"store": dist.HashStore()} if world == 1 else {}   # one rank needs no network port
    with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {launch.master}"):
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout_s), **init)
        except (RuntimeError, ValueError) as exc:
            raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {launch.master} "
                              f"failed: {(str(exc).strip().splitlines() or [''])[0]}") from None
    try:
        rows = [run_one(args, method, layout if method == "ring" else "contiguous", mask == "causal",
                        world, rank, device)
                for method in args.method for layout in (args.layout if method == "ring" else ["contiguous"])
                for mask in args.mask]
        gathered = [None] * world
        dist.all_gather_object(gathered, rows)
    except Exception as exc:  # noqa: BLE001 - a peer gone, a timeout: one line, and no hang on the way out
        die(f"rank {rank}: {type(exc).__name__}: {exc}", debug=args.debug)
    bad = []
    if rank == 0:
        rows = sorted((r for part in gathered for r in part),
                      key=lambda r: (args.method.index(r["method"]), r["layout"], r["causal"], r["rank"]))
        show(rows, args.check)
        errors = [r[f"max_abs_err_{n}"] for r in rows if args.check for n in ("out", "dq", "dk", "dv")]
        bad = [e for e in errors if not e <= tolerance]
        if args.check:
            say(f"{len(errors) - len(bad)} of {len(errors)} checks within {tolerance:g} of full "
                f"attention ({args.dtype}; largest error {max(errors):.1e})")
        if args.json:
            report = envelope("context_parallel", f"{world} x {device.type} ({backend})",
                              {"torch": torch.__version__}, command=launch.command(argv))
            report["settings"] = {k: getattr(args, k) for k in ("seq", "heads", "head_dim", "batch", "dtype",
                                                                 "repeat", "seed", "check")}
            report["settings"].update(world_size=world, backend=backend, tolerance=tolerance)
            report["results"] = rows
            write_atomic(args.json, json.dumps(report, indent=1) + "\n")
    dist.destroy_process_group()
    return EXIT_FINDING if rank == 0 and bad else EXIT_OK


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


def env_int(name: str, default: int | None = None, lo: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty, an error when
    there is no default); a non-integer or a value below ``lo`` raises ScriptError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        if default is None:
            raise ScriptError(f"environment variable {name} is not set", EXIT_USAGE)
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScriptError(f"environment variable {name}={text!r} is not an integer", EXIT_USAGE) from None
    if value < lo:
        raise ScriptError(f"environment variable {name}={value} must be >= {lo}", EXIT_USAGE)
    return value


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


class deadline:
    """``with deadline(seconds, "what"):`` bounds a wait that has no timeout of its own (or one
    that retries): after ``seconds`` it prints ``PROG: error: WHAT did not finish within S s``
    and ends the process at once (os._exit, since the stuck call cannot be unwound)."""

    def __init__(self, seconds: float, what: str):
        self.timer = threading.Timer(seconds, self._expire, (seconds, what))
        self.timer.daemon = True

    @staticmethod
    def _expire(seconds: float, what: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {what} did not finish within {seconds:g} s\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


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


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline to ``stream`` (stdout) in one write, and flush: the ranks of
    a job share the launcher's stdout and stderr, and print() writes the newline apart, so two
    ranks' lines could run together. A reader of stdout that left (``| head -1``) ends no rank,
    since the others would fail in their next collective without it: the rank goes on."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout or not reader_left():
            raise


def die(message: str | None, status: int = EXIT_FAILURE, debug: bool = False) -> None:
    """End a rank of a distributed script at once: ``PROG: error: MESSAGE`` (its first line) on
    stderr, after the traceback of the exception being handled when ``debug``, then
    os._exit(status); no line when ``message`` is None. Not sys.exit: after a failed collective,
    process-group teardown can wait for peers that are gone, and a rank that hangs on its way out
    is what these scripts exist to prevent. Called while handling the BrokenPipeError of a reader
    that closed stdout (``| head -1``), it exits quietly with EXIT_OK, as run_main does; output
    that a reader gone meanwhile can no longer take is dropped."""
    if reader_left():
        message, status = None, EXIT_OK
    elif debug and sys.exc_info()[1] is not None:
        traceback.print_exc()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone meanwhile, a closed stdout: the exit drops it
        pass
    if message is not None:
        first = " ".join(str(message).strip().splitlines()[:1]) or "unknown error"
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {first}\n")
        sys.stderr.flush()
    os._exit(status)


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


class Launch:
    """This process's place in a distributed run, from the environment: torchrun's (or any
    env:// launch's) RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE when RANK or WORLD_SIZE is
    set; else plain srun's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID when it started more than
    one task; else a lone process, rank 0 of 1. ``launcher`` says which: "torchrun", "env", "srun"
    or "python". Each variable is read with env_int, so one that is not an integer is a usage
    error naming it; so are fewer ranks than ``min_world``, a rank outside the world and, for more
    than one rank, a missing MASTER_ADDR or MASTER_PORT or a port outside 1-65535. ``addr`` and
    ``port`` are where rank 0 (or torchrun's agent) hosts the rendezvous; ``master`` is
    "ADDR:PORT", None for a lone process (it makes a group of one without a network port)."""

    def __init__(self, min_world: int = 1):
        import socket
        env = os.environ
        self.host = socket.gethostname()
        if "RANK" in env or "WORLD_SIZE" in env:
            self.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
            names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        elif "SLURM_PROCID" in env and env_int("SLURM_NTASKS", 1, lo=1) > 1:
            self.launcher, names = "srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
        else:
            self.launcher, names = "python", None
        self.rank, self.world = (env_int(names[0]), env_int(names[1], lo=1)) if names else (0, 1)
        self.local_rank = env_int(names[2], 0) if names else 0
        self.local_world = env_int("LOCAL_WORLD_SIZE", 1, lo=1)
        if self.world < min_world:
            raise ScriptError(f"needs at least {min_world} ranks (world size is {self.world}); launch "
                              f"with torchrun --nproc-per-node {min_world} (or more), or srun", EXIT_USAGE)
        if self.rank >= self.world:
            raise ScriptError(f"rank {self.rank} is outside world size {self.world} (check "
                              f"{names[0]} and {names[1]})", EXIT_USAGE)
        self.addr, self.port, self.master = None, None, None
        if self.launcher != "python":
            self._read_master()

    def _read_master(self) -> None:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
        if missing and self.world > 1:
            both = len(missing) > 1
            raise ScriptError(
                f"MASTER_ADDR and MASTER_PORT must be set for rank {self.rank} of {self.world} "
                f"(launched by {self.launcher}): environment variable{'s' * both} "
                f"{' and '.join(missing)} {'are' if both else 'is'} not set; export "
                f"{'them' if both else 'it'} (the first node's address and a free port) or launch "
                "with torchrun", EXIT_USAGE)
        if not missing:
            self.addr, self.port = os.environ["MASTER_ADDR"].strip(), env_int("MASTER_PORT")
            if not 1 <= self.port <= 65535:
                raise ScriptError(f"environment variable MASTER_PORT={self.port} is not a TCP port "
                                  "(1-65535)", EXIT_USAGE)
            self.master = f"{self.addr}:{self.port}"

    def me(self) -> str:
        return f"rank {self.rank} on {self.host}"

    def command(self, argv=None) -> str:
        """The command line of the run, for a results file: ``command_line()`` with the launcher's
        own in front of it (``torchrun --nnodes N --nproc-per-node M``, ``srun --ntasks N``)."""
        line = command_line(argv)
        if self.launcher == "torchrun":
            nnodes = os.environ.get("GROUP_WORLD_SIZE", "1")
            return f"torchrun --nnodes {nnodes} --nproc-per-node {self.local_world} {line.removeprefix('python ')}"
        return f"srun --ntasks {self.world} {line}" if self.launcher == "srun" else line


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
