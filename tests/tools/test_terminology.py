"""Tests for tools/terminology.yml and the terminology consistency check.

The list must be well formed, and every Chinese page must use the listed
Chinese term for each ``check: true`` entry whose English term appears in the
prose (not code) of its English page.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools import translations as tr

REPO = Path(__file__).resolve().parents[2]
TERMS = tr.load_terminology(REPO / "tools" / "terminology.yml")
ALLOWED_KEYS = {"en", "zh", "keep_english", "note", "check"}


def test_terminology_is_a_list_of_complete_entries():
    assert isinstance(TERMS, list) and len(TERMS) >= 40
    for entry in TERMS:
        assert isinstance(entry, dict), entry
        assert set(entry) <= ALLOWED_KEYS, f"unknown keys in {entry}"
        assert isinstance(entry.get("en"), str) and entry["en"].strip(), entry
        assert isinstance(entry.get("zh"), str) and entry["zh"].strip(), entry
        assert isinstance(entry.get("keep_english"), bool), f"keep_english must be true/false: {entry}"
        assert isinstance(entry.get("check", False), bool), entry
        assert isinstance(entry.get("note", ""), str), entry


def test_no_duplicate_english_terms():
    seen = {}
    for entry in TERMS:
        key = entry["en"].strip().lower()
        assert key not in seen, f"duplicate en term {entry['en']!r}"
        seen[key] = entry


def test_keep_english_entries_keep_the_english_term():
    for entry in TERMS:
        if entry["keep_english"]:
            assert entry["en"].lower() in entry["zh"].lower(), entry
        else:
            assert any("\u4e00" <= ch <= "\u9fff" for ch in entry["zh"]), f"zh has no Chinese: {entry}"


def test_core_terms_present_and_checked():
    by_en = {t["en"].lower(): t for t in TERMS}
    expected = {"bandwidth": "带宽", "latency": "延迟", "throughput": "吞吐量",
                "collective communication": "集合通信", "tensor parallelism": "张量并行",
                "data parallelism": "数据并行", "pipeline parallelism": "流水线并行",
                "mixed precision": "混合精度", "gradient accumulation": "梯度累积"}
    for en, zh in expected.items():
        assert by_en[en]["zh"] == zh and by_en[en].get("check"), en
    for en in ("all-reduce", "busbw", "nccl", "torchrun", "rank"):
        assert by_en[en]["keep_english"], en


def test_term_pattern_whole_words_plurals_and_hyphens():
    assert tr.term_pattern("bandwidth").search("peak Bandwidths are")
    assert not tr.term_pattern("node").search("nodegroup and inter-node")
    assert tr.term_pattern("tensor parallelism").search("tensor-parallelism")
    assert tr.term_pattern("optimizer state").search("the optimizer states")


def test_consistency_checker_catches_a_missing_term(tmp_path):
    """The checker itself: prose counts, code and link targets do not."""
    terms = [{"en": "latency", "zh": "延迟", "keep_english": False, "check": True},
             {"en": "NCCL", "zh": "NCCL", "keep_english": True, "check": True},
             {"en": "throughput", "zh": "吞吐量", "keep_english": False}]  # not checked
    en = tmp_path / "book/en/p.md"
    zh = tmp_path / "book/zh/p.md"
    en.parent.mkdir(parents=True)
    zh.parent.mkdir(parents=True)
    en.write_text("---\ntitle: latency\n---\nThroughput. See [x](latency.md).\n\n"
                  "```\nlatency = 1\n```\n\nUse `latency` and NCCL.\n", encoding="utf-8")
    zh.write_text("吞吐。见 [x](latency.md)。使用 nccl。\n", encoding="utf-8")
    assert tr.terminology_issues(tmp_path, terms) == []  # 'latency' only in front matter/link/code
    en.write_text(en.read_text(encoding="utf-8") + "\nLatency matters.\n", encoding="utf-8")
    assert tr.terminology_issues(tmp_path, terms) == [(zh, "latency", "延迟")]
    zh.write_text("延迟很重要。\n", encoding="utf-8")
    assert tr.terminology_issues(tmp_path, terms) == [(zh, "NCCL", "NCCL")]
    assert len(tr.terminology_issues(tmp_path, terms, only_checked=False)) == 2  # + throughput


def test_consistency_checker_reads_notebook_markdown_cells_only(tmp_path):
    terms = [{"en": "bandwidth", "zh": "带宽", "keep_english": False, "check": True}]
    nb = tmp_path / "notebooks/n/x.py"
    nb.parent.mkdir(parents=True)
    nb.write_text("# %%\nbandwidth = 1\n", encoding="utf-8")
    nb.with_suffix(".ipynb").write_text("{}", encoding="utf-8")
    (tmp_path / "notebooks/n/x.zh.py").write_text("# %%\nbandwidth = 1\n", encoding="utf-8")
    assert tr.terminology_issues(tmp_path, terms) == []
    nb.write_text("# %% [markdown]\n# The bandwidth.\n\n# %%\nbandwidth = 1\n", encoding="utf-8")
    assert len(tr.terminology_issues(tmp_path, terms)) == 1


def test_real_pages_use_the_terminology():
    """Chinese pages use the checked terms wherever their English pages do."""
    if not tr.pairs(REPO):
        pytest.skip("no pages yet (tests/tools/test_translations.py fails on an empty book)")
    issues = tr.terminology_issues(REPO, TERMS)
    report = [f"{zh.relative_to(REPO)}: English uses '{en}', Chinese lacks '{expected}'"
              for zh, en, expected in issues]
    assert not report, "terminology (tools/terminology.yml) not followed:\n" + "\n".join(report)
