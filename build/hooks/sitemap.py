"""The sitemaps: none without the site's address, and one per translation beside the main one.

mkdocs writes sitemap.xml even when ``site_url`` is unset (BOOK_SITE_URL, mkdocs.yml), and its
every ``<loc>`` is then "None" followed by a path. A sitemap needs absolute addresses, so a build
that does not know its own leaves it out.

With the address, mkdocs-static-i18n writes one sitemap.xml of both languages at the site's root.
Material's version switcher reads the sitemap of the chosen version's base to stay on the same page;
on a Chinese page that base is <version>/zh/ (see tools/release.py chinese_versions), so each
translation gets <lang>/sitemap.xml too: its own pages, under their common root <site>/<lang>/.
"""

import re
from pathlib import Path
from urllib.parse import urljoin

from mkdocs.plugins import event_priority

URL = re.compile(r"[ \t]*<url>.*?</url>\n?", re.DOTALL)


def language_sitemaps(site_dir: Path, site_url: str, langs: list[str]) -> None:
    """<site_dir>/<lang>/sitemap.xml for each of ``langs``: the <url> entries of the root sitemap
    whose <loc> is under ``site_url``/<lang>/ (the language's home page among them)."""
    text = (site_dir / "sitemap.xml").read_text(encoding="utf-8")
    entries = URL.findall(text)
    head = text[: text.index(entries[0])] if entries else text.replace("</urlset>", "")
    for lang in langs:
        root = urljoin(site_url, f"{lang}/")
        own = [e for e in entries if re.search(r"<loc>\s*(\S+?)\s*</loc>", e).group(1).startswith(root)]
        (site_dir / lang / "sitemap.xml").write_text(head + "".join(own) + "</urlset>\n", encoding="utf-8")


@event_priority(-300)  # after mkdocs-static-i18n (-100) has written the sitemap of both languages
def on_post_build(config):
    site_dir = Path(config["site_dir"])
    if not config.get("site_url"):
        for name in ("sitemap.xml", "sitemap.xml.gz"):
            (site_dir / name).unlink(missing_ok=True)
        return
    languages = config["plugins"]["i18n"].config.languages
    language_sitemaps(site_dir, config["site_url"], [lang.locale for lang in languages if not lang.default])
