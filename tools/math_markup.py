"""The book's math, typeset at build time: MathML for the site, SVG for the PDF.

A browser renders MathML itself, in the text's colour and at the text's size, so the site's math
follows the light and dark schemes and costs a few hundred bytes an expression. WeasyPrint draws
no MathML, so the PDF replaces each ``<math>`` with the SVG that ziamath draws from the same TeX,
kept in the element's ``data-tex`` attribute. ziamath itself parses TeX with latex2mathml, so both
outputs come from one parse of one source. The site serves ziamath's font (STIX Two Math, SIL Open
Font License) as WOFF2, subset to the blocks math uses, so that math looks the same on every
system.

In the SVG each glyph is text in that font, not its outline: ziamath places glyphs as ``<use>`` of
a ``<symbol>`` holding the outline, which this module turns into ``<text>`` of the glyph's
character at the same baseline and size. An outline per glyph was most of the PDF's bytes (about
4.5 MB a language, 27 kB for one formula); as text the PDF embeds each glyph once, in the font,
and its math can be searched and copied. Glyphs that no character maps to (script-size and
large variants, pieces of stretchy delimiters) get a private-use character (U+F0000 + glyph id)
in the PDF's copy of the font, :func:`print_font`, which also drops the layout tables, so that
the PDF's text shaping keeps the glyph ziamath chose.
"""

from __future__ import annotations

import functools
import hashlib
import html
import io
import os
import re
from pathlib import Path

import latex2mathml.converter
import ziamath

# Glyphs as <symbol>/<use> (WeasyPrint draws no glyphs referenced through <use>): _glyphs_as_text
# turns each <use> into text in PRINT_FAMILY.
ziamath.config.svg2 = True

_EM_PX = 16.0  # ziamath's size argument, in px per em; the SVG is then sized in em
_SIZE = re.compile(r'^<svg([^>]*?) width="([\d.]+)" height="([\d.]+)" viewBox="([-\d. ]+)"')
_MATH_OPEN = re.compile(r'^<math xmlns="http://www.w3.org/1998/Math/MathML" display="(inline|block)">')

_UNKNOWN_COMMAND = re.compile(r">(\\[A-Za-z]+)<")

FONT_TTF = Path(ziamath.__file__).parent / "fonts" / "STIXTwoMath-Regular.ttf"
FONT_NAME = "STIXTwoMath-Regular.woff2"
# The PDF's copy of FONT_TTF (print_font): renamed, as the font's licence asks of a modified version.
PRINT_FAMILY = "Book Math Print"
_PRIVATE_USE = 0xF0000  # Supplementary Private Use Area-A: a character for each unmapped glyph
# Latin, Greek, punctuation, letterlike symbols, arrows, the operator and technical blocks, and
# the mathematical alphanumerics (the italic x a browser draws for <mi>x</mi>).
FONT_RANGES = ((0x20, 0x7E), (0xA0, 0x17F), (0x370, 0x3FF), (0x2000, 0x206F), (0x2100, 0x214F),
               (0x2190, 0x21FF), (0x2200, 0x23FF), (0x27C0, 0x27EF), (0x2980, 0x2AFF),
               (0x1D400, 0x1D7FF))


@functools.cache
def tex_to_mathml(tex: str, display: bool) -> str:
    """A ``<math>`` element for the LaTeX string ``tex`` (HTML entities allowed), with the TeX in
    ``data-tex`` and ``display="block"`` for display math. Raises ``ValueError`` for a command
    latex2mathml does not know, or TeX that ziamath cannot typeset, so that an expression the PDF
    could not print fails the site build too."""
    source = html.unescape(tex).strip()
    tex_to_svg(source, display)
    mathml = latex2mathml.converter.convert(source, display="block" if display else "inline")
    match = _MATH_OPEN.match(mathml)
    if not match:
        raise ValueError(f"unexpected MathML header from latex2mathml for {source!r}")
    unknown = _UNKNOWN_COMMAND.search(mathml)
    if unknown:  # latex2mathml prints a command it does not know as text, and so would the page
        raise ValueError(f"cannot typeset {source!r}: unknown command {unknown.group(1)}")
    head = f'<math display="{match.group(1)}" data-tex="{html.escape(source, quote=True)}">'
    return head + mathml[match.end():]


# Typeset SVGs by (TeX, display) and by this file and the typesetters' versions (_svg_salt), so that
# a build typesets only the expressions it has not seen (ziamath takes about 15 ms an expression,
# and the book has over a thousand per language). A failure is not kept: it raises every time.
SVG_CACHE = Path(__file__).resolve().parents[1] / ".cache" / "math-svg"


@functools.cache
def _svg_salt() -> bytes:
    from importlib.metadata import version
    versions = " ".join(version(name) for name in ("ziamath", "ziafont", "latex2mathml"))
    return Path(__file__).read_bytes() + versions.encode()


@functools.cache
def tex_to_svg(tex: str, display: bool) -> str:
    """An ``<svg class="math">`` element for the LaTeX string ``tex``, sized in em so that it
    scales with the text around it; inline math is shifted down by its depth below the baseline.
    Raises ``ValueError`` if ziamath cannot parse it. Kept in SVG_CACHE between builds."""
    source = html.unescape(tex).strip()
    key = hashlib.sha256(_svg_salt() + f"\0{display}\0{source}".encode()).hexdigest()[:32]
    cached = SVG_CACHE / f"{key}.svg"
    try:
        return cached.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    svg = _typeset_svg(source, display)
    SVG_CACHE.mkdir(parents=True, exist_ok=True)
    part = cached.with_suffix(f".{os.getpid()}.part")  # two builds at once each write their own
    part.write_text(svg, encoding="utf-8")
    os.replace(part, cached)
    return svg


def _typeset_svg(source: str, display: bool) -> str:
    """tex_to_svg's work, without the cache."""
    try:
        svg = ziamath.Latex(source, size=_EM_PX, inline=not display).svg()
    except Exception as err:  # ziamath raises several types for bad TeX
        raise ValueError(f"cannot typeset {source!r}: {err}") from err
    match = _SIZE.match(svg)
    if not match:
        raise ValueError(f"unexpected SVG header from ziamath for {source!r}")
    attrs, width, height, viewbox = match.groups()
    width, height = float(width), float(height)
    depth = height + float(viewbox.split()[1])  # the viewBox starts at -ascent; the baseline is y = 0
    style = f"width:{width / _EM_PX:.3f}em;height:{height / _EM_PX:.3f}em"
    if not display:
        style += f";vertical-align:{-depth / _EM_PX:.3f}em"
    label = html.escape(source, quote=True)
    head = f'<svg{attrs} class="math" role="img" aria-label="{label}" style="{style}" viewBox="{viewbox}"'
    return head + _glyphs_as_text(svg[match.end():], source)


_SYMBOL = re.compile(r'<symbol id="([^"]+)" viewBox="([-\d. ]+)">(.*?)</symbol>|<symbol id="([^"]+)"[^>]*/>', re.S)
_USE = re.compile(r'<use href="#([^"]+)" x="([-\d.]+)" y="([-\d.]+)" width="[-\d.]+" height="([-\d.]+)"'
                  r'(?: fill="([^"]*)")? />')


def _glyphs_as_text(svg: str, source: str) -> str:
    """ziamath's ``<use>`` of each glyph's ``<symbol>`` as ``<text>`` of the glyph's character in
    PRINT_FAMILY. A symbol's viewBox is the glyph's box at 12 pt (ziafont's ``SimpleGlyph``): x from
    min(xmin, 0), y from -max(ascender, ymax); the ``<use>`` scales it to the glyph's size (its
    height over the viewBox's) and puts that corner at (x, y): the glyph's origin on the baseline
    is at (x - xmin * scale, y + ymax * scale). Two glyphs keep their outline there: a delimiter
    that ziamath assembles from pieces (a negative id: no glyph of the font). .notdef (id 0, the
    box ziamath draws for a character the font lacks, such as Chinese in ``\\text``) raises
    ``ValueError``: the PDF would print a box where the site prints the word."""
    symbols = {}

    def drop_symbol(match):
        if match.group(1):  # a glyph without an outline (a space) has no viewBox: nothing to draw
            xmin, top, _, height = map(float, match.group(2).split())
            symbols[match.group(1)] = (xmin, -top, height, match.group(3))
        return ""

    def text(match):
        ident, x, y, height, fill = match.groups()
        if ident not in symbols:
            return ""
        xmin, ymax, box_height, outline = symbols[ident]
        scale = float(height) / box_height
        x, y, fill = float(x) - xmin * scale, float(y) + ymax * scale, fill or "black"
        gid = int(ident.rsplit("_", 1)[1])
        if gid == 0:
            lacking = sorted({c for c in source if ord(c) > 0x7E} - set(_glyph_chars().values()))
            raise ValueError(f"cannot typeset {source!r}: the math font has no glyph for "
                             f"{' '.join(lacking) or 'one of its characters'}; write those words outside the formula")
        if gid < 0:
            return f'<g transform="translate({x:.3f} {y:.3f}) scale({scale:.4f})" fill="{fill}">{outline}</g>'
        char = html.escape(_glyph_chars()[gid])
        return (f'<text x="{x:.3f}" y="{y:.3f}" font-size="{12 * scale:.3f}" font-family="{PRINT_FAMILY}" '
                f'fill="{fill}">{char}</text>')

    out = _USE.sub(text, _SYMBOL.sub(drop_symbol, svg))
    if "<use" in out or "<symbol" in out:
        raise ValueError(f"unexpected glyph markup from ziamath for {source!r}")
    return out


@functools.cache
def _glyph_chars() -> dict[int, str]:
    """The character that stands for each glyph of FONT_TTF in the PDF: the first code point the
    font maps to it, else U+F0000 plus its glyph id (print_font maps those). Not .notdef."""
    from fontTools.ttLib import TTFont

    font = TTFont(FONT_TTF, lazy=True)
    first = {}
    for code, name in sorted(font.getBestCmap().items()):
        first.setdefault(name, code)
    return {gid: chr(first.get(name, _PRIVATE_USE + gid)) for gid, name in enumerate(font.getGlyphOrder()) if gid}


def print_font(cache_dir: Path) -> Path:
    """The PDF's math font: FONT_TTF with a character for every glyph (:func:`_glyph_chars`), no
    GSUB or GPOS (ziamath chose each glyph; shaping must not change it), named PRINT_FAMILY. Made
    once per font and kept in ``cache_dir``; WeasyPrint embeds the glyphs a part uses."""
    from fontTools.ttLib import TTFont
    from fontTools.ttLib.tables._c_m_a_p import CmapSubtable

    key = hashlib.sha256(FONT_TTF.read_bytes() + b"print font 2").hexdigest()[:16]
    path = cache_dir / f"{key}-{PRINT_FAMILY.replace(' ', '')}.ttf"
    if not path.is_file():
        font = TTFont(FONT_TTF)
        order = font.getGlyphOrder()
        table = CmapSubtable.newSubtable(12)
        table.platformID, table.platEncID, table.language = 3, 10, 0
        table.cmap = {ord(char): order[gid] for gid, char in _glyph_chars().items()} | font.getBestCmap()
        font["cmap"].tables = [t for t in font["cmap"].tables if t.format != 12] + [table]
        for tag in ("GSUB", "GPOS"):
            del font[tag]
        for record in font["name"].names:
            if record.nameID in (1, 3, 4, 16):
                record.string = PRINT_FAMILY
            elif record.nameID == 6:
                record.string = PRINT_FAMILY.replace(" ", "")
        data = io.BytesIO()
        font.save(data)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data.getvalue())
        tmp.replace(path)
    return path


def math_font(cache_dir: Path) -> Path:
    """The site's math font, FONT_TTF subset to FONT_RANGES as WOFF2 (about 0.4 MB, a few seconds
    of fontTools), made once per font and range list and kept in ``cache_dir``."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    key = hashlib.sha256(FONT_TTF.read_bytes() + repr(FONT_RANGES).encode()).hexdigest()[:16]
    path = cache_dir / f"{key}-{FONT_NAME}"
    if not path.is_file():
        options = subset.Options()
        options.layout_features, options.notdef_outline = ["*"], True
        font = TTFont(FONT_TTF)
        font.flavor = "woff2"
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=[c for lo, hi in FONT_RANGES for c in range(lo, hi + 1)])
        subsetter.subset(font)  # keeps the MATH table: stretchy delimiters, fraction rules
        data = io.BytesIO()
        font.save(data)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data.getvalue())
        tmp.replace(path)
    return path
