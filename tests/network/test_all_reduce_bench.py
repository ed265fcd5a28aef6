"""Tests of scripts/network/all_reduce_bench.py, run for real as multi-process jobs (gloo on CPU;
nccl on all GPUs in the gpu-marked test).

Timing numbers vary from run to run, so no test asserts on a time or a bandwidth value; they
check the relations between the numbers (algbw = size/time, busbw = algbw * 2(n-1)/n, peak =
max), the requested sizes, the JSON schema and the failure paths.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
import torch

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, import_script, interrupt_when
from tools.results import problems

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "all_reduce_bench.py"
# Keys and types the notebook helper relies on (the script may add keys, never rename these).
TOP_KEYS = {"benchmark": str, "schema_version": int, "backend": str, "device": str,
            "world_size": int, "nnodes": int, "dtype": str, "warmup": int, "iters": int,
            "torch_version": str, "versions": dict, "hostname": str, "date_utc": str, "command": str,
            "results": list, "peak_busbw_GBps": (int, float)}
RESULT_KEYS = {"size_bytes": int, "count": int, "time_us": (int, float),
               "algbw_GBps": (int, float), "busbw_GBps": (int, float)}
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(OK)\s*$")


def busbw_factor(n: int) -> float:
    # NCCL tests, doc/PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n.
    return 2 * (n - 1) / n


def parse_table(stdout: str) -> list[dict]:
    """Rows of the printed table as dicts (size, count, dtype, time_us, algbw, busbw)."""
    rows = []
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows.append({"size": int(m[1]), "count": int(m[2]), "dtype": m[3],
                         "time_us": float(m[4]), "algbw": float(m[5]), "busbw": float(m[6])})
    return rows


def check_report(report: dict, world_size: int, sizes: list[int], elem_size: int) -> None:
    """Assert ``report`` (the --json file) follows the schema and is self-consistent."""
    for key, typ in TOP_KEYS.items():
        assert key in report, f"missing key {key}"
        assert isinstance(report[key], typ), f"{key} has type {type(report[key]).__name__}"
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert report["benchmark"] == "all_reduce_bench"
    assert report["schema_version"] == 1
    assert report["world_size"] == world_size
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date_utc"])
    assert [r["size_bytes"] for r in report["results"]] == sizes
    for r in report["results"]:
        for key, typ in RESULT_KEYS.items():
            assert isinstance(r[key], typ), f"results[].{key} has type {type(r[key]).__name__}"
        assert r["count"] * elem_size == r["size_bytes"]
        assert r["time_us"] > 0
        # algbw is bytes per second in decimal GBps: size / (time_us * 1e-6) / 1e9.
        assert r["algbw_GBps"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3, rel=1e-4)
        assert r["busbw_GBps"] == pytest.approx(
            r["algbw_GBps"] * busbw_factor(world_size), rel=1e-4, abs=1e-12)
    assert report["peak_busbw_GBps"] == max(r["busbw_GBps"] for r in report["results"])


@pytest.fixture(scope="module")
def bench(launch):
    """The script imported as a module (it imports torch only inside run(), so this is cheap)."""
    return import_script(launch.scripts / SCRIPT)


# ---------------------------------------------------------------------------------------------
# A real 2-process gloo run, shared by the tests that check its outputs.

SWEEP_ARGS = ["--min-bytes", "1K", "--max-bytes", "64K", "--factor", "4"]
SWEEP_SIZES = [1024, 4096, 16384, 65536]


@pytest.fixture(scope="module")
def gloo_run(launch, tmp_path_factory):
    out = tmp_path_factory.mktemp("all_reduce_bench")
    json_path, png_path = out / "result.json", out / "busbw.png"
    result = launch.torchrun(SCRIPT, [*SWEEP_ARGS, "--iters", "3", "--warmup", "1",
                                      "--backend", "gloo", "--timeout-s", "30",
                                      "--json", str(json_path), "--plot", str(png_path)])
    return result, json_path, png_path


def test_help_lists_options_without_gpu(launch):
    res = launch.python(SCRIPT, ["--help"], env={"CUDA_VISIBLE_DEVICES": ""}, timeout=30)
    assert res.returncode == 0, res.stderr
    for option in ("--min-bytes", "--max-bytes", "--factor", "--sizes", "--dtype", "--warmup",
                   "--iters", "--backend", "--timeout-s", "--json", "--plot"):
        assert option in res.stdout
    assert "K=1024" in res.stdout  # binary suffixes are documented
    assert "ALL_REDUCE_BENCH_CORRUPT_RANK" in res.stdout  # the self-test hook is documented


def test_help_does_not_import_torch(launch):
    # --help must work anywhere, without touching torch or a device.
    code = ("import runpy, sys\n"
            f"sys.argv = [{str(launch.scripts / SCRIPT)!r}, '--help']\n"
            "try:\n"
            f"    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert "TORCH_NOT_IMPORTED" in res.stdout, res.stdout + res.stderr


def test_two_process_run_succeeds(gloo_run):
    result, _, _ = gloo_run
    assert result.returncode == 0, result.output
    assert "1e9 bytes/s" in result.stdout  # units stated in the header


def test_table_has_requested_sizes_and_busbw_relation(gloo_run):
    result, _, _ = gloo_run
    rows = parse_table(result.stdout)
    assert [r["size"] for r in rows] == SWEEP_SIZES
    for r in rows:
        assert r["count"] * 4 == r["size"]  # float32
        assert r["dtype"] == "float32"
        # Printed with 4 decimals: allow the rounding of both numbers.
        assert r["busbw"] == pytest.approx(r["algbw"] * busbw_factor(2), abs=1e-4)
    peak = re.search(r"peak busbw: ([\d.]+) GBps", result.stdout)
    assert peak, result.stdout
    assert float(peak[1]) == pytest.approx(max(r["busbw"] for r in rows), abs=1e-4)


def test_json_follows_schema(gloo_run):
    result, json_path, _ = gloo_run
    assert result.returncode == 0, result.output
    report = json.loads(json_path.read_text())
    check_report(report, world_size=2, sizes=SWEEP_SIZES, elem_size=4)
    assert report["backend"] == "gloo"
    assert report["device"] == "cpu"
    assert report["nnodes"] == 1
    assert report["dtype"] == "float32"
    assert (report["warmup"], report["iters"]) == (1, 3)
    assert report["torch_version"] == torch.__version__
    assert report["hostname"] == socket.gethostname()
    assert SCRIPT in report["command"] and "--max-bytes 64K" in report["command"]


def test_json_matches_printed_table(gloo_run):
    result, json_path, _ = gloo_run
    report = json.loads(json_path.read_text())
    rows = parse_table(result.stdout)
    assert len(rows) == len(report["results"])
    for row, res in zip(rows, report["results"], strict=True):
        assert row["size"] == res["size_bytes"]
        assert row["busbw"] == pytest.approx(res["busbw_GBps"], abs=1e-4)


def test_plot_writes_png(gloo_run):
    result, _, png_path = gloo_run
    assert result.returncode == 0, result.output
    data = png_path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 1000  # an actual image, not just a header


def test_explicit_sizes_with_bfloat16(launch, tmp_path):
    json_path = tmp_path / "bf16.json"
    res = launch.torchrun(SCRIPT, ["--sizes", "2K,6K", "10K", "--dtype", "bf16", "--iters", "2",
                                   "--warmup", "1", "--backend", "gloo", "--timeout-s", "30",
                                   "--json", str(json_path)])
    assert res.returncode == 0, res.output
    sizes = [2048, 6144, 10240]
    assert [r["size"] for r in parse_table(res.stdout)] == sizes
    report = json.loads(json_path.read_text())
    assert report["dtype"] == "bfloat16"
    check_report(report, world_size=2, sizes=sizes, elem_size=2)


def test_srun_style_launch_prints_only_on_rank0(launch, tmp_path):
    # Plain `srun python ...`: ranks from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID.
    json_path = tmp_path / "srun.json"
    results = launch.srun_like(SCRIPT, ["--sizes", "4K", "--iters", "2", "--warmup", "1",
                                        "--backend", "gloo", "--timeout-s", "30",
                                        "--json", str(json_path)])
    for rank, res in enumerate(results):
        assert res.returncode == 0, f"rank {rank}: {res.output}"
    assert [r["size"] for r in parse_table(results[0].stdout)] == [4096]
    assert results[1].stdout == ""  # only rank 0 prints
    report = json.loads(json_path.read_text())
    check_report(report, world_size=2, sizes=[4096], elem_size=4)
    assert report["launcher"] == "srun"


def test_single_process_run_reports_zero_busbw(launch):
    res = launch.python(SCRIPT, ["--sizes", "1K", "4K", "--iters", "2", "--warmup", "1",
                                 "--backend", "gloo"], timeout=60)
    assert res.returncode == 0, res.output
    assert "world size 1" in res.stdout
    rows = parse_table(res.stdout)
    assert [r["size"] for r in rows] == [1024, 4096]
    assert all(r["busbw"] == 0 for r in rows)


# ---------------------------------------------------------------------------------------------
# Bad input: a one-line error naming the problem, non-zero exit, no hang.

BAD_INPUT = [
    Case("json-is-plot", ["--sizes", "1K", "--json", "r", "--plot", "./r"],
         "--plot ./r: --json writes there too; give each output its own path"),
    Case("min-bytes-zero", ["--min-bytes", "0"], "--min-bytes"),
    Case("max-below-min", ["--min-bytes", "1M", "--max-bytes", "1K"], "--max-bytes"),
    Case("dtype-unknown", ["--dtype", "float7"], "float7"),
    Case("iters-zero", ["--iters", "0"], "--iters: 0 must be >= 1"),
    Case("warmup-negative", ["--warmup", "-1"], "--warmup: -1 must be >= 0"),
    Case("factor-one", ["--factor", "1"], "--factor must be a finite number > 1"),
    Case("factor-inf", ["--factor", "inf"], "--factor: 'inf' is not a finite number"),
    Case("factor-tiny", ["--factor", "1.000001"], "more than 1000 sizes"),
    Case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: 0 must be > 0"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not a finite number"),
    Case("timeout-negative", ["--timeout-s", "-5"], "--timeout-s: -5 must be > 0"),
    Case("size-suffix", ["--max-bytes", "12X"], "--max-bytes"),
    Case("size-below-element", ["--sizes", "1K", "6"], "not a positive multiple"),
    Case("sizes-and-range", ["--sizes", "1K", "--min-bytes", "1K"], "--sizes cannot be combined"),
    Case("backend-unknown", ["--backend", "mpi"], "--backend"),
    Case("plot-unwritable", ["--sizes", "1K", "--plot", "/proc/p.png"], "--plot /proc/p.png: cannot write"),
    Case("plot-is-folder", ["--sizes", "1K", "--plot", "{tmp}"], "--plot .*: is a folder"),
    Case("iters-huge", ["--iters", "2000000"], "--iters: 2000000 must be <= 1e\\+06"),
    Case("warmup-nan", ["--warmup", "nan"], "--warmup: 'nan' is not an integer"),
    # refused before joining the group, not by the allocator halfway through the sweep
    Case("size-beyond-memory", ["--sizes", "64T", "--backend", "gloo"],
         r"--sizes: a buffer of 64T does not fit in this machine's .* GiB of host memory"),
    *launcher_cases(["--sizes", "1K"], ["--timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("network/all_reduce_bench.py", case, tmp_path)


def test_sigterm_writes_the_sizes_measured(launch, tmp_path):
    """scancel or a job's time limit (SIGTERM) in the middle of a sweep: rank 0 still prints and
    writes the sizes finished before it, marked interrupted, and exits 143."""
    out = tmp_path / "partial.json"
    res = interrupt_when(  # after three sizes
        launch.scripts / SCRIPT,
        ["--min-bytes", "1M", "--max-bytes", "1G", "--factor", "1.01", "--iters", "50",
         "--backend", "gloo", "--json", str(out)],
        lambda lines: sum(bool(ROW.match(line)) for line in lines) >= 3, signal.SIGTERM)
    rest, err = res.stdout, res.stderr
    assert res.returncode == 143, err
    assert "Traceback" not in err and "# interrupted:" in rest
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and 3 <= len(report["results"]) < 1000
    check_report(report, world_size=1, sizes=[r["size_bytes"] for r in report["results"]],
                 elem_size=4)
    assert [p.name for p in tmp_path.iterdir()] == ["partial.json"]  # no temporary file left


def test_srun_without_master_addr_fails_clearly(launch):
    res = launch.python(SCRIPT, ["--sizes", "1K"],
                        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"},
                        timeout=30)
    assert res.returncode != 0
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and "MASTER_ADDR" in errors[0], res.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_nccl_without_cuda_fails_clearly(launch):
    res = launch.python(SCRIPT, ["--sizes", "1K", "--backend", "nccl"], timeout=60)
    assert res.returncode != 0
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and "nccl" in errors[0], res.stderr


# ---------------------------------------------------------------------------------------------
# Failure paths of a running job.

def test_corrupted_result_fails_naming_rank(launch):
    res = launch.torchrun(SCRIPT, ["--sizes", "1K", "4K", "--iters", "2", "--warmup", "1",
                                   "--backend", "gloo", "--timeout-s", "30"],
                          env={"ALL_REDUCE_BENCH_CORRUPT_RANK": "1"})
    assert res.returncode != 0
    assert "peak busbw" not in res.stdout
    # Rank 1 names itself, the size and expected vs observed: each rank adds rank+1, 1+2 = 3,
    # and the hook adds 1.
    assert re.search(r"rank 1 on \S+: wrong all-reduce result for size 1024 bytes .*"
                     r"expected 3 got 4", res.stderr), res.stderr
    assert "rank(s) [1]" in res.stderr  # rank 0's summary names the failing rank


def test_dead_rank_fails_instead_of_hanging(launch):
    # launch.torchrun fails the test if the job is still running after `timeout` seconds.
    res = launch.torchrun(SCRIPT, ["--sizes", "1K", "--iters", "2", "--backend", "gloo",
                                   "--timeout-s", "5"],
                          env={"ALL_REDUCE_BENCH_EXIT_RANK": "1"}, timeout=60)
    assert res.returncode != 0
    assert "peak busbw" not in res.stdout


def test_stalled_rank_times_out(launch):
    # Rank 1 sleeps forever after joining: rank 0's first collective must give up after
    # --timeout-s and name itself and what it was doing.
    res = launch.torchrun(SCRIPT, ["--sizes", "1K", "--iters", "2", "--backend", "gloo",
                                   "--timeout-s", "3"],
                          env={"ALL_REDUCE_BENCH_STALL_RANK": "1"}, timeout=60)
    assert res.returncode != 0
    assert re.search(r"all_reduce_bench\.py: error: rank 0 on \S+: .* failed", res.stderr), \
        res.stderr


# ---------------------------------------------------------------------------------------------
# Pure helpers (the script is importable without torch).

def test_parse_size_binary_suffixes(bench):
    mod = bench
    assert mod.parse_size("1024") == 1024
    assert mod.parse_size("32K") == 32 * 1024
    assert mod.parse_size("1m") == 1024**2
    assert mod.parse_size("4GiB") == 4 * 1024**3
    with pytest.raises(argparse.ArgumentTypeError):
        mod.parse_size("1.5M")


def test_message_sizes_geometric_and_aligned(bench):
    mod = bench
    assert mod.message_sizes(1024, 65536, 4, 4) == [1024, 4096, 16384, 65536]
    sizes = mod.message_sizes(10, 1000, 1.5, 8)
    assert all(s % 8 == 0 for s in sizes) and sizes == sorted(set(sizes))
    assert sizes[-1] <= 1000


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint8"])
@pytest.mark.parametrize("world", [1, 2, 7, 8, 64, 300, 5000])
def test_check_values_sum_is_exact_in_dtype(bench, dtype, world):
    mod = bench
    limit = mod.DTYPES[dtype][1]
    m, cap, expected = mod.check_values(world, limit)
    contributions = [r % m + 1 if r < cap else 0 for r in range(world)]
    assert sum(contributions) == expected <= limit
    if world * (world + 1) // 2 <= limit:
        assert expected == world * (world + 1) // 2  # the textbook rank+1 values fit
    # The value is exactly representable in the dtype itself.
    assert float(torch.tensor(expected, dtype=getattr(torch, dtype)).item()) == expected


# ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nccl_run_on_all_gpus(launch, tmp_path):
    n = torch.cuda.device_count()
    json_path = tmp_path / "nccl.json"
    res = launch.torchrun(SCRIPT, ["--sizes", "1M", "16M", "--dtype", "bfloat16", "--iters", "5",
                                   "--backend", "nccl", "--timeout-s", "60",
                                   "--json", str(json_path)], nproc=n, timeout=300)
    assert res.returncode == 0, res.output
    report = json.loads(json_path.read_text())
    check_report(report, world_size=n, sizes=[1024**2, 16 * 1024**2], elem_size=2)
    assert report["backend"] == "nccl"
    assert report["device"] != "cpu"
    if n > 1:
        assert all(r["busbw_GBps"] > 0 for r in report["results"])
    assert not math.isnan(report["peak_busbw_GBps"])
