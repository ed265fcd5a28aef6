"""Expand the book's marker lines into content, so chapters show tested files and recorded data.

A marker is an HTML comment alone on a line (invisible if the hook is absent):

    <!-- embed-script: scripts/network/all_reduce_bench.py -->
        a download link plus a collapsible block with the file itself (pymdownx.snippets), so
        the page always shows the code the tests run (the PDF prints the script's docstring
        instead and points at the appendix: build/pdf_book.py)
    <!-- scripts-appendix -->
        the appendix (book/<lang>/appendix/scripts.md): every embedded script in nav order, with
        its purpose, launch line, chapters and where to get it. The purpose is the first paragraph
        of the script's docstring; on the Chinese page, its translation from
        book/zh/appendix/script_summaries.yml (tools/translations.py): a script without one
        fails the build, and one whose English paragraph changed since it was translated (stale)
        shows the English paragraph until it is re-translated and stamped
    <!-- data-table: data/network/pcie.yml -->
        a spec table from a YAML data file, in the page's language (tools/tables.py)
    <!-- results-table: results/network/all_reduce_bench-cpu-gloo-2proc.json -->
        a table of measured results from a benchmark's --json output (tools/tables.py)
    <!-- results-table: mamf_finder -->
    <!-- results-table: results/compute/mamf_finder-*.json -->
        every results file of a benchmark (by name, or a glob): one summary row per measured
        file, then the published figures (origin: published) with a source per row
    <!-- results-plot: layer_bench -->
        the figure of a benchmark's results (by name, a glob or one file) as its view file's
        `plot` draws it (tools/results.py plot_svg), inlined as an SVG data: URI so that the
        PDF and the EPUB take it as they take the notebooks' images; its alt text is the view's

Paths are relative to the repository root. A missing file or a bad table fails the build
with the page named. The files under scripts/, data/ and results/ are copied into the site.
"""

import base64
import html
import logging
import posixpath
import re
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from tools import results, tables, translations
from tools.book import (
    MARKER,
    ROOT,
    nav_sources,
    page_language,
    script_anchor,
    script_purpose,
    script_usage,
    site_root_prefix,
    strings,
)

# The markers of the generated block, contract and shared code (tools/script_contract.py, BEGIN and END)
CONTRACT_BEGIN, CONTRACT_END = "# --- script contract", "# --- end of script contract ---"
_LEXERS = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".slurm": "bash", ".yml": "yaml"}
APPENDIX = "appendix/scripts.md"  # the page that lists every embedded script
_APPENDIX_MARKER = re.compile(r"^<!-- scripts-appendix -->[ \t]*$", re.M)
log = logging.getLogger("mkdocs.hooks.book_markers")


def embedded_scripts(config) -> list[tuple[str, str]]:
    """(chapter source path, script path) for every embed-script marker of the English pages, in
    the order of the nav: the appendix lists the scripts in the order a reader meets them."""
    found = []
    for src in nav_sources(config["nav"]):
        if src.endswith(".md"):
            text = (ROOT / "book" / "en" / src).read_text(encoding="utf-8")
            found += [(src, rel) for kind, rel in MARKER.findall(text) if kind == "embed-script"]
    return found


def _embed_script(rel: str, page, config) -> str:
    """A download link and a collapsible block with the file itself (pymdownx.snippets). The PDF
    (build/pdf_book.py) prints the script's summary in their place and points at the appendix."""
    text = strings(config)
    lexer = _LEXERS.get(Path(rel).suffix, "text")
    href = site_root_prefix(page) + rel
    listing = f'    ```{lexer}\n    --8<-- "{rel}"\n    ```\n'
    lines = (ROOT / rel).read_text(encoding="utf-8").splitlines()
    begin = next((n for n, line in enumerate(lines, 1) if line.startswith(CONTRACT_BEGIN)), None)
    if begin:  # the generated contract, folded inside the listing: the script's own code comes first
        end = lines.index(CONTRACT_END, begin) + 1
        listing = (f'    ```{lexer}\n    --8<-- "{rel}:1:{begin - 1}"\n    ```\n\n'
                   f'    ??? note "{text["script_contract"]}"\n'
                   f'        ```{lexer}\n        --8<-- "{rel}:{begin}:{end}"\n        ```\n\n'
                   f'    ```{lexer}\n    --8<-- "{rel}:{end + 1}:"\n    ```\n')
    return (
        f'<p class="script-download"><a href="{href}" download>{text["script_download"]} <code>{rel}</code></a></p>\n\n'
        f'??? example "{text["script_full_source"]} `{rel}`"\n' + listing
    )


def _appendix(page, config) -> str:
    """Every embedded script, one section each, in the order a reader meets them: its purpose, how
    to launch it, the chapters that use it, and where to get it (the site's copy, the repository
    path). The full listings are on the chapters' pages of the site, not in the PDF."""
    text = strings(config)
    lang = page_language(page)
    try:
        summaries = translations.load_summaries(ROOT) if lang == "zh" else {}
    except ValueError as err:
        raise PluginError(f"{page.file.src_uri}: {err}") from err
    chapters: dict[str, list[str]] = {}
    for src, rel in embedded_scripts(config):
        chapters.setdefault(rel, []).append(src)
    sections = []
    for rel, used_in in chapters.items():
        # plain text: "task-<index>.txt" is not an HTML tag
        purpose = html.escape(_purpose(rel, lang, summaries, page), quote=False)
        usage = script_usage(ROOT / rel)
        links = ", ".join(
            f"[{_title(lang, src)}]({posixpath.relpath(src, posixpath.dirname(APPENDIX))})" for src in used_in)
        href = site_root_prefix(page) + rel
        sections.append(
            f"## `{rel}` {{#{script_anchor(rel)}}}\n\n{purpose}\n\n"
            + (f"{text['appendix_usage']} `{usage}`\n\n" if usage else "")
            + f"{text['appendix_used_in']} {links}\n\n"
            + f'{text["appendix_where"]} <a href="{href}" download>{text["script_download"]}</a> · '
            + f"{text['appendix_repository']} `{rel}`\n")
    return "\n".join(sections)


def _purpose(rel: str, lang: str, summaries: dict, page) -> str:
    """What a script is for, in the page's language: the first paragraph of its docstring, or on
    the Chinese page the translation recorded for it (tools/translations.py). No translation fails
    the build; a stale one gives the current English paragraph (tests/tools/test_translations.py
    fails until the translation is updated and stamped)."""
    english = script_purpose(ROOT / rel)
    if lang != "zh":
        return english
    status = translations.summary_status(rel, ROOT, summaries)
    if status.state == "ok":
        return summaries[rel]["zh"].strip()
    if status.state == "stale":
        log.info("%s: the Chinese summary of %s is stale, showing the English one "
                 "(python tools/translations.py status)", page.file.src_uri, rel)
        return english
    raise PluginError(
        f"{page.file.src_uri}: {rel} has no Chinese summary ({status.state}) in "
        f"{translations.SUMMARIES.as_posix()}: write its zh: entry, then run "
        f"`python tools/translations.py stamp {rel}`")


def _title(lang: str, src: str) -> str:
    """A page's first-level heading, as its readers see it."""
    for line in (ROOT / "book" / lang / src).read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return src


def _results_plot(spec: str, page) -> str:
    try:
        svg, alt = results.plot_svg(spec, page_language(page))
    except results.ResultsError as err:
        raise PluginError(f"{page.file.src_uri}: results-plot: {err}") from err
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return (f'<figure class="results-plot"><img alt="{html.escape(alt, quote=True)}" '
            f'src="data:image/svg+xml;base64,{data}"></figure>')


def on_page_markdown(markdown, page, config, files):
    def expand(match):
        kind, rel = match.groups()
        if kind == "results-plot":
            return _results_plot(rel, page)
        if kind == "results-table" and tables.is_results_summary(rel):
            try:  # a benchmark name or a glob: every results file of it (tools/tables.py)
                return tables.render(rel, page_language(page))
            except tables.TableError as err:
                raise PluginError(f"{page.file.src_uri}: {err}") from err
        if not (ROOT / rel.split("#", 1)[0]).is_file():  # data-table FILE#VIEW
            raise PluginError(f"{page.file.src_uri}: {kind} marker names a missing file: {rel}")
        if kind == "embed-script":
            return _embed_script(rel, page, config)
        try:
            return tables.render(ROOT / rel, page_language(page))
        except tables.TableError as err:
            raise PluginError(f"{page.file.src_uri}: {err}") from err

    markdown = _APPENDIX_MARKER.sub(lambda _: _appendix(page, config), markdown)
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
