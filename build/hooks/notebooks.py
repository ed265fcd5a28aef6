"""Keep notebooks rendered as pages under mkdocs-static-i18n, and keep them offline.

Two fixes, both for things the plugins do on their own:

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
"""

import re

import markdown
import mkdocs_jupyter.convert
import mkdocs_jupyter.plugin
import nbformat
from markdown.extensions.toc import TocExtension
from mkdocs.plugins import event_priority
from pymdownx.slugs import slugify

_slug = slugify(case="lower")


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


@event_priority(-200)  # after mkdocs-static-i18n's on_files (-100)
def on_files(files, config):
    jupyter = config.plugins["mkdocs-jupyter"]
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
