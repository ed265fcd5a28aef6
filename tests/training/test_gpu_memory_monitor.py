"""Tests of scripts/training/gpu_memory_monitor.py: the demo run as a process, the class used
from a loop, the CPU fallback (host RSS), bad arguments, and on a GPU the allocator counters
(peaks that see a freed temporary, the OOM counter)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import import_script

SCRIPT = "gpu_memory_monitor.py"
MIB = 2**20


@pytest.fixture(scope="module")
def mon_module(launch):
    return import_script(launch.scripts / SCRIPT)


def test_help_works(launch):
    res = launch.python(SCRIPT, ["--help"], timeout=30)
    assert res.returncode == 0
    for option in ("--steps", "--mib", "--provoke-oom", "--json"):
        assert option in res.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_demo_on_cpu_reports_host_memory_that_grows(launch, tmp_path):
    out = tmp_path / "mon.json"
    res = launch.python(SCRIPT, ["--steps", "3", "--mib", "64", "--json", str(out)], timeout=60)
    assert res.returncode == 0, res.stderr
    assert "CUDA is not available" in res.stderr
    assert res.stdout.count("host rss") == 3
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert [s["kind"] for s in steps] == ["host"] * 3
    # the demo keeps 64 MiB more each step: RSS must grow by about that much per step
    growth = [b["rss"] - a["rss"] for a, b in pairwise(steps)]
    assert all(48 * MIB <= g <= 96 * MIB for g in growth), growth
    assert all(s["rss_peak"] >= s["rss"] for s in steps)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_class_without_cuda(mon_module, capsys):
    mon = mon_module.MemoryMonitor()
    assert "CUDA is not available" in capsys.readouterr().err
    snap = mon.snapshot()
    assert snap["kind"] == "host" and snap["rss"] > 0
    mon.reset_peaks()                                   # a no-op, but callable from any loop
    assert mon.format(snap).startswith("host rss ")
    with pytest.raises(ValueError, match="CUDA is not available"):
        mon_module.MemoryMonitor(device=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_provoke_oom_without_cuda_is_one_line_error(launch):
    res = launch.python(SCRIPT, ["--provoke-oom"], timeout=60)
    assert res.returncode == 2
    errors = launch.error_lines(res.stderr)
    assert len(errors) == 1 and "CUDA" in errors[0], res.stderr


BAD_INPUT = [
    Case("steps-zero", ["--steps", "0"], "--steps: 0 must be >= 1"),
    Case("mib-text", ["--mib", "x"], "--mib: 'x' is not an integer"),
    Case("mib-nan", ["--mib", "nan"], "--mib: 'nan' is not an integer"),
    # a typo that used to ask a CPU node for a terabyte, and the kernel's OOM killer to answer
    Case("too-much-memory", ["--steps", "1000", "--mib", "1024"], "at most 65536 MiB"),
    Case("env-local-rank-text", ["--steps", "1"], "LOCAL_RANK='x' is not an integer",
         env={"LOCAL_RANK": "x"}),
    Case("steps-overflows-a-float", ["--steps", "9" * 400],
         r"--steps: 9{12}\.\.\. \(400 characters\) must be <= "),
    # 63 GiB kept and a 126 GiB temporary: more than the host (or GPU) has free
    Case("more-than-free-memory", ["--steps", "1", "--mib", "64500"],
         r"--steps 1 x --mib 64500 \(and a temporary of 2 x --mib\) needs 193500 MiB; the "
         r"(host|GPU cuda:\d+) has \d+ MiB free"),
    Case("env-local-rank-negative", ["--steps", "1"], "LOCAL_RANK=-1 must be >= 0",
         env={"LOCAL_RANK": "-1"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("training/gpu_memory_monitor.py", case, tmp_path)



def test_interrupt_keeps_the_steps_measured(mon_module, tmp_path, monkeypatch):
    """Ctrl-C in the third step: the JSON still holds the two steps measured, marked
    interrupted, and the KeyboardInterrupt goes on to run_main (exit status 130)."""
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    calls = []
    snapshot = mon_module.MemoryMonitor.snapshot

    def interrupted_snapshot(self):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return snapshot(self)

    monkeypatch.setattr(mon_module.MemoryMonitor, "snapshot", interrupted_snapshot)
    out = tmp_path / "mon.json"
    with pytest.raises(KeyboardInterrupt):
        mon_module.main(["--steps", "5", "--mib", "1", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and [s["step"] for s in doc["steps"]] == [0, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_counters_see_temporaries_and_ooms(mon_module):
    mon = mon_module.MemoryMonitor()
    mon.reset_peaks()
    base = mon.snapshot()
    keep = torch.ones(64 * MIB // 4, device="cuda")
    tmp = torch.ones(128 * MIB // 4, device="cuda")
    del tmp
    snap = mon.snapshot()
    assert snap["kind"] == "cuda"
    assert snap["allocated"] - base["allocated"] == 64 * MIB
    assert snap["active_peak"] - base["allocated"] >= 192 * MIB   # the freed temporary counts
    assert snap["reserved_peak"] >= snap["active_peak"]
    ooms = snap["ooms"]
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2 * snap["device_total"], dtype=torch.uint8, device="cuda")
    assert mon.snapshot()["ooms"] == ooms + 1
    del keep


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_demo_on_gpu_counts_the_provoked_oom(launch, tmp_path):
    out = tmp_path / "mon.json"
    res = launch.python(SCRIPT, ["--steps", "2", "--provoke-oom", "--json", str(out)], timeout=120)
    assert res.returncode == 0, res.stderr
    steps = json.loads(out.read_text())["steps"]
    assert steps[-1]["step"] == "oom" and steps[-1]["ooms"] == steps[-2]["ooms"] + 1
    assert "OOMs" in res.stdout
