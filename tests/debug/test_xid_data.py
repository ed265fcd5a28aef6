"""data/debug/xid_errors.yml: the Xid table of the GPU and node health page. Every row is complete
in both languages, cites a primary source, renders, and every Xid the page names is in it."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.launchers import REPO
from tools.tables import render_data_table

DATA = REPO / "data" / "debug" / "xid_errors.yml"
TEXT_COLUMNS = ("meaning", "cause", "action")
PRIMARY = ("https://docs.nvidia.com/",)
# Codes the brief and the page rely on; dropping one from the file must fail here.
REQUIRED = {13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154}


def rows() -> list[dict]:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))["rows"]


def test_codes_are_unique_integers_and_cover_the_common_ones():
    codes = [r["code"] for r in rows()]
    assert all(isinstance(c, int) and not isinstance(c, bool) for c in codes), codes
    assert len(codes) == len(set(codes)), "duplicate Xid codes"
    assert codes == sorted(codes), "keep the rows in code order"
    assert REQUIRED <= set(codes), f"missing: {sorted(REQUIRED - set(codes))}"


@pytest.mark.parametrize("row", rows(), ids=lambda r: f"xid{r['code']}")
def test_row_is_complete_in_both_languages_with_a_primary_source(row):
    assert re.fullmatch(r"[A-Z][A-Z0-9_]+", row["mnemonic"]), row["mnemonic"]
    for key in TEXT_COLUMNS:
        cell = row[key]
        assert isinstance(cell, dict) and set(cell) == {"en", "zh"}, f"{key}: needs en and zh"
        assert cell["en"].strip() and cell["zh"].strip(), f"{key}: empty text"
        assert re.search(r"[\u4e00-\u9fff]", cell["zh"]), f"{key}: zh text has no Chinese"
    sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
    assert sources and all(s.startswith(PRIMARY) for s in sources), sources


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_renders_in_both_languages(lang):
    table = render_data_table(DATA, lang)
    body = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(body) == len(rows()) + 1                       # header + one line per row
    assert "| 79 | ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS |" in table
    assert ("来源" if lang == "zh" else "Source") in body[0]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_codes_named_on_the_page_are_in_the_file(lang):
    page = REPO / "book" / lang / "debug" / "node-health.md"
    if not page.exists():
        pytest.fail(f"{page.relative_to(REPO)} is missing")
    text = page.read_text(encoding="utf-8")
    assert "<!-- data-table: data/debug/xid_errors.yml#triage -->" in text
    named = {int(c) for c in re.findall(r"\bXid (\d+)", text)}
    named |= {int(c) for group in re.findall(r"\bXids? ((?:\d+(?:/|, | and | or ))+\d+)", text)
              for c in re.findall(r"\d+", group)}
    assert named, "the page names no Xid code"
    missing = named - {r["code"] for r in rows()}
    assert not missing, f"the page names Xid codes the table lacks: {sorted(missing)}"
