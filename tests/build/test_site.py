"""The website: both languages, notebooks, embedded scripts, tables from data, and no third-party requests."""

import base64
import datetime
import functools
import json
import re
import subprocess
from itertools import pairwise
from pathlib import Path
from urllib.parse import quote, unquote

import babel.dates
import lxml.html
import markdown
import pytest

from tests.build.book import (
    BUILT_PAGES,
    LANGS,
    RAW_TEX,
    ROOT,
    built_page,
    markers,
    nav_pages,
    page_tree,
    select,
    text_of,
)
from tools.book import script_purpose
from tools.results import plot_svg
from tools.tables import is_results_summary, render
from tools.translations import load_summaries

pytestmark = BUILT_PAGES


def tree(path: Path):
    return page_tree(path.resolve())


@pytest.mark.parametrize("lang", LANGS)
def test_every_nav_page_is_built_in_each_language(built_site, lang):
    pages = nav_pages()
    assert len(pages) >= 3
    for src in pages:
        page = built_page(built_site, lang, src)
        assert page.is_file(), f"{lang}: {src} was not built ({page})"
        assert tree(page).get("lang") == lang


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_links_its_languages_pdf_and_epub(built_book, lang):
    for src in nav_pages():
        page_path = built_page(built_book, lang, src)
        for kind in ("pdf", "epub"):
            links = [a.get("href") for a in select(tree(page_path), f"a.book-{kind}")]
            assert len(links) == 1, f"{lang} {src}: expected one {kind} link, found {links}"
            assert links[0].endswith(f"-{lang}.{kind}")
            assert (page_path.parent / links[0]).resolve().is_file(), f"{lang} {src}: {links[0]} does not resolve"


def test_language_switcher_links_the_other_language(built_site):
    page = tree(built_page(built_site, "en", "network/index.md"))
    hreflangs = {a.get("hreflang") for a in select(page, "a[hreflang]")}
    assert {"en", "zh"} <= hreflangs


@pytest.mark.parametrize("lang", LANGS)
def test_notebooks_render_as_pages_with_outputs_and_download(built_site, lang):
    notebooks = [src for src in nav_pages() if src.endswith(".ipynb")]
    assert notebooks, "no notebook in the nav"
    for src in notebooks:
        page_path = built_page(built_site, lang, src)
        page = tree(page_path)
        assert select(page, ".jp-Notebook"), f"{src} is not rendered as a notebook"
        images = [img for img in select(page, ".jp-OutputArea-output img")
                  if img.get("src", "").startswith("data:image/png")]
        cells = json.loads((ROOT / "book" / lang / src).read_text(encoding="utf-8"))["cells"]
        plots = sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))
        assert plots and len(images) == plots, f"{src}: {len(images)} of its {plots} plots rendered"
        downloads = [a.get("href") for a in select(page, "a[href$='.ipynb']")]
        assert downloads, f"{src}: no download link to the .ipynb"
        assert (page_path.parent / downloads[0]).resolve().is_file()


PLACEHOLDER_ALT = "No description has been provided for this image"  # what nbconvert gives an image without alt


def test_no_image_lacks_alt_text(built_site):
    pages = sorted(built_site.rglob("*.html"))
    images = 0
    for page_path in pages:
        assert PLACEHOLDER_ALT not in page_path.read_text(encoding="utf-8"), f"{page_path}: nbconvert's placeholder alt"
        for img in select(tree(page_path), "img"):
            images += 1
            assert (img.get("alt") or "").strip(), f"{page_path}: <img> without alt text ({img.get('src', '')[:60]})"
    assert images >= 100, f"only {images} images on the site: the notebooks' plots are missing"


# The first plot of the roofline notebook, as the site must describe it (its cell's metadata alt).
KNOWN_ALT = {"en": "Log-log roofline chart of attainable dense bf16 TFLOPS against arithmetic intensity",
             "zh": "对数-对数 roofline 图：横轴为算术强度"}


@pytest.mark.parametrize("lang", LANGS)
def test_plots_carry_their_notebooks_alt_text(built_site, lang):
    """build/hooks/notebooks.py gives each plot the alt text its code cell's metadata holds, in order."""
    for src in [src for src in nav_pages() if src.endswith(".ipynb")]:
        cells = json.loads((ROOT / "book" / lang / src).read_text(encoding="utf-8"))["cells"]
        expected = [" ".join(alt.split()) for cell in cells for alt in cell.get("metadata", {}).get("alt", [])]
        shown = [img.get("alt") for img in select(tree(built_page(built_site, lang, src)), ".jp-OutputArea-output img")]
        assert expected and shown == expected, f"{lang} {src}: the plots' alt text is not the notebook's"
    roofline = select(tree(built_page(built_site, lang, "compute/roofline.ipynb")), ".jp-OutputArea-output img")
    assert roofline[0].get("alt").startswith(KNOWN_ALT[lang])


def _prose(element) -> list[str]:
    """The strings under ``element`` outside <pre> and <code>, in document order."""
    return element.xpath(".//text()[not(ancestor::pre) and not(ancestor::code)]")


@pytest.mark.parametrize("lang", LANGS)
def test_math_is_mathml_and_no_raw_tex_is_left(built_site, lang):
    pages = [built_page(built_site, lang, src) for src in nav_pages()]
    maths = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert 'class="arithmatex"' not in text, f"{page}: math left for client-side rendering"
        body = next(iter(select(tree(page), "article")), None)
        # Code may hold a backslash-parenthesis of its own (a sed group); only prose can hold raw math.
        visible = " ".join(_prose(body)) if body is not None else ""
        for raw in ("\\(", "\\[", "$$"):
            assert raw not in visible, f"{page}: raw TeX {raw!r} in the text"
        raw = RAW_TEX.search(visible)
        assert raw is None, f"{page}: raw TeX {raw.group(0)!r} in the text"
        found = page_tree(page.resolve()).xpath("//math")
        assert all(m.get("data-tex") for m in found), f"{page}: math without its TeX (the PDF prints from it)"
        assert 'class="math"' not in text, f"{page}: SVG math on the site (it ignores the dark scheme)"
        maths += len(found)
    assert maths > 0, "no math rendered at all"


def test_the_math_font_is_a_small_woff2_with_its_math_table(built_site):
    from fontTools.ttLib import TTFont
    path = built_site / "assets" / "fonts" / "STIXTwoMath-Regular.woff2"
    font = TTFont(path)
    assert font.flavor == "woff2" and "MATH" in font  # MATH: fraction rules, stretchy delimiters
    # a browser draws <mi>x</mi> as U+1D465 (mathematical italic x)
    assert {0x1D465, 0x2211, 0x3B1, 0x221A} <= set(font.getBestCmap())
    assert path.stat().st_size < 500_000, "subset the font (tools/math_markup.py FONT_RANGES)"


@functools.cache
def _listings(path: Path) -> list[list[str]]:
    """The non-blank lines of each outermost fold's code blocks (<pre>), one list per fold."""
    return [[line for pre in fold.iter("pre") for line in pre.text_content().splitlines() if line.strip()]
            for fold in tree(path).xpath("//details[not(ancestor::details)]")]


def test_embedded_scripts_show_the_tested_file(built_site):
    found = list(markers("embed-script"))
    assert found, "no chapter embeds a script"
    for lang in LANGS:
        for src, rel in found:
            page_path = built_page(built_site, lang, src)
            page = tree(page_path)
            source = (ROOT / rel).read_text(encoding="utf-8")
            # The listing may come in pieces (the generated contract folded inside it): every
            # non-blank line of the file, in order, across the pieces of one outer fold.
            assert [line for line in source.splitlines() if line.strip()] in _listings(page_path.resolve()), \
                f"{lang} {src}: {rel} not embedded verbatim"
            if "\n# --- end of script contract ---\n" in source:
                inner = [fold for fold in page.xpath("//details//details")
                         if "end of script contract" in fold.text_content()]
                assert inner, f"{lang} {src}: {rel}'s generated contract is not folded"
            links = [a.get("href") for a in select(page, ".script-download a")]
            assert any(href.endswith(rel) for href in links), f"{lang} {src}: no download link to {rel}"
            for href in links:
                assert (page_path.parent / href).resolve().is_file(), f"{lang} {src}: dangling {href}"


def _rows(table) -> list[list[str]]:
    return [[text_of(cell) for cell in select(tr, "td, th")] for tr in select(table, "tr")]


@pytest.mark.parametrize("kind", ["data-table", "results-table"])
def test_tables_come_from_their_data_files(built_site, kind):
    found = list(markers(kind))
    assert found, f"no chapter uses a {kind}"
    for lang in LANGS:
        for src, rel in found:
            page = tree(built_page(built_site, lang, src))
            shown = [_rows(t) for t in select(page, "article table")]
            # A results marker naming a benchmark (or a glob) renders a summary of all its files:
            # ours, then the published figures in a table of their own; every table must be shown.
            summary = kind == "results-table" and is_results_summary(rel)
            text = render(rel if summary else ROOT / rel, lang)
            expected_html = markdown.markdown(text, extensions=["tables"])
            tables = select(lxml.html.fragment_fromstring(expected_html, create_parent="div"), "table")
            assert tables, f"{rel} renders no table"
            for table in tables:
                assert _rows(table) in shown, \
                    f"{lang} {src}: table from {rel} not shown as rendered from the file(s)"


def test_results_plots_are_drawn_from_their_files(built_site):
    found = list(markers("results-plot"))
    assert found, "no chapter uses a results-plot"
    for lang in LANGS:
        for src, spec in found:
            svg, alt = plot_svg(spec, lang)
            shown = [(img.get("alt"), img.get("src")) for img in
                     select(tree(built_page(built_site, lang, src)), "article figure.results-plot img")]
            expected = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
            assert (alt, expected) in shown, f"{lang} {src}: the figure of {spec} is not its files' plot"


# Elements that make the browser fetch something when the page loads.
_FETCHING = re.compile(r"<(script|link|img|iframe|source|audio|video|embed)\b[^>]*?\b(src|href)="
                       r"[\"']((?:https?:)?//[^\"']+)", re.I)
_CSS_FETCH = re.compile(r"(@import\s+(?:url\()?[\"']?|url\([\"']?)((?:https?:)?//[^\"')]+)", re.I)
_JS_IMPORT = re.compile(r"import\(\s*[\"']((?:https?:)?//[^\"']+)", re.I)


def test_pages_request_nothing_from_third_party_hosts(built_site):
    offenders = []
    for path in built_site.rglob("*"):
        if path.suffix not in (".html", ".css", ".js"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits = []
        if path.suffix == ".html":
            hits += [m.group(3) for m in _FETCHING.finditer(text) if not _is_plain_link(m)]
            hits += [m.group(1) for m in _JS_IMPORT.finditer(text)]
        hits += [m.group(2) for m in _CSS_FETCH.finditer(text) if "w3.org" not in m.group(2)]
        offenders += [f"{path.relative_to(built_site)}: {h}" for h in hits]
    assert not offenders, "third-party requests:\n" + "\n".join(offenders[:20])


def _is_plain_link(match) -> bool:
    """<link rel="alternate|canonical"> only names a URL; it fetches nothing."""
    tag = match.group(0)
    return match.group(1).lower() == "link" and re.search(r'rel=["\'](alternate|canonical)', tag) is not None


def test_search_index_finds_a_two_character_chinese_word(built_site):
    # the Chinese pages' own index (build/hooks/search_index.py)
    index = json.loads((built_site / "zh" / "search" / "search_index.json").read_text(encoding="utf-8"))
    separator = re.compile(index["config"]["separator"])
    zh_docs = index["docs"]
    assert zh_docs, "no Chinese page in the search index"
    words = {w for d in zh_docs for w in separator.split(d["title"] + " " + d["text"]) if w}
    # 带宽 (bandwidth) is a two-character word from the home page; it must be its own token
    assert "带宽" in words, "Chinese text is not segmented into words in the search index"


_CJK = r"[\u3000-\u9fff\uff00-\uffef]"


def _wrapped_lines(lines):
    for number, (line, following) in enumerate(pairwise(lines), 1):
        if re.search(_CJK + r"$", line) and re.match(_CJK, following.lstrip()):
            yield number


def test_chinese_paragraphs_are_not_hard_wrapped():
    """A line break between two Chinese characters renders as a stray space in the browser and PDF."""
    wrapped = []
    for page in sorted((ROOT / "book" / "zh").rglob("*.md")):
        lines = page.read_text(encoding="utf-8").split("\n")
        wrapped += [f"{page.relative_to(ROOT)}:{n}" for n in _wrapped_lines(lines)]
    for notebook in sorted((ROOT / "notebooks").rglob("*.zh.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "markdown":
                lines = "".join(cell["source"]).split("\n")
                wrapped += [f"{notebook.relative_to(ROOT)} cell {index} line {n}" for n in _wrapped_lines(lines)]
    assert not wrapped, "join these lines: " + ", ".join(wrapped)


# What a browser fetches while it loads a page (<a> is followed only when clicked: mkdocs' strict
# build checks those links).
_LOADS = "script[src], img[src], source[src], video[src], audio[src], iframe[src], embed[src], link[href]"
_LINK_LOADS = {"stylesheet", "icon", "preload", "modulepreload", "manifest"}


def test_every_file_a_page_loads_is_built(built_site):
    """Every page of both languages, without a browser: each script, stylesheet, icon and image it
    loads from the site is there (the browser test, test_every_page.py, loads a sample of pages)."""
    missing = []
    for path in built_site.rglob("*.html"):
        for element in select(tree(path), _LOADS):
            if element.tag == "link" and not _LINK_LOADS & set((element.get("rel") or "").split()):
                continue
            address = (element.get("src") or element.get("href")).split("#")[0].split("?")[0]
            if not address or re.match(r"^(?:[a-z]+:|//)", address):  # data:, blob:, another host
                continue
            base = built_site if address.startswith("/") else path.parent
            target = base / unquote(address).lstrip("/")
            if not target.resolve().is_file():
                missing.append(f"{path.relative_to(built_site)}: {address}")
    assert not missing, f"{len(missing)} files that pages load are not in the site:\n" + "\n".join(missing[:30])


def _fragment_targets(page) -> set[str]:
    return set(page.xpath("//@id")) | set(page.xpath("//a/@name"))


@pytest.mark.parametrize("lang", LANGS)
def test_every_in_page_link_resolves(built_site, lang):
    # Every page of the language, not only the nav: a browser jumps nowhere when no element has
    # the fragment's id, and says nothing. A browser tries the fragment percent-encoded, then
    # decoded, so a Unicode href matches a percent-encoded id (notebook headings have those).
    pages = [p for p in built_site.rglob("*.html") if (lang == "zh") == (p.relative_to(built_site).parts[0] == "zh")]
    assert len(pages) >= len(nav_pages())
    broken = []
    for path in pages:
        page = tree(path)
        targets = _fragment_targets(page)
        for href in page.xpath("//a/@href"):
            if not href.startswith("#") or href in ("#", "#__search"):
                continue
            fragment = href[1:]
            if not {fragment, unquote(fragment), quote(unquote(fragment))} & targets:
                broken.append(f"{path.relative_to(built_site)}: {href}")
    assert not broken, f"{len(broken)} in-page links point at no element:\n" + "\n".join(broken[:30])


@pytest.mark.parametrize("lang", LANGS)
def test_appendix_page_lists_every_embedded_script_with_a_download(built_site, lang):
    page_path = built_page(built_site, lang, "appendix/scripts.md")
    page = tree(page_path)
    sections = [text_of(h).rstrip("¶").strip() for h in select(page, "article h2")]
    assert sections == list(dict.fromkeys(rel for _, rel in _nav_ordered_markers()))
    for href in [a.get("href") for a in select(page, "article a[download]")]:
        assert (page_path.parent / href).resolve().is_file(), f"{lang}: dangling {href}"


@pytest.mark.parametrize("lang", LANGS)
def test_appendix_says_what_each_script_is_for_in_the_pages_language(built_site, lang):
    """Each section opens with the script's purpose: the first paragraph of its docstring on the
    English page, its translation (book/zh/appendix/script_summaries.yml) on the Chinese one. A
    stale translation (the English paragraph changed since) prints English: this fails then."""
    page = tree(built_page(built_site, lang, "appendix/scripts.md"))
    summaries = load_summaries(ROOT)
    squeeze = lambda s: "".join(s.replace("`", "").split())  # noqa: E731 - code spans show plain
    sections = select(page, "article h2")
    assert sections
    for heading in sections:
        rel = text_of(heading).rstrip("¶").strip()
        shown, english = squeeze(text_of(heading.getnext())), squeeze(script_purpose(ROOT / rel))
        if lang == "en":
            assert shown == english, f"{rel}: the purpose shown is not its docstring's first paragraph"
        else:
            assert shown == squeeze(summaries[rel]["zh"]), f"{rel}: the Chinese summary is not shown"
            assert english not in shown, f"{rel}: the zh appendix shows the English purpose"


def _nav_ordered_markers():
    order = {src: i for i, src in enumerate(nav_pages())}
    return sorted(markers("embed-script"), key=lambda m: order[m[0]])


def test_the_tests_read_the_nav_as_mkdocs_does():
    """tests/build/book.py reads mkdocs.yml's nav as plain YAML (fast, at collection); mkdocs'
    own reading of the configuration must give the same pages."""
    from tests.build.book import config, nav_sources
    assert nav_pages() == nav_sources(config()["nav"])


@pytest.mark.parametrize("lang", LANGS)
def test_the_home_page_table_lists_every_part(built_site, lang):
    from tests.build.book import _nav
    from tools.book import nav_sources
    parts = [nav_sources([item])[0] for item in _nav()[1:]]  # each part's first page; [0] is Home
    home = built_page(built_site, lang, "index.md")
    linked = {(home.parent / unquote(a.get("href"))).resolve()
              for a in select(tree(home), "article table a[href]")}
    missing = [src for src in parts if built_page(built_site, lang, src).parent.resolve() not in linked
               and built_page(built_site, lang, src).resolve() not in linked]
    assert not missing, f"{lang} home page: no row for {missing}"


@pytest.mark.parametrize("lang", LANGS)
def test_pages_link_the_previous_and_next_page_at_their_foot(built_site, lang):
    pages = nav_pages()
    i = pages.index("network/index.md")
    page = built_page(built_site, lang, pages[i])
    for kind, neighbour in (("prev", pages[i - 1]), ("next", pages[i + 1])):
        links = select(tree(page), f"a.md-footer__link--{kind}")
        assert len(links) == 1, f"{lang}: no {kind} link at the foot of {pages[i]}"
        target = (page.parent / unquote(links[0].get("href"))).resolve()
        assert target in (built_page(built_site, lang, neighbour).resolve(),
                          built_page(built_site, lang, neighbour).parent.resolve())


def test_each_page_describes_itself_in_its_own_language(built_site):
    cjk = re.compile(r"[\u4e00-\u9fff]")
    seen = {}
    for src in nav_pages():
        found = {}
        for lang in LANGS:
            head = tree(built_page(built_site, lang, src))
            found[lang] = [m.get("content") for m in select(head, 'meta[name="description"]')]
            assert len(found[lang]) == 1 and found[lang][0], f"{lang} {src}: {found[lang]}"
            # Material fetched sitemap.xml beside each of these: two 404s on every page load
            assert not select(head, "link[rel=alternate][hreflang]"), f"{lang} {src}"
        assert cjk.search(found["zh"][0]), f"zh {src}: description not in Chinese: {found['zh'][0]}"
        assert not cjk.search(found["en"][0]), f"en {src}: {found['en'][0]}"
        seen.setdefault(found["en"][0], []).append(src)
    shared = {text: srcs for text, srcs in seen.items() if len(srcs) > 1}
    assert not shared, f"pages that share one description: {shared}"


def test_a_sitemap_only_with_the_sites_address(built_site):
    import os
    sitemaps = sorted(built_site.rglob("sitemap.xml*"))
    if not os.environ.get("BOOK_SITE_URL"):
        # mkdocs would write "<loc>None/..." for every page
        assert not sitemaps, f"a sitemap without the site's address: {sitemaps}"
    for path in (p for p in sitemaps if p.suffix == ".xml"):
        assert "<loc>None" not in path.read_text(encoding="utf-8"), path


def test_each_translation_has_the_sitemap_of_its_own_pages(tmp_path):
    """Material's version switcher stays on the page only if the chosen version's base, <v>/zh/ on
    a Chinese page, has a sitemap whose common root is that base."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("sitemap_hook", ROOT / "build" / "hooks" / "sitemap.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    entry = "    <url>\n        <loc>https://book.example/{}</loc>\n    </url>\n"
    pages = ["", "storage/", "zh/", "zh/storage/", "zhongwen/"]
    (tmp_path / "zh").mkdir()
    (tmp_path / "sitemap.xml").write_text('<?xml version="1.0" encoding="UTF-8"?>\n<urlset>\n'
                                          + "".join(entry.format(p) for p in pages) + "</urlset>\n")
    hook.language_sitemaps(tmp_path, "https://book.example/", ["zh"])
    zh = (tmp_path / "zh" / "sitemap.xml").read_text()
    assert re.findall(r"<loc>(.*?)</loc>", zh) == ["https://book.example/zh/", "https://book.example/zh/storage/"]
    assert zh.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<urlset>\n') and zh.endswith("</urlset>\n")


@pytest.mark.parametrize("site, repo", [(None, None), ("https://book.example/", None),
                                        (None, "https://git.example/book"), ("https://book.example/", "https://git.example/book")])
def test_the_footer_gives_the_books_addresses_it_knows(site, repo):
    import jinja2
    template = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "build" / "overrides")) \
        .get_template("partials/copyright.html")
    strings = {"pdf_website": "Online:", "pdf_repository": "Sources:"}
    footer = lxml.html.fragment_fromstring(template.render(config={
        "copyright": "Text CC BY-SA 4.0", "site_url": site, "extra": {"repository": repo, "strings": strings}}))
    links = {a.get("href") for a in footer.iter("a")} - {"https://squidfunk.github.io/mkdocs-material/"}
    assert links == {url for url in (site, repo) if url}
    text = " ".join(footer.text_content().split())
    assert "None" not in text and "Text CC BY-SA 4.0" in text
    assert ("Online:" in text) == bool(site) and ("Sources:" in text) == bool(repo)
    assert (" · " in text) == bool(site and repo)


def _author_dates(paths: list[Path]) -> dict[Path, datetime.date]:
    """The UTC date of the newest commit (author time) that changed each path; absent when git has
    none (a file not committed yet)."""
    found = {}
    for path in paths:
        done = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%at", "--", str(path)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode == 0 and done.stdout.strip():
            found[path] = datetime.datetime.fromtimestamp(int(done.stdout), datetime.UTC).date()
    return found


@pytest.mark.parametrize("lang", LANGS)
def test_every_page_gives_the_date_its_source_last_changed(built_site, lang):
    """Under each page, the date of the newest commit that changed its source (a notebook page:
    the notebook), in the page's language; a page not committed yet gives the day it was built."""
    sources = {src: (ROOT / "book" / lang / src).resolve() for src in nav_pages()}
    dates = _author_dates(list(sources.values()))
    built = datetime.datetime.fromtimestamp((built_site / "index.html").stat().st_mtime, datetime.UTC).date()
    wrong = []
    for src, path in sources.items():
        page = page_tree(built_page(built_site, lang, src))
        dated = select(page, "aside.md-source-file .git-revision-date-localized-plugin-date")
        shown = [el.text_content().strip() for el in dated]
        expected = babel.dates.format_date(dates.get(path, built), format="long", locale=lang)
        if shown != [expected]:
            wrong.append(f"{lang}/{src}: {shown}, expected [{expected!r}]")
    assert not wrong, "\n".join(wrong)
