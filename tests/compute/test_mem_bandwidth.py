"""Tests of scripts/compute/mem_bandwidth.py, run for real on CPU with small buffers (the CUDA
tests carry the gpu mark).

No speed is asserted; the tests check the counting convention (GBps = size/time, traffic = 2x
for in-memory copies), the sweep sizes, the JSON schema and the failure paths.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

SCRIPT = "mem_bandwidth.py"
ROW = re.compile(r"^(\w+)\s+(\d+[KMG]?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def size_of(label: str) -> int:
    return int(label.rstrip("KMG")) * SUFFIX[label[-1] if label[-1] in "KMG" else ""]


def check_results(report: dict, tests: list[str], sizes: list[int]) -> None:
    assert report["benchmark"] == "mem_bandwidth" and report["schema_version"] == 1
    assert report["tests"] == tests
    assert [(r["test"], r["size_bytes"]) for r in report["results"]] == [
        (t, s) for t in tests for s in sizes]
    for r in report["results"]:
        assert r["time_us"] > 0
        assert r["GBps"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3, rel=1e-4)
        factor = 2 if r["test"] in ("d2d", "host_copy") else 1
        assert r["traffic_GBps"] == pytest.approx(factor * r["GBps"], rel=1e-4)
    for test in tests:
        assert report["peak_GBps"][test] == max(r["GBps"] for r in report["results"]
                                                if r["test"] == test)


def test_cpu_host_copy_sweep(launch, tmp_path):
    out = tmp_path / "bw.json"
    res = launch.python(SCRIPT, ["--device", "cpu", "--min-bytes", "64K", "--max-bytes", "4M",
                                 "--warmup", "1", "--iters", "3", "--json", str(out)])
    assert res.returncode == 0, res.output
    sizes = [64 * 1024, 256 * 1024, 1024**2, 4 * 1024**2]
    report = json.loads(out.read_text())
    check_results(report, ["host_copy"], sizes)
    assert report["device_type"] == "cpu" and "median" in report["time"]
    printed = [ROW.match(line) for line in res.stdout.splitlines()]
    printed = [m for m in printed if m]
    assert [(m[1], size_of(m[2])) for m in printed] == [("host_copy", s) for s in sizes]
    for m, r in zip(printed, report["results"]):
        assert float(m[4]) == pytest.approx(r["GBps"], abs=0.006)
    assert "read + written" in res.stdout  # the counting convention is stated in the output


@pytest.mark.parametrize("args, message", [
    (["--sizes", "0"], "invalid size '0'"),
    (["--sizes=-1M"], "invalid size '-1M'"),
    (["--min-bytes", "4M", "--max-bytes", "1M", "--device", "cpu"], "must be >= --min-bytes"),
    (["--factor", "1"], "--factor must be > 1"),
    (["--device", "cpu", "--tests", "h2d_pinned"], "need a CUDA device"),
])
def test_bad_arguments_fail_with_one_line(launch, args, message):
    res = launch.python(SCRIPT, args, timeout=60)
    assert res.returncode == 2, res.output
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and message in errors[0], res.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_copies_pinned_and_pageable(launch, tmp_path):
    out = tmp_path / "bw-cuda.json"
    res = launch.python(SCRIPT, ["--device", "cuda", "--sizes", "16M", "256M", "--warmup", "2",
                                 "--iters", "5", "--json", str(out)], timeout=300)
    assert res.returncode == 0, res.output
    report = json.loads(out.read_text())
    tests = ["d2d", "h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"]
    check_results(report, tests, [16 * 1024**2, 256 * 1024**2])
    # Pinned memory is what DMA engines read directly; it must not lose to pageable at 256M.
    peak = report["peak_GBps"]
    assert peak["h2d_pinned"] >= 0.8 * peak["h2d_pageable"]
