"""Typeset math at build time, so that the site needs no JavaScript for it: MathML on the site
(tools/math_markup.py), which build/pdf_book.py turns into SVG for the PDF.

Math comes from two places:

* Markdown pages: ``pymdownx.arithmatex`` (generic mode) wraps ``$...$`` as
  ``<span class="arithmatex">\\(...\\)</span>`` and ``$$...$$`` as
  ``<div class="arithmatex">\\[...\\]</div>``.
* Notebook pages: nbconvert leaves ``$...$`` and ``$$...$$`` as text in markdown cells.

An expression that cannot be typeset fails the build with the page and the expression named. The
math font is written to ``assets/fonts/`` (made once, kept in ``.cache/math-font/``).
"""

import re
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from tools.book import ROOT
from tools.math_markup import FONT_NAME, math_font, tex_to_mathml

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


def _mathml_or_fail(tex, display, page):
    try:
        mathml = tex_to_mathml(tex, display)
    except ValueError as err:
        raise PluginError(f"{page.file.src_uri}: {err}") from err
    return f'<div class="math-display">{mathml}</div>' if display else mathml


def _markdown_math(match, page):
    if match.group("display") is not None:
        return _mathml_or_fail(match.group("display"), True, page)
    return _mathml_or_fail(match.group("inline"), False, page)


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


def on_post_build(config):
    fonts = Path(config["site_dir"]) / "assets" / "fonts"
    fonts.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(math_font(ROOT / ".cache" / "math-font"), fonts / FONT_NAME)
