"""A notebook downloaded from the site runs on its own: the copy the site offers is the notebook that
nbval executes from the repository (same cells, same outputs), and copied alone into an empty folder
it reads the book's data, results and scripts from the site (served here on loopback), through the
one loader that every notebook carries (``book_file``), identical in all of them. Only the loader
runs here: executing the whole notebook a second time would prove nothing nbval has not."""

import ast
import functools
import http.server
import importlib.util
import re
import shutil
import threading
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import nbformat
import pytest

from tests.build.book import LANGS, ROOT, built_page, nav_pages

NOTEBOOK_PAGES = [src for src in nav_pages() if src.endswith(".ipynb")]
# What a notebook asks for: book_file("…"), book_module("…", …) and the MAMF_RESULTS list.
BOOK_PATHS = re.compile(r'book_(?:file|module)\("([^"]+)"|"((?:data|results|scripts)/[\w./-]+\.\w+)"')


class Site:
    """The built site on an HTTP server on 127.0.0.1, remembering the paths it was asked for."""

    def __init__(self, root: Path):
        self.requested: list[str] = []
        site = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                site.requested.append(self.path)

        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"


@pytest.fixture(scope="module")
def site(built_site):
    served = Site(built_site)
    yield served
    served.server.shutdown()


def downloaded(built_site: Path, lang: str, src: str) -> Path:
    """The .ipynb that the page's download link offers (mkdocs-jupyter copies it next to the page)."""
    path = built_page(built_site, lang, src).parent / PurePosixPath(src).name
    assert path.is_file(), f"{lang} {src}: no downloadable notebook at {path}"
    return path


def asked_for(notebook: Path) -> set[str]:
    source = "\n".join(cell.source for cell in nbformat.read(notebook, as_version=4).cells if cell.cell_type == "code")
    source = re.sub(r'""".*?"""', "", source, flags=re.S)  # docstrings: book_file's names an example path
    return {a or b for a, b in BOOK_PATHS.findall(source)}


_SITE_LINE = re.compile(r'(BOOK_SITE = os\.environ\.get\("BOOK_SITE_URL", ")[^"]*(")')


def cells(notebook: Path) -> list[tuple[str, str, int]]:
    """(type, source, number of outputs) of each cell, the loader's default site address left out
    (the build points the downloadable copies at the site's own)."""
    return [(c.cell_type, _SITE_LINE.sub(r"\1\2", c.source), len(c.get("outputs", [])))
            for c in nbformat.read(notebook, as_version=4).cells]


def own_loader(notebook: Path, folder: Path, site_url: str, monkeypatch):
    """The notebook's own book_file, defined as the notebook defines it, running in ``folder`` with
    BOOK_SITE_URL set: what the notebook's code would read, without executing the rest of it (nbval
    executes the same notebook from the repository)."""
    monkeypatch.setenv("BOOK_SITE_URL", site_url)
    monkeypatch.chdir(folder)
    cell = next(c.source for c in nbformat.read(notebook, as_version=4).cells
                if c.cell_type == "code" and "def book_file" in c.source)
    namespace: dict = {}
    exec(compile(_loader_source_of(cell), f"{notebook.name}:loader", "exec"), namespace)
    return namespace["book_file"]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("src", NOTEBOOK_PAGES)
def test_downloaded_notebook_is_the_tested_one_and_reads_its_files_from_the_site(
        built_site, site, tmp_path, monkeypatch, lang, src):
    """The copy a reader downloads is the notebook nbval executes (same cells and outputs), and
    alone in an empty folder its loader reads every file the notebook asks for from the site."""
    notebook = Path(shutil.copy(downloaded(built_site, lang, src), tmp_path))
    assert cells(notebook) == cells((ROOT / "book" / lang / src).resolve()), "the download is not the tested notebook"
    if not asked_for(notebook):
        return  # it reads no file of the book (test_every_notebook_carries_the_same_loader)
    book_file = own_loader(notebook, tmp_path, site.url, monkeypatch)
    site.requested.clear()
    for rel in sorted(asked_for(notebook)):
        assert book_file(rel) == (ROOT / rel).read_bytes(), f"{rel}: the site serves other bytes"
    assert {"/" + rel for rel in asked_for(notebook)} <= set(site.requested), site.requested


def test_a_file_next_to_the_notebook_is_used_first(built_site, site, tmp_path, monkeypatch):
    src = "instabilities/loss_spike_detection.ipynb"
    notebook = Path(shutil.copy(downloaded(built_site, "en", src), tmp_path))
    (rel,) = asked_for(notebook)
    (tmp_path / Path(rel).name).write_bytes(b"the copy next to the notebook")
    book_file = own_loader(notebook, tmp_path, site.url, monkeypatch)
    site.requested.clear()
    assert book_file(rel) == b"the copy next to the notebook"
    assert site.requested == [], "read from the site although the file was next to the notebook"


def test_a_missing_file_is_one_clear_error(tmp_path, monkeypatch):
    namespace: dict = {}
    exec(compile(_loader_source(ROOT / "notebooks" / "compute" / "roofline.py"), "loader", "exec"), namespace)
    monkeypatch.chdir(tmp_path)
    namespace["BOOK_SITE"] = "http://127.0.0.1:9/"  # the discard port: nothing answers
    with pytest.raises(FileNotFoundError, match=r"data/none\.yml is not next to this notebook .* "
                                                r"http://127\.0\.0\.1:9/data/none\.yml failed"):
        namespace["book_file"]("data/none.yml")


def _loader(py: Path) -> dict[str, str]:
    """The loader's definitions in a notebook source, by name: BOOK_SITE, book_file and, where the
    notebook imports a script, book_module."""
    return _loader_defs(py.read_text(encoding="utf-8"))


def _loader_defs(text: str) -> dict[str, str]:
    lines = text.splitlines()
    found = {}
    for node in ast.parse(text).body:
        name = getattr(node, "name", None) or next(
            (t.id for t in getattr(node, "targets", []) if hasattr(t, "id")), None)
        if name in ("BOOK_SITE", "book_file", "book_module"):
            found[name] = "\n".join(lines[node.lineno - 1:node.end_lineno])
    return found


def _loader_source(py: Path) -> str:
    return _loader_source_of(py.read_text(encoding="utf-8"))


def _loader_source_of(text: str) -> str:
    imports = "import os\nimport sys\nimport urllib.request\nfrom pathlib import Path"
    return "\n\n".join([imports, *_loader_defs(text).values()])


LOADERS = sorted(py for py in (ROOT / "notebooks").rglob("*.py") if "def book_file" in py.read_text(encoding="utf-8"))


def test_every_notebook_carries_the_same_loader():
    # Each notebook must run alone after a download, so each carries its own copy; the copies must
    # not drift apart (the build rewrites the BOOK_SITE line of the downloadable copies).
    callers = sorted(py for py in (ROOT / "notebooks").rglob("*.py")
                     if re.search(r"\bbook_(file|module)\(", py.read_text(encoding="utf-8")))
    assert LOADERS and LOADERS == callers, "a notebook calls book_file/book_module without its own loader"
    reference: dict[str, str] = {}
    for py in LOADERS:
        own = _loader(py)
        assert {"BOOK_SITE", "book_file"} <= set(own), py
        for name, source in own.items():
            assert source == reference.setdefault(name, source), f"{py}: {name} differs from the other notebooks'"
    stale = [py for py in (ROOT / "notebooks").rglob("*.py") if "def repo_root" in py.read_text(encoding="utf-8")]
    assert not stale, f"notebooks that only run inside a clone: {stale}"


def test_the_site_serves_the_files_and_points_notebooks_at_its_address(tmp_path, monkeypatch):
    # build/hooks/book_markers.py's on_post_build, loaded by its path as mkdocs loads a hook
    spec = importlib.util.spec_from_file_location("book_markers_under_test",
                                                  ROOT / "build" / "hooks" / "book_markers.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    site = tmp_path / "site"
    (site / "compute").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "compute" / "roofline.ipynb", site / "compute")
    hooks.on_post_build(SimpleNamespace(site_dir=str(site), site_url="https://example.org/book/"))
    for rel in asked_for(site / "compute" / "roofline.ipynb"):
        assert (site / rel).is_file(), f"{rel} is not in the site"
    source = "\n".join(c.source for c in nbformat.read(site / "compute" / "roofline.ipynb", as_version=4).cells)
    assert 'BOOK_SITE = os.environ.get("BOOK_SITE_URL", "https://example.org/book/")' in source
