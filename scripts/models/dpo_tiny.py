#!/usr/bin/env python
"""dpo_tiny.py: a real Direct Preference Optimization run, small enough for one CPU core.

Builds a tiny byte-level causal LM and makes preference pairs from a JSONL corpus (``--corpus``,
default the book's ``data/training/corpus.jsonl``; every 10th document held out): the prompt is
``--prompt-len`` bytes of a document, *chosen* its next ``--completion-len`` bytes, *rejected* a
span of the same length from another document. After ``--sft-steps`` of supervised fine-tuning,
the SFT model, frozen, is the reference (its log-probabilities of every pair computed once), and
``--steps`` DPO steps train the policy with the loss of Rafailov et al. 2023,
https://arxiv.org/abs/2305.18290, Eq. 7:

    L_DPO = -E[ log sigmoid( beta * log(pi(y_w|x)/pi_ref(y_w|x)) - beta * log(pi(y_l|x)/pi_ref(y_l|x)) ) ]

with log pi summed over the completion's bytes only (at step 0 the loss is ln 2 = 0.6931). Per
step: the DPO loss (nats per pair), the mean implicit rewards beta * log(pi/pi_ref) of the chosen
and rejected completions, their margin, the reward accuracy. Explained in
book/en/models/post-training.md.

Plain ``python`` on CPU; deterministic for a given seed, ``--threads`` and torch build::

    python dpo_tiny.py                                  # defaults, about 30 s on one core
    python dpo_tiny.py --beta 0.5 --steps 200 --json dpo.json

Example output (the held-out lines of the run in results/models/dpo_tiny-cpu.json)::

     held-out start loss 0.6931  margin 0.0000  accuracy 0.000
       held-out end loss 0.6755  margin 1.0390  accuracy 0.699

Exit status: 0 ok, 1 failure, 2 usage (checked before torch is imported), 130 Ctrl-C (during
the DPO steps, after evaluating the held-out pairs and writing the steps done).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

PROG = "dpo_tiny.py"
# The book's corpus, when this script sits in its clone (scripts/<part>/); .parent, unlike
# .parents[2], also works for a copy at the top of a file system.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "data" / "training" / "corpus.jsonl"
MAX_STEPS = 100_000
# (Reading the corpus, load_corpus and split_documents, is shared with other scripts: it is in the
# generated block at the end.)


def make_pairs(docs: list[bytes], others: list[bytes], n: int, prompt_len: int,
               completion_len: int, rng: random.Random) -> list[tuple[bytes, bytes, bytes]]:
    """``n`` (prompt, chosen, rejected) byte triples: a random span of a random document of
    ``docs``, its true continuation, and a same-length span of another document of ``others``."""
    pairs = []
    for _ in range(n):
        i = rng.randrange(len(docs))
        doc = docs[i]
        start = rng.randrange(len(doc) - prompt_len - completion_len + 1)
        prompt = doc[start:start + prompt_len]
        chosen = doc[start + prompt_len:start + prompt_len + completion_len]
        while True:
            j = rng.randrange(len(others))
            if others[j] is not doc:
                break
        other = others[j]
        k = rng.randrange(len(other) - completion_len + 1)
        rejected = other[k:k + completion_len]
        pairs.append((prompt, chosen, rejected))
    return pairs


def build_model(layers: int, width: int, heads: int, context: int):
    """A tiny pre-LayerNorm causal transformer over bytes (vocabulary 256, tied embedding)."""
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
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, width // heads).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                               v.transpose(1, 2), is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, width))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(256, width)
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


def completion_logprob(model, seqs, prompt_len: int):
    """Sum over the completion bytes of log pi(byte | previous bytes), one value per sequence;
    the prompt's bytes are masked out (they are conditioning, not output)."""
    import torch
    logits = model(seqs[:, :-1])
    logp = torch.log_softmax(logits, dim=-1).gather(-1, seqs[:, 1:, None]).squeeze(-1)
    return logp[:, prompt_len - 1:].sum(dim=-1)


def dpo_terms(beta: float, pol_c, pol_r, ref_c, ref_r) -> dict:
    """Eq. 7 of Rafailov et al. 2023 on a batch: loss, implicit rewards, margin, accuracy."""
    import torch.nn.functional as F
    r_c = beta * (pol_c - ref_c)
    r_r = beta * (pol_r - ref_r)
    margin = r_c - r_r
    return {"loss": -F.logsigmoid(margin).mean(), "reward_chosen": r_c.mean(),
            "reward_rejected": r_r.mean(), "margin": margin.mean(),
            "accuracy": (margin > 0).float().mean()}


def as_floats(terms: dict) -> dict:
    return {k: v.item() for k, v in terms.items()}


def pair_tensors(pairs):
    """(chosen, rejected): the prompt + completion bytes of every pair, as long tensors."""
    import torch
    chosen = torch.tensor([list(p + c) for p, c, _ in pairs], dtype=torch.long)
    rejected = torch.tensor([list(p + r) for p, _, r in pairs], dtype=torch.long)
    return chosen, rejected


def sft_warmup(model, train: list[bytes], args, rng: random.Random, window: int) -> list[float]:
    """SFT warm-up: ``--sft-steps`` steps of next-byte cross-entropy on random windows of the
    training documents; returns the loss of every step (nats/byte)."""
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=args.sft_lr, weight_decay=0.0)
    sft_log = []
    for _ in range(args.sft_steps):
        rows = []
        for _ in range(args.batch):
            d = train[rng.randrange(len(train))]
            s = rng.randrange(len(d) - window + 1)
            rows.append(list(d[s:s + window]))
        x = torch.tensor(rows, dtype=torch.long)
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sft_log.append(loss.item())
    return sft_log


def dpo_steps(model, chosen, rejected, ref_chosen, ref_rejected, args,
              rng: random.Random) -> tuple[list[dict], bool]:
    """``--steps`` DPO steps on the policy (the SFT weights, now trained; the reference stays as
    its log-probabilities), printing a row every tenth of the run. Returns (the log of every
    step, whether Ctrl-C stopped it)."""
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    log, interrupted = [], False
    every = max(1, args.steps // 10)
    try:
        for step in range(args.steps):
            idx = torch.tensor([rng.randrange(len(chosen)) for _ in range(args.batch)])
            pol = completion_logprob(model, torch.cat([chosen[idx], rejected[idx]]), args.prompt_len)
            terms = dpo_terms(args.beta, pol[:len(idx)], pol[len(idx):], ref_chosen[idx], ref_rejected[idx])
            opt.zero_grad(set_to_none=True)
            terms["loss"].backward()
            opt.step()
            entry = {"step": step, **as_floats(terms)}
            log.append(entry)
            if step % every == 0 or step == args.steps - 1:
                print(row(step, entry), flush=True)
    except KeyboardInterrupt:
        interrupted = True
    return log, interrupted


def row(step, m: dict) -> str:
    return (f"{step:>6} {m['loss']:>9.4f} {m['reward_chosen']:>10.4f} {m['reward_rejected']:>10.4f}"
            f" {m['margin']:>9.4f} {m['accuracy']:>6.3f}")


def json_report(args, run: dict, sft_log: list[float], held_out: dict, log: list[dict],
                interrupted: bool, elapsed: float) -> dict:
    """The --json document: settings, sizes, the SFT loss, the held-out metrics and every step."""
    settings = {k: getattr(args, k) for k in (
        "seed", "beta", "steps", "sft_steps", "batch", "lr", "sft_lr", "train_pairs",
        "eval_pairs", "prompt_len", "completion_len", "layers", "width", "heads", "threads")}
    settings["corpus"] = os.path.basename(args.corpus)
    return {"tool": "dpo_tiny", "schema_version": 1,
            "units": {"loss": "nats per pair", "reward": "beta * nats (log-probability ratio)",
                      "sft_loss": "nats per byte", "accuracy": "fraction"},
            "settings": settings, "parameters": run["parameters"],
            "documents": {"train": run["train_docs"], "held_out": run["held_docs"]},
            "sft_loss": {"first": sft_log[0] if sft_log else None,
                         "last": sft_log[-1] if sft_log else None},
            "held_out": held_out,
            "log": log, "interrupted": interrupted,
            "torch": run["torch"], "elapsed_s": round(elapsed, 2)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Direct Preference Optimization (Rafailov et al. 2023, Eq. 7) of a "
        "tiny byte-level LM on CPU: SFT warm-up, frozen reference, DPO steps, held-out metrics.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--corpus", type=nonempty, default=str(DEFAULT_CORPUS),
                   help="JSONL file, one object with a \"text\" string per line "
                   "(default: the book's data/training/corpus.jsonl)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--beta", type=number(float, 0, 100, lo_open=True), default=0.1,
                   help="DPO beta, strength of the KL anchor to the reference (default 0.1)")
    p.add_argument("--steps", type=number(int, 1, MAX_STEPS), default=300,
                   help=f"DPO steps (default 300, at most {MAX_STEPS})")
    p.add_argument("--sft-steps", type=number(int, 0, MAX_STEPS), default=300,
                   help=f"SFT warm-up steps before DPO (default 300, at most {MAX_STEPS})")
    p.add_argument("--batch", type=number(int, 1, 4096), default=32,
                   help="pairs per DPO step and windows per SFT step (default 32)")
    p.add_argument("--lr", type=number(float, 0, 1, lo_open=True), default=1e-3,
                   help="AdamW learning rate of the DPO steps (default 1e-3)")
    p.add_argument("--sft-lr", type=number(float, 0, 1, lo_open=True), default=3e-3,
                   help="AdamW learning rate of the SFT warm-up (default 3e-3)")
    p.add_argument("--train-pairs", type=number(int, 1, 10**6), default=1024,
                   help="training preference pairs (default 1024)")
    p.add_argument("--eval-pairs", type=number(int, 1, 10**6), default=256,
                   help="held-out preference pairs (default 256)")
    p.add_argument("--prompt-len", type=number(int, 1, 4096), default=32, help="prompt bytes (default 32)")
    p.add_argument("--completion-len", type=number(int, 1, 4096), default=16,
                   help="bytes of each completion (default 16)")
    p.add_argument("--layers", type=number(int, 1, 64), default=2, help="transformer blocks (default 2)")
    p.add_argument("--width", type=number(int, 8, 4096), default=64, help="model width (default 64)")
    p.add_argument("--heads", type=number(int, 1, 64), default=4, help="attention heads (default 4)")
    p.add_argument("--threads", type=number(int, 1, 1024), default=1,
                   help="torch CPU threads (default 1: deterministic and polite)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write settings, per-step log and held-out metrics as JSON ('-': stdout)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.width % args.heads:
        parser.error(f"--heads ({args.heads}) must divide --width ({args.width})")
    if args.prompt_len + args.completion_len > 8192:
        parser.error("--prompt-len + --completion-len must be <= 8192 bytes")
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=[args.corpus])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A shell starts background jobs with SIGINT ignored, and Python then leaves it ignored:
    # restore it, so that Ctrl-C or `kill -INT` stops the run however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    min_len = args.prompt_len + args.completion_len
    texts = load_corpus(args.corpus, min_len, "--prompt-len/--completion-len")  # before torch: a bad corpus fails fast

    import torch
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    started = time.monotonic()

    train, held = split_documents(texts)
    train_pairs = make_pairs(train, train, args.train_pairs, args.prompt_len, args.completion_len, rng)
    eval_pairs = make_pairs(held, held, args.eval_pairs, args.prompt_len, args.completion_len, rng)
    model = build_model(args.layers, args.width, args.heads, min_len)
    n_params = sum(p.numel() for p in model.parameters())

    # 1. SFT warm-up: next-byte cross-entropy on random windows of the training documents.
    sft_log = sft_warmup(model, train, args, rng, min_len)

    # 2. Reference = the SFT model, frozen; its log-probs of every pair are computed once.
    model.eval()
    train_c, train_r = pair_tensors(train_pairs)
    eval_c, eval_r = pair_tensors(eval_pairs)
    with torch.no_grad():
        ref_train_c = completion_logprob(model, train_c, args.prompt_len)
        ref_train_r = completion_logprob(model, train_r, args.prompt_len)
        ref_eval_c = completion_logprob(model, eval_c, args.prompt_len)
        ref_eval_r = completion_logprob(model, eval_r, args.prompt_len)

    def evaluate() -> dict:
        with torch.no_grad():
            return as_floats(dpo_terms(args.beta, completion_logprob(model, eval_c, args.prompt_len),
                                       completion_logprob(model, eval_r, args.prompt_len),
                                       ref_eval_c, ref_eval_r))

    # 3. DPO on the policy (the same weights, now trained; the reference stays as log-probs).
    eval_start = evaluate()
    print(f"# {PROG}: {n_params} parameters, {len(train)} training / {len(held)} held-out documents, "
          f"beta {args.beta:g}, SFT {args.sft_steps} steps"
          + (f" (loss {sft_log[0]:.3f} -> {sft_log[-1]:.3f} nats/byte)" if sft_log else ""))
    print(f"{'step':>6} {'dpo_loss':>9} {'r_chosen':>10} {'r_rejected':>10} {'margin':>9} {'acc':>6}")
    log, interrupted = dpo_steps(model, train_c, train_r, ref_train_c, ref_train_r, args, rng)
    eval_end = evaluate()
    for name, m in (("start", eval_start), ("end", eval_end)):
        print(f"{'held-out ' + name:>15} loss {m['loss']:.4f}  margin {m['margin']:.4f}  "
              f"accuracy {m['accuracy']:.3f}")
    elapsed = time.monotonic() - started
    print(f"# {len(log)} DPO steps in {elapsed:.1f} s on {args.threads} thread(s)"
          + (" (interrupted)" if interrupted else ""))
    if args.json:
        run = {"parameters": n_params, "train_docs": len(train), "held_docs": len(held),
               "torch": torch.__version__}
        doc = json_report(args, run, sft_log, {"start": eval_start, "end": eval_end}, log,
                          interrupted, elapsed)
        text = json.dumps(doc, indent=1)
        if args.json == "-":
            print(text)
        else:
            write_atomic(args.json, text + "\n")
    if interrupted:
        raise KeyboardInterrupt
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


HELD_OUT_EVERY = 10  # every 10th usable document is held out


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
