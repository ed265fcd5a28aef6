"""Each page's meta description, from its own first paragraph, in its own language.

Without it every page, Chinese ones included, would carry the one English ``site_description``
(what search engines and link previews show). A page's front matter ``description`` wins.
"""

import html
import re

_ADMONITION = re.compile(r'<div class="admonition.*?</div>', re.S)   # the translation notice
_FIRST_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.S)
_MATH = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)  # before math_markup.py
_TAG = re.compile(r"<[^>]+>")
LIMIT = 160  # characters: what search results show of a description


def description(content: str) -> str | None:
    """The text of the first paragraph of ``content`` (a page's HTML) outside admonitions, math
    as its TeX, cut at a word (or, in Chinese, a character) before LIMIT characters with "…"."""
    match = _FIRST_PARAGRAPH.search(_ADMONITION.sub("", content))
    if not match:
        return None
    text = " ".join(html.unescape(_TAG.sub("", _MATH.sub(r"\1", match.group(1)))).split())
    if len(text) <= LIMIT:
        return text or None
    cut = text[:LIMIT - 1]
    if " " in cut[LIMIT // 2:]:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"


def on_page_content(content, page, config, files):
    if not page.meta.get("description"):
        found = description(content)
        if found:
            page.meta["description"] = found
    return content
