"""Tests of scripts/storage/fio_scan.py, which runs the real fio on a temporary directory.

Speeds vary from run to run and machine to machine, so no test asserts a bandwidth value; they
check the relations fio's numbers must obey (bandwidth = IOPS x block size, p50 <= p99), the
matrix that was asked for, the table, the JSON schema, the refusals and the clean-up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env, import_script
from tools.results import problems

SCRIPT = "fio_scan.py"
ROW = re.compile(r"^\s*(read|write|randread|randwrite)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+"
                 r"([\d,.]+)\s+([\d,]+)\s+([\d,.]+)\s+([\d,.]+)\s*$")


def direct_flag(directory: Path) -> str:
    """'1' if ``directory`` supports O_DIRECT (ext4, xfs), '0' otherwise (tmpfs)."""
    probe = directory / ".odirect-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | getattr(os, "O_DIRECT", 0), 0o600)
        os.close(fd)
        return "1"
    except OSError:
        return "0"
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.slow
def test_scan_runs_fio_and_reports_a_consistent_table(launch, tmp_path):
    require_tool("fio")
    target = tmp_path / "target"
    target.mkdir()
    out = tmp_path / "scan.json"
    plot = tmp_path / "scan.png"
    res = launch.python(SCRIPT, [str(target), "--rw", "read,randwrite", "--bs", "4K,64K",
                                 "--size", "4M", "--numjobs", "1,2", "--iodepth", "4",
                                 "--direct", direct_flag(target), "--budget", "4",
                                 "--json", str(out), "--plot", str(plot)], timeout=90)
    assert res.returncode == 0, res.output
    report = json.loads(out.read_text())
    assert problems(report, "--json") == []  # tools/schemas/<benchmark>.schema.json
    assert report["benchmark"] == "fio_scan" and report["schema_version"] == 1
    assert report["fio_version"].startswith("fio-")
    assert report["runtime_s_per_job"] == pytest.approx(4 / 8, rel=1e-3)
    asked = {(rw, bs, 4 * 1024 ** 2, jobs) for rw in ("read", "randwrite")
             for bs in (4096, 65536) for jobs in (1, 2)}
    got = {(r["rw"], r["bs_bytes"], r["size_bytes"], r["numjobs"]) for r in report["results"]}
    assert got == asked
    for r in report["results"]:
        assert r["iodepth"] == 4
        assert r["bw_MBps"] > 0 and r["iops"] > 0 and r["io_bytes"] > 0
        # bandwidth is IOPS x block size, in decimal MB (fio computes both from one byte count)
        assert r["bw_MBps"] == pytest.approx(r["iops"] * r["bs_bytes"] / 1e6, rel=0.05)
        assert 0 < r["lat_p50_us"] <= r["lat_p99_us"]
        assert r["runtime_s"] > 0
    rows = [m for m in map(ROW.match, res.stdout.splitlines()) if m]
    assert len(rows) == len(report["results"])
    for m, r in zip(rows, report["results"], strict=True):
        assert m[1] == r["rw"]
        assert float(m[6].replace(",", "")) == pytest.approx(r["bw_MBps"], abs=0.06)
    assert "MBps = 1e6 bytes/s" in res.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(target.iterdir()) == [], "the scan left files behind"


BAD_INPUT = [
    Case("json-is-plot", ["{tmp}", "--json", "{tmp}/r", "--plot", "{tmp}/./r"],
         "--plot .*/r: --json writes there too; give each output its own path"),
    Case("dir-missing", ["{tmp}/missing"], "does not exist"),
    Case("dir-unwritable", ["/proc"], "is not writable"),
    Case("dir-empty", [""], "directory: must not be empty"),
    Case("dir-is-file", ["f"], "is not a directory", files={"f": ""}),
    Case("budget-zero", ["{tmp}", "--budget", "0"], "--budget: 0 must be > 0"),
    Case("budget-negative", ["{tmp}", "--budget", "-5"], "--budget: -5 must be > 0"),
    Case("budget-inf", ["{tmp}", "--budget", "inf"], "--budget: 'inf' is not a finite number"),
    Case("budget-nan", ["{tmp}", "--budget", "nan"], "--budget: 'nan' is not a finite number"),
    Case("budget-too-long", ["{tmp}", "--budget", "1e9"], "--budget: 1e9 must be <= 604800"),
    Case("budget-too-short", ["{tmp}", "--budget", "1", "--bs", "4K,8K,16K"], "need at least"),
    Case("bs-not-size", ["{tmp}", "--bs", "4X"], "--bs"),
    Case("rw-unknown", ["{tmp}", "--rw", "readwrite"], "unknown pattern 'readwrite'"),
    Case("numjobs-zero", ["{tmp}", "--numjobs", "0"], "--numjobs: .*must be from 1 to 1024"),
    Case("numjobs-huge", ["{tmp}", "--numjobs", "100000"], "--numjobs: .*must be from 1 to 1024"),
    Case("iodepth-nan", ["{tmp}", "--iodepth", "nan"], "--iodepth: 'nan' is not an integer"),
    Case("iodepth-huge", ["{tmp}", "--iodepth", "1000000"], "--iodepth: 1000000 must be <= 65536"),
    Case("bs-larger-than-size", ["{tmp}", "--bs", "1M", "--size", "64K"],
         "--bs 1M is larger than --size 64K"),
    # counted before the matrix is built: 4e12 points would not fit in memory
    Case("matrix-huge", ["{tmp}", "--bs", ",".join(["4K"] * 2000), "--size",
                         ",".join(["1G"] * 2000), "--numjobs", ",".join(["1"] * 1000)],
         r"gives 7.5e-09 s per job for 16000000000 jobs"),
    Case("plot-unwritable", ["{tmp}", "--plot", "/proc/p.png"], "--plot /proc/p.png: cannot write"),
    Case("fio-missing", ["{tmp}", "--fio", "no-such-fio"], "fio not found"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    require_tool("fio")
    check_refused("storage/fio_scan.py", case, tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("fio_scan.")]


def test_a_fio_that_outlives_its_limit_is_stopped_with_its_children(launch):
    """fio forks its job processes; a run past its time limit is killed as a process group, and
    the scan does not wait for a child that holds the output pipe open."""
    fio_scan = import_script(launch.scripts / SCRIPT)
    state = {"child": None}
    start = time.monotonic()
    with pytest.raises(fio_scan.ScriptError, match="did not finish within 1 s"):
        fio_scan.run_fio(["sh", "-c", "sleep 300 & echo started; sleep 300"], 1, state)
    assert time.monotonic() - start < 15
    assert state["child"] is None


def test_job_processes_that_outlive_fio_do_not_block_the_scan(launch):
    """fio exits but a process it forked keeps running with fio's stdout: the scan reads fio's
    output at once (it goes to a file, not a pipe) and kills what fio left in its group."""
    fio_scan = import_script(launch.scripts / SCRIPT)
    state = {"child": None}
    start = time.monotonic()
    out = fio_scan.run_fio(["sh", "-c", "sleep 301.25 & echo done"], 60, state)
    assert out.strip() == "done"
    assert time.monotonic() - start < 10, "waited for a process that outlived fio"
    time.sleep(0.2)
    left = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "301.25"]]
    assert not left, f"fio's leftover process still runs: {left}"


@pytest.mark.slow
def test_interrupt_after_a_finished_job_keeps_its_row(tmp_path):
    require_tool("fio")
    scan_dir, out = tmp_path / "scan", tmp_path / "partial.json"
    scan_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "storage" / SCRIPT), str(scan_dir), "--size",
         "4M", "--bs", "4K", "--rw", "randwrite,randread", "--budget", "4",  # 2 s a job: time to interrupt the second
         "--direct", direct_flag(scan_dir), "--json", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
        start_new_session=True)
    try:
        lines = []
        while not any(line.split()[:1] == ["randwrite"] for line in lines):
            line = proc.stdout.readline()
            assert line, proc.communicate()
            lines.append(line)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    report = json.loads(out.read_text())
    assert report["interrupted"] is True and [r["rw"] for r in report["results"]] == ["randwrite"]
    assert list(scan_dir.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_removes_the_scan_files(tmp_path, sig):
    require_tool("fio")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "storage" / SCRIPT), str(tmp_path), "--size",
         "8M", "--bs", "4K", "--rw", "randwrite,randread", "--budget", "60",
         "--direct", direct_flag(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
        start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        # wait until fio has laid out its file, i.e. there is something to clean up
        while not list(tmp_path.glob("fio_scan.*/size-8M/data.*")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the scan never started writing"
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err
    assert list(tmp_path.iterdir()) == [], "files left after the interrupt"
    # fio's job processes live in a session of their own: none may outlive the scan
    alive = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in
             " ".join(p.info["cmdline"] or [])]
    assert not alive, f"fio processes left running: {alive}"


@pytest.mark.parametrize("drop, where", [("bw_bytes", "read.bw_bytes"), ("runtime", "read.runtime")])
def test_a_field_missing_from_fios_output_is_named_with_fios_version(launch, drop, where):
    """Another fio may lay its JSON out differently: the error names the field and the version,
    not a bare KeyError."""
    fio_scan = import_script(launch.scripts / SCRIPT)
    side = {"bw_bytes": 2e9, "iops": 1000.0, "io_bytes": 10 ** 9, "runtime": 500,
            "lat_ns": {"mean": 1000.0, "percentile": {"50.000000": 900, "99.000000": 5000}}}
    del side[drop]
    text = json.dumps({"fio version": "fio-9.99", "jobs": [{"error": 0, "read": side}]})
    with pytest.raises(fio_scan.ScriptError, match=rf"no number at jobs\[0\]\.{re.escape(where)} \(fio-9\.99\)"):
        fio_scan.parse_fio_json(text, "randread")
    full = json.loads(text)
    full["jobs"][0]["read"][drop] = 7
    assert fio_scan.parse_fio_json(json.dumps(full), "randread")["iops"] == 1000.0
