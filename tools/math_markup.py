"""The book's math, typeset at build time: MathML for the site, SVG for the PDF.

A browser renders MathML itself, in the text's colour and at the text's size, so the site's math
follows the light and dark schemes and costs a few hundred bytes an expression. WeasyPrint draws
no MathML, so the PDF replaces each ``<math>`` with the SVG that ziamath draws from the same TeX,
kept in the element's ``data-tex`` attribute. ziamath itself parses TeX with latex2mathml, so both
outputs come from one parse of one source. The site serves ziamath's font (STIX Two Math, SIL Open
Font License) as WOFF2, subset to the blocks math uses, so that math looks the same on every
system.
"""

from __future__ import annotations

import functools
import hashlib
import html
import io
import re
from pathlib import Path

import latex2mathml.converter
import ziamath

# Plain paths instead of <symbol>/<use>: WeasyPrint draws no glyphs referenced through <use>.
ziamath.config.svg2 = False

_EM_PX = 16.0  # ziamath's size argument, in px per em; the SVG is then sized in em
_SIZE = re.compile(r'^<svg([^>]*?) width="([\d.]+)" height="([\d.]+)" viewBox="([-\d. ]+)"')
_MATH_OPEN = re.compile(r'^<math xmlns="http://www.w3.org/1998/Math/MathML" display="(inline|block)">')

_UNKNOWN_COMMAND = re.compile(r">(\\[A-Za-z]+)<")

FONT_TTF = Path(ziamath.__file__).parent / "fonts" / "STIXTwoMath-Regular.ttf"
FONT_NAME = "STIXTwoMath-Regular.woff2"
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


@functools.cache
def tex_to_svg(tex: str, display: bool) -> str:
    """An ``<svg class="math">`` element for the LaTeX string ``tex``, sized in em so that it
    scales with the text around it; inline math is shifted down by its depth below the baseline.
    Raises ``ValueError`` if ziamath cannot parse it."""
    source = html.unescape(tex).strip()
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
    return head + svg[match.end():]


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
