#!/usr/bin/env python
"""minhash_dedup.py: find near-duplicate documents with MinHash signatures and LSH banding.

Each document is normalized (Unicode NFKC, lower case, punctuation removed, whitespace collapsed)
and cut into shingles, word or character n-grams (``--shingle``, ``--ngram``). Each shingle is
hashed once (64-bit BLAKE2b), and the document's MinHash signature holds k = ``--num-perm``
minima of seeded universal hashes (a x + b) mod (2^61 - 1): the share of positions where two
signatures agree estimates their Jaccard similarity J, with standard error sqrt(J (1 - J) / k)
(Broder 1997). LSH banding (b ``--bands`` of r ``--rows``, b r = k) makes a pair a candidate
when one band agrees, with probability 1 - (1 - s^r)^b, steepest near (1/b)^(1/r). A candidate
is kept when its estimated Jaccard (``--verify exact``: the exact one) reaches ``--threshold``;
kept pairs form clusters (union-find), whose first document stays while the others are the
duplicates to drop. The Data chapter explains the method and lists the keys of ``--json PATH``.
Standard library only::

    python minhash_dedup.py corpus.jsonl                       # JSONL with "id" and "text"
    python minhash_dedup.py pages/ --shingle char --ngram 9   # folder of .txt files

``--truth-key FIELD`` scores the result against duplicate groups labelled in the corpus.
Exit status: 0 ok, 2 usage or unreadable input (one line naming the file and line).

Example output (the book's corpus, 208 documents, in about 1 s on a 2-core VM)::

    $ python scripts/training/minhash_dedup.py data/training/corpus.jsonl \\
          --truth-key truth_dup_group
    ...
    # candidate pairs: 52 of 21528 possible; kept 51 with estimate Jaccard >= 0.7
    ...
    # clusters: 20 (sizes [4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]); duplicates to drop (all but the first of each cluster): 35
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import re
import sys
import tempfile
import traceback
import unicodedata
from collections import defaultdict
from itertools import combinations
from pathlib import Path

PROG = "minhash_dedup.py"
MERSENNE_P = (1 << 61) - 1  # prime modulus of the universal hash family
MAX_HASH = MERSENNE_P - 1   # signature value of an empty shingle set
# The estimate's standard error is sqrt(J(1-J)/k): at k = 8192 it is below 0.6 % for any J, and
# every extra permutation costs a hash of every shingle of every document.
MAX_PERM = 8192
# Each candidate pair costs a set entry (~150 bytes) and a Jaccard computation: 2e6 pairs are about
# 300 MB and minutes of verification in pure Python.
MAX_PAIRS = 2_000_000


def normalize(text: str) -> str:
    """NFKC, lower case, punctuation replaced by spaces, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


def shingles(text: str, kind: str = "word", n: int = 5) -> set[str]:
    """The set of word or character n-grams of normalize(text).

    A text shorter than n units gives one shingle (the whole normalized text), and an empty
    text the empty set. Raises ValueError for an unknown ``kind`` or ``n < 1``."""
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    norm = normalize(text)
    if kind == "word":
        units = norm.split()
        if len(units) < n:
            return {" ".join(units)} if units else set()
        return {" ".join(units[i:i + n]) for i in range(len(units) - n + 1)}
    if kind == "char":
        if len(norm) < n:
            return {norm} if norm else set()
        return {norm[i:i + n] for i in range(len(norm) - n + 1)}
    raise ValueError(f"unknown shingle kind {kind!r} (word or char)")


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity |A n B| / |A u B| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def shingle_hash(shingle: str) -> int:
    """64-bit BLAKE2b hash of a shingle (stable across runs and machines, unlike hash())."""
    return int.from_bytes(hashlib.blake2b(shingle.encode("utf-8"), digest_size=8).digest(),
                          "big")


def hash_params(num_perm: int, seed: int) -> list[tuple[int, int]]:
    """(a_i, b_i) for the k universal hash functions h_i(x) = (a_i x + b_i) mod (2^61 - 1)."""
    rng = random.Random(seed)
    return [(rng.randrange(1, MERSENNE_P), rng.randrange(0, MERSENNE_P))
            for _ in range(num_perm)]


def signature(shingle_set: set[str], params: list[tuple[int, int]]) -> list[int]:
    """MinHash signature: k = len(params) values, each min over shingles of h_i(x)
    (Broder 1997). An empty set gives k copies of MAX_HASH."""
    xs = [shingle_hash(s) for s in shingle_set]
    if not xs:
        return [MAX_HASH] * len(params)
    p = MERSENNE_P
    return [min((a * x + b) % p for x in xs) for a, b in params]


def estimate_jaccard(sig_a: list[int], sig_b: list[int]) -> float:
    """Fraction of equal positions of two signatures: an unbiased estimate of Jaccard with
    standard error sqrt(J(1-J)/k) (Broder 1997). Raises ValueError for different lengths."""
    if len(sig_a) != len(sig_b):
        raise ValueError(f"signatures have different lengths ({len(sig_a)}, {len(sig_b)})")
    return sum(x == y for x, y in zip(sig_a, sig_b, strict=True)) / len(sig_a)


def candidate_probability(s: float, bands: int, rows: int) -> float:
    """P(two documents of Jaccard s share at least one band) = 1 - (1 - s^r)^b
    (Leskovec, Rajaraman, Ullman, Mining of Massive Datasets, sec. 3.4)."""
    return 1.0 - (1.0 - s ** rows) ** bands


def lsh_threshold(bands: int, rows: int) -> float:
    """Approximate similarity where the S-curve is steepest: (1/b)^(1/r) (MMDS sec. 3.4.2)."""
    return (1.0 / bands) ** (1.0 / rows)


def lsh_candidates(signatures: list[list[int]], bands: int, rows: int,
                   max_pairs: int | None = None) -> set[tuple[int, int]]:
    """Index pairs (i < j) whose signatures agree on all rows of at least one band.

    Raises InputError when there are more than ``max_pairs`` (None: no limit): m identical
    documents make m(m-1)/2 pairs, which can exhaust memory before any is verified."""
    pairs: set[tuple[int, int]] = set()
    for band in range(bands):
        buckets: dict[tuple, list[int]] = defaultdict(list)
        lo = band * rows
        for i, sig in enumerate(signatures):
            buckets[tuple(sig[lo:lo + rows])].append(i)
        for members in buckets.values():
            m = len(members)
            if max_pairs is not None and max(m * (m - 1) // 2, len(pairs)) > max_pairs:
                raise InputError(
                    f"more than {max_pairs} candidate pairs (a group of {m} documents shares "
                    f"band {band}): memory and the verification grow with their number; drop "
                    "exact duplicates (and empty texts, which are all alike) first")
            pairs.update(combinations(members, 2))
    if max_pairs is not None and len(pairs) > max_pairs:
        raise InputError(f"more than {max_pairs} candidate pairs: memory and the verification "
                         "grow with their number; drop exact duplicates first")
    return pairs


def clusters_from_pairs(n: int, pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Connected components (size >= 2) of the graph with ``n`` nodes and ``pairs`` as edges,
    each sorted, ordered by their first member (union-find with path halving)."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = defaultdict(list)
    for i in range(n):
        groups[find(i)].append(i)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


# Reading the corpus within bounds (read_chunks, read_lines, read_txt, check_field, InputError and
# the limits MAX_CORPUS_BYTES, MAX_LINE_BYTES, PIPE_WAIT_S) is shared with text_quality_filters.py: it is in
# the generated block at the end.


def read_corpus(path: Path, text_key: str, id_key: str, truth_key: str | None = None) -> list[dict]:
    """Records (dicts with at least ``id_key`` and ``text_key``) from a JSONL file (or a pipe)
    or a folder of .txt files (id = relative path), read within MAX_CORPUS_BYTES and
    MAX_LINE_BYTES. Raises InputError naming the file, the line and the field: a line that is not a JSON object, a
    ``text_key`` that is not a string, an ``id_key`` that is not a string or an integer, a
    ``truth_key`` value that is not a string, a number or true/false."""
    budget = [MAX_CORPUS_BYTES]
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: no such file or directory")
    if path.is_dir():
        files = sorted(path.rglob("*.txt"))
        if not files:
            raise InputError(f"{path}: folder holds no .txt files")
        return [{id_key: str(p.relative_to(path)), text_key: read_txt(p, budget)} for p in files]
    records = []
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
        if not isinstance(rec, dict) or not isinstance(rec.get(text_key), str):
            raise InputError(f"{path}:{n}: no string field {text_key!r} "
                             f"(choose another with --text-key)")
        check_field(path, n, rec, id_key, (str, int), "a string or an integer (the document's id)")
        if truth_key:
            check_field(path, n, rec, truth_key, (str, int, float, bool),
                        "a string, a number or true/false (a duplicate group's label)")
        rec.setdefault(id_key, f"line-{n}")
        records.append(rec)
    if not records:
        raise InputError(f"{path}: no documents")
    return records


def score_against_truth(records: list[dict], pairs: list[tuple[int, int]],
                        clusters: list[list[int]], key: str) -> dict:
    """Precision and recall against the groups given by ``records[i][key]`` (records sharing a
    non-null value are true duplicate pairs), twice: for the ``pairs`` kept by the threshold,
    and for all pairs of documents that ended up in the same cluster (``cluster_*``), which
    also counts pairs joined only through a third document."""
    groups: dict[object, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        if r.get(key) is not None:
            groups[r[key]].append(i)
    truth = {p for g in groups.values() for p in combinations(g, 2)}
    out = {"key": key, "true_pairs": len(truth)}
    for prefix, found in (("", set(pairs)),
                          ("cluster_", {p for c in clusters for p in combinations(c, 2)})):
        hits = len(truth & found)
        out.update({f"{prefix}found": len(found), f"{prefix}correct": hits,
                    f"{prefix}precision": round(hits / len(found), 4) if found else 1.0,
                    f"{prefix}recall": round(hits / len(truth), 4) if truth else 1.0})
    return out


def deduplicate(records: list[dict], args: argparse.Namespace) -> dict:
    """MinHash signatures, LSH candidates, the candidate pairs kept by ``--threshold`` (with the
    estimated and the exact Jaccard of each), their clusters, the documents to drop and, with
    ``--truth-key``, the score against the labels. Raises ScriptError (status 2) when LSH
    finds more than MAX_PAIRS candidate pairs."""
    ids = [str(r[args.id_key]) for r in records]
    sets = [shingles(r[args.text_key], args.shingle, args.ngram) for r in records]
    params = hash_params(args.num_perm, args.seed)
    sigs = [signature(s, params) for s in sets]
    try:
        candidates = sorted(lsh_candidates(sigs, args.bands, args.rows, MAX_PAIRS))
    except InputError as exc:
        raise ScriptError(f"{args.corpus}: {exc}", EXIT_USAGE) from None

    kept, rows = [], []
    for i, j in candidates:
        est = estimate_jaccard(sigs[i], sigs[j])
        exact = jaccard(sets[i], sets[j])
        if (exact if args.verify == "exact" else est) >= args.threshold:
            kept.append((i, j))
            rows.append({"a": ids[i], "b": ids[j], "estimated_jaccard": round(est, 4),
                         "exact_jaccard": round(exact, 4)})
    clusters = clusters_from_pairs(len(records), kept)
    drop = [ids[i] for c in clusters for i in c[1:]]
    truth = (score_against_truth(records, kept, clusters, args.truth_key)
             if args.truth_key else None)
    return {"ids": ids, "candidates": candidates, "kept": kept, "rows": rows,
            "clusters": clusters, "drop": drop, "truth": truth}


def print_report(records: list[dict], args: argparse.Namespace, found: dict) -> None:
    """The text report of :func:`deduplicate`'s ``found``: settings, pairs, clusters, score."""
    rows, clusters, truth = found["rows"], found["clusters"], found["truth"]
    t = lsh_threshold(args.bands, args.rows)
    print(f"# {PROG}: {len(records)} documents from {args.corpus}")
    print(f"# shingles: {args.shingle} {args.ngram}-grams; MinHash k={args.num_perm} "
          f"(seed {args.seed}); LSH b={args.bands} bands x r={args.rows} rows")
    print(f"# LSH threshold (1/b)^(1/r) = {t:.3f}; P(candidate) = 1-(1-s^r)^b is "
          f"{candidate_probability(0.5, args.bands, args.rows):.3f} at s=0.5, "
          f"{candidate_probability(0.8, args.bands, args.rows):.3f} at s=0.8")
    print(f"# candidate pairs: {len(found['candidates'])} of "
          f"{len(records) * (len(records) - 1) // 2} possible; kept {len(found['kept'])} with "
          f"{args.verify} Jaccard >= {args.threshold:g}")
    se = lambda j: math.sqrt(j * (1 - j) / args.num_perm)  # noqa: E731
    print(f"# {'doc a':>12s} {'doc b':>12s} {'estimate':>9s} {'exact':>7s} {'diff/SE':>8s}")
    for r in rows[:args.show]:
        s = se(r["exact_jaccard"])
        z = (r["estimated_jaccard"] - r["exact_jaccard"]) / s if s else 0.0
        print(f"  {r['a']:>12s} {r['b']:>12s} {r['estimated_jaccard']:9.3f} "
              f"{r['exact_jaccard']:7.3f} {z:8.2f}")
    if len(rows) > args.show:
        print(f"  ... and {len(rows) - args.show} more pairs (--show N)")
    print(f"# clusters: {len(clusters)} (sizes {sorted((len(c) for c in clusters), reverse=True)})"
          f"; duplicates to drop (all but the first of each cluster): {len(found['drop'])}")
    if truth:
        print(f"# against {args.truth_key!r}: {truth['correct']} of {truth['found']} pairs "
              f"found are true (precision {truth['precision']:.3f}); {truth['correct']} of "
              f"{truth['true_pairs']} true pairs found (recall {truth['recall']:.3f})")
        print(f"# same cluster: {truth['cluster_correct']} of {truth['cluster_found']} pairs "
              f"are true (precision {truth['cluster_precision']:.3f}); recall "
              f"{truth['cluster_recall']:.3f}")


def json_report(records: list[dict], args: argparse.Namespace, found: dict) -> dict:
    """The ``--json`` document (its keys are listed in the Data chapter)."""
    ids = found["ids"]
    return {"tool": "minhash_dedup", "schema_version": 1, "input": str(args.corpus),
            "documents": len(records), "shingle": args.shingle, "ngram": args.ngram,
            "num_perm": args.num_perm, "bands": args.bands, "rows": args.rows,
            "seed": args.seed, "lsh_threshold": round(lsh_threshold(args.bands, args.rows), 6),
            "threshold": args.threshold, "verify": args.verify,
            "candidate_pairs": len(found["candidates"]), "pairs": found["rows"],
            "clusters": [[ids[i] for i in c] for c in found["clusters"]],
            "duplicates_to_drop": found["drop"], "truth": found["truth"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Near-duplicate detection with MinHash and LSH banding.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("corpus", type=lambda t: Path(nonempty(t)),
                   help="JSONL file (one document per line) or folder of .txt files")
    p.add_argument("--text-key", default="text", help="JSONL field holding the text")
    p.add_argument("--id-key", default="id", help="JSONL field holding the document id")
    p.add_argument("--shingle", choices=("word", "char"), default="word",
                   help="shingle unit (default word)")
    p.add_argument("--ngram", type=number(int, 1, 1000), default=5, help="shingle length in units (default 5)")
    p.add_argument("--num-perm", type=number(int, 1, MAX_PERM), default=128,
                   help="signature length k (default 128)")
    p.add_argument("--bands", type=number(int, 1), default=16, help="LSH bands b (default 16)")
    p.add_argument("--rows", type=number(int, 1), default=8, help="rows per band r; b*r = k (default 8)")
    p.add_argument("--threshold", type=number(float, 0, 1), default=0.7,
                   help="keep a candidate pair when its Jaccard is at least this (default 0.7)")
    p.add_argument("--verify", choices=("estimate", "exact"), default="estimate",
                   help="decide with the signature estimate or the exact Jaccard")
    p.add_argument("--seed", type=number(int), default=1, help="seed of the hash functions")
    p.add_argument("--truth-key", metavar="FIELD",
                   help="score against duplicate groups stored in this JSONL field")
    p.add_argument("--show", type=number(int, 0), default=50, help="print at most this many pairs")
    p.add_argument("--json", type=nonempty, metavar="PATH", help="write the report as JSON")
    return p


def check_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    if args.bands * args.rows != args.num_perm:
        parser.error(f"--bands x --rows must equal --num-perm "
                     f"({args.bands} x {args.rows} = {args.bands * args.rows} != "
                     f"{args.num_perm})")
    if args.json:
        check_output(args.json, "--json", inputs=[args.corpus])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(args, parser)
    try:
        records = read_corpus(args.corpus, args.text_key, args.id_key, args.truth_key)
    except (InputError, OSError) as exc:
        raise ScriptError(str(exc), EXIT_USAGE) from None
    if args.truth_key and not any(args.truth_key in r for r in records):
        raise ScriptError(f"--truth-key {args.truth_key!r}: no record of {args.corpus} has "
                          "that field", EXIT_USAGE)
    found = deduplicate(records, args)
    print_report(records, args, found)
    if args.json:
        write_atomic(args.json, json.dumps(json_report(records, args, found), indent=1) + "\n")
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
