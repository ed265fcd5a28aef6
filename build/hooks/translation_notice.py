"""Put a notice on top of a Chinese page whose English source changed since it was translated.

Each page under book/zh/ records the sha256 of the English page it follows (front matter
``translation.source_sha256``; see tools/translations.py). When the English page has changed
since, the reader is told so and pointed at the current English page.
"""

from pathlib import Path

from tools.book import ROOT, site_root_prefix
from tools.translations import status_for

_NOTICE = """!!! warning "译文可能已过时 (this translation may be out of date)"
    本页翻译之后，英文原文已有更新。请同时参阅<a href="{href}">最新的英文版本</a>。
    The English page changed after this translation was made: see the <a href="{href}">current English page</a>.

"""


def on_page_markdown(markdown, page, config, files):
    status = status_for(Path(page.file.abs_src_path), root=ROOT)
    if status is None or status.state != "stale":
        return markdown
    # page.url is zh/<path>/; the English page is <path>/ at the site root.
    href = site_root_prefix(page) + page.url[len("zh/"):]
    return _NOTICE.format(href=href) + markdown
