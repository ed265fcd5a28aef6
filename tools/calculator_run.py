"""Run one of the book's scripts as its command line would, and return what the calculator pages
show: the printed report, the ``--json`` file (text and flattened into rows), the exit status and
the one-line error.

The calculator pages (book/assets/calculator.js) run this module in the browser under Pyodide,
so it imports the standard library only; the build (tools/calculators.py) runs the same
``flatten`` on the worked example, and the tests compare both with the real command line.

    run("/book/scripts/training/memory_estimator.py", ["--params", "7e9"]) -> JSON text of
    {"status": 0, "stdout": "...", "error": "", "json": "...", "rows": [["params", "7000000000.0"], ...],
     "answer": "Each GPU needs ...", "command": "python scripts/training/memory_estimator.py --params 7e9"}
"""

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import sys

RESULT = "/tmp/calculator-result.json"  # the --json file the script writes


def flatten(value, prefix: str = "") -> list[list[str]]:
    """Every leaf of a JSON value as ``[path, json text]``, in document order: object keys join
    with ".", list items are ``[i]``; an empty object or list is a leaf of its own. The text is
    ``json.dumps`` of the leaf, so 2 and 2.0 stay apart (the comparison with the CLI is exact)."""
    if isinstance(value, dict) and value:
        return [row for key, item in value.items()
                for row in flatten(item, f"{prefix}.{key}" if prefix else str(key))]
    if isinstance(value, list) and value:
        return [row for i, item in enumerate(value) for row in flatten(item, f"{prefix}[{i}]")]
    return [[prefix, json.dumps(value, ensure_ascii=False)]]


# {path}, {path:spec}, {path/1e9:.1f}, {path*100:.0f}: a row of the result, scaled, formatted;
# [[ ... ]]: a part left out when a field in it is missing or null
_FIELD = re.compile(r"\{([^{}:/*]+)(?:([/*])([0-9.eE+-]+))?(?::([^{}]*))?\}")
_OPTIONAL = re.compile(r"\[\[(.*?)\]\]", re.S)


def answer(template: str, data) -> str:
    """``template`` (a calculator's one-sentence answer, data/calculators/<name>.yml) with each
    ``{path[/number or *number][:spec]}`` replaced by the value at ``path`` of ``data`` (a row
    name of :func:`flatten`), divided or multiplied by the number, formatted by the Python format
    ``spec``; a part in ``[[...]]`` is left out when a field in it is missing or null. Raises
    KeyError for a path that ``data`` lacks, ValueError for a null value, ValueError or TypeError
    for a spec that does not suit the value."""
    values = dict(flatten(data))

    def field(match):
        path, op, number, spec = match.groups()
        value = json.loads(values[path.strip()])
        if value is None:
            raise ValueError(f"{path} is null")
        if op:
            factor = json.loads(number)  # 2 stays an int: {count*2:,} prints no ".0"
            value = value / factor if op == "/" else value * factor
        return format(value, spec or "")

    def optional(match):
        try:
            return _FIELD.sub(field, match.group(1))
        except (KeyError, ValueError):
            return ""
    return _FIELD.sub(field, _OPTIONAL.sub(optional, template))


def form_message(message: str, fields: list[list[str]], rewrites: list[list[str]]) -> str:
    """A script's one-line message worded for its form: each ``[phrase, form's words]`` of
    ``rewrites`` replaced first (a phrase that names an option only the command line has, such as
    "(see --list)"), then each ``[option, label]`` of ``fields`` that the form shows named by its
    label too ("“Model” (--model)"), and a word over 60 characters (a pasted 5,000-digit number)
    cut to 60 and "…". The calculator pages (calculator.js) word their errors and notices with it."""
    text = re.sub(r"\S{61,}", lambda m: m.group(0)[:60] + "…", message)
    for phrase, words in rewrites:
        text = text.replace(phrase, words)
    for option, label in fields:
        text = re.sub(rf"(^|[^\w-])({re.escape(option)})(?![\w-])",
                      lambda m, label=label: f"{m.group(1)}“{label}” ({m.group(2)})", text)
    return text


def command(script: str, argv: list[str]) -> str:
    """The command line a reader types for the same result, from the repository root."""
    rel = script.split("/book/", 1)[-1]
    return shlex.join(["python", rel, *argv])


def run(script: str, argv: list[str], template: str = "") -> str:
    """Run ``script`` (a path, its folder is put on sys.path) with ``argv`` plus ``--json`` to a
    scratch file, as ``python SCRIPT ARGV`` would: its ``run_main(main)`` with ``sys.argv[0]``
    set, so messages name the script as on a terminal. Returns JSON text (see the module
    docstring); ``error`` is the last ``SCRIPT: error: ...`` line of stderr ("" on success) and
    ``answer`` the ``template`` filled from the result ("" on failure, or where the result lacks
    a field the template names)."""
    folder, name = os.path.split(script)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.import_module(name.removesuffix(".py"))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(RESULT)
    stdout, stderr = io.StringIO(), io.StringIO()
    sys.argv = [name, *argv]
    status = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            module.run_main(module.main, [*argv, "--json", RESULT])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    text = ""
    if status == 0 and os.path.exists(RESULT):
        with open(RESULT, encoding="utf-8") as f:
            text = f.read()
    errors = [line for line in stderr.getvalue().splitlines() if line.startswith(f"{name}: error:")]
    # the page's --json file is its own business: the reader's command line does not name one
    printed = stdout.getvalue().replace(f"# wrote {RESULT}\n", "")
    data = json.loads(text) if text else None
    sentence = ""
    if data is not None and template:
        with contextlib.suppress(KeyError, ValueError, TypeError):
            sentence = answer(template, data)
    return json.dumps({
        "status": status, "stdout": printed, "stderr": stderr.getvalue(),
        "error": errors[-1] if errors else ("" if status == 0 else stderr.getvalue().strip()),
        "json": text, "rows": flatten(data) if text else [], "answer": sentence,
        "command": command(script, argv),
    })
