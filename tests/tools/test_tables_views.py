"""tools/tables.py: FILE#VIEW selects a view of a data file; results of the compute benchmarks
(mamf_finder, mem_bandwidth) render with their captions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.tables import TableError, render, split_view

DATA = """
caption: {en: All, zh: 全部}
columns:
  - {key: a, title: {en: A, zh: 甲}}
  - {key: b, title: {en: B, zh: 乙}}
  - {key: c, title: {en: C, zh: 丙}}
rows:
  - {a: 1, b: 2, c: 3, source: "https://example.org/x"}
views:
  narrow: {caption: {en: Narrow, zh: 窄}, columns: [c, a], notes: {en: "n.", zh: "注。"}}
"""


@pytest.fixture
def data_file(tmp_path) -> Path:
    path = tmp_path / "t.yml"
    path.write_text(DATA, encoding="utf-8")
    return path


def test_split_view():
    assert split_view("data/x.yml#memory") == (Path("data/x.yml"), "memory")
    assert split_view(Path("data/x.yml")) == (Path("data/x.yml"), None)


def test_view_keeps_only_its_columns_in_its_order(data_file):
    full = render(data_file, "en")
    assert "**All**" in full and "| A | B | C | Source |" in full
    narrow = render(f"{data_file}#narrow", "zh")
    assert "**窄**" in narrow and "| 丙 | 甲 | 来源 |" in narrow and "| 3 | 1 |" in narrow
    assert narrow.rstrip().endswith("注。") and "乙" not in narrow


MIXED = """
columns:
  - {key: name, title: {en: Model, zh: 模型}}
  - {key: experts, title: {en: Experts, zh: 专家数}}
rows:
  - {name: dense-a, source: "https://example.org/a"}
  - {name: moe-b, experts: 8, source: "https://example.org/b"}
views:
  moe: {columns: [name, experts], rows_with: experts}
  none: {columns: [name], rows_with: shared}
"""


def test_rows_with_keeps_only_the_rows_that_have_the_key(tmp_path):
    path = tmp_path / "m.yml"
    path.write_text(MIXED, encoding="utf-8")
    assert "| moe-b | 8 |" in render(f"{path}#moe") and "dense-a" not in render(f"{path}#moe")
    with pytest.raises(TableError, match="row 1 lacks experts"):
        render(path)  # without the view every row needs every column
    with pytest.raises(TableError, match="no row has 'shared'"):
        render(f"{path}#none")


def test_unknown_view_and_view_of_results_fail(data_file, tmp_path):
    with pytest.raises(TableError, match="no view 'wide'"):
        render(f"{data_file}#wide")
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"benchmark": "mem_bandwidth", "results": []}))
    with pytest.raises(TableError, match="no view '#best' for mem_bandwidth"):
        render(f"{results}#best")


def test_mamf_best_view_keeps_the_fastest_shapes_of_each_dtype(tmp_path):
    rows = [{"m": m, "n": 8, "k": 8, "dtype": dtype, "mean_ms": 1.0, "mean_tflops": m / 2,
             "median_tflops": m / 2, "max_tflops": float(m)}
            for dtype in ("bf16", "fp8") for m in range(1, 9)]
    path = tmp_path / "mamf.json"
    path.write_text(json.dumps({
        "benchmark": "mamf_finder", "schema_version": 1, "device": "gpu", "torch_version": "2.x",
        "warmup": 1, "iters": 3, "date_utc": "2026-01-02T03:04:05Z", "command": "python x.py",
        "dtypes": ["bf16", "fp8"], "results": rows,
        "best": {d: rows[7 if d == "bf16" else 15] for d in ("bf16", "fp8")}}))
    text = render(f"{path}#best", "en")
    shown = [line.split("|")[1:5] for line in text.splitlines() if line.startswith("| ") and
             line.split("|")[4].strip() in ("bf16", "fp8")]
    assert [(int(m), d.strip()) for m, _, _, d in shown] == \
        [(m, d) for d in ("bf16", "fp8") for m in (8, 7, 6, 5, 4)]
    assert "the 5 fastest shapes of each dtype, of 16 measured" in text
    assert "共测 16 个" in render(f"{path}#best", "zh")


def test_compute_results_render_with_captions(tmp_path):
    common = {"schema_version": 1, "device": "cpu", "torch_version": "2.x", "warmup": 1,
              "iters": 3, "date_utc": "2026-01-02T03:04:05Z", "command": "python x.py"}
    mamf = tmp_path / "mamf.json"
    row = {"m": 8, "n": 16, "k": 32, "dtype": "bf16", "mean_ms": 1.0, "mean_tflops": 0.5,
           "median_tflops": 0.6, "max_tflops": 0.7}
    mamf.write_text(json.dumps({**common, "benchmark": "mamf_finder", "results": [row],
                                "best": {"bf16": row}}))
    text = render(mamf, "en")
    assert "| 8 | 16 | 32 | bf16 | 1.000 | 0.500 | 0.600 | 0.700 |" in text
    assert "bf16 0.700 TFLOPS (8x16x32)" in text and "2026-01-02" in text
    bw = tmp_path / "bw.json"
    bw.write_text(json.dumps({**common, "benchmark": "mem_bandwidth",
                              "time": "median of individually timed copies (perf_counter)",
                              "results": [{"test": "host_copy", "size_bytes": 1048576,
                                           "time_us": 100.0, "GBps": 10.49, "traffic_GBps": 20.97}],
                              "peak_GBps": {"host_copy": 10.49}}))
    zh = render(bw, "zh")
    assert "| 主机内存拷贝 | 1 MiB | 100.0 | 10.49 | 20.97 |" in zh
    assert "逐次计时拷贝的中位数" in zh and "主机内存拷贝 10.49 GBps" in zh


def test_results_table_aligns_names_left_and_numbers_right():
    table = render(Path("results/inference/kv_cache_calculator-all-1x80gb.json"), "en")
    assert table.splitlines()[1] == "|:--|" + "--:|" * 6, table.splitlines()[1]
    sizes = render(Path("results/compute/mamf_finder-cpu.json"), "en")  # first column: M, a number
    assert sizes.splitlines()[1].startswith("|--:|")


def test_a_change_that_rounds_to_zero_has_no_sign():
    # bf16 weights of the quantize_weights run move bits/byte by less than 0.00005 (a tiny negative)
    table = render(Path("results/inference/quantize_weights-cpu.json"), "en")
    assert "-0.0000" not in table and "| bf16 | 1.4659 | 0.0000 (0.00%) |" in table
    assert re.search(r"\| int4 \| [0-9.]+ \| \+0\.[0-9]{4} \(\+[0-9.]+%\) \|", table)  # a loss keeps its +


# --- every results file of a benchmark (<!-- results-table: BENCHMARK --> or a glob) ----------

def _mamf_file(folder: Path, name: str, device: str, tflops: float, **extra) -> Path:
    row = {"m": 8, "n": 16, "k": 32, "dtype": "bf16", "mean_ms": 1.0, "mean_tflops": tflops / 2,
           "median_tflops": tflops / 2, "max_tflops": tflops}
    path = folder / name
    path.write_text(json.dumps({"benchmark": "mamf_finder", "schema_version": 1, "device": device,
                                "date_utc": "2026-01-02T03:04:05Z", "command": "python x.py",
                                "dtypes": ["bf16"], "results": [row], **extra}))
    return path


def test_summary_has_one_row_per_measured_file_and_published_figures_apart(tmp_path):
    from tools.tables import render_results_summary
    _mamf_file(tmp_path, "mamf_finder-a.json", "GPU A", 100.0)
    _mamf_file(tmp_path, "mamf_finder-b.json", "GPU B", 250.0)
    (tmp_path / "mamf_finder-published.json").write_text(json.dumps({
        "benchmark": "mamf_finder", "schema_version": 1, "origin": "published", "device": "various",
        "date_utc": "2026-01-02T00:00:00Z", "versions": {}, "published_by": "Someone",
        "results": [{"device": "GPU C", "dtype": "fp8", "mean_tflops": 900.0, "spec_tflops": 1000,
                     "source": "https://example.org/c"}]}))
    text = render_results_summary(f"{tmp_path}/mamf_finder-*.json", "en")
    ours, theirs = text.split("| Device | dtype | Mean TFLOPS |")
    assert "| GPU A | bf16 | 100.0 | 50.0 | 8×16×32 | 2026-01-02 | `mamf_finder-a.json` |" in ours
    assert "| GPU B | bf16 | 250.0 |" in ours and "GPU C" not in ours
    assert "| GPU C | fp8 | 900.0 |" in text and "[[1]](https://example.org/c)" in text
    assert "1,000" not in text, "the source's own peak is not shown (the book's peaks: accelerators.yml)"
    assert "Published by others" in theirs and "Someone" in theirs and "GPU A" not in theirs
    assert "他人发表" in render_results_summary(f"{tmp_path}/mamf_finder-*.json", "zh")


def test_summary_of_the_committed_files_lists_each_of_them():
    """The marker by benchmark name renders every committed file of it (a new file adds a row)."""
    files = sorted(Path("results").glob("*/mem_bandwidth-*.json"))
    text = render("mem_bandwidth", "en")
    assert files and all(f"`{f.name}`" in text for f in files)


def test_summary_refuses_what_it_cannot_show(tmp_path):
    from tools.tables import render_results_summary
    with pytest.raises(TableError, match="no results files"):
        render_results_summary(f"{tmp_path}/nothing-*.json")
    (tmp_path / "kv-1.json").write_text(json.dumps({"benchmark": "kv_cache_calculator", "results": []}))
    with pytest.raises(TableError, match="no summary for benchmark 'kv_cache_calculator'"):
        render_results_summary(f"{tmp_path}/kv-*.json")
    broken = _mamf_file(tmp_path, "mamf_finder-x.json", "GPU", 1.0)
    broken.write_text(broken.read_text().replace('"max_tflops"', '"fastest"'))
    with pytest.raises(TableError, match="mamf_finder-x.json: cannot summarize"):
        render_results_summary(f"{tmp_path}/mamf_finder-*.json")


def test_a_published_file_is_not_rendered_alone():
    with pytest.raises(TableError, match="render with the other files of their benchmark"):
        render("results/compute/mamf_finder-published-various-2026-11-25.json")
