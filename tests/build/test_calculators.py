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
import shlex
import urllib.parse

import pytest
from bs4 import BeautifulSoup
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.build.conftest import requested_urls
from tools import calculators

WAIT_S = 60  # loading Pyodide takes a few seconds on a 2-core machine; a run well under one
PROVENANCE = ("date_utc", "versions", "command")  # the results envelope's "when, where, how" (tools/schemas)

# option -> value (True: a flag that is set). Each calculator: five or more valid configurations,
# then one that the script refuses.
CONFIGS = {
    "training_memory": [
        {"--params": "7.5e9", "--dp": "64", "--zero": "1"},  # the ZeRO paper's Figure 1 example
        {"--params": "7.5e9", "--dp": "64", "--zero": "3", "--recipe": "bf16"},
        {"--layers": "32", "--hidden": "4096", "--heads": "32", "--vocab": "32000", "--seq": "4096",
         "--micro-batch": "2", "--recipe": "bf16-fp32-grads", "--dp": "8", "--zero": "3"},
        {"--layers": "80", "--hidden": "8192", "--heads": "64", "--vocab": "32000", "--seq": "4096",
         "--micro-batch": "1", "--tp": "8", "--pp": "4", "--dp": "8", "--zero": "1",
         "--sequence-parallel": True, "--recompute": "full"},
        {"--layers": "40", "--hidden": "5120", "--heads": "40", "--vocab": "50257", "--seq": "2048",
         "--micro-batch": "4", "--ffn-hidden": "13824", "--optimizer": "sgd-momentum",
         "--recompute": "selective", "--flash-attention": True, "--tp": "2"},
        {"--params": "1e12", "--dp": "1024", "--zero": "3", "--optimizer": "adamw-8bit"},
        {"--params": "7e9", "--dp": "0"},
    ],
    "flops_mfu": [
        {"--params": "540.35e9", "--layers": "118", "--heads": "48", "--head-dim": "256", "--seq-len": "2048",
         "--tokens-per-s": "238.3e3", "--devices": "6144", "--peak-tflops": "275"},  # PaLM's Table 3
        {"--layers": "32", "--hidden": "4096", "--heads": "32", "--vocab": "32000", "--seq-len": "4096",
         "--tokens-per-s": "3.2e5", "--devices": "64", "--peak-tflops": "989.4"},
        {"--layers": "32", "--hidden": "4096", "--heads": "32", "--kv-heads": "8", "--ffn": "14336", "--gated": True,
         "--vocab": "128256", "--seq-len": "8192", "--step-time-s": "6.5", "--global-batch": "512",
         "--devices": "128", "--peak-tflops": "989.4", "--recompute": "full"},
        {"--params": "70e9", "--layers": "80", "--hidden": "8192", "--heads": "64", "--seq-len": "4096",
         "--tokens-per-s": "1.2e5", "--devices": "512", "--peak-tflops": "312", "--train-tokens": "2e12"},
        {"--params": "13e9", "--layers": "40", "--hidden": "5120", "--heads": "40", "--seq-len": "2048",
         "--tokens-per-s": "5e4", "--devices": "32", "--peak-tflops": "312", "--recompute": "attention"},
        {"--params": "7e9", "--seq-len": "4096", "--tokens-per-s": "nan", "--devices": "8", "--peak-tflops": "989.4"},
    ],
    "checkpoint_interval": [
        {},  # the script's defaults (the Storage chapter's worked example)
        {"--params": "405e9", "--write-GBps": "200", "--nodes": "2048", "--async-save": True, "--snapshot-s": "5",
         "--step-time-s": "4"},
        {"--checkpoint-gb": "140", "--write-GBps": "2", "--job-mtbf-hours": "12", "--restart-min": "20"},
        {"--params": "7e9", "--bytes-per-param": "2", "--write-GBps": "10", "--nodes": "16", "--node-mtbf-hours": "2000"},
        {"--params": "1e12", "--write-GBps": "1000", "--nodes": "4096", "--restart-min": "30", "--step-time-s": "12"},
        {"--job-mtbf-hours": "24", "--nodes": "128"},
    ],
    "communication_volume": [
        {},  # the script's defaults
        {"--params": "7e9", "--layers": "32", "--hidden": "4096", "--seq-len": "4096", "--dp": "64", "--tp": "1",
         "--pp": "1", "--zero": "0"},
        {"--params": "7e9", "--layers": "32", "--hidden": "4096", "--seq-len": "4096", "--dp": "64", "--tp": "1",
         "--pp": "1", "--zero": "3"},
        {"--params": "70e9", "--layers": "80", "--hidden": "8192", "--seq-len": "4096", "--dp": "8", "--tp": "8",
         "--pp": "8", "--zero": "1", "--grad-accum": "32", "--busbw-GBps": "45"},
        {"--params": "175e9", "--layers": "96", "--hidden": "12288", "--heads": "96", "--seq-len": "2048",
         "--dp": "32", "--tp": "8", "--pp": "12", "--sequence-parallel": True, "--micro-batch": "2",
         "--tp-busbw-GBps": "300"},
        {"--dp": "16", "--tp": "0"},
    ],
    "kv_cache": [
        {"--model": "Llama 3.1 70B"},
        {"--model": "Llama 3.1 8B", "--context": "131072", "--gpu-memory": "80"},
        {"--model": "Mixtral 8x7B", "--gpus": "2", "--kv-dtype": "fp8", "--gpu-memory": "141"},
        {"--model": "Gemma 2 27B", "--context": "8192", "--weight-dtype": "fp8", "--memory-utilization": "0.85"},
        {"--model": "DeepSeek-V3", "--gpus": "8", "--gpu-memory": "141", "--weight-dtype": "fp8",
         "--overhead-gb": "4"},
        {"--model": "Qwen2.5 72B", "--params": "72.7B", "--gpus": "4", "--context": "32768"},
        {"--model": "Llama 3.1 70B", "--gpus": "3"},
    ],
    "model_size": [
        {"--model": "Llama 2 7B"},
        {"--model": "Mixtral 8x7B", "--context": "32768"},
        {"--model": "DeepSeek-V3", "--kv-dtype": "fp8"},
        {"--model": "Gemma 2 9B", "--context": "8192"},
        {"--model": "Qwen3-30B-A3B", "--context": "2048", "--kv-dtype": "fp32"},
        {"--model": "OLMoE-1B-7B", "--context": "0"},
    ],
}


def argv_of(spec: dict, config: dict) -> list[str]:
    """The command line for ``config``, in the order of the form's fields (as the page builds it)."""
    argv = []
    for field in spec["fields"]:
        value = config.get(field["option"])
        if value is True:
            argv.append(field["option"])
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
    WebDriverWait(browser, WAIT_S).until(
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
    for field in spec["fields"]:
        value = config.get(field["option"])
        browser.execute_script(
            "const el = document.querySelector(`.calculator-form [name='${arguments[0]}']`);"
            "if (el.type === 'checkbox') el.checked = arguments[1] === true; else el.value = arguments[1] ?? '';",
            field["option"], value)
    block.find_element(By.CSS_SELECTOR, ".calculator-run").click()
    WebDriverWait(browser, WAIT_S).until(lambda d: int(block.get_attribute("data-runs")) > runs)


def shown(browser) -> dict:
    """What the result block shows: command, error, the table's rows, the JSON text."""
    box = browser.find_element(By.CSS_SELECTOR, ".calculator-result")
    text = {name: browser.execute_script(
        f"const el = arguments[0].querySelector('{selector}'); return el ? el.textContent : null;", box)
        for name, selector in [("command", ".calculator-command"), ("error", ".calculator-error"),
                               ("stdout", ".calculator-stdout"), ("json", ".calculator-json")]}
    text["rows"] = browser.execute_script(
        "return [...arguments[0].querySelectorAll('.calculator-fields tbody tr')]"
        ".map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent));", box)
    return text


@functools.lru_cache(maxsize=None)
def _cli(script: str, argv: tuple[str, ...]) -> dict:
    return calculators.run_cli(script, list(argv))


@pytest.fixture(scope="module", autouse=True)
def cli_results():
    """Every configuration's command-line result, computed in parallel before the pages load."""
    runs = [(spec["script"], tuple(argv_of(spec, config)))
            for name in calculators.names() for spec in [calculators.load(name)]
            for config in [*CONFIGS[name], dict(_pairs(spec["example"]))]]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda run: _cli(*run), runs))


def check_same_as_cli(page: dict, spec: dict, argv: list[str]) -> None:
    cli = _cli(spec["script"], tuple(argv))
    assert page["command"] == shlex.join(["python", spec["script"], *argv])
    if cli["status"] != 0:
        assert cli["error"], cli["stderr"]
        assert page["error"] == cli["error"]
        assert page["json"] is None
        return
    assert page["error"] is None, page["error"]
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
    configs = CONFIGS[name]
    assert len(configs) >= 6, "five configurations and an invalid one"
    browser.get(page_url(site_url, name))
    wait_ready(browser)
    # on load it runs the worked example
    check_same_as_cli(shown(browser), spec, argv_of(spec, dict(_pairs(spec["example"]))))
    refused = 0
    for config in configs:
        argv = argv_of(spec, config)
        enter(browser, spec, config)
        page = shown(browser)
        check_same_as_cli(page, spec, argv)
        refused += page["error"] is not None
    assert refused >= 1, "no configuration was refused: add an invalid one"
    assert len(configs) - refused >= 5

    # the address now holds the last inputs: the Chinese page opened with them gives the same
    # result (its labels differ, the fields and the script do not); one page load checks both
    link = urllib.parse.urlsplit(browser.current_url)
    query = urllib.parse.parse_qs(link.query, keep_blank_values=True)
    assert {f"--{k}" for k in query} == set(configs[-1])
    browser.get(f"{page_url(site_url, name, 'zh')}?{link.query}")
    wait_ready(browser)
    check_same_as_cli(shown(browser), spec, argv_of(spec, configs[-1]))
    enter(browser, spec, configs[0])
    check_same_as_cli(shown(browser), spec, argv_of(spec, configs[0]))

    offsite = [u for u in requested_urls(browser) if not u.startswith((site_url + "/", "data:", "blob:"))]
    assert not offsite, f"requests that left the loopback host: {offsite}"


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
