"""Tests of scripts/compute/mamf_finder.py, run for real as processes on CPU with tiny shapes
(the CUDA path in the gpu-marked tests).

No test asserts a speed: they check that the printed rows and the JSON agree, that TFLOPS are
2*M*N*K/time, that the summary picks the best row, the sweep covers exactly the requested
shapes, bad arguments fail with one line, and Ctrl-C still yields the results so far.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script
from tools.results import problems

SCRIPT = "mamf_finder.py"
ROW = re.compile(r"^\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\w+)\s+([\d.]+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s*$")
BEST = re.compile(r"^# best (\w+): ([\d.]+) TFLOPS \(max\) at (\d+)x(\d+)x(\d+)")


def rows(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            out.append({"i": int(m[1]), "total": int(m[2]), "m": int(m[3]), "n": int(m[4]),
                        "k": int(m[5]), "dtype": m[6], "mean_ms": float(m[7]),
                        "mean_tflops": float(m[8]), "median_tflops": float(m[9]),
                        "max_tflops": float(m[10])})
    return out


def check_report(report: dict, shapes: list[tuple[int, int, int]], dtypes: list[str]) -> None:
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert report["benchmark"] == "mamf_finder" and report["schema_version"] == 1
    assert report["device_type"] == "cpu" and report["dtypes"] == dtypes
    assert report["versions"]["torch"] == torch.__version__
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date_utc"])
    got = [(r["m"], r["n"], r["k"], r["dtype"]) for r in report["results"]]
    assert got == [(m, n, k, d) for d in dtypes for (m, n, k) in shapes]
    for r in report["results"]:
        flops = 2 * r["m"] * r["n"] * r["k"]
        assert r["min_ms"] <= r["median_ms"] and r["min_ms"] <= r["mean_ms"]
        assert r["mean_tflops"] == pytest.approx(flops / (r["mean_ms"] / 1e3) / 1e12, rel=1e-4)
        assert r["max_tflops"] == pytest.approx(flops / (r["min_ms"] / 1e3) / 1e12, rel=1e-4)
        assert r["max_tflops"] >= r["median_tflops"] > 0
        # A 2-core CPU does well under 10 TFLOPS; anything above means the FLOP count or the
        # time unit is wrong.
        assert r["max_tflops"] < 10
    for dtype, best in report["best"].items():
        assert best == max((r for r in report["results"] if r["dtype"] == dtype),
                           key=lambda r: r["max_tflops"])


def test_help_works_without_touching_torch(launch):
    # -X importtime lists every import; torch must not be among them for --help.
    proc = subprocess.run([sys.executable, "-X", "importtime", str(launch.scripts / SCRIPT),
                           "--help"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0
    assert "--dtype" in proc.stdout and "START:STOP:STEP" in proc.stdout
    assert not re.search(r"\|\s+torch$", proc.stderr, re.M), "torch imported for --help"


def test_cpu_sweep_rows_json_and_summary_agree(launch, tmp_path):
    out = tmp_path / "mamf.json"
    res = launch.python(SCRIPT, ["--device", "cpu", "--dtype", "fp32", "bf16", "--m", "32:96:32",
                                 "--n", "64", "--k", "48", "64", "--warmup", "1", "--iters", "3",
                                 "--json", str(out)])
    assert res.returncode == 0, res.output
    assert "# device cpu" in res.stdout and "torch " + torch.__version__ in res.stdout
    shapes = [(m, 64, k) for m in (32, 64, 96) for k in (48, 64)]
    report = json.loads(out.read_text())
    check_report(report, shapes, ["fp32", "bf16"])
    printed = rows(res.stdout)
    assert [r["i"] for r in printed] == list(range(1, 13)) and printed[0]["total"] == 12
    for line, r in zip(printed, report["results"], strict=True):
        assert (line["m"], line["n"], line["k"], line["dtype"]) == (r["m"], r["n"], r["k"], r["dtype"])
        assert line["max_tflops"] == pytest.approx(r["max_tflops"], abs=6e-4)
    best = {m[1]: (float(m[2]), int(m[3]), int(m[4]), int(m[5]))
            for m in map(BEST.match, res.stdout.splitlines()) if m}
    for dtype, b in report["best"].items():
        assert best[dtype][1:] == (b["m"], b["n"], b["k"])
    assert report["interrupted"] is False


BAD_INPUT = [
    Case("m-negative", ["--m", "-4"], "argument --m: invalid size '-4'"),
    Case("k-zero", ["--k", "0"], "argument --k: invalid size '0'"),
    Case("n-not-number", ["--n", "abc"], "argument --n: invalid size 'abc'"),
    Case("n-float", ["--n", "1.5"], "argument --n: invalid size '1.5'"),
    Case("range-reversed", ["--n", "10:5:1"], "invalid range '10:5:1'"),
    Case("range-huge", ["--m", "1:2000000000:1"], "has 2000000000 values; at most 10000"),
    Case("sweep-huge", ["--m", "1:2000:1", "--n", "1:2000:1", "--k", "1:2000:1"],
         "make 8000000000 shapes; at most 10000"),
    Case("dtype-unknown", ["--dtype", "fp12"], "unknown dtype 'fp12'"),
    Case("fp8-on-cpu", ["--device", "cpu", "--dtype", "fp8"], "dtype fp8 needs a CUDA GPU"),
    Case("tf32-on-cpu", ["--device", "cpu", "--dtype", "tf32"], "dtype tf32 is a CUDA tensor-core"),
    Case("device-unknown", ["--device", "tpu9"], "--device: unknown device 'tpu9'"),
    Case("iters-zero", ["--iters", "0"], "--iters: 0 must be >= 1"),
    Case("iters-nan", ["--iters", "nan"], "--iters: 'nan' is not an integer"),
    Case("warmup-negative", ["--warmup", "-1"], "--warmup: -1 must be >= 0"),
    Case("iters-huge", ["--iters", "10000000"], "--iters: 10000000 must be <= 1e\\+06"),
    Case("warmup-inf", ["--warmup", "inf"], "--warmup: 'inf' is not an integer"),
    Case("device-empty", ["--device", ""], "--device: must not be empty"),
    Case("shape-beyond-memory", ["--device", "cpu", "--dtype", "fp32", "--m", "1000000", "--n",
                                 "1000000", "--k", "1000000"],
         r"shape 1000000x1000000x1000000 in fp32 needs 11175\.9 GiB .*; cpu has"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("compute/mamf_finder.py", case, tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_requested_without_cuda_is_an_error(launch):
    res = launch.python(SCRIPT, ["--device", "cuda"], timeout=60)
    assert res.returncode == 2
    assert "no CUDA device is available" in launch.error_lines(res.stderr)[0]


def test_allocation_failure_mid_sweep_keeps_the_shapes_measured(launch, tmp_path, monkeypatch):
    """A shape that cannot be allocated (memory taken by another process) ends the sweep with
    status 1, after writing the shapes measured before it."""
    mamf = import_script(launch.scripts / SCRIPT)
    real = mamf.make_operands

    def make_operands(device, dtype, m, n, k):
        if m == 96:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(device, dtype, m, n, k)
    monkeypatch.setattr(mamf, "make_operands", make_operands)
    out = tmp_path / "partial.json"
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # main() installs its own SIGINT/SIGTERM handlers: give pytest its own back
        with pytest.raises(mamf.ScriptError, match=r"cannot allocate 96x64x64 fp32 operands: CUDA out of memory"):
            mamf.main(["--device", "cpu", "--dtype", "fp32", "--m", "32:128:32", "--n", "64", "--k", "64",
                       "--warmup", "0", "--iters", "2", "--json", str(out)])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    assert [(r["m"], r["dtype"]) for r in report["results"]] == [(32, "fp32"), (64, "fp32")]


class Sweep:
    """mamf_finder.py running in the background; lines read from its stdout with a deadline."""

    def __init__(self, launch, args: list[str], ignore_sigint: bool = False):
        # ignore_sigint: started the way a shell starts a background job (SIGINT ignored)
        preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
        self.proc = subprocess.Popen([sys.executable, str(launch.scripts / SCRIPT), *args], cwd=REPO,
                                     env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True, preexec_fn=preexec)
        self.lines: list[str] = []

    def wait_for(self, pattern: re.Pattern, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while sum(bool(pattern.match(x)) for x in self.lines) < count:
            assert time.monotonic() < deadline, f"no {count} lines like {pattern.pattern}: {self.lines}"
            line = self.proc.stdout.readline()
            assert line, f"the script ended early: {self.lines}"
            self.lines.append(line)

    def interrupt(self, limit: float = 15, sig=signal.SIGINT) -> tuple[float, str, str]:
        """``sig``, then (seconds until it exited, rest of stdout, stderr); killed after ``limit``."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        # Read through the same text stream (communicate() would skip lines already buffered).
        watchdog = threading.Timer(limit, self.proc.kill)
        watchdog.start()
        try:
            rest, err = self.proc.stdout.read(), self.proc.stderr.read()
            self.proc.wait()
        finally:
            watchdog.cancel()
            if self.proc.poll() is None:
                self.proc.kill()
        return time.monotonic() - start, rest, err


# 10,000 shapes: no machine finishes them before the signal, and each one is small.
LONG_SWEEP = ["--device", "cpu", "--dtype", "fp32", "--m", "64:640000:64", "--n", "256", "--k", "256",
              "--warmup", "0", "--iters", "2"]


@pytest.mark.slow
@pytest.mark.parametrize("ignore_sigint", [False, True], ids=["foreground", "background-job"])
def test_ctrl_c_between_shapes_prints_results_so_far(launch, tmp_path, ignore_sigint):
    out = tmp_path / "partial.json"
    sweep = Sweep(launch, [*LONG_SWEEP, "--json", str(out)], ignore_sigint=ignore_sigint)
    sweep.wait_for(ROW, 3)
    seconds, rest, err = sweep.interrupt()
    assert sweep.proc.returncode == 130, f"exit {sweep.proc.returncode} {seconds:.1f} s after SIGINT: {err}"
    assert "Traceback" not in err
    assert "# interrupted:" in rest and "# overall best:" in rest
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    n_done = len(rows("".join(sweep.lines))) + len(rows(rest))
    assert 3 <= len(report["results"]) == n_done < 10_000
    assert report["best"]["fp32"] == max(report["results"], key=lambda r: r["max_tflops"])


def test_sigterm_writes_the_results_so_far(launch, tmp_path):
    """scancel and a job's time limit send SIGTERM: the measured shapes must not be lost."""
    out = tmp_path / "partial.json"
    sweep = Sweep(launch, [*LONG_SWEEP, "--json", str(out)])
    sweep.wait_for(ROW, 2)
    seconds, rest, err = sweep.interrupt(sig=signal.SIGTERM)
    assert sweep.proc.returncode == 143, f"exit {sweep.proc.returncode}: {err}"
    assert "Traceback" not in err and "# interrupted:" in rest
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and len(report["results"]) >= 2
    assert [p.name for p in tmp_path.iterdir()] == ["partial.json"]  # no temporary file left


@pytest.mark.slow
def test_ctrl_c_inside_one_long_shape_stops_it(launch, tmp_path):
    # One shape of a million iterations: minutes on any CPU, so the signal lands inside it.
    out = tmp_path / "partial.json"
    sweep = Sweep(launch, ["--device", "cpu", "--dtype", "fp32", "--m", "128", "--n", "128", "--k", "128",
                           "--warmup", "0", "--iters", "1000000", "--json", str(out)])
    sweep.wait_for(re.compile(r"^#\s+i/N"), 1)  # the table's header: the shape is being timed
    time.sleep(0.5)
    seconds, rest, err = sweep.interrupt()
    assert sweep.proc.returncode == 130, f"exit {sweep.proc.returncode} {seconds:.1f} s after SIGINT: {err}"
    assert "# interrupted: 0 of 1 measurements done" in rest
    assert json.loads(out.read_text())["results"] == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_sweep_with_l2_flush(launch, tmp_path):
    out = tmp_path / "cuda.json"
    dtypes = ["bf16", "fp16", "tf32", "fp32"]
    if torch.cuda.get_device_capability() >= (8, 9):
        dtypes.append("fp8")
    res = launch.python(SCRIPT, ["--dtype", *dtypes, "--m", "1024", "2048", "--n", "2048",
                                 "--k", "2048", "--warmup", "5", "--iters", "10",
                                 "--json", str(out)], timeout=300)
    assert res.returncode == 0, res.output
    report = json.loads(out.read_text())
    assert report["device_type"] == "cuda" and report["flush_l2"] is True
    assert "cuda_runtime" in report["versions"] and "L2 flush yes" in res.stdout
    for r in report["results"]:
        assert r["max_tflops"] > 1  # any tensor-core GPU does > 1 TFLOPS at these shapes
