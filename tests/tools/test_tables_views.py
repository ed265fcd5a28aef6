"""tools/tables.py: FILE#VIEW selects a view of a data file; results of the compute benchmarks
(mamf, mem_bandwidth) render with their captions."""

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
        "benchmark": "mamf", "schema_version": 1, "device": "gpu", "torch_version": "2.x",
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
    mamf.write_text(json.dumps({**common, "benchmark": "mamf", "results": [row],
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
