"""What each part of the book costs a contributor: build seconds, PDF pages, tests and test seconds.
It measures and prints; it asserts nothing.

    python tools/loop_bench.py [--junit report.xml] [--json parts.json]
    python tools/loop_bench.py --budgets [--json budgets.json]

Per part (Compute, Network, ...), from the last `make book` (``.cache/pdf/last-build.json``, which
build/pdf_book.py writes) and, with ``--junit``, a pytest JUnit report (``pytest --junitxml=FILE``;
a test belongs to the part whose folder it sits in: ``tests/network/``, ``notebooks/network/``):

    part            render s (en+zh)  pages en  pages zh  tests  test s
    network                     10.4        35        33     84   121.0

Render seconds are what the part's two PDF documents took when they were last rendered (a part
the last build took from the cache keeps its earlier figure). The site is one mkdocs build for all
parts; its time is the ``site`` line of ``--budgets``.

``--budgets`` builds a copy of this working tree three times, as a contributor would: from scratch
(empty site and PDF cache), unchanged, and with one chapter edited in each language
(network/nccl-tuning.md); for each, the wall seconds, the peak resident memory of the largest
single build process (``ru_maxrss`` of the waited-for descendants, as ``/usr/bin/time -v``
reports) and which PDF documents were rendered again. The budgets are in DEVELOPERS' terms: 300 s,
15 s, 90 s and 1.5 GB.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAST_BUILD = ROOT / ".cache" / "pdf" / "last-build.json"
EDITED = "network/nccl-tuning.md"


def test_costs(junit: Path) -> dict[str, dict]:
    """Tests and seconds (setup, call and teardown) per top folder under tests/ and notebooks/."""
    costs: dict[str, dict] = defaultdict(lambda: {"tests": 0, "seconds": 0.0})
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        folder = parts[1] if len(parts) > 2 and parts[0] in ("tests", "notebooks") else "(tests/*.py)"
        costs[folder]["tests"] += 1
        costs[folder]["seconds"] += float(case.get("time", 0))
    return dict(costs)


def part_costs(last_build: dict, tests: dict[str, dict]) -> list[dict]:
    rows: dict[str, dict] = {}
    for book in last_build:
        for part in book["parts"]:
            row = rows.setdefault(part["part"], {"part": part["part"], "folder": part.get("folder", part["part"]),
                                                 "render_s": 0.0, "pages": {}, "peak_rss_mb": 0})
            row["render_s"] = round(row["render_s"] + part["seconds"], 2)
            row["pages"][book["lang"]] = part["pages"]
            row["peak_rss_mb"] = max(row["peak_rss_mb"], part["peak_rss_mb"])
    for row in rows.values():
        cost = tests.get(row["folder"], {"tests": 0, "seconds": 0.0})
        row["tests"], row["test_s"] = cost["tests"], round(cost["seconds"], 1)
    folders = {row["folder"] for row in rows.values()}
    for folder, cost in sorted(tests.items()):
        if folder not in folders:  # the build's own tests, tools, the repository-wide checks
            label = folder if folder.startswith("(") else f"(tests/{folder})"
            rows[folder] = {"part": label, "folder": folder, "render_s": 0.0, "pages": {},
                            "peak_rss_mb": 0, "tests": cost["tests"], "test_s": round(cost["seconds"], 1)}
    return list(rows.values())


def print_parts(rows: list[dict]) -> None:
    print(f"{'part':<18}{'render s':>10}{'pages en':>10}{'pages zh':>10}{'peak MB':>9}{'tests':>7}{'test s':>9}")
    for r in rows:
        print(f"{r['part']:<18}{r['render_s']:>10.1f}{r['pages'].get('en', ''):>10}{r['pages'].get('zh', ''):>10}"
              f"{r['peak_rss_mb'] or '':>9}{r['tests']:>7}{r['test_s']:>9.1f}")
    total = {k: sum(r[k] for r in rows) for k in ("render_s", "tests", "test_s")}
    print(f"{'total':<18}{total['render_s']:>10.1f}{'':>29}{total['tests']:>7}{total['test_s']:>9.1f}")


# ---------------------------------------------------------------------------------------------
# --budgets: build a copy of the working tree as a contributor would

def copy_tree(dest: Path) -> None:
    """The working tree's tracked and unignored files; the venv and the Pyodide runtime linked."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        source = ROOT / rel
        if source.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), dest / rel)
        elif source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    os.symlink(ROOT / ".venv", dest / ".venv")
    os.symlink(ROOT / "build" / "node_modules", dest / "build" / "node_modules")


def timed_build(tree: Path) -> dict:
    """One `build_book.py` run in ``tree``: wall seconds, peak RSS of the largest process, and the
    PDF documents it rendered (those the part cache did not have)."""
    last = tree / ".cache" / "pdf" / "last-build.json"
    before = last.stat().st_mtime_ns if last.exists() else None
    runner = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", runner, str(tree / ".venv" / "bin" / "python"),
                             "build/build_book.py"], cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"loop_bench.py: error: the build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    rendered = [line.split()[2].rstrip(":") for line in result.stdout.splitlines()
                if line.startswith("pdf_book.py: rendered ")]
    fresh = last.exists() and last.stat().st_mtime_ns != before
    return {"seconds": round(seconds, 1), "peak_rss_mb": round(int(result.stderr.split()[-1]) / 1024),
            "rendered": rendered, "pdfs_assembled": fresh}


def budgets() -> dict:
    with tempfile.TemporaryDirectory(prefix="loop-bench-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        found = {"scratch": timed_build(tree), "no_change": timed_build(tree)}
        for lang in ("en", "zh"):
            page = tree / "book" / lang / EDITED
            page.write_text(page.read_text(encoding="utf-8") + "\n\nA paragraph added by tools/loop_bench.py.\n",
                            encoding="utf-8")
        found["one_chapter_each_language"] = timed_build(tree)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Build and test cost per part of the book (measures, asserts nothing).")
    parser.add_argument("--junit", type=Path,
                        help="a pytest JUnit report (pytest --junitxml=FILE) for the test columns")
    parser.add_argument("--budgets", action="store_true",
                        help="time scratch, no-change and one-chapter builds of a copy")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.budgets:
        found = budgets()
        for name, figures in found.items():
            print(f"{name:<28}{figures['seconds']:>8.1f} s  peak {figures['peak_rss_mb']:>5} MB  "
                  f"rendered: {', '.join(figures['rendered']) or 'nothing'}")
    else:
        if not LAST_BUILD.is_file():
            parser.error(f"{LAST_BUILD.relative_to(ROOT)}: no PDF build yet (run `make book`)")
        if args.junit is not None and not args.junit.is_file():
            parser.error(f"--junit {args.junit}: no such file")
        tests = test_costs(args.junit) if args.junit else {}
        found = part_costs(json.loads(LAST_BUILD.read_text(encoding="utf-8")), tests)
        print_parts(found)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
