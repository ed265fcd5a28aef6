"""Tests of scripts/compute/mem_bandwidth.py, run for real on CPU with small buffers (the CUDA
tests carry the gpu mark).

No speed is asserted; the tests check the counting convention (GBps = size/time, traffic = 2x
for in-memory copies), the sweep sizes, the JSON schema and the failure paths.
"""

from __future__ import annotations

import json
import re
import signal

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, interrupt_when
from tools.results import problems

SCRIPT = "mem_bandwidth.py"
ROW = re.compile(r"^(\w+)\s+(\d+[KMG]?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def size_of(label: str) -> int:
    return int(label.rstrip("KMG")) * SUFFIX[label[-1] if label[-1] in "KMG" else ""]


def check_results(report: dict, tests: list[str], sizes: list[int]) -> None:
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
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
    for m, r in zip(printed, report["results"], strict=True):
        assert float(m[4]) == pytest.approx(r["GBps"], abs=0.006)
    assert "read + written" in res.stdout  # the counting convention is stated in the output


BAD_INPUT = [
    Case("size-zero", ["--sizes", "0"], "invalid size '0'"),
    Case("size-negative", ["--sizes=-1M"], "invalid size '-1M'"),
    Case("size-below-one-element", ["--sizes", "3"], "invalid size '3': must be a positive multiple of 4"),
    Case("size-not-aligned", ["--sizes", "1026"], "multiple of 4 bytes"),
    Case("size-not-number", ["--sizes", "lots"], "invalid size 'lots'"),
    Case("max-below-min", ["--min-bytes", "4M", "--max-bytes", "1M", "--device", "cpu"],
         "must be >= --min-bytes"),
    Case("factor-one", ["--factor", "1"], "--factor: 1 must be > 1"),
    Case("factor-nan", ["--factor", "nan"], "--factor: 'nan' is not a finite number"),
    Case("factor-inf", ["--factor", "inf"], "--factor: 'inf' is not a finite number"),
    Case("factor-tiny", ["--factor", "1.0000001"], "more than 1000 sizes"),
    Case("iters-zero", ["--iters", "0"], "--iters: 0 must be >= 1"),
    Case("warmup-float", ["--warmup", "2.5"], "--warmup: '2.5' is not an integer"),
    Case("test-needs-cuda", ["--device", "cpu", "--tests", "h2d_pinned"], "need a CUDA device"),
    Case("iters-nan", ["--iters", "nan"], "--iters: 'nan' is not an integer"),
    Case("warmup-negative", ["--warmup", "-3"], "--warmup: -3 must be >= 0"),
    Case("sizes-too-many", ["--sizes", *(f"{4 * i}" for i in range(1, 1002))],
         "--sizes: 1001 sizes; at most 1000"),
    # 2 x 64 TiB: more than any host has; refused before the first allocation
    Case("size-beyond-memory", ["--device", "cpu", "--sizes", "65536G"],
         r"--sizes: size 65536G needs 2 buffer\(s\) .* GiB of host memory"),
    Case("max-bytes-beyond-memory", ["--device", "cpu", "--min-bytes", "1G", "--max-bytes", "65536G",
                                     "--factor", "65536"], r"--max-bytes: size 65536G needs 2"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("compute/mem_bandwidth.py", case, tmp_path)


def test_interrupted_sweep_writes_what_it_measured(tmp_path):
    """SIGTERM in the middle of a sweep: the finished sizes are written, marked interrupted."""
    out = tmp_path / "bw.json"
    res = interrupt_when(  # after the first rows
        REPO / "scripts/compute/mem_bandwidth.py",
        ["--device", "cpu", "--min-bytes", "4K", "--max-bytes", "64M", "--factor", "1.01",
         "--warmup", "0", "--iters", "3", "--json", str(out)],
        lambda lines: sum(line.startswith("host_copy") for line in lines) >= 3, signal.SIGTERM)
    err = res.stderr
    assert res.returncode == 143 and "Traceback" not in err, err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and 1 <= len(report["results"]) < 1000
    assert report["peak_GBps"]["host_copy"] == max(r["GBps"] for r in report["results"])


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
