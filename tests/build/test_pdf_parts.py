"""build/pdf_book.py without the whole book: the part cache renders only what changed, links between
pages become ``book:`` links to prefixed anchors (and find them again, percent-encoded), and the
printed page numbers."""

import sys

import pytest
from bs4 import BeautifulSoup

from tests.build.book import ROOT

sys.path.insert(0, str(ROOT / "build"))  # spawned render workers import pdf_book by name, as build_book.py does
import pdf_book

PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<article class="chapter" id="{key}"><h1 id="{key}--title">{title}</h1><p>{text}</p>
<div id="{key}--end"></div></article></body></html>"""


def test_only_the_changed_part_is_rendered_again_and_its_old_version_dropped(tmp_path):
    cache = tmp_path / "cache"
    docs = {"en-a": PAGE.format(key="a", title="A", text="one"), "en-b": PAGE.format(key="b", title="B", text="two")}
    first = pdf_book.render_all(docs, cache, jobs=2)
    assert {name: r.cached for name, r in first.items()} == {"en-a": False, "en-b": False}
    assert first["en-a"].meta["pages"] == 1 and "a--title" in first["en-a"].meta["anchors"]

    again = pdf_book.render_all(docs, cache, jobs=2)
    assert {name: r.cached for name, r in again.items()} == {"en-a": True, "en-b": True}

    docs["en-b"] = PAGE.format(key="b", title="B", text="two, edited")
    edited = pdf_book.render_all(docs, cache, jobs=2)
    assert {name: r.cached for name, r in edited.items()} == {"en-a": True, "en-b": False}
    assert not first["en-b"].pdf.exists(), "the superseded version of the part stays in the cache"
    assert sorted(p.name for p in cache.glob("en-b-*")) == sorted([edited["en-b"].pdf.name,
                                                                  edited["en-b"].pdf.with_suffix(".json").name])


def test_a_stylesheet_change_renders_the_part_again(tmp_path):
    css = tmp_path / "print.css"
    css.write_text("p { color: black }")
    page = PAGE.format(key="a", title="A", text="one").replace(
        "<head>", f'<head><link rel="stylesheet" href="{css.as_uri()}">')
    before = pdf_book.cache_key(page)
    css.write_text("p { color: red }")
    assert pdf_book.cache_key(page) != before


def test_the_same_part_built_in_another_folder_keeps_its_cache_key(tmp_path):
    # `make book` builds into site/, `make release` into dist/site/: the same files, other paths
    keys = []
    for folder in ("site", "dist/site"):
        (tmp_path / folder).mkdir(parents=True)
        css, img = tmp_path / folder / "print.css", tmp_path / folder / "plot.png"
        css.write_text("p { color: black }")
        img.write_bytes(b"\x89PNG one plot")
        keys.append(pdf_book.cache_key(PAGE.format(key="a", title="A", text=f'<img src="{img.as_uri()}">').replace(
            "<head>", f'<head><link rel="stylesheet" href="{css.as_uri()}">')))
    assert keys[0] == keys[1]
    img.write_bytes(b"\x89PNG another plot")
    assert pdf_book.cache_key(PAGE.format(key="a", title="A", text=f'<img src="{img.as_uri()}">').replace(
        "<head>", f'<head><link rel="stylesheet" href="{css.as_uri()}">')) != keys[1]


def _relinked(href: str, site_url=None) -> tuple[str | None, set]:
    soup = BeautifulSoup(f'<p><a href="{href}">x</a></p>', "html.parser")
    urls = {"": "home", "network/": "network", "training/memory/": "training-memory"}
    links = set()
    pdf_book._relink(soup.a, "zh/training/memory/", "training-memory", urls, "zh/", site_url, links)
    return (soup.a.get("href") if soup.a else None), links


@pytest.mark.parametrize("href, expected", [
    ("#units", "book:training-memory--units"),                     # the same page
    ("../../network/#busbw", "book:network--busbw"),                # another page, a heading
    ("../../network/", "book:network"),                             # another page, its start
    ("../../network/index.html#x", "book:network--x"),
    ("../../#%E7%AE%80%E4%BB%8B", "book:home--简介"),                # a percent-encoded Chinese id
    ("https://example.org/a#b", "https://example.org/a#b"),         # another site: untouched
    ("mailto:someone@example.org", "mailto:someone@example.org"),
])
def test_links_between_pages_become_book_links_to_prefixed_anchors(href, expected):
    new, links = _relinked(href)
    assert new == expected
    assert links == ({expected.removeprefix(pdf_book.LINK)} if expected.startswith(pdf_book.LINK) else set())


def test_a_percent_encoded_link_finds_its_anchor_and_a_lost_one_names_the_page_and_the_link():
    # WeasyPrint writes a link's URI percent-encoded; the anchors it placed keep the id's characters
    anchors = {"home--简介": (3, 700.0), "home--units": (4, 80.0)}
    assert pdf_book.link_anchor("book:home--%E7%AE%80%E4%BB%8B", anchors, "zh PDF, page 9") == "home--简介"
    assert pdf_book.link_anchor("book:home--units", anchors, "en PDF, page 9") == "home--units"
    lost = r"^zh PDF, page 9: the link 'book:home--%E7%BC%BA' points at 'home--缺'"
    with pytest.raises(pdf_book.PdfError, match=lost):
        pdf_book.link_anchor("book:home--%E7%BC%BA", anchors, "zh PDF, page 9")


def test_a_link_to_a_site_file_gets_the_sites_address_or_becomes_text():
    assert _relinked("../../../scripts/network/x.py", "https://book.example/")[0] == "https://book.example/scripts/network/x.py"
    assert _relinked("../../../scripts/network/x.py")[0] is None  # no <a> left, only its text


def test_page_numbers_roman_in_the_front_matter_arabic_from_the_first_part():
    assert pdf_book.page_labels(4, 3) == ["", "ii", "iii", "iv", "1", "2", "3"]
    assert [pdf_book.roman(n) for n in (1, 4, 9, 14, 40, 90, 400, 1994)] == [
        "i", "iv", "ix", "xiv", "xl", "xc", "cd", "mcmxciv"]


def test_page_urls_and_keys_follow_mkdocs_directory_urls():
    sources = ("index.md", "network/index.md", "training/memory.md", "compute/roofline.ipynb")
    assert [pdf_book.page_url(s) for s in sources] == ["", "network/", "training/memory/", "compute/roofline/"]
    assert pdf_book.page_key("training/memory.md") == "training-memory" and pdf_book.page_key("index.md") == "home"


def _book_of_one_part() -> tuple:
    part = pdf_book.Part("network", "Network", ["network/index.md"])
    book = pdf_book.Book("en", "Book", {}, None, [part])
    doc = pdf_book.PartDoc("en", part, headings=[pdf_book.Heading(1, "Network", "network--network")],
                           links={"network--network"}, anchors=["network", "network--network", "network--end"])
    return book, {"network": doc}


def test_the_build_fails_when_weasyprint_dropped_the_end_of_a_part(tmp_path):
    book, docs = _book_of_one_part()
    placed = {"network": [0, 800.0], "network--network": [0, 780.0]}  # the chapter's end anchor is missing
    rendered = {"en-network": pdf_book.Rendered("en-network", tmp_path / "x.pdf",
                                                {"pages": 1, "anchors": placed}, False)}
    with pytest.raises(pdf_book.PdfError, match="did not place 1 anchors, from 'network--end'"):
        pdf_book.lay_out(book, docs, rendered)
    placed["network--end"] = [0, 100.0]
    layout = pdf_book.lay_out(book, docs, rendered)
    assert layout.body_pages == 1 and [e.title for e in layout.entries] == ["Network"]


def test_the_build_fails_on_a_link_to_an_anchor_no_page_holds(tmp_path):
    book, docs = _book_of_one_part()
    docs["network"].links.add("network--nowhere")
    placed = {"network": [0, 800.0], "network--network": [0, 780.0], "network--end": [0, 100.0]}
    rendered = {"en-network": pdf_book.Rendered("en-network", tmp_path / "x.pdf",
                                                {"pages": 1, "anchors": placed}, False)}
    with pytest.raises(pdf_book.PdfError, match="1 links point at anchors no page holds.*network--nowhere"):
        pdf_book.lay_out(book, docs, rendered)


def test_the_sites_mathml_prints_as_the_svg_of_its_tex():
    from tools.math_markup import tex_to_mathml
    inline, display = tex_to_mathml(r"\frac{a}{b}", False), tex_to_mathml("x^2", True)
    soup = BeautifulSoup(f'<article><p>x {inline}</p><div class="math-display">{display}</div></article>',
                         "html.parser")
    pdf_book._print_version(soup.article, pdf_book.load_books(["en"])[0], "network/index.md")
    assert soup.find("math") is None, "WeasyPrint draws no MathML: it would print the bare letters"
    svgs = soup.select("svg.math")
    assert [svg["aria-label"] for svg in svgs] == [r"\frac{a}{b}", "x^2"]
    assert "vertical-align" in svgs[0]["style"] and "vertical-align" not in svgs[1]["style"]


def test_an_english_word_too_wide_for_its_table_column_is_hyphenated(tmp_path):
    import subprocess

    import weasyprint

    from tests.conftest import require_tool
    cells = "".join(f"<td>{w}</td>" for w in ["interconnect", "accelerators"] + ["x"] * 12)
    (tmp_path / "t.html").write_text(
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<link rel="stylesheet" href="{pdf_book.PRINT_CSS.resolve().as_uri()}"></head><body>'
        f'<article class="md-typeset chapter" lang="en"><table><thead><tr>{"<th>h</th>" * 14}</tr></thead>'
        f"<tbody><tr>{cells}</tr></tbody></table></article></body></html>", encoding="utf-8")
    weasyprint.HTML(filename=str(tmp_path / "t.html")).write_pdf(str(tmp_path / "t.pdf"))
    text = subprocess.run([require_tool("pdftotext"), "-layout", str(tmp_path / "t.pdf"), "-"],
                          capture_output=True, text=True, check=True).stdout
    # 14 columns in the text width: the words break at a syllable with a hyphen, not anywhere
    assert "inter\u2010" in text and "accel\u2010" in text, text


def _numbered_book() -> tuple:
    parts = [pdf_book.Part("home", "Home", ["index.md"]),
             pdf_book.Part("compute", "Compute", ["compute/index.md", "compute/gpus.md", "compute/cpus.md"]),
             pdf_book.Part("insights", "Insights", ["insights/index.md"]),
             pdf_book.Part("appendix", "Appendix", ["appendix/scripts.md"])]
    pdf_book.numbered(parts)
    return pdf_book.Book("en", "Book", {}, None, parts), parts


def test_parts_are_numbered_and_chapters_within_them_the_index_page_being_the_part():
    book, (home, compute, insights, appendix) = _numbered_book()
    assert [p.number for p in book.parts] == ["", "1", "2", ""]
    assert compute.numbers() == {"compute/index.md": "1", "compute/gpus.md": "1.1", "compute/cpus.md": "1.2"}
    assert insights.numbers() == {"insights/index.md": "2"} and home.numbers() == appendix.numbers() == {}
    heads = {"home": [pdf_book.Heading(1, "Book", "home--book")],
             "compute": [pdf_book.Heading(1, "1 Compute", "compute--compute"),
                         pdf_book.Heading(2, "Units", "compute--units"),
                         pdf_book.Heading(1, "1.1 GPUs", "compute-gpus--gpus"),
                         pdf_book.Heading(2, "Clocks", "compute-gpus--clocks"),
                         pdf_book.Heading(1, "1.2 CPUs", "compute-cpus--cpus")],
             "insights": [pdf_book.Heading(1, "2 Insights", "insights--insights")],
             "appendix": [pdf_book.Heading(1, "Scripts", "appendix-scripts--scripts")]}
    docs = {slug: pdf_book.PartDoc("en", next(p for p in book.parts if p.slug == slug), headings=h)
            for slug, h in heads.items()}
    entries = [(e.level, e.title, e.section) for e in pdf_book.contents(book, docs)]
    # no "1.x Compute" chapter under part "1 Compute": the index page is the part
    assert entries == [(0, "Book", False), (0, "1 Compute", False), (1, "Units", True), (1, "1.1 GPUs", False),
                       (2, "Clocks", True), (1, "1.2 CPUs", False), (0, "2 Insights", False), (0, "Scripts", False)]


@pytest.mark.parametrize("repo, site, shown, hidden", [
    ("https://github.com/o/book", "https://o.github.io/book/", ["github.com/o/book", "o.github.io/book"], []),
    ("https://github.com/o/book", None, ["github.com/o/book"], ["Website", "None"]),
    (None, None, [], ["Source repository", "Website", "None"]),
])
def test_the_back_of_the_title_page_gives_the_addresses_that_are_set(tmp_path, repo, site, shown, hidden):
    book = pdf_book.Book("en", "Book", {"pdf_built_on": "Edition of {date}", "pdf_contents": "Contents",
                                        "pdf_repository": "Source repository:", "pdf_website": "Website:"},
                         site, [], repo)
    verso = BeautifulSoup(pdf_book.front_html(book, [], {}, tmp_path), "html.parser").select_one("section.verso")
    text = verso.get_text(" ")
    assert all(s in text for s in shown) and not any(h in text for h in hidden), text
    assert [a["href"] for a in verso.select("a")] == [u for u in (repo, site) if u]
    assert "CC BY-SA" in text


def test_a_plot_prints_in_256_colours_looking_the_same_and_is_quantized_once(tmp_path, monkeypatch):
    import base64
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image, ImageChops

    monkeypatch.setattr(pdf_book, "PNG_CACHE", tmp_path / "png")
    fig, (lines, fill) = plt.subplots(1, 2, figsize=(6, 2.5))  # a notebook's plot: lines, a colour map
    lines.plot([x / 10 for x in range(100)], [(x % 17) / 17 for x in range(100)])
    fill.imshow([[x * y for x in range(64)] for y in range(64)])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    uri = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    printed = pdf_book._print_png(uri)
    raw = base64.b64decode(printed.split(",", 1)[1])
    assert len(raw) < len(buffer.getvalue())
    with Image.open(io.BytesIO(raw)) as image, Image.open(buffer) as plot:
        assert image.size == plot.size and len(image.convert("RGBA").getcolors(1 << 16)) <= 256
        difference = ImageChops.difference(image.convert("RGB"), plot.convert("RGB"))
        # the book's plots: up to 4% of pixels (edges of anti-aliased lines) off by 8 to 20 levels
        histogram = difference.convert("L").histogram()
        assert sum(histogram[8:]) < 0.05 * plot.width * plot.height and sum(histogram[33:]) == 0
    [cached] = (tmp_path / "png").iterdir()
    cached.write_bytes(buffer.getvalue())  # the second call reads the cache, not the image
    assert pdf_book._print_png(uri) == uri
