"""Typeset math to inline SVG at build time, so neither the site nor the PDF needs JavaScript.

The site loads no MathJax/KaTeX from a CDN, and weasyprint (which runs no JavaScript) prints
the same SVG the browser shows. Math comes from two places:

* Markdown pages: ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` as
  ``<span class="arithmatex">\\(...\\)</span>`` and ``$$...$$`` as
  ``<div class="arithmatex">\\[...\\]</div>``.
* Notebook pages: nbconvert leaves ``$...$`` and ``$$...$$`` as text in markdown cells.

ziamath (pure Python, STIX Two Math font) turns each expression into SVG. An expression it
cannot typeset fails the build with the page and the expression named.
"""

import functools
import html
import re

import ziamath
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

# Plain paths instead of <symbol>/<use>: weasyprint draws no glyphs referenced through <use>.
ziamath.config.svg2 = False

_EM_PX = 16.0  # ziamath's size argument, in px per em; the SVG is then sized in em
_SIZE = re.compile(r'^<svg([^>]*?) width="([\d.]+)" height="([\d.]+)" viewBox="([-\d. ]+)"')

_ARITHMATEX = re.compile(
    r'<span class="arithmatex">\\\((?P<inline>.*?)\\\)</span>'
    r'|<div class="arithmatex">\\\[(?P<display>.*?)\\\]</div>',
    re.S,
)
_NOTEBOOK_MARKDOWN = re.compile(r'(<div class="[^"]*jp-RenderedMarkdown[^"]*"[^>]*>)(.*?)(</div>)', re.S)
_CODE = re.compile(r"(<pre.*?</pre>|<code.*?</code>)", re.S)
# Inline math may wrap onto the next line of the cell's source, but not across a blank line,
# so a lone dollar sign in prose cannot pair with one paragraphs away.
_DOLLARS = re.compile(r"\$\$(?P<display>.+?)\$\$|(?<![\\$])\$(?P<inline>(?:[^$\n]|\n(?!\s*\n))+?)\$", re.S)


@functools.cache
def tex_to_svg(tex: str, display: bool) -> str:
    """Return an ``<svg>`` element for the LaTeX string ``tex`` (HTML entities allowed).

    The SVG is sized in em so it scales with the surrounding text; inline math is shifted
    down by its depth below the baseline. Raises ``ValueError`` if ziamath cannot parse it.
    """
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
    min_y = float(viewbox.split()[1])
    depth = height + min_y  # viewBox starts at -ascent; the baseline is y = 0
    style = f"width:{width / _EM_PX:.3f}em;height:{height / _EM_PX:.3f}em"
    if not display:
        style += f";vertical-align:{-depth / _EM_PX:.3f}em"
    label = html.escape(source, quote=True)
    head = f'<svg{attrs} class="math" role="img" aria-label="{label}" style="{style}" viewBox="{viewbox}"'
    return head + svg[match.end():]


def _svg_or_fail(tex, display, page):
    try:
        svg = tex_to_svg(tex, display)
    except ValueError as err:
        raise PluginError(f"{page.file.src_uri}: {err}") from err
    return f'<div class="math-display">{svg}</div>' if display else svg


def _markdown_math(match, page):
    if match.group("display") is not None:
        return _svg_or_fail(match.group("display"), True, page)
    return _svg_or_fail(match.group("inline"), False, page)


def _notebook_cell(match, page):
    opening, body, closing = match.groups()
    parts = _CODE.split(body)  # odd items are code: leave their dollars alone
    for i in range(0, len(parts), 2):
        parts[i] = _DOLLARS.sub(lambda m: _markdown_math(m, page), parts[i])
    return opening + "".join(parts) + closing


@event_priority(90)  # before the other hooks read the page
def on_post_page(output, page, config):
    output = _ARITHMATEX.sub(lambda m: _markdown_math(m, page), output)
    if page.file.src_uri.endswith(".ipynb"):
        output = _NOTEBOOK_MARKDOWN.sub(lambda m: _notebook_cell(m, page), output)
    return output
