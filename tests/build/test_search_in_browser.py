"""Search works in a real browser in both languages (headless Chromium driven by Selenium).

The site is served from loopback; a reader types a word into Material's search box and
results appear. Chinese needs a two-character word to be found, which only works when the
index was segmented (jieba) and the search separator knows about it.
"""

import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


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


@pytest.mark.parametrize("path, query, inside", [("/", "NCCL", "/"), ("/zh/", "NCCL", "/zh/")])
def test_search_stays_in_the_page_language(site_url, browser, path, query, inside):
    browser.get(site_url + path)
    browser.execute_script("document.querySelector('#__search').checked = true")
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.clear()
    box.send_keys(query)
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item a"))
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]
    assert all(link.startswith(site_url + inside) for link in links), links
    if inside == "/":
        assert not any(link.startswith(site_url + "/zh/") for link in links), links


def test_each_language_has_its_own_index_without_code_listings(built_site):
    for path in ("search/search_index.json", "zh/search/search_index.json"):
        index = json.loads((built_site / path).read_text(encoding="utf-8"))
        assert index["docs"], path
        assert not any(doc["location"].startswith("zh/") for doc in index["docs"]), path
        assert not any("<pre" in doc["text"] for doc in index["docs"]), f"{path}: code listings"
        assert not any("Copied!" in doc["text"] for doc in index["docs"]), f"{path}: notebook code cells"
        # each under 2.5 MB, where the two languages' single index was 7.7 MB (70 % code); the
        # Chinese prose passed 2 MB at 1,150 PDF pages (three bytes a character in UTF-8)
        assert (built_site / path).stat().st_size < 2_500_000, path
