"""Tests of scripts/storage/dataloader_bench.py, run for real with tiny sizes on CPU (and on a GPU
in the gpu-marked test). Throughput varies from run to run, so the tests check the settings that
were measured, the relations between the reported numbers, the recommendation rule and the
refusals, never a speed."""

from __future__ import annotations

import json
import re
import signal

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script, interrupt_when
from tools.results import problems

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
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert report["benchmark"] == "dataloader_bench" and report["schema_version"] == 1
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


@pytest.mark.slow
def test_cpu_sweep_over_workers(launch, tmp_path):
    res, report = run(launch, tmp_path, ["--workers", "0,2", "--sample-ms", "3", "--cost",
                                         "sleep", "--device", "cpu"])
    check(res, report, [0, 2], [(False, False)])
    assert report["device"] == "cpu" and report["cost"] == "sleep"
    # ideal throughput of k sleeping workers is k / cost (0 workers = the main process alone)
    ideal = {r["num_workers"]: r["ideal_samples_per_s"] for r in report["results"]}
    assert ideal == {0: pytest.approx(1 / 0.003), 2: pytest.approx(2 / 0.003)}
    assert "pin_memory and non_blocking are not measured" in res.stdout


BAD_INPUT = [
    Case("batch-size-zero", ["--batch-size", "0"], "--batch-size: 0 must be >= 1"),
    Case("batch-size-float", ["--batch-size", "2.5"], "--batch-size: '2.5' is not an integer"),
    Case("sample-ms-negative", ["--sample-ms", "-1"], "--sample-ms: -1 must be >= 0"),
    Case("sample-ms-nan", ["--sample-ms", "nan"], "--sample-ms: 'nan' is not a finite number"),
    Case("step-ms-inf", ["--step-ms", "inf"], "--step-ms: 'inf' is not a finite number"),
    Case("timeout-nan", ["--timeout", "nan"], "--timeout: 'nan' is not a finite number"),
    Case("timeout-zero", ["--timeout", "0"], "--timeout: 0 must be > 0"),
    Case("timeout-huge", ["--timeout", "1e300"], "--timeout: 1e300 must be <= 604800"),
    Case("batch-too-large", ["--sample-shape", "1000,1000,3", "--batch-size", "2000"],
         r"6000000000 bytes per batch; at most 4294967296"),
    Case("sweep-too-long", ["--sample-shape", "4", "--batch-size", "100000", "--batches", "1000"],
         r"100300000 samples per setting; at most 10000000"),
    Case("sample-shape-text", ["--sample-shape", "3,x"], "--sample-shape must be"),
    Case("sample-shape-huge", ["--sample-shape", "100000,100000,3"], "at most 1073741824"),
    Case("workers-negative", ["--workers", "-1"], "integers from 0 to 1024"),
    Case("workers-huge", ["--workers", "100000"], "integers from 0 to 1024"),
    # --workers 0 loads in the main process, where no DataLoader timeout applies: the script's
    # own deadline must end a batch that takes 30 s after --timeout 2 s.
    Case("workers-0-timeout", ["--workers", "0", "--batch-size", "1", "--sample-ms", "30000",
                               "--cost", "sleep", "--timeout", "2"],
         r"batch 0 with --workers 0 \(--timeout\) did not finish within 2 s", status=1,
         limit_s=20),
    # (a sample of 1.5 s: past the 1 s timeout, and the worker then ends without the DataLoader
    # waiting 5 s to join it)
    Case("workers-1-timeout", ["--workers", "1", "--batch-size", "1", "--sample-ms", "1500",
                               "--cost", "sleep", "--timeout", "1", "--device", "cpu"],
         r"DataLoader timed out after 1(\.0)? seconds waiting for a batch from the workers "
         r"\(--timeout 1\)", status=1, limit_s=20),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("storage/dataloader_bench.py", case, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_keeps_the_settings_measured(tmp_path, sig):
    """Ctrl-C or SIGTERM after the first setting: the JSON still holds it, marked interrupted,
    and the run ends with 128 + the signal and one error line."""
    out = tmp_path / "dl.json"
    res = interrupt_when(  # after the first setting's row: the second is running
        REPO / "scripts" / "storage" / SCRIPT,
        ["--workers", "0,0", "--sample-shape", "4", "--batch-size", "1", "--batches", "4",
         "--warmup", "0", "--sample-ms", "300", "--cost", "sleep", "--device", "cpu",
         "--json", str(out)],
        lambda lines: ROW.match(lines[-1]), sig)
    err = res.stderr
    assert res.returncode == 128 + sig, err
    errors = [ln for ln in err.splitlines() if ": error: " in ln]
    assert errors == [f"{SCRIPT}: error: interrupted by {signal.Signals(sig).name} after 1 of 2 "
                      f"settings; wrote them to {out}"], err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and len(report["results"]) == 1
    assert report["recommended"]["num_workers"] == 0


@pytest.mark.gpu
def test_cuda_measures_pinning_and_non_blocking(launch, tmp_path):
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    res, report = run(launch, tmp_path, ["--workers", "0,1", "--sample-ms", "1", "--device",
                                         "cuda", "--step-ms", "2"])
    check(res, report, [0, 1], [(False, False), (True, False), (True, True)])


def test_a_failing_setting_keeps_the_ones_measured(tmp_path, monkeypatch, capsys):
    """The second setting fails the way a DataLoader timeout does (RuntimeError): the first
    setting's row is still written, with the error under "failed", and the run fails (status 1)
    in one message that says where the rows went."""
    bench = import_script(REPO / "scripts" / "storage" / SCRIPT)
    real, calls = bench.measure, []

    def measure(*args, **kwargs):
        calls.append(args[3])
        if len(calls) == 2:
            raise RuntimeError("DataLoader timed out after 1 seconds")
        return real(*args, **kwargs)
    monkeypatch.setattr(bench, "measure", measure)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out = tmp_path / "dl.json"
    try:
        with pytest.raises(bench.ScriptError) as err:
            bench.main(["--workers", "0,0", "--sample-shape", "4", "--batch-size", "1", "--batches",
                        "2", "--warmup", "0", "--device", "cpu", "--timeout", "1", "--json",
                        str(out)])
    finally:  # main() installs its own handlers: give pytest back its own
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert err.value.status == bench.EXIT_FAILURE
    assert str(err.value) == ("DataLoader timed out after 1 seconds waiting for a batch from the "
                              f"workers (--timeout 1); wrote the 1 settings measured before it "
                              f"to {out}")
    report = json.loads(out.read_text())
    assert len(report["results"]) == 1 and report["failed"].startswith("DataLoader timed out")
    assert "# stopped: DataLoader timed out" in capsys.readouterr().out
