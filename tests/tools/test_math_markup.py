"""tools/math_markup.py: TeX to MathML for the site (with its source kept for the PDF), to SVG for
the PDF, and the build failing on TeX that either cannot show."""

import html.parser

import pytest

from tools.math_markup import tex_to_mathml, tex_to_svg


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
    # a few hundred bytes, where the SVG of the same expression is tens of kilobytes of paths
    assert len(mathml) * 10 < len(tex_to_svg(r"\frac{a}{b^2}", False))


def test_svg_is_sized_in_em_and_labelled_with_its_tex():
    svg = tex_to_svg(r"x_1", False)
    assert svg.startswith("<svg") and 'class="math"' in svg and 'aria-label="x_1"' in svg
    assert "vertical-align:" in svg and "em;" in svg


@pytest.mark.parametrize("tex, message", [
    (r"\frac{a", "cannot typeset"),           # ziamath cannot parse it: the PDF could not print it
    (r"\hyperlink{x} + 1", r"unknown command \hyperlink"),  # latex2mathml would print it as text
])
def test_tex_that_cannot_show_fails_the_build(tex, message):
    with pytest.raises(ValueError, match=message.replace("\\", "\\\\")):
        tex_to_mathml(tex, False)
