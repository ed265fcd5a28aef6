"""The accelerator spec file data/compute/accelerators.yml: every row sourced, units consistent,
dense/sparse and dtype orderings sane, views renderable in both languages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tools.tables import render

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "compute" / "accelerators.yml"
MISSING = "—"
# column key -> (unit that its English title must name, plausible range for a value)
NUMERIC = {
    "tf32_dense": ("TFLOPS", (50, 5000)), "bf16_dense": ("TFLOPS", (100, 10000)),
    "bf16_sparse": ("TFLOPS", (100, 20000)), "fp8_dense": ("TFLOPS", (100, 20000)),
    "fp8_sparse": ("TFLOPS", (100, 40000)), "mem_GB": ("GB", (8, 1000)),
    "mem_TBps": ("TBps", (0.5, 30)), "power_W": ("W", (100, 3000)),
}


@pytest.fixture(scope="module")
def data() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def value(row: dict, key: str):
    v = row[key]
    return None if v == MISSING else v


def test_every_row_has_https_sources_and_all_columns(data):
    keys = [c["key"] for c in data["columns"]]
    names = [row["name"] for row in data["rows"]]
    assert len(names) == len(set(names)), "duplicate accelerator rows"
    for row in data["rows"]:
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        assert sources and all(re.fullmatch(r"https://\S+", s) for s in sources), row["name"]
        assert set(keys) <= set(row), f"{row['name']} lacks {set(keys) - set(row)}"


def test_units_are_declared_shown_and_values_are_numbers_in_range(data):
    columns = {c["key"]: c for c in data["columns"]}
    for key, (unit, (lo, hi)) in NUMERIC.items():
        assert columns[key].get("unit") == unit, key
        # The reader sees the unit: in the column title, or in the caption of every view
        # that shows the column.
        if f"({unit})" not in columns[key]["title"]["en"]:
            views = [v for v in data["views"].values() if key in v["columns"]]
            assert views, key
            for view in views:
                assert unit in view["caption"]["en"] and unit in view["caption"]["zh"], key
        else:
            assert f"({unit})" in columns[key]["title"]["zh"], key
        for row in data["rows"]:
            v = value(row, key)
            if v is None:
                continue
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (row["name"], key, v)
            assert lo <= v <= hi, f"{row['name']} {key}={v} outside [{lo}, {hi}] {unit}"


def test_sparse_is_at_most_twice_dense_and_never_below(data):
    for row in data["rows"]:
        for dense_key, sparse_key in (("bf16_dense", "bf16_sparse"), ("fp8_dense", "fp8_sparse")):
            dense, sparse = value(row, dense_key), value(row, sparse_key)
            if dense is not None and sparse is not None:
                assert dense <= sparse <= 2.05 * dense, (row["name"], dense_key, dense, sparse)


def test_lower_precision_is_never_slower(data):
    for row in data["rows"]:
        tf32, bf16, fp8 = (value(row, k) for k in ("tf32_dense", "bf16_dense", "fp8_dense"))
        if tf32 is not None and bf16 is not None:
            assert tf32 <= bf16, row["name"]
        if bf16 is not None and fp8 is not None:
            assert bf16 <= fp8, row["name"]


def test_variants_that_share_silicon_share_compute(data):
    rows = {row["name"]: row for row in data["rows"]}
    compute = ("tf32_dense", "bf16_dense", "bf16_sparse", "fp8_dense", "fp8_sparse")
    for a, b in (("NVIDIA H100 SXM", "NVIDIA H200 SXM"), ("AMD MI300X", "AMD MI325X"),
                 ("NVIDIA A100 SXM 80GB", "NVIDIA A100 PCIe 80GB")):
        assert [rows[a][k] for k in compute] == [rows[b][k] for k in compute], (a, b)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("view", [None, "compute", "memory", "survey"])
def test_views_render(data, lang, view):
    target = f"{DATA}#{view}" if view else DATA
    table = render(target, lang)
    columns = data["views"][view]["columns"] if view else [c["key"] for c in data["columns"]]
    header = table.split("\n| ", 1)[0] if table.startswith("|") else table.split("\n\n", 1)[1]
    assert header.splitlines()[0].count("|") == len(columns) + 2  # + the source column
    assert table.count("\n| ") >= len(data["rows"]) + 1
