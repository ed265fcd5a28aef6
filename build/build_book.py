"""Build the book: the website (English at the root, Chinese under /zh/) and one PDF per language.

    python build/build_book.py [--site-dir site] [--no-pdf]

Steps:
1. refuse to build when a page lacks its translation (tools/translations.py status);
2. ``mkdocs build --strict`` of both languages into the site directory;
3. for each language, a second strict build with only that language and mkdocs-to-pdf enabled
   (mkdocs-to-pdf renders one print document per build), into a temporary directory; the PDF
   is copied to ``<site>/pdf/ml-engineering-open-book-<lang>.pdf``.

Exits non-zero with mkdocs' own message (naming the file) on any warning.
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.translations import FAILING_STATES, statuses  # noqa: E402
BOOK = "ml-engineering-open-book"
PDF_TEXT = {
    "en": {"BOOK_PDF_TITLE": "The ML Engineering Open Book", "BOOK_PDF_TOC_TITLE": "Contents", "built": "Built on {}"},
    "zh": {"BOOK_PDF_TITLE": "机器学习工程开放书", "BOOK_PDF_TOC_TITLE": "目录", "built": "构建日期：{}"},
}


def pdf_name(lang: str) -> str:
    return f"{BOOK}-{lang}.pdf"


def mkdocs_build(site_dir: Path, extra_env: dict) -> None:
    # no --quiet: it drops the warnings that --strict counts
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", **extra_env}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)]
    result = subprocess.run(cmd, cwd=ROOT, env=env)
    if result.returncode != 0:
        raise SystemExit(f"build_book.py: error: mkdocs build failed ({' '.join(f'{k}={v}' for k, v in extra_env.items())})")


def build_pdf(lang: str, site_dir: Path, date: str) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"book-pdf-{lang}-") as tmp:
        env = {
            "BOOK_PDF": "1",
            "BOOK_ONLY_LOCALE": lang,
            "BOOK_PDF_PATH": f"pdf/{pdf_name(lang)}",
            "BOOK_PDF_TITLE": PDF_TEXT[lang]["BOOK_PDF_TITLE"],
            "BOOK_PDF_TOC_TITLE": PDF_TEXT[lang]["BOOK_PDF_TOC_TITLE"],
            # a phrase, not a bare date: YAML would turn a bare date into a date object
            "BOOK_BUILD_DATE": PDF_TEXT[lang]["built"].format(date),
        }
        mkdocs_build(Path(tmp), env)
        target = site_dir / "pdf" / pdf_name(lang)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(tmp) / "pdf" / pdf_name(lang), target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Build the site and the PDFs of the book.")
    parser.add_argument("--site-dir", type=Path, default=ROOT / "site")
    parser.add_argument("--no-pdf", action="store_true", help="build the website only")
    args = parser.parse_args(argv)
    site_dir = args.site_dir.resolve()

    untranslated = [s for s in statuses(ROOT) if s.state in FAILING_STATES]
    for s in untranslated:
        print(f"{s.state}: {s.zh_path.relative_to(ROOT)} <- {s.en_path.relative_to(ROOT)}", file=sys.stderr)
    if untranslated:
        raise SystemExit("build_book.py: error: missing translations (see above)")

    mkdocs_build(site_dir, {})
    if not args.no_pdf:
        date = datetime.date.today().isoformat()
        for lang in PDF_TEXT:
            print(f"built {build_pdf(lang, site_dir, date).relative_to(site_dir.parent)}")
    print(f"built site in {site_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
