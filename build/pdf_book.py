"""The PDFs of the book, one per language, made from the built site in parts.

    python build/pdf_book.py [--site-dir site] [--cache-dir .cache/pdf] [--jobs N] [--lang en]

Each top-level part of the nav (Compute, Network, ...) becomes its own WeasyPrint document: the
articles of its pages, their ids prefixed by the page so that they stay unique, every link between
pages turned into ``book:ANCHOR``. A part is rendered only when its HTML changed: the PDF and what
the assembly needs (page count, where each anchor landed, render time, peak memory) are cached under
``--cache-dir`` by a hash of that HTML, the print stylesheets and the renderer's version. Missing parts
render in parallel, ``--jobs`` at a time (default: the number of cores), each in a fresh process.

Parts and chapters are numbered from the nav (:func:`numbered`), in the printed headings, the
contents and the outline alike.

Then, per language: the front matter (cover and contents, with the page numbers the parts gave) is
rendered, and pikepdf assembles cover, contents and parts into one file, stamps one continuous page
numbering on it (roman numerals in the front matter, arabic from the first part, also as PDF page
labels), turns each ``book:`` link into a link to the page and height of its anchor, and writes the
outline: part, chapter, section. Each part embeds its own subset of every font it uses; the
assembly replaces them with one subset per font for the whole book (:func:`share_fonts`).

The guard against pages WeasyPrint drops: every chapter ends with an anchor, and every heading and
link target must have landed on a page; otherwise the build fails naming the part and the anchor.

Exit status: 0 built, 1 a part failed to render or an anchor is missing, 2 bad arguments.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import html
import json
import multiprocessing
import os
import posixpath
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from bs4 import BeautifulSoup

from tools.book import nav_sources, script_anchor, script_summary
from tools.math_markup import PRINT_FAMILY, print_font, tex_to_svg

ROOT = Path(__file__).resolve().parents[1]
PRINT_CSS = ROOT / "build" / "pdf" / "print.css"
PNG_CACHE = ROOT / ".cache" / "print-png"  # the notebooks' plots in 256 colours, by content (_print_png)
LANGS = ("en", "zh")
LINK = "book:"         # a link between pages, until the assembly knows the page of its anchor
PIPELINE = "4"         # part of every cache key: change it when this file changes what it renders
PX_TO_PT = 0.75        # WeasyPrint reports positions in CSS px (1/96 in); PDF uses points (1/72 in)


class PdfError(Exception):
    """A part that failed to render, or an anchor that no page holds."""


# ---------------------------------------------------------------------------------------------
# The book's structure, from mkdocs.yml

@dataclass
class Part:
    slug: str
    title: str
    pages: list[str]                  # source paths relative to book/<lang>/, in nav order
    number: str = ""                  # "" for the home page and the appendix (numbered)

    @property
    def own_page(self) -> bool:
        """Whether the part's first page is the part's own page, as the site shows it
        (navigation.indexes: a section's index page is the section): its only page, or an
        index page. Its title is the part's title; the other pages are the part's chapters."""
        return len(self.pages) == 1 or posixpath.basename(self.pages[0]) in ("index.md", "README.md")

    def numbers(self) -> dict[str, str]:
        """The number printed before each page's title: the part's own page carries the part's
        number, the chapters are numbered within the part (2, then 2.1, 2.2, ...)."""
        if not self.number:
            return {}
        chapters = self.pages[1:] if self.own_page else self.pages
        own = {self.pages[0]: self.number} if self.own_page else {}
        return own | {src: f"{self.number}.{n}" for n, src in enumerate(chapters, 1)}


@dataclass
class Book:
    lang: str
    title: str
    strings: dict
    site_url: str | None
    parts: list[Part]
    repo_url: str | None = None       # the repository's address (mkdocs.yml extra.repository)
    version: str | None = None        # a release's version (BOOK_VERSION, set by tools/release.py)

    def edition(self, date: str) -> str:
        """The cover's line under the title: the release's version and date, or the date of a
        development edition."""
        if self.version:
            return self.strings["pdf_version"].format(version=self.version, date=date)
        return self.strings["pdf_built_on"].format(date=date)


def load_books(langs=LANGS) -> list[Book]:
    """The parts of each language, from mkdocs.yml's nav and its i18n settings (titles translated
    with ``nav_translations``, interface strings from ``extra.strings``)."""
    from mkdocs.config import load_config  # imports the plugins: only when a build needs it

    config = load_config(str(ROOT / "mkdocs.yml"))
    i18n = config.plugins["i18n"].config
    books = []
    for language in i18n.languages:
        if language.locale not in langs:
            continue
        names = language.nav_translations or {}
        parts = []
        for item in config["nav"]:
            (title, value), = item.items() if isinstance(item, dict) else (("", item),)
            pages = nav_sources(value if isinstance(value, list) else [value])
            slug = re.sub(r"[^a-z0-9]+", "-", (title or pages[0]).lower()).strip("-")
            parts.append(Part(slug, names.get(title, title), pages))
        numbered(parts)
        strings = language.extra["strings"]
        books.append(Book(language.locale, strings["pdf_title"], strings, config.site_url, parts,
                          config.extra.get("repository"), os.environ.get("BOOK_VERSION") or None))
    return books


UNNUMBERED = ("appendix",)  # parts, by slug, printed without a number (besides the home page)


def numbered(parts: list[Part]) -> None:
    """Number the parts 1, 2, ... in nav order. The home page (the book's own page: what the book
    is, how to read it) and the appendix are not numbered; the site shows no numbers, and its nav
    is what they follow: the chapters are the pages of a part after the part's own page."""
    count = 0
    for part in parts:
        if part.pages != ["index.md"] and part.slug not in UNNUMBERED:
            count += 1
            part.number = str(count)


def page_url(src: str) -> str:
    """The site URL of a page, relative to its language's root (``use_directory_urls``)."""
    stem = posixpath.splitext(src)[0]
    stem = posixpath.dirname(stem) if posixpath.basename(stem) in ("index", "README") else stem
    return f"{stem}/" if stem else ""


def page_key(src: str) -> str:
    return page_url(src).strip("/").replace("/", "-") or "home"


# ---------------------------------------------------------------------------------------------
# One part as print HTML

@dataclass
class Heading:
    level: int                 # 1 chapter, 2 section
    text: str
    anchor: str


@dataclass
class PartDoc:
    lang: str
    part: Part
    html: str = ""
    headings: list[Heading] = field(default_factory=list)
    links: set[str] = field(default_factory=set)        # anchors its book: links point at
    anchors: list[str] = field(default_factory=list)    # anchors that must land on a page


def part_html(book: Book, part: Part, site_dir: Path, math_font: Path, math_svg: bool = True) -> PartDoc:
    """The print HTML of one part: each page's article, its ids prefixed with the page's key, its
    links between pages as ``book:KEY--ID`` and its images as file URLs. ``math_font`` is the
    font the math's glyphs are text in (tools/math_markup.py print_font). ``math_svg=False``
    keeps the site's MathML (the EPUB, build/epub_book.py)."""
    urls = {page_url(src): page_key(src) for p in book.parts for src in p.pages}
    prefix = "" if book.lang == "en" else f"{book.lang}/"
    doc = PartDoc(book.lang, part)
    styles: dict[str, None] = {}
    body = []
    numbers = part.numbers()
    for src in part.pages:
        key = page_key(src)
        path = site_dir / prefix / page_url(src) / "index.html"
        text = path.read_text(encoding="utf-8")
        start, end = text.find('<article class="md-content__inner'), text.rfind("</article>")
        if start < 0 or end < start:
            raise PdfError(f"{path}: no article (is it a page that mkdocs built?)")
        soup = BeautifulSoup(text[start:end + len("</article>")], "html.parser")  # the nav is half a page
        article = soup.article
        for style in article.find_all("style"):
            styles[style.string or ""] = None
            style.decompose()
        for dated in article.find_all("aside", class_="md-source-file"):
            # a page's "last update" (git): the cover gives the edition's date, and a part whose
            # text did not change keeps its cached rendering
            dated.decompose()
        _print_version(article, book, src, math_svg)
        if src in numbers and article.h1:
            number = soup.new_tag("span", attrs={"class": "heading-number"})
            number.string = numbers[src]
            article.h1.insert(0, " ")
            article.h1.insert(0, number)
        for tag in article.find_all(id=True):
            tag["id"] = f"{key}--{tag['id']}"
        for tag in article.find_all(href=True):
            _relink(tag, f"{prefix}{page_url(src)}", key, urls, prefix, book.site_url, doc.links)
        for img in article.find_all("img", src=True):
            if img["src"].startswith(_PNG_URI):
                img["src"] = _print_png(img["src"])
            elif not img["src"].startswith("data:"):
                img["src"] = (path.parent / unquote(urlsplit(img["src"]).path)).resolve().as_uri()
        for h in article.find_all(["h1", "h2"]):
            if h.get("id"):
                doc.headings.append(Heading(int(h.name[1]), h.get_text(" ", strip=True), h["id"]))
        article.attrs = {"class": ["md-typeset", "chapter"], "id": key, "lang": book.lang}
        # the guard: an anchor at the very end of the chapter, which must land on a page
        article.append(soup.new_tag("div", id=f"{key}--end", attrs={"class": "end-of-chapter"}))
        doc.anchors += [key, f"{key}--end"] + [h.anchor for h in doc.headings if h.anchor.startswith(key + "--")]
        body.append(str(article))
    css = _stylesheets(site_dir)
    # the font file's name holds its hash, so a new font renders the parts again (cache_key)
    styles[f'@font-face {{ font-family: "{PRINT_FAMILY}"; src: url("{math_font.resolve().as_uri()}") }}'] = None
    head = "".join(f"<style>{text}</style>" for text in styles)
    doc.html = (f'<!DOCTYPE html><html lang="{book.lang}"><head><meta charset="utf-8">'
                f"<title>{html.escape(part.title)}</title>{css}{head}</head>"
                f'<body class="part part-{part.slug}">{"".join(body)}</body></html>')
    return doc


_PNG_URI = "data:image/png;base64,"


def _print_png(uri: str) -> str:
    """A PNG data: URI (a notebook's plot) in 256 colours where that is smaller, as the PDF and
    the EPUB print it. Plots have few colours: the 54 of each language took 3.0 MB as the
    notebooks save them and 0.8 MB quantized, with no difference to see (Pillow's fast octree,
    which keeps the alpha channel). The result is kept under PNG_CACHE by the input's hash, so an
    unchanged book does not quantize again."""
    import base64

    raw = base64.b64decode(uri[len(_PNG_URI):])
    cached = PNG_CACHE / f"{hashlib.sha256(raw).hexdigest()[:32]}.png"
    if not cached.is_file():
        import io

        from PIL import Image

        with Image.open(io.BytesIO(raw)) as image:
            quantized = image.convert("RGBA").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        out = io.BytesIO()
        quantized.save(out, "PNG", optimize=True)
        PNG_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(min(out.getvalue(), raw, key=len))
        tmp.replace(cached)
    return _PNG_URI + base64.b64encode(cached.read_bytes()).decode("ascii")


def _stylesheets(site_dir: Path) -> str:
    """Material's stylesheet (what the pages are written for), the book's, then the print rules."""
    sheets = sorted((site_dir / "assets" / "stylesheets").glob("main.*.min.css"))
    sheets += [site_dir / "assets" / "book.css", PRINT_CSS]
    return "".join(f'<link rel="stylesheet" href="{p.resolve().as_uri()}">' for p in sheets if p.is_file())


def _print_version(article, book: Book, src: str, math_svg: bool = True) -> None:
    """What the site shows for the screen and the PDF (and the EPUB) prints otherwise."""
    for tag in article.select("a.headerlink, a.anchor-link, script, noscript, p.notebook-download, .md-source-file, "
                              "clipboard-copy, .clipboard-copy-txt, details.calculator-json-block"):
        tag.decompose()
    # An embedded script: the chapter prints what the script says it does and how to run it; the
    # appendix says where to get it (the site keeps the full listing).
    for download in article.select("p.script-download"):
        rel = download.code.get_text() if download.code else ""
        listing = download.find_next_sibling()
        if listing is not None and listing.name == "details":
            listing.decompose()
        box = BeautifulSoup(
            f'<div class="script-print"><p><strong><code>{html.escape(rel)}</code></strong></p>'
            f"<pre><code>{html.escape(script_summary(ROOT / rel))}</code></pre>"
            f'<p>{html.escape(book.strings["script_in_appendix"])} '
            f'<a href="{"../" * page_url(src).count("/")}appendix/scripts/#{script_anchor(rel)}">'
            f"<code>{html.escape(rel)}</code></a></p></div>", "html.parser")
        download.replace_with(box)
    # The site's MathML, as the SVG that ziamath draws from the same TeX: WeasyPrint draws no MathML.
    for math in article.select("math[data-tex]") if math_svg else ():
        svg = tex_to_svg(math["data-tex"], math.get("display") == "block")
        math.replace_with(BeautifulSoup(svg, "html.parser"))
    for status in article.select("div.calculator p.calculator-status"):
        status.string = book.strings["calculator_pdf"]
    for calculator in article.select("div.calculator"):
        calculator.attrs.pop("data-spec", None)


def _relink(tag, url: str, key: str, urls: dict, prefix: str, site_url: str | None, links: set) -> None:
    href = tag["href"]
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return  # another site
    target = urlsplit(urljoin(f"http://book.invalid/{url}", href))
    path = target.path.lstrip("/")
    if path.endswith("index.html"):
        path = path[: -len("index.html")]
    fragment = unquote(target.fragment)
    page = urls.get(path[len(prefix):]) if path.startswith(prefix) else None
    if href.startswith("#"):
        page = key
    if page is not None:
        anchor = f"{page}--{fragment}" if fragment else page
        tag["href"] = LINK + anchor
        links.add(anchor)
    elif site_url:  # a file of the site (a script, a data file): its address, printed after the text
        tag["href"] = urljoin(site_url, path)
        tag["class"] = [*tag.get("class", []), "site-file"]
    else:
        tag.unwrap()  # no address to point at: keep the text


# ---------------------------------------------------------------------------------------------
# Rendering, cached by content

FILE_URI = re.compile(r"file://[^\"')\s]+")  # a stylesheet, image or font the print HTML reads


def cache_key(text: str) -> str:
    """A hash of what renders ``text``: the HTML with each file URI replaced by a hash of the
    file's bytes (so that the same part built in site/ by `make book` and in dist/site/ by `make
    release`, or in another clone, has the same key), this pipeline and WeasyPrint's version."""
    import weasyprint

    hashes: dict[str, str] = {}

    def content(uri: re.Match) -> str:
        if uri.group() not in hashes:
            path = Path(unquote(urlsplit(uri.group()).path))
            hashes[uri.group()] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        return hashes[uri.group()]

    digest = hashlib.sha256(f"{PIPELINE}\0{weasyprint.__version__}\0".encode())
    digest.update(FILE_URI.sub(content, text).encode())
    return digest.hexdigest()[:20]


def render(html_path: str, pdf_path: str) -> dict:
    """Render one HTML file to ``pdf_path`` (atomically) and return what the assembly needs: the
    page count, each anchor's page and height (points from the bottom), seconds, peak RSS (MB).
    Runs in a fresh worker process."""
    import logging
    import resource

    from weasyprint import HTML

    logging.getLogger("weasyprint").setLevel(logging.ERROR)
    start = time.perf_counter()
    document = HTML(filename=html_path).render()
    anchors = {}
    for number, page in enumerate(document.pages):
        for name, box in page.anchors.items():
            anchors.setdefault(name, (number, round((page.height - box[1]) * PX_TO_PT, 2)))
    tmp = pdf_path + ".tmp"
    document.write_pdf(tmp)
    os.replace(tmp, pdf_path)
    return {"pages": len(document.pages), "anchors": anchors, "seconds": round(time.perf_counter() - start, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


@dataclass
class Rendered:
    name: str
    pdf: Path
    meta: dict
    cached: bool


def render_all(docs: dict[str, str], cache_dir: Path, jobs: int) -> dict[str, Rendered]:
    """Render every ``name -> html`` not already in the cache, ``jobs`` at a time, largest first."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    found, todo = {}, {}
    for name, text in docs.items():
        stem = cache_dir / f"{name}-{cache_key(text)}"
        meta = stem.with_suffix(".json")
        if meta.is_file() and stem.with_suffix(".pdf").is_file():
            os.utime(meta)
            found[name] = Rendered(name, stem.with_suffix(".pdf"), json.loads(meta.read_text()), True)
        else:
            stem.with_suffix(".html").write_text(text, encoding="utf-8")
            todo[name] = stem
    if todo:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, max_tasks_per_child=1) as pool:
            futures = {pool.submit(render, str(stem.with_suffix(".html")), str(stem.with_suffix(".pdf"))): name
                       for name, stem in sorted(todo.items(), key=lambda kv: -len(docs[kv[0]]))}
            for future in concurrent.futures.as_completed(futures):
                name = futures[future]
                try:
                    meta = future.result()
                except Exception as err:  # any renderer failure names its part
                    raise PdfError(f"{name}: WeasyPrint failed: {type(err).__name__}: {err}") from err
                stem = todo[name]
                stem.with_suffix(".json").write_text(json.dumps(meta), encoding="utf-8")
                stem.with_suffix(".html").unlink()
                print(f"pdf_book.py: rendered {name}: {meta['pages']} pages in {meta['seconds']} s, "
                      f"peak {meta['peak_rss_mb']} MB", flush=True)
                found[name] = Rendered(name, stem.with_suffix(".pdf"), meta, False)
    _prune(cache_dir, {r.pdf.stem for r in found.values()}, docs)
    return found


def _prune(cache_dir: Path, kept: set[str], docs: dict) -> None:
    """Drop the cached versions of these documents that this build did not use."""
    for path in cache_dir.iterdir():
        name = path.stem.rsplit("-", 1)[0]
        if name in docs and path.stem not in kept:
            path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Front matter, page numbers, assembly

def content_date() -> str:
    """The date of the newest commit that changed the book's content (today outside git): the
    same sources give the same cover, so an unchanged book renders nothing."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", "book", "data", "notebooks",
                              "results", "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and re.fullmatch(r"\d{4}-\d{2}-\d{2}", out.stdout.strip()):
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return datetime.date.today().isoformat()


@dataclass
class Entry:
    level: int            # in the outline: 0 part, 1 chapter (or a section of the part's own page), 2 section
    title: str
    anchor: str
    section: bool = False  # a section: the contents indent it as one, whatever its level


def contents(book: Book, docs: dict[str, PartDoc]) -> list[Entry]:
    """Parts, chapters and sections in reading order. A part's own page (its index page, or its
    only page) is the part, under its numbered title (the home page's is the book's), with that
    page's sections directly under it; its other pages are its numbered chapters."""
    entries = []
    for part in book.parts:
        doc = docs[part.slug]
        first = page_key(part.pages[0])
        own = [h for h in doc.headings if h.anchor.startswith(first + "--")] if part.own_page else []
        title = own[0].text if own and own[0].level == 1 else part.title
        entries.append(Entry(0, title, first))
        entries += [Entry(1, h.text, h.anchor, section=True) for h in own if h.level == 2]
        entries += [Entry(h.level, h.text, h.anchor, section=h.level == 2) for h in doc.headings if h not in own]
    return entries


def front_html(book: Book, entries: list[Entry], numbers: dict[str, int], site_dir: Path) -> str:
    """The cover; on its back the repository's and the website's addresses (each when configured)
    and the licences; then the contents."""
    date = content_date()
    rows = "".join(
        f'<p class="toc-{2 if e.section else e.level}"><a href="{LINK}{html.escape(e.anchor)}">'
        f'{html.escape(e.title)}</a><span class="toc-page">{numbers[e.anchor]}</span></p>' for e in entries)
    addresses = "".join(
        f'<p class="{kind}">{html.escape(book.strings[label])} <a href="{html.escape(url)}">{html.escape(url)}</a></p>'
        for kind, label, url in (("verso-repository", "pdf_repository", book.repo_url),
                                 ("verso-site", "pdf_website", book.site_url)) if url)
    return (f'<!DOCTYPE html><html lang="{book.lang}"><head><meta charset="utf-8"><title>{html.escape(book.title)}'
            f"</title>{_stylesheets(site_dir)}</head><body class=\"front\">"
            f'<section class="cover"><h1 class="cover-title">{html.escape(book.title)}</h1>'
            f'<p class="cover-date">{html.escape(book.edition(date))}</p></section>'
            f'<section class="verso">{addresses}<p class="verso-license">Text CC BY-SA 4.0 · Code MIT</p></section>'
            f'<section class="toc"><h1 id="contents">{html.escape(book.strings["pdf_contents"])}</h1>{rows}</section>'
            "</body></html>")


def roman(n: int) -> str:
    out = ""
    for value, letters in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
                           (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
        count, n = divmod(n, value)
        out += letters * count
    return out


def page_labels(front_pages: int, body_pages: int) -> list[str]:
    """The number printed on each page: none on the cover, roman in the rest of the front matter,
    arabic from the first part (the same as the PDF's page labels)."""
    return [""] + [roman(n) for n in range(2, front_pages + 1)] + [str(n) for n in range(1, body_pages + 1)]


def numbers_html(labels: list[str]) -> str:
    """One empty page per page of the book with only its number, laid over the book's pages by the
    assembly (so a part's own PDF does not depend on where the part starts)."""
    pages = "".join(f"<div><span>{label}</span></div>" for label in labels)
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>@page { size: A4; margin: 0 }"
            "body { margin: 0 } div { height: 296mm; position: relative; break-after: page }"
            "span { position: absolute; bottom: 12mm; left: 0; right: 0; text-align: center;"
            " font: 8pt 'DejaVu Sans', sans-serif; color: #555 }</style></head>"
            f"<body>{pages}</body></html>")


# ---------------------------------------------------------------------------------------------
# One subset of each font for the whole book

_FONT_FILES = ("/FontFile2", "/FontFile3")  # TrueType; OpenType (CFF)
# What a PDF viewer does not read: the text is already shaped, and hinting is dropped.
_DROPPED_TABLES = ["BASE", "DSIG", "EBDT", "EBLC", "EBSC", "GDEF", "GPOS", "GSUB", "JSTF", "LTSH", "MATH",
                   "PCLT", "SVG ", "FFTM"]


@dataclass
class FontSources:
    """Where the fonts the parts embed come from, and where their book-wide subsets are kept."""
    cache_dir: Path
    known: dict[str, Path]                                   # PostScript name -> file, for fonts not installed
    used: set[Path] = field(default_factory=set)             # the subsets this build used (the rest is pruned)

    def find(self, name: str) -> list[tuple[Path, int]]:
        """The files (and the index in a collection) of the font whose PostScript name is ``name``:
        one of ours, else what fontconfig has installed."""
        if name in self.known:
            return [(self.known[name], 0)]
        try:
            out = subprocess.run(["fc-list", f":postscriptname={name}", "--format", "%{file}\t%{index}\n"],
                                 capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [(Path(f), int(i or 0)) for f, _, i in (line.partition("\t") for line in out.splitlines()) if f]


def share_fonts(pdf, fonts: FontSources) -> None:
    """One embedded program per font for the whole book. WeasyPrint subsets each font for the
    document it renders, so the assembled parts carried one subset of every font per part (16 of
    Noto Sans CJK SC, over 5 MB of the English PDF's 14.5 MB). Its subsets keep the font's glyph ids
    (retain-gids), so one subset of the original font with the glyphs of every part serves all the
    font dictionaries, whose widths and ToUnicode maps stay each part's own. A font whose file
    cannot be found (or is not the version embedded) keeps its subsets."""
    import io

    import pikepdf
    from fontTools.ttLib import TTFont

    groups: dict[tuple, tuple[set[int], list]] = {}
    names: dict[tuple, tuple] = {}
    for font in pdf.objects:
        if not isinstance(font, pikepdf.Dictionary) or font.get("/Type") != "/Font" or "/W" not in font:
            continue
        descriptor = font.get("/FontDescriptor")
        kind = next((k for k in _FONT_FILES if descriptor is not None and k in descriptor), None)
        if kind is None:
            continue
        program = descriptor[kind]
        if program.objgen not in names:
            table = TTFont(io.BytesIO(program.read_bytes()), lazy=True)["name"]
            names[program.objgen] = (table.getDebugName(6), table.getDebugName(5))
        gids, descriptors = groups.setdefault((kind, *names[program.objgen]), (set(), []))
        widths = list(font.W)
        for start, values in zip(widths[::2], widths[1::2], strict=True):
            gids.update(range(int(start), int(start) + len(values)))
        descriptors.append(descriptor)
    for (kind, name, version), (gids, descriptors) in groups.items():
        data = _book_subset(fonts, name, version, gids)
        if data is None:
            continue
        extra = {"Subtype": pikepdf.Name.OpenType} if kind == "/FontFile3" else {"Length1": len(data)}
        program = pdf.make_stream(data, **extra)
        for descriptor in descriptors:
            descriptor[kind] = program
            if "/CIDSet" in descriptor:  # the glyphs of one part's subset
                del descriptor["/CIDSet"]


def _book_subset(fonts: FontSources, name: str, version: str, gids: set[int]) -> bytes | None:
    """The font ``name`` subset to ``gids``, keeping the glyph ids (cached by file and glyphs)."""
    import io

    from fontTools import subset
    from fontTools.ttLib import TTFont

    for path, index in fonts.find(name):
        try:
            stat = path.stat()
            font = TTFont(path, fontNumber=index, lazy=True)
        except (OSError, ValueError):
            continue
        table = font["name"]
        if (table.getDebugName(6), table.getDebugName(5)) != (name, version) or font["maxp"].numGlyphs <= max(gids):
            continue
        key = hashlib.sha256(repr((str(path), index, stat.st_size, stat.st_mtime_ns, sorted(gids))).encode())
        cached = fonts.cache_dir / f"font-{name}-{key.hexdigest()[:20]}.bin"
        fonts.used.add(cached)
        if cached.is_file():
            return cached.read_bytes()
        options = subset.Options(retain_gids=True, desubroutinize=True, hinting=False, notdef_outline=True,
                                 ignore_missing_glyphs=True, name_IDs=["*"], name_languages=["*"])
        options.drop_tables += _DROPPED_TABLES
        subsetter = subset.Subsetter(options)
        subsetter.populate(gids=sorted(gids | {0}))
        font = TTFont(path, fontNumber=index)
        subsetter.subset(font)
        data = io.BytesIO()
        font.save(data)
        tmp = cached.with_suffix(".tmp")
        tmp.write_bytes(data.getvalue())
        tmp.replace(cached)
        return data.getvalue()
    return None


def assemble(book: Book, front: Rendered, parts: list[Rendered], numbers: Rendered, entries: list[Entry],
             anchors: dict[str, tuple[int, float]], out: Path, fonts: FontSources) -> None:
    import pikepdf
    from pikepdf import Array, Dictionary, Name, OutlineItem

    pdf = pikepdf.new()
    sources = [pikepdf.open(r.pdf) for r in [front, *parts]]
    for source in sources:
        pdf.pages.extend(source.pages)
    overlay = pikepdf.open(numbers.pdf)
    for page, stamp in zip(pdf.pages, overlay.pages, strict=True):
        page.add_overlay(stamp)
    # Links between pages go to named destinations, one per anchor linked to: a reader's viewer
    # (and the tests) can tell where each link was meant to go.
    dests = pikepdf.NameTree.new(pdf)
    for index, page in enumerate(pdf.pages):
        for annot in page.obj.get("/Annots", []):
            action = annot.get("/A")
            if action is None or action.get("/S") != "/URI" or not str(action.URI).startswith(LINK):
                continue
            name = link_anchor(str(action.URI), anchors, f"{book.lang} PDF, page {index + 1}")
            if name not in dests:
                number, top = anchors[name]
                dests[name] = Array([pdf.pages[number].obj, Name.XYZ, None, top, None])
            del annot["/A"]
            annot.Dest = pikepdf.String(name)
    pdf.Root.Names = Dictionary(Dests=dests.obj)
    share_fonts(pdf, fonts)
    with pdf.open_outline() as outline:
        stack = [outline.root]
        for entry in entries:
            number, top = anchors[entry.anchor]
            item = OutlineItem(entry.title, number, "XYZ", top=top)
            del stack[entry.level + 1:]
            stack[-1].append(item)
            stack.append(item.children)
    front_pages = front.meta["pages"]
    pdf.Root.PageLabels = Dictionary(Nums=Array([0, Dictionary(S=Name.r), front_pages, Dictionary(S=Name.D)]))
    pdf.Root.PageMode = Name.UseOutlines
    pdf.Root.Lang = book.lang
    pdf.docinfo["/Title"] = book.title
    pdf.docinfo["/Subject"] = book.edition(content_date())  # the cover's line: version and date
    if book.version:
        pdf.docinfo["/Version"] = book.version  # not a standard key: for tools that read it by name
    pdf.docinfo["/Creator"] = "build/pdf_book.py (WeasyPrint, pikepdf)"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pdf.save(tmp, object_stream_mode=pikepdf.ObjectStreamMode.generate)
    os.replace(tmp, out)
    for source in [*sources, overlay]:
        source.close()


def link_anchor(uri: str, anchors: dict, where: str) -> str:
    """The key of ``anchors`` that a link's ``book:`` URI points at. WeasyPrint writes the URI
    percent-encoded (a Chinese heading's id becomes %E9%80%89...), the anchors keep the id's own
    characters. Raises PdfError, naming ``where`` (the page) and the link, when no anchor has the
    name."""
    name = unquote(uri.removeprefix(LINK))
    if name not in anchors:
        raise PdfError(f"{where}: the link {uri!r} points at {name!r}, which no page holds")
    return name


@dataclass
class Layout:
    """Where one language's parts put every anchor: (page index from the first part, top in points)."""
    parts: list[Rendered]
    anchors: dict[str, tuple[int, float]]
    entries: list[Entry]
    body_pages: int


def lay_out(book: Book, docs: dict[str, PartDoc], rendered: dict[str, Rendered]) -> Layout:
    """The parts one after the other; fails when a part lost an anchor (WeasyPrint dropped what
    followed it) or a link points at an anchor no page holds."""
    parts = [rendered[f"{book.lang}-{p.slug}"] for p in book.parts]
    anchors, first = {}, 0
    for doc, part in zip(docs.values(), parts, strict=True):
        placed = part.meta["anchors"]
        lost = [a for a in doc.anchors if a not in placed]
        if lost:
            raise PdfError(f"{part.name}: WeasyPrint did not place {len(lost)} anchors, from {lost[0]!r} "
                           "(content after it was dropped)")
        anchors.update({name: (first + number, top) for name, (number, top) in placed.items()})
        first += part.meta["pages"]
    missing = sorted({a for d in docs.values() for a in d.links} - anchors.keys())
    if missing:
        raise PdfError(f"{book.lang}: {len(missing)} links point at anchors no page holds, e.g. {missing[:3]}")
    return Layout(parts, anchors, contents(book, docs), first)


def build(site_dir: Path, cache_dir: Path, jobs: int, langs=LANGS) -> list[dict]:
    """The PDF of each language into ``<site>/pdf/``. Every stage runs over both languages at once,
    so that the two versions of an edited chapter render side by side. Returns a summary per
    language (pages, and per part its pages, render seconds, peak RSS and whether it came from the
    cache), also written to ``<cache-dir>/last-build.json`` for tools/loop_bench.py."""
    books = load_books(langs)
    math_font = print_font(ROOT / ".cache" / "math-font")
    fonts = FontSources(cache_dir, {PRINT_FAMILY.replace(" ", ""): math_font})
    work = [(book, part, site_dir, math_font) for book in books for part in book.parts]
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        made = list(pool.map(part_html, *zip(*work, strict=True)))
    docs = {book.lang: {d.part.slug: d for d in made if d.lang == book.lang} for book in books}
    rendered = render_all({f"{d.lang}-{d.part.slug}": d.html for d in made}, cache_dir, jobs)
    layouts = {book.lang: lay_out(book, docs[book.lang], rendered) for book in books}
    fronts = render_all({f"{book.lang}-front": front_html(
        book, layouts[book.lang].entries,
        {e.anchor: layouts[book.lang].anchors[e.anchor][0] + 1 for e in layouts[book.lang].entries}, site_dir)
        for book in books}, cache_dir, jobs)
    overlays = render_all({f"{book.lang}-numbers": numbers_html(page_labels(
        fronts[f"{book.lang}-front"].meta["pages"], layouts[book.lang].body_pages)) for book in books}, cache_dir, jobs)
    summaries = []
    for book in books:
        layout, front = layouts[book.lang], fronts[f"{book.lang}-front"]
        offset = front.meta["pages"]
        anchors = {name: (number + offset, top) for name, (number, top) in layout.anchors.items()}
        out = site_dir / "pdf" / book.strings["pdf_file"]
        assemble(book, front, layout.parts, overlays[f"{book.lang}-numbers"], layout.entries, anchors, out, fonts)
        print(f"pdf_book.py: wrote {out} ({offset + layout.body_pages} pages)", flush=True)
        summaries.append({
            "lang": book.lang, "pages": offset + layout.body_pages, "file": str(out),
            "parts": [{"part": p.slug, "folder": p.pages[0].split("/")[0] if "/" in p.pages[0] else p.slug,
                       "pages": r.meta["pages"], "seconds": r.meta["seconds"],
                       "peak_rss_mb": r.meta["peak_rss_mb"], "cached": r.cached}
                      for p, r in zip(book.parts, layout.parts, strict=True)]})
    for path in cache_dir.glob("font-*.bin"):  # the book-wide font subsets this build did not use
        if path not in fonts.used:
            path.unlink(missing_ok=True)
    (cache_dir / "last-build.json").write_text(json.dumps(summaries, indent=1), encoding="utf-8")
    return summaries


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The book's PDFs from the built site, rendered by part and cached.")
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site", help="the built site (default: site/)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "pdf",
                        help="rendered parts, by content hash (default: .cache/pdf/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parts rendered at once")
    parser.add_argument("--lang", choices=LANGS, action="append", help="only this language (repeatable)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be >= 1")
    if not (args.site_dir / "index.html").is_file():
        parser.error(f"--site-dir {args.site_dir}: no built site there (run build/build_book.py --no-pdf)")
    try:
        build(args.site_dir.resolve(), args.cache_dir.resolve(), args.jobs, tuple(args.lang or LANGS))
    except PdfError as err:
        print(f"pdf_book.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
