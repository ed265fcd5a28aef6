"""The Network chapter's spec files (data/network/*.yml): every row sourced over https, units in
the titles of numeric columns, values in plausible ranges, the arithmetic between columns
consistent, generations in order, and every file rendered in both languages and placed on its
page in both languages (the NIC and switch tables on network/hardware.md, the rest on the index)."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
import yaml

from tests.launchers import REPO
from tools.tables import render_data_table

DATA = REPO / "data" / "network"
FILES = ("pcie", "gpu_links", "infiniband", "scale_out", "nics", "switches")
PAGE = {"nics": "hardware.md", "switches": "hardware.md"}  # the others: index.md
MISSING = "—"
# column key -> (unit its English and Chinese titles must name, plausible range)
NUMERIC = {
    "gpu_links": {
        "links": (None, (1, 64)), "link_GBps_unidir": ("GBps", (10, 500)),
        "link_GBps_bidir": ("GBps", (20, 1000)), "gpu_GBps_unidir": ("GBps", (100, 5000)),
        "gpu_GBps_bidir": ("GBps", (200, 10000)), "domain": (None, (2, 100000)),
    },
    "infiniband": {
        "lanes": (None, (1, 12)), "lane_Gbps": ("Gbps", (10, 400)),
        "port_Gbps": ("Gbps", (40, 1600)), "port_GBps": ("GBps", (5, 200)),
    },
    "scale_out": {
        "accels": (None, (1, 72)), "node_Gbps": ("Gbps", (100, 20000)),
        "per_accel_Gbps": ("Gbps", (10, 1600)), "per_accel_GBps": ("GBps", (1, 200)),
    },
    "nics": {"port_Gbps": ("Gbps", (100, 1600)), "port_GBps": ("GBps", (12.5, 200))},
    "switches": {
        "ports": (None, (8, 512)), "port_Gbps": ("Gbps", (100, 3200)),
        "capacity_Tbps": ("Tbps", (1, 400)), "headline_Tbps": ("Tbps", (1, 800)),
        "radix": (None, (8, 2048)), "radix_speed": ("Gbps", (25, 3200)),
    },
    "pcie": {
        "gts": ("GT/s", (2, 256)), "lane_GBps_unidir": ("GBps", (0.2, 32)),
        "x16_GBps_unidir": ("GBps", (3, 500)), "x16_GBps_bidir": ("GBps", (6, 1000)),
    },
}


def load(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yml").read_text(encoding="utf-8"))


def num(row: dict, key: str):
    value = row[key]
    return None if value == MISSING else value


@pytest.mark.parametrize("name", FILES)
def test_every_row_is_complete_and_https_sourced(name):
    data = load(name)
    keys = [c["key"] for c in data["columns"]]
    for number, row in enumerate(data["rows"], 1):
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        assert sources and all(re.fullmatch(r"https://\S+", s) for s in sources), (name, number)
        assert not any("wikipedia.org" in s for s in sources if name != "pcie"), (
            f"{name} row {number}: cite the vendor or standard document")
        assert set(keys) <= set(row), f"{name} row {number} lacks {set(keys) - set(row)}"


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_numeric_columns_name_their_unit_and_stay_in_range(name):
    data = load(name)
    titles = {c["key"]: c["title"] for c in data["columns"]}
    for key, (unit, (lo, hi)) in NUMERIC[name].items():
        if unit:
            assert f"({unit}" in titles[key]["en"] and f"({unit}" in titles[key]["zh"], (name, key)
        for row in data["rows"]:
            value = num(row, key)
            if value is None:
                continue
            assert isinstance(value, (int, float)) and not isinstance(value, bool), (name, key, value)
            assert lo <= value <= hi, f"{name}: {key}={value} outside [{lo}, {hi}]"


def test_gpu_links_directions_and_link_counts_agree():
    for row in load("gpu_links")["rows"]:
        label = f"{row['link']} / {row['gpu']}"
        assert num(row, "gpu_GBps_bidir") == 2 * num(row, "gpu_GBps_unidir"), label
        if num(row, "link_GBps_unidir") is not None:
            assert row["link_GBps_bidir"] == 2 * row["link_GBps_unidir"], label
            assert row["links"] * row["link_GBps_unidir"] == row["gpu_GBps_unidir"], label


def test_gpu_links_generations_are_in_order_within_a_family():
    by_family: dict[str, list[dict]] = {}
    for row in load("gpu_links")["rows"]:
        by_family.setdefault(row["family"], []).append(row)
    assert {"nvlink", "amd", "tpu", "gaudi"} <= set(by_family)
    for family, rows in by_family.items():
        totals = [row["gpu_GBps_bidir"] for row in rows]
        assert totals == sorted(totals), f"{family}: rows out of generation order {totals}"
    versions = [float(r["link"].split()[1]) for r in by_family["nvlink"]]
    assert versions == sorted(versions)
    nvl72 = [r for r in by_family["nvlink"] if "NVL72" in r["gpu"]]
    assert nvl72 and nvl72[0]["domain"] == 72


def test_infiniband_port_is_four_lanes_and_gbps_over_eight():
    rows = load("infiniband")["rows"]
    assert [r["name"] for r in rows] == ["EDR", "HDR", "NDR", "XDR"]
    for row in rows:
        assert row["port_Gbps"] == row["lanes"] * row["lane_Gbps"], row["name"]
        assert row["port_GBps"] == pytest.approx(row["port_Gbps"] / 8), row["name"]
    rates = [r["port_Gbps"] for r in rows]
    assert all(b == 2 * a for a, b in pairwise(rates)), "each generation doubles the rate"


def test_scale_out_per_node_is_per_accelerator_times_count():
    for row in load("scale_out")["rows"]:
        assert row["per_accel_Gbps"] * row["accels"] == row["node_Gbps"], row["system"]
        assert row["per_accel_GBps"] == pytest.approx(row["per_accel_Gbps"] / 8), row["system"]


def test_nic_gbps_is_gbps_over_eight():
    for row in load("nics")["rows"]:
        assert row["port_GBps"] == pytest.approx(row["port_Gbps"] / 8), row["name"]


def test_switch_capacity_is_ports_times_speed_and_headlines_are_one_or_two_directions():
    rows = load("switches")["rows"]
    names = " ".join(r["name"] for r in rows)
    for wanted in ("Quantum-2", "Quantum-X800", "Spectrum-4", "Tomahawk 5", "Tomahawk 6", "Jericho3-AI"):
        assert wanted in names, wanted
    for row in rows:
        front_panel_Tbps = row["ports"] * row["port_Gbps"] / 1000
        assert row["capacity_Tbps"] == pytest.approx(front_panel_Tbps), row["name"]
        headline = num(row, "headline_Tbps")
        if headline is not None:  # a vendor counts one direction, or twice that
            assert min(abs(headline / front_panel_Tbps - k) for k in (1, 2)) < 1e-9, row["name"]
        # a breakout never adds bandwidth: more, slower ports share the same front panel
        assert row["radix"] * row["radix_speed"] <= row["ports"] * row["port_Gbps"], row["name"]
        assert row["radix"] >= row["ports"], row["name"]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", FILES)
def test_renders_and_is_placed_on_the_page(name, lang):
    data = load(name)
    table = render_data_table(DATA / f"{name}.yml", lang)
    body = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(body) == len(data["rows"]) + 1
    assert body[0].count("|") == len(data["columns"]) + 2          # + the source column
    assert ("来源" if lang == "zh" else "Source") in body[0]
    page = (REPO / "book" / lang / "network" / PAGE.get(name, "index.md")).read_text(encoding="utf-8")
    assert f"<!-- data-table: data/network/{name}.yml -->" in page
