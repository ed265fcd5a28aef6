"""Headless Chromium (Selenium) on the built site, served from loopback: the fixtures that the
in-browser tests share (every page, search, calculators), and what a page load went through: its
requests, its console errors and axe-core's accessibility violations."""

import functools
import http.server
import json
import threading

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.build.book import ROOT
from tests.conftest import require_tool

# axe-core (build/package.json), and the rules it runs: WCAG 2.1 levels A and AA, and the
# best practices (the four rules, among them region and aria-dialog-name, are there)
AXE = ROOT / "build" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]

CHROMIUM_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync"
).split() + [
    # a desktop with a mouse, as most readers have: headless Chromium reports no hover and no fine
    # pointer, and Material makes a wide code block focusable by keyboard only where hover is
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4",
]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request on the test's output
        pass


@pytest.fixture(scope="session")
def site_url(built_site):
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def start_chromium():
    """Headless Chromium under Selenium whose performance log records every request it makes
    (read with ``network_log``); tools/page_weight.py starts its own the same way."""
    options = webdriver.ChromeOptions()
    options.binary_location = require_tool("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    # an explicit driver path: Selenium Manager would otherwise try to download one
    driver = webdriver.Chrome(service=Service(require_tool("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the session (the search, page and calculator tests share it)."""
    driver = start_chromium()
    yield driver
    driver.quit()


def network_log(driver) -> tuple[list[str], list[str]]:
    """(URLs requested, requests that failed: an HTTP status of 400 or more, or no response) since
    the last call; the log is drained as it is read."""
    urls, failed = [], []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            urls.append(params["request"]["url"])
        elif message["method"] == "Network.responseReceived" and params["response"]["status"] >= 400:
            failed.append(f"{params['response']['status']} {params['response']['url']}")
        elif message["method"] == "Network.loadingFailed" and not params.get("canceled"):
            failed.append(f"{params['errorText']} (request {params['requestId']})")
    return urls, failed


def console_errors(driver) -> list[str]:
    """The console's errors since the last call (drained as read): uncaught exceptions, failed
    loads, console.error."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


# The frame every page shares (header, tabs, the book's navigation, footer): axe checks it on the
# home page of each language; on every other page only what is the page's own, a fifth faster.
FRAME = [[".md-banner"], [".md-header"], [".md-tabs"], [".md-sidebar--primary"], [".md-footer"]]


def serious_violations(driver, frame: bool = True) -> list[str]:
    """axe-core's serious and critical violations on the page the browser shows, one line per
    rule: its id, how many elements, the first element and what to fix. ``frame=False`` leaves
    out the parts every page shares (FRAME)."""
    driver.set_script_timeout(60)
    if not driver.execute_script("return typeof axe !== 'undefined'"):
        driver.execute_script(AXE.read_text(encoding="utf-8"))
    found = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        axe.run(arguments[1] ? document : {exclude: arguments[2]},
                {runOnly: {type: "tag", values: arguments[0]}, resultTypes: ["violations"]})
          .then(r => done(r.violations.filter(v => v.impact === "serious" || v.impact === "critical")
            .map(v => `${v.id} (${v.impact}) on ${v.nodes.length} element(s), first ` +
                      `${v.nodes[0].target.join(" ")}: ${v.nodes[0].failureSummary.replace(/\\s+/g, " ")}`)),
                e => done([`axe failed: ${e}`]));""", AXE_TAGS, frame, FRAME)
    return found
