"""The calculator pages (book/<lang>/calculators/): each runs its script in headless Chromium,
served from loopback, and gives exactly what the command line gives.

For every calculator the test fills the form with at least five configurations (and one invalid
input), presses Calculate and compares the page with ``python SCRIPT ARGV --json FILE``: the
--json text field by field (only the provenance fields of the results envelope, ``date_utc``,
``versions`` and ``command``, which say when, where and how a run was started, may differ: the
command line names the --json file), the table's rows, the printed report, the command line shown,
and for the invalid input the one-line error. (tests/build/test_pdf.py checks that each PDF prints
the worked examples.) A linked address (the inputs in the query), opened on the Chinese page, gives
the same result again, and no request leaves the loopback host. The command-line results are
computed in parallel before the pages load.
"""

import concurrent.futures
import functools
import json
import os
import re
import shlex
import urllib.parse

import pytest
from bs4 import BeautifulSoup
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.build.conftest import console_errors, network_log, serious_violations
from tools import calculator_run, calculators

WAIT_S = 60  # loading Pyodide takes a few seconds on a 2-core machine; a run well under one
POLL_S = 0.05  # how often a wait looks (Selenium's default, 0.5 s, would add a quarter second a wait)
PROVENANCE = ("date_utc", "versions", "command")  # the results envelope's "when, where, how" (tools/schemas)


def argv_of(spec: dict, config: dict) -> list[str]:
    """The command line for ``config``, in the order of the form's fields (as the page builds it)."""
    argv = []
    for field in spec["fields"]:
        value = config.get(field["option"])
        if value is True:
            argv.append(field["option"])
        elif isinstance(value, list):  # the boxes ticked of an option that takes several values
            argv += [field["option"], *value]
        elif value is not None:
            argv += [field["option"], value]
    return argv


def leaves(value, path=""):
    """(path, json text) of every leaf, written here independently of tools/calculator_run.py."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    else:
        yield path, json.dumps(value, ensure_ascii=False)


def without_provenance(data: dict) -> dict:
    return {k: v for k, v in data.items() if k not in PROVENANCE}


def page_url(site_url: str, name: str, lang: str = "en") -> str:
    prefix = "/zh" if lang == "zh" else ""
    return f"{site_url}{prefix}/calculators/{name.replace('_', '-')}/"


def wait_ready(browser) -> None:
    WebDriverWait(browser, WAIT_S, poll_frequency=POLL_S).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".calculator").get_attribute("data-state") in ("ready", "failed"))
    block = browser.find_element(By.CSS_SELECTOR, ".calculator")
    assert block.get_attribute("data-state") == "ready", block.find_element(By.CSS_SELECTOR, ".calculator-status").text


def enter(browser, spec: dict, config: dict) -> None:
    """Set every field (empty or unchecked when ``config`` does not name it), press Calculate and
    wait for the run to finish."""
    unknown = set(config) - {f["option"] for f in spec["fields"]}
    assert not unknown, f"not fields of the form: {unknown}"
    block = browser.find_element(By.CSS_SELECTOR, ".calculator")
    runs = int(block.get_attribute("data-runs"))
    # One round trip for every field (a WebDriver call costs milliseconds, a form has up to 17 fields).
    browser.execute_script(
        "for (const [name, value] of arguments[0]) {"
        "  for (const el of document.querySelectorAll(`.calculator-form [name='${name}']`)) {"
        "    if (el.type !== 'checkbox') el.value = value ?? '';"
        "    else el.checked = Array.isArray(value) ? value.includes(el.value) : value === true;"
        "  }"
        "}", [[field["option"], config.get(field["option"])] for field in spec["fields"]])
    block.find_element(By.CSS_SELECTOR, ".calculator-run").click()
    WebDriverWait(browser, WAIT_S, poll_frequency=POLL_S).until(lambda d: int(block.get_attribute("data-runs")) > runs)


def shown(browser) -> dict:
    """What the result block shows: command, error, the table's rows, the JSON text."""
    return browser.execute_script(
        "const box = document.querySelector('.calculator-result');"
        "const text = selector => { const el = box.querySelector(selector); return el ? el.textContent : null; };"
        "return {command: text('.calculator-command'), error: text('.calculator-error'),"
        "        answer: text('.calculator-answer'), notice: text('.calculator-notice'),"
        "        status: document.querySelector('.calculator-status').textContent,"
        "        strings: JSON.parse(document.querySelector('.calculator').dataset.spec).strings,"
        "        stdout: text('.calculator-stdout'), json: text('.calculator-json'),"
        "        rows: [...box.querySelectorAll('.calculator-fields tbody tr')]"
        "              .map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))};")


@functools.cache
def _cli(script: str, argv: tuple[str, ...]) -> dict:
    return calculators.run_cli(script, list(argv))


@pytest.fixture(scope="module", autouse=True)
def cli_results():
    """Every configuration's command-line result, computed in parallel before the pages load."""
    runs = [(spec["script"], tuple(argv_of(spec, config)))
            for name in calculators.names() for spec in [calculators.load(name)]
            for config in [*spec.get("checks", []), dict(_pairs(spec["example"]))]]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda run: _cli(*run), runs))


def for_the_form(message: str, spec: dict, lang: str) -> str:
    """The script's error as the page words it (calculator.js runs the same function)."""
    return calculator_run.form_message(
        message, [[f["option"], f["label"][lang]] for f in spec["fields"]],
        [[m["cli"], m[lang]] for m in spec.get("form_messages", [])])


def check_same_as_cli(page: dict, spec: dict, argv: list[str], lang: str = "en") -> None:
    cli = _cli(spec["script"], tuple(argv))
    assert page["command"] == shlex.join(["python", spec["script"], *argv])
    if cli["status"] != 0:
        assert cli["error"], cli["stderr"]
        assert page["error"] == for_the_form(cli["error"], spec, lang)
        assert page["json"] is None and page["answer"] is None
        return
    assert page["error"] is None, page["error"]
    # the answer in a sentence: the template filled from the command line's result
    assert page["answer"] == calculator_run.answer(spec["answer"][lang], json.loads(cli["json"]))
    assert page["answer"] and "{" not in page["answer"], page["answer"]
    assert page["stdout"] == cli["stdout"].rstrip("\n")  # the report, as the terminal shows it
    expected, got = json.loads(cli["json"]), json.loads(page["json"])
    assert without_provenance(got) == without_provenance(expected)
    expected_rows = [[k, v] for k, v in leaves(expected) if k.split(".")[0].split("[")[0] not in PROVENANCE]
    got_rows = [row for row in page["rows"] if row[0].split(".")[0].split("[")[0] not in PROVENANCE]
    assert got_rows == expected_rows
    if not any(key in expected for key in PROVENANCE):  # no run-dependent field: the very same text
        assert page["json"].rstrip("\n") == cli["json"].rstrip("\n")


@pytest.mark.parametrize("name", calculators.names())
def test_calculator_gives_what_the_command_line_gives(site_url, browser, name):
    spec = calculators.load(name)
    configs = spec.get("checks", [])  # data/calculators/<name>.yml
    assert len(configs) >= 6, "five configurations and an invalid one"
    network_log(browser), console_errors(browser)  # drain what the previous page left
    browser.get(page_url(site_url, name))
    wait_ready(browser)
    # on load it runs the worked example; the page, form and result pass axe-core (the other
    # pages: tests/build/test_every_page.py)
    check_same_as_cli(shown(browser), spec, argv_of(spec, dict(_pairs(spec["example"]))))
    violations = serious_violations(browser)
    assert not violations, "\n".join(violations)
    refused = 0
    for config in configs:
        argv = argv_of(spec, config)
        enter(browser, spec, config)
        page = shown(browser)
        check_same_as_cli(page, spec, argv)
        refused += page["error"] is not None
        # the status line says which: ready for more, or refused
        said = page["strings"]["calculator_ready" if page["error"] is None else "calculator_refused"]
        assert page["status"] == said, page["status"]
    assert refused >= 1, "no configuration was refused: add an invalid one"
    assert len(configs) - refused >= 5

    # the address now holds the last inputs: the Chinese page opened with them gives the same
    # result (its labels differ, the fields and the script do not); one page load checks both
    link = urllib.parse.urlsplit(browser.current_url)
    query = urllib.parse.parse_qs(link.query, keep_blank_values=True)
    assert {f"--{k}" for k in query} == set(configs[-1])
    browser.get(f"{page_url(site_url, name, 'zh')}?{link.query}")
    wait_ready(browser)
    check_same_as_cli(shown(browser), spec, argv_of(spec, configs[-1]), "zh")
    if name == calculators.names()[0]:  # one Chinese page, showing a refusal: the pages share a template
        violations = serious_violations(browser)
        assert not violations, "\n".join(violations)
    enter(browser, spec, configs[0])
    check_same_as_cli(shown(browser), spec, argv_of(spec, configs[0]), "zh")

    urls, failed = network_log(browser)
    offsite = [u for u in urls if not u.startswith((site_url + "/", "data:", "blob:"))]
    assert not offsite, f"requests that left the loopback host: {offsite}"
    assert not failed, f"requests that failed: {failed}"
    assert not console_errors(browser)


def _pairs(argv: list[str]):
    """(option, value) of an argv; a flag (no value follows) gets True."""
    i = 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            yield argv[i], argv[i + 1]
            i += 2
        else:
            yield argv[i], True
            i += 1


def test_every_calculator_has_a_page_in_each_language_and_its_chapter_links_it():
    for name in calculators.names():
        spec = calculators.load(name)
        page = f"calculators/{name.replace('_', '-')}.md"
        for lang in ("en", "zh"):
            text = (calculators.REPO / "book" / lang / page).read_text(encoding="utf-8")
            assert f"<!-- calculator: {name} -->" in text, f"book/{lang}/{page}"
            chapter = (calculators.REPO / "book" / lang / spec["chapter"]).read_text(encoding="utf-8")
            assert f"calculators/{name.replace('_', '-')}.md" in chapter, \
                f"book/{lang}/{spec['chapter']} does not link its calculator {page}"


@pytest.fixture(scope="module")
def examples():
    """Each calculator's worked example, run on the command line once."""
    specs = {name: calculators.load(name) for name in calculators.names()}
    return {name: _cli(spec["script"], tuple(spec["example"])) for name, spec in specs.items()}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_without_javascript_each_page_shows_the_worked_example(built_site, examples, lang):
    for name, cli in examples.items():
        prefix = "zh/" if lang == "zh" else ""
        path = built_site / f"{prefix}calculators/{name.replace('_', '-')}/index.html"
        page = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
        result = page.select_one(".calculator .calculator-result")
        assert result is not None, path
        assert without_provenance(json.loads(result.select_one(".calculator-json").text)) == \
            without_provenance(json.loads(cli["json"]))
        assert result.select_one(".calculator-stdout").text == cli["stdout"].rstrip("\n")
        template = calculators.load(name)["answer"][lang]
        assert result.select_one(".calculator-answer").text == \
            calculator_run.answer(template, json.loads(cli["json"]))


# A refusal the form can reach: a refused check, the form left empty, a value a link brought
# that a field's list lacks. Its message must not send a reader to an option the form lacks.
def _reachable_refusals(spec):
    configs = [c for c in spec["checks"]] + [{}]
    configs += [{f["option"]: "No Such Thing"} for f in spec["fields"] if "choices_from" in f]
    for config in configs:
        cli = _cli(spec["script"], tuple(argv_of(spec, config)))
        if cli["status"] != 0:
            yield config, cli["error"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_message_on_a_form_names_an_option_only_the_command_line_has(lang):
    seen = 0
    for name in calculators.names():
        spec = calculators.load(name)
        shown = {f["option"] for f in spec["fields"]}
        for config, error in _reachable_refusals(spec):
            seen += 1
            worded = for_the_form(error, spec, lang)
            cli_only = set(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", worded)) - shown
            assert not cli_only, f"{name} {config}: {worded}"
    assert seen >= 10, seen


def test_a_link_with_values_the_form_lacks_says_so_and_the_script_refuses_them(site_url, browser):
    spec = calculators.load("kv_cache")
    browser.get(page_url(site_url, "kv_cache") + "?model=No+Such+Model&gpus=4&colour=blue")
    wait_ready(browser)
    page = shown(browser)
    # told, not dropped: the unknown key, and the model the list lacks (which the form still runs)
    assert "?colour" in page["notice"] and "“Model” (--model) No Such Model" in page["notice"], page["notice"]
    argv = ["--model", "No Such Model", "--gpus", "4"]
    check_same_as_cli(page, spec, argv)
    assert page["error"] is not None and page["status"] == page["strings"]["calculator_refused"]


def test_a_value_too_long_to_read_is_cut_in_the_messages(site_url, browser):
    spec = calculators.load("kv_cache")
    browser.get(page_url(site_url, "kv_cache") + "?model=" + "x" * 5000)  # the script echoes it whole
    wait_ready(browser)
    page = shown(browser)
    check_same_as_cli(page, spec, ["--model", "x" * 5000])
    for message in (page["error"], page["notice"]):
        assert "x" * 59 + "…" in message and len(message) < 400, message  # 60 with its quote
