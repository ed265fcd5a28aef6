"""The PDFs: cover, contents with page numbers, outline, math, CJK font, images, internal links."""

import html
import json
import re
import subprocess
from dataclasses import dataclass

import pytest
from pypdf import PdfReader
from pypdf.generic import IndirectObject

from tests.build.book import LANGS, PDF_NAME, RAW_TEX, ROOT, built_page, markers, nav_pages, page_soup
from tests.conftest import require_tool
from tools import calculators


@pytest.fixture(scope="module")
def pdfs(built_site):
    readers = {}
    for lang in LANGS:
        path = built_site / "pdf" / PDF_NAME.format(lang=lang)
        assert path.is_file(), f"missing {path.name}"
        readers[lang] = PdfReader(str(path))
    return readers


@dataclass
class PageText:
    text: str                 # the page's words, in reading order, separated by spaces
    off_page: list[str]       # words that start beyond the page's right edge


_PAGE = re.compile(r'<page width="([\d.]+)"[^>]*>(.*?)</page>', re.S)
_WORD = re.compile(r'<word xMin="([\d.-]+)"[^>]*>(.*?)</word>')


@pytest.fixture(scope="module")
def page_texts(built_site) -> dict[str, list[PageText]]:
    """Every page's words with their positions, read once per language with poppler's pdftotext
    (a few seconds for 250 pages; pypdf takes about 20 s a pass)."""
    pdftotext = require_tool("pdftotext")
    result = {}
    for lang in LANGS:
        path = built_site / "pdf" / PDF_NAME.format(lang=lang)
        xhtml = subprocess.run([pdftotext, "-bbox", str(path), "-"], capture_output=True, text=True,
                               check=True, timeout=120).stdout
        pages = []
        for width, body in _PAGE.findall(xhtml):
            words = [(float(x), html.unescape(word)) for x, word in _WORD.findall(body)]
            pages.append(PageText(" ".join(w for _, w in words),
                                  [w[:30] for x, w in words if x > float(width)]))
        result[lang] = pages
    return result


def _resolve(obj):
    return obj.get_object() if isinstance(obj, IndirectObject) else obj


def outline_titles(reader) -> list[str]:
    titles = []

    def walk(items):
        for item in items:
            if isinstance(item, list):
                walk(item)
            else:
                titles.append(item.title)

    walk(reader.outline)
    return titles


def _unnumbered(title: str) -> str:
    # mkdocs-to-pdf numbers chapters ("2.1 Network"); the pages' own headings are unnumbered
    return re.sub(r"^\d+(\.\d+)*\.?\s+", "", title).strip()


def _headings(built_site, lang, level):
    for src in nav_pages():
        page = page_soup(built_page(built_site, lang, src).resolve())
        article = page.select_one("article")
        for h in article.find_all(level):
            if h.find_parent(class_="jp-Notebook") is not None and level != "h1":
                continue  # notebook headings below the title are not in the outline
            text = h.get_text(" ", strip=True).rstrip("¶").strip()
            yield src, text


@pytest.mark.parametrize("lang", LANGS)
def test_outline_has_every_chapter_and_section(pdfs, built_site, lang):
    outline = {_unnumbered(t) for t in outline_titles(pdfs[lang])}
    missing = [
        f"{src}: {text}"
        for level in ("h1", "h2")
        for src, text in _headings(built_site, lang, level)
        if text not in outline
    ]
    assert not missing, "not in the PDF outline:\n" + "\n".join(missing)


@pytest.mark.parametrize("lang", LANGS)
def test_cover_and_contents(pdfs, lang):
    reader = pdfs[lang]
    cover = reader.pages[0].extract_text()
    title = {"en": "The ML Engineering Open Book", "zh": "机器学习工程开放书"}[lang]
    assert title in cover.replace("\n", " ")
    assert re.search(r"\d{4}-\d{2}-\d{2}", cover), "no build date on the cover"
    contents = reader.pages[1].extract_text()
    total = len(reader.pages)
    page_numbers = [int(n) for n in re.findall(r"(?m)^(\d{1,3})\b|\b(\d{1,3})\s*$", contents) for n in n if n]
    assert len([n for n in page_numbers if 2 < n <= total]) >= 5, f"contents without page numbers:\n{contents}"
    assert "¶" not in contents, "heading permalinks leaked into the contents"


@pytest.mark.parametrize("lang", LANGS)
def test_page_count_is_sane(pdfs, lang):
    pages = len(pdfs[lang].pages)
    # The upper bound catches a runaway layout (a table or listing repeated page after page); the
    # book grows by about 70 pages per part with its script listings (421 en, 404 zh at the
    # Inference part).
    assert len(nav_pages()) + 2 <= pages <= 600


@pytest.mark.parametrize("lang", LANGS)
def test_no_raw_tex_and_footer_page_numbers(page_texts, lang):
    pages = page_texts[lang]
    total = len(pages)
    for number, page in enumerate(pages, 1):
        # PDF text cannot tell code from prose, and code has its own backslashes (sed's "\\("), so
        # look for display-math fences and the TeX commands the book's formulas use most.
        raw = RAW_TEX.search(page.text)
        assert raw is None, f"page {number}: raw TeX {raw.group(0)!r}"
        if number > 1:
            assert f"{number}/{total}" in page.text.replace(" ", ""), f"page {number}: no page number in the footer"


def test_zh_pdf_embeds_a_simplified_chinese_font(built_site):
    listing = subprocess.run([require_tool("pdffonts"), str(built_site / "pdf" / PDF_NAME.format(lang="zh"))],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    # columns: name, type (several words), encoding, emb, sub, uni, object, generation
    embedded = [line.split()[0] for line in listing.splitlines()[2:] if line.split()[-5] == "yes"]
    assert any("CJK-SC" in name for name in embedded), f"no embedded Noto CJK SC font, found {embedded}"


@pytest.mark.parametrize("lang", LANGS)
def test_every_plot_and_image_is_printed(built_site, lang):
    expected = 0
    for src in nav_pages():
        source = ROOT / "book" / lang / src
        if src.endswith(".ipynb"):
            cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
            expected += sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))
        else:
            expected += source.read_text(encoding="utf-8").count("![")
    listing = subprocess.run([require_tool("pdfimages"), "-list", str(built_site / "pdf" / PDF_NAME.format(lang=lang))],
                             capture_output=True, text=True, check=True, timeout=120).stdout
    # one row per image drawn; a PNG with transparency adds an "smask" row for its alpha channel
    printed = sum(line.split()[2] == "image" for line in listing.splitlines()[2:])
    assert printed == expected, f"{printed} images in the PDF, {expected} plots and images in the pages"


@pytest.mark.parametrize("lang", LANGS)
def test_internal_links_resolve(pdfs, lang):
    reader = pdfs[lang]
    named = reader.named_destinations
    internal = 0
    for number, page in enumerate(reader.pages, 1):
        for annot in page.get("/Annots", []) or []:
            annot = _resolve(annot)
            if annot.get("/Subtype") != "/Link":
                continue
            dest = annot.get("/Dest")
            action = _resolve(annot.get("/A"))
            if dest is None and action is not None and action.get("/S") == "/GoTo":
                dest = action.get("/D")
            if dest is None:
                continue
            internal += 1
            if isinstance(dest, str) or hasattr(dest, "original_bytes"):
                assert str(dest) in named, f"page {number}: link to unknown destination {dest}"
    assert internal > 0, "no internal link at all (the contents page should link its entries)"


@pytest.mark.parametrize("lang", LANGS)
def test_no_text_starts_beyond_the_right_edge(page_texts, lang):
    # A table wider than the text column is clipped, not wrapped: its last columns are still
    # drawn, off the page, where no reader sees them.
    off_page = {number: page.off_page[:3] for number, page in enumerate(page_texts[lang], 1) if page.off_page}
    assert not off_page, f"text beyond the right edge, by page: {off_page}"


def _embedded_scripts() -> list[str]:
    return sorted({rel for _, rel in markers("embed-script")})


@pytest.mark.parametrize("lang", LANGS)
def test_appendix_lists_every_embedded_script(pdfs, lang):
    outline = {_unnumbered(t) for t in outline_titles(pdfs[lang])}
    missing = [rel for rel in _embedded_scripts() if rel not in outline]
    assert not missing, f"no appendix section for {missing}"


@pytest.mark.parametrize("lang", LANGS)
def test_scripts_are_listed_once_in_the_appendix_not_in_the_chapters(page_texts, lang):
    # Each Python script ends with its `if __name__ == "__main__":` guard, which its docstring
    # (what a chapter prints) never contains: the guard appears once per script, in the appendix.
    python = [rel for rel in _embedded_scripts() if rel.endswith(".py")]
    guards = sum((ROOT / rel).read_text(encoding="utf-8").count('if __name__ == "__main__":') for rel in python)
    printed = sum(page.text.count('if __name__ == "__main__":') for page in page_texts[lang])
    assert printed == guards, f"{printed} main guards printed, {guards} in the {len(python)} scripts"
    chapters = [page for page in page_texts[lang] if "Full listing in the appendix" in page.text or "完整代码见附录" in page.text]
    assert chapters, "no chapter refers to the appendix"


@pytest.mark.parametrize("lang", LANGS)
def test_contract_block_is_printed_once_and_elided_in_the_listings(page_texts, lang):
    """Every Python script carries the same contract block; the appendix prints it once, first,
    and each listing shows one comment line in its place (23 copies were about 50 pages)."""
    python = [rel for rel in _embedded_scripts() if rel.endswith(".py")]
    text = "\n".join(page.text for page in page_texts[lang])
    assert text.count("end of script contract") == 1
    assert text.count("def write_atomic(") == 1
    elided = "the script contract block: see the start" if lang == "en" else "脚本约定代码块：见本附录开头"
    assert text.count(elided) == len(python)


@pytest.mark.parametrize("lang", LANGS)
def test_the_pdf_prints_each_calculators_worked_example(page_texts, lang):
    """The calculator pages print, in the PDF, the report their script gives for the worked
    example (tools/calculators.py runs it as a reader would)."""
    squeezed = "".join("".join(page.text.split()) for page in page_texts[lang])  # the PDF wraps long lines
    for name in calculators.names():
        spec = calculators.load(name)
        stdout = calculators.run_cli(spec["script"], spec["example"])["stdout"]
        # the report's first lines (a page break can put the page's footer inside the later ones)
        for line in stdout.splitlines()[:3]:
            assert "".join(line.split()) in squeezed, f"{name}: {line!r} is not in the {lang} PDF"
