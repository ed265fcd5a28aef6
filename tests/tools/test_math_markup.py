"""tools/math_markup.py: TeX to MathML for the site (with its source kept for the PDF), to SVG for
the PDF (its glyphs as text in the PDF's math font), and the build failing on TeX that either cannot
show."""

import html
import html.parser
import re

import pytest
import ziamath
from fontTools.ttLib import TTFont

from tools.math_markup import FONT_TTF, PRINT_FAMILY, print_font, tex_to_mathml, tex_to_svg


class _Attrs(html.parser.HTMLParser):
    """The attributes of the first element, as a browser's parser reads them."""

    def handle_starttag(self, tag, attrs):
        if not hasattr(self, "first"):
            self.first = (tag, dict(attrs))


def first_element(markup: str):
    parser = _Attrs()
    parser.feed(markup)
    return parser.first


@pytest.mark.parametrize("tex, display", [
    (r"\mathrm{MFU} = \frac{6 N T}{P \cdot t}", False),
    (r"\sum_{i=1}^{n} x_i^2 < \sqrt{n}", True),
    ("a &lt; b &gt; c", False),              # arithmatex leaves HTML entities in the TeX
    (r'\text{a "quoted" word}', False),
])
def test_mathml_keeps_its_tex_for_the_pdf(tex, display):
    mathml = tex_to_mathml(tex, display)
    tag, attrs = first_element(mathml)
    assert tag == "math" and mathml.endswith("</math>")
    assert attrs["display"] == ("block" if display else "inline")
    assert attrs["data-tex"] == html.unescape(tex)
    # the PDF's SVG from that attribute is the SVG of the original TeX
    assert tex_to_svg(attrs["data-tex"], display) == tex_to_svg(tex, display)


def test_mathml_is_structure_not_a_picture():
    mathml = tex_to_mathml(r"\frac{a}{b^2}", False)
    assert "<mfrac>" in mathml and "<msup>" in mathml and "<svg" not in mathml


def test_the_pdfs_svg_draws_each_glyph_ziamath_chose_as_text_in_the_print_font(tmp_path):
    """Each glyph is a character of the PDF's math font that maps to the very glyph ziamath placed
    (a superscript's script-size variant included), not an outline: an outline per glyph was most
    of the PDFs' bytes. The parentheses around seven rows are assembled from pieces, no glyph of
    the font: those keep their outline."""
    tex = r"\frac{a}{b^2} + \sum_{i=1}^{n} x_i \left(\begin{matrix}a\\b\\c\\d\\e\\f\\g\end{matrix}\right)"
    svg = tex_to_svg(tex, True)
    assert "<use" not in svg and "<symbol" not in svg
    chars = [html.unescape(c) for c in re.findall(rf'<text [^>]*font-family="{PRINT_FAMILY}"[^>]*>([^<]+)</text>', svg)]
    placed = [int(gid) for gid in re.findall(r'<use href="#[A-Za-z]+_(\d+)"', ziamath.Latex(tex, size=16).svg())]
    order = TTFont(FONT_TTF).getGlyphOrder()
    cmap = TTFont(print_font(tmp_path)).getBestCmap()
    assert [cmap.get(ord(c)) for c in chars] == [order[gid] for gid in placed]
    assert "𝑎" in chars and "𝑛" in chars and any(ord(c) >= 0xF0000 for c in chars)  # the script-size 2
    assert svg.count("<path") >= 2, "the assembled parentheses lost their outline"


def test_svg_is_sized_in_em_and_labelled_with_its_tex():
    svg = tex_to_svg(r"x_1", False)
    assert svg.startswith("<svg") and 'class="math"' in svg and 'aria-label="x_1"' in svg
    assert "vertical-align:" in svg and "em;" in svg


@pytest.mark.parametrize("tex, message", [
    (r"\frac{a", "cannot typeset"),           # ziamath cannot parse it: the PDF could not print it
    (r"\hyperlink{x} + 1", r"unknown command \hyperlink"),  # latex2mathml would print it as text
    # the math font has no Chinese: the PDF would print a box (.notdef) where the site shows the word
    (r"\ln(\text{词表})", "the math font has no glyph for 表 词"),
])
def test_tex_that_cannot_show_fails_the_build(tex, message):
    with pytest.raises(ValueError, match=message.replace("\\", "\\\\")):
        tex_to_mathml(tex, False)


def test_an_svg_is_typeset_once_and_then_read_from_the_cache(tmp_path, monkeypatch):
    """The second build reads what the first typeset; a change of typesetter or of this module
    (the salt) typesets again; TeX that fails is never kept."""
    from tools import math_markup
    monkeypatch.setattr(math_markup, "SVG_CACHE", tmp_path)
    typeset = []
    real = math_markup._typeset_svg
    monkeypatch.setattr(math_markup, "_typeset_svg", lambda *a: typeset.append(a) or real(*a))
    tex = r"\frac{p}{q} + \sqrt{2}"
    first = math_markup.tex_to_svg.__wrapped__(tex, True)   # past the in-process functools.cache
    assert math_markup.tex_to_svg.__wrapped__(tex, True) == first and len(typeset) == 1
    assert [p.suffix for p in tmp_path.iterdir()] == [".svg"]  # no .part left behind
    math_markup.tex_to_svg.__wrapped__(tex, False)          # inline is another entry
    assert len(typeset) == 2
    monkeypatch.setattr(math_markup, "_svg_salt", lambda: b"ziamath 99")
    assert math_markup.tex_to_svg.__wrapped__(tex, True) == first and len(typeset) == 3
    with pytest.raises(ValueError, match="cannot typeset"):
        math_markup.tex_to_svg.__wrapped__(r"\frac{a", True)
    assert len(list(tmp_path.iterdir())) == 3
