"""The calculator pages: ``<!-- calculator: NAME -->`` (a line alone) becomes the calculator of
``data/calculators/NAME.yml`` (see tools/calculators.py).

* The page always shows a worked example: the command line of the file's ``example``, what the
  script printed and every field of its ``--json``, run at build time by the real script. That
  is all a reader sees without JavaScript, and what the PDF prints (build/pdf_book.py).
* On the site the block also carries the form's description (fields, pickers, data files as
  JSON), and book/assets/calculator.js builds the form and runs the same script in the page
  under Pyodide; the results replace the example.
* After the site build, the Pyodide runtime (build/node_modules/pyodide, pinned by
  build/package-lock.json; ``make book`` installs it) and tools/calculator_run.py are copied into
  site/assets/, so the pages load nothing from another host.
"""

import functools
import html
import json
import re
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from tools import calculator_run, calculators
from tools.book import ROOT, page_language, site_root_prefix, strings

_MARKER = re.compile(r"^<!-- calculator: (\S+) -->[ \t]*$", re.M)
PYODIDE = ROOT / "build" / "node_modules" / "pyodide"
# What loadPyodide() fetches: the loader, the Emscripten module, the standard library and the
# lock file (the package list; the calculators load no package from it).
PROVENANCE = ("date_utc", "versions", "command")  # the results envelope's fields that describe a run
PYODIDE_FILES = ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json")


def _result_html(result: dict, text: dict, answer: str) -> str:
    """The result block: the answer in a sentence, the command line, the printed report, and
    folded, a row per --json field and the JSON text (which the PDF leaves out: the table already
    holds every field)."""
    rows = "".join(f"<tr><td><code>{html.escape(key)}</code></td><td><code>{html.escape(value)}</code></td></tr>"
                   for key, value in calculator_run.flatten(json.loads(result["json"])))
    # newlines inside <pre> as character references: Markdown sees one raw-HTML line per block
    def pre(cls: str, body: str) -> str:
        return f'<pre class="{cls}"><code>{html.escape(body).replace(chr(10), "&#10;")}</code></pre>'
    return (f'<p class="calculator-answer">{html.escape(answer)}</p>'
            + f'<p class="calculator-caption">{text["calculator_command"]}</p>'
            + pre("calculator-command", result["command"])
            + pre("calculator-stdout", result["stdout"].rstrip("\n"))
            + f'<details class="calculator-fields-block"><summary>{text["calculator_fields"]}</summary>'
            + f'<table class="calculator-fields"><thead><tr><th>{text["calculator_field"]}</th>'
            + f'<th>{text["calculator_value"]}</th></tr></thead><tbody>{rows}</tbody></table></details>'
            + f'<details class="calculator-json-block"><summary>{text["calculator_json"]}</summary>'
            + pre("calculator-json", result["json"].rstrip("\n")) + "</details>")


@functools.cache
def _example(script: str, argv: tuple[str, ...], mtime_ns: int) -> dict:
    """The worked example on the command line: once per version of the script, not once per
    language."""
    result = calculators.run_cli(script, list(argv))
    result["command"] = calculator_run.command("/book/" + script, list(argv))
    if result["json"]:
        # The results envelope's when/where/how (tools/schemas) describe the build machine's run, not
        # the example, and change with every build: the page (and its PDF part) would never be the same.
        data = json.loads(result["json"])
        if isinstance(data, dict) and PROVENANCE[0] in data:
            result["json"] = json.dumps({k: v for k, v in data.items() if k not in PROVENANCE}, indent=2) + "\n"
    return result


def _calculator(name: str, page, config) -> str:
    text = strings(config)
    lang = page_language(page)
    try:
        spec = calculators.load(name)
    except calculators.CalculatorError as err:
        raise PluginError(f"{page.file.src_uri}: {err}") from err
    example = _example(spec["script"], tuple(spec["example"]), (ROOT / spec["script"]).stat().st_mtime_ns)
    if example["status"] != 0:
        raise PluginError(f"{page.file.src_uri}: the example of calculator {name} fails: "
                          f"{example['error'] or example['stderr'].strip()}")
    description = calculators.form(spec, lang)
    try:
        answer = calculator_run.answer(description["answer"], json.loads(example["json"]))
    except (KeyError, ValueError, TypeError) as err:
        raise PluginError(f"{page.file.src_uri}: the answer of calculator {name} does not fit its "
                          f"example's result: {type(err).__name__}: {err}") from err
    result = _result_html(example, text, answer)
    description["strings"] = {k: v for k, v in text.items() if k.startswith("calculator_")}
    root = site_root_prefix(page)
    return (f'<div class="calculator" data-root="{root}" data-state="static" '
            f'data-spec="{html.escape(json.dumps(description, ensure_ascii=False))}">'
            f'<p class="calculator-status">{text["calculator_static"]}</p>'
            f'<noscript><p>{text["calculator_noscript"]}</p></noscript>'
            f'<div class="calculator-result">{result}</div></div>\n'
            f'<script type="module" src="{root}assets/calculator.js"></script>\n')


def on_page_markdown(markdown, page, config, files):
    return _MARKER.sub(lambda m: _calculator(m.group(1), page, config), markdown)


@event_priority(-100)
def on_post_build(config):
    missing = [name for name in PYODIDE_FILES if not (PYODIDE / name).is_file()]
    if missing:
        raise PluginError(f"{PYODIDE.relative_to(ROOT)} lacks {', '.join(missing)}: run `make book` "
                          "(it runs `npm ci --prefix build`)")
    target = Path(config.site_dir) / "assets" / "pyodide"
    target.mkdir(parents=True, exist_ok=True)
    for name in PYODIDE_FILES:
        shutil.copyfile(PYODIDE / name, target / name)
    shutil.copyfile(ROOT / "tools" / "calculator_run.py", Path(config.site_dir) / "assets" / "calculator_run.py")
