"""Build the book: the website (English at the root, Chinese under /zh/) and one PDF per language,
only when an input changed since the last build into the same folder.

    python build/build_book.py [--site-dir site] [--no-pdf] [--force]

Steps:
1. hash the inputs (every file under book/, build/ (its node_modules by build/package-lock.json),
   data/, notebooks/, results/, scripts/, tools/, the mkdocs*.yml files, the requirements lock,
   and BOOK_SITE_URL, the site's address). If
   ``<site>/.build-inputs.json`` records the same hash and the outputs asked for, print
   "up to date" and stop;
2. refuse to build when a page lacks its translation (``tools/translations.py status``);
3. at the same time: ``mkdocs build --strict`` of the site (mkdocs.yml) into the site folder, and
   one strict build per language with mkdocs-to-pdf (mkdocs.pdf-en.yml, mkdocs.pdf-zh.yml) into
   temporary folders, whose PDFs are then copied into ``<site>/pdf/``;
4. record the hash in ``<site>/.build-inputs.json``.

A lock file in the site folder makes concurrent calls (two terminals, pytest workers) wait for
one build instead of racing it. Exit status 0 when the outputs are up to date or built, 1 when a
build failed (mkdocs' own message names the file; mkdocs-to-pdf's "No anchor" errors mean
WeasyPrint dropped pages and fail the PDF build too), 2 on bad arguments.
"""

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUT_DIRS = ("book", "build", "data", "notebooks", "results", "scripts", "tools")
INPUT_FILES = ("mkdocs*.yml", "requirements*.txt", "requirements/*")
LANGS = ("en", "zh")
STAMP = ".build-inputs.json"
SKIPPED = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", "node_modules"}  # build/package-lock.json pins node_modules


def inputs_digest(root: Path = ROOT) -> str:
    """sha256 (hex) over the path and content of every input file; a symlink counts by its target
    path (book/ links to the notebooks, which are hashed where they live)."""
    paths = [p for pattern in INPUT_FILES for p in root.glob(pattern) if p.is_file()]
    for top in INPUT_DIRS:
        for folder, dirs, files in os.walk(root / top):
            dirs[:] = [d for d in dirs if d not in SKIPPED]
            paths += [Path(folder) / name for name in files if not name.endswith(".pyc")]
    digest = hashlib.sha256(os.environ.get("BOOK_SITE_URL", "").encode())  # mkdocs.yml's site_url
    for path in sorted(set(paths)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


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


def check_translations() -> None:
    result = subprocess.run([sys.executable, "tools/translations.py", "status"], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        failing = [line for line in result.stdout.splitlines() if not line.startswith(("ok ", "stale "))]
        print("\n".join(failing), file=sys.stderr)
        raise SystemExit("build_book.py: error: missing translations (see above)")


def mkdocs(config: str, site_dir: Path, log=None) -> subprocess.Popen:
    # no --quiet: it drops the warnings that --strict counts
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", config, "--site-dir", str(site_dir)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT if log else None)


def build(site_dir: Path, pdfs: bool) -> None:
    """The site into ``site_dir`` and, with ``pdfs``, both PDFs into ``site_dir/pdf``, all at once."""
    with tempfile.TemporaryDirectory(prefix="book-pdf-") as tmp:
        tmp = Path(tmp)
        jobs = {}
        for lang in LANGS if pdfs else ():
            log = open(tmp / f"{lang}.log", "w+", encoding="utf-8")
            jobs[f"mkdocs.pdf-{lang}.yml"] = (mkdocs(f"mkdocs.pdf-{lang}.yml", tmp / lang, log), log)
        site = mkdocs("mkdocs.yml", site_dir)  # its output goes straight to the terminal
        site_ok = site.wait() == 0
        failed = [] if site_ok else ["mkdocs.yml"]
        for config, (job, log) in jobs.items():
            if not site_ok:
                job.terminate()  # the site's error is the one to read; don't wait minutes for the PDFs
            if job.wait() != 0 and site_ok:
                log.seek(0)
                print(f"--- {config} (last lines) ---\n" + "".join(log.readlines()[-40:]), file=sys.stderr)
                failed.append(config)
            log.close()
        if failed:
            raise SystemExit(f"build_book.py: error: mkdocs build failed: {', '.join(failed)}")
        for pdf in sorted(tmp.glob("*/pdf/*.pdf")):
            (site_dir / "pdf").mkdir(exist_ok=True)
            shutil.copyfile(pdf, site_dir / "pdf" / pdf.name)
            print(f"built {site_dir.name}/pdf/{pdf.name}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Build the site and the PDFs of the book (only what changed).")
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site", help="output folder (default: site/)")
    parser.add_argument("--no-pdf", action="store_true", help="build the website only")
    parser.add_argument("--force", action="store_true", help="build even when the inputs did not change")
    args = parser.parse_args(argv)
    site_dir = args.site_dir.resolve()
    if site_dir.exists() and not site_dir.is_dir():
        parser.error(f"--site-dir {args.site_dir}: not a folder")
    site_dir.mkdir(parents=True, exist_ok=True)

    with open(site_dir / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another build into this folder finishes first
        digest = inputs_digest()
        stamp = read_stamp(site_dir)
        fresh = stamp.get("inputs") == digest
        have_pdfs = fresh and stamp.get("pdfs") and len(pdf_files(site_dir)) == len(LANGS)
        if fresh and (args.no_pdf or have_pdfs) and not args.force:
            print(f"build_book.py: {site_dir.name}/ is up to date with its inputs")
            return 0
        (site_dir / STAMP).unlink(missing_ok=True)  # an interrupted build must not look fresh
        check_translations()
        build(site_dir, pdfs=not args.no_pdf)
        write_stamp(site_dir, {"inputs": digest, "pdfs": not args.no_pdf})
    print(f"built site in {site_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
