"""Tests of scripts/inference/serving_simulator.py: queueing theory, the schedulers' invariants,
the step-model fit, the command line and careless inputs.

Expected values come from theory, not from a run of the script:
* M/D/1 (Poisson arrivals, deterministic service D, one server): mean wait in the queue
  Wq = rho * D / (2 (1 - rho)), the Pollaczek-Khinchine mean-value formula
  Wq = lambda * E[S^2] / (2 (1 - rho)) with E[S^2] = D^2 (Kleinrock, Queueing Systems vol. 1,
  1975, chapter 5, the M/G/1 queue; https://en.wikipedia.org/wiki/Pollaczek%E2%80%93Khinchine_formula).
* M/M/1: mean time in the system 1 / (mu - lambda) (https://en.wikipedia.org/wiki/M/M/1_queue).
  The simulator's service is b * (L - 1) with L geometric, a discrete stand-in for the
  exponential; the same P-K formula gives its exact mean, and the tolerance adds the (computed)
  gap between the two to the statistical error.
* Little's law: mean number in the system = arrival rate x mean time in the system (Little 1961,
  "A Proof for the Queuing Formula: L = lambda W", Operations Research 9(3), 383-387).
Statistical tolerances: each queueing test runs R independent replications (seeds) and allows
4 standard errors of their mean (the replications are independent, so the standard error is
their sample standard deviation / sqrt(R); with R = 8, 4 standard errors is a two-sided t-test
at about 0.5%), and checks the standard error itself is small, so the test has teeth.
"""

from __future__ import annotations

import json
import math
import signal
import statistics

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import import_script, interrupt_when
from tools.results import problems

SCRIPT = "serving_simulator.py"
REPLICATIONS = 8


@pytest.fixture(scope="module")
def sim(launch):
    return import_script(launch.scripts / SCRIPT)


def config(sim, **kw):
    kw.setdefault("max_queue", 10**6)
    kw.setdefault("max_len", 10**6)
    kw.setdefault("kv_tokens", 10**7)
    prompt, output = sim.parse_dist(kw.pop("prompt")), sim.parse_dist(kw.pop("output"))
    return sim.Config(prompt=prompt, output=output, **kw)


def replicate(sim, rate, statistic, **kw):
    """Mean and standard error of ``statistic(requests)`` over independent seeds."""
    values = []
    for seed in range(REPLICATIONS):
        _, reqs = sim.simulate(config(sim, seed=seed, **kw), rate)
        assert all(r.finish is not None for r in reqs)
        values.append(statistic(reqs))
    return statistics.mean(values), statistics.stdev(values) / math.sqrt(len(values))


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_md1_mean_wait_is_pollaczek_khinchine(sim, policy):
    """One sequence at a time, fixed lengths: the service time D is deterministic."""
    model = sim.StepModel(a=0.004, b=0.001, c=0.0, p0=0.002, p1=3e-5)
    service = model.step(100, 0, 0) + 2 * model.step(0, 1, 0)  # prefill + 2 decode steps
    assert service == pytest.approx(0.015)
    for rho in (0.5, 0.8):
        rate = rho / service
        mean, se = replicate(sim, rate, lambda reqs: statistics.mean(r.admitted - r.arrival for r in reqs),
                             prompt="fixed:100", output="fixed:3", model=model, max_batch=1,
                             requests=3000, warmup=200, policy=policy)
        expected = rho * service / (2 * (1 - rho))
        assert se < 0.1 * expected
        assert abs(mean - expected) < 4 * se, (rho, mean, expected, se)


def test_mm1_time_in_system(sim):
    """Prefill costs nothing, a decode step b: service b * (L - 1), L geometric with mean m."""
    b, m, rho = 0.001, 11, 0.5
    model = sim.StepModel(a=0.0, b=b, c=0.0, p0=0.0, p1=0.0)
    s1 = b * (m - 1)                                   # E[S]
    s2 = b * b * (m - 1) * (2 * m - 1)                 # E[S^2] of b x geometric on 0, 1, ...
    rate = rho / s1
    mm1 = 1 / (1 / s1 - rate)                          # exponential service with the same mean
    exact = s1 + rate * s2 / (2 * (1 - rho))           # P-K for the geometric service
    gap = abs(exact - mm1)
    assert gap < 0.03 * mm1                            # the stand-in is close: 2.5% here
    mean, se = replicate(sim, rate, lambda reqs: statistics.mean(r.finish - r.arrival for r in reqs),
                         prompt="fixed:10", output=f"exponential:{m}", model=model, max_batch=1,
                         requests=3000, warmup=200)
    assert se < 0.03 * mm1
    assert abs(mean - mm1) < 4 * se + gap, (mean, mm1, exact, se)
    assert abs(mean - exact) < 4 * se


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_evenly_spaced_arrivals_below_capacity_never_wait(sim, policy):
    """D/D/1 at utilization 0.9: every request finds the server idle."""
    model = sim.StepModel(0.004, 0.001, 0.0, 0.002, 3e-5)
    service = model.step(100, 0, 0) + 2 * model.step(0, 1, 0)
    row, reqs = sim.simulate(config(sim, prompt="fixed:100", output="fixed:3", model=model,
                                    max_batch=1, requests=500, arrival="uniform", policy=policy),
                             0.9 / service)
    assert max(r.admitted - r.arrival for r in reqs) == 0
    assert row["e2e_p99_s"] == pytest.approx(service)
    assert row["busy_fraction"] == pytest.approx(0.9, rel=0.01)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_littles_law(sim, policy):
    """The time-average number in the system, counted by the simulator as requests come and go,
    equals the measured arrival rate times the mean e2e latency. Only the requests straddling
    the window's two ends differ between the two sides: about 2 x 10 of 3000 here, under 1%."""
    model = sim.StepModel(0.005, 2e-4, 1e-7, 0.004, 2e-5)
    row, _ = sim.simulate(config(sim, prompt="uniform:20:400", output="exponential:40",
                                 max_len=2000, model=model, max_batch=8, requests=3000, warmup=200,
                                 policy=policy), 8.0)
    assert row["complete"] and row["mean_in_system"] > 1.5
    little = row["arrival_rate_measured"] * row["e2e_mean_s"]
    assert row["mean_in_system"] == pytest.approx(little, rel=0.02)
    assert row["throughput_req_s"] == pytest.approx(8.0, rel=0.1)


def test_continuous_batching_beats_static_at_the_same_load(sim):
    """Same requests, same step model: finished sequences leave and new ones join at once."""
    rows = {}
    for policy in ("static", "continuous"):
        rows[policy], _ = sim.simulate(config(
            sim, prompt="uniform:64:512", output="exponential:128", max_len=2048,
            model=sim.StepModel(0.0042, 1.4e-5, 1.57e-7, 0.0042, 2.8e-5), max_batch=16,
            requests=1500, warmup=100, policy=policy), 3.0)
    static, cont = rows["static"], rows["continuous"]
    assert static["complete"] and cont["complete"]
    for key in ("e2e_mean_s", "e2e_p99_s", "ttft_p99_s", "queue_mean_s"):
        assert cont[key] < static[key], key
    assert cont["ttft_p99_s"] < 0.5 * static["ttft_p99_s"]


def kv_case(sim, kv_tokens):
    cfg = config(sim, prompt="uniform:100:400", output="exponential:150", max_len=600,
                 model=sim.StepModel(0.005, 1e-4, 1e-7, 0.005, 2e-5), max_batch=32,
                 kv_tokens=kv_tokens, requests=400, warmup=20)
    row, reqs = sim.simulate(cfg, 10.0)
    # the lengths the stream drew, independently of the simulation
    stream = sim.arrivals(cfg, 10.0)
    drawn = {r.index: r.output for r in (next(stream) for _ in range(420))}
    return row, reqs, drawn


@pytest.mark.parametrize("kv_tokens,preempted", [(200_000, False), (4000, True)])
def test_kv_cache_preemption(sim, kv_tokens, preempted):
    row, reqs, drawn = kv_case(sim, kv_tokens)
    assert row["complete"] and len(reqs) == 400
    assert (row["preemptions"] > 0) is preempted
    assert (row["recomputed_tokens"] > 0) is preempted
    assert row["kv_peak_tokens"] <= kv_tokens
    for r in reqs:
        assert r.finish is not None and r.generated == r.output == drawn[r.index]
        assert r.arrival <= r.admitted <= r.first_token <= r.finish
    if preempted:
        assert sum(r.preemptions for r in reqs) <= row["preemptions"]
        assert any(r.preemptions for r in reqs)


def test_preemption_by_hand(sim):
    """Worked by hand. Steps: decode 1 s, prefill 1 s + 0.1 s per token; prompts 10, outputs 20;
    a request every 0.5 s from t = 0; batch of 2; cache of 45 tokens.
    t=0: prefill r0 (2 s). t=2: prefill r1 + decode r0 (3 s); r1's first token at 5, cache 23.
    Eleven decode steps (2 tokens each) fill the cache to 45 at t=16: r1, the newest, is
    preempted with 12 tokens generated. r0 alone finishes its last 7 tokens at t=23. t=23: r1
    readmitted, its 10 + 12 tokens prefilled again with r2's 10 (1 + 3.2 s) -> t=27.2, r1 has 13
    tokens; 5 decode steps fill the cache to 44 (t=32.2), r2 (newer) is preempted, r1 finishes
    its last 2 tokens at t=34.2."""
    cfg = config(sim, prompt="fixed:10", output="fixed:20", model=sim.StepModel(1, 0, 0, 1, 0.1),
                 max_batch=2, kv_tokens=45, requests=2, arrival="uniform")
    row, (r0, r1) = sim.simulate(cfg, 2.0)
    assert (r0.preemptions, r1.preemptions) == (0, 1)
    assert r0.first_token == pytest.approx(2) and r0.finish == pytest.approx(23)
    assert r1.first_token == pytest.approx(5) and r1.finish == pytest.approx(34.2)
    assert r1.generated == 20 and row["kv_peak_tokens"] == 45
    assert (r0.admitted, r1.admitted) == (0, 2)  # the first admission, not the readmission


@pytest.mark.parametrize("policy,ttft,attainment", [("static", 5.5, (0.5, 1.0)),
                                                     ("continuous", 2.5, (1.0, 0.0))])
def test_head_of_line_blocking_by_hand(sim, policy, ttft, attainment):
    """Worked by hand. Steps of 1 s (prefill and decode alike), outputs of 5 tokens, a request
    every 0.5 s, batch of 2. Static: r0 runs alone from t=0 to 5 and r1 (arrived at 0.5) waits for
    the whole batch: first token at 6, TPOTs 1 s. Continuous: r1 joins at t=1 (prefill + r0's
    decode, 2 s): first token at 3; r0 ends at 6, r1 at 8 (r2 joins at 6): TPOTs 1.25 s.
    SLO (TTFT 3 s, TPOT 1.5 s): static meets it for r0 only; (100 s, 1.2 s): only static does."""
    for slo, share in zip(((3.0, 1.5), (100.0, 1.2)), attainment, strict=True):
        cfg = config(sim, prompt="fixed:10", output="fixed:5", model=sim.StepModel(1, 0, 0, 1, 0),
                     max_batch=2, requests=2, arrival="uniform", policy=policy,
                     slo_ttft=slo[0], slo_tpot=slo[1])
        row, (r0, r1) = sim.simulate(cfg, 2.0)
        assert r0.finish == pytest.approx(5 if policy == "static" else 6)
        assert r1.first_token - r1.arrival == pytest.approx(ttft)
        assert row["slo_attainment"] == share, slo


class Sequence:
    """A length 'distribution' that gives the listed lengths in turn (for worked examples)."""

    def __init__(self, *lengths):
        self.lengths, self.i = lengths, 0

    def sample(self, rng, max_len):
        self.i += 1
        return self.lengths[(self.i - 1) % len(self.lengths)]

    def largest(self, max_len):
        return max(self.lengths)


def test_static_batch_is_padded_by_hand(sim):
    """Worked by hand. Outputs 2 and 5; decode step 1 + 1 s per sequence, prefill 1 s; arrivals at
    0 and 0.5; batch of 2 with a 1 s timeout: the batch fills at 0.5, prefills until 1.5, and
    every decode step costs 1 + 2 s, also after r0 is done at 4.5: r1 ends at 1.5 + 4 x 3."""
    cfg = sim.Config(prompt=Sequence(10), output=Sequence(2, 5), model=sim.StepModel(1, 1, 0, 1, 0),
                     max_batch=2, requests=2, arrival="uniform", policy="static", batch_timeout=1.0)
    row, (r0, r1) = sim.simulate(cfg, 2.0)
    assert r0.admitted == r1.admitted == 0.5
    assert r0.first_token == r1.first_token == pytest.approx(1.5)
    assert r0.finish == pytest.approx(4.5) and r1.finish == pytest.approx(13.5)
    assert row["mean_batch"] == pytest.approx(2)


def test_chunked_prefill_keeps_decodes_flowing(sim):
    """Long prompts prefilled whole stall every running decode for one long step; chunks of 256
    tokens bound the stall (Sarathi-Serve), so the tail TPOT falls."""
    rows = {}
    for chunk in (None, 256):
        rows[chunk], reqs = sim.simulate(config(
            sim, prompt="fixed:3000", output="fixed:64", model=sim.StepModel(0.01, 1e-4, 0.0, 0.005, 2e-5),
            max_batch=16, chunked_prefill=chunk, requests=300, warmup=20), 4.0)
        assert all(r.generated == 64 for r in reqs)
    assert rows[256]["tpot_p99_s"] < 0.8 * rows[None]["tpot_p99_s"]


def test_static_batch_timeout_fills_batches(sim):
    kw = dict(prompt="fixed:50", output="fixed:20", model=sim.StepModel(0.01, 1e-4, 0, 0.005, 1e-5),
              max_batch=8, requests=400, warmup=20, policy="static")
    quick, _ = sim.simulate(config(sim, **kw), 20.0)
    patient, _ = sim.simulate(config(sim, batch_timeout=0.2, **kw), 20.0)
    assert patient["mean_batch"] > quick["mean_batch"]
    assert patient["queue_mean_s"] > quick["queue_mean_s"]


def test_overload_stops_at_the_queue_cap(sim):
    row, _ = sim.simulate(config(sim, prompt="fixed:100", output="fixed:50", max_queue=200,
                                 model=sim.StepModel(0.01, 1e-4, 0, 0.005, 1e-5),
                                 requests=100_000), 1000.0)
    assert row["overloaded"] and not row["complete"] and row["ttft_p50_s"] is None
    # capacity of a full batch of 16: 16 requests per (prefill + 49 decode steps)
    full = 0.005 + 1e-5 * 1600 + 49 * (0.01 + 16e-4)
    assert row["throughput_req_s"] < 16 / full * 1.05


def test_length_distributions(sim):
    import random
    rng = random.Random(1)
    n = 20000
    for text, mean in (("exponential:50", 50), ("lognormal:200:0.8", 200), ("uniform:10:30", 20)):
        d = sim.parse_dist(text)
        xs = [d.sample(rng, 10**6) for _ in range(n)]
        assert min(xs) >= 1
        se = statistics.stdev(xs) / math.sqrt(n)
        assert abs(statistics.mean(xs) - mean) < 4 * se + 0.5, text  # +0.5: rounding to integers
    assert {sim.parse_dist("uniform:3:5").sample(rng, 99) for _ in range(200)} == {3, 4, 5}
    assert sim.parse_dist("exponential:1").sample(rng, 9) == 1
    assert max(sim.parse_dist("lognormal:100:2").sample(rng, 150) for _ in range(2000)) == 150


def decode_points(model, batches=(1, 2, 4, 8, 16), contexts=(128, 512), new_tokens=32):
    return [{"batch": b, "context": c, "new_tokens": new_tokens,
             "tpot_s": model.a + model.b * b + model.c * b * (c + (new_tokens + 1) / 2),
             "ttft_s": model.p0 + model.p1 * b * c} for b in batches for c in contexts]


def test_fit_recovers_known_coefficients(sim):
    truth = sim.StepModel(a=3e-3, b=2.5e-4, c=4e-8, p0=1e-3, p1=6e-6)
    model, residuals = sim.fit_step_model(decode_points(truth))
    for name in truth.NAMES:
        assert getattr(model, name) == pytest.approx(getattr(truth, name), rel=1e-9), name
    assert len(residuals) == 10 and max(abs(r["tpot_rel_err"]) for r in residuals) < 1e-9


def test_fit_keeps_coefficients_non_negative(sim):
    """A data set whose unconstrained fit wants a negative per-sequence cost gets b = 0."""
    points = decode_points(sim.StepModel(5e-3, 0.0, 1e-7, 1e-3, 1e-5))
    for p in points:
        p["tpot_s"] *= 1 - 0.02 * math.log2(p["batch"])  # bigger batches a bit faster than linear
    model, residuals = sim.fit_step_model(points)
    assert min(model.as_dict().values()) >= 0 and model.b == 0
    assert max(abs(r["tpot_rel_err"]) for r in residuals) < 0.1


def test_fit_minimises_the_relative_error(sim):
    """With noise, the fit's sum of squared relative errors is below that of the ordinary
    (unweighted) least-squares solution, which favours the slow points."""
    import random
    rng = random.Random(0)
    points = decode_points(sim.StepModel(2e-3, 3e-4, 5e-8, 1e-3, 4e-6))
    for p in points:
        p["tpot_s"] *= 1 + rng.uniform(-0.15, 0.15)
    _, residuals = sim.fit_step_model(points)
    fitted = sum(r["tpot_rel_err"] ** 2 for r in residuals)
    rows = [[1.0, p["batch"], p["batch"] * (p["context"] + (p["new_tokens"] + 1) / 2)] for p in points]
    plain = sim.least_squares(rows, [p["tpot_s"] for p in points], [1.0] * len(points))
    assert min(plain) >= 0
    unweighted = sum((sum(b * x for b, x in zip(plain, r, strict=True)) / p["tpot_s"] - 1) ** 2
                     for r, p in zip(rows, points, strict=True))
    assert fitted < 0.97 * unweighted  # 8% lower with this seed; the same fit would be equal


def test_least_squares_solves_the_normal_equations(sim):
    rows = [[1.0, x, x * x] for x in (0.0, 1.0, 2.0, 3.0, 5.0)]
    beta = sim.least_squares(rows, [2 + 3 * r[1] - 0.5 * r[2] for r in rows], [1.0] * 5)
    assert beta == pytest.approx([2, 3, -0.5])
    assert sim.solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None  # singular


def write_bench(sim, path):
    """A result in decode_bench.py's format made from known coefficients; returns the model."""
    model = sim.StepModel(a=2e-3, b=3e-4, c=5e-8, p0=1e-3, p1=4e-6)
    rows = decode_points(model)
    doc = {"benchmark": "decode_bench", "settings": {"new_tokens": rows[0]["new_tokens"]},
           "results": [{"batch": r["batch"], "context": r["context"], "new_tokens": r["new_tokens"],
                        "tpot_ms": 1e3 * r["tpot_s"], "ttft_ms": 1e3 * r["ttft_s"]} for r in rows]}
    path.write_text(json.dumps(doc))
    return model


def test_cli_fit_and_two_policies(launch, sim, tmp_path):
    bench = tmp_path / "decode_bench.json"
    truth = write_bench(sim, bench)
    out = tmp_path / "sim.json"
    res = launch.python(SCRIPT, ["--fit", str(bench), "--policy", "static,continuous",
                                 "--rates", "5,20,200", "--requests", "300",
                                 "--warmup-requests", "20", "--prompt-len", "uniform:64:512",
                                 "--output-len", "exponential:64", "--max-len", "1024",
                                 "--kv-tokens", "20000", "--max-queue", "300",
                                 "--slo-ttft", "0.5", "--slo-tpot", "0.02", "--json", str(out)],
                        timeout=60)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert problems(doc, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert doc["benchmark"] == "serving_simulator" and not doc["interrupted"]
    assert {"command", "date_utc", "settings", "step_model", "results"} <= set(doc)
    sm = doc["step_model"]
    assert sm["source"] == "fit" and sm["fit_file"] == str(bench)
    for name in ("a", "b", "c", "p0", "p1"):
        assert sm[name] == pytest.approx(getattr(truth, name), rel=1e-6)
    assert len(sm["residuals"]) == 10 and sm["max_abs_rel_err"]["tpot"] < 1e-6
    rows = doc["results"]
    assert [(r["policy"], r["rate"]) for r in rows] == [
        (p, r) for p in ("static", "continuous") for r in (5, 20, 200)]
    for row in rows:
        if row["rate"] == 200:
            assert row["overloaded"] and row["ttft_p99_s"] is None and row["throughput_req_s"] > 0
            continue
        assert row["complete"] and row["completed"] == 300
        assert row["ttft_p50_s"] <= row["ttft_p90_s"] <= row["ttft_p99_s"]
        assert row["tpot_p50_s"] <= row["tpot_p99_s"] and row["e2e_p50_s"] <= row["e2e_p99_s"]
        assert 0 <= row["goodput_req_s"] <= row["throughput_req_s"] * (1 + 1e-9)
        assert row["goodput_req_s"] == pytest.approx(row["slo_attainment"] * row["throughput_req_s"])
        assert row["throughput_tok_s"] > row["throughput_req_s"]
    assert set(doc["knee_req_s"]) == {"static", "continuous"}
    assert "policy" in res.stdout and "overloaded" in res.stdout and "fit residuals" in res.stdout
    assert res.stdout.count("\nstatic ") == 3 and res.stdout.count("\ncontinuous ") == 3


def test_same_seed_same_rows(launch, tmp_path):
    docs = []
    for name in ("a.json", "b.json"):
        res = launch.python(SCRIPT, ["--rates", "4,8", "--requests", "200", "--policy", "static",
                                     "--json", str(tmp_path / name)], timeout=60)
        assert res.returncode == 0, res.output
        docs.append(json.loads((tmp_path / name).read_text())["results"])
    assert docs[0] == docs[1]


def test_help_needs_no_torch(launch):
    res = launch.python(SCRIPT, ["--help"], timeout=30)
    assert res.returncode == 0 and "--step-model" in res.stdout and "--fit" in res.stdout


def test_ctrl_c_writes_the_rows_done(launch, tmp_path):
    """The first rate is overloaded at once; the second (200,000 requests) is interrupted."""
    out = tmp_path / "partial.json"
    res = interrupt_when(launch.scripts / SCRIPT,
                         ["--rates", "1000000,1", "--requests", "200000", "--warmup-requests", "0",
                          "--prompt-len", "fixed:10", "--output-len", "fixed:2", "--json", str(out)],
                         lambda lines: lines[-1].startswith("continuous"), signal.SIGINT)
    assert res.returncode == 130, res.output
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and len(doc["results"]) == 1
    assert doc["results"][0]["overloaded"] is True


BENCH_OK = json.dumps({"benchmark": "decode_bench", "results": [
    {"batch": b, "context": c, "tpot_s": 0.01 * b, "ttft_s": 0.02 * b} for b in (1, 2) for c in (8, 16)]})
CASES = [
    Case("dist-unknown", ["--prompt-len", "gaussian:5"], r"--prompt-len.*unknown distribution"),
    Case("dist-arity", ["--output-len", "uniform:5"], r"--output-len.*uniform takes 2"),
    Case("dist-not-number", ["--output-len", "fixed:abc"], r"--output-len.*'abc' is not an integer"),
    Case("dist-nan", ["--prompt-len", "lognormal:nan:1"], r"--prompt-len.*not a finite number"),
    Case("dist-lo-above-hi", ["--prompt-len", "uniform:9:3"], r"--prompt-len.*LO must be <= HI"),
    Case("dist-zero", ["--output-len", "fixed:0"], r"--output-len.*lengths must be in \[1"),
    Case("dist-sigma", ["--output-len", "lognormal:100:9"], r"--output-len.*SIGMA must be in"),
    Case("dist-over-max-len", ["--prompt-len", "fixed:5000", "--max-len", "4096"],
         r"--prompt-len: fixed:5000 exceeds --max-len 4096"),
    Case("rates-empty", ["--rates", ","], r"--rates.*empty list"),
    Case("rates-over-cap", ["--rates", ",".join(["1"] * 65)], r"--rates.*65 rates; at most 64"),
    Case("rate-nan", ["--rates", "1,nan"], r"--rates.*not a finite number"),
    Case("rate-zero", ["--rates", "0"], r"--rates.*must be > 0"),
    Case("sweep-over-cap", ["--rates", "1,2,3,4,5,6,7,8,9,10,11", "--requests", "200000"],
         r"--rates: 11 rate\(s\).*at most 2,000,000"),
    Case("requests-zero", ["--requests", "0"], r"--requests.*must be >= 1"),
    Case("policy-unknown", ["--policy", "fifo"], r"--policy.*use static, continuous"),
    Case("kv-too-small", ["--kv-tokens", "100", "--prompt-len", "fixed:80", "--output-len", "fixed:30"],
         r"--kv-tokens: 100 cannot hold the longest request \(110 tokens"),
    Case("step-model-short", ["--step-model", "1,2,3"], r"--step-model.*give 5 numbers"),
    Case("step-model-negative", ["--step-model", "0.01,-1,0,0,0"], r"--step-model.*must be >= 0"),
    Case("step-model-inf", ["--step-model", "0.01,inf,0,0,0"], r"--step-model.*not a finite number"),
    Case("step-model-zero", ["--step-model", "0,0,0,0,0"], r"--step-model.*every coefficient is 0"),
    Case("fit-and-step-model", ["--fit", "b.json", "--step-model", "1,1,1,1,1"],
         r"not allowed with argument", files={"b.json": BENCH_OK}),
    Case("fit-missing", ["--fit", "{tmp}/nope.json"], r"--fit .*nope\.json: does not exist"),
    Case("fit-folder", ["--fit", "{tmp}"], r"--fit .*: is a folder; give a file"),
    Case("fit-not-json", ["--fit", "b.json"], r"--fit b\.json: not valid JSON", files={"b.json": "{oops"}),
    Case("fit-not-bench", ["--fit", "b.json"], r"not a decode_bench\.py result", files={"b.json": "[1, 2]"}),
    Case("fit-missing-key", ["--fit", "b.json"], r"results\[0\] has no tpot_ms",
         files={"b.json": json.dumps({"results": [{"batch": 1, "context": 8, "ttft_s": 0.1}]})}),
    Case("fit-too-few-points", ["--fit", "b.json"], r"fewer than 3 distinct",
         files={"b.json": json.dumps({"results": [{"batch": 1, "context": 8, "ttft_s": 0.1,
                                                   "tpot_s": 0.01}]})}),
    Case("fit-negative-time", ["--fit", "b.json"], r"results\[2\]: TPOT \(s\) is -0\.02, not a positive finite number",
         files={"b.json": BENCH_OK.replace('"tpot_s": 0.02', '"tpot_s": -0.02', 1)}),
    # new_tokens was never checked: -5000 skewed the fit, Infinity blamed another field
    Case("fit-negative-new-tokens", ["--fit", "b.json"], r"results\[0\]: new_tokens is -5000, not a positive",
         files={"b.json": BENCH_OK.replace('"batch": 1,', '"batch": 1, "new_tokens": -5000,', 1)}),
    Case("fit-infinite-new-tokens", ["--fit", "b.json"], r"results\[0\]: new_tokens is inf, not a positive",
         files={"b.json": BENCH_OK.replace('"batch": 1,', '"batch": 1, "new_tokens": Infinity,', 1)}),
    Case("json-is-fit-input", ["--fit", "b.json", "--json", "b.json"], r"--json b\.json: is also an input",
         files={"b.json": BENCH_OK}),
    Case("batch-timeout-negative", ["--batch-timeout", "-1"], r"--batch-timeout.*must be >= 0"),
    Case("slo-zero", ["--slo-ttft", "0"], r"--slo-ttft.*must be > 0"),
    # nan and inf for each float option, and for the floats inside --rates, --step-model and
    # the lognormal and exponential length distributions
    Case("batch-timeout-nan", ["--batch-timeout", "nan"], r"argument --batch-timeout: 'nan' is not a finite number"),
    Case("batch-timeout-inf", ["--batch-timeout", "inf"], r"argument --batch-timeout: 'inf' is not a finite number"),
    Case("slo-ttft-nan", ["--slo-ttft", "nan"], r"argument --slo-ttft: 'nan' is not a finite number"),
    Case("slo-ttft-inf", ["--slo-ttft", "inf"], r"argument --slo-ttft: 'inf' is not a finite number"),
    Case("slo-tpot-nan", ["--slo-tpot", "nan"], r"argument --slo-tpot: 'nan' is not a finite number"),
    Case("slo-tpot-inf", ["--slo-tpot", "inf"], r"argument --slo-tpot: 'inf' is not a finite number"),
    Case("attainment-nan", ["--attainment", "nan"], r"argument --attainment: 'nan' is not a finite number"),
    Case("attainment-inf", ["--attainment", "inf"], r"argument --attainment: 'inf' is not a finite number"),
    Case("rate-inf", ["--rates", "1,inf"], r"argument --rates: 'inf' is not a finite number"),
    Case("step-model-nan", ["--step-model", "0.01,nan,0,0,0"], r"argument --step-model: 'nan' is not a finite number"),
    Case("dist-inf", ["--prompt-len", "lognormal:inf:1"],
         r"argument --prompt-len: 'lognormal:inf:1': 'inf' is not a finite number"),
    Case("dist-sigma-nan", ["--prompt-len", "lognormal:100:nan"],
         r"argument --prompt-len: 'lognormal:100:nan': 'nan' is not a finite number"),
    Case("output-len-nan", ["--output-len", "exponential:nan"],
         r"argument --output-len: 'exponential:nan': 'nan' is not a finite number"),
    Case("output-len-inf", ["--output-len", "exponential:inf"],
         r"argument --output-len: 'exponential:inf': 'inf' is not a finite number"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_input_refused(case, tmp_path):
    check_refused(f"inference/{SCRIPT}", case, tmp_path)
