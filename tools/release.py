"""Make a release of the book: `make release VERSION=YYYY.MM` runs this.

    python tools/release.py YYYY.MM [--dist dist]

In order, stopping at the first failure:
1. refuse a version not shaped YYYY.MM, a repository with uncommitted or untracked changes, and a
   version that exists (its tag v<version>, its CHANGELOG.md section or its folder in gh-pages);
2. build the site, both PDFs and both EPUBs (build/build_book.py into dist/site/) with BOOK_VERSION
   set, so the PDF and EPUB covers and metadata name the version, and Material's version switcher
   on (mike's versions.json); copy them to dist/ml-engineering-open-book-<version>-<lang>.pdf and
   .epub;
3. write the CHANGELOG.md section (tools/changelog.py: what changed since the last tag) and set
   CITATION.cff's version and date; commit both ("Release <version>") and tag it v<version>;
4. commit the built site to the local gh-pages branch with mike, as folder <version>/, with the
   alias `latest` moved to it and the site's root redirecting to `latest`, and give every version
   the list its Chinese pages' switcher reads (see chinese_versions; nothing is pushed).

A failed build leaves no tag and no commit. Exit status 0 when released, 1 when refused or a step
failed, 2 on a bad VERSION.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

try:
    from tools import changelog
except ImportError:  # run as tools/release.py without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools import changelog

ROOT = Path(__file__).resolve().parents[1]
VERSION = re.compile(r"20\d{2}\.(0[1-9]|1[0-2])")
BRANCH = "gh-pages"
LANGS = ("en", "zh")


class ReleaseError(Exception):
    pass


def git(repo: Path, *args: str) -> str:
    try:
        return changelog.git(repo, *args)
    except changelog.ChangelogError as err:
        raise ReleaseError(str(err)) from None


def deployed_versions(repo: Path) -> list[str]:
    """The versions in gh-pages' versions.json (mike's list), none when there is no such branch."""
    done = subprocess.run(["git", "-C", str(repo), "show", f"{BRANCH}:versions.json"],
                          capture_output=True, text=True, timeout=60)
    return [v["version"] for v in json.loads(done.stdout)] if done.returncode == 0 else []


def preflight(repo: Path, version: str) -> None:
    """Every reason not to release ``version`` from ``repo`` now, as a ReleaseError."""
    dirty = git(repo, "status", "--porcelain").splitlines()
    if dirty:
        raise ReleaseError(f"the working tree has {len(dirty)} uncommitted or untracked changes, "
                           f"e.g. {dirty[0].strip()!r}: commit or stash them first")
    if git(repo, "tag", "--list", f"v{version}").strip():
        raise ReleaseError(f"tag v{version} exists: version {version} was released")
    log = repo / "CHANGELOG.md"
    if log.exists() and version in changelog.versions(log.read_text(encoding="utf-8")):
        raise ReleaseError(f"CHANGELOG.md already has a section for {version}")
    if version in deployed_versions(repo):
        raise ReleaseError(f"{BRANCH} already holds version {version}")


def set_citation(path: Path, version: str, date: str, repo_url: str | None = None) -> None:
    """CITATION.cff's version, date-released and, when given, repository-code (each line added
    when missing)."""
    text = path.read_text(encoding="utf-8")
    values = [("version", f'"{version}"'), ("date-released", f'"{date}"')]
    for key, value in values + ([("repository-code", f'"{repo_url}"')] if repo_url else []):
        line = f"{key}: {value}"
        text, n = re.subn(rf"^{key}:.*$", line, text, flags=re.MULTILINE)
        if not n:
            text = text.rstrip("\n") + f"\n{line}\n"
    path.write_text(text, encoding="utf-8")


def build(repo: Path, version: str, dist: Path) -> list[Path]:
    """The versioned site into dist/site and the PDFs and EPUBs copied to their versioned names in
    dist/."""
    env = {**os.environ, "BOOK_VERSION": version, "BOOK_VERSION_PROVIDER": "mike"}
    site = dist / "site"
    done = subprocess.run([sys.executable, str(repo / "build" / "build_book.py"), "--site-dir", str(site)],
                          cwd=repo, env=env)
    if done.returncode != 0:
        raise ReleaseError("build/build_book.py failed (its message is above); nothing was tagged")
    made = []
    for lang in LANGS:
        for kind in ("pdf", "epub"):
            built = site / kind / f"ml-engineering-open-book-{lang}.{kind}"
            if not built.is_file():
                raise ReleaseError(f"the build made no {built.relative_to(dist)}")
            made.append(dist / f"ml-engineering-open-book-{version}-{lang}.{kind}")
            shutil.copyfile(built, made[-1])
    for name in (".build.lock", ".build-inputs.json"):  # build_book.py's bookkeeping, not the site's
        (site / name).unlink(missing_ok=True)
    return made


def record(repo: Path, version: str, date: str) -> None:
    """The CHANGELOG.md section and CITATION.cff's version, committed and tagged v<version>."""
    since = changelog.last_tag(repo)
    try:
        changelog.write(repo / "CHANGELOG.md", repo, version, date, since)
    except changelog.ChangelogError as err:
        raise ReleaseError(str(err)) from None
    set_citation(repo / "CITATION.cff", version, date, os.environ.get("BOOK_REPO_URL") or None)
    git(repo, "add", "CHANGELOG.md", "CITATION.cff")
    git(repo, "commit", "--quiet", "-m", f"Release {version}\n\nCHANGELOG.md section generated by tools/changelog.py.")
    git(repo, "tag", "-a", f"v{version}", "-m", f"The ML Engineering Open Book {version}")


def chinese_versions(versions: list[dict], folder: str) -> list[dict]:
    """The versions.json that the Chinese pages of version ``folder`` read, as <folder>/versions.json.
    Material looks for the list one folder above the page's base, which the i18n plugin sets to
    <folder>/zh/ on Chinese pages (not <folder>/, as Material expects: mkdocs-static-i18n issue
    265), and takes the base's last folder, "zh", for the current version. So each entry points
    one folder further up, at the version's Chinese pages, and this version's entry has the alias
    "zh"."""
    return [{**v, "version": f"../{v['version']}/{LANGS[1]}",
             "aliases": [*v["aliases"], *([LANGS[1]] if v["version"] == folder else [])]} for v in versions]


def deploy(repo: Path, site: Path, version: str) -> None:
    """``site`` as folder <version>/ of the gh-pages branch (mike), `latest` pointing at it, the
    root redirecting to `latest`, and each version's list for its Chinese pages (chinese_versions,
    rewritten in every version's folder: the older ones list the newer). Local commits only:
    nothing is pushed."""
    from mike import commands, git_utils  # the pinned mike (requirements/book.in)

    here = Path.cwd()
    os.chdir(repo)  # mike works on the repository of the current directory
    try:
        with commands.deploy({"site_dir": str(site), "use_directory_urls": True}, version,
                             aliases=["latest"], update_aliases=True, branch=BRANCH):
            pass  # already built: mike copies site_dir as it is
        commands.set_default("latest", branch=BRANCH, allow_empty=True)
        versions = json.loads(git(repo, "show", f"{BRANCH}:versions.json"))
        with git_utils.Commit(BRANCH, "versions.json of each version's Chinese pages") as commit:
            for v in versions:
                data = json.dumps(chinese_versions(versions, v["version"]), ensure_ascii=False) + "\n"
                commit.add_file(git_utils.FileInfo(f"{v['version']}/versions.json", data))
    finally:
        os.chdir(here)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description="Tag, build and deploy a release of the book.")
    parser.add_argument("version", help="YYYY.MM, e.g. 2026.11")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist",
                        help="where the site, PDFs and EPUBs go (default: dist/)")
    args = parser.parse_args(argv)
    if not VERSION.fullmatch(args.version):
        parser.error(f"VERSION={args.version!r}: expected YYYY.MM, e.g. 2026.11")
    date = datetime.date.today().isoformat()
    if not os.environ.get("BOOK_SITE_URL"):  # no site_url, no sitemap.xml: the switcher needs one
        print("release.py: warning: BOOK_SITE_URL is not set, so the version switcher opens each "
              "version's home page instead of the same page there", file=sys.stderr)
    try:
        preflight(ROOT, args.version)
        books = build(ROOT, args.version, args.dist.resolve())
        record(ROOT, args.version, date)
        deploy(ROOT, args.dist.resolve() / "site", args.version)
    except ReleaseError as err:
        print(f"release.py: error: {err}", file=sys.stderr)
        return 1
    print(f"release.py: released {args.version}: tag v{args.version}, {BRANCH} (not pushed), "
          + ", ".join(str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for p in books)
          + "; edit the new CHANGELOG.md section, then push the tag and gh-pages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
