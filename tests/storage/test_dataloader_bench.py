"""Tests of scripts/storage/dataloader_bench.py, run for real with tiny sizes on CPU (and on a GPU
in the gpu-marked test). Throughput varies from run to run, so the tests check the settings that
were measured, the relations between the reported numbers, the recommendation rule and the
refusals, never a speed."""

from __future__ import annotations

import json
import re

import pytest

SCRIPT = "dataloader_bench.py"
ROW = re.compile(r"^\s*(\d+)\s+(True|False)\s+(True|False)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s*$")


def run(launch, tmp_path, extra):
    out = tmp_path / "dl.json"
    res = launch.python(SCRIPT, ["--sample-shape", "3,32,32", "--batch-size", "4", "--batches",
                                 "4", "--warmup", "1", "--json", str(out), *extra], timeout=120)
    assert res.returncode == 0, res.output
    return res, json.loads(out.read_text())


def check(res, report, workers, flags):
    assert report["benchmark"] == "dataloader" and report["schema_version"] == 1
    assert report["sample_bytes"] == 3 * 32 * 32
    got = [(r["num_workers"], r["pin_memory"], r["non_blocking"]) for r in report["results"]]
    assert got == [(w, p, n) for w in workers for p, n in flags]
    for r in report["results"]:
        assert r["samples_per_s"] > 0 and r["first_batch_s"] > 0 and r["wait_ms_per_batch"] >= 0
        # MBps is samples/s x sample bytes in decimal MB
        assert r["MBps"] == pytest.approx(r["samples_per_s"] * report["sample_bytes"] / 1e6,
                                          rel=1e-3)
    # the recommendation is the fewest workers within 5% of the best throughput
    best = max(r["samples_per_s"] for r in report["results"])
    fastest_enough = min(r["num_workers"] for r in report["results"]
                         if r["samples_per_s"] >= 0.95 * best)
    assert report["recommended"]["num_workers"] == fastest_enough
    rows = [m for m in map(ROW.match, res.stdout.splitlines()) if m]
    assert [(int(m[1]), m[2] == "True", m[3] == "True") for m in rows] == got
    assert f"recommended: num_workers={fastest_enough}" in res.stdout


def test_cpu_sweep_over_workers(launch, tmp_path):
    res, report = run(launch, tmp_path, ["--workers", "0,2", "--sample-ms", "3", "--cost",
                                         "sleep", "--device", "cpu"])
    check(res, report, [0, 2], [(False, False)])
    assert report["device"] == "cpu" and report["cost"] == "sleep"
    # ideal throughput of k sleeping workers is k / cost (0 workers = the main process alone)
    ideal = {r["num_workers"]: r["ideal_samples_per_s"] for r in report["results"]}
    assert ideal == {0: pytest.approx(1 / 0.003), 2: pytest.approx(2 / 0.003)}
    assert "pin_memory and non_blocking are not measured" in res.stdout


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size must be >= 1"),
    (["--sample-ms", "-1"], "--sample-ms must be >= 0"),
    (["--sample-shape", "3,x"], "--sample-shape must be"),
    (["--workers", "-1"], "integers >= 0"),
])
def test_bad_input_gives_one_line_error(launch, args, message):
    res = launch.python(SCRIPT, args, timeout=30)
    assert res.returncode == 2, res.output
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and message in errors[0], res.stderr


@pytest.mark.gpu
def test_cuda_measures_pinning_and_non_blocking(launch, tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    res, report = run(launch, tmp_path, ["--workers", "0,1", "--sample-ms", "1", "--device",
                                         "cuda", "--step-ms", "2"])
    check(res, report, [0, 1], [(False, False), (True, False), (True, True)])
