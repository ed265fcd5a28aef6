#!/usr/bin/env python
"""speculative_decoding.py: real speculative decoding with a small draft and a larger target LM.

Trains two byte-level causal LMs on a JSONL corpus (``--corpus``, default the book's
``data/training/corpus.jsonl``; every 10th document held out): a target (default 4 x 64) and a
draft (1 x 64). Then decodes ``--new-tokens`` bytes after each of ``--prompts`` held-out prompts
with the target alone, the draft alone (for the cost ratio c) and speculative decoding at each
draft length k of ``--draft-lens`` (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192,
Algorithm 1; Chen et al. 2023, https://arxiv.org/abs/2302.01318): the draft proposes k bytes, the
target scores them in one pass, ``--mode greedy`` keeps them while they equal the target's argmax
(the output is the target's own), ``--mode sample`` accepts with min(1, p/q) and resamples from
norm(max(0, p - q)). Per k: the acceptance rate alpha, bytes per target pass next to Eq. 1
(1 - alpha^(k+1)) / (1 - alpha), target and draft passes, wall time and speedup next to Theorem
3.8's prediction, and v_cost (a target pass over k+1 positions / over 1). Units: seconds, nats
per byte; one token = one byte. The method in full: book/en/inference/speculative-decoding.md.

Plain ``python`` on CPU (deterministic for a seed), or on one GPU with ``--device cuda``::

    python speculative_decoding.py                                  # defaults, about 60 s on one core
    python speculative_decoding.py --mode sample --temperature 0.8 --draft-lens 1,2,3,4,6,8
    python speculative_decoding.py --device cuda --target-layers 8 --target-dim 256 --json spec.json

Example output (k = 1 and 4 of results/inference/speculative_decoding-cpu.json)::

      k  alpha tok/pass   Eq.1 t_pass d_pass v_cost  wall_s speedup  Thm3.8     +v
      1  0.646    1.636  1.646    313    308   1.16   0.245   1.01x   1.23x  1.09x  same as target 8/8
      4  0.683    2.535  2.685    202    769   1.28   0.272   0.91x   1.14x  1.02x  same as target 8/8

Exit status: 0 ok, 1 failure, 2 usage (checked before training), 130/143 interrupted by
Ctrl-C/SIGTERM (during the sweep over k, the rows done are printed and written).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

PROG = "speculative_decoding.py"
# The book's corpus, when this script sits in its clone (scripts/<part>/); .parent, unlike
# .parents[2], also works for a copy at the top of a file system.
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "data" / "training" / "corpus.jsonl"
MAX_STEPS = 100_000
MAX_K = 32           # longest draft accepted by --draft-lens
MAX_KS = 16          # most draft lengths in one sweep


# --- the corpus, the models and their training ---
# (Reading the corpus, load_corpus and split_documents, and the training loop, train_lm, are
# shared with other scripts: they are in the generated block at the end.)

def make_prompts(held: list[bytes], n: int, prompt_len: int, rng: random.Random) -> list[list[int]]:
    """``n`` prompts: a random ``prompt_len``-byte span of a random held-out document each."""
    prompts = []
    for _ in range(n):
        doc = held[rng.randrange(len(held))]
        start = rng.randrange(len(doc) - prompt_len + 1)
        prompts.append(list(doc[start:start + prompt_len]))
    return prompts


class KVCache:
    """Keys and values of every layer for one sequence, preallocated for ``context`` positions.
    ``length`` positions are valid; cutting it back (``truncate``) drops the rest, which the next
    forward pass overwrites."""

    def __init__(self, layers: int, context: int):
        self.context, self.length = context, 0
        self.k: list = [None] * layers
        self.v: list = [None] * layers
        self.causal = None  # (context, context) bool, True where a position may attend

    def mask(self, start: int, t: int):
        """Attention mask of ``t`` new positions after ``start`` cached ones: new position
        start+i sees positions 0..start+i. None for one position (it sees everything cached)."""
        return None if t == 1 else self.causal[start:start + t, :start + t]

    def store(self, layer: int, k, v, start: int):
        """Write the new keys/values (batch, heads, t, head_dim) at ``start``; return all of them."""
        import torch
        if self.k[layer] is None:
            shape = (k.shape[0], k.shape[1], self.context, k.shape[3])
            self.k[layer] = torch.empty(shape, dtype=k.dtype, device=k.device)
            self.v[layer] = torch.empty(shape, dtype=v.dtype, device=v.device)
            if self.causal is None:
                self.causal = torch.ones(self.context, self.context, dtype=torch.bool,
                                         device=k.device).tril()
        end = start + k.shape[2]
        self.k[layer][:, :, start:end] = k
        self.v[layer][:, :, start:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)


def build_model(layers: int, width: int, heads: int, context: int):
    """A tiny pre-LayerNorm causal transformer over bytes (vocabulary 256, tied embedding) whose
    ``forward(idx, cache=None)`` also runs incrementally on a KVCache."""
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

        def forward(self, x, cache=None, layer=0, start=0):
            b, t, _ = x.shape
            q, k, v = (z.transpose(1, 2) for z in
                       self.qkv(self.ln1(x)).view(b, t, 3, heads, width // heads).unbind(2))
            if cache is None:  # training: the whole window at once
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                k, v = cache.store(layer, k, v, start)
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=cache.mask(start, t))
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, width))
            return x + self.mlp(self.ln2(x))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.context, self.layers = context, layers
            self.tok = nn.Embedding(VOCAB, width)
            self.pos = nn.Parameter(torch.zeros(context, width))
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos, std=0.02)

        def forward(self, idx, cache: KVCache | None = None):
            start = cache.length if cache is not None else 0
            t = idx.shape[1]
            if start + t > self.context:
                raise ValueError(f"{start + t} positions exceed the model's context {self.context}")
            x = self.tok(idx) + self.pos[start:start + t]
            for i, block in enumerate(self.blocks):
                x = block(x, cache, i, start)
            if cache is not None:
                cache.length = start + t
            return self.ln(x) @ self.tok.weight.T

    return TinyLM()


def held_out_loss(model, docs: list[bytes], windows: int, rng: random.Random, device: str = "cpu") -> float:
    """Mean next-byte cross-entropy (nats/byte) of ``model`` on ``windows`` random windows of ``docs``."""
    import torch
    window = model.context + 1
    usable = [d for d in docs if len(d) >= window]
    rows = []
    for _ in range(windows):
        d = usable[rng.randrange(len(usable))]
        s = rng.randrange(len(d) - window + 1)
        rows.append(list(d[s:s + window]))
    x = torch.tensor(rows, dtype=torch.long, device=device)
    with torch.inference_mode():
        return torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, VOCAB),
                                                 x[:, 1:].reshape(-1)).item()


def train_models(args, train: list[bytes], held: list[bytes], context: int,
                 rng: random.Random) -> tuple[dict, dict]:
    """Build and train the target and the draft: (models, their sizes and losses), by name."""
    models, info = {}, {}
    for name in ("target", "draft"):
        layers, width, steps = (getattr(args, f"{name}_{x}") for x in ("layers", "dim", "steps"))
        t0 = time.monotonic()
        model = build_model(layers, width, args.heads, context).to(args.device)
        losses = train_lm(model, train, steps, args.batch, args.lr, rng, args.device)
        models[name] = model
        info[name] = {"layers": layers, "dim": width, "heads": args.heads, "train_steps": steps,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "train_loss_first": losses[0] if losses else None,
                      "train_loss_last10": sum(losses[-10:]) / len(losses[-10:]) if losses else None,
                      "held_out_loss": held_out_loss(model, held, 64, random.Random(args.seed + 1),
                                                     args.device),
                      "train_s": round(time.monotonic() - t0, 2)}
    return models, info


# --- the speculative step: pure functions of the two distributions (float64 on the CPU) ---

def distribution(logits, temperature: float):
    """softmax(logits / temperature) as float64 on the CPU (256 values: the exact arithmetic of
    the acceptance test costs nothing next to a forward pass)."""
    import torch
    return torch.softmax(logits.detach().to("cpu", torch.float64) / temperature, dim=-1)


def acceptance(p, q, x: int) -> float:
    """Probability of keeping draft token ``x``: min(1, p(x) / q(x)) (Leviathan et al. 2023,
    Algorithm 1). ``x`` was drawn from ``q``, so q(x) > 0; a q(x) of 0 (never drawn) gives 1."""
    px, qx = float(p[x]), float(q[x])
    return 1.0 if qx <= 0.0 or px >= qx else px / qx


def residual(p, q):
    """The distribution a rejected position is resampled from: norm(max(0, p - q)). When p = q
    nothing is ever rejected and the residual is empty; p is returned then."""
    r = (p - q).clamp(min=0)
    total = float(r.sum())
    return p if total <= 0.0 else r / total


def sample(probs, gen) -> int:
    import torch
    return int(torch.multinomial(probs, 1, generator=gen))


def expected_tokens_per_call(alpha: float, k: int) -> float:
    """Leviathan et al. 2023, Eq. 1: (1 - alpha^(k+1)) / (1 - alpha), the expected tokens per
    target pass when every draft is accepted independently with probability alpha."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float, verify_cost: float = 1.0) -> float:
    """Leviathan et al. 2023, Theorem 3.8: (1 - alpha^(k+1)) / ((1 - alpha) (k c + 1)); with
    ``verify_cost`` (a target pass over k+1 positions / over 1) in place of the 1."""
    return expected_tokens_per_call(alpha, k) / (k * c + verify_cost)


# --- decoding: plain and speculative, and the measurement of one draft length ---

class Decoder:
    """A model and the KV cache of the one sequence it decodes."""

    def __init__(self, model, device: str = "cpu"):
        self.model, self.device = model, device
        self.cache = KVCache(model.layers, model.context)
        self.calls = 0

    @property
    def length(self) -> int:
        return self.cache.length

    def feed(self, tokens: list[int]):
        """Run the model on ``tokens`` (appended after the cached positions); logits (t, 256)."""
        import torch
        self.calls += 1
        idx = torch.tensor([tokens], dtype=torch.long, device=self.device)
        return self.model(idx, self.cache)[0]

    def truncate(self, length: int) -> None:
        self.cache.truncate(length)


def pass_cost_ratio(model, prompt: list[int], positions: int, device: str = "cpu",
                    reps: int = 20, repeats: int = 3) -> float:
    """Time of one forward pass over ``positions`` new positions divided by that of a pass over
    one, both after ``prompt`` in the KV cache (min over ``repeats`` of ``reps`` passes each, the
    two interleaved). Theorem 3.8 of Leviathan et al. takes the verification pass (k+1
    positions) to cost as much as a decoding step (1 position)."""
    import torch
    dec = Decoder(model, device)
    best = {1: math.inf, positions: math.inf}
    with torch.inference_mode():
        dec.feed(prompt)
        for _ in range(repeats):
            for n in best:
                tokens = [prompt[-1]] * n
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(reps):
                    dec.feed(tokens)
                    dec.truncate(len(prompt))
                if device == "cuda":
                    torch.cuda.synchronize()
                best[n] = min(best[n], time.perf_counter() - t0)
    return best[positions] / best[1]


def autoregressive_generate(model, prompt: list[int], new_tokens: int, temperature: float | None,
                            gen=None, device: str = "cpu") -> tuple[list[int], int]:
    """Plain decoding, one forward pass per token (the first one over the whole prompt).
    ``temperature`` None = greedy (argmax). Returns (new tokens, forward passes)."""
    import torch
    dec = Decoder(model, device)
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits = dec.feed(seq[dec.length:])[-1]
            seq.append(int(logits.argmax()) if temperature is None
                       else sample(distribution(logits, temperature), gen))
    return seq[len(prompt):], dec.calls


def speculative_generate(target, draft, prompt: list[int], new_tokens: int, k: int,
                         temperature: float | None, gen=None, device: str = "cpu") -> tuple[list[int], dict]:
    """Speculative decoding of ``new_tokens`` tokens after ``prompt`` with draft length ``k``.
    ``temperature`` None = greedy; otherwise speculative sampling at that temperature with the
    torch.Generator ``gen``. Returns (new tokens, counts: rounds, target_calls, draft_calls,
    drafted, tested, accepted)."""
    import torch
    tgt, drf = Decoder(target, device), Decoder(draft, device)
    seq = list(prompt)
    end = len(prompt) + new_tokens
    stats = {"rounds": 0, "drafted": 0, "tested": 0, "accepted": 0}
    greedy = temperature is None
    with torch.inference_mode():
        while len(seq) < end:
            kk = min(k, end - len(seq) - 1)  # at most the tokens still wanted, bonus included
            drafts, qs = [], []
            for _ in range(kk):  # the draft proposes kk tokens, one forward pass each
                logits = drf.feed((seq + drafts)[drf.length:])[-1]
                if greedy:
                    drafts.append(int(logits.argmax()))
                else:
                    qs.append(distribution(logits, temperature))
                    drafts.append(sample(qs[-1], gen))
            # ONE target pass scores the uncached tail and every draft: rows -(kk+1).. give
            # the target's next-token logits after seq, after seq+x_1, ..., after seq+x_1..x_kk
            logits = tgt.feed((seq + drafts)[tgt.length:])[-(kk + 1):]
            if greedy:
                best = logits.argmax(dim=-1).tolist()
            else:
                ps = distribution(logits, temperature)
            emitted = []
            for i in range(kk):
                stats["tested"] += 1
                if greedy:
                    if drafts[i] != best[i]:
                        emitted.append(best[i])
                        break
                else:
                    u = float(torch.rand((), generator=gen, dtype=torch.float64))
                    if u >= acceptance(ps[i], qs[i], drafts[i]):
                        emitted.append(sample(residual(ps[i], qs[i]), gen))
                        break
                emitted.append(drafts[i])
                stats["accepted"] += 1
            else:  # every draft accepted: the bonus token from the last row
                emitted.append(best[kk] if greedy else sample(ps[kk], gen))
            kept = len(seq) + len(emitted) - 1  # prefix + accepted drafts: valid in both caches
            tgt.truncate(kept)
            drf.truncate(kept)
            seq.extend(emitted)
            stats["rounds"] += 1
            stats["drafted"] += kk
    stats.update(target_calls=tgt.calls, draft_calls=drf.calls)
    return seq[len(prompt):], stats


def timed(fn, prompts: list[list[int]], seed: int, seed_offset: int, sync):
    """Run ``fn(prompt, gen)`` over every prompt; (outputs, results, seconds)."""
    import torch
    outs, results = [], []
    sync()
    t0 = time.perf_counter()
    for i, prompt in enumerate(prompts):
        gen = torch.Generator().manual_seed(seed * 1000 + seed_offset * 100_000 + i)
        out, res = fn(prompt, gen)
        outs.append(out)
        results.append(res)
    sync()
    return outs, results, time.perf_counter() - t0


def measure_k(args, target, draft, prompts: list[list[int]], k: int, seed_offset: int,
              temperature: float | None, base_out: list, baseline: dict, sync) -> dict:
    """Speculative decoding of every prompt with draft length ``k``: one row of the table."""
    outs, stats, wall = timed(lambda pr, g: speculative_generate(
        target, draft, pr, args.new_tokens, k, temperature, g, args.device), prompts, args.seed,
        seed_offset, sync)
    n_tokens = args.prompts * args.new_tokens
    c = baseline["c"]
    tot = {key: sum(s[key] for s in stats) for key in stats[0]}
    alpha = tot["accepted"] / tot["tested"] if tot["tested"] else 0.0
    row = {"k": k, "alpha": alpha,
           "accepted_per_drafted": tot["accepted"] / tot["drafted"] if tot["drafted"] else 0.0,
           "tokens_per_target_pass": n_tokens / tot["target_calls"],
           "formula_tokens_per_pass": expected_tokens_per_call(alpha, k),
           "target_passes": tot["target_calls"], "draft_passes": tot["draft_calls"],
           "rounds": tot["rounds"], "drafted": tot["drafted"], "tested": tot["tested"],
           "accepted": tot["accepted"], "tokens": n_tokens, "prompts": args.prompts,
           "wall_s": wall, "speedup": baseline["target_only_s"] / wall,
           "predicted_speedup": predicted_speedup(alpha, k, c),
           "verify_pass_cost": pass_cost_ratio(target, prompts[0], k + 1, args.device),
           "identical_to_target": (sum(a == b for a, b in zip(outs, base_out, strict=True))
                                   if temperature is None else None)}
    row["predicted_speedup_v"] = predicted_speedup(alpha, k, c, row["verify_pass_cost"])
    return row


# --- the report ---

HEADER = (f"{'k':>3} {'alpha':>6} {'tok/pass':>8} {'Eq.1':>6} {'t_pass':>6} {'d_pass':>6} "
          f"{'v_cost':>6} {'wall_s':>7} {'speedup':>7} {'Thm3.8':>7} {'+v':>6}")


def format_row(r: dict) -> str:
    line = (f"{r['k']:>3} {r['alpha']:>6.3f} {r['tokens_per_target_pass']:>8.3f} "
            f"{r['formula_tokens_per_pass']:>6.3f} {r['target_passes']:>6} {r['draft_passes']:>6} "
            f"{r['verify_pass_cost']:>6.2f} {r['wall_s']:>7.3f} {r['speedup']:>6.2f}x "
            f"{r['predicted_speedup']:>6.2f}x {r['predicted_speedup_v']:>5.2f}x")
    if r.get("identical_to_target") is not None:
        line += f"  same as target {r['identical_to_target']}/{r['prompts']}"
    return line


def print_header(args, info: dict, temperature: float | None, baseline: dict) -> None:
    print(f"# {PROG}: {args.mode}" + (f" at temperature {temperature:g}" if temperature else "")
          + f", {args.prompts} held-out prompts of {args.prompt_len} bytes, {args.new_tokens} new bytes "
          f"each, {args.device}, {args.threads} thread(s)")
    for name in ("target", "draft"):
        m = info[name]
        print(f"# {name}: {m['layers']} x {m['dim']}, {m['parameters']} parameters, {m['train_steps']} "
              f"steps in {m['train_s']:.1f} s, held-out loss {m['held_out_loss']:.3f} nats/byte")
    base_s, passes = baseline["target_only_s"], baseline["target_passes"]
    print(f"# target alone: {passes} passes in {base_s:.3f} s "
          f"({1e3 * base_s / passes:.2f} ms/pass); draft alone: {baseline['draft_only_s']:.3f} s; "
          f"c = {baseline['c']:.3f}")
    print(HEADER, flush=True)


def print_footer(elapsed: float, interrupted: bool) -> None:
    print("# alpha: accepted / tested drafts; tok/pass: bytes per target pass, Eq.1 at that alpha; "
          "t_pass, d_pass: target, draft passes")
    print("# v_cost: target pass over k+1 positions / over 1; speedup: target-only / speculative wall "
          "time; Thm3.8: predicted, +v: with v_cost")
    print(f"# {elapsed:.1f} s in all" + (" (interrupted)" if interrupted else ""))


def json_report(args, run: dict, info: dict, baseline: dict, rows: list[dict], interrupted: bool,
                elapsed: float) -> dict:
    """The --json document (tools/schemas/speculative_decoding.schema.json)."""
    settings = {k: getattr(args, k) for k in (
        "target_layers", "target_dim", "draft_layers", "draft_dim", "heads", "target_steps",
        "draft_steps", "batch", "lr", "draft_lens", "mode", "temperature", "prompts",
        "prompt_len", "new_tokens", "seed", "threads", "device")}
    settings["corpus"] = os.path.basename(args.corpus)
    return {**envelope("speculative_decoding", run["device"], {"torch": run["torch"]}),
            "torch": run["torch"], "settings": settings,
            "documents": {"train": run["train_docs"], "held_out": run["held_docs"]},
            "models": info, "baseline": baseline,
            "units": {"times": "seconds (wall clock)", "loss": "nats per byte",
                      "tokens": "bytes (one token = one byte)"},
            "results": rows, "interrupted": interrupted, "elapsed_s": round(elapsed, 2)}


# --- command line ---

def draft_lens(text: str) -> list[int]:
    """argparse type of --draft-lens: a comma list of distinct integers in [1, MAX_K]."""
    items = [s.strip() for s in text.split(",")]
    if not text.strip() or any(not s for s in items):
        raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of draft lengths, e.g. 1,2,4,8")
    if len(items) > MAX_KS:
        raise argparse.ArgumentTypeError(f"{len(items)} draft lengths; at most {MAX_KS} per run")
    parse = number(int, 1, MAX_K)
    ks = []
    for s in items:
        try:
            k = parse(s)
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"draft length {err}") from None
        if k in ks:
            raise argparse.ArgumentTypeError(f"draft length {k} given twice")
        ks.append(k)
    return ks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Speculative decoding (Leviathan et al. 2023; Chen et al. 2023) with "
        "a tiny draft and a larger target byte-level LM trained on the book's corpus: acceptance "
        "rate, tokens per target pass against Eq. 1, and wall-clock speedup per draft length.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--corpus", type=nonempty, default=str(DEFAULT_CORPUS),
                   help="JSONL file, one object with a \"text\" string per line "
                   "(default: the book's data/training/corpus.jsonl)")
    p.add_argument("--target-layers", type=number(int, 1, 64), default=4, help="target blocks (default 4)")
    p.add_argument("--target-dim", type=number(int, 8, 4096), default=64, help="target width (default 64)")
    p.add_argument("--draft-layers", type=number(int, 1, 64), default=1, help="draft blocks (default 1)")
    p.add_argument("--draft-dim", type=number(int, 8, 4096), default=64, help="draft width (default 64)")
    p.add_argument("--heads", type=number(int, 1, 64), default=4,
                   help="attention heads of both models; must divide both widths (default 4)")
    p.add_argument("--target-steps", type=number(int, 0, MAX_STEPS), default=1700,
                   help=f"training steps of the target (default 1700, at most {MAX_STEPS})")
    p.add_argument("--draft-steps", type=number(int, 0, MAX_STEPS), default=1500,
                   help=f"training steps of the draft (default 1500, at most {MAX_STEPS})")
    p.add_argument("--batch", type=number(int, 1, 4096), default=8, help="training windows per step (default 8)")
    p.add_argument("--lr", type=number(float, 0, 1, lo_open=True), default=3e-3,
                   help="peak AdamW learning rate of both models (default 3e-3, cosine decay to 10%%)")
    p.add_argument("--draft-lens", type=draft_lens, default=[1, 2, 4, 8], metavar="K,K,...",
                   help=f"draft lengths k to measure (default 1,2,4,8; each 1..{MAX_K}, at most {MAX_KS})")
    p.add_argument("--mode", choices=("greedy", "sample"), default="greedy",
                   help="greedy: argmax, output equals the target's; sample: speculative sampling "
                   "at --temperature (default greedy)")
    p.add_argument("--temperature", type=number(float, 0, 100, lo_open=True), default=None,
                   help="softmax temperature of --mode sample (default 1)")
    p.add_argument("--prompts", type=number(int, 1, 1000), default=8, help="held-out prompts (default 8)")
    p.add_argument("--prompt-len", type=number(int, 1, 4096), default=32, help="prompt bytes (default 32)")
    p.add_argument("--new-tokens", type=number(int, 1, 4096), default=64,
                   help="bytes generated after each prompt (default 64)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=number(int, 1, 1024), default=1,
                   help="torch CPU threads (default 1: deterministic and polite)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models run (default cpu)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write settings, model losses and one row per k as JSON ('-': stdout)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name, width in (("--target-dim", args.target_dim), ("--draft-dim", args.draft_dim)):
        if width % args.heads:
            parser.error(f"--heads ({args.heads}) must divide {name} ({width})")
    if max(args.draft_lens) >= args.new_tokens:
        parser.error(f"--draft-lens: draft length {max(args.draft_lens)} must be below --new-tokens "
                     f"({args.new_tokens}): a round emits up to k+1 tokens")
    if args.mode == "greedy" and args.temperature is not None:
        parser.error("--temperature applies to --mode sample only (greedy decoding takes the argmax)")
    if args.mode == "sample" and args.temperature is None:
        args.temperature = 1.0
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=[args.corpus])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    context = args.prompt_len + args.new_tokens
    texts = load_corpus(args.corpus, context + 1, "--prompt-len/--new-tokens")  # before torch: a bad corpus fails fast

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ScriptError("--device cuda: CUDA is not available (torch "
                          f"{torch.__version__}); use --device cpu", EXIT_USAGE)
    device = args.device
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    started = time.monotonic()

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    train, held = split_documents(texts)
    prompts = make_prompts(held, args.prompts, args.prompt_len, rng)
    models, info = train_models(args, train, held, context, rng)
    temperature = args.temperature if args.mode == "sample" else None
    target, draft = models["target"], models["draft"]

    # warm-up: the first forward passes of a process pay for allocations and thread start-up
    for model in (target, draft):
        autoregressive_generate(model, prompts[0], min(4, args.new_tokens), temperature,
                                torch.Generator().manual_seed(0), device)
    base_out, base_calls, base_s = timed(
        lambda pr, g: autoregressive_generate(target, pr, args.new_tokens, temperature, g, device),
        prompts, args.seed, 0, sync)
    _, _, draft_s = timed(
        lambda pr, g: autoregressive_generate(draft, pr, args.new_tokens, temperature, g, device),
        prompts, args.seed, 1, sync)
    baseline = {"target_only_s": base_s, "target_passes": sum(base_calls),
                "draft_only_s": draft_s, "c": draft_s / base_s}
    print_header(args, info, temperature, baseline)
    rows: list[dict] = []
    stopped = None
    on_stop_signals()  # from now on Ctrl-C, scancel and a job's time limit keep the rows done
    try:
        for j, k in enumerate(args.draft_lens):
            rows.append(measure_k(args, target, draft, prompts, k, 2 + j, temperature, base_out,
                                  baseline, sync))
            print(format_row(rows[-1]), flush=True)
    except Interrupted as stop:
        stopped = stop
        print(f"# interrupted: {len(rows)} of {len(args.draft_lens)} draft lengths done")
    elapsed = time.monotonic() - started
    print_footer(elapsed, bool(stopped))
    if args.json:
        run = {"torch": torch.__version__, "train_docs": len(train), "held_docs": len(held),
               "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
        text = json.dumps(json_report(args, run, info, baseline, rows, bool(stopped), elapsed),
                          indent=1)
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
