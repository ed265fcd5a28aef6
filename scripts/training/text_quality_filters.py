#!/usr/bin/env python
"""text_quality_filters.py: heuristic quality filters for pre-training text, with the reason for
every removal.

It reads a corpus (JSONL, one document per line, or a folder of ``.txt`` files), computes for
each document the statistics of Gopher's quality and repetition filters (Rae et al. 2021,
appendix A.1.1 and Table A1: word count, word length, symbols, bullet and ellipsis lines,
alphabetic words, stop words, repeated lines, paragraphs and n-grams) and of C4's rules (Raffel
et al. 2020, section 2.2: lorem ipsum, curly brackets, sentences left by the line rules), and
removes a document when any of them falls outside its published range. It prints how many
documents each filter rejects, then every removed document with the filters it failed and the
measured values, so that thresholds can be tuned by reading what they remove. The Data chapter
lists the filters, their ranges and the keys of ``--json PATH``; ``--list`` prints the filters.
Standard library only::

    python text_quality_filters.py corpus.jsonl                # JSONL with a "text" field
    python text_quality_filters.py corpus.jsonl --disable c4_sentences \\
        --set mean_word_length=2:12 --keep-prob 0.1 --json report.json --kept kept.jsonl

``--set NAME=LO:HI`` changes a range (a side may be empty), ``--disable NAME`` switches a filter
off, ``--keep-prob P`` keeps a failing document with probability P (a hash of ``--seed`` and its
id), ``--kept PATH`` writes the survivors. Exit status: 0 ok, 2 usage or unreadable input.

Example output (the book's corpus, in 0.3 s on a 2-core VM)::

    $ python scripts/training/text_quality_filters.py data/training/corpus.jsonl
    ...
    # removed 44 of 208 documents (21.2%), kept 164
      doc-0001: bullet_line_fraction=1 > 0.9, stop_word_count=1 < 2, c4_sentences=0 < 3
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import string
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROG = "text_quality_filters.py"
STOP_WORDS = frozenset("the be to of and that have with".split())  # Gopher, appendix A.1.1
BULLETS = ("•", "●", "‣", "◦", "▪", "-", "*", "·")  # line starts counted as bullet points
ELLIPSES = ("...", "…")
PUNCTUATION = string.punctuation + "«»“”‘’…" + "".join(BULLETS)  # stripped from word ends
C4_END_MARKS = (".", "?", "!", '"')  # c4_utils.py _END_MARKS
C4_MIN_WORDS_PER_LINE = 5            # c4_utils.py _MIN_WORDS_PER_LINE
GOPHER = "Gopher (Rae et al. 2021, app. A.1.1)"
GOPHER_REP = "Gopher (Rae et al. 2021, Table A1)"
C4 = "C4 (Raffel et al. 2020, sec. 2.2)"


@dataclass
class Doc:
    """One document split the ways the filters need (computed once, shared by all filters)."""
    text: str
    lines: list[str]
    paragraphs: list[str]
    words: list[str]          # punctuation-stripped, original case
    norm_words: list[str]     # lowercased ``words``

    @classmethod
    def from_text(cls, text: str) -> Doc:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
        words = [w for w in (t.strip(PUNCTUATION) for t in text.split()) if w]
        return cls(text, lines, paragraphs, words, [w.lower() for w in words])

    @property
    def word_chars(self) -> int:
        return sum(len(w) for w in self.words)


def _repeated(items: list[str]) -> tuple[int, int]:
    """(number, total characters) of items that repeat an earlier item."""
    seen, n, chars = set(), 0, 0
    for item in items:
        if item in seen:
            n += 1
            chars += len(item)
        seen.add(item)
    return n, chars


def _fraction(num: float, den: float) -> float:
    return num / den if den else 0.0


def top_ngram_char_fraction(doc: Doc, n: int) -> float:
    """Characters in all occurrences of the most frequent word n-gram / characters in words.

    Gopher, Table A1 ("top n-gram character fraction"), n = 2, 3, 4."""
    words = doc.norm_words
    if len(words) < n:
        return 0.0
    counts = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    gram, count = counts.most_common(1)[0]
    if count < 2:
        return 0.0
    return _fraction(count * sum(len(w) for w in gram), doc.word_chars)


def duplicate_ngram_char_fraction(doc: Doc, n: int) -> float:
    """Characters in words covered by any word n-gram occurring more than once / characters in
    words (each word counted once however many repeated n-grams cover it).

    Gopher, Table A1 ("duplicate n-gram character fraction"), n = 5..10."""
    words = doc.norm_words
    if len(words) < n:
        return 0.0
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if counts[g] > 1:
            for j in range(i, i + n):
                covered[j] = True
    return _fraction(sum(len(w) for w, c in zip(words, covered, strict=True) if c), doc.word_chars)


def c4_sentence_count(doc: Doc) -> float:
    """Sentences in the lines that C4's line rules keep (a line ends with . ? ! or a quote, has
    at least 5 words and does not contain "javascript"); sentences end in . ? or !."""
    kept = [ln for ln in doc.lines if ln.endswith(C4_END_MARKS)
            and len(ln.split()) >= C4_MIN_WORDS_PER_LINE and "javascript" not in ln.lower()]
    return float(sum(len(re.findall(r"[.!?]+(?=\s|$|\")", ln)) for ln in kept))


@dataclass
class Filter:
    """One statistic and its allowed range [min, max] (None: unbounded)."""
    name: str
    measure: Callable[[Doc], float]
    min: float | None
    max: float | None
    source: str
    description: str

    def check(self, doc: Doc) -> tuple[float, bool]:
        """(value, passed)."""
        v = self.measure(doc)
        ok = (self.min is None or v >= self.min) and (self.max is None or v <= self.max)
        return v, ok


def default_filters() -> list[Filter]:
    """The filters of the Data chapter's table, with their published thresholds."""
    f = [
        Filter("word_count", lambda d: float(len(d.words)), 50, 100_000, GOPHER, "words"),
        Filter("mean_word_length", lambda d: _fraction(d.word_chars, len(d.words)), 3, 10,
               GOPHER, "mean characters per word"),
        Filter("hash_to_word_ratio", lambda d: _fraction(d.text.count("#"), len(d.words)),
               None, 0.1, GOPHER, "'#' characters per word"),
        Filter("ellipsis_to_word_ratio",
               lambda d: _fraction(d.text.count("...") + d.text.count("…"), len(d.words)),
               None, 0.1, GOPHER, "ellipses per word"),
        Filter("bullet_line_fraction",
               lambda d: _fraction(sum(ln.startswith(BULLETS) for ln in d.lines), len(d.lines)),
               None, 0.9, GOPHER, "fraction of lines starting with a bullet"),
        Filter("ellipsis_line_fraction",
               lambda d: _fraction(sum(ln.endswith(ELLIPSES) for ln in d.lines), len(d.lines)),
               None, 0.3, GOPHER, "fraction of lines ending with an ellipsis"),
        Filter("alpha_word_fraction",
               lambda d: _fraction(sum(any(c.isalpha() for c in w) for w in d.words),
                                   len(d.words)),
               0.8, None, GOPHER, "fraction of words with an alphabetic character"),
        Filter("stop_word_count", lambda d: float(len(STOP_WORDS.intersection(d.norm_words))),
               2, None, GOPHER, "distinct stop words present (the be to of and that have with)"),
        Filter("duplicate_line_fraction",
               lambda d: _fraction(_repeated(d.lines)[0], len(d.lines)), None, 0.30, GOPHER_REP,
               "fraction of lines repeating an earlier line"),
        Filter("duplicate_paragraph_fraction",
               lambda d: _fraction(_repeated(d.paragraphs)[0], len(d.paragraphs)), None, 0.30,
               GOPHER_REP, "fraction of paragraphs repeating an earlier one"),
        Filter("duplicate_line_chars",
               lambda d: _fraction(_repeated(d.lines)[1], sum(map(len, d.lines))), None, 0.20,
               GOPHER_REP, "fraction of characters in repeated lines"),
        Filter("duplicate_paragraph_chars",
               lambda d: _fraction(_repeated(d.paragraphs)[1], sum(map(len, d.paragraphs))),
               None, 0.20, GOPHER_REP, "fraction of characters in repeated paragraphs"),
    ]
    for n, limit in ((2, 0.20), (3, 0.18), (4, 0.16)):
        f.append(Filter(f"top_{n}gram_chars", lambda d, n=n: top_ngram_char_fraction(d, n),
                        None, limit, GOPHER_REP,
                        f"fraction of characters in the most frequent word {n}-gram"))
    for n, limit in zip(range(5, 11), (0.15, 0.14, 0.13, 0.12, 0.11, 0.10), strict=True):
        f.append(Filter(f"duplicate_{n}gram_chars",
                        lambda d, n=n: duplicate_ngram_char_fraction(d, n), None, limit,
                        GOPHER_REP, f"fraction of characters in repeated word {n}-grams"))
    f += [
        Filter("c4_lorem_ipsum", lambda d: float(d.text.lower().count("lorem ipsum")), None, 0,
               C4, "occurrences of 'lorem ipsum'"),
        Filter("c4_curly_bracket", lambda d: float(d.text.count("{")), None, 0, C4,
               "'{' characters"),
        Filter("c4_sentences", c4_sentence_count, 3, None, C4,
               "sentences in lines kept by C4's line rules"),
    ]
    return f


def keep_by_chance(seed: int, doc_id: str, keep_prob: float) -> bool:
    """True with probability ``keep_prob``, decided by a hash of (seed, doc_id): reproducible."""
    if keep_prob <= 0:
        return False
    h = hashlib.blake2b(f"{seed}:{doc_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < keep_prob


# Reading the corpus within bounds (read_chunks, read_lines, read_txt, check_field, InputError and
# the limits MAX_CORPUS_BYTES, MAX_LINE_BYTES, PIPE_WAIT_S) is shared with minhash_dedup.py: it is in
# the generated block at the end.


def read_corpus(path: Path, text_key: str, id_key: str) -> list[tuple[str, str, dict]]:
    """Documents as (id, text, record) from a JSONL file (or a pipe) or a folder of .txt files,
    read within MAX_CORPUS_BYTES and MAX_LINE_BYTES.

    Raises InputError naming the file (and line, and field) for a missing path, a device, a line
    that is not a JSON object, a record without a string ``text_key``, or an ``id_key`` that is
    not a string or an integer. Records without ``id_key`` get ``line-N``."""
    budget = [MAX_CORPUS_BYTES]
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: no such file or directory")
    docs = []
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise InputError(f"{path}: folder holds no .txt files")
        for p in files:
            text = read_txt(p, budget)
            docs.append((str(p.relative_to(path)), text, {"id": str(p.relative_to(path)),
                                                         text_key: text}))
        return docs
    for n, raw in read_lines(path, budget):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}:{n}: not UTF-8 text (byte {exc.start + 1} of the "
                             "line); convert the file to UTF-8") from None
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise InputError(f"{path}:{n}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
        if not isinstance(rec, dict):
            raise InputError(f"{path}:{n}: a JSON object was expected")
        if not isinstance(rec.get(text_key), str):
            raise InputError(f"{path}:{n}: no string field {text_key!r} "
                             f"(choose another with --text-key)")
        check_field(path, n, rec, id_key, (str, int), "a string or an integer (the document's id)")
        docs.append((str(rec.get(id_key, f"line-{n}")), rec[text_key], rec))
    if not docs:
        raise InputError(f"{path}: no documents")
    return docs


def run_filters(docs: list[tuple[str, str, dict]], filters: list[Filter], keep_prob: float,
                seed: int) -> list[dict]:
    """One decision per document: {"id", "removed", "kept_by_chance", "failed": [...]}."""
    decisions = []
    for doc_id, text, _ in docs:
        d = Doc.from_text(text)
        failed = []
        for flt in filters:
            value, ok = flt.check(d)
            if not ok:
                failed.append({"filter": flt.name, "value": round(value, 4)})
        lucky = bool(failed) and keep_by_chance(seed, doc_id, keep_prob)
        decisions.append({"id": doc_id, "removed": bool(failed) and not lucky,
                          "kept_by_chance": lucky, "failed": failed})
    return decisions


def _range(flt: Filter) -> str:
    fmt = lambda x: f"{x:g}"  # noqa: E731
    if flt.min is not None and flt.max is not None:
        return f"{fmt(flt.min)}..{fmt(flt.max)}"
    return f">= {fmt(flt.min)}" if flt.min is not None else f"<= {fmt(flt.max)}"


def _why(flt: Filter, value: float) -> str:
    """'name=value < min' or 'name=value > max': why a document failed ``flt``."""
    if flt.min is not None and value < flt.min:
        return f"{flt.name}={value:.4g} < {flt.min:g}"
    return f"{flt.name}={value:.4g} > {flt.max:g}"


def print_report(docs: list[tuple[str, str, dict]], filters: list[Filter], decisions: list[dict],
                 args: argparse.Namespace) -> None:
    """The text report: documents failed per filter, then each removed document and why."""
    failed_by = Counter(x["filter"] for d in decisions for x in d["failed"])
    removed = [d for d in decisions if d["removed"]]
    lucky = sum(d["kept_by_chance"] for d in decisions)
    print(f"# {PROG}: {len(docs)} documents from {args.corpus}")
    print(f"# a document is removed when any filter fails; keep-prob {args.keep_prob:g} "
          f"(seed {args.seed})")
    print(f"# {'filter':30s} {'allowed':>12s} {'failed':>7s}  source")
    for f in filters:
        print(f"  {f.name:30s} {_range(f):>12s} {failed_by[f.name]:7d}  {f.source}")
    print(f"# removed {len(removed)} of {len(docs)} documents "
          f"({100 * len(removed) / len(docs):.1f}%), kept {len(docs) - len(removed)}"
          + (f" ({lucky} of them failed but were kept by chance)" if args.keep_prob else ""))
    by_name = {f.name: f for f in filters}
    for d in removed[:args.show]:
        why = [_why(by_name[x["filter"]], x["value"]) for x in d["failed"]]
        more = f", +{len(why) - 3} more" if len(why) > 3 else ""
        print(f"  {d['id']}: {', '.join(why[:3])}{more}")
    if len(removed) > args.show:
        print(f"  ... and {len(removed) - args.show} more (--show N to see them)")


def json_report(docs: list[tuple[str, str, dict]], filters: list[Filter], decisions: list[dict],
                args: argparse.Namespace) -> dict:
    """The ``--json`` document (its keys are listed in the Data chapter)."""
    failed_by = Counter(x["filter"] for d in decisions for x in d["failed"])
    removed = sum(d["removed"] for d in decisions)
    return {"tool": "text_quality_filters", "schema_version": 1,
            "input": str(args.corpus), "documents": len(docs), "removed": removed,
            "kept": len(docs) - removed,
            "kept_by_chance": sum(d["kept_by_chance"] for d in decisions),
            "keep_prob": args.keep_prob, "seed": args.seed,
            "filters": [{"name": f.name, "min": f.min, "max": f.max, "source": f.source,
                         "description": f.description, "failed": failed_by[f.name]}
                        for f in filters],
            "decisions": decisions}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Heuristic quality filters (Gopher, C4) for pre-training text; "
        "reports what was removed and why.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("corpus", type=nonempty, nargs="?",
                   help="JSONL file (one document per line) or folder of .txt files")
    p.add_argument("--text-key", default="text", help="JSONL field holding the text")
    p.add_argument("--id-key", default="id", help="JSONL field holding the document id")
    p.add_argument("--disable", action="append", default=[], metavar="NAME",
                   help="switch a filter off (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=LO:HI", dest="ranges",
                   help="change a filter's allowed range; LO or HI may be empty (repeatable)")
    p.add_argument("--keep-prob", type=number(float, 0, 1), default=0.0,
                   help="keep each failing document with this probability (default 0)")
    p.add_argument("--seed", type=number(int), default=0, help="seed of --keep-prob's decisions")
    p.add_argument("--show", type=number(int, 0), default=100,
                   help="print at most this many removed documents (default 100)")
    p.add_argument("--list", action="store_true", help="print the filters and exit")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the report as JSON")
    p.add_argument("--kept", type=nonempty, metavar="PATH",
                   help="write the documents that survive as JSONL")
    return p


def configure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Filter]:
    """Apply --disable and --set to the default filters; parser.error on a bad name/range."""
    filters = {f.name: f for f in default_filters()}
    for name in args.disable:
        if name not in filters:
            parser.error(f"--disable: unknown filter {name!r} (see --list)")
        del filters[name]
    for spec in args.ranges:
        name, sep, rng = spec.partition("=")
        lo, colon, hi = rng.partition(":")
        if not sep or not colon:
            parser.error(f"--set: expected NAME=LO:HI, got {spec!r}")
        if name not in filters:
            parser.error(f"--set: unknown or disabled filter {name!r} (see --list)")
        try:
            bounds = [float(x) if x.strip() else None for x in (lo, hi)]
        except ValueError:
            parser.error(f"--set: {spec!r}: LO and HI must be numbers or empty")
        if any(b is not None and not math.isfinite(b) for b in bounds):
            parser.error(f"--set: {spec!r}: LO and HI must be finite (leave a side empty "
                         "for no bound)")
        if bounds == [None, None]:
            parser.error(f"--set: {spec!r} sets no bound (use --disable to switch it off)")
        if None not in bounds and bounds[0] > bounds[1]:
            parser.error(f"--set: {spec!r}: LO is above HI, so every document would fail")
        filters[name].min, filters[name].max = bounds
    return list(filters.values())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    filters = configure(args, parser)
    if args.list:
        for f in filters:
            print(f"{f.name:30s} {_range(f):>12s}  {f.description} [{f.source}]")
        return 0
    if args.corpus is None:
        parser.error("the corpus argument is required (a JSONL file or a folder of .txt)")
    args.corpus = Path(args.corpus)
    for option, path in (("--json", args.json), ("--kept", args.kept)):
        if path:
            check_output(path, option, inputs=[args.corpus])
    try:
        docs = read_corpus(args.corpus, args.text_key, args.id_key)
    except (InputError, OSError) as exc:
        raise ScriptError(str(exc), EXIT_USAGE) from None
    decisions = run_filters(docs, filters, args.keep_prob, args.seed)
    print_report(docs, filters, decisions, args)
    if args.json:
        report = json_report(docs, filters, decisions, args)
        write_atomic(args.json, json.dumps(report, indent=1) + "\n")
    if args.kept:
        write_atomic(args.kept, "".join(json.dumps(rec, ensure_ascii=False) + "\n"
                                        for (_, _, rec), d in zip(docs, decisions, strict=True)
                                        if not d["removed"]))
    return 0


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


# This tool holds the whole corpus in memory, so what it reads is bounded: a corpus larger than
# this is split first (or handled by a streaming pipeline), and a line larger than this is not
# one document.
MAX_CORPUS_BYTES = 1 << 30   # all of it: a JSONL file, or the .txt files of a folder together


MAX_LINE_BYTES = 64 << 20    # one JSONL line, or one .txt file


PIPE_WAIT_S = 10.0           # a pipe (<(zcat c.jsonl.gz), a FIFO) silent this long is given up


class InputError(Exception):
    """A problem with the input corpus; the message names the file and line."""


def read_chunks(path: Path, budget: list[int]):
    """The bytes of ``path`` in chunks of up to 1 MiB: a regular file, or a pipe read until its
    writer closes it. ``budget[0]`` is what may still be read (a folder's files share one); each
    chunk is taken off it. Raises InputError naming the file for a missing or unreadable one, a
    device (/dev/zero) or socket, a pipe that gives nothing for PIPE_WAIT_S seconds (a FIFO with
    no writer), or more than the budget."""
    import select
    import stat

    def too_large():
        return InputError(f"{path}: more than {MAX_CORPUS_BYTES / 2**30:g} GiB of corpus, the most this "
                          "tool holds in memory; split the corpus")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read it ({err.strerror})") from None
    try:
        info = os.fstat(fd)
        pipe = stat.S_ISFIFO(info.st_mode)
        if not (stat.S_ISREG(info.st_mode) or pipe):
            raise InputError(f"{path}: is not a regular file or a pipe")
        if info.st_size > budget[0]:
            raise too_large()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            if pipe and not poller.poll(PIPE_WAIT_S * 1000):
                raise InputError(f"{path}: a pipe that gave no data for {PIPE_WAIT_S:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise InputError(f"{path}: cannot read it ({err.strerror})") from None
            if not chunk:
                return
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise too_large()
            yield chunk
    finally:
        os.close(fd)


def read_lines(path: Path, budget: list[int]):
    """(line number from 1, bytes without the newline) of each line of ``path`` (``read_chunks``);
    InputError naming the file and line for a line longer than MAX_LINE_BYTES."""
    number, parts, size = 0, [], 0

    def too_long():
        return InputError(f"{path}:{number + 1}: a line of more than {MAX_LINE_BYTES >> 20} MiB; "
                          "expected one JSON document per line")
    for chunk in read_chunks(path, budget):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if size + end - start > MAX_LINE_BYTES:
                raise too_long()
            number += 1
            yield number, b"".join(parts) + chunk[start:end]
            parts, size, start = [], 0, end + 1
        parts.append(chunk[start:])
        size += len(chunk) - start
        if size > MAX_LINE_BYTES:
            raise too_long()
    if size:
        yield number + 1, b"".join(parts)


def read_txt(path: Path, budget: list[int]) -> str:
    """The UTF-8 text of ``path`` (``read_chunks``, at most MAX_LINE_BYTES); InputError naming
    the file and line when it is larger or not UTF-8."""
    chunks, size = [], 0
    for chunk in read_chunks(path, budget):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_LINE_BYTES:
            raise InputError(f"{path}: more than {MAX_LINE_BYTES >> 20} MiB, more than one document")
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {exc.start - start + 1} of the "
                         "line); convert the file to UTF-8") from None


def check_field(path: Path, number: int, record: dict, key: str, kinds: tuple, words: str) -> None:
    """InputError naming the file, the line and the field when ``record[key]`` is there (and not
    null) but not of ``kinds`` (a bool is no number)."""
    value = record.get(key)
    if value is not None and (isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds)):
        raise InputError(f"{path}:{number}: field {key!r} must be {words}, got {type(value).__name__} "
                         f"{json.dumps(value, ensure_ascii=False)[:40]}")
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
