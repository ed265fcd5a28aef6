"""Build the book: the website (English at the root, Chinese under /zh/), one PDF and one EPUB per
language, only when an input changed since the last build into the same folder.

    python build/build_book.py [--site-dir site] [--no-pdf] [--force] [--jobs N]

Steps:
1. hash the inputs (every file under book/, build/ (its node_modules by build/package-lock.json),
   data/, notebooks/, results/, scripts/, tools/, the mkdocs*.yml files, the requirements lock,
   BOOK_SITE_URL and BOOK_REPO_URL, the site's and the repository's addresses, BOOK_VERSION and
   BOOK_VERSION_PROVIDER, a release's version and its switcher (tools/release.py), and the newest
   commit that changed a page, which dates it). If
   ``<site>/.build-inputs.json`` records the same hash and the outputs asked for, print
   "up to date" and stop;
2. refuse to build when a page lacks its translation (``tools/translations.py status``);
3. ``mkdocs build --strict`` of the site (mkdocs.yml) into the site folder;
4. the PDFs into ``<site>/pdf/``, from the built site (build/pdf_book.py): each part of the book is a
   WeasyPrint document of its own, rendered only when its HTML changed (cached in ``.cache/pdf/``),
   then the parts are assembled with pikepdf;
5. the EPUBs into ``<site>/epub/``, from the same print HTML (build/epub_book.py): each part's
   XHTML is converted only when its pages changed (cached in ``.cache/epub/``, beside the PDF
   cache), then packaged with ebooklib;
6. record the hash in ``<site>/.build-inputs.json``.

A lock file in the site folder makes concurrent calls (two terminals, pytest workers) wait for
one build instead of racing it. Exit status 0 when the outputs are up to date or built, 1 when a
build failed (mkdocs' own message names the file; pdf_book.py names the part whose anchors
WeasyPrint did not place, which means it dropped pages), 2 on bad arguments.
"""

import argparse
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import epub_book  # build/epub_book.py, beside this file
import pdf_book  # build/pdf_book.py, beside this file

from tools import translations

ROOT = Path(__file__).resolve().parents[1]
INPUT_DIRS = ("book", "build", "data", "notebooks", "results", "scripts", "tools")
INPUT_FILES = ("mkdocs*.yml", "requirements*.txt", "requirements/*")
LANGS = ("en", "zh")
STAMP = ".build-inputs.json"
# node_modules: build/package-lock.json pins it.
SKIPPED = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", "node_modules"}


def inputs_digest(root: Path = ROOT) -> str:
    """sha256 (hex) over the path and content of every input file; a symlink counts by its target
    path (book/ links to the notebooks, which are hashed where they live)."""
    paths = [p for pattern in INPUT_FILES for p in root.glob(pattern) if p.is_file()]
    for top in INPUT_DIRS:
        for folder, dirs, files in os.walk(root / top):
            dirs[:] = [d for d in dirs if d not in SKIPPED]
            paths += [Path(folder) / name for name in files if not name.endswith(".pyc")]
    # mkdocs.yml's site_url, extra.repository and extra.version; the PDF covers' version; the
    # newest commit that changed a page, whose date each page's "last update" and the PDF cover show
    names = ("BOOK_SITE_URL", "BOOK_REPO_URL", "BOOK_VERSION", "BOOK_VERSION_PROVIDER")
    digest = hashlib.sha256("\0".join([*(os.environ.get(name, "") for name in names),
                                        _content_commit(root)]).encode())
    for path in sorted(set(paths)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _content_commit(root: Path) -> str:
    """The id of the newest commit that changed book/ or notebooks/; empty outside git."""
    try:
        done = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H", "--", "book", "notebooks"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def read_stamp(site_dir: Path) -> dict:
    try:
        return json.loads((site_dir / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_stamp(site_dir: Path, stamp: dict) -> None:
    tmp = site_dir / (STAMP + ".tmp")
    tmp.write_text(json.dumps(stamp), encoding="utf-8")
    tmp.replace(site_dir / STAMP)


def pdf_files(site_dir: Path) -> list[Path]:
    return sorted((site_dir / "pdf").glob("*.pdf"))


def epub_files(site_dir: Path) -> list[Path]:
    return sorted((site_dir / "epub").glob("*.epub"))


def check_translations() -> None:
    """Stop the build on a page without its translation or record (a stale one builds, with the
    notice the translation_notice hook adds)."""
    pairs = translations.statuses(ROOT)
    failing = [s for s in pairs if s.state in translations.FAILING_STATES]
    for s in failing:
        print(f"{s.state:<10}  {s.kind:<8}  {s.zh_path}  <-  {s.en_path}", file=sys.stderr)
    if failing or not pairs:
        raise SystemExit("build_book.py: error: missing translations (see above)")


def mkdocs(config: str, site_dir: Path) -> int:
    # no --quiet: it drops the warnings that --strict counts
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "--site-dir", str(site_dir)]
    return subprocess.run(cmd, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}).returncode


def build(site_dir: Path, pdfs: bool, cache_dir: Path, jobs: int) -> None:
    """The site into ``site_dir`` and, with ``pdfs``, both PDFs into ``site_dir/pdf`` and both
    EPUBs into ``site_dir/epub``."""
    start = time.perf_counter()
    if mkdocs("mkdocs.yml", site_dir) != 0:
        raise SystemExit("build_book.py: error: mkdocs build failed: mkdocs.yml")
    print(f"build_book.py: site built in {time.perf_counter() - start:.1f} s", flush=True)
    if pdfs:
        make_pdfs(site_dir, cache_dir, jobs)


def make_pdfs(site_dir: Path, cache_dir: Path, jobs: int) -> None:
    """The PDFs, then the EPUBs (their cache is the folder "epub" beside ``cache_dir``)."""
    try:
        pdf_book.build(site_dir, cache_dir, jobs)
    except pdf_book.PdfError as err:
        raise SystemExit(f"build_book.py: error: PDF build failed: {err}") from None
    start = time.perf_counter()
    try:
        epub_book.build(site_dir, cache_dir.parent / "epub", jobs)
    except epub_book.EpubError as err:
        raise SystemExit(f"build_book.py: error: EPUB build failed: {err}") from None
    print(f"build_book.py: EPUBs built in {time.perf_counter() - start:.1f} s", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the site, the PDFs and the EPUBs of the book (only what changed).")
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site", help="output folder (default: site/)")
    parser.add_argument("--no-pdf", action="store_true", help="build the website only (no PDFs, no EPUBs)")
    parser.add_argument("--force", action="store_true", help="build even when the inputs did not change")
    parser.add_argument("--cache-dir", type=Path, default=ROOT / ".cache" / "pdf",
                        help="the PDF parts rendered so far, by content hash (default: .cache/pdf/); the "
                             "EPUB's converted parts go to the folder epub/ beside it")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="PDF parts rendered at once (default: the number of cores)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: must be >= 1")
    site_dir = args.site_dir.resolve()
    if site_dir.exists() and not site_dir.is_dir():
        parser.error(f"--site-dir {args.site_dir}: not a folder")
    site_dir.mkdir(parents=True, exist_ok=True)

    with open(site_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another build into this folder finishes first
        digest = inputs_digest()
        stamp = read_stamp(site_dir)
        fresh = stamp.get("inputs") == digest
        have_pdfs = (fresh and stamp.get("pdfs") and len(pdf_files(site_dir)) == len(LANGS)
                     and len(epub_files(site_dir)) == len(LANGS))
        if fresh and (args.no_pdf or have_pdfs) and not args.force:
            print(f"build_book.py: {site_dir.name}/ is up to date with its inputs")
            return 0
        if fresh and not args.force:  # the site is current; only the PDFs and EPUBs were not asked for last time
            make_pdfs(site_dir, args.cache_dir.resolve(), args.jobs)
            write_stamp(site_dir, {"inputs": digest, "pdfs": True})
            print(f"built the PDFs and EPUBs of {site_dir}")
            return 0
        (site_dir / STAMP).unlink(missing_ok=True)  # an interrupted build must not look fresh
        check_translations()
        build(site_dir, not args.no_pdf, args.cache_dir.resolve(), args.jobs)
        write_stamp(site_dir, {"inputs": digest, "pdfs": not args.no_pdf})
    print(f"built site in {site_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
