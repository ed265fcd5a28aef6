"""Render the book's data into Markdown tables: spec data (YAML) and measured results (JSON).

A figure lives in one file; chapters place it with a marker line that the build expands
(build/hooks/book_markers.py):

    <!-- data-table: data/network/pcie.yml -->
    <!-- results-table: results/network/all_reduce_bench-cpu-gloo-2proc.json -->

Spec data (YAML)::

    caption: {en: "...", zh: "..."}          # optional
    columns:
      - {key: gen, title: {en: Generation, zh: 代}}
    rows:
      - {gen: "PCIe 4.0", source: "https://..."}   # every row names its source
    notes: {en: "...", zh: "..."}            # optional

Measured results (JSON) are the files our benchmark scripts write with ``--json``; the
``benchmark`` key picks the columns (see RESULTS_COLUMNS).

Usage: ``python tools/tables.py FILE [--lang zh]`` prints the Markdown.
"""

import argparse
import json
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


def render_data_table(path: Path, lang: str = "en") -> str:
    """Markdown for a spec-data YAML file in language ``lang``.

    Every row must have a ``source`` URL, rendered as a link in the last column.
    Raises TableError (naming the file) for a missing key, column or source.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise TableError(f"{path}: {err}") from err
    if not isinstance(data, dict) or not data.get("columns") or not data.get("rows"):
        raise TableError(f"{path}: needs 'columns' and 'rows'")
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


# benchmark name -> (column titles per language, function row -> cells)
RESULTS_COLUMNS = {
    "all_reduce": (
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

_CAPTION = {
    "en": "Measured with `{command}`: {world_size} ranks, backend {backend}, device {device}, "
    "dtype {dtype}, torch {torch_version}, {date}. GBps = 10⁹ bytes/s. "
    "Peak busbw: **{peak:.3f} GBps**.",
    "zh": "由 `{command}` 实测：{world_size} 个 rank，后端 {backend}，设备 {device}，"
    "数据类型 {dtype}，torch {torch_version}，{date}。GBps = 10⁹ 字节/秒。"
    "busbw 峰值：**{peak:.3f} GBps**。",
}


def render_results_table(path: Path, lang: str = "en") -> str:
    """Markdown for a benchmark's ``--json`` output, with a caption saying how it was measured.

    Raises TableError (naming the file) for an unknown benchmark or a malformed file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        titles, row_cells = RESULTS_COLUMNS[data["benchmark"]]
        rows = [row_cells(r) for r in data["results"]]
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
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TableError(f"{path}: cannot render results ({type(err).__name__}: {err})") from err
    align = ["--:"] * len(titles[lang])
    return _markdown(titles[lang], rows, align) + "\n\n" + caption


def render(path: Path, lang: str = "en") -> str:
    """Render a data (.yml/.yaml) or results (.json) file."""
    path = Path(path)
    if path.suffix in (".yml", ".yaml"):
        return render_data_table(path, lang)
    if path.suffix == ".json":
        return render_results_table(path, lang)
    raise TableError(f"{path}: expected a .yml data file or a .json results file")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="data/…/*.yml or results/…/*.json")
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
