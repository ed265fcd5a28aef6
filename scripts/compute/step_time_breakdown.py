#!/usr/bin/env python
"""step_time_breakdown.py: where a training step's time goes: attention, MLP, communication,
optimizer, and the rest.

A stack of decoder blocks (pre-norm; causal multi-head attention; a GELU MLP of --ffn width) on
random tokens. Each part is timed on its own, the device synchronized before and after: the
attention sub-blocks of all layers, forward + backward; the MLP sub-blocks the same way; the
all-reduce of all gradients as one flat buffer (gloo on CPU, NCCL on CUDA; 0 with one process);
AdamW's step(). The whole step (forward, loss, backward, all-reduce, step) is timed, and
"other" is the step minus the sum of the parts: norms, embedding, loss, copies, launch overhead.
Every figure is the median of --iters timed runs after --warmup untimed ones, with min and max.
``fractions`` (each part over the step, other included, summing to 1) is what
``upgrade_cost.py --breakdown`` reads. Times in milliseconds. Method and a worked example:
book/en/compute/when-to-upgrade.md.

    python step_time_breakdown.py --device cpu --hidden 256 --layers 4 --heads 4 --seq-len 256
    torchrun --nproc-per-node 2 step_time_breakdown.py --device cpu --json breakdown.json

Example output (2 ranks of one thread each on a shared 2-vCPU machine, gloo; the first line and
the lines of rounds 1 to 10, ``# round 1 of 10: step 268.52 ms``, cut)::

    part             median ms   min ms   max ms  share of step
    attention            74.50    48.03    97.15         27.4%
    mlp                 107.65    74.93   142.87         39.6%
    communication        18.21    11.64    34.13          6.7%
    optimizer            48.93    24.99    59.63         18.0%
    other                22.90        -        -          8.4%
    sum of parts        249.29        -        -         91.6%
    measured step       272.19   229.62   419.23        100.0%

Exit status: 0 ok, 1 failure (no CUDA, a rank that cannot join), 2 usage, 3 the parts add up
to more than the step by over --tolerance (the isolated timings do not describe this step),
130/143 interrupted by Ctrl-C/SIGTERM (the medians of the rounds done are still written,
"interrupted": true, with "iters_done").
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

PROG = "step_time_breakdown.py"
BENCHMARK = "step_time_breakdown"
PARTS = ("attention", "mlp", "communication", "optimizer")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
MAX_ELEMENTS = 2**31 - 1  # the activations of one layer, batch x seq-len x ffn


# ----------------------------------------------------------------------------------------------
# The method: the model, the isolated parts, the whole step
# ----------------------------------------------------------------------------------------------

def build_model(torch, hidden: int, layers: int, heads: int, ffn: int, vocab: int):
    """A decoder-only stack: embedding, ``layers`` blocks (norm, attention; norm, MLP; each with
    a residual), a final norm. Returns (model, blocks)."""
    nn, F = torch.nn, torch.nn.functional

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, hidden))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(hidden), Attention()
            self.norm2 = nn.LayerNorm(hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(hidden)

        def forward(self, tokens):
            x = self.embed(tokens)
            for block in self.blocks:
                x = block(x)
            return self.norm(x)

    model = Model()
    return model, model.blocks


def timed_rounds(torch, fns: dict, device: str, warmup: int, iters: int, times: dict,
                 barrier=None, show: bool = False) -> None:
    """Seconds per call of each of ``fns`` ({name: callable}), called in turn in each of
    ``warmup`` untimed and ``iters`` timed rounds, so that a burst of load on a shared machine
    hits every part alike; appended to ``times[name]`` when a timed round is complete (and the
    round printed, when ``show``). The device is synchronized (and, with ``barrier``, all ranks
    meet) before each call starts, and synchronized again before its clock stops."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for i in range(warmup + iters):
        took = {}
        for name, fn in fns.items():
            sync()
            if barrier:
                barrier()
            start = time.perf_counter()
            fn()
            sync()
            took[name] = time.perf_counter() - start
        if i >= warmup:
            for name, seconds in took.items():
                times.setdefault(name, []).append(seconds)
            if show:
                print(f"# round {i - warmup + 1} of {iters}: step {took['step'] * 1e3:.2f} ms",
                      flush=True)


def measure(args, torch, times: dict, dist=None, world: int = 1, show: bool = False) -> None:
    """Time each part in isolation and the whole step, in rounds, into ``times``: seconds per
    timed run, per name, and the model's ``_params`` and ``_grad_bytes``. Interrupted, it leaves
    the rounds completed so far."""
    dev = torch.device(args.device)
    dtype = getattr(torch, DTYPES[args.dtype])
    torch.manual_seed(0)
    model, blocks = build_model(torch, args.hidden, args.layers, args.heads, args.ffn, args.vocab)
    model.to(device=dev, dtype=dtype)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq_len), device=dev)
    x0 = torch.randn(args.batch, args.seq_len, args.hidden, device=dev, dtype=dtype)
    barrier = dist.barrier if dist is not None else None

    def sublayers(name):  # forward + backward through one kind of sub-block of every layer
        def run():
            x = x0.detach().requires_grad_()
            y = x
            for block in blocks:
                y = y + getattr(block, name)(y)
            y.float().square().mean().backward()
        return run

    def flat_grads():
        return torch.cat([p.grad.reshape(-1) for p in params])

    def step():
        opt.zero_grad(set_to_none=True)
        model(tokens).float().square().mean().backward()
        if world > 1:
            flat = flat_grads()
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p))
                offset += n
        opt.step()

    step()  # every parameter now has a gradient: the buffer to all-reduce and AdamW's state
    fns = {"attention": sublayers("attn"), "mlp": sublayers("mlp")}
    if world > 1:
        flat = flat_grads()
        fns["communication"] = lambda: dist.all_reduce(flat)
    fns.update(optimizer=opt.step, step=step)
    times["_grad_bytes"] = sum(p.numel() * p.element_size() for p in params)
    times["_params"] = sum(p.numel() for p in params)
    timed_rounds(torch, fns, args.device, args.warmup, args.iters, times, barrier, show)


def summarize(times: dict) -> dict:
    """Median, min and max in ms per part and for the step; sum of parts, other, fractions.
    Communication is 0 where ``times`` has none (one process)."""
    times = {"communication": [0.0], **times}
    ms = {name: {"median_ms": statistics.median(t) * 1e3, "min_ms": min(t) * 1e3,
                 "max_ms": max(t) * 1e3} for name, t in times.items() if not name.startswith("_")}
    step = ms["step"]["median_ms"]
    total = sum(ms[p]["median_ms"] for p in PARTS)
    other = step - total
    whole = max(step, total)  # when the parts exceed the step, other is 0 and they share it all
    fractions = {p: ms[p]["median_ms"] / whole for p in PARTS}
    fractions["other"] = max(other, 0.0) / whole
    return {"parts": {p: ms[p] for p in PARTS}, "step": ms["step"], "sum_of_parts_ms": total,
            "other_ms": other, "parts_over_step": total / step, "fractions": fractions}


# ----------------------------------------------------------------------------------------------
# The report and the command line
# ----------------------------------------------------------------------------------------------

def report(s: dict, args, world: int, backend: str | None) -> str:
    ranks = f"{world} ranks ({backend})" if world > 1 else "1 process (communication: 0, none to do)"
    lines = [f"# {PROG}: {args.device} {args.dtype}, {ranks}, {args.layers} layers, hidden "
             f"{args.hidden}, {args.heads} heads, ffn {args.ffn}, batch {args.batch} x seq-len "
             f"{args.seq_len}; median of {args.iters} after {args.warmup} warm-up",
             f"{'part':<15}{'median ms':>11}{'min ms':>9}{'max ms':>9}{'share of step':>15}"]
    step = s["step"]["median_ms"]
    rows = [(p, s["parts"][p]) for p in PARTS]
    rows += [("other", {"median_ms": s["other_ms"]}),
             ("sum of parts", {"median_ms": s["sum_of_parts_ms"]}), ("measured step", s["step"])]
    for name, r in rows:
        lo, hi = (f"{r[k]:9.2f}" if k in r else f"{'-':>9}" for k in ("min_ms", "max_ms"))
        lines.append(f"{name:<15}{r['median_ms']:11.2f}{lo}{hi}{r['median_ms'] / step:14.1%}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Split a transformer training step into attention, MLP, communication, "
                    "optimizer and other time (medians in ms); the fractions feed "
                    "upgrade_cost.py --breakdown.",
        epilog="Example: torchrun --nproc-per-node 2 %(prog)s --device cpu --json b.json")
    count = number(int, 1, 1 << 20)
    p.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when present, else cpu")
    p.add_argument("--dtype", choices=tuple(DTYPES), help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--hidden", type=count, default=256, help="hidden size (default 256)")
    p.add_argument("--layers", type=number(int, 1, 1024), default=4, help="blocks (default 4)")
    p.add_argument("--heads", type=count, default=4, help="attention heads (default 4)")
    p.add_argument("--ffn", type=count, help="MLP width (default 4 x hidden)")
    p.add_argument("--seq-len", type=count, default=256, help="tokens per sequence (default 256)")
    p.add_argument("--batch", type=count, default=2, help="sequences per rank (default 2)")
    p.add_argument("--vocab", type=count, default=4096, help="embedding rows (default 4096)")
    p.add_argument("--warmup", type=number(int, 0, 1000), default=3, help="untimed runs (3)")
    p.add_argument("--iters", type=number(int, 1, 10000), default=10, help="timed runs (10)")
    p.add_argument("--tolerance", type=number(float, 0, 10, lo_open=True), default=0.35,
                   help="exit 3 when the parts exceed the step by more than this share (0.35)")
    p.add_argument("--timeout", type=number(float, 1, 86400), default=300,
                   help="seconds a rank waits for the others to join (default 300)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.ffn = args.ffn or 4 * args.hidden
    if args.hidden % args.heads:
        raise ScriptError(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}",
                          EXIT_USAGE)
    if args.batch * args.seq_len * max(args.ffn, 3 * args.hidden) > MAX_ELEMENTS:
        raise ScriptError(f"--batch x --seq-len x --ffn is over {MAX_ELEMENTS:,} elements per "
                          "activation; make the shape smaller", EXIT_USAGE)
    launch = Launch()
    if args.json:
        check_output(args.json, "--json")
    import torch
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise ScriptError("--device cuda, but torch sees no CUDA device")
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    dist, backend = None, None
    if launch.world > 1:
        import torch.distributed as dist
        backend = "nccl" if args.device == "cuda" else "gloo"
        with deadline(args.timeout + 10, f"joining {launch.world} ranks"):
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    times, stopped = {}, None
    on_stop_signals()  # Ctrl-C, scancel, a job's time limit: keep the rounds measured so far
    try:
        measure(args, torch, times, dist, launch.world, show=launch.rank == 0)
    except Interrupted as stop:
        if "step" not in times:  # no timed round done: nothing to write
            raise
        stopped = stop
    finally:
        if dist is not None:
            dist.destroy_process_group()
    s = summarize(times)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    if launch.rank == 0:
        if args.json:
            doc = {**envelope(BENCHMARK, name, {"torch": torch.__version__},
                              command=launch.command(argv)),
                   "origin": "measured", "device_type": args.device, "dtype": args.dtype,
                   "world_size": launch.world, "backend": backend,
                   "threads": torch.get_num_threads(),
                   "model": {k: getattr(args, k) for k in ("hidden", "layers", "heads", "ffn",
                                                           "seq_len", "batch", "vocab")},
                   "params": times["_params"], "grad_bytes": times["_grad_bytes"],
                   "warmup": args.warmup, "iters": args.iters, "tolerance": args.tolerance,
                   "units": {"time": "ms, median of iters (min, max)",
                             "fractions": "share of the measured step; sum to 1"},
                   "sum_of_parts_ms": s["sum_of_parts_ms"], "other_ms": s["other_ms"],
                   "parts_over_step": s["parts_over_step"], "fractions": s["fractions"],
                   "results": [{"part": p, **s["parts"][p], "fraction": s["fractions"][p]}
                               for p in PARTS]
                   + [{"part": "other", "median_ms": s["other_ms"], "min_ms": None,
                       "max_ms": None, "fraction": s["fractions"]["other"]},
                      {"part": "step", **s["step"], "fraction": 1.0}],
                   "interrupted": stopped is not None}
            if stopped:
                doc["iters_done"] = len(times["step"])
            write_atomic(args.json, json.dumps(doc, indent=2) + "\n")
        print(report(s, args, launch.world, backend))
        if args.json:
            print(f"# wrote {args.json}")
    if stopped:
        raise ScriptError(f"interrupted by {stopped.name} after {len(times['step'])} of "
                          f"{args.iters} rounds", stopped.status)
    if s["parts_over_step"] > 1 + args.tolerance:
        raise ScriptError(f"the parts add up to {s['parts_over_step']:.0%} of the measured step, "
                          f"over 100% + {args.tolerance:.0%}: the isolated timings do not describe "
                          "this step (a noisy machine? try more --iters)", EXIT_FINDING)
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
