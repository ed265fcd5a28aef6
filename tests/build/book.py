"""What the tests need to know about the book's configuration: languages, nav pages, paths."""

import re
from functools import cache
from pathlib import Path, PurePosixPath

import lxml.html
import pytest
import yaml
from lxml.cssselect import CSSSelector
from mkdocs.config import load_config

from tools.book import MARKER, nav_sources, script_summary, script_usage  # noqa: F401 - for the tests

ROOT = Path(__file__).resolve().parents[2]


LANGS = ("en", "zh")
PDF_NAME = "ml-engineering-open-book-{lang}.pdf"
# Raw TeX in rendered text: the $$ fence, or one of the five commands most used in book/en's
# formulas (grep -o '\\[a-zA-Z]*'). Typeset math (MathML on the site, SVG in the PDF) holds none.
RAW_TEX = re.compile(r"\$\$|\\(?:mathrm|times|frac|text|cdot)\b")


@cache
def config():
    return load_config(str(ROOT / "mkdocs.yml"))


class _TagsIgnored(yaml.SafeLoader):
    """mkdocs.yml as plain YAML: its !ENV and python tags become None (only the nav is read)."""


_TagsIgnored.add_multi_constructor("", lambda loader, suffix, node: None)


def ui_strings(lang: str) -> dict:
    """The interface strings of language ``lang`` (mkdocs.yml's extra.strings under the i18n plugin)."""
    return {language.locale: language.extra["strings"] for language in
            config().plugins["i18n"].config.languages}[lang]


@cache
def _nav() -> list:
    return yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_TagsIgnored)["nav"]


def nav_pages() -> list[str]:
    """Source paths (relative to book/<lang>/) of every page in the nav, in order. Read from
    mkdocs.yml directly: the test modules call this while they are collected, and mkdocs'
    load_config (plugins and all) took 1.8 s of each worker's start."""
    return nav_sources(_nav())


def nav_parts() -> list[list[str]]:
    """The source paths of each top-level entry of the nav (a part of the book), in order."""
    parts = []
    for item in _nav():
        value = next(iter(item.values())) if isinstance(item, dict) else item
        parts.append(nav_sources(value if isinstance(value, list) else [value]))
    return parts


def built_page(site: Path, lang: str, src: str) -> Path:
    """The HTML file that mkdocs writes for ``src`` in language ``lang``."""
    path = PurePosixPath(src)
    stem = path.parent if path.stem in ("index", "README") else path.with_suffix("")
    prefix = site if lang == "en" else site / lang
    return prefix / stem / "index.html"


def markers(kind: str):
    """(page source path, file path) for every marker of ``kind`` in the English pages."""
    for page in sorted((ROOT / "book" / "en").rglob("*.md")):
        for found_kind, rel in MARKER.findall(page.read_text(encoding="utf-8")):
            if found_kind == kind:
                yield page.relative_to(ROOT / "book" / "en").as_posix(), rel



@cache
def page_tree(path: Path) -> lxml.html.HtmlElement:
    """The parsed HTML of a built page (the root ``<html>`` element), parsed once per test session
    (several tests read every page: tests/build/test_site.py and test_pdf.py share one xdist
    group, so one worker parses the 150 pages once). Shared between tests: read it, never modify
    it. lxml's own tree, queried with CSS selectors (:func:`select`): about 15 times faster than
    BeautifulSoup on these pages, which are large (code listings and math SVG)."""
    return lxml.html.document_fromstring(path.read_text(encoding="utf-8"))


def select(element, css: str) -> list:
    """The elements under ``element`` (itself included) that match the CSS selector ``css``.
    Each selector is translated to XPath once (``element.cssselect`` does it on every call)."""
    return _selector(css)(element)


@cache
def _selector(css: str) -> CSSSelector:
    return CSSSelector(css)


def text_of(element) -> str:
    """The element's text as a reader sees it: its strings, each stripped, joined by one space."""
    return " ".join(s.strip() for s in element.itertext() if s.strip())


BUILT_PAGES = pytest.mark.xdist_group("built-pages")
"""Mark for the modules that read every built page through :func:`page_soup`: under
pytest-xdist they run on one worker, which parses each page once."""
