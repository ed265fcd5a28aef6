#!/usr/bin/env python
"""loss_spike_experiment.py: train a tiny transformer on CPU with settings that do and do not spike.

Trains a small decoder-only transformer (pre-LayerNorm, causal self-attention, GELU MLP, AdamW) on
a synthetic, seeded language: sequences from a random sparse Markov chain, whose entropy rate is
the lowest achievable loss (printed as the floor). Each configuration of ``--configs`` changes only
the training recipe (learning rate, warmup, clipping, QK-layernorm, z-loss, injected bad batches,
skipping them); initialisation and data order come from the same seed, so two runs differ only by
what their names say. Per step: the loss (nats/token), the gradient norm before clipping, the
largest |attention logit|, log Z of the output softmax and each block's gradient norm. A spike
starts where the loss is more than ``--z-threshold`` standard deviations above the mean of the
previous ``--window`` steps (a rolling z-score; also computed on the gradient norm). The recipes
and how to read a run: book/en/instabilities/index.md.

One process, CPU (sized for a laptop core; ``--device cuda`` runs the same code)::

    python loss_spike_experiment.py --json results.json
    python loss_spike_experiment.py --configs baseline,high_lr --steps 300 --json quick.json

Example output (3 of the 6 runs of results/instabilities/loss_spike_experiment.json)::

    baseline               final_loss 1.371  max_loss_z     2.8  max_grad_z     3.8  spikes  0  max|attn logit|    5.9  diverged False
    bad_batches            final_loss 1.376  max_loss_z   182.2  max_grad_z   560.0  spikes  3  max|attn logit|    6.2  diverged False
    high_lr                final_loss 3.546  max_loss_z     3.9  max_grad_z    17.0  spikes  0  max|attn logit| 36411.4  diverged False
    # loss floor (entropy rate of the data) 1.310 nats/token; 6 runs x 700 steps in 381 s

Exit status: 0 ok, 1 failure, 2 usage (all but the device checked before torch is imported),
130/143 interrupted by Ctrl-C/SIGTERM (the runs that finished are printed and written).
"""  # noqa: E501 - the example quotes whole lines of the script's real output

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

PROG = "loss_spike_experiment.py"

# Training recipes. Every key not given falls back to DEFAULTS.
DEFAULTS = {"lr": 1e-3, "warmup": 50, "clip": 1.0, "eps": 1e-8, "beta2": 0.95,
            "weight_decay": 0.1, "qk_norm": False, "z_loss": 0.0, "bad_at": [], "bad_len": 4,
            "skip_z": 0.0}
# bad_at: fractions of --steps where bad_len consecutive batches are replaced by bad ones (one
# token repeated over the whole sequence).
# skip_z: if > 0, a batch whose loss z-score exceeds it gets no optimizer step (it is skipped).
CONFIGS = {
    "baseline": {},
    "bad_batches": {"bad_at": [0.35, 0.6], "clip": 0.0},
    "bad_batches_skipped": {"bad_at": [0.35, 0.6], "clip": 0.0, "skip_z": 6.0},
    "high_lr": {"lr": 1e-1, "warmup": 0, "clip": 0.0},
    "high_lr_qknorm_zloss": {"lr": 1e-1, "warmup": 0, "clip": 0.0, "qk_norm": True,
                             "z_loss": 1e-4},
    "high_lr_warmup_clip": {"lr": 1e-1, "warmup": 200, "clip": 1.0},
}
# What one CPU process can hold: float32 elements of the logits and of the attention scores of a
# batch, parameters (AdamW keeps three more copies), and per-step values kept for --json.
MAX_ACTIVATION = 1 << 27
MAX_PARAMS = 200_000_000
MAX_RECORDS = 50_000_000


# ----------------------------------------------------------------------------------------------
# The detector
# ----------------------------------------------------------------------------------------------

def rolling_z(values: list[float], window: int) -> list[float]:
    """Rolling z-score of each value against the ``window`` values before it.

    z[t] = (v[t] - mean(v[t-window:t])) / std(v[t-window:t]) for t >= window, else 0.0.
    Non-finite values give +inf (a NaN loss is the largest spike there is); a zero standard deviation
    is replaced by 1e-12. Pure Python, no torch; returns a list as long as ``values``.
    """
    out = []
    for t, v in enumerate(values):
        if t < window:
            out.append(0.0)
            continue
        if not math.isfinite(v):
            out.append(math.inf)
            continue
        past = [x for x in values[t - window:t] if math.isfinite(x)]
        if len(past) < 2:
            out.append(0.0)
            continue
        mean = sum(past) / len(past)
        std = math.sqrt(sum((x - mean) ** 2 for x in past) / (len(past) - 1))
        out.append((v - mean) / max(std, 1e-12))
    return out


def spike_steps(z: list[float], threshold: float) -> list[int]:
    """Steps where ``z`` crosses ``threshold`` from below (the first step of each spike)."""
    steps = []
    for t, value in enumerate(z):
        if value > threshold and (t == 0 or z[t - 1] <= threshold):
            steps.append(t)
    return steps


def bad_steps(cfg: dict, steps: int) -> list[int]:
    """The steps whose batch a configuration replaces by a bad one."""
    return sorted({int(f * steps) + i for f in cfg["bad_at"] for i in range(cfg["bad_len"])})


# ----------------------------------------------------------------------------------------------
# The model, the language and one run
# ----------------------------------------------------------------------------------------------

def build_model(vocab: int, d: int, layers: int, heads: int, seq: int, qk_norm: bool):
    """A pre-LN decoder-only transformer whose forward returns (logits, the largest |attention
    logit| of any head and layer); with ``qk_norm`` queries and keys are layer-normalised per head
    before their dot product."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        """Pre-LN block; returns the block output and the largest |attention logit| it saw."""

        def __init__(self, d: int, heads: int, qk_norm: bool):
            super().__init__()
            self.heads, self.dh = heads, d // heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.fc1 = nn.Linear(d, 4 * d, bias=False)
            self.fc2 = nn.Linear(4 * d, d, bias=False)
            # QK-layernorm: normalise queries and keys per head before the dot product.
            self.q_ln = nn.LayerNorm(self.dh) if qk_norm else nn.Identity()
            self.k_ln = nn.LayerNorm(self.dh) if qk_norm else nn.Identity()

        def forward(self, x: torch.Tensor, mask: torch.Tensor):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (y.view(b, t, self.heads, self.dh).transpose(1, 2) for y in (q, k, v))
            q, k = self.q_ln(q), self.k_ln(k)
            logits = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
            peak = logits.detach().abs().max()
            att = logits.masked_fill(mask, float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), peak

    class TinyLM(nn.Module):
        def __init__(self, vocab: int, d: int, layers: int, heads: int, seq: int, qk_norm: bool):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads, qk_norm) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1))

        def forward(self, idx: torch.Tensor):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            peaks = []
            for blk in self.blocks:
                x, peak = blk(x, self.mask[:t, :t])
                peaks.append(peak)
            return self.head(self.ln_f(x)), torch.stack(peaks).max()

    return TinyLM(vocab, d, layers, heads, seq, qk_norm)


def markov_language(vocab: int, seed: int):
    """The language: a Markov chain where each token has 4 possible successors with random
    probabilities. Returns (successors [vocab, 4], their probabilities, the chain's entropy rate
    in nats/token: the loss floor)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(vocab, generator=gen)[:4] for _ in range(vocab)])
    probs = torch.rand(vocab, 4, generator=gen) + 0.2
    probs = probs / probs.sum(-1, keepdim=True)
    stationary = torch.full((vocab,), 1.0 / vocab)
    trans = torch.zeros(vocab, vocab).scatter_(1, succ, probs)
    for _ in range(200):
        stationary = stationary @ trans
    floor = float(-(stationary[:, None] * probs * probs.log()).sum())
    return succ, probs, floor


def make_batch(succ, probs, args: argparse.Namespace, step_gen):
    """--batch-size sequences of --seq-len + 1 tokens of the chain, from the generator ``step_gen``."""
    import torch
    seq = torch.empty(args.batch_size, args.seq_len + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(args.vocab, (args.batch_size,), generator=step_gen)
    for i in range(args.seq_len):
        choice = torch.multinomial(probs[seq[:, i]], 1, generator=step_gen).squeeze(1)
        seq[:, i + 1] = succ[seq[:, i], choice]
    return seq


def train_run(cfg: dict, args: argparse.Namespace, device, succ, probs) -> tuple[dict, list[int]]:
    """Train one configuration from the shared seed for --steps steps (fewer when the loss turns
    non-finite). Returns (every step's values, the steps whose batch was a bad one)."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(args.seed)
    model = build_model(args.vocab, args.d_model, args.layers, args.heads, args.seq_len,
                        cfg["qk_norm"]).to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg["lr"], betas=(0.9, cfg["beta2"]), eps=cfg["eps"])
    data_gen = torch.Generator().manual_seed(args.seed + 1)
    bad = bad_steps(cfg, args.steps)
    accepted: list[float] = []      # losses of the batches that were not skipped
    rec = {"loss": [], "grad_norm": [], "max_attn_logit": [], "log_z": [],
           "layer_grad_norms": [], "skipped_steps": []}
    for step in range(args.steps):
        seq = make_batch(succ, probs, args, data_gen)
        if step in bad:
            seq = torch.full_like(seq, step % args.vocab)   # one token, repeated
        seq = seq.to(device)
        lr = cfg["lr"] * min(1.0, (step + 1) / cfg["warmup"]) if cfg["warmup"] else cfg["lr"]
        for group in opt.param_groups:
            group["lr"] = lr
        logits, peak = model(seq[:, :-1])
        flat = logits.reshape(-1, args.vocab).float()
        loss = F.cross_entropy(flat, seq[:, 1:].reshape(-1))
        log_z = torch.logsumexp(flat, dim=-1)
        total = loss + cfg["z_loss"] * (log_z ** 2).mean() if cfg["z_loss"] else loss
        opt.zero_grad(set_to_none=True)
        total.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        gnorm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g)
                                                      for g in grads]))
        layer_norms = [float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad) for p in blk.parameters()])))
            for blk in model.blocks]
        # Skipping decision: z-score against recent *accepted* batches, so that a run of bad
        # batches does not raise the mean and hide the next one.
        z_now = rolling_z(accepted[-args.window:] + [float(loss.detach())], args.window)[-1]
        if cfg["skip_z"] and z_now > cfg["skip_z"]:
            rec["skipped_steps"].append(step)      # drop this batch: no update
        else:
            accepted.append(float(loss.detach()))
            if cfg["clip"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
            opt.step()
        rec["loss"].append(float(loss.detach()))
        rec["grad_norm"].append(float(gnorm))
        rec["max_attn_logit"].append(float(peak))
        rec["log_z"].append(float(log_z.detach().mean()))
        rec["layer_grad_norms"].append(layer_norms)
        if not math.isfinite(rec["loss"][-1]):
            break
    return rec, bad


def summarize_run(cfg: dict, rec: dict, bad: list[int], args: argparse.Namespace) -> dict:
    """A run as --json keeps it: its summary (the detector's z-scores and spike steps, the final
    loss, divergence), every step's values and the z-scores of loss and gradient norm."""
    loss_z = rolling_z(rec["loss"], args.window)
    grad_z = rolling_z(rec["grad_norm"], args.window)
    finite_z = [z for z in loss_z if math.isfinite(z)]
    tail = rec["loss"][-20:]
    summary = {
        "config": cfg,
        "steps_run": len(rec["loss"]),
        "diverged": not all(math.isfinite(v) for v in rec["loss"]),
        "final_loss": sum(tail) / len(tail),
        "min_loss": min(v for v in rec["loss"] if math.isfinite(v)),
        "max_loss_z": max(loss_z) if loss_z else 0.0,
        "max_finite_loss_z": max(finite_z) if finite_z else 0.0,
        "max_grad_z": max(grad_z) if grad_z else 0.0,
        "loss_spike_steps": spike_steps(loss_z, args.z_threshold),
        "grad_spike_steps": spike_steps(grad_z, args.z_threshold),
        "max_attn_logit": max(rec["max_attn_logit"]),
        "bad_steps": bad,
        "skipped_steps": rec["skipped_steps"],
    }
    return {"summary": summary, **rec, "loss_z": loss_z, "grad_z": grad_z}


def open_device(args: argparse.Namespace):
    """Import torch, set --threads and check that --device can hold a tensor (a usage error
    otherwise). Returns the torch device."""
    import torch
    torch.set_num_threads(args.threads)
    try:
        device = torch.device(args.device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as exc:
        fail(f"device {args.device!r} is not usable: {str(exc).splitlines()[0]}")
    return device


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def print_run(name: str, summary: dict) -> None:
    print(f"{name:22s} final_loss {summary['final_loss']:.3f}  max_loss_z "
          f"{summary['max_loss_z']:7.1f}  max_grad_z {summary['max_grad_z']:7.1f}  "
          f"spikes {len(summary['loss_spike_steps']):2d}  max|attn logit| "
          f"{summary['max_attn_logit']:6.1f}  diverged {summary['diverged']}", flush=True)


def json_report(args: argparse.Namespace, argv: list[str] | None, device, floor: float,
                elapsed: float, interrupted: bool, runs: dict) -> dict:
    """The --json document: settings, the loss floor and every run."""
    import platform

    import torch
    return {
        "experiment": "loss_spike", "schema_version": 1, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "device": str(device),
        "command": command_line(argv, PROG),
        "settings": {k: getattr(args, k) for k in ("steps", "batch_size", "seq_len", "vocab",
                                                   "d_model", "layers", "heads", "seed",
                                                   "window", "z_threshold", "threads")},
        "loss_floor": floor, "elapsed_s": round(elapsed, 1), "interrupted": interrupted,
        "runs": runs,
    }


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def fail(msg: str) -> None:
    """Stop with a one-line usage error (exit status 2) naming the problem."""
    raise ScriptError(msg, EXIT_USAGE)


def check_size(args: argparse.Namespace) -> None:
    """Refuse, before torch is imported, a run too large for the machine it is sized for."""
    b, t, d = args.batch_size, args.seq_len, args.d_model
    sizes = [
        (b * t * args.vocab, MAX_ACTIVATION, "--batch-size x --seq-len x --vocab logits"),
        (b * args.heads * t * t, MAX_ACTIVATION,
         "--batch-size x --heads x --seq-len^2 attention scores per layer"),
        (12 * d * d * args.layers + 2 * args.vocab * d + t * d, MAX_PARAMS, "parameters"),
        (args.steps * (args.layers + 6) * len(args.config_names), MAX_RECORDS,
         "per-step values (--steps x (--layers + 6) x configurations)"),
    ]
    for value, cap, what in sizes:
        if value > cap:
            fail(f"{value:,} {what} exceed this CPU experiment's cap of {cap:,}: make the run "
                 "smaller")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Train a tiny transformer with spiking and non-spiking recipes "
        "and record loss, gradient norm, attention logits and spike z-scores.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated configuration names (default: all; see --list)")
    p.add_argument("--list", action="store_true", help="print the configurations and exit")
    p.add_argument("--steps", type=number(int, 1, 1_000_000), default=700, help="training steps per run (default 700)")
    p.add_argument("--batch-size", type=number(int, 1, 4096), default=16, help="sequences per batch (default 16)")
    p.add_argument("--seq-len", type=number(int, 2, 8192), default=32, help="tokens per sequence (default 32)")
    p.add_argument("--vocab", type=number(int, 4, 8192), default=64,
                   help="vocabulary size, at most 8192: the chain's V x V matrix (default 64)")
    p.add_argument("--d-model", type=number(int, 1, 8192), default=64, help="model width (default 64)")
    p.add_argument("--layers", type=number(int, 1, 256), default=2, help="transformer blocks (default 2)")
    p.add_argument("--heads", type=number(int, 1, 256), default=4, help="attention heads (default 4)")
    p.add_argument("--seed", type=number(int, 0, 2**32 - 1), default=0,
                   help="seed for data, init and order, 0 to 2**32-1 (default 0)")
    p.add_argument("--window", type=number(int, 1), default=50,
                   help="steps in the rolling z-score window (default 50)")
    p.add_argument("--z-threshold", type=number(float, 0, lo_open=True), default=6.0,
                   help="z-score above which a step starts a spike (default 6)")
    p.add_argument("--threads", type=number(int, 1, 1024), default=1,
                   help="torch CPU threads (default 1: deterministic and polite)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write every step's values and the summary here")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.list:
        return args
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if not names or unknown:
        fail(f"unknown configuration {', '.join(unknown) or repr(args.configs)} "
             f"(choose from {', '.join(CONFIGS)})")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        fail(f"--configs: {', '.join(twice)} given more than once (a run is deterministic: the "
             "second would repeat the first and replace it in --json)")
    args.config_names = names
    if args.d_model % args.heads:
        fail(f"--d-model {args.d_model} is not divisible by --heads {args.heads}")
    if args.window >= args.steps:
        fail(f"--window {args.window} must be below --steps {args.steps}: no step would have "
             "a z-score, so no spike could be detected")
    for name in names:  # injected bad batches the detector cannot see would read as "no spike"
        cfg = {**DEFAULTS, **CONFIGS[name]}
        bad = bad_steps(cfg, args.steps)
        if bad and bad[0] < args.window:
            fail(f"--window {args.window}: configuration {name} injects its first bad batch at "
                 f"step {bad[0]} ({cfg['bad_at'][0]:.0%} of --steps {args.steps}), before the "
                 f"window is full, where no spike can be detected: use a --window below "
                 f"{bad[0]} or more --steps")
        if bad and bad[-1] >= args.steps:
            fail(f"--steps {args.steps} is too short for configuration {name}: its bad batches "
                 f"would run past the last step")
    check_size(args)
    if args.json:
        check_output(args.json, "--json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, cfg in CONFIGS.items():
            print(f"{name:22s} {json.dumps({**DEFAULTS, **cfg})}")
        return 0

    on_stop_signals()  # Ctrl-C and SIGTERM (scancel, a time limit) keep the runs that finished
    device = open_device(args)
    succ, probs, floor = markov_language(args.vocab, args.seed)
    runs = {}
    t_start = time.time()
    stopped = None
    try:
        for name in args.config_names:
            cfg = {**DEFAULTS, **CONFIGS[name]}
            rec, bad = train_run(cfg, args, device, succ, probs)
            runs[name] = summarize_run(cfg, rec, bad, args)
            print_run(name, runs[name]["summary"])
    except Interrupted as stop:
        stopped = stop
    elapsed = time.time() - t_start
    if stopped:
        print(f"# interrupted by {stopped.name}: {len(runs)} of {len(args.config_names)} "
              "runs finished" + (f"; writing them to {args.json}" if args.json else ""))
    print(f"# loss floor (entropy rate of the data) {floor:.3f} nats/token; "
          f"{len(runs)} runs x {args.steps} steps in {elapsed:.0f} s", flush=True)
    if args.json:
        report = json_report(args, argv, device, floor, elapsed, bool(stopped), runs)
        write_atomic(args.json, json.dumps(report, allow_nan=True) + "\n")
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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
