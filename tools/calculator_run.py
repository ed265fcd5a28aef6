"""Run one of the book's scripts as its command line would, and return what the calculator pages
show: the printed report, the ``--json`` file (text and flattened into rows), the exit status and
the one-line error.

The calculator pages (book/assets/calculator.js) run this module in the browser under Pyodide,
so it imports the standard library only; the build (tools/calculators.py) runs the same
``flatten`` on the worked example, and the tests compare both with the real command line.

    run("/book/scripts/training/memory_estimator.py", ["--params", "7e9"]) -> JSON text of
    {"status": 0, "stdout": "...", "error": "", "json": "...", "rows": [["params", "7000000000.0"], ...],
     "command": "python scripts/training/memory_estimator.py --params 7e9"}
"""

import contextlib
import importlib
import io
import json
import os
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


def command(script: str, argv: list[str]) -> str:
    """The command line a reader types for the same result, from the repository root."""
    rel = script.split("/book/", 1)[-1]
    return shlex.join(["python", rel, *argv])


def run(script: str, argv: list[str]) -> str:
    """Run ``script`` (a path, its folder is put on sys.path) with ``argv`` plus ``--json`` to a
    scratch file, as ``python SCRIPT ARGV`` would: its ``run_main(main)`` with ``sys.argv[0]``
    set, so messages name the script as on a terminal. Returns JSON text (see the module
    docstring); ``error`` is the last ``SCRIPT: error: ...`` line of stderr ("" on success)."""
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
    return json.dumps({
        "status": status, "stdout": printed, "stderr": stderr.getvalue(),
        "error": errors[-1] if errors else ("" if status == 0 else stderr.getvalue().strip()),
        "json": text, "rows": flatten(json.loads(text)) if text else [],
        "command": command(script, argv),
    })
