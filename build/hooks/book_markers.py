"""Expand the book's marker lines into content, so chapters show tested files and recorded data.

A marker is an HTML comment alone on a line (invisible if the hook is absent):

    <!-- embed-script: scripts/network/all_reduce_bench.py -->
        on the site, a download link plus a collapsible block with the file itself
        (pymdownx.snippets), so the page always shows the code the tests run; in the PDF, the
        script's docstring (purpose, usage, example output) and a link to its full listing in
        the appendix
    <!-- scripts-appendix -->
        the appendix (book/<lang>/appendix/scripts.md): every embedded script in nav order
    <!-- data-table: data/network/pcie.yml -->
        a spec table from a YAML data file, in the page's language (tools/tables.py)
    <!-- results-table: results/network/all_reduce_bench-cpu-gloo-2proc.json -->
        a table of measured results from a benchmark's --json output (tools/tables.py)
    <!-- results-table: mamf_finder -->
    <!-- results-table: results/compute/mamf_finder-*.json -->
        every results file of a benchmark (by name, or a glob): one summary row per measured
        file, then the published figures (origin: published) with a source per row

Paths are relative to the repository root. A missing file or a bad table fails the build
with the page named. The files under scripts/, data/ and results/ are copied into the site.
"""

import ast
import posixpath
import re
import shutil
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

from _book import MARKER, ROOT, nav_sources, page_language, site_root_prefix, strings, tool

tables = tool("tables")

_LEXERS = {".py": "python", ".sh": "bash", ".sbatch": "bash", ".slurm": "bash", ".yml": "yaml"}
APPENDIX = "appendix/scripts.md"  # the page that lists every embedded script (in full in the PDF)
_APPENDIX_MARKER = re.compile(r"^<!-- scripts-appendix -->[ \t]*$", re.M)


def script_summary(path: Path) -> str:
    """What a script says about itself: a Python file's module docstring (purpose, units, how to
    launch it, an example output), or a shell script's leading comment block."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    lines = text.splitlines()[1:] if text.startswith("#!") else text.splitlines()
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line[1:].removeprefix(" "))
    return "\n".join(block).strip()


def script_anchor(rel: str) -> str:
    return "script-" + re.sub(r"[^a-z0-9]+", "-", rel.lower()).strip("-")


def embedded_scripts(config) -> list[tuple[str, str]]:
    """(chapter source path, script path) for every embed-script marker of the English pages, in
    the order of the nav: the appendix lists the scripts in the order a reader meets them."""
    found = []
    for src in nav_sources(config["nav"]):
        if src.endswith(".md"):
            text = (ROOT / "book" / "en" / src).read_text(encoding="utf-8")
            found += [(src, rel) for kind, rel in MARKER.findall(text) if kind == "embed-script"]
    return found


def _appendix_link(page) -> str:
    lang = page_language(page)
    return posixpath.relpath(f"{lang}/{APPENDIX}", posixpath.dirname(page.file.src_uri))


def _embed_script(rel: str, page, config) -> str:
    text = strings(config)
    lexer = _LEXERS.get(Path(rel).suffix, "text")
    if config.extra.get("pdf_build"):
        # The PDF keeps the chapter's flow: what the script does and how to run it, here; the
        # listing, in the appendix. (A listing inside <details> also made WeasyPrint 70 stop
        # laying out the rest of the book.)
        summary = script_summary(ROOT / rel)
        link = f"{_appendix_link(page)}#{script_anchor(rel)}"
        return (f"**`{rel}`**\n\n```text\n{summary}\n```\n\n"
                f"{text['script_full_listing']} [`{rel}`]({link})\n")
    href = site_root_prefix(page) + rel
    return (
        f'<p class="script-download"><a href="{href}" download>{text["script_download"]} <code>{rel}</code></a></p>\n\n'
        f'??? example "{text["script_full_source"]} `{rel}`"\n'
        f"    ```{lexer}\n"
        f'    --8<-- "{rel}"\n'
        f"    ```\n"
    )


# The script contract (CONTRIBUTING.md): one block of code, identical in every Python script.
_CONTRACT = re.compile(r"^# --- script contract.*?^# --- end of script contract ---$", re.M | re.S)


def _listing(rel: str, contract_elided: str) -> str:
    """The script's text for the PDF appendix, with the contract block (printed once, at the
    start of the appendix) replaced by one comment line saying so."""
    source = (ROOT / rel).read_text(encoding="utf-8")
    return _CONTRACT.sub(lambda _: f"# {contract_elided}", source).rstrip("\n")


def _appendix(page, config) -> str:
    """Every embedded script, one section each: in the PDF its full listing (the contract block
    that every Python script shares printed once, first); on the site (whose chapters show the
    listings) its purpose, the chapters that use it and a download link."""
    text = strings(config)
    pdf = config.extra.get("pdf_build")
    lang = page_language(page)
    chapters: dict[str, list[str]] = {}
    for src, rel in embedded_scripts(config):
        chapters.setdefault(rel, []).append(src)
    sections = []
    if pdf:
        first = next(rel for rel in chapters if rel.endswith(".py"))
        block = _CONTRACT.search((ROOT / first).read_text(encoding="utf-8"))[0]
        sections.append(f"## {text['appendix_contract_title']} {{#script-contract}}\n\n"
                        f"{text['appendix_contract_intro']}\n\n```python\n{block}\n```\n")
    for rel, used_in in chapters.items():
        section = f"## `{rel}` {{#{script_anchor(rel)}}}\n\n"
        if pdf:
            lexer = _LEXERS.get(Path(rel).suffix, "text")
            section += f"```{lexer}\n{_listing(rel, text['appendix_contract_elided'])}\n```\n"
        else:
            purpose = script_summary(ROOT / rel).split("\n\n")[0].replace("\n", " ")
            links = ", ".join(
                f"[{_title(lang, src)}]({posixpath.relpath(src, posixpath.dirname(APPENDIX))})" for src in used_in)
            href = site_root_prefix(page) + rel
            section += (f"{purpose}\n\n{text['appendix_used_in']} {links} · "
                        f'<a href="{href}" download>{text["script_download"]}</a>\n')
        sections.append(section)
    return "\n".join(sections)


def _title(lang: str, src: str) -> str:
    """A page's first-level heading, as its readers see it."""
    for line in (ROOT / "book" / lang / src).read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return src


def on_page_markdown(markdown, page, config, files):
    def expand(match):
        kind, rel = match.groups()
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
