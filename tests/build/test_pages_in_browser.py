"""Pages as a reader's browser (headless Chromium) loads them: math in the dark scheme is drawn in
the text's colour (the SVG it replaced stayed black on the slate background), laid out as math (a
fraction's numerator above its denominator) in the book's math font; notebooks and prose on a
phone; wide tables (a cue above them, a shadow where they scroll, reachable by keyboard). The
pages' requests, console and accessibility: tests/build/test_every_page.py."""

import json

import pytest

from tests.build.book import ui_strings

# the first fraction in the page, the element around its math, and what the browser made of them
PROBE = """
const frac = document.querySelector("article math mfrac");
const math = frac.closest("math"), p = math.parentElement;
const [num, den] = frac.children;
return {math: getComputedStyle(math).color, text: getComputedStyle(p).color,
        scheme: document.body.getAttribute("data-md-color-scheme"),
        numBottom: num.getBoundingClientRect().bottom, denTop: den.getBoundingClientRect().top,
        font: [...document.fonts].filter(f => f.family.replace(/"/g, "") === "STIX Two Math")
                                  .map(f => f.status)};
"""


@pytest.mark.parametrize("scheme, body_scheme", [("dark", "slate"), ("light", "default")])
@pytest.mark.parametrize("path", ["/network/", "/zh/network/"])
def test_math_takes_the_text_colour_and_is_laid_out(site_url, browser, path, scheme, body_scheme):
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia",
                            {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
    try:
        browser.get(site_url + path)
        browser.execute_script("localStorage.clear()")  # Material keeps the last scheme it showed
        browser.refresh()
        browser.execute_async_script("document.fonts.ready.then(arguments[arguments.length - 1])")
        seen = browser.execute_script(PROBE)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert seen["scheme"] == body_scheme, seen
    assert seen["math"] == seen["text"], seen
    assert seen["numBottom"] <= seen["denTop"], f"the fraction is not laid out as one: {seen}"
    assert seen["font"] == ["loaded"], f"STIX Two Math did not load: {seen}"


def test_page_weight_counts_what_a_cold_load_downloads(built_site, tmp_path):
    from tools import page_weight
    out = tmp_path / "weight.json"
    assert page_weight.main(["--site", str(built_site), "--page", "/network/", "--json", str(out)]) == 0
    weight = json.loads(out.read_text())["pages"]["/network/"]
    # the page itself, its stylesheets and scripts, the math font and the English search index
    downloaded = {url.rsplit("/", 2)[-2] + "/" + url.rsplit("/", 1)[-1] for url, _ in weight["largest"]}
    assert "search/search_index.json" in downloaded and weight["requests"] >= 8
    page = (built_site / "network" / "index.html").stat().st_size
    assert weight["bytes"] > page + (built_site / "search" / "search_index.json").stat().st_size


def test_page_weight_with_gzip_counts_the_compressed_text(built_site, tmp_path):
    from tools import page_weight
    out = tmp_path / "weight.json"
    assert page_weight.main(["--site", str(built_site), "--gzip", "--page", "/network/", "--json", str(out)]) == 0
    weight = json.loads(out.read_text())["pages"]["/network/"]
    # the page and the index alone are more than the whole load once text is compressed
    page = (built_site / "network" / "index.html").stat().st_size
    assert weight["bytes"] < page + (built_site / "search" / "search_index.json").stat().st_size


def test_a_notebook_on_a_phone_gives_code_and_plots_the_width(site_url, browser):
    size = browser.get_window_size()
    browser.set_window_size(390, 844)
    try:
        browser.get(site_url + "/compute/roofline/")
        seen = browser.execute_script("""
            const article = document.querySelector("article").getBoundingClientRect();
            const code = document.querySelector(".jp-CodeCell .jp-InputArea-editor").getBoundingClientRect();
            const plot = document.querySelector(".jp-OutputArea-output img").getBoundingClientRect();
            return {article: [article.x, article.width], code: code.x, plot: plot.width};""")
    finally:
        browser.set_window_size(size["width"], size["height"])
    x, width = seen["article"]
    assert seen["code"] < x + 30, f"the In [n]: prompt column still pushes the code right: {seen}"
    assert seen["plot"] > 0.8 * width, f"the plot takes {seen['plot']:.0f} of {width:.0f} px"


@pytest.mark.parametrize("path", ["/zh/debug/node-health/", "/debug/node-health/"])
def test_an_option_in_the_prose_is_never_split_across_lines(site_url, browser, path):
    size = browser.get_window_size()
    browser.set_window_size(390, 844)
    try:
        browser.get(site_url + path)
        seen = browser.execute_script("""
            const options = [...document.querySelectorAll("article p code.option, article li code.option")];
            return {options: options.length,
                    split: options.filter(c => c.getClientRects().length > 1).map(c => c.textContent),
                    overflow: document.documentElement.scrollWidth - window.innerWidth};""")
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert seen["options"] >= 5, seen
    assert not seen["split"], f"options broken across lines: {seen['split']}"
    assert seen["overflow"] <= 0, f"the page is {seen['overflow']} px wider than the phone"


def _edge_shade(png: bytes) -> tuple[float, float]:
    """Mean brightness (0-255) of the 6 px at the left and at the right edge of a screenshot."""
    import io

    from PIL import Image
    image = Image.open(io.BytesIO(png)).convert("L")
    w, h = image.size
    def band(x0):
        return sum(image.getpixel((x, y)) for x in range(x0, x0 + 6) for y in range(h)) / (6 * h)
    return band(1), band(w - 7)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_table_wider_than_the_column_says_so_above_it_and_takes_the_keyboard(site_url, browser, lang):
    browser.set_window_size(1280, 900)
    browser.get(site_url + ("/zh" if lang == "zh" else "") + "/compute/accelerators/")
    seen = browser.execute_script("""
        return [...document.querySelectorAll('.md-typeset__scrollwrap')].map(w => ({
            wide: w.scrollWidth > w.clientWidth + 1, tabindex: w.getAttribute('tabindex'),
            label: w.getAttribute('aria-label'), cue: getComputedStyle(w, '::before').content,
            cueHeight: parseFloat(getComputedStyle(w, '::before').height) || 0}));""")
    cue = ui_strings(lang)["scroll_cue"]
    wide = [w for w in seen if w["wide"]]
    assert wide and len(wide) < len(seen), f"expected wide and narrow tables on this page: {seen}"
    for w in wide:  # reachable by Tab, named, and the line above it says it scrolls
        assert w["tabindex"] == "0" and w["label"] == cue and cue in w["cue"] and w["cueHeight"] > 5, w
    for w in seen:
        if not w["wide"]:
            assert w["tabindex"] is None and w["cue"] == "none", w


def test_a_table_wider_than_the_column_shows_a_shadow_where_it_scrolls(site_url, browser):
    browser.set_window_size(1280, 900)
    browser.get(site_url + "/compute/accelerators/")
    wrap = browser.execute_script(
        "const w = [...document.querySelectorAll('.md-typeset__scrollwrap')]"
        "  .find(e => e.scrollWidth > e.clientWidth + 20); w.scrollIntoView({block: 'center'}); return w;")
    left, right = _edge_shade(wrap.screenshot_as_png)
    assert right < left - 5, f"no shadow at the right edge, where the table continues ({left:.0f} vs {right:.0f})"
    browser.execute_script("arguments[0].scrollLeft = arguments[0].scrollWidth", wrap)
    left, right = _edge_shade(wrap.screenshot_as_png)
    assert left < right - 5, f"no shadow at the left edge once scrolled to the end ({left:.0f} vs {right:.0f})"
