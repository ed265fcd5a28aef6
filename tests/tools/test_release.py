"""Releases (`make release`, tools/release.py): the CHANGELOG section tools/changelog.py writes from
git, the refusals before anything is built, CITATION.cff, and mike's versioned gh-pages branch
with Material's switcher, on throwaway repositories and a two-page site (never the whole book)."""

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT
from tools import changelog, release


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit(repo, files: dict, removed=(), message="change") -> None:
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text, encoding="utf-8")
    for path in removed:
        git(repo, "rm", "--quiet", path)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", message)


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "book"
    repo.mkdir()
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "config", "user.name", "Test")
    git(repo, "config", "user.email", "test@example.invalid")
    return repo


def test_the_section_lists_exactly_what_changed_since_the_last_tag(repo):
    commit(repo, {"book/en/net/index.md": "# Network\n", "book/en/net/nccl.md": "# NCCL {#nccl}\n",
                  "book/zh/net/nccl.md": "# NCCL\n", "scripts/net/bench.py": "", "data/net/ib.yml": "a: 1\n",
                  "README.md": "x\n"})
    git(repo, "tag", "v2025.12")
    commit(repo, {"book/en/net/index.md": "# Network\n\nmore\n"})
    git(repo, "tag", "v2026.01")
    commit(repo, {"book/en/net/nccl.md": "# NCCL tuning {#nccl}\n", "book/en/net/ports.md": "# Ports\n",
                  "book/zh/net/nccl.md": "# NCCL 调优\n", "scripts/net/probe.py": "", "README.md": "y\n",
                  "data/net/eth.yml": "b: 2\n"}, removed=["data/net/ib.yml"])
    assert changelog.last_tag(repo) == "v2026.01"
    text = changelog.section(repo, "2026.02", "2026-02-01", "v2026.01")
    rows = [line for line in text.splitlines() if line.startswith("- ")]
    assert text.startswith("## 2026.02 (2026-02-01)\n") and "since v2026.01" in text
    assert rows == ["- changed: `net/nccl.md` (NCCL tuning)", "- added: `net/ports.md` (Ports)",
                    "- added: `scripts/net/probe.py`",
                    "- added: `data/net/eth.yml`", "- removed: `data/net/ib.yml`"]


def test_the_section_goes_above_the_older_ones_once(repo, tmp_path):
    commit(repo, {"book/en/a.md": "# A\n"})
    log = tmp_path / "CHANGELOG.md"
    changelog.write(log, repo, "2026.01", "2026-01-05", None)
    commit(repo, {"book/en/b.md": "# B\n"})
    git(repo, "tag", "v2026.01", "HEAD~1")
    changelog.write(log, repo, "2026.02", "2026-02-05", changelog.last_tag(repo))
    text = log.read_text(encoding="utf-8")
    assert text.startswith("# Changelog\n") and changelog.versions(text) == ["2026.02", "2026.01"]
    assert "- added: `b.md` (B)" in text.split("## 2026.01")[0]
    with pytest.raises(changelog.ChangelogError, match="already has a section for 2026.02"):
        changelog.write(log, repo, "2026.02", "2026-02-05", "v2026.01")


@pytest.mark.parametrize("version", ["2026.13", "2026.1", "26.11", "v2026.11", "2026.11.1", "2026-11", ""])
def test_a_version_not_shaped_yyyy_mm_is_refused_in_one_line(version, capsys):
    with pytest.raises(SystemExit) as exited:
        release.main([version])
    err = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2
    assert err[-1] == f"release.py: error: VERSION={version!r}: expected YYYY.MM, e.g. 2026.11"


def test_a_dirty_tree_an_existing_tag_and_a_deployed_version_are_refused(repo):
    commit(repo, {"book/en/a.md": "# A\n"})
    release.preflight(repo, "2026.01")  # clean, no tags: allowed
    (repo / "book/en/a.md").write_text("# A, edited\n", encoding="utf-8")
    with pytest.raises(release.ReleaseError, match="uncommitted or untracked changes"):
        release.preflight(repo, "2026.01")
    git(repo, "checkout", "--quiet", "--", ".")
    (repo / "notes.txt").write_text("untracked\n", encoding="utf-8")
    with pytest.raises(release.ReleaseError, match="untracked"):
        release.preflight(repo, "2026.01")
    (repo / "notes.txt").unlink()
    git(repo, "tag", "v2026.01")
    with pytest.raises(release.ReleaseError, match="tag v2026.01 exists"):
        release.preflight(repo, "2026.01")
    commit(repo, {"CHANGELOG.md": "# Changelog\n\n## 2026.02 (2026-02-01)\n"})
    with pytest.raises(release.ReleaseError, match="CHANGELOG.md already has a section for 2026.02"):
        release.preflight(repo, "2026.02")
    git(repo, "checkout", "--quiet", "--orphan", "gh-pages")
    git(repo, "rm", "-r", "--quiet", "--cached", ".")
    commit(repo, {"versions.json": '[{"version": "2026.03", "title": "2026.03", "aliases": []}]'})
    git(repo, "clean", "-fdq")
    git(repo, "checkout", "--quiet", "main")
    with pytest.raises(release.ReleaseError, match="gh-pages already holds version 2026.03"):
        release.preflight(repo, "2026.03")


def test_a_clone_with_a_symlinked_venv_and_node_modules_is_clean(repo, tmp_path):
    # a release clone (and each worktree) links .venv and build/node_modules to a shared copy; a
    # link is no folder to git, so a .gitignore line with a trailing slash does not ignore it
    commit(repo, {".gitignore": (ROOT / ".gitignore").read_text(encoding="utf-8"), "build/build_book.py": ""})
    for name in (".venv", "build/node_modules"):
        (tmp_path / name).mkdir(parents=True)
        (repo / name).symlink_to(tmp_path / name)
    for built in (".cache/pdf/en-home-0.pdf", "dist/site/index.html", "site/index.html"):
        (repo / built).parent.mkdir(parents=True, exist_ok=True)
        (repo / built).write_text("built\n", encoding="utf-8")
    release.preflight(repo, "2026.01")


def test_make_release_needs_a_version_and_hands_it_to_the_script():
    dry = subprocess.run(["make", "-n", "release", "VERSION=2026.11"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0 and "tools/release.py '2026.11'" in dry.stdout, dry.stderr
    missing = subprocess.run(["make", "-n", "release"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode != 0 and "VERSION=YYYY.MM is required" in missing.stderr


def test_the_citation_file_is_cff_and_names_the_latest_release():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert cff["message"].strip() and cff["title"] == "The ML Engineering Open Book"
    assert cff["authors"] and all(a.get("name") or a.get("family-names") for a in cff["authors"])
    assert cff["license"] == ["CC-BY-SA-4.0", "MIT"]
    released = changelog.versions((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert str(cff["version"]) == (released[0] if released else "development")


def test_a_release_sets_the_citations_version_and_date(tmp_path):
    cff = tmp_path / "CITATION.cff"
    cff.write_text((ROOT / "CITATION.cff").read_text(encoding="utf-8"), encoding="utf-8")
    release.set_citation(cff, "2026.11", "2026-11-30", "https://example.org/book")
    release.set_citation(cff, "2026.12", "2026-12-31")
    data = yaml.safe_load(cff.read_text(encoding="utf-8"))
    assert (data["version"], data["date-released"]) == ("2026.12", "2026-12-31")
    assert data["repository-code"] == "https://example.org/book" and data["cff-version"] == "1.2.0"


TINY_SITE = """\
site_name: Tiny
theme: {name: material}
extra: {version: {provider: mike}}
nav: [index.md, second.md]
"""


@pytest.mark.slow
def test_two_releases_of_a_tiny_site_are_two_versions_and_latest_is_the_newer(repo):
    """mkdocs builds a two-page Material site twice; release.deploy puts each in gh-pages as mike does."""
    commit(repo, {"mkdocs.yml": TINY_SITE, "docs/index.md": "# Home\n\nfirst\n", "docs/second.md": "# Second\n"})
    site = repo.parent / "site"

    def build() -> None:
        cmd = [sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", str(site)]
        subprocess.run(cmd, cwd=repo, check=True, capture_output=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": ""})

    build()
    release.deploy(repo, site, "2026.01")
    commit(repo, {"docs/index.md": "# Home\n\nsecond\n"})
    build()
    release.deploy(repo, site, "2026.02")

    files = git(repo, "ls-tree", "-r", "--name-only", "gh-pages").split()
    assert {"2026.01/index.html", "2026.01/second/index.html", "2026.02/index.html",
            "2026.02/second/index.html", "versions.json", "index.html"} <= set(files)
    versions = json.loads(git(repo, "show", "gh-pages:versions.json"))
    assert [(v["version"], v["aliases"]) for v in versions] == [("2026.02", ["latest"]), ("2026.01", [])]
    assert git(repo, "show", "gh-pages:latest") == "2026.02"  # a symbolic link to the newer folder
    assert "first" in git(repo, "show", "gh-pages:2026.01/index.html")
    assert "second" in git(repo, "show", "gh-pages:2026.02/index.html")
    assert 'url=latest/' in git(repo, "show", "gh-pages:index.html")
    config = git(repo, "show", "gh-pages:2026.02/index.html").split('id="__config"')[1]
    assert '"provider": "mike"' in config.split("</script>")[0].replace('":"', '": "')
    assert git(repo, "status", "--porcelain") == ""  # mike committed to gh-pages only
    # the frozen older version's Chinese pages list the newer version too
    older = json.loads(git(repo, "show", "gh-pages:2026.01/versions.json"))
    assert [(v["version"], v["title"], v["aliases"]) for v in older] == [
        ("../2026.02/zh", "2026.02", ["latest"]), ("../2026.01/zh", "2026.01", ["zh"])]


def test_chinese_pages_find_their_version_and_link_to_the_chinese_pages_of_the_others():
    """Material resolves an entry's link as ../<version>/ from the page's base, <folder>/zh/ on a
    Chinese page, and takes the base's last folder (zh) as the current version's alias."""
    from urllib.parse import urljoin

    versions = [{"version": "2026.02", "title": "2026.02", "aliases": ["latest"]},
                {"version": "2026.01", "title": "2026.01", "aliases": []}]
    listed = release.chinese_versions(versions, "2026.01")
    base = "https://book.example/2026.01/zh/"
    assert [urljoin(base, f"../{v['version']}/") for v in listed] == [
        "https://book.example/2026.02/zh/", "https://book.example/2026.01/zh/"]
    assert [v["title"] for v in listed if "zh" in v["aliases"]] == ["2026.01"]


@pytest.mark.parametrize("version, cover", [("2026.11", "Version 2026.11, 2026-11-30"),
                                             (None, "Development edition of 2026-11-30")])
def test_the_pdf_cover_says_which_version_it_is(version, cover, monkeypatch, tmp_path):
    sys.path.insert(0, str(ROOT / "build"))
    import pdf_book

    strings = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nplugins:")[1]
                             .split("\n  mkdocs-jupyter:")[0])["i18n"]["languages"][0]["extra"]["strings"]
    monkeypatch.setattr(pdf_book, "content_date", lambda: "2026-11-30")
    book = pdf_book.Book("en", "Book", strings, None, [], None, version)
    assert f'<p class="cover-date">{cover}</p>' in pdf_book.front_html(book, [], {}, tmp_path)


def test_a_release_copies_each_languages_pdf_and_epub_under_its_version(monkeypatch, tmp_path):
    """release.build hands BOOK_VERSION to build_book.py and copies what it made to dist/ (the
    build itself is faked: the whole book is built by tests/build/)."""
    seen = {}

    def fake_build(cmd, cwd, env):
        seen["version"] = env["BOOK_VERSION"]
        site = tmp_path / "dist" / "site"
        for lang in ("en", "zh"):
            for kind in ("pdf", "epub"):
                (site / kind).mkdir(parents=True, exist_ok=True)
                (site / kind / f"ml-engineering-open-book-{lang}.{kind}").write_text(f"{lang} {kind}")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(release.subprocess, "run", fake_build)
    made = release.build(ROOT, "2026.11", tmp_path / "dist")
    assert seen["version"] == "2026.11"
    assert sorted(p.name for p in made) == [f"ml-engineering-open-book-2026.11-{lang}.{kind}"
                                            for lang in ("en", "zh") for kind in ("epub", "pdf")]
    assert (tmp_path / "dist" / "ml-engineering-open-book-2026.11-zh.epub").read_text() == "zh epub"
