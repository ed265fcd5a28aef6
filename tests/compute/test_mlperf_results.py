"""data/compute/mlperf_results.yml: selected published MLPerf results. Every row meets its schema
(tools/schemas/data/compute/mlperf_results.schema.json, checked for every data file by
tests/tools/test_data_schemas.py); here, what a schema cannot say: each row's source is the run
it names, its division matches the repository folder it sits in, the counts agree with the
system's name, and the page renders the table in both languages."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

from tools.tables import data_problems, data_schema, render

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "compute" / "mlperf_results.yml"


@pytest.fixture(scope="module")
def data() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def test_the_file_has_its_own_schema_and_meets_it(data):
    assert data_schema(DATA).name == "mlperf_results.schema.json"
    assert data_problems(data, DATA.relative_to(ROOT)) == []
    broken = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    broken["rows"][0]["division"] = "closed-ish"
    assert data_problems(broken, DATA.relative_to(ROOT)), "a division outside closed/open is refused"


def test_each_source_is_the_run_it_names_in_its_round_and_division(data):
    for row in data["rows"]:
        version = row["round"].split()[-1]                       # "v6.1"
        suite = row["round"].split()[0].lower()                  # "inference"
        prefix = f"https://github.com/mlcommons/{suite}_results_{version}/tree/main/"
        assert row["source"].startswith(prefix), row["source"]
        assert unquote(row["source"][len(prefix):]) == row["location"], row["location"]
        assert row["location"].split("/")[0] == row["division"], row["location"]
        assert f"/{row['submitter']}/" in row["location"], (row["submitter"], row["location"])
        assert f"/{row['benchmark']}/{row['scenario']}/" in row["location"], row["location"]


def test_counts_agree_with_the_system_and_units_with_the_scenario(data):
    for row in data["rows"]:
        assert row["nodes"] <= row["accelerators"], row["system"]
        named = re.search(r"(\d+)x ", row["system"]) or re.search(r"(\d+)x", row["location"])
        if named:
            assert int(named.group(1)) == row["accelerators"], (row["system"], row["accelerators"])
        latency = row["scenario"] in ("SingleStream", "MultiStream")
        assert ("latency" in row["unit"]) == latency, (row["scenario"], row["unit"])


def test_the_selection_shows_what_the_page_explains(data):
    rows = data["rows"]
    assert 10 <= len(rows) <= 16
    assert {"closed", "open"} <= {r["division"] for r in rows}
    assert {"available", "rdi"} <= {r["category"] for r in rows}
    assert {"Offline", "Server", "SingleStream"} <= {r["scenario"] for r in rows}
    same_hw = {(r["system"], r["benchmark"], r["scenario"]) for r in rows if r["division"] == "open"}
    assert any((r["system"], r["benchmark"], r["scenario"]) in same_hw
               for r in rows if r["division"] == "closed"), "one system in both divisions"
    sizes = {r["accelerators"] for r in rows if r["benchmark"] == "deepseek-r1"}
    assert len(sizes) >= 3, "one benchmark at several system sizes"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_view_renders(data, lang):
    table = render(f"{DATA}#results", lang)
    assert f"**{data['views']['results']['caption'][lang]}**" in table
    assert table.count("\n| ") >= len(data["rows"]) + 1
    assert "github.com/mlcommons/inference_results_v6.1" in table
