#!/usr/bin/env python3
"""Keep the Simplified Chinese translation from silently drifting from the English source.

The English text is the source of truth.  Every Chinese page records the exact
version of the English page it translates, as the SHA-256 of the English file:

* Chinese chapter ``book/zh/<part>/<page>.md`` -> English ``book/en/<part>/<page>.md``.
  The record is YAML front matter (other front matter keys are kept)::

      ---
      translation:
        source_sha256: <64 hex chars>
      ---

* Chinese notebook ``notebooks/<part>/<name>.zh.py`` (jupytext py:percent) ->
  English ``notebooks/<part>/<name>.py``.  The record lives in the jupytext YAML
  header, as notebook metadata, so ``jupytext --sync`` carries it into the paired
  ``.zh.ipynb`` (jupytext adds ``notebook_metadata_filter: book`` by itself)::

      # ---
      # jupyter:
      #   book:
      #     translation:
      #       source_sha256: <64 hex chars>
      #   jupytext: ...
      # ---

  A ``.py`` under ``notebooks/`` counts as a notebook when it has a paired
  ``.ipynb`` next to it or a YAML header with a ``jupyter:`` key; other ``.py``
  files there (helpers) are ignored.

* Chinese summary of an embedded script (what the scripts appendix says the
  script is for) -> the first paragraph of the English script's docstring or
  leading comment block (``tools.book.script_purpose``).  All of them live in
  one file, ``book/zh/appendix/script_summaries.yml`` (:data:`SUMMARIES`), one
  entry per script named by an ``embed-script`` marker of the English pages::

      scripts/network/all_reduce_bench.py:
        zh: all_reduce_bench.py：……
        source_sha256: <64 hex chars>

  Here the hash is of that paragraph's text (UTF-8), not of the script file:
  an edit elsewhere in the script does not make its summary stale.

Hashing: SHA-256 of the English file's bytes after converting CRLF to LF (so a
checkout with ``core.autocrlf`` gives the same hash).  Nothing else is
normalised: any edit of the English file, front matter and whitespace
included, makes the translation *stale* until someone checks it and re-stamps.

States reported for each pair: ``ok``, ``stale`` (English changed since the
recorded version), ``missing-zh`` (no Chinese page), ``missing-en`` (Chinese
page without English source), ``no-record`` (Chinese page without a valid
record).

CLI (run from anywhere; ``--root`` defaults to the repository root)::

    python tools/translations.py status [--strict] [--json]
    python tools/translations.py stamp book/zh/network/x.md notebooks/network/y.zh.py
    python tools/translations.py diff book/zh/network/x.md
    python tools/translations.py terms            # terminology check (tools/terminology.yml)

``stamp`` also takes ``scripts/<part>/<file>`` (stamps that script's summary
entry) or ``book/zh/appendix/script_summaries.yml`` (stamps every entry).
``status`` exits 1 when anything is missing or has no record (or no page is
found at all); stale pages exit 0 unless ``--strict``.

Importable API (stdlib + PyYAML only; cheap enough to call per page from an
mkdocs hook): :func:`page_status`, :func:`status_for`, :func:`pairs`, :func:`statuses`,
:func:`counterpart`, :func:`english_sha256`, :func:`text_sha256`, :func:`read_record`,
:func:`stamp`, :func:`load_summaries`, :func:`summary_status`, :func:`summary_statuses`,
:func:`stamp_summary`, :func:`load_terminology`, :func:`terminology_issues`.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import yaml

from tools.book import MARKER, script_purpose
from tools.notebooks import notebook_pairs

ROOT = Path(__file__).resolve().parent.parent
"""Default repository root (the parent of ``tools/``)."""

RECORD_PATH = ("translation", "source_sha256")
"""Key path of the record in a page's front matter."""
NOTEBOOK_RECORD_PATH = ("jupyter", "book", "translation", "source_sha256")
"""Key path of the record in a notebook's jupytext YAML header."""
SUMMARIES = Path("book", "zh", "appendix", "script_summaries.yml")
"""The Chinese summaries of the embedded scripts, relative to the root (see the module docstring)."""

STATES = ("ok", "stale", "missing-zh", "missing-en", "no-record")
FAILING_STATES = frozenset({"missing-zh", "missing-en", "no-record"})

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SKIP_DIRS = {".ipynb_checkpoints", "__pycache__", ".git"}


@dataclasses.dataclass(frozen=True)
class Status:
    """Translation state of one English/Chinese pair.

    ``state`` is one of :data:`STATES`; ``recorded`` is the hash in the Chinese
    record (None if absent or unreadable); ``current`` is the hash of the
    English file now (None if it does not exist).
    """

    state: str
    recorded: str | None
    current: str | None
    en_path: Path | None = None
    zh_path: Path | None = None
    kind: str = "page"  # "page", "notebook" or "summary" (en_path: the script, zh_path: SUMMARIES)


class StampError(Exception):
    """Raised when a record cannot be written safely (edit that file by hand)."""


# --------------------------------------------------------------------------- hashing

def _sha256(data: bytes) -> str:
    return hashlib.sha256(data.replace(b"\r\n", b"\n")).hexdigest()


def english_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's bytes with CRLF normalised to LF."""
    return _sha256(Path(path).read_bytes())


def text_sha256(text: str) -> str:
    """SHA-256 hex digest of a text's UTF-8 bytes with CRLF normalised to LF (a script summary's record)."""
    return _sha256(text.encode("utf-8"))


# --------------------------------------------------------------------------- headers

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)


def _is_notebook_source(path: Path) -> bool:
    return path.suffix == ".py"


def _md_header(text: str) -> tuple[list[str], int, int] | None:
    """Front matter of a Markdown text: (yaml lines, start line, end line) or None.

    ``start``/``end`` index the whole-file line list (keepends) so that
    lines[start:end] are the YAML lines between the two ``---`` fences.
    """
    m = _FRONT_MATTER.match(text)
    if not m:
        return None
    yaml_lines = m.group(1).splitlines()
    return yaml_lines, 1, 1 + len(yaml_lines)


def _unprefix(line: str) -> str | None:
    """Strip the ``# `` comment prefix of a jupytext header line (None if not a comment)."""
    line = line.rstrip("\r\n")
    if line == "#":
        return ""
    if line.startswith("# "):
        return line[2:]
    return None


def _py_header(text: str) -> tuple[list[str], int, int] | None:
    """jupytext YAML header of a py:percent text, same shape as :func:`_md_header`."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "# ---":
        return None
    yaml_lines = []
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "# ---":
            return yaml_lines, 1, i
        unprefixed = _unprefix(lines[i])
        if unprefixed is None:
            return None
        yaml_lines.append(unprefixed)
    return None


def _header(path: Path, text: str):
    return _py_header(text) if _is_notebook_source(path) else _md_header(text)


def _load_header(path: Path) -> dict | None:
    text = path.read_text(encoding="utf-8")
    header = _header(path, text)
    if header is None:
        return None
    try:  # BaseLoader: every scalar stays a string (an all-digit hash must not become an int)
        data = yaml.load("\n".join(header[0]), Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def _dig(data, keys: Iterable[str]):
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def read_record(zh_path: str | os.PathLike) -> str | None:
    """The ``source_sha256`` recorded in a Chinese page or ``.zh.py`` notebook.

    Returns None when there is no header, the YAML does not parse, or the key
    is absent.  The value is returned as written (lower-cased string), even if
    it is not a valid hash; :func:`page_status` treats an invalid one as
    ``no-record``.
    """
    path = Path(zh_path)
    key_path = NOTEBOOK_RECORD_PATH if _is_notebook_source(path) else RECORD_PATH
    value = _dig(_load_header(path), key_path)
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value).strip().lower()


# --------------------------------------------------------------------------- pairing

def counterpart(path: str | os.PathLike, root: str | os.PathLike = ROOT) -> Path:
    """The other-language file of a page or notebook source (it may not exist).

    ``book/en/X.md <-> book/zh/X.md`` and ``notebooks/P/N.py <-> notebooks/P/N.zh.py``.
    Raises ValueError for paths outside those trees.
    """
    root = Path(root).resolve()
    path = Path(path)
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    rel = path.relative_to(root)
    parts = rel.parts
    if len(parts) >= 3 and parts[0] == "book" and parts[1] in ("en", "zh") and rel.suffix == ".md":
        other = "zh" if parts[1] == "en" else "en"
        return root.joinpath("book", other, *parts[2:])
    if parts and parts[0] == "notebooks" and rel.suffix == ".py":
        if rel.name.endswith(".zh.py"):
            return path.with_name(rel.name[: -len(".zh.py")] + ".py")
        return path.with_name(rel.stem + ".zh.py")
    raise ValueError(f"{rel}: not a book page (book/en|zh/**.md) or notebook source (notebooks/**.py)")


def _walk(top: Path):
    for dirpath, dirnames, filenames in os.walk(top):  # does not follow symlinked dirs
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            yield Path(dirpath) / name


def pairs(root: str | os.PathLike = ROOT) -> list[tuple[Path, Path]]:
    """All (english, chinese) path pairs under ``root``; either side may not exist.

    Pages: every ``.md`` under ``book/en`` and ``book/zh`` (the ``.ipynb``
    notebook symlinks there are not pages; notebooks pair by their sources).  Notebooks: every notebook ``.py``
    under ``notebooks/`` (see module docstring).  Sorted, English path first.
    """
    root = Path(root).resolve()
    found: dict[Path, Path] = {}
    for lang in ("en", "zh"):
        top = root / "book" / lang
        if top.is_dir():
            for p in _walk(top):
                if p.suffix == ".md":
                    en = p if lang == "en" else counterpart(p, root)
                    found[en] = p if lang == "zh" else counterpart(p, root)
    for p, _ in notebook_pairs(root):
        if p.name.endswith(".zh.py"):
            found[counterpart(p, root)] = p
        else:
            found[p] = counterpart(p, root)
    return sorted(found.items())


def page_status(en_path: str | os.PathLike, zh_path: str | os.PathLike) -> Status:
    """Translation state of one pair (see :class:`Status`). Either file may be missing."""
    en, zh = Path(en_path), Path(zh_path)
    kind = "notebook" if _is_notebook_source(zh) else "page"
    current = english_sha256(en) if en.is_file() else None
    if not zh.is_file():
        return Status("missing-zh", None, current, en, zh, kind)
    recorded = read_record(zh)
    if current is None:
        return Status("missing-en", recorded, None, en, zh, kind)
    if recorded is None or not _HEX64.fullmatch(recorded):
        return Status("no-record", recorded, current, en, zh, kind)
    return Status("ok" if recorded == current else "stale", recorded, current, en, zh, kind)


def status_for(path: str | os.PathLike, root: str | os.PathLike = ROOT) -> Status | None:
    """Status of a Chinese file as mkdocs sees it, or None if ``path`` is not a Chinese page.

    Accepts ``book/zh/**.md``, ``notebooks/**.zh.py`` and ``.ipynb`` files or the
    ``book/zh/**.ipynb`` symlinks to them (mapped to their ``.zh.py`` source).
    Convenient for an mkdocs hook: ``status_for(page.file.abs_src_path)``.
    """
    p = Path(path)
    if p.suffix == ".ipynb":
        p = p.resolve().with_suffix(".py")
    try:
        other = counterpart(p, root)
        rel = p.resolve().relative_to(Path(root).resolve())
    except ValueError:
        return None
    if rel.parts[:2] == ("book", "zh") or p.name.endswith(".zh.py"):
        return page_status(other, p)
    return None


def statuses(root: str | os.PathLike = ROOT) -> list[Status]:
    """:func:`page_status` of every pair found by :func:`pairs`, then :func:`summary_statuses`."""
    return [page_status(en, zh) for en, zh in pairs(root)] + summary_statuses(root)


# --------------------------------------------------------------------------- script summaries

def embedded_scripts(root: str | os.PathLike = ROOT) -> list[str]:
    """Every script path (``scripts/<part>/<file>``) that an ``embed-script`` marker of an English
    page names, sorted."""
    top = Path(root) / "book" / "en"
    found = set()
    if top.is_dir():
        for page in _walk(top):
            if page.suffix == ".md":
                text = page.read_text(encoding="utf-8")
                found |= {rel for kind, rel in MARKER.findall(text) if kind == "embed-script"}
    return sorted(found)


def load_summaries(root: str | os.PathLike = ROOT) -> dict[str, dict]:
    """The entries of :data:`SUMMARIES`: script path -> mapping with ``zh`` and ``source_sha256``
    (every value a string, as written). Empty when the file does not exist; ValueError when it is
    not a YAML mapping."""
    path = Path(root) / SUMMARIES
    if not path.is_file():
        return {}
    try:  # BaseLoader: every scalar stays a string (an all-digit hash must not become an int)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        raise ValueError(f"{SUMMARIES.as_posix()}: not valid YAML: {exc}") from None
    if data in (None, ""):
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{SUMMARIES.as_posix()}: expected a mapping of script paths")
    return data


def summary_status(script: str, root: str | os.PathLike = ROOT, entries: dict | None = None) -> Status:
    """Translation state of one script's Chinese summary (``kind="summary"``): ``missing-zh`` when
    it has no entry or an empty ``zh``, ``missing-en`` when the script does not exist, else like a
    page. ``entries``: :func:`load_summaries`, when the caller has already read it."""
    root = Path(root).resolve()
    en, zh = root / script, root / SUMMARIES
    entries = load_summaries(root) if entries is None else entries
    current = text_sha256(script_purpose(en)) if en.is_file() else None
    entry = entries.get(script)
    if not isinstance(entry, dict) or not isinstance(entry.get("zh"), str) or not entry["zh"].strip():
        return Status("missing-zh", None, current, en, zh, "summary")
    recorded = entry.get("source_sha256")
    recorded = recorded.strip().lower() if isinstance(recorded, str) else None
    if current is None:
        return Status("missing-en", recorded, None, en, zh, "summary")
    if recorded is None or not _HEX64.fullmatch(recorded):
        return Status("no-record", recorded, current, en, zh, "summary")
    return Status("ok" if recorded == current else "stale", recorded, current, en, zh, "summary")


def summary_statuses(root: str | os.PathLike = ROOT) -> list[Status]:
    """:func:`summary_status` of every embedded script, then ``missing-en`` for each entry of
    :data:`SUMMARIES` that names no embedded script (a script the book no longer shows)."""
    root = Path(root).resolve()
    entries = load_summaries(root)
    scripts = embedded_scripts(root)
    result = [summary_status(script, root, entries) for script in scripts]
    for orphan in sorted(set(entries) - set(scripts)):
        entry = entries[orphan]
        recorded = entry.get("source_sha256") if isinstance(entry, dict) else None
        result.append(Status("missing-en", recorded if isinstance(recorded, str) else None, None,
                             root / orphan, root / SUMMARIES, "summary"))
    return result


# --------------------------------------------------------------------------- stamping

def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _significant(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _plan_set(lines: list[str], path: tuple[str, ...], value: str) -> tuple[int, int, list[str]]:
    """Plan a minimal edit setting ``path`` to ``value`` in block-style YAML lines.

    Returns (index, n_replaced, new_lines): replace ``lines[index:index+n_replaced]``
    with ``new_lines``.  Only the value line changes, or the missing keys are
    inserted; every other line stays byte-identical.
    """
    start, end, parent_indent = 0, len(lines), -1
    for depth, key in enumerate(path):
        block = [i for i in range(start, end) if _significant(lines[i])]
        child_indent = _indent(lines[block[0]]) if block else parent_indent + 2 if depth else 0
        found = None
        key_re = re.compile(r"( *)([\"']?)" + re.escape(key) + r"\2[ \t]*:(?:[ \t]+(.*))?$")
        for i in block:
            m = key_re.match(lines[i])
            if m and _indent(lines[i]) == child_indent:
                found, rest = i, (m.group(3) or "").strip()
                break
        if found is None:
            new = []
            for k, missing in enumerate(path[depth:]):
                pad = " " * (child_indent + 2 * k)
                new.append(f"{pad}{missing}: {value}" if depth + k == len(path) - 1 else f"{pad}{missing}:")
            # at the end of the parent block (after its last significant line)
            return (block[-1] + 1 if block else start), 0, new
        if depth == len(path) - 1:
            line = lines[found]
            colon = line.index(":", _indent(line) + len(key))
            return found, 1, [f"{line[:colon]}: {value}"]
        if rest and not rest.startswith("#"):
            raise StampError(f"'{key}:' is not a block mapping ({rest!r}); edit the record by hand")
        parent_indent, start = child_indent, found + 1
        end = next((i for i in range(start, end) if _significant(lines[i]) and _indent(lines[i]) <= child_indent), end)
    raise AssertionError("unreachable")


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _stamped_text(path: Path, text: str, sha: str) -> str:
    """Return ``text`` with the record set to ``sha``; body bytes are untouched."""
    notebook = _is_notebook_source(path)
    key_path = NOTEBOOK_RECORD_PATH if notebook else RECORD_PATH
    nl = _newline(text)
    prefix = (lambda s: "# " + s if s else "#") if notebook else (lambda s: s)
    fence = "# ---" if notebook else "---"
    header = _header(path, text)
    if header is None:
        if notebook and text.startswith("# ---"):
            raise StampError(f"{path}: unreadable jupytext header; edit the record by hand")
        if not notebook and _FRONT_MATTER.match(text) is None and text.startswith("---"):
            raise StampError(f"{path}: unterminated front matter; edit the record by hand")
        new = [fence] + [prefix(s) for s in _plan_set([], key_path, sha)[2]] + [fence]
        # jupytext separates the header from the first cell by a blank line
        return nl.join(new) + nl + (nl if notebook else "") + text
    yaml_lines, first, _ = header
    try:
        yaml.safe_load("\n".join(yaml_lines))
    except yaml.YAMLError as exc:
        raise StampError(f"{path}: front matter is not valid YAML: {exc}") from None
    idx, n, new_lines = _plan_set(yaml_lines, key_path, sha)
    lines = text.splitlines(keepends=True)
    lines[first + idx: first + idx + n] = [prefix(s) + nl for s in new_lines]
    result = "".join(lines)
    header = _header(path, result)
    try:
        check = yaml.load("\n".join(header[0]), Loader=yaml.BaseLoader) if header else None
    except yaml.YAMLError:
        check = None
    if str(_dig(check, key_path)) != sha:
        raise StampError(f"{path}: could not place the record; edit it by hand")
    return result


def stamp(zh_path: str | os.PathLike, root: str | os.PathLike = ROOT) -> tuple[str | None, str]:
    """Write the current English hash into a Chinese page/notebook record.

    Keeps the rest of the header and the whole body byte-identical.
    Returns (previous record, new hash).  Raises FileNotFoundError if either
    side is missing and :class:`StampError` for headers it will not rewrite.
    """
    zh = Path(zh_path)
    zh = zh.resolve().with_suffix(".py") if zh.suffix == ".ipynb" else zh.resolve()  # .zh.ipynb -> .zh.py
    en = counterpart(zh, root)
    if "zh" not in zh.relative_to(Path(root).resolve()).parts[:2] and not zh.name.endswith(".zh.py"):
        raise ValueError(f"{zh}: not a Chinese page or notebook")
    if not en.is_file():
        raise FileNotFoundError(f"English source missing: {en}")
    sha = english_sha256(en)
    previous = read_record(zh)
    raw = zh.read_bytes()
    text = raw.decode("utf-8")
    new = _stamped_text(zh, text, sha)
    if new != text:
        zh.write_bytes(new.encode("utf-8"))
    return previous, sha


def stamp_summary(script: str, root: str | os.PathLike = ROOT) -> tuple[str | None, str]:
    """Write the hash of a script's current English purpose into its entry of :data:`SUMMARIES`.

    Only that entry's ``source_sha256:`` line changes (or is added); every other byte of the file
    stays. Returns (previous record, new hash). Raises FileNotFoundError when the script is
    missing, ValueError when no English page embeds it and :class:`StampError` when it has no
    Chinese summary to stamp.
    """
    root = Path(root).resolve()
    en, path = root / script, root / SUMMARIES
    if not en.is_file():
        raise FileNotFoundError(f"English source missing: {en}")
    if script not in embedded_scripts(root):
        raise ValueError(f"{script}: no English page embeds it (embed-script marker)")
    entries = load_summaries(root)
    status = summary_status(script, root, entries)
    if status.state == "missing-zh":
        raise StampError(f"{script}: no Chinese summary in {SUMMARIES.as_posix()}; write its zh: first")
    sha = status.current
    text = path.read_bytes().decode("utf-8")
    nl = _newline(text)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += nl
    idx, n, new_lines = _plan_set([line.rstrip("\r\n") for line in lines], (script, "source_sha256"), sha)
    lines[idx: idx + n] = [line + nl for line in new_lines]
    new = "".join(lines)
    try:
        check = yaml.load(new, Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        check = None
    if _dig(check, (script, "source_sha256")) != sha or _dig(check, (script, "zh")) != entries[script]["zh"]:
        raise StampError(f"{SUMMARIES.as_posix()}: could not place the record of {script}; edit it by hand")
    if new != text:
        path.write_bytes(new.encode("utf-8"))
    return status.recorded, sha


# --------------------------------------------------------------------------- diff

def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)


def recorded_commit(zh_path: str | os.PathLike, root: str | os.PathLike = ROOT) -> str | None:
    """Newest commit whose English file hashes to the Chinese page's record (None if none)."""
    root = Path(root).resolve()
    en = counterpart(zh_path, root)
    recorded = read_record(zh_path)
    rel = en.relative_to(root).as_posix()
    log = _git(root, "log", "--format=%H", "--", rel)
    if log.returncode or not recorded:
        return None
    for commit in log.stdout.decode().split():
        blob = _git(root, "show", f"{commit}:{rel}")
        if blob.returncode == 0 and _sha256(blob.stdout) == recorded:
            return commit
    return None


# --------------------------------------------------------------------------- terminology

TERMINOLOGY = ROOT / "tools" / "terminology.yml"


def load_terminology(path: str | os.PathLike = TERMINOLOGY) -> list[dict]:
    """The terminology list: mappings with ``en``, ``zh``, ``keep_english`` and optional ``note``/``check``."""
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _english_prose(path: Path) -> str:
    """Prose of an English page/notebook: no front matter, code, link targets or HTML comments."""
    text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
    if _is_notebook_source(path):  # keep only markdown cells of a py:percent notebook
        keep, out = False, []
        for line in text.split("\n"):
            if line.startswith("# %%"):
                keep = "[markdown]" in line
            elif keep:
                out.append(_unprefix(line) or "")
        text = "\n".join(out)
    else:
        text = _FRONT_MATTER.sub("", text, count=1)
    text = re.sub(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2[ \t]*$", "", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"(`+).+?\1", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return text


def term_pattern(term: str) -> re.Pattern:
    """Whole-word, case-insensitive pattern for an English term (plural s/es, space or hyphen)."""
    words = [re.escape(w) for w in re.split(r"[\s-]+", term.strip())]
    return re.compile(r"(?<![\w-])" + r"[\s-]+".join(words) + r"(?:s|es)?(?![\w-])", re.I)


def terminology_issues(root: str | os.PathLike = ROOT, terms: list[dict] | None = None,
                       only_checked: bool = True) -> list[tuple[Path, str, str]]:
    """Chinese pages that do not use the listed term where the English page uses it.

    For each entry (only those with ``check: true`` unless ``only_checked`` is
    False) whose English term appears in the English prose, the Chinese page
    must contain the ``zh`` term (for ``keep_english`` entries: the English
    term itself, case-insensitive).  Returns (zh_path, en_term, expected) triples.
    """
    terms = load_terminology() if terms is None else terms
    terms = [t for t in terms if t.get("check") or not only_checked]
    issues = []
    for en, zh in pairs(root):
        if not (en.is_file() and zh.is_file()):
            continue
        prose = _english_prose(en)
        zh_text = zh.read_text(encoding="utf-8")
        for t in terms:
            if not term_pattern(t["en"]).search(prose):
                continue
            expected = t["en"] if t.get("keep_english") else t["zh"]
            if expected.lower() not in zh_text.lower():
                issues.append((zh, t["en"], expected))
    return issues


# --------------------------------------------------------------------------- CLI

def _rel(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _cmd_status(args) -> int:
    root = Path(args.root).resolve()
    try:
        result = statuses(root)
    except ValueError as exc:  # an unreadable script_summaries.yml
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([
            {"state": s.state, "kind": s.kind, "zh": _rel(s.zh_path, root), "en": _rel(s.en_path, root),
             "recorded": s.recorded, "current": s.current} for s in result], indent=2))
    else:
        for s in result:
            print(f"{s.state:<10}  {s.kind:<8}  {_rel(s.zh_path, root)}  <-  {_rel(s.en_path, root)}")
        counts = {state: sum(s.state == state for s in result) for state in STATES}
        print(", ".join(f"{n} {state}" for state, n in counts.items()) + f" ({len(result)} pairs)",
              file=sys.stderr)
    if not result:
        print(f"error: no pages or notebooks found under {root}", file=sys.stderr)
        return 1
    if any(s.state in FAILING_STATES for s in result):
        return 1
    if args.strict and any(s.state == "stale" for s in result):
        return 1
    return 0


def _summary_targets(path: Path, root: Path) -> list[str] | None:
    """The scripts whose summaries a ``stamp`` argument names (None: it is a page or notebook)."""
    rel = _rel(path.resolve(), root)
    if rel == SUMMARIES.as_posix():
        return embedded_scripts(root)
    if rel.startswith("scripts/"):
        return [rel]
    return None


def _cmd_stamp(args) -> int:
    root = Path(args.root).resolve()
    rc = 0
    for name in args.paths:
        path = Path(name)
        if not path.exists() and (root / name).exists():
            path = root / name
        scripts = _summary_targets(path, root)
        for script in scripts or ():
            try:
                previous, sha = stamp_summary(script, root)
            except (OSError, ValueError, StampError) as exc:
                print(f"error: {script}: {exc}", file=sys.stderr)
                rc = 1
                continue
            what = "unchanged" if previous == sha else f"{(previous or 'none')[:12]} -> {sha[:12]}"
            print(f"stamped the summary of {script}: {what}")
        if scripts is not None:
            continue
        try:
            previous, sha = stamp(path, root)
        except (OSError, ValueError, StampError) as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            rc = 1
            continue
        what = "unchanged" if previous == sha else f"{(previous or 'none')[:12]} -> {sha[:12]}"
        print(f"stamped {name}: {what}")
        ipynb = path.resolve().with_suffix(".ipynb")
        if path.suffix in (".py", ".ipynb") and ipynb.exists() and previous != sha:
            print(f"  note: run `jupytext --sync {name}` to carry the record into {ipynb.name}")
    return rc


def _cmd_diff(args) -> int:
    root = Path(args.root).resolve()
    path = Path(args.path)
    if not path.exists() and (root / args.path).exists():
        path = root / args.path
    if path.suffix == ".ipynb":
        path = path.resolve().with_suffix(".py")
    status = page_status(counterpart(path, root), path)
    if status.state == "ok":
        print(f"{args.path}: up to date with its English source")
        return 0
    if status.state != "stale":
        print(f"error: {args.path}: {status.state}", file=sys.stderr)
        return 1
    commit = recorded_commit(path, root)
    if commit is None:
        print(f"error: no commit of {_rel(status.en_path, root)} matches the recorded hash "
              f"{status.recorded[:12]} (was it stamped from uncommitted text?)", file=sys.stderr)
        return 1
    print(f"# English changes since {commit[:12]} (the translated version):", flush=True)
    return subprocess.run(["git", "-C", str(root), "--no-pager", "diff", commit, "--",
                           _rel(status.en_path, root)]).returncode


def _cmd_terms(args) -> int:
    root = Path(args.root).resolve()
    issues = terminology_issues(root, load_terminology(args.terminology), only_checked=not args.all)
    for zh, en_term, expected in issues:
        print(f"{_rel(zh, root)}: English uses '{en_term}', translation lacks '{expected}'")
    return 1 if issues else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT), help="repository root (default: %(default)s)")
    common = argparse.ArgumentParser(add_help=False)  # so --root also works after the subcommand
    common.add_argument("--root", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    add = lambda name, **kw: sub.add_parser(name, parents=[common], **kw)  # noqa: E731
    p = add("status", help="list every pair: ok/stale/missing-zh/missing-en/no-record")
    p.add_argument("--strict", action="store_true", help="exit 1 on stale pages too")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)
    p = add("stamp", help="record the current English hash in Chinese pages/notebooks/script summaries")
    p.add_argument("paths", nargs="+", help="book/zh/**.md, notebooks/**.zh.py, scripts/<part>/<file> "
                   f"(its summary) or {SUMMARIES.as_posix()} (every summary)")
    p.set_defaults(func=_cmd_stamp)
    p = add("diff", help="git diff of the English source since the recorded version")
    p.add_argument("path", help="book/zh/**.md or notebooks/**.zh.py")
    p.set_defaults(func=_cmd_diff)
    p = add("terms", help="check that Chinese pages use the terminology list")
    p.add_argument("--all", action="store_true", help="check every entry, not only check: true")
    p.add_argument("--terminology", default=str(TERMINOLOGY), help="terminology YAML (default: %(default)s)")
    p.set_defaults(func=_cmd_terms)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
