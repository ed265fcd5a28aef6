"""Tests of scripts/debug/node_health_check.py, run for real on saved (synthetic) nvidia-smi -q -x
outputs, kernel logs and nvlink -s outputs in tests/debug/fixtures/: each unhealthy fixture must
be called unhealthy (exit 3) naming the right GPU, PCI bus id and check, the healthy one healthy
(exit 0). A GPU machine also runs it live."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

FIX = REPO / "tests" / "debug" / "fixtures"
SMI = FIX / "nvidia-smi"
SCRIPT = REPO / "scripts" / "debug" / "node_health_check.py"


def run(launch, tmp_path, xml: str, dmesg: str = "clean.txt", nvlink: str | None = "h100x8-ok.txt",
        extra: tuple[str, ...] = ()):
    out = tmp_path / "report.json"
    args = ["--expect-gpus", "8", "--nvidia-smi-xml", str(SMI / xml), "--dmesg", str(FIX / "dmesg" / dmesg),
            "--json", str(out), *extra]
    if nvlink:
        args += ["--nvlink-status", str(FIX / "nvlink" / nvlink)]
    res = launch.python("node_health_check.py", args, timeout=60)
    report = json.loads(out.read_text()) if out.exists() else None
    return res, report


def failures(report) -> list[tuple[str, int | None, str | None]]:
    return [(r["check"], r["gpu"], r["bus_id"]) for r in report["checks"] if r["status"] == "fail"]


def test_healthy_node_passes(launch, tmp_path):
    res, report = run(launch, tmp_path, "h100x8-healthy.xml")
    assert res.returncode == 0, res.output
    assert report["verdict"] == "healthy" and not failures(report)
    assert [r["status"] for r in report["checks"]].count("warn") == 0
    assert len(report["gpus"]) == 8 and report["gpus"][3]["bus_id"] == "0000:5d:00.0"
    # Every per-GPU check (ecc, row_remap, clocks, temperature, pcie, nvlink) ran on all 8, none skipped.
    per_gpu = [r for r in report["checks"] if r["gpu"] is not None]
    assert len(per_gpu) == 8 * 6 and all(r["status"] == "pass" for r in per_gpu)
    assert "HEALTHY: 0 warnings" in res.stdout


@pytest.mark.parametrize("xml, dmesg, nvlink, expected", [
    ("h100x8-ecc-remap.xml", "clean.txt", "h100x8-ok.txt",
     {("ecc", 3, "0000:5d:00.0"), ("row_remap", 3, "0000:5d:00.0")}),
    ("h100x8-pcie-x8.xml", "clean.txt", "h100x8-ok.txt", {("pcie", 5, "0000:ab:00.0")}),
    ("h100x8-hw-slowdown.xml", "clean.txt", "h100x8-ok.txt",
     {("clocks", 2, "0000:3a:00.0"), ("temperature", 2, "0000:3a:00.0")}),
    ("h100x8-healthy.xml", "clean.txt", "h100x8-link-down.txt", {("nvlink", 4, "0000:9a:00.0")}),
    ("h100x8-missing-gpu.xml", "xid-79-94.txt", None,
     {("gpu_count", None, None), ("xid", None, "0000:ba:00")}),
], ids=["ecc-remap", "pcie-x8", "hw-slowdown", "nvlink-down", "7-of-8-xid79"])
def test_unhealthy_fixture_names_gpu_bus_and_check(launch, tmp_path, xml, dmesg, nvlink, expected):
    res, report = run(launch, tmp_path, xml, dmesg, nvlink)
    assert res.returncode == 3, res.output
    assert report["verdict"] == "unhealthy"
    assert set(failures(report)) == expected, res.stdout
    assert "UNHEALTHY:" in res.stdout
    for check, gpu, bus in expected:          # the table shows the same GPU and bus id
        if gpu is not None:
            assert any(line.split()[:4] == [check, str(gpu), bus, "fail"] for line in res.stdout.splitlines())


def test_xid_lines_are_named_and_mapped_to_gpus(launch, tmp_path):
    res, report = run(launch, tmp_path, "h100x8-healthy.xml", "xid-79-94.txt")
    assert res.returncode == 3, res.output
    xid = {r["detail"].split(" (")[0]: r for r in report["checks"] if r["check"] == "xid"}
    assert xid["Xid 94"]["status"] == "warn" and xid["Xid 94"]["gpu"] == 1
    assert "ROBUST_CHANNEL_CONTAINED_ERROR) x2" in xid["Xid 94"]["detail"]
    assert xid["Xid 79"]["status"] == "fail" and xid["Xid 79"]["gpu"] == 6
    assert xid["Xid 79"]["bus_id"] == "0000:ba:00.0"


def test_idle_link_speed_is_a_warning_not_a_failure(launch, tmp_path):
    res, report = run(launch, tmp_path, "h100x8-idle-gen1.xml")
    assert res.returncode == 0, res.output
    pcie = [r for r in report["checks"] if r["check"] == "pcie"]
    assert len(pcie) == 8 and all(r["status"] == "warn" and "idle" in r["detail"] for r in pcie)


def test_same_gen_drop_under_load_fails():
    mod = import_script(SCRIPT)
    _, gpus = mod.parse_nvidia_smi_xml((SMI / "h100x8-healthy.xml").read_text(), "fixture")
    gpu = dict(gpus[0], pcie_gen=3.0)
    [pcie] = [r for r in mod.check_gpu(gpu) if r["check"] == "pcie"]
    assert pcie["status"] == "fail" and "under load" in pcie["detail"]


def test_lost_gpu_message_fails_naming_the_bus(tmp_path, launch):
    text = (SMI / "h100x8-missing-gpu.xml").read_text()
    saved = tmp_path / "smi.xml"
    saved.write_text("Unable to determine the device handle for GPU0000:BA:00.0: Unknown Error\n" + text)
    out = tmp_path / "r.json"
    res = launch.python("node_health_check.py", ["--nvidia-smi-xml", str(saved), "--dmesg",
                        str(FIX / "dmesg" / "clean.txt"), "--json", str(out)], timeout=60)
    assert res.returncode == 3, res.output
    report = json.loads(out.read_text())
    assert ("gpu_count", None, "0000:ba:00.0") in failures(report)


def test_older_driver_throttle_element_names_are_read():
    mod = import_script(SCRIPT)
    text = (SMI / "h100x8-hw-slowdown.xml").read_text().replace("clocks_event_reason", "clocks_throttle_reason")
    text = text.replace("clocks_event_reasons", "clocks_throttle_reasons")
    _, gpus = mod.parse_nvidia_smi_xml(text, "fixture")
    assert gpus[2]["clock_reasons"]["hw_slowdown"] == "Active"
    assert [r["status"] for r in mod.check_gpu(gpus[2]) if r["check"] == "clocks"] == ["fail"]



def test_blackwell_nvlink_xids_are_named(launch, tmp_path):
    """Blackwell reports NVLink faults as Xid 144-150 (NVIDIA's Xid catalog), in lines that carry
    a sub-unit, Fatal or Nonfatal, and the link before the status words. Synthetic log, written
    for this test in the line format the catalog gives for these Xids."""
    log = tmp_path / "dmesg-blackwell.txt"
    log.write_text(
        "[Tue Mar  4 14:22:07 2025] NVRM: Xid (PCI:0000:5d:00): 149, NETIR_LINK_EVT Fatal XC0 i0 "
        "Link 03 (0x00000000 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n"
        "[Tue Mar  4 14:22:08 2025] NVRM: Xid (PCI:0000:5d:00): 147, TREX Nonfatal XC0 i0 "
        "Link 03 (0x00000000 0x80000000 0x00000000 0x00000000 0x00000000 0x00000000)\n",
        encoding="utf-8")
    res, report = run(launch, tmp_path, "h100x8-healthy.xml", str(log))
    assert res.returncode == 3, res.output
    xid = {r["detail"].split(" (")[0]: r for r in report["checks"] if r["check"] == "xid"}
    assert "NVLINK_NETIR_ERROR) x1" in xid["Xid 149"]["detail"]
    assert xid["Xid 149"]["status"] == "fail" and xid["Xid 149"]["bus_id"] == "0000:5d:00.0"
    assert "NVLINK_TREX_ERROR) x1" in xid["Xid 147"]["detail"] and xid["Xid 147"]["status"] == "warn"

def test_xid_map_agrees_with_the_data_file():
    mod = import_script(SCRIPT)
    data = yaml.safe_load((REPO / "data" / "debug" / "xid_errors.yml").read_text(encoding="utf-8"))
    in_file = {r["code"]: r["mnemonic"] for r in data["rows"]}
    in_script = {code: name for code, (name, _) in mod.XID_CODES.items()}
    assert in_script == in_file
    assert {v for _, v in mod.XID_CODES.values()} == {"warn", "fail"}
    for code in (48, 64, 79, 95):                      # reset / RMA / reboot codes fail the node
        assert mod.XID_CODES[code][1] == "fail"
    # NVLink faults: Xid 74 up to Hopper, 144-150 on Blackwell (NVIDIA's Xid catalog)
    assert {code for code, (name, _) in mod.XID_CODES.items() if name.startswith("NVLINK_")} == {
        74, *range(144, 151)}


def test_fixtures_declare_their_origin():
    for path in sorted(FIX.rglob("*")):
        if path.is_file():
            head = path.read_text(encoding="utf-8")[:600]
            assert "Synthetic" in head and "written for the book's tests" in head, path.name


def test_no_driver_is_an_error_unless_allowed(launch, tmp_path):
    env = {"PATH": str(tmp_path)}                    # no nvidia-smi, dmesg or journalctl here
    res = launch.python("node_health_check.py", [], env=env, timeout=60)
    assert res.returncode == 1, res.output
    assert launch.error_lines(res.stderr) == [
        "node_health_check.py: error: nvidia-smi not found and --nvml not given: cannot check the "
        "GPUs (on a CPU-only node add --allow-no-gpu)"]
    res = launch.python("node_health_check.py", ["--allow-no-gpu"], env=env, timeout=60)
    assert res.returncode == 0, res.output
    assert "no NVIDIA driver on this node (--allow-no-gpu)" in res.stdout
    assert "xid             -  -             skip" in res.stdout     # no dmesg: skipped, not a crash


BAD_INPUT = [
    Case("expect-zero", ["--expect-gpus", "0"], "--expect-gpus: 0 must be >= 1"),
    Case("expect-nan", ["--expect-gpus", "nan"], "--expect-gpus: 'nan' is not an integer"),
    Case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: 0 must be > 0"),
    Case("xml-missing", ["--nvidia-smi-xml", "{tmp}/none.xml"], r"--nvidia-smi-xml .*none\.xml: does not exist"),
    Case("xml-folder", ["--nvidia-smi-xml", "{tmp}"], "--nvidia-smi-xml .*: is a folder"),
    Case("xml-not-smi", ["--nvidia-smi-xml", "{tmp}/x.xml"], r"not nvidia-smi -q -x output",
         files={"x.xml": "<html><body>hello</body></html>"}),
    Case("xml-truncated", ["--nvidia-smi-xml", "{tmp}/x.xml"], r"not valid nvidia-smi XML",
         files={"x.xml": "<nvidia_smi_log><gpu id='00000000:18:00.0'><product_name>H100"}),
    Case("dmesg-missing", ["--allow-no-gpu", "--dmesg", "{tmp}/nope.txt"], r"--dmesg .*nope\.txt: does not exist"),
    Case("json-is-input", ["--nvidia-smi-xml", "{tmp}/s.xml", "--json", "{tmp}/s.xml"], "is also an input",
         files={"s.xml": (SMI / "h100x8-healthy.xml").read_text()}),
    Case("json-is-the-dmesg", ["--allow-no-gpu", "--dmesg", "{tmp}/d.txt", "--json", "{tmp}/d.txt"],
         "is also an input", files={"d.txt": "[    1.0] boot\n"}),
    Case("nvlink-status-missing", ["--allow-no-gpu", "--nvlink-status", "{tmp}/none.txt"],
         r"--nvlink-status .*none\.txt: does not exist"),
    Case("timeout-inf", ["--timeout-s", "inf"], "not a finite number"),
    Case("nvml-and-xml", ["--nvml", "--nvidia-smi-xml", "{tmp}/s.xml"], "give one",
         files={"s.xml": (SMI / "h100x8-healthy.xml").read_text()}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/node_health_check.py", case, tmp_path)


@pytest.mark.gpu
def test_live_on_a_gpu_node(launch, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or shutil.which("nvidia-smi") is None:
        pytest.skip("needs an NVIDIA GPU and nvidia-smi")
    out = tmp_path / "live.json"
    n = torch.cuda.device_count()
    res = launch.python("node_health_check.py", ["--expect-gpus", str(n), "--json", str(out)], timeout=120)
    assert res.returncode in (0, 3), res.output            # a real node may have a finding
    report = json.loads(out.read_text())
    assert len(report["gpus"]) == n and all(g["bus_id"].count(":") == 2 for g in report["gpus"])
    checks = {r["check"] for r in report["checks"]}
    assert {"gpu_count", "ecc", "row_remap", "clocks", "pcie", "xid"} <= checks
    # nvidia-smi's own fields were found on this driver: the per-GPU checks did not all skip.
    assert any(r["check"] == "pcie" and r["status"] != "skip" for r in report["checks"])
    assert any(r["check"] == "clocks" and r["status"] != "skip" for r in report["checks"])
