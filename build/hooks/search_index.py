"""One search index per language, without the code listings.

mkdocs-static-i18n writes one index for both languages to search/search_index.json, which every
page loads: an English reader got Chinese results, and 70 % of its 7.7 MB was code listings (every
embedded script in full). After the build this hook splits it: the English pages' index stays at
search/search_index.json, each other language's goes to <lang>/search/search_index.json, with
each entry's <pre> blocks and notebook code cells left out (inline code stays: an option or a
variable in the prose is still found). Material loads the index from the ``base`` of the page's
``__config``, so the pages of another language get that language's root as their base (search
results resolve against it too: their locations lose the language prefix).

The code listings are left out before Material's search plugin reads a page, not only after: its
HTML parser took a third of the site build, most of it on the syntax-highlighted spans of the
embedded scripts, all of which the split then threw away.
"""

import json
import re
from pathlib import Path

import material.plugins.search.plugin as material_search
from mkdocs.plugins import event_priority

from tools.book import page_language

DEFAULT = "en"  # mkdocs.yml: the i18n plugin's default language, built at the site root
_CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)
_CODE = re.compile(r"<pre[^>]*>.*?</pre>", re.S)
# A notebook's code cell reaches the index as text: "In [2]: Copied!" and its source, up to the
# next paragraph, output or cell; an output's "Out[2]:" prompt alone.
_NOTEBOOK_CELL = re.compile(r"In\s\[\d*\]:\s*Copied!.*?(?=<p>|<h\d|Out\s?\[\d*\]:|In\s\[\d*\]:|$)|Out\s?\[\d*\]:", re.S)


_add_entry_from_context = material_search.SearchIndex.add_entry_from_context


def _add_entry_without_code(self, page):
    """Material's SearchIndex.add_entry_from_context, shown the page without its <pre> blocks."""
    content = page.content
    page.content = _CODE.sub(" ", content or "")
    try:
        return _add_entry_from_context(self, page)
    finally:
        page.content = content


material_search.SearchIndex.add_entry_from_context = _add_entry_without_code


@event_priority(-50)
def on_post_page(output, page, config):
    lang = page_language(page)
    if lang == DEFAULT:
        return output

    def rebase(match):
        settings = json.loads(match.group(2))
        settings["base"] = f"{settings['base']}/{lang}/"  # the slash: a folder, for new URL(path, base)
        return match.group(1) + json.dumps(settings) + match.group(3)
    return _CONFIG.sub(rebase, output, count=1)


def split(site_dir: Path, others: set[str]) -> dict[str, int]:
    """Split ``site_dir``'s search index by language (``others``: the languages besides DEFAULT,
    each in its folder), code blocks left out; returns the bytes written per language. Does
    nothing (returns {}) where the index holds one language only: in the inner build of each other
    language, and on a site already split."""
    path = site_dir / "search" / "search_index.json"
    if not path.is_file():
        return {}
    index = json.loads(path.read_text(encoding="utf-8"))
    by_lang: dict[str, list] = {}
    for doc in index["docs"]:
        first = doc["location"].split("/", 1)[0]
        lang = first if first in others else DEFAULT
        if lang != DEFAULT:
            doc = {**doc, "location": doc["location"][len(lang) + 1:]}
        text = _NOTEBOOK_CELL.sub(" ", _CODE.sub(" ", doc["text"]))
        by_lang.setdefault(lang, []).append({**doc, "text": text})
    if len(by_lang) < 2:
        return {}
    written = {}
    for lang, docs in by_lang.items():
        config = {**index["config"], "lang": [DEFAULT] if lang == DEFAULT else index["config"]["lang"]}
        target = path if lang == DEFAULT else site_dir / lang / "search" / "search_index.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"config": config, "docs": docs}, ensure_ascii=False, separators=(",", ":"))
        target.write_text(text, encoding="utf-8")
        written[lang] = len(text.encode())
    return written


@event_priority(-200)  # after mkdocs-static-i18n (-100) has written the index of both languages
def on_post_build(config):
    others = {lang.locale for lang in config.plugins["i18n"].config.languages} - {DEFAULT}
    split(Path(config["site_dir"]), others)
