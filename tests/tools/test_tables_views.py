"""tools/tables.py: FILE#VIEW selects a view of a data file; results render as their benchmark's
view file (tools/schemas/<benchmark>.view.yml) says, with their captions; a new benchmark is its
results schema and its view file, with no code; a bad view file fails in one line naming the key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

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


# --- the view files: how each benchmark renders is data (tools/schemas/<benchmark>.view.yml) ------

TOY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://schemas.invalid/ml-engineering-book/toy_bench.schema.json",
    "title": "a benchmark that tools/tables.py has never heard of",
    "$ref": "envelope.schema.json",
    "required": ["warmup"],
    "properties": {"benchmark": {"const": "toy_bench"}, "warmup": {"type": "integer"},
                   "results": {"items": {"required": ["kind", "size_bytes", "seconds"],
                                         "properties": {"seconds": {"type": "number"}}}}},
}
TOY_VIEW = """
columns:
  - {title: {en: Kind, zh: 种类}, cell: "{kind|label(kinds)}"}
  - {title: {en: Size, zh: 大小}, cell: "{size_bytes|binary_size}"}
  - {title: {en: Time (ms), zh: 时间 (ms)}, cell: "{seconds|mul(1e3):,.1f}"}
  - {title: {en: Note, zh: 备注}, cell: "{note}", missing: "—"}
caption:
  en: "Measured with `{command}`, {date_utc|date}, {warmup} warmup. Fastest: {$fastest}."
  zh: "由 `{command}` 实测，{date_utc|date}，预热 {warmup} 次。最快：{$fastest}。"
parts:
  fastest: "{min(seconds).kind|label(kinds)} {min(seconds).seconds|mul(1e3):.1f} ms"
labels:
  kinds: {a: {en: alpha, zh: 甲}}
summary:
  columns:
    - {title: {en: Best (ms), zh: 最佳 (ms)}, cell: "{min(seconds).seconds|mul(1e3):.1f}"}
    - {title: {en: Largest a, zh: 最大的 a}, cell: "{max(size_bytes, kind=a).size_bytes|binary_size}", missing: "—"}
published:
  columns:
    - {title: {en: Device, zh: 设备}, cell: "{device}"}
    - {title: {en: Time (ms), zh: 时间 (ms)}, cell: "{seconds|mul(1e3):.1f}"}
plot: {kind: lines, x: size_bytes, xlabel: size (bytes), y: [seconds], ylabel: time (s), series: kind}
"""
TOY_ROWS = [{"kind": "a", "size_bytes": 1024, "seconds": 0.25, "note": "cold"},
            {"kind": "b", "size_bytes": 2 ** 20, "seconds": 0.0125}]


@pytest.fixture
def toy_benchmark(tmp_path, monkeypatch):
    """A new benchmark as CONTRIBUTING.md says to add one: its results schema and its view file
    in a folder of schemas (with the envelope), and nothing else."""
    from tools import results, tables
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "envelope.schema.json").write_text((results.SCHEMAS / "envelope.schema.json").read_text())
    (schemas / "toy_bench.schema.json").write_text(json.dumps(TOY_SCHEMA))
    (schemas / "toy_bench.view.yml").write_text(TOY_VIEW, encoding="utf-8")
    monkeypatch.setattr(results, "SCHEMAS", schemas)
    monkeypatch.setattr(tables, "VIEWS", schemas)
    return schemas


def _toy_file(folder: Path, name: str, **changes) -> Path:
    doc = {"benchmark": "toy_bench", "schema_version": 1, "device": "toy", "warmup": 2,
           "date_utc": "2026-01-02T03:04:05Z", "versions": {"python": "3"}, "command": "python toy.py",
           "results": TOY_ROWS, **changes}
    path = folder / name
    path.write_text(json.dumps(doc))
    return path


def test_a_new_benchmark_is_its_schema_and_its_view_file(toy_benchmark, tmp_path):
    from tools import results, tables
    path = _toy_file(tmp_path, "toy_bench-toy.json")
    assert results.problems(json.loads(path.read_text()), "f") == []
    assert results.problems({**json.loads(path.read_text()), "warmup": "2"}, "f")  # the schema applies
    assert render(path, "en").splitlines() == [
        "| Kind | Size | Time (ms) | Note |", "|:--|--:|--:|--:|",
        "| alpha | 1 KiB | 250.0 | cold |", "| b | 1 MiB | 12.5 | — |", "",
        "Measured with `python toy.py`, 2026-01-02, 2 warmup. Fastest: b 12.5 ms."]
    zh = render(path, "zh")
    assert "| 种类 | 大小 | 时间 (ms) | 备注 |" in zh and "| 甲 | 1 KiB |" in zh
    assert "预热 2 次。最快：b 12.5 ms。" in zh
    _toy_file(tmp_path, "toy_bench-other.json", device="other", results=TOY_ROWS[1:])
    (tmp_path / "toy_bench-published.json").write_text(json.dumps({
        "benchmark": "toy_bench", "schema_version": 1, "origin": "published", "device": "various",
        "date_utc": "2026-01-02T00:00:00Z", "versions": {}, "published_by": "Someone", "method": "Timed.",
        "results": [{"device": "GPU C", "kind": "a", "size_bytes": 1, "seconds": 0.002,
                     "source": "https://example.org/c"}]}))
    summary = render(f"{tmp_path}/toy_bench-*.json", "en")
    assert "| Device | Best (ms) | Largest a | Date | File |" in summary
    assert "| other | 12.5 | — | 2026-01-02 | `toy_bench-other.json` |" in summary
    assert "| toy | 12.5 | 1 KiB | 2026-01-02 | `toy_bench-toy.json` |" in summary
    assert "| GPU C | 2.0 | [[1]](https://example.org/c) |" in summary and "Someone. Timed. Each row" in summary
    assert "toy_bench" not in Path(tables.__file__).read_text()
    image = results.plot("toy_bench", tmp_path / "toy.png", [path])
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "toy_bench" not in Path(results.__file__).read_text()
    with pytest.raises(results.ResultsError, match="no alt text in 'en'"):  # a page needs one
        results.plot_svg(str(path))


def _toy_view_with(toy_benchmark, change) -> str:
    view = yaml.safe_load(TOY_VIEW)
    change(view)
    (toy_benchmark / "toy_bench.view.yml").write_text(yaml.safe_dump(view, allow_unicode=True))
    return str(toy_benchmark / "toy_bench.view.yml")


# (id, change to the toy view, the error after "FILE: ")
BAD_VIEWS = [
    ("no-cell", lambda v: v["columns"][1].pop("cell"), r"column 2: cell: missing"),
    ("one-language", lambda v: v["caption"].pop("zh"), r"caption\.zh: missing"),
    ("misspelt-key", lambda v: v.update(captoin=v["caption"]), r"captoin: not a field of this file"),
    ("top-not-integer", lambda v: v.update(views={"best": {"top": "5", "by": "seconds", "caption": v["caption"]}}),
     r"view best: top: '5' is not of type integer"),
    ("unknown-filter", lambda v: v["columns"][1].update(cell="{size_bytes|binary}"),
     r"columns\.1\.cell: \{size_bytes\|binary\}: unknown filter 'binary' \(filters: binary_size,"),
    ("filter-without-argument", lambda v: v["columns"][2].update(cell="{seconds|mul}"),
     r"columns\.2\.cell: \{seconds\|mul\}: mul takes an argument"),
    ("not-a-number", lambda v: v["columns"][2].update(cell="{seconds|div(k)}"), r"columns\.2\.cell: could not convert"),
    ("unknown-labels", lambda v: v["columns"][0].update(cell="{kind|label(sorts)}"),
     r"columns\.0\.cell: \{kind\|label\(sorts\)\}: no label table 'sorts' in labels"),
    ("unknown-part", lambda v: v["caption"].update(en="{$slowest}"), r"caption\.en: \{\$slowest\}: no part 'slowest'"),
    ("unknown-aggregation", lambda v: v["parts"].update(fastest="{mean(seconds)}"),
     r"parts\.fastest: \{mean\(seconds\)\}: mean\(\) is not one of max, min"),
    ("aggregation-without-key", lambda v: v["parts"].update(fastest="{max(kind=a).seconds}"),
     r"parts\.fastest: \{max\(kind=a\)\.seconds\}: max\(\) needs a key"),
    ("part-uses-itself", lambda v: v["parts"].update(fastest="{$again}", again="{$fastest}"),
     r"parts\.\w+: uses itself"),
    ("plot-lines-without-x", lambda v: v["plot"].pop("x"), r"plot\.x: missing"),
    ("broken-brace", lambda v: v["caption"].update(en="Fastest: {$fastest"), r"caption\.en: expected '\}'"),
]


@pytest.mark.parametrize("change, expected", [pytest.param(*case[1:], id=case[0]) for case in BAD_VIEWS])
def test_a_bad_view_file_fails_in_one_line_naming_file_and_key(toy_benchmark, tmp_path, change, expected):
    view = _toy_view_with(toy_benchmark, change)
    with pytest.raises(TableError) as raised:
        render(_toy_file(tmp_path, "toy_bench-toy.json"), "en")
    message = str(raised.value)
    assert "\n" not in message and re.match(re.escape(view) + ": " + expected, message), message


def test_a_benchmark_without_a_view_file_is_refused_by_name(toy_benchmark, tmp_path):
    (toy_benchmark / "toy_bench.view.yml").unlink()
    with pytest.raises(TableError, match=r"no view for benchmark 'toy_bench': .*toy_bench\.view\.yml says how"):
        render(_toy_file(tmp_path, "toy_bench-toy.json"), "en")


def test_a_placeholder_without_a_value_is_the_columns_missing_text_or_an_error(toy_benchmark, tmp_path):
    rows = [{**TOY_ROWS[0], "note": None}]  # null is no value, as a missing key is
    assert "| alpha | 1 KiB | 250.0 | — |" in render(_toy_file(tmp_path, "toy_bench-a.json", results=rows))
    with pytest.raises(TableError, match=r"cannot render results \(MissingValue: no value for \{seconds\|mul"):
        render(_toy_file(tmp_path, "toy_bench-b.json", results=[{"kind": "a", "size_bytes": 1}]))
    with pytest.raises(TableError, match=r"no value for \{warmup\}"):
        render(_toy_file(tmp_path, "toy_bench-c.json", warmup=None))


def test_parts_take_the_first_template_that_fills_and_join_items(toy_benchmark, tmp_path):
    def change(view):
        view["parts"]["fastest"] = {"first": ["{fastest_kind}", "none named"]}
        view["parts"]["sizes"] = {"each": "sizes", "item": "{key} = {value:g}", "join": ", ", "numbers_only": True}
        view["caption"]["en"] = "Fastest: {$fastest}; sizes: {$sizes}."
    _toy_view_with(toy_benchmark, change)
    sizes = {"a": 1.5, "b": "text", "c": True, "d": 2}
    assert render(_toy_file(tmp_path, "toy_bench-a.json", sizes=sizes)).endswith(
        "Fastest: none named; sizes: a = 1.5, d = 2.")
    assert render(_toy_file(tmp_path, "toy_bench-b.json", fastest_kind="b")).endswith(
        "Fastest: b; sizes: .")  # no mapping: no items


def test_every_committed_view_loads_and_every_benchmark_with_results_has_one():
    from tools import results, tables
    views = sorted(p.name.removesuffix(".view.yml") for p in tables.VIEWS.glob("*.view.yml"))
    assert views and set(views) <= set(results.known_benchmarks()), "a view beside a results schema"
    for name in views:
        tables.benchmark_view(name)
    shown = {json.loads(p.read_text())["benchmark"] for p in results.result_files()}
    assert shown <= set(views), shown - set(views)
    assert set(tables.common_words()) >= {"source", "device", "date", "file"}


def test_the_renderer_names_no_benchmark_and_holds_no_chinese():
    """Each benchmark's columns, captions and words live in its view file, not in tools/tables.py."""
    import ast

    from tools import results, tables
    source = Path(tables.__file__).read_text(encoding="utf-8")
    assert not re.search(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]", source)
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node)}
    strings = " ".join(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                       and isinstance(node.value, str) and id(node) not in docstrings)
    named = [name for name in results.known_benchmarks() if name in strings]
    assert not named, f"tools/tables.py's code names {named}: put it in the benchmark's view file"


def test_contributings_example_view_renders_the_committed_all_reduce_file(tmp_path, monkeypatch):
    from tools import tables
    text = (tables.REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    example = text.split("A shortened `tools/schemas/all_reduce_bench.view.yml`:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "all_reduce_bench.view.yml").write_text(example, encoding="utf-8")
    monkeypatch.setattr(tables, "VIEWS", tmp_path)
    table = render(tables.REPO / "results/network/all_reduce_bench-cpu-gloo-2proc.json", "zh")
    assert table.startswith("| 消息大小 | busbw (GBps) |\n") and "busbw 峰值：**1.582 GBps**" in table
