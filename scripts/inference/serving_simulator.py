#!/usr/bin/env python
"""serving_simulator.py: latency-throughput curves of an LLM server, by discrete-event simulation.

One model replica serves a stream of requests (Poisson or evenly spaced arrivals at each rate of
``--rates``; prompt and output lengths from ``--prompt-len`` / ``--output-len``) with ``static``
(request-level) or ``continuous`` (iteration-level, Orca) batching, a KV cache of ``--kv-tokens``
with recompute preemption and optional ``--chunked-prefill``. A step takes decode ``a + b*B +
c*context`` plus prefill ``p0 + p1*tokens`` seconds: ``--step-model`` (default: a roofline
estimate of Llama 2 7B on one H100) or ``--fit`` to a ``decode_bench.py`` result. Per rate and
policy: requests/s, output tokens/s, TTFT p50/p90/p99, TPOT and end-to-end p50/p99, mean batch,
preemptions and goodput (requests/s meeting ``--slo-ttft`` and ``--slo-tpot``), with DistServe's
knee per policy. Units: seconds (ms in the table), tokens, requests/s. Nothing is executed: 20
rows of 2,200 requests take about 2 s. The model in full: book/en/inference/batching.md.

Plain ``python``, standard library only; no torch, no GPU::

    python serving_simulator.py                                        # default model and workload
    python serving_simulator.py --policy static,continuous --rates 1,2,4,8,16 --json sim.json
    python serving_simulator.py --fit decode_bench.json --prompt-len uniform:64:512 \\
        --output-len exponential:128 --max-batch 16 --kv-tokens 8192 --chunked-prefill 256

Example output (3 of the 20 rows of results/inference/serving_simulator-cpu.json)::

    policy        rate   req/s    tok/s   ttft50   ttft90   ttft99  tpot50  tpot99    e2e50    e2e99  batch preempt goodput  slo%
    static           2    2.00      130    956.9   3050.7   8757.4    10.0    18.6   1621.4  10224.8    4.3       0    1.02    51
    continuous       2    2.00      130     94.7    156.2    296.6    10.2    35.1    589.6   3584.8    2.1       0    1.98    99
    continuous       8    6.32      396  33531.4  54355.4  59506.2    36.9    72.3  35189.6  63606.5   16.0       0    0.00     0

Exit status: 0 ok (overloaded rates included), 1 failure, 2 usage (checked before simulating),
130/143 interrupted by Ctrl-C/SIGTERM (the rows done are printed and written).
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import sys
import tempfile
import traceback
from collections import deque
from itertools import combinations

PROG = "serving_simulator.py"
MAX_RATES = 64
MAX_REQUESTS = 200_000
MAX_SWEEP_REQUESTS = 2_000_000
MAX_STEPS = 20_000_000
MAX_LEN = 1_048_576
DEFAULT_STEP_MODEL = "4.0e-3,1.4e-5,1.57e-7,4.0e-3,2.7e-5"
POLICIES = ("static", "continuous")
# Key names accepted in a decode_bench result, first match wins (times in s or ms).
BATCH_KEYS = ("batch", "batch_size")
CONTEXT_KEYS = ("context", "prompt_len", "prompt_tokens", "ctx")
TPOT_KEYS = (("tpot_s", 1.0), ("tpot_mean_s", 1.0), ("tpot_ms", 1e-3), ("tpot_mean_ms", 1e-3))
TTFT_KEYS = (("ttft_s", 1.0), ("ttft_ms", 1e-3))
NEW_TOKEN_KEYS = ("new_tokens", "decode_tokens", "new-tokens")


# ----------------------------------------------------------------------------------------------
# Length distributions
# ----------------------------------------------------------------------------------------------

class Dist:
    """A distribution of token counts, parsed from ``fixed:N``, ``uniform:LO:HI``,
    ``lognormal:MEAN:SIGMA`` or ``exponential:MEAN``; samples are clipped to [1, max_len]."""

    def __init__(self, kind: str, params: tuple, text: str):
        self.kind, self.params, self.text = kind, params, text

    def __repr__(self) -> str:
        return self.text

    def sample(self, rng: random.Random, max_len: int) -> int:
        kind, p = self.kind, self.params
        if kind == "fixed":
            value = p[0]
        elif kind == "uniform":
            value = rng.randint(p[0], p[1])
        elif kind == "lognormal":
            mean, sigma = p
            value = round(rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma))
        else:  # exponential: geometric on 1, 2, ... with mean p[0], P(L > k) = (1 - 1/mean)^k
            mean = p[0]
            if mean <= 1:
                value = 1
            else:
                value = 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - 1.0 / mean))
        return max(1, min(max_len, value))

    def largest(self, max_len: int) -> int:
        """The longest length this distribution can give once clipped."""
        if self.kind == "fixed":
            return min(self.params[0], max_len)
        if self.kind == "uniform":
            return min(self.params[1], max_len)
        return max_len


# ----------------------------------------------------------------------------------------------
# Step-time model and its fit
# ----------------------------------------------------------------------------------------------

class StepModel:
    """Seconds per step: decode a + b*B + c*context, prefill p0 + p1*tokens."""
    NAMES = ("a", "b", "c", "p0", "p1")

    def __init__(self, a: float, b: float, c: float, p0: float, p1: float):
        self.a, self.b, self.c, self.p0, self.p1 = a, b, c, p0, p1

    def as_dict(self) -> dict:
        return {n: getattr(self, n) for n in self.NAMES}

    def step(self, prefill_tokens: int, batch: int, context: int) -> float:
        t = 0.0
        if prefill_tokens:
            t += self.p0 + self.p1 * prefill_tokens
        if batch:
            t += self.a + self.b * batch + self.c * context
        return t


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Solve the square system ``matrix x = rhs`` by Gaussian elimination with partial
    pivoting; None when it is singular (a pivot below 1e-12 of the largest entry)."""
    n = len(rhs)
    m = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    scale = max((abs(v) for row in matrix for v in row), default=0.0)
    if scale == 0:
        return None
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) <= 1e-12 * scale:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for k in range(col, n + 1):
                m[r][k] -= f * m[col][k]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][k] * x[k] for k in range(r + 1, n))) / m[r][r]
    return x


def least_squares(rows: list[list[float]], y: list[float], weights: list[float]) -> list[float] | None:
    """Weighted least squares through the normal equations (X'WX) beta = X'Wy. Columns are
    scaled to a largest entry of 1 first (a constant next to a token count), then unscaled."""
    k = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(k)]
    xs = [[r[j] / scale[j] for j in range(k)] for r in rows]
    xtx = [[sum(w * x[i] * x[j] for x, w in zip(xs, weights, strict=True)) for j in range(k)] for i in range(k)]
    xty = [sum(w * x[i] * v for x, w, v in zip(xs, weights, y, strict=True)) for i in range(k)]
    beta = solve(xtx, xty)
    return None if beta is None else [b / s for b, s in zip(beta, scale, strict=True)]


def nonnegative_fit(rows: list[list[float]], y: list[float]) -> list[float] | None:
    """Least squares on the relative error (weights 1/y^2) with every coefficient >= 0: solve on
    each subset of the columns and keep the non-negative solution with the smallest error."""
    k = len(rows[0])
    weights = [1.0 / (v * v) for v in y]
    best, best_err = None, math.inf
    for size in range(k, 0, -1):
        for cols in combinations(range(k), size):
            sub = least_squares([[r[j] for j in cols] for r in rows], y, weights)
            if sub is None or min(sub) < 0:
                continue
            beta = [0.0] * k
            for j, v in zip(cols, sub, strict=True):
                beta[j] = v
            err = sum(w * (sum(b * x for b, x in zip(beta, r, strict=True)) - v) ** 2
                      for r, v, w in zip(rows, y, weights, strict=True))
            if err < best_err * (1 - 1e-12):
                best, best_err = beta, err
    return best


def _first(row: dict, keys):
    for key in keys:
        if isinstance(key, tuple):
            name, factor = key
            if isinstance(row.get(name), (int, float)) and not isinstance(row.get(name), bool):
                return row[name] * factor
        elif isinstance(row.get(key), (int, float)) and not isinstance(row.get(key), bool):
            return row[key]
    return None


def load_decode_bench(path: str) -> list[dict]:
    """The points of a decode_bench.py JSON result as dicts with batch, context, new_tokens,
    tpot_s and ttft_s. Raises ScriptError (usage) naming the file and what is wrong."""
    option = f"--fit {path}"
    doc = parse_json(read_input(path, "--fit"), "--fit", path)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ScriptError(f"{option}: not a decode_bench.py result (no \"results\" list)", EXIT_USAGE)
    settings = doc.get("settings") if isinstance(doc.get("settings"), dict) else {}
    default_new = _first(settings, NEW_TOKEN_KEYS) or _first(doc, NEW_TOKEN_KEYS) or 0
    points = []
    for i, row in enumerate(doc["results"]):
        if not isinstance(row, dict):
            raise ScriptError(f"{option}: results[{i}] is not an object", EXIT_USAGE)
        point = {"batch": _first(row, BATCH_KEYS), "context": _first(row, CONTEXT_KEYS),
                 "new_tokens": _first(row, NEW_TOKEN_KEYS) or default_new,
                 "tpot_s": _first(row, TPOT_KEYS), "ttft_s": _first(row, TTFT_KEYS)}
        shown = {"tpot_s": "tpot_ms", "ttft_s": "ttft_ms"}
        missing = [shown.get(k, k) for k, v in point.items() if v is None]
        if missing:
            raise ScriptError(f"{option}: results[{i}] has no {', '.join(missing)} "
                              "(expected a decode_bench.py result)", EXIT_USAGE)
        for key, value in point.items():
            try:
                ok = math.isfinite(value) and (value > 0 or (key == "new_tokens" and value == 0))
            except OverflowError:  # an int too large for a float
                ok = False
            if not ok:  # new_tokens 0: not recorded; every other field must be > 0
                label = {"tpot_s": "TPOT (s)", "ttft_s": "TTFT (s)"}.get(key, key)
                raise ScriptError(f"{option}: results[{i}]: {label} is {value!r}, not a positive "
                                  "finite number", EXIT_USAGE)
        points.append(point)
    if len({(p["batch"], p["context"]) for p in points}) < 3:
        raise ScriptError(f"{option}: {len(points)} point(s), fewer than 3 distinct (batch, "
                          "context) pairs; cannot fit the 3 decode coefficients", EXIT_USAGE)
    return points


def fit_step_model(points: list[dict]) -> tuple[StepModel, list[dict]]:
    """Fit a, b, c to the TPOTs and p0, p1 to the TTFTs of decode_bench points; returns the
    model and, per point, the measured and modelled times and their relative error."""
    dec_rows = [[1.0, p["batch"], p["batch"] * (p["context"] + (p["new_tokens"] + 1) / 2)]
                for p in points]
    pre_rows = [[1.0, p["batch"] * p["context"]] for p in points]
    dec = nonnegative_fit(dec_rows, [p["tpot_s"] for p in points])
    pre = nonnegative_fit(pre_rows, [p["ttft_s"] for p in points])
    if dec is None or pre is None:
        raise ScriptError("--fit: the points do not determine the step model (all the same "
                          "batch and context?)", EXIT_USAGE)
    model = StepModel(dec[0], dec[1], dec[2], pre[0], pre[1])
    residuals = []
    for p, dr, pr in zip(points, dec_rows, pre_rows, strict=True):
        tpot = sum(b * x for b, x in zip(dec, dr, strict=True))
        ttft = sum(b * x for b, x in zip(pre, pr, strict=True))
        residuals.append({"batch": p["batch"], "context": p["context"],
                          "tpot_s": p["tpot_s"], "tpot_model_s": tpot,
                          "tpot_rel_err": (tpot - p["tpot_s"]) / p["tpot_s"],
                          "ttft_s": p["ttft_s"], "ttft_model_s": ttft,
                          "ttft_rel_err": (ttft - p["ttft_s"]) / p["ttft_s"]})
    return model, residuals


# ----------------------------------------------------------------------------------------------
# The simulation
# ----------------------------------------------------------------------------------------------

class Request:
    __slots__ = ("index", "arrival", "prompt", "output", "counted", "admitted", "first_token",
                 "finish", "generated", "ctx", "prefill_left", "chunk", "preemptions")

    def __init__(self, index: int, arrival: float, prompt: int, output: int, counted: bool):
        self.index, self.arrival, self.prompt, self.output = index, arrival, prompt, output
        self.counted = counted
        self.admitted = self.first_token = self.finish = None
        self.generated = self.ctx = self.prefill_left = self.chunk = self.preemptions = 0


class Config:
    """Everything a simulation needs besides the rate: workload, server and step model."""

    def __init__(self, *, prompt: Dist, output: Dist, model: StepModel, requests: int = 1000,
                 warmup: int = 0, arrival: str = "poisson", seed: int = 0, max_len: int = 4096,
                 policy: str = "continuous", max_batch: int = 16, kv_tokens: int = 100_000,
                 batch_timeout: float = 0.0, chunked_prefill: int | None = None,
                 max_queue: int = 1000, slo_ttft: float = math.inf, slo_tpot: float = math.inf,
                 max_steps: int = MAX_STEPS):
        self.prompt, self.output, self.model = prompt, output, model
        self.requests, self.warmup, self.arrival, self.seed = requests, warmup, arrival, seed
        self.max_len, self.policy, self.max_batch, self.kv_tokens = max_len, policy, max_batch, kv_tokens
        self.batch_timeout, self.chunked_prefill, self.max_queue = batch_timeout, chunked_prefill, max_queue
        self.slo_ttft, self.slo_tpot, self.max_steps = slo_ttft, slo_tpot, max_steps
        if self.longest_request() > kv_tokens:  # the command line says so first (--kv-tokens)
            raise ValueError(f"kv_tokens {kv_tokens} < the longest request {self.longest_request()}")

    def longest_request(self) -> int:
        return self.prompt.largest(self.max_len) + self.output.largest(self.max_len)


def arrivals(cfg: Config, rate: float):
    """Requests in arrival order, without end (the simulation stops reading). The stream depends
    only on the seed and the rate, so both policies see the same requests."""
    rng = random.Random(f"{cfg.seed}:{rate!r}")
    t, index = 0.0, 0
    counted_end = cfg.warmup + cfg.requests
    while True:
        t += rng.expovariate(rate) if cfg.arrival == "poisson" else (1.0 / rate if index else 0.0)
        prompt = cfg.prompt.sample(rng, cfg.max_len)
        output = cfg.output.sample(rng, cfg.max_len)
        yield Request(index, t, prompt, output, cfg.warmup <= index < counted_end)
        index += 1


class Simulation:
    """One server at one arrival rate. ``run()`` returns the counted requests, finished or not."""

    def __init__(self, cfg: Config, rate: float):
        self.cfg, self.rate = cfg, rate
        self.stream = arrivals(cfg, rate)
        self.pending = next(self.stream)
        self.queue: deque[Request] = deque()
        self.t = 0.0
        self.in_system = 0            # arrived and not finished
        self.t_start = None           # arrival of the first counted request
        self.area = 0.0               # integral of in_system over [t_start, now]
        self.last = 0.0
        self.arrived_in_window = 0
        self.counted: list[Request] = []
        self.counted_done = 0
        self.done_in_window = self.tokens_in_window = 0   # every request, for overloaded rows
        self.busy = self.batch_area = 0.0
        self.steps = self.preemptions = self.recomputed = self.kv_peak = 0
        self.stop_reason = None

    # -- clock ----------------------------------------------------------------------------------
    def _area_to(self, t: float) -> None:
        if self.t_start is not None and t > self.last:
            self.area += self.in_system * (t - self.last)
            self.last = t

    def ingest(self, until: float) -> None:
        """Queue every request arriving at or before ``until``."""
        while self.pending.arrival <= until:
            r = self.pending
            if r.counted and self.t_start is None:
                self.t_start = self.last = r.arrival
            self._area_to(r.arrival)
            if self.t_start is not None:
                self.arrived_in_window += 1
            if r.counted:
                self.counted.append(r)
            self.in_system += 1
            self.queue.append(r)
            self.pending = next(self.stream)
        self._area_to(until)
        if len(self.queue) > self.cfg.max_queue and self.stop_reason is None:
            self.stop_reason = "overloaded"

    def idle_until_next_arrival(self) -> None:
        self.t = max(self.t, self.pending.arrival)
        self.ingest(self.t)

    def run_step(self, dt: float, size: int) -> None:
        self.ingest(self.t + dt)
        if self.t_start is not None:
            self.busy += dt
            self.batch_area += size * dt
        self.t += dt
        self.steps += 1
        if self.steps >= self.cfg.max_steps and self.stop_reason is None:
            self.stop_reason = "step cap"

    def emit(self, r: Request) -> bool:
        """Request ``r`` produced a token at the current time; True when it is done."""
        r.generated += 1
        r.ctx += 1
        if self.t_start is not None:
            self.tokens_in_window += 1
        if r.generated == 1:
            r.first_token = self.t
        if r.generated < r.output:
            return False
        r.finish = self.t
        self.in_system -= 1
        if self.t_start is not None:
            self.done_in_window += 1
        if r.counted:
            self.counted_done += 1
        return True

    def stopped(self) -> bool:
        return self.stop_reason is not None or self.counted_done == self.cfg.requests

    # -- policies -------------------------------------------------------------------------------
    def run(self) -> list[Request]:
        if self.cfg.policy == "static":
            self.run_static()
        else:
            self.run_continuous()
        return self.counted

    def run_static(self) -> None:
        cfg, model = self.cfg, self.cfg.model
        reserve_out = cfg.output.largest(cfg.max_len)
        while not self.stopped():
            if not self.queue:
                self.idle_until_next_arrival()
                continue
            if len(self.queue) < cfg.max_batch and cfg.batch_timeout > 0:
                wait_until = self.queue[0].arrival + cfg.batch_timeout
                while (len(self.queue) < cfg.max_batch and self.pending.arrival <= wait_until
                       and self.stop_reason is None):
                    self.idle_until_next_arrival()
                if len(self.queue) < cfg.max_batch and wait_until > self.t:
                    self.t = wait_until
                    self.ingest(self.t)
                if self.stopped():
                    break
            batch, reserved = [], 0
            while self.queue and len(batch) < cfg.max_batch:
                need = self.queue[0].prompt + reserve_out
                if reserved + need > cfg.kv_tokens:
                    break
                r = self.queue.popleft()
                r.admitted = self.t
                r.ctx = r.prompt
                batch.append(r)
                reserved += need
            self.kv_peak = max(self.kv_peak, reserved)
            size = len(batch)
            prompt_tokens = sum(r.prompt for r in batch)
            self.run_step(model.step(prompt_tokens, 0, 0), size)
            for r in batch:
                self.emit(r)
            # padded decode: every slot computes until the longest output is done
            for j in range(1, max(r.output for r in batch)):
                if self.stopped():
                    return
                self.run_step(model.step(0, size, prompt_tokens + size * j), size)
                for r in batch:
                    if r.generated < r.output:
                        self.emit(r)

    def run_continuous(self) -> None:
        cfg, model = self.cfg, self.cfg.model
        running: list[Request] = []   # in admission order
        used = 0                      # KV tokens held by the running sequences
        budget_cap = cfg.chunked_prefill or math.inf

        def plan() -> tuple[int, float]:
            """Give prefill chunks to the running sequences in admission order; return the
            tokens the step adds to the cache and the prefill budget left."""
            growth, budget = 0, budget_cap
            for s in running:
                if s.prefill_left == 0:
                    s.chunk = 0
                    growth += 1
                else:
                    s.chunk = int(min(s.prefill_left, budget))
                    budget -= s.chunk
                    growth += s.chunk == s.prefill_left
            return growth, budget

        while not self.stopped():
            if not running and not self.queue:
                self.idle_until_next_arrival()
                continue
            growth, budget = plan()
            while used + growth > cfg.kv_tokens:   # recompute preemption, newest first
                victim = running.pop()
                used -= victim.ctx
                self.preemptions += 1
                victim.preemptions += 1
                victim.ctx = victim.prefill_left = victim.chunk = 0
                self.queue.appendleft(victim)
                growth, budget = plan()
            while self.queue and len(running) < cfg.max_batch and budget > 0:
                r = self.queue[0]
                ctx = r.prompt + r.generated
                chunk = int(min(ctx, budget))
                adds = 1 if chunk == ctx else 0
                if used + ctx + growth + adds > cfg.kv_tokens:
                    break
                self.queue.popleft()
                if r.admitted is None:
                    r.admitted = self.t
                if r.generated:
                    self.recomputed += ctx
                r.ctx = r.prefill_left = ctx
                r.chunk = chunk
                used += ctx
                budget -= chunk
                growth += adds
                running.append(r)
            prefill = sum(s.chunk for s in running)
            decoding = [s for s in running if s.prefill_left == 0]
            context = sum(s.ctx for s in decoding)
            self.run_step(model.step(prefill, len(decoding), context), len(running))
            still = []
            for s in running:
                if s.prefill_left:
                    if not s.chunk:
                        still.append(s)
                        continue
                    s.prefill_left -= s.chunk
                    if s.prefill_left:
                        still.append(s)
                        continue
                used += 1
                if self.emit(s):
                    used -= s.ctx
                else:
                    still.append(s)
            # cache held at the end of the step, finished sequences included (summed afresh)
            self.kv_peak = max(self.kv_peak, sum(s.ctx for s in running))
            running = still


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation between the closest ranks."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def simulate(cfg: Config, rate: float) -> tuple[dict, list[Request]]:
    """Run one rate; return its result row and the counted requests."""
    sim = Simulation(cfg, rate)
    reqs = sim.run()
    done = [r for r in reqs if r.finish is not None]
    end = max((r.finish for r in done), default=sim.t) if sim.stop_reason is None else sim.t
    window = end - sim.t_start if sim.t_start is not None else 0.0
    overloaded = sim.stop_reason == "overloaded"
    if overloaded:  # what the saturated server did, whichever requests it served
        served, tokens = sim.done_in_window, sim.tokens_in_window
    else:
        served, tokens = len(done), sum(r.output for r in done)
    row = {"policy": cfg.policy, "rate": rate, "offered_req_s": rate,
           "requests": cfg.requests, "completed": len(done),
           "complete": sim.stop_reason is None, "overloaded": overloaded,
           "stop_reason": sim.stop_reason, "window_s": window,
           "throughput_req_s": served / window if window > 0 else None,
           "throughput_tok_s": tokens / window if window > 0 else None,
           "mean_batch": sim.batch_area / sim.busy if sim.busy > 0 else None,
           "busy_fraction": min(1.0, sim.busy / window) if window > 0 else None,
           "preemptions": sim.preemptions, "recomputed_tokens": sim.recomputed,
           "kv_peak_tokens": sim.kv_peak,
           "steps": sim.steps}
    latency_keys = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                    "e2e_p50_s", "e2e_p99_s", "e2e_mean_s", "queue_mean_s", "goodput_req_s",
                    "slo_attainment", "mean_in_system", "arrival_rate_measured")
    if overloaded or not done:
        row.update({k: None for k in latency_keys})
        return row, reqs
    ttft = [r.first_token - r.arrival for r in done]
    e2e = [r.finish - r.arrival for r in done]
    tpot = [(r.finish - r.first_token) / (r.output - 1) for r in done if r.output > 1]
    good = sum(1 for r in done if r.first_token - r.arrival <= cfg.slo_ttft
               and (r.output == 1 or (r.finish - r.first_token) / (r.output - 1) <= cfg.slo_tpot))
    row.update({
        "ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99), "tpot_p50_s": percentile(tpot, 50),
        "tpot_p99_s": percentile(tpot, 99), "e2e_p50_s": percentile(e2e, 50),
        "e2e_p99_s": percentile(e2e, 99), "e2e_mean_s": mean(e2e),
        "queue_mean_s": mean([r.admitted - r.arrival for r in done]),
        "goodput_req_s": good / window if window > 0 else None,
        "slo_attainment": good / len(done),
        "mean_in_system": sim.area / window if window > 0 else None,
        "arrival_rate_measured": sim.arrived_in_window / window if window > 0 else None})
    return row, reqs


def knee(rows: list[dict], attainment: float) -> float | None:
    """DistServe's goodput of a policy: the highest rate at which at least ``attainment`` of the
    requests met both SLOs, counting only rates below the first one that failed."""
    best = None
    for row in sorted(rows, key=lambda r: r["rate"]):
        if row["overloaded"] or row["slo_attainment"] is None or row["slo_attainment"] < attainment:
            break
        best = row["rate"]
    return best


def run_sweep(args, model: StepModel, rows: list[dict]) -> None:
    """Simulate every policy at every rate, appending each row to ``rows`` and printing it (an
    interruption leaves the rows done in ``rows``)."""
    for policy in args.policy:
        cfg = Config(prompt=args.prompt_len, output=args.output_len, model=model,
                     requests=args.requests, warmup=args.warmup_requests, arrival=args.arrival,
                     seed=args.seed, max_len=args.max_len, policy=policy,
                     max_batch=args.max_batch, kv_tokens=args.kv_tokens,
                     batch_timeout=args.batch_timeout, chunked_prefill=args.chunked_prefill,
                     max_queue=args.max_queue, slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot)
        for rate in args.rates:
            row, _ = simulate(cfg, rate)
            rows.append(row)
            print(format_row(row), flush=True)


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def ms(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value * 1e3:>{width}.1f}"


def num(value: float | None, width: int, digits: int = 2) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


HEADER = (f"{'policy':<10} {'rate':>7} {'req/s':>7} {'tok/s':>8} {'ttft50':>8} {'ttft90':>8} "
          f"{'ttft99':>8} {'tpot50':>7} {'tpot99':>7} {'e2e50':>8} {'e2e99':>8} {'batch':>6} "
          f"{'preempt':>7} {'goodput':>7} {'slo%':>5}")


def format_row(row: dict) -> str:
    att = row["slo_attainment"]
    line = (f"{row['policy']:<10} {row['rate']:>7g} {num(row['throughput_req_s'], 7)} "
            f"{num(row['throughput_tok_s'], 8, 0)} {ms(row['ttft_p50_s'], 8)} "
            f"{ms(row['ttft_p90_s'], 8)} {ms(row['ttft_p99_s'], 8)} {ms(row['tpot_p50_s'], 7)} "
            f"{ms(row['tpot_p99_s'], 7)} {ms(row['e2e_p50_s'], 8)} {ms(row['e2e_p99_s'], 8)} "
            f"{num(row['mean_batch'], 6, 1)} {row['preemptions']:>7} "
            f"{num(row['goodput_req_s'], 7)} {num(None if att is None else 100 * att, 5, 0)}")
    if row["overloaded"]:
        line += "  overloaded"
    elif not row["complete"]:
        line += f"  stopped: {row['stop_reason']}"
    return line


def print_setup(args, model: StepModel, source: str, residuals: list[dict] | None) -> None:
    """The step model (and its fit), the workload, the server and the table's header."""
    coef = model.as_dict()
    print(f"# {PROG}: step model {source}")
    print(f"#   decode  = {coef['a']:.4g} + {coef['b']:.4g}*B + {coef['c']:.4g}*context  s")
    print(f"#   prefill = {coef['p0']:.4g} + {coef['p1']:.4g}*tokens  s")
    if residuals:
        print("#   fit residuals, per decode_bench point (err = model / measured - 1):")
        print(f"#   {'batch':>5} {'context':>7} {'tpot ms':>8} {'model':>7} {'err':>7} "
              f"{'ttft ms':>8} {'model':>7} {'err':>7}")
        for r in residuals:
            print(f"#   {r['batch']:>5g} {r['context']:>7g} {1e3 * r['tpot_s']:>8.2f} "
                  f"{1e3 * r['tpot_model_s']:>7.2f} {100 * r['tpot_rel_err']:>+6.1f}% "
                  f"{1e3 * r['ttft_s']:>8.1f} {1e3 * r['ttft_model_s']:>7.1f} "
                  f"{100 * r['ttft_rel_err']:>+6.1f}%")
    print(f"# workload: {args.arrival} arrivals, prompt {args.prompt_len}, output {args.output_len}, "
          f"max-len {args.max_len}, {args.requests} requests (+{args.warmup_requests} warm-up) per rate")
    print(f"# server: max-batch {args.max_batch}, kv-tokens {args.kv_tokens}, "
          f"chunked-prefill {args.chunked_prefill or 'off'}, batch-timeout {args.batch_timeout:g} s; "
          f"SLO ttft {args.slo_ttft:g} s, tpot {args.slo_tpot:g} s")
    print("# times in ms; req/s and tok/s achieved; goodput = req/s meeting both SLOs; "
          "slo% = share of requests meeting both")
    print(HEADER, flush=True)


def print_knees(args, rows: list[dict]) -> dict:
    """Print each policy's knee (DistServe's goodput) and its overloaded rates; returns the knees."""
    knees = {}
    for policy in args.policy:
        done = [r for r in rows if r["policy"] == policy]
        if done:
            knees[policy] = knee(done, args.attainment)
            value = knees[policy]
            print(f"# {policy}: highest rate with >= {100 * args.attainment:g}% of requests meeting "
                  f"both SLOs (DistServe's goodput): "
                  + (f"{value:g} req/s" if value is not None else "none of the rates"))
        for row in done:
            if row["overloaded"]:
                print(f"# {policy} at {row['rate']:g} req/s: overloaded, more than {args.max_queue} "
                      f"requests waiting after {row['window_s']:.1f} s; saturated, the server made "
                      f"{row['throughput_tok_s'] or 0:.0f} output tokens/s")
    return knees


def json_report(args, model: StepModel, residuals: list[dict] | None, knees: dict,
                rows: list[dict], interrupted: bool) -> dict:
    """The --json document (tools/schemas/serving_simulator.schema.json)."""
    settings = {k: getattr(args, k) for k in (
        "rates", "policy", "arrival", "requests", "warmup_requests", "max_len", "seed",
        "max_batch", "kv_tokens", "batch_timeout", "chunked_prefill", "slo_ttft", "slo_tpot",
        "attainment", "max_queue")}
    settings["prompt_len"] = args.prompt_len.text
    settings["output_len"] = args.output_len.text
    step_model = {"source": "fit" if args.fit else ("given" if args.step_model else "default"),
                  **model.as_dict(), "units": "seconds; decode = a + b*B + c*context tokens, "
                  "prefill = p0 + p1*prompt tokens"}
    if args.fit:
        step_model["fit_file"] = args.fit
        step_model["residuals"] = residuals
        step_model["max_abs_rel_err"] = {
            "tpot": max(abs(r["tpot_rel_err"]) for r in residuals),
            "ttft": max(abs(r["ttft_rel_err"]) for r in residuals)}
    return {**envelope("serving_simulator", None), "settings": settings, "step_model": step_model,
            "knee_req_s": knees, "interrupted": interrupted,
            "units": {"times": "seconds", "throughput_tok_s": "output tokens per second",
                      "rates": "requests per second"},
            "results": rows}


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def parse_dist(text: str) -> Dist:
    """argparse type for a length distribution; errors say what the accepted forms are."""
    forms = "fixed:N, uniform:LO:HI, lognormal:MEAN:SIGMA or exponential:MEAN"
    shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
    kind, _, rest = text.strip().partition(":")
    parts = rest.split(":") if rest else []
    arity = {"fixed": 1, "uniform": 2, "lognormal": 2, "exponential": 1}
    if kind not in arity:
        raise argparse.ArgumentTypeError(f"{shown!r}: unknown distribution; use {forms}")
    if len(parts) != arity[kind]:
        raise argparse.ArgumentTypeError(f"{shown!r}: {kind} takes {arity[kind]} number(s); use {forms}")
    values = []
    for part in parts:
        integer = kind in ("fixed", "uniform")
        try:
            value = int(part) if integer else float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{shown!r}: {part!r} is not {'an integer' if integer else 'a number'}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r}: {part!r} is not a finite number")
        values.append(value)
    if kind in ("fixed", "uniform") and not all(1 <= v <= MAX_LEN for v in values):
        raise argparse.ArgumentTypeError(f"{shown!r}: lengths must be in [1, {MAX_LEN}]")
    if kind == "uniform" and values[0] > values[1]:
        raise argparse.ArgumentTypeError(f"{shown!r}: LO must be <= HI")
    if kind in ("lognormal", "exponential") and not 1 <= values[0] <= MAX_LEN:
        raise argparse.ArgumentTypeError(f"{shown!r}: MEAN must be in [1, {MAX_LEN}] tokens")
    if kind == "lognormal" and not 0 <= values[1] <= 4:
        raise argparse.ArgumentTypeError(f"{shown!r}: SIGMA must be in [0, 4]")
    return Dist(kind, tuple(values), text.strip())


parse_dist.__name__ = "distribution"


def parse_rates(text: str) -> list[float]:
    """argparse type for ``--rates``: a comma list of request rates, positive and finite."""
    items = [t for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty list; give rates in requests/s, e.g. 1,2,4")
    if len(items) > MAX_RATES:
        raise argparse.ArgumentTypeError(f"{len(items)} rates; at most {MAX_RATES} per sweep")
    return [number(float, 0, 1e6, lo_open=True)(t.strip()) for t in items]


parse_rates.__name__ = "rates"


def parse_policies(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in POLICIES]
    if not items or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: use static, continuous or static,continuous")
    return list(dict.fromkeys(items))


parse_policies.__name__ = "policy"


def parse_step_model(text: str) -> StepModel:
    parts = text.split(",")
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"{text!r}: give 5 numbers a,b,c,p0,p1 in seconds")
    values = [number(float, 0, 1e3)(p.strip()) for p in parts]
    if not any(values):
        raise argparse.ArgumentTypeError(f"{text!r}: every coefficient is 0; steps would take no time")
    return StepModel(*values)


parse_step_model.__name__ = "step model"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Discrete-event simulation of an LLM server (static or continuous "
        "batching, KV-cache preemption, chunked prefill): TTFT, TPOT, throughput and goodput per "
        "request rate.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--rates", type=parse_rates, default=parse_rates("1,2,4,8,16"),
                   help=f"request rates to simulate, requests/s, comma list (at most {MAX_RATES}; "
                   "default 1,2,4,8,16)")
    p.add_argument("--policy", type=parse_policies, default=["continuous"],
                   help="static, continuous or static,continuous (default continuous)")
    p.add_argument("--arrival", choices=("poisson", "uniform"), default="poisson",
                   help="arrival process (default poisson)")
    p.add_argument("--requests", type=number(int, 1, MAX_REQUESTS), default=1000,
                   help=f"counted requests per rate (default 1000, at most {MAX_REQUESTS})")
    p.add_argument("--warmup-requests", type=number(int, 0, MAX_REQUESTS), default=100,
                   help="requests simulated before counting starts (default 100)")
    p.add_argument("--prompt-len", type=parse_dist, default=parse_dist("uniform:64:1024"),
                   help="prompt length distribution (default uniform:64:1024)")
    p.add_argument("--output-len", type=parse_dist, default=parse_dist("exponential:128"),
                   help="output length distribution (default exponential:128)")
    p.add_argument("--max-len", type=number(int, 1, MAX_LEN), default=4096,
                   help="clip every prompt and output length to this (default 4096)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0, help="random seed (default 0)")
    p.add_argument("--max-batch", type=number(int, 1, 65536), default=16,
                   help="most sequences in a batch (default 16)")
    p.add_argument("--kv-tokens", type=number(int, 1, 10**9), default=100_000,
                   help="KV cache capacity in tokens, all running sequences (default 100000)")
    p.add_argument("--batch-timeout", type=number(float, 0, 3600), default=0.0,
                   help="static: seconds the oldest request may wait for the batch to fill (default 0)")
    p.add_argument("--chunked-prefill", type=number(int, 1, 10**7), default=None, metavar="TOKENS",
                   help="continuous: prefill at most TOKENS prompt tokens per step (default: no limit)")
    model = p.add_mutually_exclusive_group()
    model.add_argument("--step-model", type=parse_step_model, default=None, metavar="A,B,C,P0,P1",
                       help="step-time coefficients in seconds (default: a roofline estimate of "
                       f"Llama 2 7B on one H100, {DEFAULT_STEP_MODEL})")
    model.add_argument("--fit", type=nonempty, metavar="PATH",
                       help="fit the step model to a decode_bench.py JSON result")
    p.add_argument("--slo-ttft", type=number(float, 0, 1e6, lo_open=True), default=1.0,
                   help="time-to-first-token SLO, seconds (default 1.0)")
    p.add_argument("--slo-tpot", type=number(float, 0, 1e6, lo_open=True), default=0.05,
                   help="time-per-output-token SLO, seconds (default 0.05)")
    p.add_argument("--attainment", type=number(float, 0, 1, lo_open=True), default=0.9,
                   help="fraction of requests that must meet both SLOs for the knee (default 0.9)")
    p.add_argument("--max-queue", type=number(int, 1, 10**7), default=1000,
                   help="a rate is overloaded when more requests than this wait (default 1000)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write settings, step model and rows as JSON ('-': stdout)")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for option, dist in (("--prompt-len", args.prompt_len), ("--output-len", args.output_len)):
        if dist.kind in ("fixed", "uniform") and max(dist.params) > args.max_len:
            parser.error(f"argument {option}: {dist.text} exceeds --max-len {args.max_len}")
    total = args.requests + args.warmup_requests
    sweep = total * len(args.rates) * len(args.policy)
    if sweep > MAX_SWEEP_REQUESTS:
        parser.error(f"argument --rates: {len(args.rates)} rate(s) x {len(args.policy)} "
                     f"policy(ies) x {total} requests = {sweep:,} simulated requests; at most "
                     f"{MAX_SWEEP_REQUESTS:,} (fewer rates or --requests)")
    longest = args.prompt_len.largest(args.max_len) + args.output_len.largest(args.max_len)
    if longest > args.kv_tokens:
        parser.error(f"argument --kv-tokens: {args.kv_tokens} cannot hold the longest request "
                     f"({longest} tokens: the longest prompt plus the longest output, clipped "
                     "to --max-len); raise --kv-tokens or lower the lengths")
    if args.fit:
        args.fit_points = load_decode_bench(args.fit)
    if args.json and args.json != "-":
        check_output(args.json, "--json", inputs=[args.fit] if args.fit else [])
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    on_stop_signals()  # Ctrl-C, scancel and a job's time limit keep the rows done
    residuals = None
    if args.fit:
        model, residuals = fit_step_model(args.fit_points)
        source = f"fitted to {args.fit}"
    else:
        model = args.step_model or parse_step_model(DEFAULT_STEP_MODEL)
        source = "--step-model" if args.step_model else "default (roofline estimate, Llama 2 7B on one H100)"
    print_setup(args, model, source, residuals)
    rows: list[dict] = []
    stopped = None
    try:
        run_sweep(args, model, rows)
    except Interrupted as stop:
        stopped = stop
        print(f"# interrupted: {len(rows)} of {len(args.rates) * len(args.policy)} rows done")
    knees = print_knees(args, rows)
    if args.json:
        text = json.dumps(json_report(args, model, residuals, knees, rows, bool(stopped)), indent=1)
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
