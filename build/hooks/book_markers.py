"""Expand the book's marker lines into content, so chapters show tested files and recorded data.

A marker is an HTML comment alone on a line (invisible if the hook is absent):

    <!-- embed-script: scripts/network/all_reduce_bench.py -->
        a download link plus a collapsible block with the file itself (pymdownx.snippets),
        so the page always shows the code the tests run
    <!-- data-table: data/network/pcie.yml -->
        a spec table from a YAML data file, in the page's language (tools/tables.py)
    <!-- results-table: results/network/all_reduce_bench-cpu-gloo-2proc.json -->
        a table of measured results from a benchmark's --json output (tools/tables.py)

Paths are relative to the repository root. A missing file or a bad table fails the build
with the page named. The files under scripts/, data/ and results/ are copied into the site.
"""

import re
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from _book import MARKER, ROOT, page_language, site_root_prefix, tool

tables = tool("tables")

_LEXERS = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".slurm": "bash", ".yml": "yaml"}
_LABELS = {
    "en": ("Download", "Full source of"),
    "zh": ("下载", "完整源码："),
}


def _embed_script(rel: str, page, pdf_build: bool) -> str:
    path = ROOT / rel
    download, full_source = _LABELS[page_language(page)]
    lexer = _LEXERS.get(path.suffix, "text")
    href = site_root_prefix(page) + rel
    # The PDF prints the whole file below; a relative download link would dangle there.
    link = "" if pdf_build else (
        f'<p class="script-download"><a href="{href}" download>{download} <code>{rel}</code></a></p>\n\n'
    )
    if pdf_build:
        # Printed as a plain code block: WeasyPrint 70 stopped laying out the rest of the book
        # after a long source inside a collapsible block (<details>).
        return f'**{full_source} `{rel}`**\n\n```{lexer}\n--8<-- "{rel}"\n```\n'
    return (
        link
        + f'??? example "{full_source} `{rel}`"\n'
        f"    ```{lexer}\n"
        f'    --8<-- "{rel}"\n'
        f"    ```\n"
    )


def on_page_markdown(markdown, page, config, files):
    def expand(match):
        kind, rel = match.groups()
        if not (ROOT / rel.split("#", 1)[0]).is_file():  # data-table FILE#VIEW
            raise PluginError(f"{page.file.src_uri}: {kind} marker names a missing file: {rel}")
        if kind == "embed-script":
            return _embed_script(rel, page, bool(config.extra.get("pdf_build")))
        try:
            return tables.render(ROOT / rel, page_language(page))
        except tables.TableError as err:
            raise PluginError(f"{page.file.src_uri}: {err}") from err

    return MARKER.sub(expand, markdown)


# A downloaded notebook reads the book's files from this address (book_file() in the notebooks).
_NOTEBOOK_SITE = re.compile(r'(BOOK_SITE = os\.environ\.get\(\\"BOOK_SITE_URL\\", \\")[^"\\]*(\\")')


@event_priority(-100)  # after mkdocs-jupyter has copied the notebooks next to their pages
def on_post_build(config):
    """Copy scripts/, data/ and results/ into the site: the download links of the embedded scripts
    point there, and a notebook downloaded from the site reads its data from there. When the site
    has an address (``site_url``, set from BOOK_SITE_URL by the publishing workflow), the
    downloadable notebooks are pointed at it."""
    site = Path(config.site_dir)
    for folder in ("scripts", "data", "results"):
        shutil.copytree(ROOT / folder, site / folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if config.site_url:
        for notebook in site.rglob("*.ipynb"):
            text = notebook.read_text(encoding="utf-8")
            notebook.write_text(_NOTEBOOK_SITE.sub(rf"\g<1>{config.site_url}\g<2>", text), encoding="utf-8")
