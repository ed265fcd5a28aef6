#!/usr/bin/env python
"""node_health_check.py: check one GPU node's health and print a pass/warn/fail table.

Run it on a node before you give it a job (a Slurm prolog, a burn-in script) or after a job died
there. It reads ``nvidia-smi -q -x`` (or NVML with ``--nvml``), the kernel log (``dmesg``, else
``journalctl -k``) and ``nvidia-smi nvlink -s``, or saved copies of them, and checks each GPU:
the GPU count (``--expect-gpus``), uncorrectable ECC errors, pending or failed row remaps,
hardware clock slowdowns, the temperature (C) against the GPU's own slowdown threshold, the PCIe
link width and generation, active NVLink links, and the Xid codes in the kernel log. Each check
ends ``pass``, ``warn``, ``fail`` or ``skip``; the Debugging chapter ("A one-node health check")
gives every rule. It needs no torch and no GPU memory.

Launch (one process per node; under srun, one task per node)::

    python node_health_check.py --expect-gpus 8
    python node_health_check.py --expect-gpus 8 --json health-$(hostname).json
    srun --ntasks-per-node=1 python node_health_check.py --expect-gpus 8
    python node_health_check.py --nvidia-smi-xml saved.xml --dmesg saved-dmesg.txt

Example output (test fixture: an 8-GPU H100 node with a pending row remap; abridged)::

    # node_health_check.py on node17: 8 GPU(s), driver 535.183.06; source tests/debug/fixtures/nvidia-smi/h100x8-ecc-remap.xml
    CHECK         GPU  BUS ID        STATUS DETAIL
    row_remap       3  0000:5d:00.0  fail   row remap pending: reset the GPU (nvidia-smi -r) or reboot before new work
    nvlink          4  0000:9a:00.0  fail   17 of 18 links active, other GPUs have 18: a link is down
    UNHEALTHY: 3 failed, 2 warnings; first: GPU 3 (0000:5d:00.0) ecc: 2 uncorrectable ECC errors since the driver loaded (volatile); 2 over the GPU's life

Exit status: 0 healthy (warnings allowed), 3 a check failed, 1 the GPUs cannot be checked at all,
2 usage or unreadable saved outputs, 130/143 interrupted.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET

PROG = "node_health_check.py"
SCHEMA = "node_health_check/1"
STATUSES = ("pass", "warn", "fail", "skip")
TEMP_MARGIN_C = 5.0            # warn this close to the GPU's own slowdown threshold

# Xid code -> (mnemonic, verdict when found in the kernel log). Mnemonics as in NVIDIA's Xid
# catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) and the driver
# header nverror.h; tests/debug/test_node_health_check.py keeps them equal to
# data/debug/xid_errors.yml. "fail": hardware, or the catalog's action is a GPU reset or a node
# reboot; "warn": usually the application, or informational.
XID_CODES = {
    13: ("ROBUST_CHANNEL_GR_EXCEPTION", "warn"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "warn"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "warn"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "warn"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "warn"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "warn"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "fail"),
    61: ("PMU_BREAKPOINT", "warn"),
    62: ("PMU_HALT_ERROR", "fail"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "warn"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "fail"),
    74: ("NVLINK_ERROR", "fail"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "fail"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "warn"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "warn"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "fail"),
    119: ("GSP_RPC_TIMEOUT", "fail"),
    120: ("GSP_ERROR", "fail"),
    # Blackwell's NVLink 5 errors (Xid 74 is A100/H100 only). 144-146 and 149 are fatal or not
    # depending on the status the line carries; their fatal statuses need a GPU reset.
    144: ("NVLINK_SAW_ERROR", "fail"),
    145: ("NVLINK_RLW_ERROR", "fail"),
    146: ("NVLINK_TLW_ERROR", "fail"),
    147: ("NVLINK_TREX_ERROR", "warn"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "warn"),
    149: ("NVLINK_NETIR_ERROR", "fail"),
    150: ("NVLINK_MSE_ERROR", "fail"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "warn"),
}
# "NVRM: Xid (PCI:0000:19:00): 79, pid=..., GPU has fallen off the bus." (older drivers omit "PCI:")
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?\): (\d+)")
# nvidia-smi's messages for a GPU it cannot reach, e.g.
# "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "... GPU is lost".
LOST_LINE = re.compile(r"(Unable to determine the device handle|GPU is lost)[^\n]*", re.I)
BUS_ID = re.compile(r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


# --- data gathering -------------------------------------------------------------------------

def canonical_bus_id(text: str) -> str:
    """'00000000:19:00.0' (nvidia-smi), '0000:19:00' (kernel log) -> '0000:19:00[.0]' lower case."""
    text = text.strip().lower()
    domain, rest = text.split(":", 1)
    return f"{int(domain, 16) & 0xffff:04x}:{rest}"


def run_tool(cmd: list[str], timeout_s: float) -> tuple[int, str, str] | None:
    """Run ``cmd`` with a deadline; None when it is not installed. On timeout the whole process
    group is killed and ScriptError names the command."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                errors="replace", start_new_session=True)
    except FileNotFoundError:
        return None
    except PermissionError as err:
        return 126, "", str(err)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise ScriptError(f"{' '.join(cmd)} did not finish within {timeout_s:g} s "
                          f"(a hung driver or GPU; see the kernel log)") from None
    return proc.returncode, out, err


def _text(node, path: str) -> str | None:
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _number(text: str | None) -> float | None:
    """'45 C' -> 45.0, '16x' -> 16.0, '0' -> 0.0; 'N/A' or missing -> None."""
    if text is None:
        return None
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


def parse_nvidia_smi_xml(text: str, where: str) -> tuple[dict, list[dict]]:
    """(node info, one dict per GPU) from ``nvidia-smi -q -x`` output; ScriptError(2) if it is not."""
    start = text.find("<nvidia_smi_log")
    if start < 0:
        raise ScriptError(f"{where}: not nvidia-smi -q -x output (no <nvidia_smi_log> element)", EXIT_USAGE)
    body = text[start:]
    # The DOCTYPE names a DTD file the parser need not fetch; the preamble may hold warnings.
    try:
        root = ET.fromstring(body[:body.rfind("</nvidia_smi_log>") + len("</nvidia_smi_log>")])
    except ET.ParseError as err:
        raise ScriptError(f"{where}: not valid nvidia-smi XML ({err})", EXIT_USAGE) from None
    info = {"driver_version": _text(root, "driver_version"), "cuda_version": _text(root, "cuda_version"),
            "attached_gpus": _number(_text(root, "attached_gpus"))}
    gpus = []
    for index, g in enumerate(root.findall("gpu")):
        bus = g.get("id") or _text(g, "pci/pci_bus_id") or "unknown"
        gpu = {"index": index, "bus_id": canonical_bus_id(bus) if BUS_ID.fullmatch(bus) else bus,
               "name": _text(g, "product_name") or "?", "uuid": _text(g, "uuid")}
        gpu["ecc_mode"] = _text(g, "ecc_mode/current_ecc")
        for scope in ("volatile", "aggregate"):
            sect = g.find(f"ecc_errors/{scope}")
            total = None
            if sect is not None:
                names = ("dram_uncorrectable", "sram_uncorrectable", "sram_uncorrectable_parity",
                         "sram_uncorrectable_secded", "double_bit/total")
                values = [_number(_text(sect, n)) for n in names]
                if any(v is not None for v in values):
                    total = sum(v for v in values if v is not None)
            gpu[f"ecc_{scope}_uncorrectable"] = total
        gpu["remap_pending"] = _text(g, "remapped_rows/remapped_row_pending")
        gpu["remap_failure"] = _text(g, "remapped_rows/remapped_row_failure")
        gpu["remap_unc"] = _number(_text(g, "remapped_rows/remapped_row_unc"))
        gpu["retirement_pending"] = _text(g, "retired_pages/pending_retirement")
        reasons = g.find("clocks_event_reasons")
        if reasons is None:
            reasons = g.find("clocks_throttle_reasons")     # drivers before 535
        gpu["clock_reasons"] = None if reasons is None else {
            re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag): (child.text or "").strip()
            for child in reasons}
        gpu["temp_c"] = _number(_text(g, "temperature/gpu_temp"))
        gpu["temp_slow_c"] = _number(_text(g, "temperature/gpu_temp_slow_threshold"))
        link = "pci/pci_gpu_link_info"
        gpu["pcie_width"] = _number(_text(g, f"{link}/link_widths/current_link_width"))
        gpu["pcie_width_max"] = _number(_text(g, f"{link}/link_widths/max_link_width"))
        gpu["pcie_gen"] = _number(_text(g, f"{link}/pcie_gen/current_link_gen"))
        gen_max = [_number(_text(g, f"{link}/pcie_gen/{n}"))
                   for n in ("max_device_link_gen", "max_host_link_gen")]
        gen_max = [v for v in gen_max if v is not None]
        gpu["pcie_gen_max"] = min(gen_max) if gen_max else _number(_text(g, f"{link}/pcie_gen/max_link_gen"))
        gpu["util_pct"] = _number(_text(g, "utilization/gpu_util"))
        gpus.append(gpu)
    return info, gpus


def gather_nvml() -> tuple[dict, list[dict]]:
    """The same fields through NVML (optional package nvidia-ml-py, imported only here)."""
    try:
        import pynvml
    except ImportError:
        raise ScriptError("--nvml: the nvidia-ml-py package is not installed "
                          "(pip install nvidia-ml-py), or leave out --nvml to use nvidia-smi",
                          EXIT_USAGE) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        raise ScriptError(f"--nvml: NVML did not initialise ({err}): no NVIDIA driver here?") from None

    def get(fn, *args):
        try:
            return fn(*args)
        except pynvml.NVMLError:
            return None

    try:
        info = {"driver_version": get(pynvml.nvmlSystemGetDriverVersion), "cuda_version": None,
                "attached_gpus": pynvml.nvmlDeviceGetCount()}
        gpus = []
        for index in range(int(info["attached_gpus"])):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            pci = get(pynvml.nvmlDeviceGetPciInfo, h)
            bus = pci.busId.decode() if pci is not None and isinstance(pci.busId, bytes) else getattr(pci, "busId", "?")
            remap = get(pynvml.nvmlDeviceGetRemappedRows, h)
            mask = get(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, h) or 0
            names = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
                     "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
                     "hw_thermal_slowdown": 0x40, "hw_power_brake_slowdown": 0x80}
            vol = get(pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      pynvml.NVML_VOLATILE_ECC)
            agg = get(pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                      pynvml.NVML_AGGREGATE_ECC)
            mode = get(pynvml.nvmlDeviceGetEccMode, h)
            name = get(pynvml.nvmlDeviceGetName, h)
            gpus.append({
                "index": index, "bus_id": canonical_bus_id(bus) if BUS_ID.fullmatch(bus) else bus,
                "name": name.decode() if isinstance(name, bytes) else (name or "?"), "uuid": None,
                "ecc_mode": None if mode is None else ("Enabled" if mode[0] else "Disabled"),
                "ecc_volatile_uncorrectable": vol, "ecc_aggregate_uncorrectable": agg,
                "remap_pending": None if remap is None else ("Yes" if remap[2] else "No"),
                "remap_failure": None if remap is None else ("Yes" if remap[3] else "No"),
                "remap_unc": None if remap is None else remap[1], "retirement_pending": None,
                "clock_reasons": {k: "Active" if mask & bit else "Not Active" for k, bit in names.items()},
                "temp_c": get(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
                "temp_slow_c": get(pynvml.nvmlDeviceGetTemperatureThreshold, h,
                                   pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
                "pcie_width": get(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_width_max": get(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "pcie_gen": get(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_gen_max": get(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "util_pct": getattr(get(pynvml.nvmlDeviceGetUtilizationRates, h), "gpu", None)})
        return info, gpus
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def read_kernel_log(saved: tuple[str, str] | None, timeout_s: float) -> tuple[str | None, str]:
    """(kernel log text or None, where it came from / why it could not be read); ``saved``: the
    (path, text) of --dmesg."""
    if saved:
        return saved[1], saved[0]
    reasons = []
    for cmd in (["dmesg", "-T"], ["journalctl", "-k", "-b", "--no-pager", "-q"]):
        res = run_tool(cmd, timeout_s)
        if res is None:
            reasons.append(f"{cmd[0]} not installed")
            continue
        rc, out, err = res
        if rc == 0 and out.strip():
            return out, " ".join(cmd)
        reasons.append(f"{cmd[0]}: {(err.strip().splitlines() or ['no output'])[0]}")
    return None, "; ".join(reasons)


def parse_nvlink_status(text: str) -> dict[int, tuple[int, int]]:
    """``nvidia-smi nvlink -s`` text -> {gpu index: (active links, links listed)}."""
    links: dict[int, list[bool]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"\s*GPU (\d+):", line)
        if m:
            current = int(m.group(1))
            links.setdefault(current, [])
            continue
        m = re.match(r"\s*Link \d+: (.+)", line)
        if m and current is not None:
            value = m.group(1).strip()
            speed = _number(value)
            links[current].append(not value.startswith("<inactive>") and bool(speed))
    return {gpu: (sum(flags), len(flags)) for gpu, flags in links.items()}


def sysfs_link(bus_id: str, root: str = "/sys/bus/pci/devices") -> tuple[float | None, float | None]:
    """(current, max) link width from sysfs for a live run; (None, None) when not there."""
    folder = os.path.join(root, bus_id)
    values = []
    for name in ("current_link_width", "max_link_width"):
        try:
            with open(os.path.join(folder, name)) as f:
                values.append(_number(f.read()))
        except OSError:
            values.append(None)
    return values[0], values[1]


def read_saved(opts) -> dict[str, str]:
    """The saved outputs named by --nvidia-smi-xml, --dmesg and --nvlink-status, read now and once
    (a pipe such as ``<(nvidia-smi -q -x)`` cannot be read twice), keyed by option."""
    saved: dict[str, str] = {}
    for option, path in (("--nvidia-smi-xml", opts.nvidia_smi_xml), ("--dmesg", opts.dmesg),
                         ("--nvlink-status", opts.nvlink_status)):
        if path:
            saved[option] = read_input(path, option, wait_s=opts.timeout_s).decode("utf-8", "replace")
    return saved


def gather_gpus(opts, saved: dict[str, str]) -> tuple[dict, list[dict], list[str], bool]:
    """(driver info, GPUs, nvidia-smi's lines about GPUs it cannot reach, no driver at all) from
    NVML, a saved nvidia-smi XML or a live nvidia-smi run."""
    lost: list[str] = []
    info, gpus, no_gpu = {}, [], False
    if opts.nvml:
        info, gpus = gather_nvml()
    elif opts.nvidia_smi_xml:
        text = saved["--nvidia-smi-xml"]
        lost = [m.group(0).strip() for m in LOST_LINE.finditer(text)]
        info, gpus = parse_nvidia_smi_xml(text, f"--nvidia-smi-xml {opts.nvidia_smi_xml}")
    else:
        res = run_tool(["nvidia-smi", "-q", "-x"], opts.timeout_s)
        if res is None and not opts.allow_no_gpu:
            raise ScriptError("nvidia-smi not found and --nvml not given: cannot check the GPUs "
                              "(on a CPU-only node add --allow-no-gpu)")
        if res is None:
            no_gpu = True
        else:
            rc, out, err = res
            lost = [m.group(0).strip() for m in LOST_LINE.finditer(out + err)]
            if "<nvidia_smi_log" in out:
                info, gpus = parse_nvidia_smi_xml(out, "nvidia-smi -q -x")
            elif lost:
                pass                                     # every GPU unreachable: reported below
            elif opts.allow_no_gpu:
                no_gpu = True
            else:
                first = (err.strip() or out.strip() or f"exit status {rc}").splitlines()[0]
                raise ScriptError(f"nvidia-smi -q -x failed: {first}")
    return info, gpus, lost, no_gpu


# --- checks ---------------------------------------------------------------------------------

def row(check: str, status: str, detail: str, gpu: dict | None = None) -> dict:
    return {"check": check, "status": status, "detail": detail,
            "gpu": None if gpu is None else gpu["index"], "bus_id": None if gpu is None else gpu["bus_id"]}


def check_count(gpus: list[dict], expect: int | None, lost: list[str]) -> list[dict]:
    rows = [row("gpu_count", "fail", f"nvidia-smi: {line} (fallen off the bus? see Xid 79)")
            for line in lost]
    for r, line in zip(rows, lost, strict=True):
        m = BUS_ID.search(line)
        if m:
            r["bus_id"] = canonical_bus_id(m.group(1))
    names = sorted({g["name"] for g in gpus})
    seen = f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} ({', '.join(names) or 'none'})"
    if expect is None:
        rows.append(row("gpu_count", "pass", f"{seen}; no --expect-gpus given"))
    elif len(gpus) < expect:
        rows.append(row("gpu_count", "fail", f"{seen}, expected {expect}: "
                        f"{expect - len(gpus)} missing (fallen off the bus, or not enumerated)"))
    elif len(gpus) > expect:
        rows.append(row("gpu_count", "warn", f"{seen}, expected only {expect}"))
    else:
        rows.append(row("gpu_count", "pass", f"{seen}, as expected"))
    return rows


def check_gpu(gpu: dict) -> list[dict]:
    rows = []
    # ECC: volatile counts since the driver loaded; aggregate counts over the GPU's life.
    vol, agg = gpu["ecc_volatile_uncorrectable"], gpu["ecc_aggregate_uncorrectable"]
    if gpu["ecc_mode"] == "Disabled":
        rows.append(row("ecc", "warn", "ECC is disabled: memory errors go undetected", gpu))
    elif vol is None and agg is None:
        rows.append(row("ecc", "skip", "no ECC counters reported", gpu))
    elif vol:
        rows.append(row("ecc", "fail", f"{vol:g} uncorrectable ECC errors since the driver loaded "
                        f"(volatile); {agg or 0:g} over the GPU's life", gpu))
    elif agg:
        rows.append(row("ecc", "warn", f"{agg:g} uncorrectable ECC errors over the GPU's life "
                        "(aggregate), none since the driver loaded", gpu))
    else:
        rows.append(row("ecc", "pass", "no uncorrectable ECC errors", gpu))
    # Row remapping (Ampere and newer) / page retirement (older).
    if gpu["remap_failure"] == "Yes":
        rows.append(row("row_remap", "fail", "row remapping FAILED: the GPU qualifies for RMA", gpu))
    elif gpu["remap_pending"] == "Yes":
        rows.append(row("row_remap", "fail", "row remap pending: reset the GPU (nvidia-smi -r) or "
                        "reboot before new work", gpu))
    elif gpu["retirement_pending"] == "Yes":
        rows.append(row("row_remap", "fail", "page retirement pending: reset the GPU or reboot", gpu))
    elif gpu["remap_pending"] is None and gpu["retirement_pending"] is None:
        rows.append(row("row_remap", "skip", "no remapped_rows or retired_pages reported", gpu))
    else:
        unc = gpu["remap_unc"]
        note = f"; {unc:g} rows remapped for uncorrectable errors" if unc else ""
        rows.append(row("row_remap", "pass", f"nothing pending, no failure{note}", gpu))
    # Clock event (throttle) reasons.
    reasons = gpu["clock_reasons"]
    if reasons is None:
        rows.append(row("clocks", "skip", "no clocks_event_reasons reported", gpu))
    else:
        active = {k for k, v in reasons.items() if v == "Active"}
        hard = sorted(active & {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
        soft = sorted(active & {"sw_thermal_slowdown"})
        if hard:
            rows.append(row("clocks", "fail", f"clocks cut by {', '.join(hard)}", gpu))
        elif soft:
            rows.append(row("clocks", "warn", f"clocks reduced by {', '.join(soft)}", gpu))
        else:
            rows.append(row("clocks", "pass", f"active reasons: {', '.join(sorted(active)) or 'none'}", gpu))
    # Temperature against the GPU's own slowdown threshold.
    t, slow = gpu["temp_c"], gpu["temp_slow_c"]
    if t is None or slow is None:
        rows.append(row("temperature", "skip", "no gpu_temp_slow_threshold to compare with", gpu))
    elif t >= slow:
        rows.append(row("temperature", "fail", f"{t:g} C, at or above the slowdown threshold {slow:g} C", gpu))
    elif t >= slow - TEMP_MARGIN_C:
        rows.append(row("temperature", "warn", f"{t:g} C, within {TEMP_MARGIN_C:g} C of slowdown at {slow:g} C", gpu))
    else:
        rows.append(row("temperature", "pass", f"{t:g} C (slowdown at {slow:g} C)", gpu))
    # PCIe link: width lost is a fault; speed (gen) drops at idle by design.
    w, wmax, gen, gmax = gpu["pcie_width"], gpu["pcie_width_max"], gpu["pcie_gen"], gpu["pcie_gen_max"]
    idle = (reasons or {}).get("gpu_idle") == "Active" or gpu["util_pct"] == 0
    if w is None or wmax is None:
        rows.append(row("pcie", "skip", "no PCIe link width reported", gpu))
    elif w < wmax:
        rows.append(row("pcie", "fail", f"link width x{w:g}, max x{wmax:g}: lanes lost (reseat the GPU "
                        "or riser, check lspci -vv LnkSta)", gpu))
    elif gen is not None and gmax is not None and gen < gmax:
        if idle:
            rows.append(row("pcie", "warn", f"x{w:g} gen {gen:g} of {gmax:g} while idle (GPUs lower the "
                            "link speed at idle; re-check under load)", gpu))
        else:
            rows.append(row("pcie", "fail", f"x{w:g} but gen {gen:g} of {gmax:g} under load", gpu))
    else:
        shown = f" gen {gen:g}" if gen is not None else ""
        rows.append(row("pcie", "pass", f"x{w:g}{shown}, at its max", gpu))
    return rows


def check_nvlink(gpus: list[dict], status: dict[int, tuple[int, int]] | None, why: str) -> list[dict]:
    if status is None:
        return [row("nvlink", "skip", why)]
    best = max((active for active, _ in status.values()), default=0)
    if best == 0:
        return [row("nvlink", "pass", "no active NVLink on any GPU (a PCIe-only node)")]
    rows = []
    for gpu in gpus:
        active, listed = status.get(gpu["index"], (0, 0))
        if active < best:
            rows.append(row("nvlink", "fail", f"{active} of {listed} links active, other GPUs have "
                            f"{best}: a link is down", gpu))
        else:
            rows.append(row("nvlink", "pass", f"{active} links active", gpu))
    return rows


def check_xid(gpus: list[dict], log: str | None, why: str) -> list[dict]:
    if log is None:
        return [row("xid", "skip", f"kernel log not readable ({why}); run as root or pass --dmesg FILE")]
    by_bus = {g["bus_id"].rsplit(".", 1)[0]: g for g in gpus}
    found: dict[tuple[str, int], int] = {}
    for m in XID_LINE.finditer(log):
        key = (canonical_bus_id(m.group(1)), int(m.group(2)))
        found[key] = found.get(key, 0) + 1
    if not found:
        return [row("xid", "pass", f"no Xid lines in the kernel log ({why})")]
    rows = []
    for (bus, code), count in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        name, verdict = XID_CODES.get(code, (None, "warn"))
        what = name or "not in this script's map; see NVIDIA's Xid catalog"
        gpu = by_bus.get(bus)
        r = row("xid", verdict, f"Xid {code} ({what}) x{count}", gpu)
        if gpu is None:
            r["bus_id"] = bus
            r["detail"] += " on a GPU nvidia-smi did not list"
        rows.append(r)
    return rows


def run_checks(opts, saved: dict[str, str], gpus: list[dict], lost: list[str], no_gpu: bool) -> list[dict]:
    """Every check's rows: the count and each GPU's own checks, NVLink, then the kernel log's Xids."""
    rows: list[dict] = []
    if no_gpu:
        rows.append(row("gpu_count", "pass", "no NVIDIA driver on this node (--allow-no-gpu)"))
    else:
        rows += check_count(gpus, opts.expect_gpus, lost)
        for gpu in gpus:
            if gpu["pcie_width"] is None and not opts.nvidia_smi_xml:
                cur, top = sysfs_link(gpu["bus_id"])         # older drivers: read the link from /sys
                if cur is not None and top is not None:
                    gpu["pcie_width"], gpu["pcie_width_max"] = cur, top
            rows += check_gpu(gpu)
        # NVLink
        if opts.nvlink_status:
            rows += check_nvlink(gpus, parse_nvlink_status(saved["--nvlink-status"]), "")
        elif opts.nvidia_smi_xml or not gpus:
            rows += check_nvlink(gpus, None, "no --nvlink-status file given with saved outputs")
        else:
            res = run_tool(["nvidia-smi", "nvlink", "-s"], opts.timeout_s)
            if res is None or res[0] != 0:
                rows += check_nvlink(gpus, None, "nvidia-smi nvlink -s did not run")
            else:
                rows += check_nvlink(gpus, parse_nvlink_status(res[1]), "")
    log, why = read_kernel_log((opts.dmesg, saved["--dmesg"]) if opts.dmesg else None, opts.timeout_s)
    rows += check_xid(gpus, log, why)
    return rows


# --- output ---------------------------------------------------------------------------------

def verdict_of(rows: list[dict]) -> str:
    return "unhealthy" if any(r["status"] == "fail" for r in rows) else "healthy"


def format_table(rows: list[dict], n_gpus: int) -> list[str]:
    """One line per finding; the GPUs that pass a check share one line ('all' or 'rest')."""
    lines = [f"{'CHECK':<12} {'GPU':>4}  {'BUS ID':<13} {'STATUS':<6} DETAIL"]
    order = []
    for r in rows:
        if r["check"] not in order:
            order.append(r["check"])
    for check in order:
        mine = [r for r in rows if r["check"] == check]
        passed = [r for r in mine if r["gpu"] is not None and r["status"] == "pass"]
        folded = n_gpus > 1 and len(passed) > 1
        for r in mine:
            if folded and r in passed:
                continue
            gpu = "-" if r["gpu"] is None else str(r["gpu"])
            lines.append(f"{check:<12} {gpu:>4}  {r['bus_id'] or '-':<13} {r['status']:<6} {r['detail']}")
        if folded:
            details = sorted({r["detail"] for r in passed})
            shown = details[0] if len(details) == 1 else f"e.g. {passed[0]['detail']}"
            label = "all" if len(passed) == n_gpus else "rest"
            lines.append(f"{check:<12} {label:>4}  {'-':<13} {'pass':<6} {len(passed)} GPUs: {shown}")
    return lines


def print_report(opts, rows: list[dict], gpus: list[dict], info: dict, source: str) -> int:
    """The table and the verdict line on stdout, the JSON with --json; the exit status."""
    verdict = verdict_of(rows)
    host = socket.gethostname()
    print(f"# {PROG} on {host}: {len(gpus)} GPU(s), driver {info.get('driver_version') or '?'}; "
          f"source {source}")
    for line in format_table(rows, len(gpus)):
        print(line)
    fails = [r for r in rows if r["status"] == "fail"]
    warns = [r for r in rows if r["status"] == "warn"]
    if fails:
        first = fails[0]
        where = "" if first["gpu"] is None and not first["bus_id"] else \
            f"GPU {'?' if first['gpu'] is None else first['gpu']} ({first['bus_id']}) "
        print(f"UNHEALTHY: {len(fails)} failed, {len(warns)} warnings; first: "
              f"{where}{first['check']}: {first['detail']}")
    else:
        print(f"HEALTHY: {len(warns)} warnings")
    if opts.json:
        report = {"schema": SCHEMA, "host": host, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "source": source, "driver_version": info.get("driver_version"), "verdict": verdict,
                  "gpus": [{k: g[k] for k in ("index", "bus_id", "name", "uuid")} for g in gpus],
                  "checks": rows}
        write_atomic(opts.json, json.dumps(report, indent=1) + "\n")
    return EXIT_FINDING if verdict == "unhealthy" else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Check one GPU node's health (ECC, row remapping, "
                                "clocks, temperature, PCIe, NVLink, Xid) and print a pass/warn/fail table.")
    p.add_argument("--expect-gpus", type=number(int, lo=1, hi=1024), metavar="N",
                   help="fail when fewer GPUs are visible")
    p.add_argument("--nvidia-smi-xml", type=nonempty, metavar="FILE",
                   help="read saved 'nvidia-smi -q -x' output instead of running nvidia-smi")
    p.add_argument("--dmesg", type=nonempty, metavar="FILE",
                   help="read a saved kernel log instead of running dmesg / journalctl -k")
    p.add_argument("--nvlink-status", type=nonempty, metavar="FILE",
                   help="read saved 'nvidia-smi nvlink -s' output instead of running it")
    p.add_argument("--nvml", action="store_true",
                   help="read the GPUs through NVML (needs the nvidia-ml-py package) instead of nvidia-smi")
    p.add_argument("--allow-no-gpu", action="store_true",
                   help="pass on a node with no NVIDIA driver (a CPU-only node) instead of failing")
    p.add_argument("--timeout-s", type=number(float, lo=0, hi=600, lo_open=True), default=60.0,
                   metavar="S", help="deadline for each command run (nvidia-smi, dmesg), default 60")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="also write the results as JSON here")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    inputs = [p for p in (opts.nvidia_smi_xml, opts.dmesg, opts.nvlink_status) if p]
    saved = read_saved(opts)
    if opts.nvml and opts.nvidia_smi_xml:
        raise ScriptError("--nvml and --nvidia-smi-xml both name the GPU source; give one", EXIT_USAGE)
    if opts.json:
        check_output(opts.json, "--json", inputs)
    on_stop_signals()  # scancel, a job's time limit: exit 143 with one line, as for Ctrl-C (130)

    source = opts.nvidia_smi_xml or ("NVML" if opts.nvml else "nvidia-smi -q -x")
    info, gpus, lost, no_gpu = gather_gpus(opts, saved)
    rows = run_checks(opts, saved, gpus, lost, no_gpu)
    return print_report(opts, rows, gpus, info, source)


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM (scancel, a job's time limit), raised where the main thread is
    by the handler ``on_stop_signals`` installs. ``signum`` is the signal, ``name`` its name and
    ``status`` the exit status of a run it stops, 128 + signum (130, 143). A KeyboardInterrupt,
    so what catches Ctrl-C catches both; run_main exits with ``status``."""

    def __init__(self, signum: int = 2):  # SIGINT
        import signal
        self.signum, self.status, self.name = signum, 128 + signum, signal.Signals(signum).name
        super().__init__(self.name)


def on_stop_signals() -> list[int]:
    """From now on Ctrl-C and SIGTERM raise Interrupted, so that a run writes what it has before
    it exits with 128 + the signal; Ctrl-C too where a shell started the job with SIGINT ignored
    (a background job). Returns the list that receives each signal as it comes, for the code that
    sees the exception only wrapped (DCP wraps what a save raises)."""
    import signal
    stopped_by: list[int] = []

    def stop(signum, frame):
        stopped_by.append(signum)
        raise Interrupted(signum)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    return stopped_by


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
