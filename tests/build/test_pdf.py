"""The assembled PDFs (build/pdf_book.py): cover, contents with the right page numbers, one page numbering,
outline, links between parts, math, CJK font, images, the scripts appendix."""

import html
import json
import re
import subprocess
from dataclasses import dataclass

import pikepdf
import pytest
from pypdf import PdfReader
from pypdf.generic import IndirectObject

from tests.build.book import (
    BUILT_PAGES,
    LANGS,
    PDF_NAME,
    RAW_TEX,
    ROOT,
    built_page,
    config,
    markers,
    nav_pages,
    nav_parts,
    page_tree,
    script_usage,
    select,
    text_of,
    ui_strings,
)
from tests.conftest import require_tool
from tools import calculators
from tools.book import script_purpose
from tools.translations import load_summaries

pytestmark = BUILT_PAGES


@pytest.fixture(scope="module")
def pdfs(built_book):
    readers = {}
    for lang in LANGS:
        path = built_book / "pdf" / PDF_NAME.format(lang=lang)
        assert path.is_file(), f"missing {path.name}"
        readers[lang] = PdfReader(str(path))
    return readers


@dataclass
class PageText:
    text: str                 # the page's words, in reading order, separated by spaces
    by_line: str              # the same, line by line from the top, each left to right
    off_page: list[str]       # words that start beyond the page's right edge
    footer: list[str]         # words in the bottom 8% of the page (the page number)
    body: list[str]           # words between the running header (top 5%) and the footer


_PAGE = re.compile(r'<page width="([\d.]+)" height="([\d.]+)"[^>]*>(.*?)</page>', re.S)
_WORD = re.compile(r'<word xMin="([\d.-]+)" yMin="([\d.-]+)"[^>]*>(.*?)</word>')


@pytest.fixture(scope="module")
def page_texts(built_book) -> dict[str, list[PageText]]:
    """Every page's words with their positions, read once per language with poppler's pdftotext
    (a few seconds for 400 pages; pypdf takes about 20 s a pass)."""
    pdftotext = require_tool("pdftotext")
    result = {}
    for lang in LANGS:
        path = built_book / "pdf" / PDF_NAME.format(lang=lang)
        xhtml = subprocess.run([pdftotext, "-bbox", str(path), "-"], capture_output=True, text=True,
                               check=True, timeout=120).stdout
        pages = []
        for width, height, body in _PAGE.findall(xhtml):
            words = [(float(x), float(y), html.unescape(word)) for x, y, word in _WORD.findall(body)]
            # poppler's reading order may give a block of titles before the column of their page
            # numbers (contents); by position a title and its number stay together
            lines = sorted(words, key=lambda w: (round(w[1]), w[0]))
            pages.append(PageText(" ".join(w for _, _, w in words), " ".join(w for _, _, w in lines),
                                  [w[:30] for x, _, w in words if x > float(width)],
                                  [w for _, y, w in words if y > 0.92 * float(height)],
                                  [w for _, y, w in words if 0.05 * float(height) < y <= 0.92 * float(height)]))
        result[lang] = pages
    return result


@pytest.fixture(scope="module")
def images(built_book) -> dict[str, list[int]]:
    """The page number (1-based) of every image drawn, from poppler's pdfimages (a PNG with
    transparency adds an "smask" row for its alpha channel, which is not counted)."""
    result = {}
    for lang in LANGS:
        pdf = built_book / "pdf" / PDF_NAME.format(lang=lang)
        listing = subprocess.run([require_tool("pdfimages"), "-list", str(pdf)],
                                 capture_output=True, text=True, check=True, timeout=120).stdout
        result[lang] = [int(line.split()[0]) for line in listing.splitlines()[2:] if line.split()[2] == "image"]
    return result


def squeezed(text: str) -> str:
    """Text without whitespace: the PDF wraps lines where the HTML did not."""
    return "".join(text.split())


def _resolve(obj):
    return obj.get_object() if isinstance(obj, IndirectObject) else obj


def outline_entries(reader) -> list[tuple[int, str, int]]:
    """(depth, title, page index) of every outline item, in order."""
    entries = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                entries.append((depth, item.title, reader.get_destination_page_number(item)))

    walk(reader.outline, 0)
    return entries


def outline_titles(reader) -> list[str]:
    return [title for _, title, _ in outline_entries(reader)]


def _headings(built_book, lang, level):
    for src in nav_pages():
        article = select(page_tree(built_page(built_book, lang, src).resolve()), "article")[0]
        for h in article.iter(level):
            text = text_of(h).rstrip("¶").strip()
            yield src, text


# A part's or chapter's number, before its title in the PDF (build/pdf_book.py numbered).
NUMBER = re.compile(r"^\d+(?:\.\d+)? ")


@pytest.mark.parametrize("lang", LANGS)
def test_outline_has_every_chapter_and_section(pdfs, built_book, lang):
    titles = outline_titles(pdfs[lang])
    outline = set(titles) | {NUMBER.sub("", title) for title in titles}  # "2.1 Accelerators"; "512 GPUs"
    missing = [
        f"{src}: {text}"
        for level in ("h1", "h2")
        for src, text in _headings(built_book, lang, level)
        if text not in outline
    ]
    assert not missing, "not in the PDF outline:\n" + "\n".join(missing)


def front_pages(reader) -> int:
    """How many pages come before page 1 (the cover and the contents, numbered in roman)."""
    nums = reader.trailer["/Root"]["/PageLabels"]["/Nums"]
    return int(nums[2])


def label(reader, index: int) -> str:
    """The number printed on page ``index`` (0-based): none on the cover, then roman, then arabic."""
    front = front_pages(reader)
    if index == 0:
        return ""
    if index < front:
        return reader.page_labels[index]
    return str(index - front + 1)


@pytest.mark.parametrize("lang", LANGS)
def test_cover_and_contents(pdfs, lang):
    reader = pdfs[lang]
    cover = reader.pages[0].extract_text()
    title = {"en": "The ML Engineering Open Book", "zh": "机器学习工程开放书"}[lang]
    assert title in cover.replace("\n", " ")
    assert re.search(r"\d{4}-\d{2}-\d{2}", cover), "no edition date on the cover"
    contents = reader.pages[2].extract_text()  # after the back of the title page
    assert {"en": "Contents", "zh": "目录"}[lang] in contents
    assert "¶" not in contents, "heading permalinks leaked into the contents"
    assert reader.page_labels[:3] == ["i", "ii", "iii"] and reader.page_labels[front_pages(reader)] == "1"


@pytest.mark.parametrize("lang", LANGS)
def test_back_of_the_title_page_gives_the_repository_and_the_site(page_texts, lang):
    """The repository's address (mkdocs.yml extra.repository, BOOK_REPO_URL) and the website's
    (site_url, BOOK_SITE_URL) on the page after the cover, each only when it is set."""
    verso = squeezed(page_texts[lang][1].text)
    for url in (config().extra.get("repository"), config().site_url):
        if url:
            assert squeezed(url) in verso, f"{url} is not on the back of the title page: {verso!r}"
    assert "None" not in verso
    if not config().site_url:
        assert squeezed(ui_strings(lang)["pdf_website"]) not in verso


def _part_and_chapter(title: str) -> tuple[str, str]:
    number = NUMBER.match(title)
    return (number.group(0).strip(), title[number.end():]) if number else ("", title)


@pytest.mark.parametrize("lang", LANGS)
def test_parts_and_chapters_are_numbered_as_the_nav(pdfs, lang):
    """Parts are numbered 1, 2, ... in nav order (not the home page, which is the book's own, nor
    the appendix); a part's index page is the part itself, as on the site, so it is no chapter of
    its own; its other pages are its chapters, numbered within it (2.1, 2.2, ...)."""
    entries = outline_entries(pdfs[lang])
    parts = [title for depth, title, _ in entries if depth == 0]
    numbers = [_part_and_chapter(title)[0] for title in parts]
    assert numbers[0] == numbers[-1] == "", f"the home page and the appendix are numbered: {parts}"
    assert numbers[1:-1] == [str(n) for n in range(1, len(parts) - 1)], parts
    part, chapters = None, {}
    for depth, title, _ in entries:
        number, name = _part_and_chapter(title)
        if depth == 0:
            part = (number, name)
            chapters[part] = []
        elif depth == 1 and number:
            assert number.startswith(part[0] + "."), f"{title!r} under part {part}"
            assert name != part[1], f"{title!r} repeats its part's title: the part's own page is the part"
            chapters[part].append(number)
    for (number, name), found in chapters.items():
        if number:
            assert found == [f"{number}.{k}" for k in range(1, len(found) + 1)], f"part {number} {name}: {found}"
    # every page of a numbered part but its own page (its first: each has an index page) is a chapter
    numbered = [len(pages) - 1 for pages in nav_parts()
                if pages != ["index.md"] and not pages[0].startswith("appendix/")]
    assert [len(found) for (number, _), found in chapters.items() if number] == numbered


def _body_lines(path) -> list[list[str]]:
    """Each page's lines of text between the running header and the page number, top to bottom,
    without spaces (poppler's pdftotext -bbox-layout)."""
    xhtml = subprocess.run([require_tool("pdftotext"), "-bbox-layout", str(path), "-"], capture_output=True,
                           text=True, check=True, timeout=120).stdout
    pages = []
    for height, body in re.findall(r'<page width="[\d.]+" height="([\d.]+)">(.*?)</page>', xhtml, re.S):
        lines = []
        for y, line in re.findall(r'<line xMin="[\d.-]+" yMin="([\d.-]+)"[^>]*>(.*?)</line>', body, re.S):
            if 0.05 * float(height) < float(y) <= 0.92 * float(height):
                lines.append((float(y), "".join(html.unescape(w) for w in re.findall(r">([^<]*)</word>", line))))
        pages.append([text for _, text in sorted(lines)])
    return pages


@pytest.mark.parametrize("lang", LANGS)
def test_no_page_ends_with_a_heading(pdfs, built_book, lang):
    """A heading stays with what follows it (build/pdf/print.css): no page of the body ends with
    the text of a heading of the book (in one or two lines), nor with the label of a script's
    summary box, which is its appendix heading."""
    headings = {squeezed(text) for level in ("h2", "h3", "h4", "h5", "h6")
                for _, text in _headings(built_book, lang, level)}
    headings = {h for h in headings if len(h) >= 4}  # a one-word line could end any paragraph
    pages = _body_lines(built_book / "pdf" / PDF_NAME.format(lang=lang))
    ending = {}
    for number, lines in enumerate(pages[front_pages(pdfs[lang]):], front_pages(pdfs[lang]) + 1):
        if not lines:
            continue
        last, two = lines[-1], "".join(lines[-2:])
        if last in headings or any(h.endswith(last) and two.endswith(h) for h in headings if len(h) > len(last)):
            ending[number] = last
    assert not ending, f"pages that end with a heading: {ending}"


@pytest.mark.parametrize("lang", LANGS)
def test_contents_give_the_page_each_entry_lands_on(pdfs, page_texts, lang):
    """Each outline entry (part, chapter, section) is in the contents with the number printed on
    the page the outline takes it to."""
    reader = pdfs[lang]
    toc = squeezed(" ".join(page.by_line for page in page_texts[lang][1:front_pages(reader)]))
    wrong = [f"{title} -> {label(reader, index)}" for _, title, index in outline_entries(reader)
             if squeezed(title) + label(reader, index) not in toc]
    assert not wrong, f"{len(wrong)} contents entries without their page number, e.g. {wrong[:5]}"


@pytest.mark.parametrize("lang", LANGS)
def test_outline_entries_land_on_the_page_of_their_heading(pdfs, page_texts, lang):
    reader = pdfs[lang]
    entries = outline_entries(reader)
    assert max(depth for depth, _, _ in entries) == 2, "the outline goes part > chapter > section"
    pages = page_texts[lang]
    wrong = [f"{title} -> page {index + 1}" for _, title, index in entries
             if squeezed(title) not in squeezed(pages[index].text)]
    assert not wrong, f"{len(wrong)} of {len(entries)} outline entries land elsewhere, e.g. {wrong[:5]}"


@pytest.mark.parametrize("lang", LANGS)
def test_internal_links_land_on_the_page_of_their_target(pdfs, page_texts, built_book, lang):
    """A link between pages goes to a named destination PAGEKEY--ID (or PAGEKEY, the page's start);
    the element with that id in the built site names what must be on the destination page: a
    heading's text, or for any other target at least its page."""
    reader = pdfs[lang]
    named = reader.named_destinations
    pages = page_texts[lang]
    urls = {src.removesuffix(".md").removesuffix(".ipynb").removesuffix("/index").removesuffix("index")
            .strip("/").replace("/", "-") or "home": src for src in nav_pages()}
    links = wrong = 0
    for number, page in enumerate(reader.pages):
        for annot in page.get("/Annots", []) or []:
            annot = _resolve(annot)
            if annot.get("/Subtype") != "/Link" or "/Dest" not in annot:
                continue
            links += 1
            name = str(annot["/Dest"])
            assert name in named, f"page {number + 1}: link to unknown destination {name}"
            target = reader.get_destination_page_number(named[name])
            key, _, anchor = name.partition("--")
            page_html = page_tree(built_page(built_book, lang, urls[key]).resolve())
            found = select(page_html, "article h1") if not anchor else page_html.xpath("//*[@id=$id]", id=anchor)
            assert found, f"page {number + 1}: {name} is no element of {urls[key]}"
            element = found[0]
            if element.tag in ("h1", "h2", "h3", "h4"):
                heading = squeezed(text_of(element).rstrip("¶"))
                wrong += heading not in squeezed(pages[target].text)
    assert links > 100, f"only {links} internal links (the contents page alone links every entry)"
    assert wrong == 0, f"{wrong} of {links} links land on a page without their heading"


@pytest.mark.parametrize("lang", LANGS)
def test_page_count_is_sane(pdfs, lang):
    pages = len(pdfs[lang].pages)
    # The upper bound catches a runaway layout (a table or listing repeated page after page); the
    # book is about 400 pages per language without the script listings.
    assert len(nav_pages()) + 2 <= pages <= 700


@pytest.mark.parametrize("lang", LANGS)
def test_no_raw_tex_and_every_page_numbered_and_none_blank(pdfs, page_texts, images, lang):
    reader = pdfs[lang]
    with_images = set(images[lang])
    for index, page in enumerate(page_texts[lang]):
        # PDF text cannot tell code from prose, and code has its own backslashes (sed's "\\("), so
        # look for display-math fences and the TeX commands the book's formulas use most.
        raw = RAW_TEX.search(page.text)
        assert raw is None, f"page {index + 1}: raw TeX {raw.group(0)!r}"
        if index:
            assert label(reader, index) in page.footer, f"page {index + 1}: footer {page.footer}, not its number"
        # a page lost or left blank at a part boundary has nothing but its running header and number
        # (counted by position: a line of Chinese is one "word" to pdftotext)
        blank = not page.body and index + 1 not in with_images
        assert not blank, f"page {index + 1} is blank: {page.text!r}"


@pytest.mark.parametrize("lang", LANGS)
def test_each_part_starts_a_page_after_the_last_page_of_the_one_before(pdfs, page_texts, lang):
    reader = pdfs[lang]
    starts = [index for depth, _, index in outline_entries(reader) if depth == 0]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert starts[0] == front_pages(reader), "the first part is not page 1"
    pages = page_texts[lang]
    for index in starts[1:]:  # the page before a part boundary ends a chapter; the part starts on top
        assert len(pages[index - 1].text.split()) > len(pages[index - 1].footer)


# Issue 31's budget: each PDF at most 8 MB (it was 14.5 MB in English, 18.1 MB in Chinese, mostly
# a subset of each font per part and an outline per glyph of math).
PDF_BUDGET_BYTES = 8_000_000


@pytest.mark.parametrize("lang", LANGS)
def test_each_pdf_is_within_its_size_budget(built_book, lang):
    size = (built_book / "pdf" / PDF_NAME.format(lang=lang)).stat().st_size
    assert size <= PDF_BUDGET_BYTES, f"{size / 1e6:.1f} MB, over the {PDF_BUDGET_BYTES / 1e6:.0f} MB budget"


def _font_programs(resources, found: dict) -> None:
    """font name (without its subset tag) -> the ids of its embedded programs, from ``resources``
    and the forms in it (the page numbers are a form laid over each page)."""
    resources = _resolve(resources) or {}
    for font in (_resolve(resources.get("/Font")) or {}).values():
        font = _resolve(font)
        for descendant in font.get("/DescendantFonts", []):
            descriptor = _resolve(_resolve(descendant)["/FontDescriptor"])
            for key in ("/FontFile", "/FontFile2", "/FontFile3"):
                if key in descriptor:
                    name = str(descriptor["/FontName"]).split("+")[-1]
                    found.setdefault(name, set()).add(descriptor.raw_get(key).idnum)
    for xobject in (_resolve(resources.get("/XObject")) or {}).values():
        xobject = _resolve(xobject)
        if xobject.get("/Subtype") == "/Form" and "/Resources" in xobject:
            _font_programs(xobject["/Resources"], found)


@pytest.mark.parametrize("lang", LANGS)
def test_each_font_is_embedded_once(pdfs, lang):
    """The parts are rendered apart, each with its own subset of each font; the assembly embeds
    one subset per font for the whole book (the same glyph ids), which every part's text uses."""
    found = {}
    for page in pdfs[lang].pages:
        _font_programs(page.get("/Resources"), found)
    assert "Noto-Sans-CJK-SC" in found
    copies = {name: len(ids) for name, ids in found.items() if len(ids) > 1}
    assert not copies, f"fonts embedded more than once: {copies}"


@pytest.mark.parametrize("lang", LANGS)
def test_math_is_text_in_the_math_font(page_texts, lang):
    """Math prints its glyphs as text (tools/math_markup.py), which a reader can search and copy:
    the mathematical italic letters of the book's formulas are in the PDF's text."""
    italic = sum(0x1D400 <= ord(c) <= 0x1D7FF for page in page_texts[lang] for c in page.text)
    assert italic > 1000, f"only {italic} mathematical italic letters in the text: is math drawn as outlines?"


def _mul(m, n):
    """The product of two PDF matrices (a b c d e f)."""
    a, b, c, d, e, f = m
    return (a * n[0] + b * n[2], a * n[1] + b * n[3], c * n[0] + d * n[2], c * n[1] + d * n[3],
            e * n[0] + f * n[2] + n[4], e * n[1] + f * n[3] + n[5])


def monospace_sizes(path) -> dict[float, int]:
    """Every size (points, on paper) that text in a monospace font is drawn at -> the first page
    (1-based) with it: the font size times the scale of the text and transformation matrices."""
    sizes = {}
    with pikepdf.open(path) as pdf:
        for number, page in enumerate(pdf.pages, 1):
            fonts = {str(k): str(v.get("/BaseFont", "")) for k, v in page.Resources.get("/Font", {}).items()}
            ctm, stack, tm, font, size = (1, 0, 0, 1, 0, 0), [], (1, 0, 0, 1, 0, 0), "", 0.0
            for operands, op in pikepdf.parse_content_stream(page, "q Q cm Tm Tf TJ Tj"):
                op = str(op)
                if op == "q":
                    stack.append(ctm)
                elif op == "Q":
                    ctm = stack.pop()
                elif op == "cm":
                    ctm = _mul(tuple(map(float, operands)), ctm)
                elif op == "Tm":
                    tm = tuple(map(float, operands))
                elif op == "Tf":
                    font, size = fonts.get(str(operands[0]), ""), float(operands[1])
                elif "Mono" in font:
                    a, b, c, d, _, _ = _mul(tm, ctm)
                    sizes.setdefault(round(size * abs(a * d - b * c) ** 0.5, 2), number)
    return sizes


@pytest.mark.parametrize("lang", LANGS)
def test_code_prints_at_7_5_pt_or_more(built_book, lang):
    """Listings, notebook cells and outputs at 7.5 pt, code in the text at 8 pt: Material's sizes in
    em made it 6 pt in tables and 6.5 pt in admonitions (build/pdf/print.css)."""
    sizes = monospace_sizes(built_book / "pdf" / PDF_NAME.format(lang=lang))
    assert 7.5 in sizes and 8.0 in sizes, sorted(sizes)
    small = {size: page for size, page in sizes.items() if size < 7.5}
    assert not small, f"code under 7.5 pt (size: first page): {small}"


def _first_line(text: str) -> str:
    """The first line that is not a comment, up to its first run of two spaces: pdftotext reads a
    column that spaces set apart (a trailing comment, a table's next column) in its own order."""
    line = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), "")
    return re.split(r"\s{2,}", line.strip())[0]


@pytest.mark.parametrize("lang", LANGS)
def test_notebooks_print_each_code_cell_before_its_output(page_texts, lang):
    """A notebook page prints its code cells, each followed by what it printed (the PDF used to
    print the outputs alone). Each cell's first line of code, then its output's first line, in
    notebook order."""
    text = squeezed(" ".join(page.text for page in page_texts[lang]))
    notebooks = [src for src in nav_pages() if src.endswith(".ipynb")]
    assert notebooks
    wrong = []
    for src in notebooks:
        cells = json.loads((ROOT / "book" / lang / src).read_text(encoding="utf-8"))["cells"]
        position = 0
        for cell in cells:
            if cell["cell_type"] != "code":
                continue
            code = squeezed(_first_line("".join(cell["source"])))
            outputs = [squeezed(_first_line("".join(out.get("text", "")))) for out in cell.get("outputs", [])]
            for expected in [code, *outputs[:1]]:
                if not expected:
                    continue
                found = text.find(expected, position)
                if found < 0:
                    wrong.append(f"{src}: {expected[:60]!r}")
                    break
                position = found + len(expected)
    assert not wrong, f"{len(wrong)} code cells or outputs missing or out of order, e.g. {wrong[:5]}"


def test_zh_pdf_embeds_a_simplified_chinese_font(built_book):
    listing = subprocess.run([require_tool("pdffonts"), str(built_book / "pdf" / PDF_NAME.format(lang="zh"))],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    # columns: name, type (several words), encoding, emb, sub, uni, object, generation
    embedded = [line.split()[0] for line in listing.splitlines()[2:] if line.split()[-5] == "yes"]
    assert any("CJK-SC" in name for name in embedded), f"no embedded Noto CJK SC font, found {embedded}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_plot_and_image_is_printed(images, lang):
    expected = 0
    for src in nav_pages():
        source = ROOT / "book" / lang / src
        if src.endswith(".ipynb"):
            cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
            expected += sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))
        else:
            expected += source.read_text(encoding="utf-8").count("![")
    assert len(images[lang]) == expected, \
        f"{len(images[lang])} images in the PDF, {expected} plots and images in the pages"


@pytest.mark.parametrize("lang", LANGS)
def test_no_text_starts_beyond_the_right_edge(page_texts, lang):
    # A table wider than the text column is clipped, not wrapped: its last columns are still
    # drawn, off the page, where no reader sees them.
    off_page = {number: page.off_page[:3] for number, page in enumerate(page_texts[lang], 1) if page.off_page}
    assert not off_page, f"text beyond the right edge, by page: {off_page}"


def _embedded_scripts() -> list[str]:
    return sorted({rel for _, rel in markers("embed-script")})


@pytest.mark.parametrize("lang", LANGS)
def test_appendix_says_what_each_script_does_how_to_run_it_and_where_to_get_it(pdfs, page_texts, lang):
    outline = set(outline_titles(pdfs[lang]))
    missing = [rel for rel in _embedded_scripts() if rel not in outline]
    assert not missing, f"no appendix section for {missing}"
    reader = pdfs[lang]
    appendix = [index for depth, _, index in outline_entries(reader) if depth == 0][-1]
    text = squeezed(" ".join(page.text for page in page_texts[lang][appendix:]))
    strings = ui_strings(lang)
    summaries = load_summaries(ROOT) if lang == "zh" else {}
    for rel in _embedded_scripts():
        # the docstring's first paragraph, or its Chinese translation; code spans print plain
        purpose = squeezed((summaries[rel]["zh"] if lang == "zh" else script_purpose(ROOT / rel)).replace("`", ""))
        start = text.find(squeezed(rel) + purpose)
        assert start >= 0, f"{rel}: no section with its purpose in the appendix"
        section = text[start:start + 3000]
        usage = squeezed(script_usage(ROOT / rel))[:40]
        assert usage and squeezed(strings["appendix_usage"]) + usage in section, f"{rel}: no launch line"
        assert squeezed(strings["appendix_repository"]) + squeezed(rel) in section, f"{rel}: no repository path"
        assert squeezed(strings["appendix_used_in"]) in section, f"{rel}: no chapter named"


@pytest.mark.parametrize("lang", LANGS)
def test_the_pdf_prints_no_script_listing_and_each_chapter_points_to_the_appendix(page_texts, lang):
    """The site keeps the full listings; the reading PDF prints what a script does and how to run
    it (its docstring), once per embedding chapter, and points to the appendix."""
    text = " ".join(page.text for page in page_texts[lang])
    assert 'if __name__ == "__main__":' not in text
    assert "def main(" not in text
    pointer = {"en": "Where to get it, and the chapters that use it", "zh": "获取方式及使用它的章节见附录"}[lang]
    embeds = sum(1 for _ in markers("embed-script"))
    assert squeezed(text).count(squeezed(pointer)) == embeds


@pytest.mark.parametrize("lang", LANGS)
def test_the_pdf_prints_each_calculators_worked_example(page_texts, lang):
    """The calculator pages print, in the PDF, the report their script gives for the worked
    example (tools/calculators.py runs it as a reader would)."""
    text = "".join(squeezed(page.text) for page in page_texts[lang])
    for name in calculators.names():
        spec = calculators.load(name)
        stdout = calculators.run_cli(spec["script"], spec["example"])["stdout"]
        # the report's first lines (a page break can put the page's footer inside the later ones)
        for line in stdout.splitlines()[:3]:
            assert squeezed(line) in text, f"{name}: {line!r} is not in the {lang} PDF"
