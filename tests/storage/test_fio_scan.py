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

import pytest

from tests.conftest import require_tool
from tests.launchers import REPO, clean_env

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
    for m, r in zip(rows, report["results"]):
        assert m[1] == r["rw"]
        assert float(m[6].replace(",", "")) == pytest.approx(r["bw_MBps"], abs=0.06)
    assert "MBps = 1e6 bytes/s" in res.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list(target.iterdir()) == [], "the scan left files behind"


@pytest.mark.parametrize("args, message", [
    (["{tmp}/missing"], "does not exist"),
    (["/sys"], "is not writable"),
    (["{tmp}", "--budget", "0"], "--budget must be > 0"),
    (["{tmp}", "--budget", "-5"], "--budget must be > 0"),
    (["{tmp}", "--budget", "1", "--bs", "4K,8K,16K"], "need at least"),
    (["{tmp}/file"], "is not a directory"),
])
def test_bad_input_gives_one_line_error(launch, tmp_path, request, args, message):
    require_tool("fio")
    if args == ["/sys"]:
        request.getfixturevalue("read_only_dir")  # skips if /sys is writable here
    (tmp_path / "file").write_text("")
    res = launch.python(SCRIPT, [a.replace("{tmp}", str(tmp_path)) for a in args], timeout=30)
    assert res.returncode == 2, res.output
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and message in errors[0], res.stderr
    assert errors[0].startswith("fio_scan.py: error:")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("fio_scan.")]


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
