"""The book's calculators: forms over the book's own scripts that run in the reader's browser.

One file per calculator, ``data/calculators/<name>.yml``; a page places it with the marker
``<!-- calculator: <name> -->`` (build/hooks/calculators.py expands it, book/assets/calculator.js
runs it under Pyodide)::

    script: scripts/training/memory_estimator.py   # the very file the chapter embeds
    chapter: training/memory.md                     # the chapter that explains it (book/<lang>/)
    example: [--params, "7.5e9", --dp, "64"]        # the worked example, and the form's start
    pickers:                                        # fill fields from a row of a data file
      - label: {en: Model, zh: 模型}
        data: data/models/architectures.yml
        key: name                                   # the row's name in the list
        sets: {--layers: num_hidden_layers}         # option: column (rows without it are left out)
    fields:                                         # the options the form shows, in this order
      - {option: --params, label: {en: Parameters, zh: 参数量}}
      - {option: --model, label: {...}, choices_from: {data: data/models/architectures.yml, key: name}}
    form_messages:                                  # the script's phrases that name command-line-only
      - {cli: "(see --list)", en: ..., zh: ...}     # options, as the form says them
    checks:                                         # what the in-browser test enters: five or more
      - {--params: "7.5e9", --dp: "64"}             # configurations the script accepts, then one
      - {--params: "7e9", --dp: "0"}                # it refuses (tests/build/test_calculators.py)

The shape is checked against ``tools/schemas/data/calculator.schema.json`` (a bad key or value is
one CalculatorError line naming the file, the field and the key); ``load`` checks the rest.

What a field is (a flag, a choice, several choices, a value), its choices, default and help come from the script's
own argparse parser (``build_parser()``), so the form cannot drift from the command line; the
script validates every value itself, so the page shows the command line's own error message.

``python tools/calculators.py`` lists the calculators; ``python tools/calculators.py NAME``
prints the form description the page receives, as JSON.
"""

import argparse
import functools
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "data" / "calculators"
SCHEMA = REPO / "tools" / "schemas" / "data" / "calculator.schema.json"
LANGS = ("en", "zh")
RUN_TIMEOUT_S = 60  # one calculator run on the command line; they take well under a second


class CalculatorError(ValueError):
    """A calculator file that does not describe a usable form; the message names the file."""


def names() -> list[str]:
    """Every calculator, by file name (data/calculators/<name>.yml), sorted."""
    return sorted(p.stem for p in SPECS.glob("*.yml"))


def load(name: str) -> dict:
    """The calculator file ``name``, checked: its shape against SCHEMA, and that its script exists,
    every field and picker names an option of the script's parser, every check sets only fields
    of the form and every data file exists. Raises CalculatorError naming the file."""
    from tools import tables

    path = SPECS / f"{name}.yml"
    where = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise CalculatorError(f"{where}: {err}") from None
    problems = tables.schema_problems(spec, where, SCHEMA)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CalculatorError(problems[0] + more)
    if not (REPO / spec["script"]).is_file():
        raise CalculatorError(f"{where}: script {spec['script']} does not exist")
    options = parser_options(spec["script"])
    for field in spec["fields"]:
        if field["option"] not in options:
            raise CalculatorError(f"{where}: {field['option']!r} is not an option of {spec['script']}")
        action = options[field["option"]]
        if _takes_several(action) and _kind(action) != "multi":
            raise CalculatorError(f"{where}: {field['option']} takes several values without choices: "
                                  "a form has no field for that")
    for picker in spec.get("pickers", []):
        for option in picker["sets"]:
            if option not in options:
                raise CalculatorError(f"{where}: picker sets {option!r}, not an option of {spec['script']}")
    shown = {field["option"] for field in spec["fields"]}
    for number, check in enumerate(spec.get("checks", []), 1):
        unknown = sorted(set(check) - shown)
        if unknown:
            raise CalculatorError(f"{where}: check {number} sets {unknown[0]}, not a field of the form")
        for option, value in check.items():
            if isinstance(value, list) != (_kind(options[option]) == "multi"):
                raise CalculatorError(f"{where}: check {number} sets {option} to {value!r}: a list is "
                                      "for an option that takes several of its choices, and only for it")
    for rel in data_files(spec):
        if not (REPO / rel).is_file():
            raise CalculatorError(f"{where}: data file {rel} does not exist")
    spec["name"] = name
    return spec


def data_files(spec: dict) -> list[str]:
    """Every data file the calculator reads, at build time or in the page."""
    found = [p["data"] for p in spec.get("pickers", [])]
    found += [f["choices_from"]["data"] for f in spec["fields"] if "choices_from" in f]
    return sorted(set(found))


def _parser(script: str) -> argparse.ArgumentParser:
    """The script's own parser: its ``build_parser()``, imported by path (the scripts import the
    standard library only at import time, so this needs neither torch nor a GPU)."""
    path = REPO / script
    module_name = "_calculator_" + path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module.build_parser()


def parser_options(script: str) -> dict[str, argparse.Action]:
    """Each long option of the script (``--params``) and its argparse action. The script is
    imported once per version of the file (``load`` and ``form`` both ask, for each page of each
    language; ``mkdocs serve`` sees an edit); do not change the dict returned."""
    return _options(script, (REPO / script).stat().st_mtime_ns)


@functools.cache
def _options(script: str, mtime_ns: int) -> dict[str, argparse.Action]:
    return {opt: action for action in _parser(script)._actions
            for opt in action.option_strings if opt.startswith("--")}


def _takes_several(action: argparse.Action) -> bool:
    return action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1)


def _kind(action: argparse.Action) -> str:
    """flag (no value), multi (one or more of its choices: nargs + or * with choices), choice, value."""
    if action.nargs == 0:
        return "flag"
    if _takes_several(action) and action.choices:
        return "multi"
    return "choice" if action.choices else "value"


def _data(rel: str) -> dict:
    """The data file ``rel``, parsed and checked against its schema (tools/tables.py's
    data_problems); CalculatorError naming the file, the row and the field when it fails."""
    from tools import tables

    path = REPO / rel
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    problems = tables.data_problems(data, path)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CalculatorError(problems[0] + more)
    return data


def _rows(rel: str) -> list[dict]:
    return _data(rel)["rows"]


def _number(value) -> str | None:
    """A data file's figure as the form's text: numbers only (a "—" or a range is no input)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return repr(value) if isinstance(value, float) else str(value)


def form(spec: dict, lang: str) -> dict:
    """What the page's script needs, in ``lang``: the fields (option, label, kind, choices,
    default, help, starting value from the example), the pickers (rows of name and values) and
    the example's argv, and the answer's template in ``lang``."""
    options = parser_options(spec["script"])
    example = spec["example"]
    fields = []
    for field in spec["fields"]:
        action = options[field["option"]]
        kind = _kind(action)
        choices = [str(c) for c in action.choices] if action.choices else None
        if "choices_from" in field:
            source = field["choices_from"]
            choices = [str(row[source["key"]]) for row in _rows(source["data"])]
            kind = "choice"
        if field["option"] in example:
            i = example.index(field["option"])
            if kind == "multi":  # its values run to the next option; the form holds them as "a b"
                rest = example[i + 1:]
                value = " ".join(rest[:next((j for j, v in enumerate(rest) if v.startswith("--")), len(rest))])
            else:
                value = "1" if kind == "flag" else example[i + 1]
        else:
            value = ""
        default = action.default if action.default not in (None, False, argparse.SUPPRESS) else None
        fields.append({
            "option": field["option"], "label": field["label"][lang],
            "kind": kind, "choices": choices, "value": value,
            "default": None if default is None else str(default),
            "help": (action.help or "").replace("%%", "%"),
        })
    pickers = []
    for picker in spec.get("pickers", []):
        rows = []
        for row in _rows(picker["data"]):
            values = {opt: _number(row.get(col)) for opt, col in picker["sets"].items()}
            if all(v is not None for v in values.values()):
                rows.append({"name": str(row[picker["key"]]), "values": values})
        pickers.append({"label": picker["label"][lang], "rows": rows})
    return {"name": spec["name"], "script": spec["script"], "fields": fields, "pickers": pickers,
            "example": example, "answer": spec["answer"][lang],
            "form_messages": [[m["cli"], m[lang]] for m in spec.get("form_messages", [])]}


def run_cli(script: str, argv: list[str]) -> dict:
    """``python SCRIPT ARGV --json FILE`` in a subprocess, as a reader runs it: the exit status,
    stdout, stderr, the --json text ("" on failure) and the last ``SCRIPT: error:`` line."""
    with tempfile.TemporaryDirectory(prefix="calculator-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.run([sys.executable, str(REPO / script), *argv, "--json", str(out)],
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=REPO)
        text = out.read_text(encoding="utf-8") if proc.returncode == 0 and out.exists() else ""
    name = Path(script).name
    errors = [line for line in proc.stderr.splitlines() if line.startswith(f"{name}: error:")]
    printed = proc.stdout.replace(f"# wrote {out}\n", "")  # the reader's command names no --json file
    return {"status": proc.returncode, "stdout": printed, "stderr": proc.stderr, "json": text,
            "error": errors[-1] if errors else ""}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="List the calculators, or print one's form as JSON.")
    parser.add_argument("name", nargs="?", choices=names())
    parser.add_argument("--lang", choices=LANGS, default="en")
    args = parser.parse_args(argv)
    if args.name is None:
        print("\n".join(names()))
        return 0
    try:
        print(json.dumps(form(load(args.name), args.lang), ensure_ascii=False, indent=2))
    except CalculatorError as err:
        print(f"calculators.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
