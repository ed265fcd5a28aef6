#!/usr/bin/env python3
"""Check and refresh the book's notebooks (jupytext ``py:percent`` + ``.ipynb`` pairs).

Every notebook lives under ``notebooks/`` as two files that must agree:

* ``<name>.py``: the jupytext ``py:percent`` source, the file reviewers read;
* ``<name>.ipynb``: the paired notebook, committed **with its outputs**.  The
  site shows these stored outputs (mkdocs-jupyter does not execute anything) and
  CI re-executes the notebooks with nbval and compares the outputs.

A ``.py`` under ``notebooks/`` counts as a notebook when it has a paired
``.ipynb`` next to it or a jupytext YAML header (a ``jupyter:`` key); other
``.py`` files there are helpers and are ignored.

``check`` (the default command) reports, for every pair:

* a ``.py`` without its ``.ipynb`` or an ``.ipynb`` without its ``.py``;
* cells out of sync: the cell types and sources of the ``.py`` (read by
  jupytext) differ from those of the ``.ipynb`` (outputs and execution counts
  are ignored);
* notebook metadata ``book`` (the translation record of a Chinese notebook)
  differing between the two files;
* a missing or wrong pairing (``jupytext.formats`` must be ``ipynb,py:percent``);
* code cells that were not executed, or not executed top to bottom in one run
  (execution counts must be 1, 2, 3, ...);
* execution timestamps in the cells' metadata (``refresh`` removes them);
* a notebook with no output at all (nbval would pass trivially), error
  outputs, or SVG images (the PDF needs PNG, and nbval compares SVG text);
* a code cell whose image outputs lack alt text: its metadata ``alt`` must be a
  list of non-empty strings, one per image output, in order (``# %% alt=["..."]``
  on the cell's marker line in the ``.py``; build/hooks/notebooks.py puts them on
  the page's images), and the same in the ``.py`` and the ``.ipynb``.

CLI (run from anywhere; ``--root`` defaults to the repository root)::

    python tools/notebooks.py [check]                 # exit 1 and list problems
    python tools/notebooks.py refresh [PATH ...]      # sync + execute in place

``refresh`` takes ``.py`` or ``.ipynb`` paths (default: every notebook) and runs,
for each pair, exactly the commands documented in ``notebooks/README.md``::

    jupytext --sync NAME.py
    jupyter nbconvert --to notebook --execute --inplace \
        --ExecutePreprocessor.timeout=600 --ExecutePreprocessor.record_timing=False NAME.ipynb
    jupytext --sync NAME.ipynb

Importable API: :func:`notebook_pairs`, :func:`pair_problems`,
:func:`problems`, :func:`refresh`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""Default repository root (the parent of ``tools/``)."""

NOTEBOOKS = "notebooks"
"""Directory (relative to the root) holding the notebooks."""

PAIR_FORMATS = "ipynb,py:percent"
"""Value of the ``jupytext.formats`` notebook metadata of every pair."""

_SKIP_DIRS = {".ipynb_checkpoints", "__pycache__", ".cache"}


# --------------------------------------------------------------------------- discovery
def _has_jupytext_header(py: Path) -> bool:
    """True if the file starts with a jupytext YAML header holding a ``jupyter:`` key."""
    try:
        lines = py.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    if not lines or lines[0].strip() != "# ---":
        return False
    for line in lines[1:]:
        if line.strip() == "# ---":
            return False
        if line.startswith("# jupyter:"):
            return True
    return False


def _walk(top: Path):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def notebook_pairs(root: str | os.PathLike = ROOT) -> list[tuple[Path, Path]]:
    """All notebooks under ``<root>/notebooks`` as ``(py, ipynb)`` path pairs.

    Each pair is returned even when one of its files is missing (that is a
    problem :func:`pair_problems` reports).  Sorted by the ``.py`` path.
    """
    top = Path(root) / NOTEBOOKS
    found: dict[Path, tuple[Path, Path]] = {}
    if not top.is_dir():
        return []
    for path in _walk(top):
        if path.suffix == ".ipynb":
            py = path.with_suffix(".py")
        elif path.suffix == ".py" and (path.with_suffix(".ipynb").exists() or _has_jupytext_header(path)):
            py = path
        else:
            continue
        found[py] = (py, py.with_suffix(".ipynb"))
    return [found[k] for k in sorted(found)]


# --------------------------------------------------------------------------- checks
def _cells(nb) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip("\n")) for cell in nb.cells]


def _describe_difference(py_cells, nb_cells) -> str:
    if len(py_cells) != len(nb_cells):
        return f"{len(py_cells)} cells in the .py, {len(nb_cells)} in the .ipynb"
    for i, (a, b) in enumerate(zip(py_cells, nb_cells, strict=True), start=1):
        if a[0] != b[0]:
            return f"cell {i} is {a[0]} in the .py but {b[0]} in the .ipynb"
        if a[1] != b[1]:
            first = a[1].splitlines()[0] if a[1] else ""
            return f"cell {i} differs (starts with {first[:60]!r} in the .py)"
    return "cells differ"


def pair_problems(py_path: str | os.PathLike, ipynb_path: str | os.PathLike | None = None) -> list[str]:
    """Problems of one notebook pair, as human-readable strings (empty if fine).

    ``py_path`` is the jupytext source; ``ipynb_path`` defaults to the same
    name with the ``.ipynb`` suffix.  Either file may be missing.
    """
    import jupytext
    import nbformat

    py = Path(py_path)
    ipynb = Path(ipynb_path) if ipynb_path is not None else py.with_suffix(".ipynb")
    name = py.with_suffix("")
    problems: list[str] = []
    if not py.exists() and not ipynb.exists():
        return [f"{name}: neither {py.name} nor {ipynb.name} exists"]
    if not ipynb.exists():
        return [f"{py}: no paired {ipynb.name} (run: python tools/notebooks.py refresh {py})"]
    if not py.exists():
        return [f"{ipynb}: no paired {py.name} (run: jupytext --set-formats {PAIR_FORMATS} {ipynb})"]

    try:
        text_nb = jupytext.read(py)
    except Exception as exc:  # noqa: BLE001 - report any parse failure as a problem
        return [f"{py}: jupytext cannot read it: {exc}"]
    try:
        nb = nbformat.read(ipynb, as_version=4)
    except Exception as exc:  # noqa: BLE001 - likewise: any read failure is a problem to report
        return [f"{ipynb}: not a readable notebook: {exc}"]

    # 1. inputs in sync
    py_cells, nb_cells = _cells(text_nb), _cells(nb)
    if py_cells != nb_cells:
        problems.append(f"{name}: .py and .ipynb out of sync: {_describe_difference(py_cells, nb_cells)} "
                        f"(run: jupytext --sync {py})")
    if text_nb.metadata.get("book") != nb.metadata.get("book"):
        problems.append(f"{name}: notebook metadata 'book' differs between .py and .ipynb "
                        f"(run: jupytext --sync {py})")

    # 2. pairing
    formats = nb.metadata.get("jupytext", {}).get("formats")
    if formats != PAIR_FORMATS:
        problems.append(f"{ipynb}: jupytext.formats is {formats!r}, expected {PAIR_FORMATS!r} "
                        f"(run: jupytext --set-formats {PAIR_FORMATS} {py})")

    # 3. executed, in order, with outputs
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.get("execution_count") for c in code if c.source.strip()]
    if any(c is None for c in counts):
        missing = sum(c is None for c in counts)
        problems.append(f"{ipynb}: {missing} of {len(counts)} code cells not executed "
                        f"(run: python tools/notebooks.py refresh {py})")
    elif counts != list(range(1, len(counts) + 1)):
        problems.append(f"{ipynb}: cells not executed top to bottom in one run "
                        f"(execution counts {counts}; run: python tools/notebooks.py refresh {py})")
    outputs = [o for c in code for o in c.get("outputs", [])]
    if not outputs:
        problems.append(f"{ipynb}: no stored outputs, so nbval would test nothing "
                        f"(run: python tools/notebooks.py refresh {py})")
    if any("execution" in cell.get("metadata", {}) for cell in nb.cells):
        problems.append(f"{ipynb}: execution timestamps in cell metadata "
                        f"(run: python tools/notebooks.py refresh {py})")
    for i, cell in enumerate(nb.cells, start=1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(f"{ipynb}: cell {i} has an error output ({out.get('ename')})")
            if "image/svg+xml" in out.get("data", {}):
                problems.append(f"{ipynb}: cell {i} has an SVG image; use PNG "
                                f"(set_matplotlib_formats('png'))")
    problems.extend(_alt_problems(py, ipynb, text_nb, nb))
    return problems


def _image_count(cell) -> int:
    """Number of the cell's outputs that show an image (any ``image/*`` data)."""
    return sum(any(mime.startswith("image/") for mime in out.get("data", {})) for out in cell.get("outputs", []))


def _alt_problems(py: Path, ipynb: Path, text_nb, nb) -> list[str]:
    """A code cell whose metadata ``alt`` is not one non-empty string per image output, or differs
    between the .py and the .ipynb."""
    found = []
    for i, cell in enumerate(nb.cells, start=1):
        if cell.cell_type != "code":
            continue
        images, alt = _image_count(cell), cell.metadata.get("alt")
        if alt is None and images:
            found.append(f"{ipynb}: cell {i} shows {images} image(s) without alt text (describe each, in the "
                         f"notebook's language, on the cell's marker line in the .py: # %% alt=[\"...\"]; "
                         f"then jupytext --sync {py})")
        elif alt is not None and (not isinstance(alt, list) or len(alt) != images
                                  or not all(isinstance(a, str) and a.strip() for a in alt)):
            found.append(f"{ipynb}: cell {i} shows {images} image(s) but its metadata alt is {alt!r}: "
                         f"give one non-empty string per image, in order")
    if len(text_nb.cells) == len(nb.cells):
        for i, (a, b) in enumerate(zip(text_nb.cells, nb.cells, strict=True), start=1):
            if a.metadata.get("alt") != b.metadata.get("alt"):
                found.append(f"{py.with_suffix('')}: cell {i}'s alt text differs between .py and .ipynb "
                             f"(run: jupytext --sync {py})")
    return found


def problems(root: str | os.PathLike = ROOT) -> list[str]:
    """Problems of every notebook under ``<root>/notebooks``."""
    found: list[str] = []
    for py, ipynb in notebook_pairs(root):
        found.extend(pair_problems(py, ipynb))
    return found


# --------------------------------------------------------------------------- refresh
def refresh_commands(py: Path, ipynb: Path, timeout: int = 600) -> list[list[str]]:
    """The commands :func:`refresh` runs for one pair (as argument lists)."""
    return [
        ["jupytext", "--sync", str(py)],
        ["jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
         f"--ExecutePreprocessor.timeout={timeout}", "--ExecutePreprocessor.record_timing=False",
         str(ipynb)],
        ["jupytext", "--sync", str(ipynb)],
    ]


def _tool(name: str) -> str:
    """Path of a console script, preferring the one next to this Python (the venv's)."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _strip_timing(ipynb: Path) -> None:
    """Remove execution timestamps (cell metadata ``execution``) left by an earlier run."""
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    if any("execution" in cell.get("metadata", {}) for cell in nb.cells):
        for cell in nb.cells:
            cell.get("metadata", {}).pop("execution", None)
        nbformat.write(nb, ipynb)


def _resolve(paths, root: Path) -> list[tuple[Path, Path]]:
    if not paths:
        return notebook_pairs(root)
    pairs = []
    for p in paths:
        p = Path(p)
        py = p.with_suffix(".py") if p.suffix == ".ipynb" else p
        if py.suffix != ".py":
            raise SystemExit(f"not a notebook: {p} (give the .py or the .ipynb)")
        pairs.append((py, py.with_suffix(".ipynb")))
    return pairs


def refresh(paths=None, root: str | os.PathLike = ROOT, timeout: int = 600) -> dict[Path, float]:
    """Sync each pair, execute the notebook in place and sync again.

    Before executing, execution timestamps left in the cells' metadata by an
    earlier run are removed.

    ``paths`` are ``.py`` or ``.ipynb`` files (default: every notebook).  A new
    ``.py`` without an ``.ipynb`` gets one.  Returns the seconds spent executing
    each notebook.  Raises ``subprocess.CalledProcessError`` on failure.
    """
    timings: dict[Path, float] = {}
    for py, ipynb in _resolve(paths, Path(root)):
        if not py.exists():
            raise FileNotFoundError(f"{py} not found (create the .py first, or run "
                                    f"jupytext --set-formats {PAIR_FORMATS} {ipynb})")
        for i, cmd in enumerate(refresh_commands(py, ipynb, timeout)):
            if i == 0 and not ipynb.exists():
                cmd = ["jupytext", "--set-formats", PAIR_FORMATS, str(py)]
            if i == 1:
                _strip_timing(ipynb)
            cmd = [_tool(cmd[0]), *cmd[1:]]
            print("+", " ".join(cmd), flush=True)
            start = time.perf_counter()
            subprocess.run(cmd, check=True)
            if i == 1:
                timings[ipynb] = time.perf_counter() - start
    return timings


# --------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: %(default)s)")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("check", help="check that every pair exists, is in sync, is executed and describes its plots "
                              "(default)")
    ref = sub.add_parser("refresh", help="sync and execute notebooks in place")
    ref.add_argument("paths", nargs="*", help=".py or .ipynb files (default: every notebook)")
    ref.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: %(default)s)")
    args = parser.parse_args(argv)

    if args.command == "refresh":
        timings = refresh(args.paths, args.root, args.timeout)
        for path, seconds in timings.items():
            print(f"executed {path} in {seconds:.1f} s")
        found = [p for py, ipynb in _resolve(args.paths, args.root) for p in pair_problems(py, ipynb)]
    else:
        pairs = notebook_pairs(args.root)
        if not pairs:
            print(f"no notebooks found under {args.root / NOTEBOOKS}", file=sys.stderr)
            return 1
        found = problems(args.root)
        if not found:
            print(f"{len(pairs)} notebook pair(s) in sync, executed, with outputs and alt text")
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
