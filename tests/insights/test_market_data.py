"""The Insights chapter's market tables (data/insights/*.yml, book/*/insights/market.md): each
meets its schema (a source and an as_of month on every row), no as_of lies in the future, the
per-GPU figures are the instance (or system) figures divided by the GPU count, a price range runs
low to high, and each table is placed on the market page in both languages."""

from __future__ import annotations

import datetime
import math

import pytest
import yaml

from tests.launchers import REPO
from tools.tables import data_problems

DATA = REPO / "data" / "insights"
FILES = ("gpu_rental", "purchase_prices", "rack_power", "lead_times")
# file -> (total column, per-GPU column): per-GPU = total / gpus, to the cent (or watt)
DIVIDED = {"gpu_rental": ("instance_usd_h", "gpu_usd_h"), "rack_power": ("kw", "kw_per_gpu")}


def load(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", FILES)
def test_every_row_has_a_source_and_a_month_that_has_happened(name):
    path = DATA / f"{name}.yml"
    data = load(name)
    assert data_problems(data, path.relative_to(REPO)) == []
    this_month = datetime.date.today().strftime("%Y-%m")
    for row in data["rows"]:
        assert row["source"], row
        assert "2020-01" <= row["as_of"] <= this_month, f"{name}: as_of {row['as_of']} is not a past month"


def test_the_schema_refuses_a_row_without_as_of_or_with_a_bad_month():
    path = (DATA / "gpu_rental.yml").relative_to(REPO)
    data = load("gpu_rental")
    del data["rows"][0]["as_of"]
    data["rows"][1]["as_of"] = "2026-13"
    problems = data_problems(data, path)
    assert any("row 1" in p and "as_of" in p for p in problems), problems
    assert any("row 2" in p and "as_of" in p for p in problems), problems


@pytest.mark.parametrize("name", sorted(DIVIDED))
def test_per_gpu_figures_are_the_total_divided_by_the_gpu_count(name):
    total, per_gpu = DIVIDED[name]
    for row in load(name)["rows"]:
        assert math.isclose(row[per_gpu], row[total] / row["gpus"], abs_tol=0.005), row


def test_price_ranges_run_from_low_to_high():
    for row in load("purchase_prices")["rows"]:
        assert 0 < row["usd_low"] <= row["usd_high"], row


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_table_is_on_the_market_page(lang):
    page = (REPO / "book" / lang / "insights" / "market.md").read_text(encoding="utf-8")
    for name in FILES:
        assert f"<!-- data-table: data/insights/{name}.yml -->" in page, (lang, name)
