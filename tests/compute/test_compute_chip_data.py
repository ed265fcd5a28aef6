"""The spec files of the page "Inside the accelerator": data/compute/on_chip_memory.yml and
data/compute/hbm_generations.yml. Every row sourced, units shown, values in range, HBM
generations in order and self-consistent, cross-checks against data/compute/accelerators.yml,
and both files render in both languages."""

from __future__ import annotations

import math
import re
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from tools.tables import render

ROOT = Path(__file__).resolve().parents[2]
ON_CHIP = ROOT / "data" / "compute" / "on_chip_memory.yml"
HBM = ROOT / "data" / "compute" / "hbm_generations.yml"
ACCELERATORS = ROOT / "data" / "compute" / "accelerators.yml"
MISSING = "—"
# column key -> (unit its titles must name, plausible range)
ON_CHIP_NUMERIC = {
    "units": ("count", (50, 400)), "l2_MB": ("MB", (4, 512)), "llc_MB": ("MB", (32, 1024)),
    "smem_KiB": ("KiB", (16, 512)), "rf_KiB": ("KiB", (64, 1024)), "clock_MHz": ("MHz", (500, 4000)),
}
HBM_NUMERIC = {
    "width_bits": ("bits", (512, 4096)), "pin_Gbps": ("Gbps", (1, 20)),
    "stack_GBps": ("GBps", (100, 5000)), "max_stack_GB": ("GB", (1, 128)),
}
HBM_ORDER = ["HBM2e", "HBM3", "HBM3e", "HBM4"]


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def on_chip() -> dict:
    return load(ON_CHIP)


@pytest.fixture(scope="module")
def hbm() -> dict:
    return load(HBM)


@pytest.fixture(scope="module")
def accelerators() -> dict:
    return {row["name"]: row for row in load(ACCELERATORS)["rows"]}


def value(row: dict, key: str):
    return None if row[key] == MISSING else row[key]


@pytest.mark.parametrize("path", [ON_CHIP, HBM], ids=["on_chip", "hbm"])
def test_every_row_is_sourced_over_https_and_complete(path):
    data = load(path)
    keys = [c["key"] for c in data["columns"]]
    first = keys[0]
    names = [row[first] for row in data["rows"]]
    assert len(names) == len(set(names)), f"{path.name}: duplicate rows"
    for row in data["rows"]:
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        assert sources, row[first]
        for url in sources:
            assert re.fullmatch(r"https://[^\s/]+\.[a-z]{2,}/\S*", url), (row[first], url)
        assert set(keys) <= set(row), f"{row[first]} lacks {set(keys) - set(row)}"


@pytest.mark.parametrize("path, numeric", [(ON_CHIP, ON_CHIP_NUMERIC), (HBM, HBM_NUMERIC)],
                         ids=["on_chip", "hbm"])
def test_numeric_columns_name_their_unit_and_hold_numbers_in_range(path, numeric):
    data = load(path)
    columns = {c["key"]: c for c in data["columns"]}
    first = data["columns"][0]["key"]
    for key, (unit, (lo, hi)) in numeric.items():
        assert columns[key].get("unit") == unit, key
        for lang in ("en", "zh"):
            assert f"({unit})" in columns[key]["title"][lang], (key, lang)
        for row in data["rows"]:
            v = value(row, key)
            if v is None:
                continue
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (row[first], key, v)
            assert lo <= v <= hi, f"{row[first]} {key}={v} outside [{lo}, {hi}] {unit}"


def test_hbm_generations_are_ordered_and_bandwidth_grows(hbm):
    rows = hbm["rows"]
    assert [r["gen"] for r in rows] == HBM_ORDER
    for older, newer in pairwise(rows):
        assert newer["stack_GBps"] > older["stack_GBps"], (older["gen"], newer["gen"])
        assert newer["width_bits"] >= older["width_bits"], (older["gen"], newer["gen"])


def test_hbm_bandwidth_is_pin_rate_times_width(hbm):
    for row in hbm["rows"]:
        product = row["pin_Gbps"] * row["width_bits"] / 8
        assert row["stack_GBps"] == pytest.approx(product, rel=0.01), row["gen"]


def test_hbm_stack_heights_are_standard_heights(hbm):
    for row in hbm["rows"]:
        heights = [int(h) for h in re.findall(r"\d+", str(row["heights"]))]
        assert heights and all(h in (2, 4, 8, 12, 16) for h in heights), row["gen"]


def test_hbm_used_by_matches_the_accelerator_table(hbm, accelerators):
    checked = 0
    for row in hbm["rows"]:
        for name in row["used_by"]:
            if name not in accelerators:  # renamed or dropped there: nothing to compare
                continue
            checked += 1
            assert str(accelerators[name]["mem_type"]).lower() == row["gen"].lower(), (
                f"{name} is listed under {row['gen']} but accelerators.yml says "
                f"{accelerators[name]['mem_type']}")
    assert checked >= 3, "used_by no longer names rows of accelerators.yml"


def test_nvidia_shared_memory_and_registers_follow_the_cuda_guide(on_chip):
    # CUDA C++ Programming Guide, Table 27: 164 KB (CC 8.0) and 228 KB (9.0, 10.0) of shared
    # memory per SM; 64 K 32-bit registers per SM = 256 KiB.
    expected = {"8.0": 164, "9.0": 228, "10.0": 228}
    for row in on_chip["rows"]:
        cc = re.search(r"CC (\d+\.\d+)", row["arch"])
        if cc:
            assert row["smem_KiB"] == expected[cc.group(1)], row["name"]
            assert row["rf_KiB"] == 64 * 1024 * 4 // 1024, row["name"]


def test_units_times_clock_gives_the_published_dense_bf16_peak(on_chip, accelerators):
    """units x clock x (bf16 FLOPs per unit per clock) must be the peak accelerators.yml quotes,
    with a per-unit rate that is a power of two: a wrong SM count or clock shows up here."""
    checked = 0
    for row in on_chip["rows"]:
        acc = accelerators.get(row["accelerator"])
        if acc is None or value(row, "units") is None or value(row, "clock_MHz") is None:
            continue
        peak = acc["bf16_dense"]
        if peak == MISSING:
            continue
        per_unit_clock = peak * 1e12 / (row["units"] * row["clock_MHz"] * 1e6)
        nearest = 2 ** round(math.log2(per_unit_clock))
        assert per_unit_clock == pytest.approx(nearest, rel=0.02), (row["name"], per_unit_clock)
        checked += 1
    assert checked >= 3


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("path", [ON_CHIP, HBM], ids=["on_chip", "hbm"])
def test_renders_in_both_languages(path, lang):
    data = load(path)
    table = render(path, lang)
    header = next(line for line in table.splitlines() if line.startswith("| "))
    assert header.count("|") == len(data["columns"]) + 2  # + the source column
    assert table.count("\n| ") >= len(data["rows"]) + 1
    assert data["caption"][lang] in table and data["notes"][lang] in table
    if lang == "zh":
        assert "来源" in header
