"""Every page of both languages, as a reader's browser loads it: nothing it asks for fails, its
console shows no error, and axe-core finds no serious or critical accessibility violation (WCAG
2.1 A and AA, and axe's best practices; the frame every page shares, header, tabs, navigation and
footer, on each language's home page, and on the other pages what is their own). The calculator pages are checked by
tests/build/test_calculators.py, once their form has run (it loads them anyway).

The pages of one language run on one pytest-xdist worker, one after another in one Chromium, and
the two languages on two workers."""

from pathlib import PurePosixPath

import pytest

from tests.build.book import LANGS, built_page, nav_pages
from tests.build.conftest import console_errors, network_log, serious_violations

PAGES = [src for src in nav_pages() if not src.startswith("calculators/") or src == "calculators/index.md"]


def url_path(lang: str, src: str) -> str:
    """The address of a page, from the site's root: /network/, /zh/network/nccl-tuning/."""
    path = built_page(PurePosixPath("/"), lang, src).parent.as_posix()
    return path.rstrip("/") + "/"


@pytest.mark.parametrize("lang, src", [
    pytest.param(lang, src, id=f"{lang}/{src}", marks=pytest.mark.xdist_group(f"every-page-{lang}"))
    for lang in LANGS for src in PAGES])
def test_page_loads_cleanly_and_passes_axe(site_url, browser, lang, src):
    network_log(browser), console_errors(browser)  # drain what the previous page left
    browser.set_window_size(1280, 900)  # a desktop: the section tabs show from 1220 px
    browser.get(site_url + url_path(lang, src))
    # the frame all pages share is checked on the home page (a second or more: the search index
    # has loaded since)
    violations = serious_violations(browser, frame=src == "index.md")
    _, failed = network_log(browser)
    assert not failed, f"requests that failed: {failed}"
    assert not console_errors(browser)
    assert not violations, "\n".join(violations)
