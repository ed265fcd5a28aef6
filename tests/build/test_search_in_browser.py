"""Search works in a real browser in both languages (headless Chromium driven by Selenium).

The site is served from loopback; a reader types a word into Material's search box and
results appear. Chinese needs a two-character word to be found, which only works when the
index was segmented (jieba) and the search separator knows about it.
"""

import functools
import http.server
import threading

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import require_tool

CHROMIUM_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync"
).split()


@pytest.fixture(scope="module")
def site_url(built_site):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built_site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = require_tool("chromium")
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    # an explicit driver path: Selenium Manager would otherwise try to download one
    driver = webdriver.Chrome(service=Service(require_tool("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.mark.parametrize("path, query, expected_page", [
    ("/", "busbw", "/network/"),
    ("/zh/", "带宽", "/zh/network/"),
])
def test_search_returns_results(site_url, browser, path, query, expected_page):
    browser.get(site_url + path)
    browser.execute_script("document.querySelector('#__search').checked = true")  # open the search dialog
    browser.find_element(By.CSS_SELECTOR, "input.md-search__input").send_keys(query)
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a"))
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]
    assert any(link.startswith(site_url + expected_page) for link in links), links
