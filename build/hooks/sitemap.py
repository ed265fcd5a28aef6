"""No sitemap without the site's address: mkdocs writes sitemap.xml even when ``site_url`` is unset
(BOOK_SITE_URL, mkdocs.yml), and its every ``<loc>`` is then "None" followed by a path. A sitemap
needs absolute addresses, so a build that does not know its own leaves it out.
"""

from pathlib import Path

from mkdocs.plugins import event_priority


@event_priority(-300)  # after mkdocs-static-i18n (-100) has written the sitemap of both languages
def on_post_build(config):
    if config.get("site_url"):
        return
    for name in ("sitemap.xml", "sitemap.xml.gz"):
        Path(config["site_dir"], name).unlink(missing_ok=True)
