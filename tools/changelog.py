"""A CHANGELOG.md section for a release, generated from git: the chapters (book/en pages), scripts
and data files added, changed or removed since the last release tag. `make release` writes it
(tools/release.py); a person then edits it into sentences a reader wants.

    python tools/changelog.py VERSION [--since TAG] [--date YYYY-MM-DD] [--write CHANGELOG.md]

Without --write the section goes to stdout. --since defaults to the newest tag named v<digits>...
reachable from HEAD; without one, the section lists every file (the first release). Exit status 0,
1 when git fails or the changelog already has a section for VERSION, 2 on bad arguments.
"""

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (heading, folder, which files count): what a reader of the book cares about
GROUPS = (("Chapters", "book/en/", re.compile(r"\.(md|ipynb)$")),
          ("Scripts", "scripts/", re.compile(r"\.(py|sh)$")),
          ("Data", "data/", re.compile(r"\.(ya?ml|json|csv)$")))
STATUS = {"A": "added", "M": "changed", "D": "removed", "T": "changed"}
HEADER = ("# Changelog\n\nOne section per release (`make release VERSION=YYYY.MM`). tools/changelog.py writes it\n"
          "from git; then a person edits it into what a reader wants to know.\n")


class ChangelogError(Exception):
    pass


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ChangelogError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def last_tag(repo: Path) -> str | None:
    """The newest release tag (v2026.11, ...) reachable from HEAD, or None before the first release."""
    try:
        return git(repo, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*").strip() or None
    except ChangelogError:
        return None


def changes(repo: Path, since: str | None) -> list[tuple[str, str]]:
    """(status, path) of every file that differs between ``since`` and HEAD (every file when
    ``since`` is None); a rename counts as a removal and an addition."""
    if since is None:
        return [("A", path) for path in git(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines()]
    out = git(repo, "diff", "--no-renames", "--name-status", f"{since}..HEAD")
    return [(line[0], line.split("\t", 1)[1]) for line in out.splitlines() if line]


def title(repo: Path, path: str) -> str | None:
    """A page's first Markdown heading at HEAD, if it has one there."""
    if not path.endswith(".md"):
        return None
    try:
        text = git(repo, "show", f"HEAD:{path}")
    except ChangelogError:
        return None
    found = re.search(r"^# (.+?)(\s*\{#[^}]*\})?\s*$", text, re.MULTILINE)
    return found[1] if found else None


def section(repo: Path, version: str, date: str, since: str | None) -> str:
    found = changes(repo, since)
    since_line = f"Changes since {since}." if since else "The first release: every chapter, script and data file."
    note = "Generated from git by tools/changelog.py; edit before publishing."
    lines = [f"## {version} ({date})", "", f"{since_line} {note}", ""]
    for heading, folder, kind in GROUPS:
        rows = []
        for status, path in sorted(found, key=lambda f: f[1]):
            if not path.startswith(folder) or not kind.search(path):
                continue
            name = path[len(folder):] if folder.startswith("book/") else path
            page = title(repo, path) if status != "D" else None
            rows.append(f"- {STATUS.get(status, 'changed')}: `{name}`" + (f" ({page})" if page else ""))
        lines += [f"### {heading}", "", *(rows or ["- none"]), ""]
    return "\n".join(lines)


def versions(text: str) -> list[str]:
    """The versions of a changelog's sections, newest (topmost) first."""
    return re.findall(r"^## (\S+)", text, re.MULTILINE)


def insert(text: str, new: str) -> str:
    """The changelog with ``new`` above its newest section (below the header)."""
    text = text or HEADER
    first = re.search(r"^## ", text, re.MULTILINE)
    at = first.start() if first else len(text)
    head = text[:at].rstrip("\n") + "\n\n"
    return head + new.rstrip("\n") + "\n" + ("\n" + text[at:] if first else "")


def write(path: Path, repo: Path, version: str, date: str, since: str | None) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if version in versions(text):
        raise ChangelogError(f"{path.name} already has a section for {version}")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(insert(text, section(repo, version, date, since)), encoding="utf-8")
    tmp.replace(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="changelog.py", description="A CHANGELOG.md section generated from git.")
    parser.add_argument("version", help="the release, YYYY.MM")
    parser.add_argument("--since", help="the tag to compare with (default: the newest v* tag)")
    parser.add_argument("--date", default=datetime.date.today().isoformat(), help="release date (default: today)")
    parser.add_argument("--write", type=Path, metavar="CHANGELOG", help="insert the section into this file")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the git repository (default: this one)")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
        parser.error(f"--date {args.date!r}: expected YYYY-MM-DD")
    try:
        since = args.since or last_tag(args.repo)
        if args.write:
            write(args.write, args.repo, args.version, args.date, since)
        else:
            print(section(args.repo, args.version, args.date, since))
    except ChangelogError as err:
        print(f"changelog.py: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
