"""Render the book's data into Markdown tables: spec data (YAML) and measured results (JSON).

A figure lives in one file; chapters place it with a marker line that the build expands
(build/hooks/book_markers.py):

    <!-- data-table: data/network/pcie.yml -->
    <!-- data-table: data/compute/accelerators.yml#memory -->
    <!-- results-table: results/network/all_reduce_bench-cpu-gloo-2proc.json -->
    <!-- results-table: mamf_finder -->       (every results file of a benchmark, see below)

Spec data (YAML)::

    caption: {en: "...", zh: "..."}          # optional
    columns:
      - {key: gen, title: {en: Generation, zh: 代}}
    rows:
      - {gen: "PCIe 4.0", source: "https://..."}   # every row names its source
    notes: {en: "...", zh: "..."}            # optional
    views:                                   # optional: several tables from one file
      memory: {caption: {...}, columns: [gen, ...], notes: {...}}
      moe: {columns: [name, experts], rows_with: experts}   # only the rows that have `experts`

``FILE#VIEW`` renders the view: its own caption and notes, and only the listed columns (keys of
``columns``), so one file can hold every figure of a topic and still give each page a narrow
table; ``rows_with: KEY`` keeps only the rows that have KEY (a table of the MoE models of a file
that also lists dense ones). Without ``#VIEW`` every column is shown.

Every data file is checked against a JSON Schema (Draft 2020-12) before it renders:
``tools/schemas/data/table.schema.json``, the shape above, which every file meets, or, for a file
that scripts or calculators read, ``tools/schemas/data/<part>/<name>.schema.json``, which adds
its rows' fields and types (``data_problems``; tests/tools/test_data_schemas.py). A bad value is
one TableError line naming the file, the row (number and name) and the field.

Measured results (JSON) are the files our benchmark scripts write with ``--json``; the
``benchmark`` key picks the columns (see RESULTS_COLUMNS).

Usage: ``python tools/tables.py FILE [--lang zh]`` prints the Markdown.
"""

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import yaml

LANGS = ("en", "zh")


class TableError(ValueError):
    """A data or results file that cannot be rendered; the message names the file."""


def _text(value, lang: str, where: str) -> str:
    """A plain string, or the ``lang`` entry of an ``{en: ..., zh: ...}`` mapping."""
    if isinstance(value, dict):
        if lang not in value:
            raise TableError(f"{where}: no '{lang}' text in {value!r}")
        return str(value[lang])
    return str(value)


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _markdown(header: list[str], rows: list[list[str]], align: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


_SOURCE = {"en": "Source", "zh": "来源"}


# --- the data files' schemas -------------------------------------------------------------------

DATA_SCHEMAS = Path(__file__).resolve().parent / "schemas" / "data"
_SHOWN = 120  # characters of a bad value shown in an error line


def data_schema(path) -> Path:
    """The schema that data file ``path`` must meet: ``tools/schemas/data/<part>/<name>.schema.json``
    for ``.../data/<part>/<name>.yml`` when there is one (a file that scripts or calculators
    read), else ``tools/schemas/data/table.schema.json``, the table shape every data file has."""
    path = Path(path)
    if path.parent.parent.name == "data":
        specific = DATA_SCHEMAS / path.parent.name / f"{path.stem}.schema.json"
        if specific.is_file():
            return specific
    return DATA_SCHEMAS / "table.schema.json"


def _finite_number(checker, value) -> bool:
    """JSON's numbers: no bool, no inf or nan (YAML has .inf and .nan; JSON has neither)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (not isinstance(value, float) or math.isfinite(value)))


def _integer(checker, value) -> bool:
    """An integer written as one: 32, not 32.0 (a script that reads the file wants an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _validator(schema: Path):
    return _cached_validator(str(schema), max(p.stat().st_mtime_ns for p in DATA_SCHEMAS.rglob("*.schema.json")))


@functools.lru_cache(maxsize=None)
def _cached_validator(schema: str, mtime_ns: int):
    """A Draft 2020-12 validator for ``schema``, every data schema registered (they refer to
    table.schema.json by relative URI), with finite numbers and true integers as the types."""
    from jsonschema import Draft202012Validator, validators
    from referencing import Registry, Resource

    resources = []
    for path in DATA_SCHEMAS.rglob("*.schema.json"):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": _finite_number, "integer": _integer})
    validator = validators.extend(Draft202012Validator, type_checker=checker)
    contents = json.loads(Path(schema).read_text(encoding="utf-8"))
    validator.check_schema(contents)
    return validator(contents, registry=Registry().with_resources(resources))


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


def _row_label(data: dict, number: int) -> str:
    """``row 3 (Llama 3.1 8B)``: the row's number (from 1) and the value of its first column."""
    row = data["rows"][number]
    columns = data.get("columns")
    key = columns[0].get("key") if isinstance(columns, list) and columns and isinstance(columns[0], dict) else "name"
    name = row.get(key) if isinstance(row, dict) and isinstance(key, str) else None
    if isinstance(name, str) and name.strip():
        return f"row {number + 1} ({name if len(name) <= 60 else name[:60] + '...'})"
    if isinstance(name, int) and not isinstance(name, bool):
        return f"row {number + 1} ({name})"
    return f"row {number + 1}" + (f" ({key} {_shown(name)})" if name is not None else "")


def _problem(error, data, path) -> str:
    """One line for one schema error: the file, the row (or column, or top-level key), the field
    and what is wrong with it."""
    from jsonschema.exceptions import best_match

    error = best_match([error])  # inside anyOf/oneOf: the alternative that came closest
    loc = list(error.absolute_path)
    if "propertyNames" in error.schema_path:  # the error is about a key, not a value
        if error.validator == "not":
            loc, what = loc + [error.instance], "not allowed in this row"
        else:
            what = f"key {_shown(error.instance)} is not a column key (letters, digits, _)"
    elif isinstance(error.instance, float) and not math.isfinite(error.instance):
        what = f"{error.instance} is not a value (YAML's .inf and .nan are not JSON numbers)"
    elif error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        loc, what = loc + missing[:1], "missing"
        if loc[-1:] == ["source"]:
            what += " (every row names the URL that states its figures)"
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in known]
        loc, what = loc + extra[:1], "not a field of this file (misspelt?); the schema lists the fields"
    elif error.validator in ("anyOf", "oneOf"):
        what = (f"{_shown(error.instance)} is none of: "
                + ", ".join(_kind(alternative) for alternative in error.validator_value))
    elif error.validator == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        what = f"{_shown(error.instance)} is not of type {wanted}"
    elif error.validator in ("enum", "const"):
        allowed = error.validator_value if error.validator == "enum" else [error.validator_value]
        what = f"{_shown(error.instance)} is not one of {', '.join(map(repr, allowed))}"
    elif error.validator == "pattern":
        what = f"{_shown(error.instance)} does not match {error.validator_value!r}"
    else:
        what = error.message if len(error.message) <= 2 * _SHOWN else error.message[:2 * _SHOWN] + "..."
    if isinstance(error.schema, dict) and error.schema.get("description") and error.validator != "$ref":
        what += f"; {error.schema['description']}"  # the schema's short description
    where = [str(path)]
    if len(loc) >= 2 and loc[0] == "rows" and isinstance(loc[1], int):
        where.append(_row_label(data, loc[1]))
        loc = loc[2:]
    elif len(loc) >= 2 and loc[0] == "columns" and isinstance(loc[1], int):
        column = data["columns"][loc[1]]
        key = column.get("key") if isinstance(column, dict) else None
        where.append(f"column {loc[1] + 1}" + (f" ({key})" if isinstance(key, str) else ""))
        loc = loc[2:]
    elif len(loc) >= 2 and loc[0] == "views":
        where.append(f"view {loc[1]}")
        loc = loc[2:]
    if loc:
        where.append(".".join(str(part) for part in loc))
    return ": ".join(where + [what])


def _kind(schema) -> str:
    """A schema in a word or two, for an error line: its $ref's name, its type or its value."""
    if not isinstance(schema, dict):
        return str(schema).lower()
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1].replace(".schema.json", "")
    if "const" in schema:
        return repr(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(map(repr, schema["enum"]))
    kind = schema.get("type", "value")
    return " or ".join(kind) if isinstance(kind, list) else kind


def _order(error) -> tuple:
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, str(part))
                 for part in error.absolute_path)


def data_problems(data, path) -> list[str]:
    """Every way ``data`` (data file ``path``, parsed) breaks its schema (``data_schema``), one
    line each, in the file's order: ``FILE: row N (NAME): FIELD: what is wrong``. Empty: valid."""
    validator = _validator(data_schema(path))
    lines = [_problem(e, data, path) for e in sorted(validator.iter_errors(data), key=_order)]
    return list(dict.fromkeys(lines))  # the table schema and a file's own may say the same


def _select_view(data: dict, view: str, path: Path) -> dict:
    """``data`` narrowed to view ``view``: its columns (in the view's order), caption and notes."""
    views = data.get("views") or {}
    if view not in views:
        raise TableError(f"{path}: no view '{view}' (views: {', '.join(views) or 'none'})")
    spec = views[view]
    by_key = {c["key"]: c for c in data["columns"]}
    unknown = [k for k in spec.get("columns", []) if k not in by_key]
    if unknown or not spec.get("columns"):
        raise TableError(f"{path}: view '{view}' needs existing column keys (unknown: {unknown})")
    rows = data["rows"]
    if spec.get("rows_with"):
        rows = [row for row in rows if spec["rows_with"] in row]
        if not rows:
            raise TableError(f"{path}: view '{view}': no row has '{spec['rows_with']}'")
    return {"columns": [by_key[k] for k in spec["columns"]], "rows": rows,
            "caption": spec.get("caption"), "notes": spec.get("notes")}


def render_data_table(path: Path, lang: str = "en", view: str | None = None) -> str:
    """Markdown for a spec-data YAML file in language ``lang`` (only view ``view``'s columns,
    caption and notes when given).

    Every row must have a ``source`` URL, rendered as a link in the last column.
    Raises TableError (naming the file) for a missing key, column, view or source, and for a
    file its schema refuses (``data_problems``: the first problem, naming row and field).
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise TableError(f"{path}: {err}") from err
    if not isinstance(data, dict) or not data.get("columns") or not data.get("rows"):
        raise TableError(f"{path}: needs 'columns' and 'rows'")
    problems = data_problems(data, path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TableError(problems[0] + more)
    if view is not None:
        data = _select_view(data, view, path)
    columns = data["columns"]
    header = [_text(c["title"], lang, f"{path}: column {c.get('key')}") for c in columns]
    header.append(_SOURCE[lang])
    rows = []
    for number, row in enumerate(data["rows"], 1):
        source = row.get("source")
        if not source:
            raise TableError(f"{path}: row {number} has no 'source'")
        missing = [c["key"] for c in columns if c["key"] not in row]
        if missing:
            raise TableError(f"{path}: row {number} lacks {', '.join(missing)}")
        cells = [_text(row[c["key"]], lang, f"{path}: row {number}") for c in columns]
        sources = source if isinstance(source, list) else [source]
        cells.append(" ".join(f"[[{i}]]({url})" for i, url in enumerate(sources, 1)))
        rows.append(cells)
    align = ["---"] * len(header)
    parts = []
    if data.get("caption"):
        parts.append(f"**{_text(data['caption'], lang, str(path))}**\n")
    parts.append(_markdown(header, rows, align))
    if data.get("notes"):
        parts.append("\n" + _text(data["notes"], lang, str(path)))
    return "\n".join(parts)


def _binary_size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


# benchmark name -> (column titles per language, function row -> cells[, caption function
# (data, lang) -> str; without one the all-reduce caption below is used])
RESULTS_COLUMNS = {
    "all_reduce_bench": (
        {
            "en": ["Size", "Elements", "Time (µs)", "algbw (GBps)", "busbw (GBps)"],
            "zh": ["消息大小", "元素数", "时间 (µs)", "algbw (GBps)", "busbw (GBps)"],
        },
        lambda r: [
            _binary_size(r["size_bytes"]),
            str(r["count"]),
            f"{r['time_us']:.1f}",
            f"{r['algbw_GBps']:.3f}",
            f"{r['busbw_GBps']:.3f}",
        ],
    ),
}

def _fio_scan_caption(d: dict, lang: str) -> str:
    text = {
        "en": "Measured with `{command}`: {fio_version}, file system {filesystem}, ioengine "
        "{ioengine}, direct={direct}, queue depth {iodepth} per job, {runtime:g} s per job, "
        "{date}. MBps = 10⁶ bytes/s; p50/p99 = latency of one IO in µs.",
        "zh": "由 `{command}` 实测：{fio_version}，文件系统 {filesystem}，ioengine {ioengine}，"
        "direct={direct}，每个作业队列深度 {iodepth}、运行 {runtime:g} 秒，{date}。MBps = 10⁶ 字节/秒；"
        "p50/p99 为单次 IO 延迟（µs）。",
    }[lang]
    return text.format(command=d["command"], fio_version=d["fio_version"],
                       filesystem=d["filesystem"], ioengine=d["ioengine"], direct=d["direct"],
                       iodepth=d["iodepth"], runtime=d["runtime_s_per_job"],
                       date=d["date_utc"][:10])


def _dataloader_caption(d: dict, lang: str) -> str:
    rec = d["recommended"]
    text = {
        "en": "Measured with `{command}`: device {device}, {cpus} CPU cores, sample {shape} uint8, "
        "{ms:g} ms per sample ({cost}), batch {batch}, torch {torch}, {date}. Recommended: "
        "**num_workers={w}, pin_memory={p}, non_blocking={nb}**.",
        "zh": "由 `{command}` 实测：设备 {device}，{cpus} 个 CPU 核，样本 {shape} uint8，"
        "每个样本 {ms:g} ms（{cost}），批大小 {batch}，torch {torch}，{date}。"
        "推荐设置：**num_workers={w}, pin_memory={p}, non_blocking={nb}**。",
    }[lang]
    return text.format(command=d["command"], device=d["device"], cpus=d["cpu_count"],
                       shape="×".join(map(str, d["sample_shape"])), ms=d["sample_ms"],
                       cost=d["cost"], batch=d["batch_size"], torch=d["torch_version"],
                       date=d["date_utc"][:10], w=rec["num_workers"], p=rec["pin_memory"],
                       nb=rec["non_blocking"])


def _checkpoint_io_caption(d: dict, lang: str) -> str:
    reads = {"en": ("cold", "warm"), "zh": ("冷", "热")}[lang][0 if d["cold_read"] else 1]
    text = {
        "en": "Measured with `{command}`: {world} ranks, backend {backend}, device {device}, "
        "{dtype}, file system {fs}, {reads} reads, median of {iters}, torch {torch}, {date}. "
        "GBps = 10⁹ bytes/s; a time is the slowest rank's.",
        "zh": "由 `{command}` 实测：{world} 个 rank，后端 {backend}，设备 {device}，{dtype}，"
        "文件系统 {fs}，{reads}读，取 {iters} 次的中位数，torch {torch}，{date}。"
        "GBps = 10⁹ 字节/秒；时间取最慢的 rank。",
    }[lang]
    return text.format(command=d["command"], world=d["world_size"], backend=d["backend"],
                       device=d["device"], dtype=d["dtype"], fs=d["filesystem"], reads=reads,
                       iters=d["iters"], torch=d["torch_version"], date=d["date_utc"][:10])


# Storage benchmarks: benchmark name -> (column titles, row -> cells, caption function).
RESULTS_COLUMNS.update({
    "fio_scan": (
        {
            "en": ["Pattern", "Block", "File × jobs", "MBps", "IOPS", "p50 / p99 (µs)"],
            "zh": ["访问模式", "块大小", "文件 × 作业数", "MBps", "IOPS", "p50 / p99 (µs)"],
        },
        lambda r: [r["rw"], _binary_size(r["bs_bytes"]),
                   f"{_binary_size(r['size_bytes'])} × {r['numjobs']}", f"{r['bw_MBps']:,.1f}",
                   f"{r['iops']:,.0f}", f"{r['lat_p50_us']:,.0f} / {r['lat_p99_us']:,.0f}"],
        _fio_scan_caption,
    ),
    "dataloader_bench": (
        {
            "en": ["num_workers", "pin_memory / non_blocking", "Samples/s", "Ideal samples/s",
                   "First batch (s)", "Wait (ms/batch)"],
            "zh": ["num_workers", "pin_memory / non_blocking", "样本/秒", "理想样本/秒",
                   "首个批次 (s)", "等待 (ms/批)"],
        },
        lambda r: [str(r["num_workers"]), f"{r['pin_memory']} / {r['non_blocking']}",
                   f"{r['samples_per_s']:,.1f}", f"{r['ideal_samples_per_s']:,.0f}",
                   f"{r['first_batch_s']:.2f}", f"{r['wait_ms_per_batch']:.1f}"],
        _dataloader_caption,
    ),
    "checkpoint_io_bench": (
        {
            "en": ["Method", "Operation", "GB", "Time (s)", "GBps"],
            "zh": ["方法", "操作", "GB", "时间 (s)", "GBps"],
        },
        lambda r: [r["method"], r["op"], f"{r['bytes'] / 1e9:.3f}", f"{r['time_s']:.3f}",
                   f"{r['GBps']:.3f}"],
        _checkpoint_io_caption,
    ),
})

_CAPTION = {
    "en": "Measured with `{command}`: {world_size} ranks, backend {backend}, device {device}, "
    "dtype {dtype}, torch {torch_version}, {date}. GBps = 10⁹ bytes/s. "
    "Peak busbw: **{peak:.3f} GBps**.",
    "zh": "由 `{command}` 实测：{world_size} 个 rank，后端 {backend}，设备 {device}，"
    "数据类型 {dtype}，torch {torch_version}，{date}。GBps = 10⁹ 字节/秒。"
    "busbw 峰值：**{peak:.3f} GBps**。",
}


# Benchmarks other than all_reduce: caption template per language and the fields it needs.
_MEM_TESTS = {
    "en": {"d2d": "device to device", "h2d_pinned": "host to device, pinned",
           "h2d_pageable": "host to device, pageable", "d2h_pinned": "device to host, pinned",
           "d2h_pageable": "device to host, pageable", "host_copy": "host memory copy"},
    "zh": {"d2d": "设备到设备", "h2d_pinned": "主机到设备，锁页", "h2d_pageable": "主机到设备，可分页",
           "d2h_pinned": "设备到主机，锁页", "d2h_pageable": "设备到主机，可分页",
           "host_copy": "主机内存拷贝"},
}

RESULTS_COLUMNS["mamf_finder"] = (
    {
        "en": ["M", "N", "K", "dtype", "Mean time (ms)", "Mean TFLOPS", "Median TFLOPS", "Max TFLOPS"],
        "zh": ["M", "N", "K", "数据类型", "平均时间 (ms)", "平均 TFLOPS", "中位数 TFLOPS", "最大 TFLOPS"],
    },
    lambda r: [str(r["m"]), str(r["n"]), str(r["k"]), r["dtype"], f"{r['mean_ms']:.3f}",
               f"{r['mean_tflops']:.3f}", f"{r['median_tflops']:.3f}", f"{r['max_tflops']:.3f}"],
)
RESULTS_COLUMNS["mem_bandwidth"] = (
    {
        "en": ["Test", "Size", "Time (µs)", "Copied bytes / time (GBps)", "Read + write traffic (GBps)"],
        "zh": ["测试", "大小", "时间 (µs)", "拷贝字节数/时间 (GBps)", "读+写流量 (GBps)"],
    },
    None,  # needs the language for the test names: see _results_rows
)

_RESULTS_CAPTION = {
    "mamf_finder": {
        "en": "Measured with `{command}`: device {device}, torch {torch_version}, {date}; "
        "{warmup} warmup and {iters} timed iterations per shape; TFLOPS = 2·M·N·K / time / 10¹² "
        "(mean over iterations; max = fastest iteration). Best: **{best}**.",
        "zh": "由 `{command}` 实测：设备 {device}，torch {torch_version}，{date}；每个形状先预热 "
        "{warmup} 次、再计时 {iters} 次；TFLOPS = 2·M·N·K / 时间 / 10¹²（平均值取所有迭代，"
        "最大值取最快的一次）。最佳：**{best}**。",
    },
    "mem_bandwidth": {
        "en": "Measured with `{command}`: device {device}, torch {torch_version}, {date}; "
        "{iters} timed copies per size after {warmup} warmup ({time}). GBps = 10⁹ bytes/s. "
        "Peak: **{best}**.",
        "zh": "由 `{command}` 实测：设备 {device}，torch {torch_version}，{date}；每个大小预热 "
        "{warmup} 次后计时 {iters} 次拷贝（{time}）。GBps = 10⁹ 字节/秒。峰值：**{best}**。",
    },
}


_TIME_TEXT = {
    "en": {},
    "zh": {"mean of back-to-back copies (CUDA events)": "连续拷贝的平均时间（CUDA 事件计时）",
           "median of individually timed copies (perf_counter)": "逐次计时拷贝的中位数（perf_counter）"},
}


def _best_text(data: dict, lang: str) -> str:
    if data["benchmark"] == "mamf_finder":
        return "; ".join(f"{dtype} {b['max_tflops']:.3f} TFLOPS ({b['m']}x{b['n']}x{b['k']})"
                         for dtype, b in data["best"].items())
    return "; ".join(f"{_MEM_TESTS[lang][test]} {gbps:.2f} GBps" for test, gbps in data["peak_GBps"].items())


def _results_rows(data: dict, lang: str) -> list[list[str]]:
    if data["benchmark"] == "mem_bandwidth":
        return [[_MEM_TESTS[lang][r["test"]], _binary_size(r["size_bytes"]), f"{r['time_us']:.1f}",
                 f"{r['GBps']:.2f}", f"{r['traffic_GBps']:.2f}"] for r in data["results"]]
    return [RESULTS_COLUMNS[data["benchmark"]][1](r) for r in data["results"]]


def _kv_capacity_caption(d: dict, lang: str) -> str:
    i = d["inputs"]
    text = {
        "en": "Computed, not measured: `python scripts/inference/kv_cache_calculator.py --model all "
        "--context {context} {memory} --gpus {gpus} --memory-utilization {u:g} "
        "--kv-dtype {kv} --weight-dtype {w}`. Per GPU; weights from the publisher's parameter "
        "count; 1 GB = 10⁹ bytes. Tokens: how many the free memory caches; sequences: how many "
        "sequences of {context} tokens. Negative free memory: the weights alone do not fit.",
        "zh": "计算值，非实测：`python scripts/inference/kv_cache_calculator.py --model all "
        "--context {context} {memory} --gpus {gpus} --memory-utilization {u:g} "
        "--kv-dtype {kv} --weight-dtype {w}`。均为每块 GPU 的数值；权重按发布者公布的参数量计算；"
        "1 GB = 10⁹ 字节。token 数：剩余显存能缓存的 token 数；序列数：能同时容纳的 {context} token "
        "序列数。剩余显存为负：仅权重就放不下。",
    }[lang]
    # The device's memory as nvidia-smi reports it (--device), or the figure given (--gpu-memory)
    memory = f"--device {i['device']}" if i.get("device") else f"--gpu-memory {i['gpu_memory']:g}"
    return text.format(context=i["context"], memory=memory, gpus=i["gpus"],
                       u=i["memory_utilization"], kv=i["kv_dtype"], w=i["weight_dtype"])


RESULTS_COLUMNS["kv_cache_calculator"] = (
    {
        "en": ["Model", "KV bytes/token", "KV GB/sequence", "Weights GB", "Free GB", "Tokens",
               "Sequences"],
        "zh": ["模型", "KV 字节/token", "KV GB/序列", "权重 GB", "剩余 GB", "token 数", "序列数"],
    },
    lambda r: [r["name"], f"{r['kv_per_token']:,.0f}", f"{r['kv_per_sequence'] / 1e9:.3f}",
               f"{r['weights'] / 1e9:.1f}", f"{r['kv_free'] / 1e9:.1f}", f"{r['tokens']:,}",
               f"{r['sequences']:,}"],
    _kv_capacity_caption,
)


def _ms(seconds) -> str:
    return "—" if seconds is None else f"{1e3 * seconds:,.0f}"


def _decode_bench_caption(d: dict, lang: str) -> str:
    m = d["model"]
    text = {
        "en": "Measured with `{command}`: device {device}, {dtype}, {threads} thread(s), torch "
        "{torch}, {date}. Model: {params:,} parameters ({mb:.1f} MB). TTFT: prefill of the prompt "
        "and the first token; TPOT: mean decode step; read GBps: weights plus the KV cache so far "
        "per step over TPOT (a lower bound on traffic); GBps = 10⁹ bytes/s.",
        "zh": "由 `{command}` 实测：设备 {device}，{dtype}，{threads} 个线程，torch {torch}，{date}。"
        "模型：{params:,} 个参数（{mb:.1f} MB）。TTFT：提示词的预填充加第一个 token；TPOT：解码一步的"
        "平均时间；读取 GBps：每步读取的权重与已有 KV cache 字节数除以 TPOT（流量的下限）；"
        "GBps = 10⁹ 字节/秒。",
    }[lang]
    return text.format(command=d["command"], device=d["device"], dtype=d["dtype"],
                       threads=d["threads"], torch=d["torch_version"], date=d["date_utc"][:10],
                       params=m.get("parameters", 0), mb=d["results"][0]["weight_bytes"] / 1e6)


def _speculative_caption(d: dict, lang: str) -> str:
    s, b = d["settings"], d["baseline"]
    text = {
        "en": "Measured with `{command}`: target {tl} layers × {td}, draft {dl} layers × {dd}, "
        "byte-level models trained on the book's corpus; {mode} decoding of {prompts} held-out "
        "prompts × {new} bytes, 1 thread, torch {torch}, {date}. α: accepted / drafted tokens that "
        "reached the test; formula: (1 − α^(k+1)) / (1 − α) at the measured α; a draft step costs "
        "c = {c:.2f} target steps. Identical: prompts whose output equals the target's own.",
        "zh": "由 `{command}` 实测：目标模型 {tl} 层 × {td}，草稿模型 {dl} 层 × {dd}，两者都是在本书"
        "语料上训练的字节级模型；对 {prompts} 个留出提示词各做 {new} 字节的{mode}解码，1 个线程，"
        "torch {torch}，{date}。α：被接受的草稿 token 数 / 进入验证的草稿 token 数；公式："
        "在实测 α 下的 (1 − α^(k+1)) / (1 − α)；草稿模型一步的耗时为目标模型一步的 c = {c:.2f} 倍。"
        "一致：输出与目标模型自身输出完全相同的提示词数。",
    }[lang]
    mode = {"en": s["mode"], "zh": {"greedy": "贪心", "sample": "采样"}.get(s["mode"], s["mode"])}[lang]
    return text.format(command=d["command"], tl=s["target_layers"], td=s["target_dim"],
                       dl=s["draft_layers"], dd=s["draft_dim"], mode=mode, prompts=s["prompts"],
                       new=s["new_tokens"], torch=d["torch"], date=d["date_utc"][:10], c=b["c"])


def _serving_caption(d: dict, lang: str) -> str:
    m = d["step_model"]
    knee = d.get("knee_req_s", {})
    text = {
        "en": "Simulated with `{command}` ({date}). Step model fitted to the decode_bench results: "
        "{model}. Latencies in ms; goodput: requests/s meeting both SLOs; — : the rate overloaded "
        "the server (the queue grew without bound). Knee (highest rate meeting the SLOs): {knee}.",
        "zh": "由 `{command}` 模拟（{date}）。单步耗时模型由 decode_bench 的结果拟合：{model}。"
        "延迟单位为 ms；goodput：同时满足两个 SLO 的请求数/秒；—：该到达率使服务过载（队列无限增长）。"
        "拐点（满足 SLO 的最高到达率）：{knee}。",
    }[lang]
    model = m.get("text") or ", ".join(f"{k} = {v:.3g}" for k, v in m.items()
                                        if isinstance(v, (int, float)))
    return text.format(command=d["command"], date=d["date_utc"][:10], model=model,
                       knee=", ".join(f"{p} {v} req/s" for p, v in knee.items()))


RESULTS_COLUMNS["decode_bench"] = (
    {
        "en": ["Batch", "Prompt", "TTFT (ms)", "TPOT (ms)", "Decode tokens/s", "Prefill tokens/s",
               "KV cache (MB)", "Read GBps"],
        "zh": ["批大小", "提示词长度", "TTFT (ms)", "TPOT (ms)", "解码 token/秒", "预填充 token/秒",
               "KV cache (MB)", "读取 GBps"],
    },
    lambda r: [str(r["batch"]), str(r["context"]), f"{r['ttft_ms']:.1f}", f"{r['tpot_ms']:.2f}",
               f"{r['decode_tokens_per_s']:,.0f}", f"{r['prefill_tokens_per_s']:,.0f}",
               f"{r['kv_bytes'] / 1e6:.1f}", f"{r['read_GBps']:.2f}"],
    _decode_bench_caption,
)
RESULTS_COLUMNS["speculative_decoding"] = (
    {
        "en": ["k", "α", "Tokens per target pass", "Formula", "Speedup (wall)", "Identical"],
        "zh": ["k", "α", "每次目标前向的 token 数", "公式", "加速比（墙钟）", "一致"],
    },
    lambda r: [str(r["k"]), f"{r['alpha']:.3f}", f"{r['tokens_per_target_pass']:.2f}",
               f"{r['formula_tokens_per_pass']:.2f}", f"{r['speedup']:.2f}×",
               f"{r['identical_to_target']} / {r['prompts']}"],
    _speculative_caption,
)
RESULTS_COLUMNS["serving_simulator"] = (
    {
        "en": ["Policy", "Rate (req/s)", "Tokens/s", "Mean batch", "TTFT p50 / p99", "TPOT p50 / p99",
               "Goodput (req/s)", "Preemptions"],
        "zh": ["调度", "到达率（请求/秒）", "token/秒", "平均批大小", "TTFT p50 / p99", "TPOT p50 / p99",
               "goodput（请求/秒）", "抢占次数"],
    },
    lambda r: [r["policy"], f"{r['rate']:g}", f"{r['throughput_tok_s']:,.0f}",
               f"{r['mean_batch']:.1f}",
               f"{_ms(r.get('ttft_p50_s'))} / {_ms(r.get('ttft_p99_s'))}",
               f"{_ms(r.get('tpot_p50_s'))} / {_ms(r.get('tpot_p99_s'))}",
               "—" if r.get("goodput_req_s") is None else f"{r['goodput_req_s']:.2f}",
               str(r.get("preemptions", 0))],
    _serving_caption,
)


def _signed_change(delta: float, pct: float) -> str:
    """"+0.0896 (+6.11%)"; a change that rounds to zero prints as "0.0000 (0.00%)", not "-0.0000"."""
    if round(delta, 4) == 0 and round(pct, 2) == 0:
        return "0.0000 (0.00%)"
    return f"{delta:+.4f} ({pct:+.2f}%)"


def _quantize_caption(d: dict, lang: str) -> str:
    s, m = d["settings"], d["model"]
    text = {
        "en": "Measured with `{command}`: a byte-level model of {layers} blocks × {width} ({params:,} "
        "parameters) trained {steps} steps on the book's corpus, every linear layer's weights "
        "quantized with round-to-nearest and dequantized for the evaluation on the held-out "
        "documents; scales in {scale}; torch {torch}, {date}. Bits per weight include the scales "
        "(and zero points); saved: against bf16, for the quantized matrices.",
        "zh": "由 `{command}` 实测：一个 {layers} 个块 × {width} 的字节级模型（{params:,} 个参数），在本书"
        "语料上训练 {steps} 步；每个线性层的权重用就近舍入量化，再反量化后在留出文档上评估；缩放系数"
        "为 {scale}；torch {torch}，{date}。每个权重的比特数包含缩放系数（和零点）；节省：相对 bf16，"
        "只计被量化的矩阵。",
    }[lang]
    return text.format(command=d["command"], layers=s["layers"], width=s["width"],
                       params=m["parameters"], steps=s["steps"], scale=s["scale_dtype"],
                       torch=d["torch_version"], date=d["date_utc"][:10])


RESULTS_COLUMNS["quantize_weights"] = (
    {
        "en": ["Scheme", "Bits per byte (held out)", "Change", "Bits per weight",
               "Mean weight error", "Saved vs bf16"],
        "zh": ["方案", "每字节比特数（留出集）", "变化", "每个权重的比特数", "平均权重误差",
               "相对 bf16 节省"],
    },
    lambda r: [r["scheme"], f"{r['bits_per_byte']:.4f}",
               _signed_change(r["delta_bits_per_byte"], r["delta_pct"]),
               f"{r['effective_bits']:.3f}", f"{100 * r['rel_err_mean']:.1f}%",
               "—" if r["saved_vs_bf16"] <= 0 else f"{100 * r['saved_vs_bf16']:.1f}%"],
    _quantize_caption,
)


# Views of results files: a long sweep shown in full would bury the answer.
RESULTS_VIEWS = {"mamf_finder": {"best": 5}}  # view -> rows kept per dtype, fastest first


def render_results_table(path: Path, lang: str = "en", view: str | None = None) -> str:
    """Markdown for a benchmark's ``--json`` output, with a caption saying how it was measured.
    ``view`` "best" (mamf_finder only) keeps the five fastest shapes (max TFLOPS) of each dtype.

    Raises TableError (naming the file) for an unknown benchmark, an unknown view or a malformed
    file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("origin") == "published":
            raise TableError(f"{path}: published figures render with the other files of their "
                             f"benchmark: <!-- results-table: {data['benchmark']} -->")
        if view is not None:
            keep = RESULTS_VIEWS.get(data["benchmark"], {}).get(view)
            if keep is None:
                raise TableError(f"{path}: no view '#{view}' for {data['benchmark']} results")
            measured = len(data["results"])
            data["results"] = [r for dtype in data["dtypes"] for r in sorted(
                (r for r in data["results"] if r["dtype"] == dtype),
                key=lambda r: -r["max_tflops"])[:keep]]
        titles, _, *caption_of = RESULTS_COLUMNS[data["benchmark"]]
        rows = _results_rows(data, lang)
        if caption_of:
            caption = caption_of[0](data, lang)
        elif data["benchmark"] == "all_reduce_bench":
            caption = _CAPTION[lang].format(
                command=data["command"],
                world_size=data["world_size"],
                backend=data["backend"],
                device=data["device"],
                dtype=data["dtype"],
                torch_version=data["torch_version"],
                date=data["date_utc"][:10],
                peak=data["peak_busbw_GBps"],
            )
        else:
            caption = _RESULTS_CAPTION[data["benchmark"]][lang].format(
                command=data["command"], device=data["device"],
                torch_version=data["torch_version"], date=data["date_utc"][:10],
                warmup=data["warmup"], iters=data["iters"], best=_best_text(data, lang),
                time=_TIME_TEXT[lang].get(data.get("time", ""), data.get("time", "")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TableError(f"{path}: cannot render results ({type(err).__name__}: {err})") from err
    if view is not None:
        caption += {"en": f" Shown: the {keep} fastest shapes of each dtype, of {measured} measured.",
                    "zh": f"表中只列出每种数据类型最快的 {keep} 个形状（共测 {measured} 个）。"}[lang]
    # numbers right-aligned; a first column of names (a model, a method, a pattern) left-aligned
    align = ["--:"] * len(titles[lang])
    if any(not _is_number(row[0]) for row in rows):
        align[0] = ":--"
    return _markdown(titles[lang], rows, align) + "\n\n" + caption


def _is_number(cell: str) -> bool:
    try:
        float(cell.replace(",", ""))
    except ValueError:
        return False
    return True


# --- every results file of a benchmark -----------------------------------------------------
#
# ``<!-- results-table: mamf_finder -->`` (a benchmark name) or a glob such as
# ``<!-- results-table: results/compute/mamf_finder-*.json -->`` renders one summary row per
# measured file (per dtype or test where a file holds several): the device, its headline figures,
# the date and the file. A reader's pull request that adds a file (tools/results.py add) adds a
# row. Files with ``origin: published`` follow in a second table, one row per published figure
# with its source.

REPO = Path(__file__).resolve().parents[1]

_COMMON = {"en": ("Device", "Date", "File"), "zh": ("设备", "日期", "文件")}


def _peak(rows, key):
    return max(rows, key=lambda r: r[key] if r.get(key) is not None else float("-inf"))


def _mamf_summary(d):
    out = []
    for dtype in d.get("dtypes") or sorted({r["dtype"] for r in d["results"]}):
        rows = [r for r in d["results"] if r["dtype"] == dtype]
        if rows:
            b = _peak(rows, "max_tflops")
            out.append([dtype, f"{b['max_tflops']:,.1f}", f"{b['mean_tflops']:,.1f}",
                        f"{b['m']}×{b['n']}×{b['k']}"])
    return out


def _mem_summary(d):
    out = []
    for test in d.get("tests") or sorted({r["test"] for r in d["results"]}):
        rows = [r for r in d["results"] if r["test"] == test]
        if rows:
            b = _peak(rows, "GBps")
            out.append([test, f"{b['GBps']:,.1f}", _binary_size(b["size_bytes"])])
    return out


def _all_reduce_summary(d):
    b = _peak(d["results"], "busbw_GBps")
    return [[f"{d['world_size']} ({d['nnodes']})", d["backend"], f"{b['busbw_GBps']:,.3f}",
             _binary_size(b["size_bytes"])]]


def _fio_summary(d):
    reads = [r for r in d["results"] if r["rw"] == "read"]
    rand = [r for r in d["results"] if r["rw"] == "randread"]
    return [[str(d["direct"]), f"{_peak(reads, 'bw_MBps')['bw_MBps']:,.0f}" if reads else "—",
             f"{_peak(rand, 'iops')['iops']:,.0f}" if rand else "—"]]


def _checkpoint_summary(d):
    cells = [str(d["world_size"]), d["filesystem"]]
    for op in ("save", "load"):
        rows = [r for r in d["results"] if r["op"].startswith(op)]
        cells.append(f"{_peak(rows, 'GBps')['GBps']:.3f}" if rows else "—")
    return [cells]


def _dataloader_summary(d):
    b = _peak(d["results"], "samples_per_s")
    rec = d["recommended"]
    return [[str(d["cpu_count"]), d["cost"], f"{b['samples_per_s']:,.1f}",
             f"num_workers={rec['num_workers']}, pin_memory={rec['pin_memory']}"]]


def _decode_summary(d):
    b = _peak(d["results"], "decode_tokens_per_s")
    return [[d["dtype"], str(d["threads"]), f"{b['decode_tokens_per_s']:,.0f} (batch {b['batch']})",
             f"{min(r['tpot_ms'] for r in d['results'] if r['batch'] == min(x['batch'] for x in d['results'])):.2f}"]]


# benchmark -> ({lang: headline column titles}, data -> rows of headline cells)
SUMMARIES = {
    "mamf_finder": ({"en": ["dtype", "Max TFLOPS", "Mean TFLOPS", "Shape M×N×K"],
                     "zh": ["数据类型", "最大 TFLOPS", "平均 TFLOPS", "形状 M×N×K"]}, _mamf_summary),
    "mem_bandwidth": ({"en": ["Test", "Peak GBps", "At size"], "zh": ["测试", "峰值 GBps", "对应大小"]},
                      _mem_summary),
    "all_reduce_bench": ({"en": ["Ranks (nodes)", "Backend", "Peak busbw (GBps)", "At size"],
                          "zh": ["rank 数（节点数）", "后端", "busbw 峰值 (GBps)", "对应大小"]},
                         _all_reduce_summary),
    "fio_scan": ({"en": ["direct", "Best read MBps", "Best randread IOPS"],
                  "zh": ["direct", "顺序读最佳 MBps", "随机读最佳 IOPS"]}, _fio_summary),
    "checkpoint_io_bench": ({"en": ["Ranks", "File system", "Best save GBps", "Best load GBps"],
                             "zh": ["rank 数", "文件系统", "保存最佳 GBps", "加载最佳 GBps"]},
                            _checkpoint_summary),
    "dataloader_bench": ({"en": ["CPU cores", "Sample cost", "Best samples/s", "Recommended"],
                          "zh": ["CPU 核数", "样本开销", "最佳样本/秒", "推荐设置"]}, _dataloader_summary),
    "decode_bench": ({"en": ["dtype", "Threads", "Best decode tokens/s", "TPOT at the smallest batch (ms)"],
                      "zh": ["数据类型", "线程数", "最佳解码 token/秒", "最小批的 TPOT (ms)"]}, _decode_summary),
}

# benchmark -> ({lang: column titles}, published row -> cells); the Source column is added.
PUBLISHED = {
    # The source's own peak column (spec_tflops) stays in the file but is not shown: the book's
    # peaks live in data/compute/accelerators.yml, and two tables must not disagree.
    "mamf_finder": ({"en": ["Device", "dtype", "Mean TFLOPS", "Shape M×N×K", "torch"],
                     "zh": ["设备", "数据类型", "平均 TFLOPS", "形状 M×N×K", "torch"]},
                    lambda r: [r["device"], r["dtype"],
                               f"{r.get('mean_tflops', r.get('max_tflops')):,.1f}",
                               f"{r['m']}×{r['n']}×{r['k']}" if "m" in r else "", r.get("torch", "")]),
    "mem_bandwidth": ({"en": ["Device", "Test", "GBps"], "zh": ["设备", "测试", "GBps"]},
                      lambda r: [r["device"], r["test"], f"{r['GBps']:,.1f}"]),
    "all_reduce_bench": ({"en": ["Device", "GPUs", "Nodes", "Size", "busbw (GBps)", "Fabric"],
                          "zh": ["设备", "GPU 数", "节点数", "消息大小", "busbw (GBps)", "互连"]},
                         lambda r: [r["device"], str(r.get("gpus", "")), str(r.get("nodes", "")),
                                    _binary_size(r["size_bytes"]) if "size_bytes" in r else "—",
                                    f"{r['busbw_GBps']:,.1f}", r.get("fabric", "")]),
}

_PUBLISHED_CAPTION = {
    "en": "Published by others, not measured with the book's scripts: {who}. {method}. "
          "Each row links to where it is stated.",
    "zh": "他人发表的数据，并非用本书脚本实测：{who}。{method}。每一行都链接到其出处。",
}
_MEASURED_CAPTION = {
    "en": "One row per results file under `results/` (per dtype or test where a file holds several); "
          "each file's command and machine are in its part's `results/README.md`. "
          "Add yours: `python tools/results.py add FILE` (CONTRIBUTING.md).",
    "zh": "`results/` 下每个结果文件一行（文件含多种数据类型或测试时每种一行）；每个文件的命令和机器见所在部分的 "
          "`results/README.md`。提交你的结果：`python tools/results.py add FILE`（见 CONTRIBUTING.md）。",
}


def summary_files(spec: str) -> tuple[str, list[Path]]:
    """(benchmark, files) for a marker argument: a benchmark name or a glob of results files."""
    if "/" not in spec and "*" not in spec and not spec.endswith(".json"):
        benchmark = spec
        candidates = sorted(REPO.glob(f"results/*/{benchmark}-*.json"))
    else:
        candidates = sorted(REPO.glob(spec)) if not Path(spec).is_absolute() else \
            sorted(Path(spec).parent.glob(Path(spec).name))
        benchmark = None
    files = []
    for path in candidates:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TableError(f"{path}: {err}") from err
        if benchmark is None:
            benchmark = data.get("benchmark")
        if data.get("benchmark") == benchmark:
            files.append(path)
    if not files:
        raise TableError(f"{spec}: no results files (results/<part>/{spec}-*.json)")
    return benchmark, files


def render_results_summary(spec: str, lang: str = "en") -> str:
    """Markdown: one row per measured file of a benchmark (``spec``: its name or a glob of files),
    then, when any exist, the published figures in a table of their own with a source per row."""
    benchmark, files = summary_files(spec)
    if benchmark not in SUMMARIES:
        raise TableError(f"{spec}: no summary for benchmark '{benchmark}' "
                         f"(summaries: {', '.join(SUMMARIES)})")
    titles, summarize = SUMMARIES[benchmark]
    dev, date, file = _COMMON[lang]
    measured, published, captions = [], [], []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            if data.get("origin") == "published":
                if benchmark not in PUBLISHED:
                    raise TableError(f"no published table for {benchmark}")
                cells_of = PUBLISHED[benchmark][1]
                for r in data["results"]:
                    published.append(cells_of(r) + [f"[[{len(published) + 1}]]({r['source']})"])
                who = data.get("published_by", "")
                method = data.get("method", "").rstrip(".")
                captions.append(_PUBLISHED_CAPTION[lang].format(who=who, method=method))
                continue
            for cells in summarize(data):
                measured.append([data["device"] or "—", *cells, data["date_utc"][:10], f"`{path.name}`"])
        except (KeyError, TypeError, ValueError) as err:
            raise TableError(f"{path}: cannot summarize ({type(err).__name__}: {err})") from err
    parts = []
    if measured:
        header = [dev, *titles[lang], date, file]
        align = [":--"] + ["--:" if _is_number(measured[0][i].split(" ")[0].replace("×", ""))
                           else ":--" for i in range(1, len(header))]
        parts.append(_markdown(header, measured, align) + "\n\n" + _MEASURED_CAPTION[lang])
    if published:
        header = PUBLISHED[benchmark][0][lang] + [_SOURCE[lang]]
        align = [":--"] + ["--:" if _is_number(published[0][i].split(" ")[0].replace("×", "").rstrip("%"))
                           else ":--" for i in range(1, len(header))]
        parts.append(_markdown(header, published, align) + "\n\n" + " ".join(dict.fromkeys(captions)))
    return "\n\n".join(parts)


def split_view(path) -> tuple[Path, str | None]:
    """``data/x.yml#memory`` -> (Path('data/x.yml'), 'memory'); no ``#`` -> (path, None)."""
    text = str(path)
    if "#" in text:
        file, view = text.split("#", 1)
        return Path(file), view
    return Path(text), None


def is_results_summary(spec) -> bool:
    """True when a results-table argument names a benchmark ("mamf_finder") or a glob of results
    files, i.e. every results file of a benchmark rather than one file."""
    text = str(spec)
    return "*" in text or ("/" not in text and "." not in text)


def render(path: Path, lang: str = "en") -> str:
    """Render a data (.yml/.yaml, optionally ``FILE#VIEW``) or results (.json) file, or every
    results file of a benchmark (``is_results_summary``)."""
    if is_results_summary(path):
        return render_results_summary(str(path), lang)
    path, view = split_view(path)
    if path.suffix in (".yml", ".yaml"):
        return render_data_table(path, lang, view)
    if path.suffix == ".json":
        return render_results_table(path, lang, view)
    raise TableError(f"{path}: expected a .yml data file or a .json results file")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="data/…/*.yml[#VIEW], results/…/*.json[#VIEW], a benchmark "
                        "name (every results file of it) or a glob of results files")
    parser.add_argument("--lang", choices=LANGS, default="en")
    args = parser.parse_args(argv)
    try:
        print(render(args.file, args.lang))
    except TableError as err:
        print(f"tables.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
