"""Search works in a real browser in both languages (headless Chromium driven by Selenium).

The site is served from loopback; a reader types a word into Material's search box and
results appear. Chinese needs a two-character word to be found, which only works when the
index was segmented (jieba) and the search separator knows about it.
"""

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
