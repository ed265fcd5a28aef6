"""The sizing chapter's table of published models' training tokens per parameter,
data/models/training_tokens.yml, checked for internal consistency: every row names its source,
and every printed ratio is the ratio of the printed counts (tokens_T * 1000 / params_B, and over
the active parameters for the MoE row) to the precision it is printed with."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data/models/training_tokens.yml"


def load() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


ROWS = load()["rows"]


def half_unit(printed) -> float:
    """Half a unit of the last printed digit: 0.5 for 286, 0.05 for 38.5."""
    return 0.5 * 10.0 ** Decimal(str(printed)).as_tuple().exponent


def test_columns_and_rows_are_complete():
    data = load()
    keys = [c["key"] for c in data["columns"]]
    assert {"model", "params_B", "tokens_T", "tokens_per_param"} <= set(keys)
    for column in data["columns"]:
        assert set(column["title"]) == {"en", "zh"}, column
    assert set(data["caption"]) == {"en", "zh"}
    for row in ROWS:
        assert all(k in row for k in keys), row["model"]
        for key in keys:  # text cells are either plain or carry both languages
            if isinstance(row[key], dict):
                assert set(row[key]) == {"en", "zh"}, (row["model"], key)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["model"])
def test_row_has_a_source_url(row):
    sources = row.get("source")
    sources = sources if isinstance(sources, list) else [sources]
    assert sources and all(isinstance(s, str) and s.startswith("https://") for s in sources)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["model"])
def test_tokens_per_parameter_is_tokens_over_params(row):
    params, tokens = float(row["params_B"]), float(row["tokens_T"])
    assert params > 0 and tokens > 0
    ratio = tokens * 1000 / params
    assert abs(ratio - row["tokens_per_param"]) <= half_unit(row["tokens_per_param"]), ratio


@pytest.mark.parametrize("row", [r for r in ROWS if "active_B" in r], ids=lambda r: r["model"])
def test_tokens_per_active_parameter(row):
    assert 0 < row["active_B"] < row["params_B"]
    ratio = float(row["tokens_T"]) * 1000 / row["active_B"]
    printed = row["tokens_per_active_param"]
    assert abs(ratio - printed) <= half_unit(printed), ratio
    assert str(printed) in row["note"]["en"] and str(printed) in row["note"]["zh"]


def test_the_table_renders_in_both_languages():
    from tools import tables

    for lang in ("en", "zh"):
        text = tables.render_data_table(DATA, lang)
        assert text.count("\n| ") == len(ROWS) + 1  # header and one line per row
