"""A broken link or anchor, a missing translation and a stale translation are caught by the build."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from tests.build.book import ROOT, built_page

COPIED = ["mkdocs.yml", "book", "build", "tools", "scripts", "data", "results", "notebooks"]


@pytest.fixture
def book_copy(tmp_path) -> Path:
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tmp_path / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, tmp_path / name)
    return tmp_path


def build(root: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "build/build_book.py", "--no-pdf", "--site-dir", str(root / "site"), *args],
        cwd=root, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize(
    "link, complaint",
    [
        ("[broken](no-such-page.md)", "no-such-page.md"),
        ("[anchor](index.md#no-such-anchor)", "no-such-anchor"),
        ("![plot](no-such-image.png)", "no-such-image.png"),
    ],
)
def test_broken_link_fails_the_build_naming_the_file(book_copy, link, complaint):
    page = book_copy / "book" / "en" / "network" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\n\n{link}\n", encoding="utf-8")
    result = build(book_copy)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert complaint in output and "network/index.md" in output


def test_nav_entry_without_a_page_fails_the_build(book_copy):
    config = book_copy / "mkdocs.yml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("      - network/index.md\n", "      - network/index.md\n      - network/no-such-page.md\n"), encoding="utf-8")
    result = build(book_copy)
    assert result.returncode != 0
    assert "network/no-such-page.md" in result.stdout + result.stderr


def test_missing_translation_fails_the_build(book_copy):
    (book_copy / "book" / "zh" / "index.md").unlink()
    result = build(book_copy)
    assert result.returncode != 0
    assert "book/zh/index.md" in result.stdout + result.stderr


def test_stale_translation_gets_a_notice_linking_the_english_page(book_copy):
    english = book_copy / "book" / "en" / "index.md"
    english.write_text(english.read_text(encoding="utf-8") + "\nA new English sentence.\n", encoding="utf-8")
    result = build(book_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    zh_home_path = built_page(book_copy / "site", "zh", "index.md")
    zh_home = zh_home_path.read_text(encoding="utf-8")
    zh_network = built_page(book_copy / "site", "zh", "network/index.md").read_text(encoding="utf-8")
    assert "译文可能已过时" in zh_home
    assert "译文可能已过时" not in zh_network  # only the stale page carries the notice
    notice = BeautifulSoup(zh_home, "html.parser").select_one(".admonition.warning")
    target = (zh_home_path.parent / notice.find("a")["href"] / "index.html").resolve()
    assert target == built_page(book_copy / "site", "en", "index.md").resolve()
