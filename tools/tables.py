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
      - {key: gen, title: {en: Generation, zh: "..."}}
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

Measured results (JSON) are the files our benchmark scripts write with ``--json``. How a
benchmark's files render is data too: ``tools/schemas/<benchmark>.view.yml``, beside its results
schema (shape: ``tools/schemas/views/view.schema.json``), gives the columns and the caption of
one file's table, named views of it (``FILE#VIEW``), the summary row per file and the columns of
published figures; ``tools/schemas/views/common.view.yml`` the words all tables share. No
benchmark has code here. A view's texts are templates, Python format specs included::

    {size_bytes|binary_size}            a key of the row (of the file, in a caption), a filter
    {inputs.context}  {results.0.m}     a path into mappings and lists
    {mean_tflops or max_tflops:,.1f}    the first that has a value, then a format spec
    {max(GBps, op=save*).size_bytes}    of the rows (a summary's, or the file's in a caption)
                                        whose op matches save*, the one with the greatest GBps;
                                        min(...) the least
    {$best}                             the view's part "best"

Filters (FILTERS): binary_size (1 MiB), date (the day of a date_utc), div(N), mul(N), signed
(+0.0896; no sign when it rounds to zero), positive (no value unless > 0), label(NAME) (the
view's words for a value), join(SEP), rstrip(CHARS). A placeholder with no value (a missing key,
or null) makes a cell its column's ``missing`` text, and is an error elsewhere.

Usage: ``python tools/tables.py FILE [--lang zh]`` prints the Markdown.
"""

import argparse
import fnmatch
import functools
import json
import math
import re
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

LANGS = ("en", "zh")
REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "tools" / "schemas"


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


# --- the data files' schemas -------------------------------------------------------------------

DATA_SCHEMAS = SCHEMAS / "data"
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


@functools.cache
def _validator_class():
    """Draft 2020-12 with finite numbers and true integers as the types."""
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": _finite_number, "integer": _integer})
    return validators.extend(Draft202012Validator, type_checker=checker)


@functools.cache
def _cached_validator(schema: str, mtime_ns: int):
    """A validator for ``schema``, every data schema registered (they refer to table.schema.json
    by relative URI)."""
    from referencing import Registry, Resource

    resources = []
    for path in DATA_SCHEMAS.rglob("*.schema.json"):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((contents["$id"], Resource.from_contents(contents)))
    contents = json.loads(Path(schema).read_text(encoding="utf-8"))
    _validator_class().check_schema(contents)
    return _validator_class()(contents, registry=Registry().with_resources(resources))


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
    elif len(loc) >= 2 and loc[0] in ("columns", "fields") and isinstance(loc[1], int):
        item = data[loc[0]][loc[1]]  # a table's column (its key) or a calculator's field (option)
        name = item.get("key", item.get("option")) if isinstance(item, dict) else None
        where.append(f"{loc[0][:-1]} {loc[1] + 1}" + (f" ({name})" if isinstance(name, str) else ""))
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
    return schema_problems(data, path, data_schema(path))


def schema_problems(data, path, schema: Path) -> list[str]:
    """Every way ``data`` (file ``path``, parsed) breaks ``schema``, one line each, in the file's
    order (tools/calculators.py checks its files with it)."""
    validator = _validator(schema)
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
    header.append(common_words()["source"][lang])
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


# --- measured results (JSON): each benchmark's view file --------------------------------------

VIEWS = SCHEMAS  # where <benchmark>.view.yml are, beside the results schemas (a test uses its own)
VIEW_SCHEMA = SCHEMAS / "views" / "view.schema.json"
COMMON = SCHEMAS / "views" / "common.view.yml"  # the words every table shares


class MissingValue(KeyError):
    """A placeholder with no value: its key is missing or null."""

    def __str__(self) -> str:
        return f"no value for {{{self.args[0]}}}"


@dataclass(frozen=True)
class _Scope:
    """What a template is filled from."""
    values: dict        # a placeholder's first name is a key of it: a result row, the file, an item
    view: dict          # the benchmark's view: its parts and labels
    lang: str
    rows: list | tuple = ()  # what max(...) and min(...) choose from


def _binary_size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


class _Signed(float):
    """A change, with its sign unless it rounds to zero: "+0.0896", "0.0000" (not "-0.0000")."""

    def __format__(self, spec: str) -> str:
        text = format(float(self), "+" + spec)
        return text[1:] if set(text[1:]) <= set("0.,%") else text


def _label(value, table: str, scope: _Scope) -> str:
    """The view's word for ``value`` in the page's language, or the value itself."""
    key = json.dumps(value) if isinstance(value, bool) else str(value)  # YAML keys "true", "false"
    return scope.view["labels"][table].get(key, {}).get(scope.lang, str(value))


# name -> (takes an argument, (value, argument, scope) -> value); None is no value
FILTERS = {
    "binary_size": (False, lambda v, a, s: _binary_size(v)),       # 1048576 -> 1 MiB
    "date": (False, lambda v, a, s: str(v)[:10]),                   # a date_utc's day
    "div": (True, lambda v, a, s: v / float(a)),                    # bytes|div(1e9): GB
    "mul": (True, lambda v, a, s: float(a) * v),                    # seconds|mul(1e3): ms
    "signed": (False, lambda v, a, s: _Signed(v)),
    "positive": (False, lambda v, a, s: v if v > 0 else None),
    "label": (True, lambda v, a, s: _label(v, a, s)),
    "join": (True, lambda v, a, s: a.join(map(str, v))),            # [3, 224, 224]|join(×)
    "rstrip": (True, lambda v, a, s: str(v).rstrip(a)),             # a sentence's own period
}
_SEGMENT = re.compile(r"(?P<name>\$?[A-Za-z_]\w*|\d+)(?:\((?P<args>[^()]*)\))?")
_CALL = re.compile(r"(?P<name>[a-z_]+)(?:\((?P<arg>[^()]*)\))?")
_AGGREGATIONS = {"max": max, "min": min}


@functools.cache
def _parse(field: str) -> tuple[tuple, tuple]:
    """A placeholder, ``a.b or c|filter(arg)|filter``, as (paths, filters): each path a tuple of
    (name, call arguments or None), each filter (name, argument or None). ValueError if malformed."""
    expression, *filters = field.split("|")
    paths = []
    for text in expression.split(" or "):
        text = text.strip()
        segments = [(m["name"], m["args"]) for m in _SEGMENT.finditer(text)]
        if ".".join(n + ("" if a is None else f"({a})") for n, a in segments) != text:
            raise ValueError(f"{{{field}}}: not a path (key.key, key.0, max(key), $part)")
        for number, (name, args) in enumerate(segments):
            if number and (name.startswith("$") or args is not None):
                raise ValueError(f"{{{field}}}: {name} can only begin a path")
            if args is not None and name not in _AGGREGATIONS:
                raise ValueError(f"{{{field}}}: {name}() is not one of {', '.join(_AGGREGATIONS)}")
            if args is not None and all("=" in a or not a.strip() for a in args.split(",")):
                raise ValueError(f"{{{field}}}: {name}() needs a key to compare")
        paths.append(tuple(segments))
    calls = []
    for text in filters:
        match = _CALL.fullmatch(text.strip())
        if not match or match["name"] not in FILTERS:
            raise ValueError(f"{{{field}}}: unknown filter {text.strip()!r} (filters: {', '.join(FILTERS)})")
        if FILTERS[match["name"]][0] != (match["arg"] is not None):
            raise ValueError(f"{{{field}}}: {match['name']} takes "
                             + ("an argument, name(...)" if FILTERS[match["name"]][0] else "no argument"))
        calls.append((match["name"], match["arg"]))
    return tuple(paths), tuple(calls)


def _choose(aggregation: str, args: str, rows) -> dict | None:
    """``max(GBps, op=save*)``: of the rows whose op matches save*, the one with the greatest GBps
    (several keys: compared in turn); None when no row has the keys."""
    keys = [a.strip() for a in args.split(",") if "=" not in a]
    conditions = [[part.strip() for part in a.split("=", 1)] for a in args.split(",") if "=" in a]
    candidates = [row for row in rows
                  if all(fnmatch.fnmatchcase(str(row.get(k)), pattern) for k, pattern in conditions)
                  and all(row.get(k) is not None for k in keys)]
    if not candidates:
        return None
    return _AGGREGATIONS[aggregation](candidates, key=lambda row: tuple(row[k] for k in keys))


def _lookup(path: tuple, scope: _Scope):
    (name, args), *rest = path
    if name.startswith("$"):
        value = _part(name[1:], scope)
    elif args is not None:
        value = _choose(name, args, scope.rows)
    else:
        value = scope.values.get(name)
    for name, _ in rest:
        if isinstance(value, dict):
            value = value.get(name)
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            value = None
    return value


def _value(field: str, scope: _Scope):
    """A placeholder's value: its first path that has one, through its filters."""
    paths, filters = _parse(field)
    value = next((v for v in (_lookup(p, scope) for p in paths) if v is not None), None)
    for name, arg in filters:
        if value is None:
            break
        value = FILTERS[name][1](value, arg, scope)
    if value is None:
        raise MissingValue(field)
    return value


def _fill(template: str, scope: _Scope) -> str:
    """``template`` with each ``{placeholder[:format spec]}`` replaced; MissingValue when one has
    no value."""
    parts = []
    for literal, field, spec, _ in string.Formatter().parse(template):
        parts.append(literal)
        if field is not None:
            parts.append(format(_value(field, scope), spec or ""))
    return "".join(parts)


def _part(name: str, scope: _Scope) -> str:
    """The view's part ``name``: a template; the first of several templates that can be filled; or
    each item of a mapping or list (absent: none), filled with {key} and {value} and joined."""
    part = scope.view["parts"][name]
    if isinstance(part, str):
        return _fill(part, scope)
    if "first" in part:
        for template in part["first"]:
            try:
                return _fill(template, scope)
            except MissingValue:
                continue
        raise MissingValue("$" + name)
    items = _lookup(_parse(part["each"])[0][0], scope) or {}
    items = items.items() if isinstance(items, dict) else enumerate(items)
    return part["join"].join(
        _fill(part["item"], _Scope({"key": key, "value": value}, scope.view, scope.lang, scope.rows))
        for key, value in items
        if not part.get("numbers_only") or _finite_number(None, value))


def _cell_text(column: dict, scope: _Scope) -> str:
    try:
        return _fill(column["cell"], scope)
    except MissingValue:
        if "missing" in column:
            return column["missing"]
        raise


def _groups(rows: list, key: str | None, order: str | None, data: dict) -> list[tuple]:
    """(value, rows) of each value of the rows' ``key``, in the order the file's ``order`` lists
    them (else sorted), values without rows left out; without ``key``, (None, every row)."""
    if key is None:
        return [(None, rows)]
    values = data.get(order) if order else None
    values = values or sorted({row[key] for row in rows})
    grouped = [(value, [row for row in rows if row.get(key) == value]) for value in values]
    return [(value, members) for value, members in grouped if members]


# --- the view files: loaded, validated and cached ---------------------------------------------

def _rel(path: Path) -> str:
    path = Path(path)
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


@functools.cache
def _view_validator(definition: str, mtime_ns: int):
    """A validator for the view schema's ``$defs/<definition>``: a benchmark's view, or common."""
    contents = json.loads(VIEW_SCHEMA.read_text(encoding="utf-8"))
    contents["$ref"] = f"#/$defs/{definition}"
    _validator_class().check_schema(contents)
    return _validator_class()(contents)


def _templates(view: dict):
    """(key, template) of every template of a benchmark's view, for the checks."""
    for where, columns in [("columns", view.get("columns")),
                           ("summary.columns", view.get("summary", {}).get("columns")),
                           ("published.columns", view.get("published", {}).get("columns"))]:
        for number, column in enumerate(columns or []):
            yield f"{where}.{number}.cell", column["cell"]
    texts = [("caption", view["caption"])]
    texts += [(f"views.{name}.caption", v["caption"]) for name, v in view.get("views", {}).items()]
    for where, text in texts:
        for lang in LANGS:
            yield f"{where}.{lang}", text[lang]
    for name, part in view.get("parts", {}).items():
        if isinstance(part, str):
            yield f"parts.{name}", part
        for number, template in enumerate(part.get("first", []) if isinstance(part, dict) else []):
            yield f"parts.{name}.first.{number}", template
        if isinstance(part, dict) and "item" in part:
            yield f"parts.{name}.item", part["item"]
            yield f"parts.{name}.each", "{" + part["each"] + "}"  # a path, checked as a placeholder


def _template_problems(view: dict) -> list[str]:
    """``KEY: what is wrong`` for each template the renderer cannot read: a malformed placeholder,
    an unknown filter, label table or part, or a part that contains itself."""
    problems, uses = [], {}
    for where, template in _templates(view):
        try:
            for _, field, spec, conversion in string.Formatter().parse(template):
                if field is None:
                    continue
                if conversion or "{" in (spec or ""):
                    raise ValueError(f"{{{field}}}: no !conversion and no nested {{}} in a format spec")
                paths, filters = _parse(field)
                for name in (path[0][0] for path in paths):
                    if name.startswith("$") and name[1:] not in view.get("parts", {}):
                        raise ValueError(f"{{{field}}}: no part {name[1:]!r} in parts")
                    if name.startswith("$") and where.startswith("parts."):
                        uses.setdefault(where.split(".")[1], set()).add(name[1:])
                for name, arg in filters:
                    if name == "label" and arg not in view.get("labels", {}):
                        raise ValueError(f"{{{field}}}: no label table {arg!r} in labels")
                    if name in ("div", "mul"):
                        float(arg)
        except ValueError as err:
            problems.append(f"{where}: {err}")
    for name in uses:  # a part may use others, but never itself, however indirectly
        seen, todo = set(), set(uses[name])
        while todo:
            seen |= todo
            todo = set().union(*(uses.get(n, set()) for n in todo)) - seen
        if name in seen:
            problems.append(f"parts.{name}: uses itself")
    return problems


@functools.cache
def _load_view(path: Path, mtime_ns: int, definition: str) -> dict:
    try:
        view = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise TableError(f"{_rel(path)}: {err}") from None
    validator = _view_validator(definition, VIEW_SCHEMA.stat().st_mtime_ns)
    problems = [_problem(e, view, _rel(path)) for e in sorted(validator.iter_errors(view), key=_order)]
    if not problems and definition == "benchmark":
        problems = [f"{_rel(path)}: {line}" for line in _template_problems(view)]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TableError(problems[0] + more)
    return view


def benchmark_view(benchmark: str) -> dict:
    """How ``benchmark``'s results render: ``VIEWS/<benchmark>.view.yml``, checked against
    views/view.schema.json and for templates the renderer cannot fill. TableError naming the file
    and the key otherwise."""
    path = VIEWS / f"{benchmark}.view.yml"
    if not re.fullmatch(r"[a-z][a-z0-9_]*", str(benchmark)) or not path.is_file():
        raise TableError(f"no view for benchmark {benchmark!r}: {_rel(path)} says how its results "
                         "render (CONTRIBUTING.md, Results files and their schemas)")
    return _load_view(path, path.stat().st_mtime_ns, "benchmark")


def common_words() -> dict:
    """The words every table shares (views/common.view.yml): column titles and captions."""
    return _load_view(COMMON, COMMON.stat().st_mtime_ns, "common")


def render_results_table(path: Path, lang: str = "en", view: str | None = None) -> str:
    """Markdown for a benchmark's ``--json`` output, with a caption saying how it was measured, as
    its view file says; ``view``: one of the file's named views (mamf_finder's "best": the five
    fastest shapes of each dtype).

    Raises TableError (naming the file) for a benchmark without a view file, an unknown view, a
    published file (it renders with the others of its benchmark) or a malformed file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("origin") == "published":
            raise TableError(f"{path}: published figures render with the other files of their "
                             f"benchmark: <!-- results-table: {data['benchmark']} -->")
        spec = benchmark_view(data["benchmark"])
        rows, shown = data["results"], ""
        if view is not None:
            chosen = spec.get("views", {}).get(view)
            if chosen is None:
                raise TableError(f"{path}: no view '#{view}' for {data['benchmark']} results")
            rows = [row for _, members in _groups(rows, chosen.get("group"), chosen.get("order"), data)
                    for row in sorted(members, key=lambda row: -row[chosen["by"]])[:chosen["top"]]]
            counts = {"top": chosen["top"], "measured": len(data["results"])}
            shown = _fill(chosen["caption"][lang], _Scope({**data, **counts}, spec, lang, data["results"]))
        header = [column["title"][lang] for column in spec["columns"]]
        cells = [[_cell_text(column, _Scope(row, spec, lang)) for column in spec["columns"]] for row in rows]
        caption = _fill(spec["caption"][lang], _Scope(data, spec, lang, data["results"])) + shown
    except TableError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise TableError(f"{path}: cannot render results ({type(err).__name__}: {err})") from err
    # numbers right-aligned; a first column of names (a model, a method, a pattern) left-aligned
    align = ["--:"] * len(header)
    if any(not _is_number(row[0]) for row in cells):
        align[0] = ":--"
    return _markdown(header, cells, align) + "\n\n" + caption


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
# measured file (per group, e.g. dtype, where the view's summary has one): the device, the
# summary's columns, the date and the file. A reader's pull request that adds a file
# (tools/results.py add) adds a row. Files with ``origin: published`` follow in a second table,
# one row per published figure (the view's ``published`` columns) with its source.


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
    view = benchmark_view(benchmark)
    if "summary" not in view:
        with_summary = [p.name.removesuffix(".view.yml") for p in sorted(VIEWS.glob("*.view.yml"))
                        if "summary" in benchmark_view(p.name.removesuffix(".view.yml"))]
        raise TableError(f"{spec}: no summary for benchmark '{benchmark}' "
                         f"(summaries: {', '.join(with_summary)})")
    summary, words = view["summary"], common_words()
    measured, published, captions = [], [], []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        try:
            if data.get("origin") == "published":
                if "published" not in view:
                    raise TableError(f"no published table for {benchmark}")
                for row in data["results"]:
                    cells = [_cell_text(c, _Scope(row, view, lang)) for c in view["published"]["columns"]]
                    published.append(cells + [f"[[{len(published) + 1}]]({row['source']})"])
                about = {"published_by": data.get("published_by", ""), "method": data.get("method", "")}
                captions.append(_fill(words["published_caption"][lang], _Scope(about, view, lang)))
                continue
            key = summary.get("group")
            for value, rows in _groups(data["results"], key, summary.get("order"), data):
                scope = _Scope({**data, key: value} if key else data, view, lang, rows)
                cells = [_cell_text(column, scope) for column in summary["columns"]]
                measured.append([data["device"] or "—", *cells, data["date_utc"][:10], f"`{path.name}`"])
        except (KeyError, TypeError, ValueError) as err:
            raise TableError(f"{path}: cannot summarize ({type(err).__name__}: {err})") from err
    parts = []
    if measured:
        header = [words["device"][lang], *(c["title"][lang] for c in summary["columns"]),
                  words["date"][lang], words["file"][lang]]
        align = [":--"] + ["--:" if _is_number(measured[0][i].split(" ")[0].replace("×", ""))
                           else ":--" for i in range(1, len(header))]
        parts.append(_markdown(header, measured, align) + "\n\n" + words["measured_caption"][lang])
    if published:
        header = [c["title"][lang] for c in view["published"]["columns"]] + [words["source"][lang]]
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
