"""Tests of scripts/instabilities/loss_spike_experiment.py (a short run, as a process) and of the
committed results file the chapter and its notebook are made from.

No number from a run is copied here: the tests check relations (the run with bad batches has
its spikes exactly where the bad batches were and a larger z-score than the baseline; high
learning rate without QK-layernorm grows attention logits far beyond the run with it; the file's
summaries agree with its own per-step data).
"""

from __future__ import annotations

import json
import math
import signal

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script, interrupt_when

SCRIPT = "loss_spike_experiment.py"
RESULTS = REPO / "results" / "instabilities" / "loss_spike_experiment.json"


def load_module():
    return import_script(REPO / "scripts" / "instabilities" / SCRIPT)


def run(launch, tmp_path_factory, configs: str, args: list[str]) -> dict:
    out = tmp_path_factory.mktemp("spike") / "run.json"
    res = launch.python(SCRIPT, ["--configs", configs, "--d-model", "32", *args,
                                 "--json", str(out)], timeout=240)
    assert res.returncode == 0, res.output
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def bad_batch_runs(launch, tmp_path_factory):
    return run(launch, tmp_path_factory, "baseline,bad_batches,bad_batches_skipped",
               ["--steps", "300", "--window", "30"])


def first_of_each_group(steps: list[int]) -> list[int]:
    return [s for s in steps if s - 1 not in steps]


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_bad_batches_spike_where_injected(bad_batch_runs):
    report = bad_batch_runs
    base, bad = report["runs"]["baseline"]["summary"], report["runs"]["bad_batches"]["summary"]
    assert bad["bad_steps"] and not base["bad_steps"]
    assert bad["max_loss_z"] > report["settings"]["z_threshold"] > base["max_loss_z"]
    assert base["loss_spike_steps"] == []
    # The detector fires at the first bad batch of each group and nowhere outside the bad ones.
    assert set(first_of_each_group(bad["bad_steps"])) <= set(bad["loss_spike_steps"])
    assert set(bad["loss_spike_steps"]) <= set(bad["bad_steps"])


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_skipping_drops_exactly_the_bad_batches(bad_batch_runs):
    runs = bad_batch_runs["runs"]
    skipped = runs["bad_batches_skipped"]["summary"]
    assert skipped["skipped_steps"] == skipped["bad_steps"]
    assert runs["bad_batches"]["summary"]["skipped_steps"] == []
    # Without the bad updates the run ends closer to the baseline than the run that took them.
    base = runs["baseline"]["summary"]["final_loss"]
    assert abs(skipped["final_loss"] - base) < abs(runs["bad_batches"]["summary"]["final_loss"]
                                                   - base)


@pytest.mark.slow  # trains a model for several seconds: make test, not make check
def test_qk_layernorm_bounds_attention_logits(launch, tmp_path_factory):
    report = run(launch, tmp_path_factory, "high_lr,high_lr_qknorm_zloss", ["--steps", "60"])
    high = report["runs"]["high_lr"]["summary"]
    fixed = report["runs"]["high_lr_qknorm_zloss"]["summary"]
    assert high["max_attn_logit"] > 10 * fixed["max_attn_logit"]


def test_rolling_z_definition():
    mod = load_module()
    values = [1.0, 2.0, 3.0, 2.0, 10.0, float("nan")]
    z = mod.rolling_z(values, window=4)
    mean = 2.0
    std = math.sqrt(((1 - 2) ** 2 + 0 + 1 + 0) / 3)
    assert z[:4] == [0.0] * 4
    assert z[4] == pytest.approx((10.0 - mean) / std)
    assert z[5] == math.inf
    assert mod.spike_steps([0, 7, 8, 0, 9], threshold=6) == [1, 4]


BAD_INPUT = [
    Case("config-unknown", ["--configs", "baseline,nope"], "unknown configuration nope"),
    Case("configs-empty", ["--configs", ","], "unknown configuration"),
    Case("steps-zero", ["--steps", "0"], "--steps: 0 must be >= 1"),
    Case("steps-huge", ["--steps", "1e12"], "--steps: '1e12' is not an integer"),
    Case("d-model-huge", ["--d-model", "100000"], "--d-model: 100000 must be <= 8192"),
    Case("vocab-too-small", ["--vocab", "3"], "--vocab: 3 must be >= 4"),
    Case("heads-not-dividing", ["--d-model", "64", "--heads", "5"], "not divisible by --heads"),
    Case("window-not-below-steps", ["--steps", "50", "--window", "50"],
         "--window 50 must be below --steps 50"),
    Case("z-threshold-nan", ["--z-threshold", "nan"], "--z-threshold: 'nan' is not a finite"),
    Case("z-threshold-zero", ["--z-threshold", "0"], "--z-threshold: 0 must be > 0"),
    Case("threads-zero", ["--threads", "0"], "--threads: 0 must be >= 1"),
    Case("device-unknown", ["--configs", "baseline", "--steps", "60", "--device", "tpu"],
         "device 'tpu' is not usable"),
    Case("configs-repeated", ["--configs", "baseline,high_lr,baseline"],
         "--configs: baseline given more than once"),
    Case("seed-negative", ["--seed", "-1"], "--seed: -1 must be >= 0"),
    # Bad batches injected where the window is not yet full would be reported as "no spike".
    Case("bad-batches-before-window", ["--configs", "bad_batches", "--steps", "60"],
         r"--window 50: configuration bad_batches injects its first bad batch at step 21 .*"
         r"use a --window below 21"),
    Case("bad-batches-past-last-step", ["--configs", "bad_batches", "--steps", "7", "--window", "1"],
         "--steps 7 is too short for configuration bad_batches"),
    Case("logits-too-big", ["--batch-size", "4096", "--seq-len", "8192"],
         r"2,147,483,648 --batch-size x --seq-len x --vocab logits exceed .* cap"),
    Case("attention-too-big", ["--seq-len", "4096"], r"attention scores per layer exceed"),
    Case("model-too-big", ["--d-model", "8192", "--layers", "256"], r"parameters exceed"),
    Case("records-too-big", ["--steps", "1000000", "--layers", "256"], r"per-step values .* exceed"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("instabilities/loss_spike_experiment.py", case, tmp_path)


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
@pytest.mark.slow
def test_interrupted_sweep_keeps_the_finished_runs(launch, tmp_path, sig, status):
    out = tmp_path / "run.json"
    res = interrupt_when(  # the first run's summary line: the sweep is in its second
        launch.scripts / SCRIPT,
        ["--configs", "baseline,high_lr,high_lr_qknorm_zloss", "--steps", "300", "--window",
         "20", "--d-model", "16", "--layers", "1", "--batch-size", "4", "--seq-len", "16",
         "--json", str(out)], lambda lines: True, sig, cwd=tmp_path)
    assert res.stdout.startswith("baseline "), res.output
    rest, err = res.stdout, res.stderr
    assert res.returncode == status, rest + err
    assert f"# interrupted by {sig.name}: 1 of 3 runs finished" in rest
    assert "Traceback" not in err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and list(report["runs"]) == ["baseline"]
    assert len(report["runs"]["baseline"]["loss"]) == 300


def test_committed_results_are_self_consistent():
    report = json.loads(RESULTS.read_text())
    mod = load_module()
    window, threshold = report["settings"]["window"], report["settings"]["z_threshold"]
    assert set(report["runs"]) == set(mod.CONFIGS)
    for name, run in report["runs"].items():
        s = run["summary"]
        assert s["config"] == {**mod.DEFAULTS, **mod.CONFIGS[name]}
        assert len(run["loss"]) == s["steps_run"] == report["settings"]["steps"]
        z = mod.rolling_z(run["loss"], window)
        assert z == pytest.approx(run["loss_z"])
        assert s["loss_spike_steps"] == mod.spike_steps(z, threshold)
        assert s["max_attn_logit"] == max(run["max_attn_logit"])
    runs = {name: run["summary"] for name, run in report["runs"].items()}
    # What the chapter says about these runs.
    assert runs["bad_batches"]["loss_spike_steps"]
    assert runs["baseline"]["loss_spike_steps"] == []
    assert runs["high_lr"]["final_loss"] > runs["high_lr_qknorm_zloss"]["final_loss"]
    assert runs["high_lr"]["max_attn_logit"] > 100 * runs["high_lr_qknorm_zloss"]["max_attn_logit"]
