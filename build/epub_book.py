"""The EPUB 3 books, one per language, made from the built site and the PDFs' print HTML.

    python build/epub_book.py [--site-dir site] [--cache-dir .cache/epub] [--jobs N] [--lang en]

Each page of the book becomes one XHTML document, from the same per-part print HTML as the PDF
(build/pdf_book.py part_html: the article of each page, numbered titles, the scripts' docstrings
with a pointer to the Scripts appendix instead of full listings, the "last update" dates
dropped), except that the math stays the site's MathML, which EPUB 3 reading systems render
themselves. Links between pages point at the page's document and anchor; images (the notebooks'
plots) become files of the EPUB. A part is converted only when its pages' HTML, the nav, the
interface strings or this pipeline changed: the XHTML of each part is cached under
``--cache-dir`` by a hash of those.

Then, per language, ebooklib packages the cover (a PNG drawn with Pillow: title and edition), a
title page (edition, addresses, licences), the navigation document (part, chapter, section,
nested as in the PDF's outline), the chapters, their images, the stylesheet (build/epub/epub.css)
and the site's math font (STIX Two Math, 0.4 MB: few reading systems have a font with a MATH
table). Chinese text uses the reader's own fonts (no CJK font is embedded; CONTRIBUTING.md says
why) and is tagged zh-Hans, so that they pick Simplified Chinese glyph forms.

Exit status: 0 built, 1 a page is not well-formed XHTML, 2 bad arguments.
"""

import argparse
import base64
import concurrent.futures
import datetime
import hashlib
import html
import io
import json
import multiprocessing
import os
import re
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pdf_book  # build/pdf_book.py, beside this file
from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[1]
EPUB_CSS = ROOT / "build" / "epub" / "epub.css"
LANGS = ("en", "zh")
LANG_TAGS = {"en": "en", "zh": "zh-Hans"}  # zh-Hans: the reader's fonts give Simplified forms
MATHML = "http://www.w3.org/1998/Math/MathML"
MATH_FONT = "fonts/STIXTwoMath-Regular.woff2"     # in the EPUB, from the site's assets/
# What XML 1.0 forbids in text (terminal escapes in a notebook's output)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class EpubError(Exception):
    """A page whose XHTML is not well-formed, or a file the book needs that is missing."""


@dataclass
class Chapter:
    key: str                  # the page's key (pdf_book.page_key): its file is KEY.xhtml
    title: str
    xhtml: str
    properties: list[str]     # the manifest's properties: mathml, svg
    images: list[str]         # the names of its images under images/ (files in the cache)


@dataclass
class PartXhtml:
    lang: str
    slug: str
    chapters: list[Chapter]
    headings: list[dict] = field(default_factory=list)   # pdf_book.Heading as dicts: the nav


# ---------------------------------------------------------------------------------------------
# One part as XHTML documents, cached by what it is made from

def part_digest(book: pdf_book.Book, part: pdf_book.Part, site_dir: Path) -> str:
    """A hash of what a part's XHTML is made from: its pages' articles as built, the whole nav
    (links and numbers depend on it), the language's strings, and the code of this pipeline."""
    digest = hashlib.sha256()
    for module in (Path(__file__), Path(pdf_book.__file__), ROOT / "tools" / "book.py"):
        digest.update(module.read_bytes())
    nav = [(p.slug, p.title, p.number, p.pages) for p in book.parts]
    digest.update(json.dumps([book.lang, book.site_url, book.strings, nav], sort_keys=True).encode())
    prefix = "" if book.lang == "en" else f"{book.lang}/"
    for src in part.pages:
        text = (site_dir / prefix / pdf_book.page_url(src) / "index.html").read_text(encoding="utf-8")
        start, end = text.find('<article class="md-content__inner'), text.rfind("</article>")
        digest.update(src.encode() + b"\0" + text[start:end].encode() + b"\0")
    return digest.hexdigest()[:20]


def convert_part(book: pdf_book.Book, part: pdf_book.Part, site_dir: Path, image_dir: Path) -> PartXhtml:
    """The XHTML documents of one part (a page each). Its images are written to ``image_dir``,
    named by their content's hash. Runs in a worker process."""
    doc = pdf_book.part_html(book, part, site_dir, Path("unused-print-font"), math_svg=False)
    soup = BeautifulSoup(doc.html, "html.parser")
    chapters = []
    for article in soup.select("article.chapter"):
        key = article["id"]
        images = _xhtml_body(article, image_dir)
        title = article.h1.get_text(" ", strip=True) if article.h1 else part.title
        body = _NOT_XML.sub("", str(article))
        text = (f'<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
                f'<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
                f'lang="{LANG_TAGS[book.lang]}" xml:lang="{LANG_TAGS[book.lang]}">'
                f'<head><meta charset="utf-8"/><title>{html.escape(title)}</title>'
                f'<link rel="stylesheet" type="text/css" href="style/book.css"/></head>'
                f"<body>{body}</body></html>")
        _check_xml(text, f"{book.lang}/{key}")
        properties = [name for name, tag in (("mathml", "<math "), ("svg", "<svg ")) if tag in body]
        chapters.append(Chapter(key, title, text, properties, images))
    headings = [asdict(h) | {"anchor": unquote(h.anchor)} for h in doc.headings]
    return PartXhtml(book.lang, part.slug, chapters, headings)


def _xhtml_body(article, image_dir: Path) -> list[str]:
    """Edit one page's print article into what an EPUB reading system shows; returns the names
    of its images."""
    article.attrs.pop("lang", None)  # the document's own language (zh-Hans for zh)
    for tag in article.find_all(id=True):  # a notebook's heading ids are percent-encoded
        tag["id"] = unquote(tag["id"])
    for a in article.find_all(href=True):
        href = a["href"]
        if href.startswith(pdf_book.LINK):  # book:KEY--ID, book:KEY
            anchor = href[len(pdf_book.LINK):]
            page = anchor.split("--", 1)[0]
            a["href"] = f"{page}.xhtml" + (f"#{anchor}" if anchor != page else "")
    images = []
    for img in article.find_all("img", src=True):
        src = img["src"]
        if src.startswith("data:"):
            head, _, payload = src.partition(",")
            data = base64.b64decode(payload) if head.endswith(";base64") else unquote(payload).encode()
            ext = {"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}[head[5:].split(";")[0]]
        else:
            path = Path(unquote(urlsplit(src).path))
            data, ext = path.read_bytes(), path.suffix.lower()
        name = hashlib.sha256(data).hexdigest()[:20] + ext
        if not (image_dir / name).is_file():
            tmp = image_dir / (name + f".{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(image_dir / name)
        img["src"] = f"images/{name}"
        images.append(name)
    # Content tabs: every tab, one after the other, under its label (a reader cannot switch them)
    for tabs in article.select("div.tabbed-set"):
        labels = [label.get_text(" ", strip=True) for label in tabs.select("div.tabbed-labels > label")]
        for label, block in zip(labels, tabs.select("div.tabbed-content > div.tabbed-block"), strict=False):
            heading = BeautifulSoup(f'<p class="tabbed-title">{html.escape(label)}</p>', "html.parser").p
            block.insert(0, heading)
        for tag in tabs.select("input, div.tabbed-labels"):
            tag.decompose()
    # Collapsible blocks open, as admonitions: some reading systems keep <details> closed
    for details in article.find_all("details"):
        summary = details.find("summary", recursive=False)
        if summary is not None:
            summary.name = "p"
            summary["class"] = ["admonition-title"]
        details.attrs.pop("open", None)
        details["class"] = ["admonition", *details.get("class", [])]
        details.name = "div"
    for math in article.find_all("math"):
        math["xmlns"] = MATHML
        tex = math.attrs.pop("data-tex", None)
        if tex:
            math["alttext"] = tex  # what a screen reader without MathML support reads
    for tag in article.find_all(True):
        for name in [n for n in tag.attrs if not re.fullmatch(r"[A-Za-z_][\w.:-]*", n)]:
            del tag[name]  # a stray "," attribute of nbconvert's markup is no XML name
    for p in article.find_all("p"):  # a notebook's display math is a <div> in a <p>: no XHTML
        if p.find(["div", "pre", "table", "ul", "ol", "dl", "blockquote"]):
            p.name = "div"
    for button in article.select("button, .clipboard-copy-icon"):
        button.decompose()
    return images


def _check_xml(text: str, name: str) -> None:
    from lxml import etree

    try:
        etree.fromstring(text.encode("utf-8"))
    except etree.XMLSyntaxError as err:
        raise EpubError(f"{name}: not well-formed XHTML: {err}") from None


def convert_all(books: list[pdf_book.Book], site_dir: Path, cache_dir: Path, jobs: int) -> dict:
    """The XHTML of every part of every language, from the cache or converted, ``jobs`` at a
    time; returns {(lang, slug): PartXhtml} and the number converted."""
    image_dir = cache_dir / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    found, todo = {}, {}
    for book in books:
        for part in book.parts:
            path = cache_dir / f"{book.lang}-{part.slug}-{part_digest(book, part, site_dir)}.json"
            if path.is_file():
                data = json.loads(path.read_text(encoding="utf-8"))
                found[book.lang, part.slug] = PartXhtml(data["lang"], data["slug"],
                                                        [Chapter(**c) for c in data["chapters"]], data["headings"])
            else:
                todo[book.lang, part.slug] = (book, part, path)
    made: dict = {}
    if jobs == 1 or len(todo) == 1:  # no worker process to start
        made = {name: convert_part(book, part, site_dir, image_dir) for name, (book, part, _) in todo.items()}
    elif todo:
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(jobs, len(todo)), mp_context=context) as pool:
            futures = {name: pool.submit(convert_part, book, part, site_dir, image_dir)
                       for name, (book, part, _) in todo.items()}
            made = {name: future.result() for name, future in futures.items()}
    for name, part in made.items():
        path = todo[name][2]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(part), ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        found[name] = part
    kept = {f"{lang}-{slug}-" for lang, slug in found}
    used = {p.name for book in books for part in book.parts
            for p in [cache_dir / f"{book.lang}-{part.slug}-{part_digest(book, part, site_dir)}.json"]}
    for path in cache_dir.glob("*.json"):  # the superseded versions of these parts
        if path.name not in used and any(path.name.startswith(k) for k in kept):
            path.unlink(missing_ok=True)
    return {"parts": found, "converted": len(todo)}


# ---------------------------------------------------------------------------------------------
# Cover, title page, navigation, packaging

def cover_png(book: pdf_book.Book, edition: str) -> bytes:
    """The cover: the title and the edition line, drawn with Pillow in Noto Sans CJK (the font
    the PDF prints with; requirements/apt.txt installs it), 1600 x 2400 px."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = 1600, 2400
    image = Image.new("RGB", (width, height), "#1f3a5f")
    draw = ImageDraw.Draw(image)
    bold, regular = _font("Noto Sans CJK SC:style=Bold"), _font("Noto Sans CJK SC")
    y = 700
    title_font = ImageFont.truetype(bold[0], 130, index=bold[1])
    for line in _wrap(draw, book.title, title_font, width - 300):
        draw.text((150, y), line, font=title_font, fill="#ffffff")
        y += 190
    small = ImageFont.truetype(regular[0], 64, index=regular[1])
    draw.text((150, y + 80), edition, font=small, fill="#d7e3f4")
    draw.rectangle((150, y + 20, 450, y + 32), fill="#f0b429")
    draw.text((150, height - 220), "Text CC BY-SA 4.0 · Code MIT", font=small, fill="#d7e3f4")
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _font(pattern: str) -> tuple[str, int]:
    try:
        out = subprocess.run(["fc-match", "-f", "%{file}\t%{index}", pattern], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise EpubError(f"fc-match {pattern!r}: {err} (install fontconfig, requirements/apt.txt)") from None
    path, _, index = out.partition("\t")
    if not path or "NotoSansCJK" not in path.replace("-", ""):
        raise EpubError(f"no {pattern} font for the cover (install fonts-noto-cjk, requirements/apt.txt)")
    return path, int(index or 0)


def _wrap(draw, text: str, font, width: int) -> list[str]:
    """Lines of ``text`` no wider than ``width`` px, broken at spaces (or anywhere in Chinese)."""
    words = text.split(" ") if " " in text else list(text)
    glue = " " if " " in text else ""
    lines = [words[0]]
    for word in words[1:]:
        if draw.textlength(lines[-1] + glue + word, font=font) <= width:
            lines[-1] += glue + word
        else:
            lines.append(word)
    return lines


def _document(lang: str, title: str, body: str, epub_type: str = "") -> str:
    tag = LANG_TAGS[lang]
    kind = f' epub:type="{epub_type}"' if epub_type else ""
    return (f'<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
            f'<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
            f'lang="{tag}" xml:lang="{tag}"><head><meta charset="utf-8"/><title>{html.escape(title)}</title>'
            f'<link rel="stylesheet" type="text/css" href="style/book.css"/></head><body{kind}>{body}</body></html>')


def title_page(book: pdf_book.Book, edition: str) -> str:
    """What the PDF's cover and its back say: title, edition, addresses, licences."""
    addresses = "".join(
        f'<p>{html.escape(book.strings[label])} <a href="{html.escape(url)}">{html.escape(url)}</a></p>'
        for label, url in (("pdf_repository", book.repo_url), ("pdf_website", book.site_url)) if url)
    return _document(book.lang, book.title,
                     f'<section class="title-page" epub:type="titlepage"><h1>{html.escape(book.title)}</h1>'
                     f'<p class="edition">{html.escape(edition)}</p>{addresses}'
                     f'<p class="license">Text CC BY-SA 4.0 · Code MIT</p></section>')


def toc(book: pdf_book.Book, parts: dict) -> list:
    """The navigation as ebooklib's nested (Section, [children]) and Link items: the same
    entries as the PDF's outline (pdf_book.contents: part, chapter, section)."""
    from ebooklib import epub

    docs = {p.slug: pdf_book.PartDoc(book.lang, p, headings=[pdf_book.Heading(**h)
                                                            for h in parts[book.lang, p.slug].headings])
            for p in book.parts}
    entries = pdf_book.contents(book, docs)
    root: list = []
    stack = [(-1, root)]
    for n, entry in enumerate(entries):
        page = entry.anchor.split("--", 1)[0]
        href = f"{page}.xhtml" + (f"#{entry.anchor}" if entry.anchor != page else "")
        while stack[-1][0] >= entry.level:
            stack.pop()
        parent = stack[-1][1]
        # a Section with children; a Link when it turns out to have none (collapsed below)
        children: list = []
        parent.append((epub.Section(entry.title, href), children, f"nav-{n}"))
        stack.append((entry.level, children))

    def collapse(items):
        return [(section, collapse(children)) if children else epub.Link(section.href, section.title, uid)
                for section, children, uid in items]

    return collapse(root)


def package(book: pdf_book.Book, parts: dict, site_dir: Path, cache_dir: Path, out: Path) -> dict:
    """Write one language's EPUB to ``out``; returns its summary."""
    from ebooklib import epub

    date = pdf_book.content_date()
    edition = book.edition(date)
    lang = LANG_TAGS[book.lang]
    e = epub.EpubBook()
    # one identifier per language and edition: a release is a new book, a development build the
    # same book updated
    e.set_identifier("urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{book.repo_url or book.title}"
                                                  f"#{book.lang}#{book.version or 'development'}")))
    e.set_title(book.title)
    e.set_language(lang)
    e.add_author("The ML Engineering Open Book contributors")
    e.add_metadata("DC", "date", date)
    e.add_metadata("DC", "description", edition)
    e.add_metadata("DC", "rights", "Text: CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); "
                                   "code: MIT (https://opensource.org/license/mit)")
    if book.site_url:
        e.add_metadata("DC", "source", book.site_url)
    if book.version:
        e.add_metadata(None, "meta", book.version, {"property": "schema:version"})
    for prop, value in (("schema:accessMode", "textual"), ("schema:accessMode", "visual"),
                        ("schema:accessModeSufficient", "textual"),
                        ("schema:accessibilityFeature", "alternativeText"),
                        ("schema:accessibilityFeature", "MathML"),
                        ("schema:accessibilityFeature", "structuralNavigation"),
                        ("schema:accessibilityFeature", "tableOfContents"),
                        ("schema:accessibilityHazard", "none"),
                        ("schema:accessibilitySummary", "Text with MathML formulas and tables; every plot has a "
                                                        "text description.")):
        e.add_metadata(None, "meta", value, {"property": prop})

    e.set_cover("images/cover.png", cover_png(book, edition), create_page=False)
    css = epub.EpubItem(uid="css", file_name="style/book.css", media_type="text/css",
                        content=EPUB_CSS.read_bytes())
    e.add_item(css)
    font = site_dir / "assets" / MATH_FONT
    if not font.is_file():
        raise EpubError(f"{font}: the site's math font is missing (build the site first)")
    e.add_item(epub.EpubItem(uid="math-font", file_name=MATH_FONT, media_type="font/woff2",
                             content=font.read_bytes()))
    cover = epub.EpubItem(uid="cover", file_name="cover.xhtml", media_type="application/xhtml+xml",
                          content=_document(book.lang, book.title,
                                            f'<section class="cover" epub:type="cover"><img src="images/cover.png" '
                                            f'alt="{html.escape(book.title)}: {html.escape(edition)}"/></section>')
                          .encode())
    title = epub.EpubItem(uid="title", file_name="title.xhtml", media_type="application/xhtml+xml",
                          content=title_page(book, edition).encode())
    for item in (cover, title):
        e.add_item(item)
    chapters, images = [], {}
    for part in book.parts:
        for chapter in parts[book.lang, part.slug].chapters:
            item = epub.EpubItem(uid=f"p-{chapter.key}", file_name=f"{chapter.key}.xhtml",
                                 media_type="application/xhtml+xml", content=chapter.xhtml.encode())
            item.properties = list(chapter.properties)
            e.add_item(item)
            chapters.append(item)
            images.update({name: None for name in chapter.images})
    for n, name in enumerate(images):
        path = cache_dir / "images" / name
        media = {".png": "image/png", ".jpg": "image/jpeg", ".svg": "image/svg+xml"}[path.suffix]
        e.add_item(epub.EpubItem(uid=f"img-{n}", file_name=f"images/{name}", media_type=media,
                                 content=path.read_bytes()))
    e.toc = toc(book, parts)
    nav = epub.EpubNav(title=book.strings["pdf_contents"])
    nav.add_link(href="style/book.css", rel="stylesheet", type="text/css")
    e.add_item(nav)
    e.add_item(epub.EpubNcx())
    e.spine = [cover, title, nav, *chapters]
    e.guide = [{"type": "cover", "href": "cover.xhtml", "title": book.title},
               {"type": "toc", "href": "nav.xhtml", "title": book.strings["pdf_contents"]},
               {"type": "text", "href": chapters[0].file_name, "title": chapters[0].file_name}]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    modified = datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.UTC)
    epub.write_epub(str(tmp), e, {"epub3_pages": False, "mtime": modified,
                                  "landmark_title": book.strings["pdf_contents"]})
    os.replace(tmp, out)
    return {"lang": book.lang, "file": str(out), "bytes": out.stat().st_size, "documents": len(chapters),
            "images": len(images)}


def build(site_dir: Path, cache_dir: Path, jobs: int, langs=LANGS) -> list[dict]:
    """The EPUB of each language into ``<site>/epub/``; returns a summary per language."""
    books = pdf_book.load_books(langs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    done = convert_all(books, site_dir, cache_dir, jobs)
    summaries = []
    for book in books:
        out = site_dir / "epub" / Path(book.strings["pdf_file"]).with_suffix(".epub").name
        summary = package(book, done["parts"], site_dir, cache_dir, out)
        print(f"epub_book.py: wrote {out} ({summary['bytes'] / 1e6:.1f} MB, {summary['documents']} documents; "
              f"{done['converted']} parts converted)", flush=True)
        summaries.append(summary)
    used = {name for part in done["parts"].values() for c in part.chapters for name in c.images}
    for path in (cache_dir / "images").iterdir() if set(langs) == set(LANGS) else ():
        if path.name not in used:  # an image no page of either language uses any more
            path.unlink(missing_ok=True)
    return summaries


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The book's EPUBs from the built site, converted by part and cached.")
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site", help="the built site (default: site/)")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "epub",
                        help="converted parts, by content hash (default: .cache/epub/)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parts converted at once")
    parser.add_argument("--lang", choices=LANGS, action="append", help="only this language (repeatable)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be >= 1")
    if not (args.site_dir / "index.html").is_file():
        parser.error(f"--site-dir {args.site_dir}: no built site there (run build/build_book.py --no-pdf)")
    try:
        build(args.site_dir.resolve(), args.cache_dir.resolve(), args.jobs, tuple(args.lang or LANGS))
    except EpubError as err:
        print(f"epub_book.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
