"""What the build itself guarantees, checked on a two-page book that uses the real configuration,
hooks and build script (a few seconds a build instead of a full book's minutes):

- a broken link, anchor or image and a nav entry without a page fail the build, naming the file;
- a missing translation fails it; a stale one gets a notice linking the English page;
- the hooks load even when installed packages are named ``build`` or ``tools`` (PyPA's ``build``
  shadowed the folder once);
- an unchanged book is not built again, and any change to an input is seen.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from tests.build.book import ROOT, built_page

PAGES = {
    "index.md": "# Home\n\nSee [the network page](network/index.md).\n",
    "network/index.md": "# Network\n\n## Bandwidth\n\nBandwidth is measured in GBps.\n",
}
ZH_PAGES = {
    "index.md": "# 首页\n\n参见[网络](network/index.md)。\n",
    "network/index.md": "# 网络\n\n## 带宽\n\n带宽以 GBps 计。\n",
}
NAV = "nav:\n  - Home: index.md\n  - Network:\n      - network/index.md\n"


def _load_build_book():
    # An entry point of build/, loaded by its path; it imports pdf_book beside it, as a script's
    # folder is on sys.path when it runs.
    if str(ROOT / "build") not in sys.path:
        sys.path.insert(0, str(ROOT / "build"))
    spec = importlib.util.spec_from_file_location("build_book_for_tests", ROOT / "build" / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_book = _load_build_book()


def small_book(root: Path) -> Path:
    """A two-page book in both languages under ``root``, with the repository's configuration,
    hooks, tools and build script; translations recorded as current."""
    for name in ("build", "tools"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for config in ROOT.glob("mkdocs*.yml"):
        shutil.copy(config, root / config.name)
    config = root / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text[: text.index("\nnav:\n") + 1] + NAV, encoding="utf-8")
    for name in ("scripts", "data", "results", "notebooks"):
        (root / name).mkdir()
    for lang, pages in (("en", PAGES), ("zh", ZH_PAGES)):
        for rel, content in pages.items():
            path = root / "book" / lang / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
    zh_pages = [str(root / "book" / "zh" / rel) for rel in ZH_PAGES]
    subprocess.run([sys.executable, "tools/translations.py", "stamp", *zh_pages], cwd=root, check=True,
                   capture_output=True)
    return root


def build(root: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "build/build_book.py", "--no-pdf", "--site-dir", str(root / "site"), *args],
        cwd=root, capture_output=True, text=True, timeout=300, env=env,
    )


BROKEN = {
    "link": ("[broken](no-such-page.md)", "no-such-page.md"),
    "anchor": ("[anchor](index.md#no-such-anchor)", "no-such-anchor"),
    "image": ("![plot](no-such-image.png)", "no-such-image.png"),
}


@pytest.fixture(scope="module")
def broken_build(tmp_path_factory) -> str:
    """The output of one build of a book with every kind of broken reference at once (--strict
    reports every warning before it aborts)."""
    root = small_book(tmp_path_factory.mktemp("broken"))
    page = root / "book" / "en" / "network" / "index.md"
    links = "\n\n".join(link for link, _ in BROKEN.values())
    page.write_text(page.read_text(encoding="utf-8") + f"\n{links}\n", encoding="utf-8")
    config = root / "mkdocs.yml"
    config.write_text(config.read_text(encoding="utf-8") + "      - network/no-such-page.md\n", encoding="utf-8")
    result = build(root)
    assert result.returncode != 0, "a book with broken links built"
    return result.stdout + result.stderr


@pytest.mark.parametrize("kind", BROKEN)
def test_broken_reference_fails_the_build_naming_the_file(broken_build, kind):
    _, complaint = BROKEN[kind]
    lines = [line for line in broken_build.splitlines() if complaint in line]
    assert any("network/index.md" in line for line in lines), f"no message names the page and {complaint}"


def test_nav_entry_without_a_page_fails_the_build(broken_build):
    assert "network/no-such-page.md" in broken_build


def test_missing_translation_fails_the_build(tmp_path):
    root = small_book(tmp_path)
    (root / "book" / "zh" / "index.md").unlink()
    result = build(root)
    assert result.returncode != 0
    assert "book/zh/index.md" in result.stdout + result.stderr
    assert not (root / "site" / "index.html").exists(), "it built anyway"


@pytest.fixture(scope="module")
def stale_book(tmp_path_factory) -> Path:
    """A book whose Chinese home page is stale, built with packages named ``build`` and ``tools``
    importable ahead of the repository's folders."""
    root = small_book(tmp_path_factory.mktemp("stale"))
    english = root / "book" / "en" / "index.md"
    english.write_text(english.read_text(encoding="utf-8") + "\nA new English sentence.\n", encoding="utf-8")
    shadows = root.parent / f"{root.name}-shadows"
    for package in ("build", "tools"):
        (shadows / package).mkdir(parents=True)
        (shadows / package / "__init__.py").write_text('"""An unrelated installed package."""\n')
    env = {**os.environ, "PYTHONPATH": str(shadows)}
    result = build(root, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return root


def test_hooks_load_with_packages_named_build_and_tools_installed(stale_book):
    assert built_page(stale_book / "site", "en", "network/index.md").is_file()
    assert built_page(stale_book / "site", "zh", "network/index.md").is_file()


def test_stale_translation_gets_a_notice_linking_the_english_page(stale_book):
    site = stale_book / "site"
    zh_home_path = built_page(site, "zh", "index.md")
    zh_home = zh_home_path.read_text(encoding="utf-8")
    zh_network = built_page(site, "zh", "network/index.md").read_text(encoding="utf-8")
    assert "译文可能已过时" in zh_home
    assert "译文可能已过时" not in zh_network  # only the stale page carries the notice
    notice = BeautifulSoup(zh_home, "html.parser").select_one(".admonition.warning")
    target = (zh_home_path.parent / notice.find("a")["href"] / "index.html").resolve()
    assert target == built_page(site, "en", "index.md").resolve()


def test_unchanged_book_is_not_built_again(stale_book):
    index = built_page(stale_book / "site", "en", "index.md")
    before = index.stat().st_mtime_ns
    result = build(stale_book)
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout
    assert index.stat().st_mtime_ns == before, "the site was written again"


def test_a_changed_book_is_built_again(stale_book, tmp_path):
    root = tmp_path / "book-copy"
    shutil.copytree(stale_book, root, symlinks=True)
    page = root / "book" / "en" / "network" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nOne more sentence.\n", encoding="utf-8")
    result = build(root)
    assert result.returncode == 0, result.stderr
    assert "up to date" not in result.stdout
    assert "One more sentence." in built_page(root / "site", "en", "network/index.md").read_text(encoding="utf-8")


def _tree(root: Path) -> Path:
    for rel, content in {"book/en/a.md": "a", "scripts/x/s.py": "print(1)", "mkdocs.yml": "site_name: t",
                         "notebooks/n.ipynb": "{}"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return root


@pytest.mark.parametrize("change", ["edit", "rename", "add", "delete", "relink", "config", "commit"])
def test_every_kind_of_input_change_changes_the_digest(tmp_path, change):
    root = _tree(tmp_path)
    (root / "book" / "en" / "n.ipynb").symlink_to("../../notebooks/n.ipynb")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    if change == "commit":  # the same files, now committed: the pages' "last update" changes
        subprocess.run([*git, "init", "-q"], check=True)
        subprocess.run([*git, "add", "-A"], check=True)
    before = build_book.inputs_digest(root)
    if change == "commit":
        subprocess.run([*git, "commit", "-qm", "pages"], check=True)
    elif change == "edit":
        (root / "scripts/x/s.py").write_text("print(2)")
    elif change == "rename":
        (root / "scripts/x/s.py").rename(root / "scripts/x/t.py")
    elif change == "add":
        (root / "data").mkdir()
        (root / "data/new.yml").write_text("rows: []")
    elif change == "delete":
        (root / "book/en/a.md").unlink()
    elif change == "relink":
        (root / "book/en/n.ipynb").unlink()
        (root / "book/en/n.ipynb").symlink_to("../../notebooks/other.ipynb")
    elif change == "config":
        (root / "mkdocs.yml").write_text("site_name: u")
    assert build_book.inputs_digest(root) != before


def test_caches_and_outputs_do_not_count_as_inputs(tmp_path):
    root = _tree(tmp_path)
    before = build_book.inputs_digest(root)
    (root / "scripts/x/__pycache__").mkdir()
    (root / "scripts/x/__pycache__/s.cpython-311.pyc").write_bytes(b"\0")
    (root / "site").mkdir()
    (root / "site/index.html").write_text("<html></html>")
    assert build_book.inputs_digest(root) == before
