"""Headless Chromium (Selenium) on the built site, served from loopback: the fixtures that the
in-browser tests share (search, calculators)."""

import functools
import http.server
import json
import threading

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import require_tool

CHROMIUM_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync"
).split()


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
    (``requested_urls``); tools/page_weight.py starts its own the same way."""
    options = webdriver.ChromeOptions()
    options.binary_location = require_tool("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
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


def requested_urls(driver) -> list[str]:
    """The URLs the browser requested since the last call (the log is drained as it is read)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
