"""The pages as a reader's browser loads them: nothing a page asks for fails, its console shows no
error, and axe-core finds no serious or critical accessibility violation (WCAG 2.1 A and AA, and
axe's best practices).

Not every page goes through the browser: axe takes one to two and a half seconds a page here, and
the book has 150. What axe judges is the kinds of element a page holds and the styles they take,
so the browser loads the smallest set of pages that together hold every kind of element any page
of either language renders in its content (``element_kinds``), found anew from the built pages on
each run: a page that brings a new kind (a new class of table, callout or notebook output) joins
the sample by itself. The two languages share their templates and styles, so one cover serves
both (a Chinese page joins it where it holds a kind no English page has). The frame every page
shares (header, tabs, navigation, footer) is checked on each language's home page. Every page's
own files are checked without a browser (test_site.py: ``test_every_file_a_page_loads_is_built``),
and the calculator pages in the browser once their form has run (test_calculators.py)."""

from pathlib import PurePosixPath

from tests.build.book import LANGS, built_page, nav_pages, page_tree, select
from tests.build.conftest import console_errors, network_log, serious_violations

PAGES = [src for src in nav_pages() if not src.startswith("calculators/") or src == "calculators/index.md"]


def url_path(lang: str, src: str) -> str:
    """The address of a page, from the site's root: /network/, /zh/network/nccl-tuning/."""
    path = built_page(PurePosixPath("/"), lang, src).parent.as_posix()
    return path.rstrip("/") + "/"


def element_kinds(page) -> set[str]:
    """The kinds of element in a page's own content (its ``<article>``), each named as a tag
    (``table``), a tag with one of its classes (``span.katex``), a tag under its parent's tag
    (``p>a``: axe's link-in-text-block rule looks there) or a tag with an attribute that changes
    what axe asks of it (``div[tabindex]``, ``img[alt]``)."""
    kinds = set()
    for article in select(page, "article"):
        for element in article.iter():
            if not isinstance(element.tag, str):  # comments, processing instructions
                continue
            kinds.add(element.tag)
            kinds.update(f"{element.tag}.{name}" for name in (element.get("class") or "").split())
            kinds.update(f"{element.tag}[{name}]" for name in ("role", "tabindex", "alt", "aria-label", "type")
                         if element.get(name) is not None)
            parent = element.getparent()
            if parent is not None and isinstance(parent.tag, str):
                kinds.add(f"{parent.tag}>{element.tag}")
    return kinds


def covering_sample(kinds_of: dict[str, set[str]]) -> list[str]:
    """A small set of pages that together hold every kind of element in ``kinds_of`` (page -> its
    kinds): greedy set cover, each step taking the page that adds the most kinds not yet held
    (ties go to the earlier page in the nav). Greedy is within a factor ln(kinds) of the smallest
    cover (Chvátal 1979, doi:10.1287/moor.4.3.233); here it picks 17 of the two languages' 152 pages."""
    left = set().union(*kinds_of.values())
    sample = []
    while left:
        page = max(kinds_of, key=lambda src: len(kinds_of[src] & left))
        sample.append(page)
        left -= kinds_of[page]
    return sample


def test_sample_pages_load_cleanly_and_pass_axe(built_site, site_url, browser):
    kinds_of = {(lang, src): element_kinds(page_tree(built_page(built_site, lang, src)))
                for lang in LANGS for src in PAGES}
    homes = [(lang, "index.md") for lang in LANGS]
    sample = homes + [page for page in covering_sample(kinds_of) if page not in homes]
    assert len(sample) < len(kinds_of) / 4, f"the sample is much of the book: {sample}"
    problems = []
    network_log(browser), console_errors(browser)  # drain what an earlier test left
    browser.set_window_size(1280, 900)  # a desktop: the section tabs show from 1220 px
    for lang, src in sample:
        browser.get(site_url + url_path(lang, src))
        # the frame all pages share is checked on the home pages (a second or more: the search
        # index has loaded since)
        violations = serious_violations(browser, frame=src == "index.md")
        _, failed = network_log(browser)
        problems += [f"{lang}/{src}: request failed: {url}" for url in failed]
        problems += [f"{lang}/{src}: console: {line}" for line in console_errors(browser)]
        problems += [f"{lang}/{src}: {line}" for line in violations]
    assert not problems, "\n".join(problems)


def test_the_sample_holds_every_kind_of_element_and_a_new_kind_joins_it():
    kinds_of = {"a.md": {"p", "p>a"}, "b.md": {"p", "table"}, "c.md": {"p", "p>a", "table"}}
    assert covering_sample(kinds_of) == ["c.md"]
    kinds_of["b.md"].add("div.admonition")  # b brings a new kind
    sample = covering_sample(kinds_of)
    assert set().union(*(kinds_of[src] for src in sample)) == {"p", "p>a", "table", "div.admonition"}
    assert "b.md" in sample
