"""Keep notebooks rendered as pages under mkdocs-static-i18n, offline, with real alt text.

Fixes for things the plugins do on their own:

* mkdocs-static-i18n re-creates every File in its ``on_files`` (priority -100), after
  mkdocs-jupyter has wrapped the ``.ipynb`` files as documentation pages, so the notebooks
  would be copied raw instead of rendered (mkdocs-static-i18n issue #198). Running after it,
  we mark the notebook files as pages again.
* mkdocs-jupyter slugs headings to ASCII, so Chinese headings get empty ids and the page's
  table of contents points nowhere. We make it use the same Unicode slugs as the Markdown
  pages (pymdownx.slugs, lower case), for the heading ids and for the table of contents, and
  build the table of contents from the markdown cells themselves (see ``_notebook_toc``).
* mkdocs-jupyter's page template loads MathJax (our math is MathML made at build time, see
  math_markup.py) and would import Mermaid from a CDN if a cell had a diagram. The book promises
  that a page requests nothing from a third-party host, so those scripts are removed.
* mkdocs-jupyter's cache (rendered HTML by notebook content and options) keeps one folder and,
  after each build, deletes the entries that build did not use: the two languages' builds would
  delete each other's. Each language gets a folder of its own under ``.cache/mkdocs-jupyter/``,
  named with a hash of this hook and of the converters' versions (the cached HTML is made with
  the slugs set here), and a build deletes only unused entries of its own folder.
* nbconvert gives every image without alt text the placeholder "No description has been provided
  for this image". A code cell that draws images carries their alt text in its metadata, ``alt``,
  a list of strings, one per image output in order (``# %% alt=["..."]`` in the jupytext source;
  tools/notebooks.py check reports a cell whose count differs). ``on_page_content`` sets each
  rendered image's alt from it, matching the page's ``<img>`` data URIs to the notebook's image
  outputs in order, and fails the build where an image has no alt text or they do not match.
  build/pdf_book.py lays out these pages, so the PDF's HTML carries the same alt text (the PDF
  it writes is untagged, so the file itself keeps none).
"""

import hashlib
import html
import logging
import re
import shutil
from importlib.metadata import version
from pathlib import Path

import markdown
import mkdocs_jupyter.convert
import mkdocs_jupyter.plugin
import nbformat
from markdown.extensions.toc import TocExtension
from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from pymdownx.slugs import slugify

_slug = slugify(case="lower")
# nbconvert warns of every image without alt text before on_page_content below gives each its
# notebook's own: the warning would be noise on every build
logging.getLogger("traitlets").addFilter(lambda record: "Alternative text is missing" not in record.getMessage())


def _heading_id(text: str) -> str:
    return _slug(text, "-")


def _markdown_toc(markdown_source, toc_depth):
    md = markdown.Markdown(extensions=[TocExtension(toc_depth=toc_depth, slugify=_slug)])
    md.convert(markdown_source)
    return md.toc_tokens


def _notebook_toc(path, toc_depth):
    """(TOC tokens, title) from the notebook's markdown cells as written. mkdocs-jupyter reads them
    from its own Markdown export, which drops inline code (`max`), so a heading with code got a
    TOC link to an id that no heading has."""
    cells = nbformat.read(path, as_version=4).cells
    tokens = _markdown_toc("\n\n".join(c.source for c in cells if c.cell_type == "markdown"), toc_depth)
    title = next((t["name"] for t in tokens if t["level"] == 1), None)
    return tokens, title


mkdocs_jupyter.convert.slugify = _heading_id
mkdocs_jupyter.plugin._get_nb_toc_tokens = _notebook_toc

_NOTEBOOK_SCRIPTS = [
    # <!-- Load mathjax --> ... <!-- End of mathjax configuration -->
    re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S),
    # the module script that imports mermaid from cdnjs when a diagram is present
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>', re.S),
]


NOTEBOOK_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "mkdocs-jupyter"
_CACHE_SALT = hashlib.sha256(Path(__file__).read_bytes() + " ".join(
    version(name) for name in ("mkdocs-jupyter", "nbconvert", "nbformat", "pygments")).encode()).hexdigest()[:12]


def _evict_unused_of_this_build(self, config):
    """mkdocs-jupyter's on_post_build, limited to the folders this build's pages used."""
    used = self._used_cache_paths
    for folder in {path.parent for path in used}:
        for entry in folder.glob("*.json"):
            if entry not in used:
                entry.unlink(missing_ok=True)


mkdocs_jupyter.plugin.Plugin.on_post_build = _evict_unused_of_this_build


@event_priority(-200)  # after mkdocs-static-i18n's on_files (-100)
def on_files(files, config):
    jupyter = config.plugins["mkdocs-jupyter"]
    if jupyter.config["cache"]:  # one folder per language, as of this hook and these converters
        lang = config.plugins["i18n"].current_language
        folder = NOTEBOOK_CACHE / f"{lang}-{_CACHE_SALT}"
        for old in NOTEBOOK_CACHE.glob(f"{lang}-*"):
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        jupyter.config["cache_dir"] = str(folder)
    for file in files:
        if jupyter.should_include(file):
            file.is_documentation_page = lambda: True
    return files


def is_notebook(page) -> bool:
    return page.file.src_uri.endswith(".ipynb")


def on_post_page(output, page, config):
    if not is_notebook(page):
        return output
    for pattern in _NOTEBOOK_SCRIPTS:
        output = pattern.sub("", output)
    return output


_IMG = re.compile(r"<img\b[^>]*>")
_DATA_SRC = re.compile(r'\ssrc="data:image/[\w+.-]+;base64,([^"]*)"')  # an output's image
_ALT = re.compile(r'\salt="[^"]*"')


def image_alts(nb) -> list[tuple[set[str], str | None]]:
    """For every image output of the notebook, in order: (its images as base64 data, whitespace
    removed; its alt text, the entry of the same position in its cell's metadata ``alt``, or None)."""
    found = []
    for cell in nb.cells:
        alts = cell.get("metadata", {}).get("alt", [])
        alts = alts if isinstance(alts, list) else []
        images = [{"".join(data.split()) for mime, data in out.get("data", {}).items() if mime.startswith("image/")}
                  for out in cell.get("outputs", [])]
        images = [data for data in images if data]
        for i, data in enumerate(images):
            alt = alts[i] if i < len(alts) and isinstance(alts[i], str) else None
            found.append((data, alt))
    return found


def set_image_alts(content: str, nb, name: str) -> str:
    """``content`` (a rendered notebook) with each data-URI image's alt set from the notebook's
    metadata; PluginError naming ``name`` when an image has none or images and outputs differ."""
    outputs = image_alts(nb)
    position = 0

    def replace(match):
        nonlocal position
        tag = match.group(0)
        src = _DATA_SRC.search(tag)
        if src is None:
            return tag
        if position >= len(outputs):
            raise PluginError(f"{name}: the page shows more images than the notebook has image outputs")
        data, alt = outputs[position]
        position += 1
        if "".join(html.unescape(src.group(1)).split()) not in data:
            raise PluginError(f"{name}: image {position} of the page is not image output {position} of the notebook")
        if not alt or not alt.strip():
            raise PluginError(f"{name}: image output {position} has no alt text: give its code cell the metadata "
                              f'alt, one string per image (# %% alt=["..."] in the .py; see notebooks/README.md)')
        tag = _ALT.sub("", tag)
        return tag[:4] + f' alt="{html.escape(" ".join(alt.split()), quote=True)}"' + tag[4:]

    content = _IMG.sub(replace, content)
    if position != len(outputs):
        raise PluginError(f"{name}: the page shows {position} of the notebook's {len(outputs)} image outputs")
    return content


def on_page_content(content, page, config, files):
    if not is_notebook(page):
        return content
    return set_image_alts(content, nbformat.read(page.file.abs_src_path, as_version=4), page.file.src_uri)
