"""Tests of scripts/training/minhash_dedup.py, run as a process on the corpus the book ships
(data/training/corpus.jsonl, made by data/training/make_corpus.py) and imported for the
estimator and banding checks.

The corpus labels every planted near-duplicate with a group (``truth_dup_group``); the tests
compute precision and recall from those labels themselves, independently of the script's own
``--truth-key`` summary, and check the MinHash estimates against exact Jaccard similarities
computed here with the binomial standard error sqrt(J(1-J)/k) (Broder 1997).
"""

from __future__ import annotations

import json
import math
import random
import re
import unicodedata
from itertools import combinations

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import import_script

SCRIPT = "minhash_dedup.py"
CORPUS = "data/training/corpus.jsonl"
# Thresholds the shipped corpus must clear with the default settings (k=128, 16x8, 0.7).
# Measured: precision 1.000, pair recall 0.879, same-cluster recall 0.948.
MIN_PRECISION = 0.95
MIN_PAIR_RECALL = 0.80
MIN_CLUSTER_RECALL = 0.90
Z_MAX = 4.0  # |estimate - exact| <= Z_MAX standard errors for every reported pair


@pytest.fixture(scope="module")
def mh(launch):
    return import_script(launch.scripts / SCRIPT)


@pytest.fixture(scope="module")
def corpus(launch):
    with open(launch.repo / CORPUS, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def report(launch, tmp_path_factory):
    out = tmp_path_factory.mktemp("minhash") / "dups.json"
    res = launch.python(SCRIPT, [CORPUS, "--truth-key", "truth_dup_group", "--json", str(out)])
    assert res.returncode == 0, res.output
    return json.loads(out.read_text()), res.stdout


def word_5gram_set(text: str) -> set[str]:
    """Our own shingling, written from the docstring's description (NFKC, lower case,
    punctuation to spaces, word 5-grams), to check the script's exact Jaccard."""
    words = re.sub(r"[^\w\s]", " ", unicodedata.normalize("NFKC", text).lower()).split()
    return {" ".join(words[i:i + 5]) for i in range(len(words) - 4)}


def true_pairs(corpus) -> set[frozenset]:
    groups = {}
    for d in corpus:
        if d["truth_dup_group"]:
            groups.setdefault(d["truth_dup_group"], []).append(d["id"])
    return {frozenset(p) for g in groups.values() for p in combinations(g, 2)}


def test_finds_the_planted_duplicates(report, corpus):
    rep, stdout = report
    truth = true_pairs(corpus)
    found = {frozenset((p["a"], p["b"])) for p in rep["pairs"]}
    precision = len(found & truth) / len(found)
    recall = len(found & truth) / len(truth)
    in_cluster = {frozenset(p) for c in rep["clusters"] for p in combinations(c, 2)}
    cluster_precision = len(in_cluster & truth) / len(in_cluster)
    cluster_recall = len(in_cluster & truth) / len(truth)
    print(f"pairs: precision {precision:.3f} recall {recall:.3f}; same cluster: precision "
          f"{cluster_precision:.3f} recall {cluster_recall:.3f}")
    assert precision >= MIN_PRECISION and cluster_precision >= MIN_PRECISION
    assert recall >= MIN_PAIR_RECALL
    assert cluster_recall >= MIN_CLUSTER_RECALL
    # The script's own scoring agrees with ours.
    t = rep["truth"]
    assert t["true_pairs"] == len(truth)
    assert t["precision"] == pytest.approx(precision, abs=1e-4)
    assert t["recall"] == pytest.approx(recall, abs=1e-4)
    assert t["cluster_recall"] == pytest.approx(cluster_recall, abs=1e-4)
    assert f"recall {recall:.3f}" in stdout


def test_hard_negatives_and_unique_documents_are_not_flagged(report, corpus):
    rep, _ = report
    by_id = {d["id"]: d for d in corpus}
    flagged = {i for p in rep["pairs"] for i in (p["a"], p["b"])}
    boilerplate = {d["id"] for d in corpus if d["truth_edit"].startswith("shares the site")}
    assert len(boilerplate) >= 6
    assert not flagged & boilerplate
    assert all(by_id[i]["truth_dup_group"] for i in flagged)


def test_drop_list_keeps_one_document_per_cluster(report):
    rep, _ = report
    assert rep["duplicates_to_drop"] == [i for c in rep["clusters"] for i in c[1:]]
    members = [i for c in rep["clusters"] for i in c]
    assert len(members) == len(set(members))  # clusters are disjoint


def test_reported_similarities_are_exact_and_estimates_within_standard_error(report, corpus):
    rep, _ = report
    k = rep["num_perm"]
    sets = {d["id"]: word_5gram_set(d["text"]) for d in corpus}
    worst = 0.0
    for p in rep["pairs"]:
        a, b = sets[p["a"]], sets[p["b"]]
        exact = len(a & b) / len(a | b)
        assert p["exact_jaccard"] == pytest.approx(exact, abs=1e-4)
        se = math.sqrt(exact * (1 - exact) / k)
        err = abs(p["estimated_jaccard"] - exact)
        if se == 0:
            assert err == 0, p  # identical shingle sets give identical signatures
        else:
            worst = max(worst, err / se)
    print(f"largest |estimate - exact| over {len(rep['pairs'])} pairs: {worst:.2f} SE")
    assert worst <= Z_MAX
    assert all(p["estimated_jaccard"] >= rep["threshold"] for p in rep["pairs"])


def _pair_with_jaccard(rng: random.Random, j: float, size: int = 200) -> tuple[set, set]:
    """Two sets of ``size`` random strings each, sharing s of them so that the Jaccard
    s / (2 size - s) is as close to j as an integer s allows."""
    shared = round(2 * size * j / (1 + j))
    common = {f"c{rng.random()}" for _ in range(shared)}
    a = common | {f"a{rng.random()}" for _ in range(size - shared)}
    b = common | {f"b{rng.random()}" for _ in range(size - shared)}
    return a, b


def test_estimator_is_unbiased_with_binomial_error(mh):
    rng = random.Random(7)
    k = 64
    params = mh.hash_params(k, seed=3)
    errs = []
    for j in (0.1, 0.3, 0.5, 0.7, 0.9):
        for _ in range(30):
            a, b = _pair_with_jaccard(rng, j)
            exact = mh.jaccard(a, b)
            est = mh.estimate_jaccard(mh.signature(a, params), mh.signature(b, params))
            se = math.sqrt(exact * (1 - exact) / k)
            assert abs(est - exact) <= Z_MAX * se, (exact, est)
            errs.append((est - exact) / se)
    mean_z = sum(errs) / len(errs)
    # The mean of n standardized errors has standard deviation 1/sqrt(n) if unbiased.
    assert abs(mean_z) <= Z_MAX / math.sqrt(len(errs))


def test_lsh_candidate_rate_follows_the_s_curve(mh):
    rng = random.Random(11)
    bands, rows = 8, 4
    params = mh.hash_params(bands * rows, seed=5)
    for s in (0.3, 0.55, 0.8):
        n = 150
        sigs = []
        exact = []
        for _ in range(n):
            a, b = _pair_with_jaccard(rng, s, size=100)
            exact.append(mh.jaccard(a, b))
            sigs += [mh.signature(a, params), mh.signature(b, params)]
        cands = mh.lsh_candidates(sigs, bands, rows)
        hit = sum((2 * i, 2 * i + 1) in cands for i in range(n)) / n
        p = sum(mh.candidate_probability(e, bands, rows) for e in exact) / n
        sd = math.sqrt(p * (1 - p) / n)
        assert abs(hit - p) <= Z_MAX * sd + 0.02, (s, hit, p)


def test_threshold_formula(mh):
    for b, r in ((16, 8), (20, 5), (14, 8)):
        t = mh.lsh_threshold(b, r)
        assert t == pytest.approx((1 / b) ** (1 / r))
        # At s = t, s^r = 1/b, so P = 1 - (1 - 1/b)^b (about 1 - 1/e for large b).
        assert mh.candidate_probability(t, b, r) == pytest.approx(1 - (1 - 1 / b) ** b)
        assert mh.candidate_probability(0.0, b, r) == 0.0
        assert mh.candidate_probability(1.0, b, r) == 1.0


def test_shingles_and_clusters(mh):
    assert mh.shingles("A b, c!", "word", 2) == {"a b", "b c"}
    assert mh.shingles("Hi", "word", 5) == {"hi"}
    assert mh.shingles("  ", "word", 5) == set()
    assert mh.shingles("abcd", "char", 3) == {"abc", "bcd"}
    with pytest.raises(ValueError):
        mh.shingles("x", "byte", 3)
    assert mh.clusters_from_pairs(6, [(4, 5), (0, 2), (2, 3)]) == [[0, 2, 3], [4, 5]]


def test_folder_of_text_files_and_char_shingles(launch, tmp_path, corpus):
    docs = tmp_path / "pages"
    docs.mkdir()
    base = next(d["text"] for d in corpus if d["truth_quality"] == "good")
    (docs / "a.txt").write_text(base)
    (docs / "b.txt").write_text(base.replace(".", "!", 2))
    (docs / "c.txt").write_text("An unrelated short page about something else entirely.")
    out = tmp_path / "r.json"
    res = launch.python(SCRIPT, [str(docs), "--shingle", "char", "--ngram", "7",
                                 "--json", str(out)])
    assert res.returncode == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["clusters"] == [["a.txt", "b.txt"]]
    assert rep["duplicates_to_drop"] == ["b.txt"]


def test_same_seed_same_report(launch, tmp_path):
    outs = []
    for n in (1, 2):
        out = tmp_path / f"r{n}.json"
        res = launch.python(SCRIPT, [CORPUS, "--seed", "9", "--json", str(out)])
        assert res.returncode == 0, res.output
        outs.append(json.loads(out.read_text()))
    assert outs[0] == outs[1]


DOC = '{"id": "a", "text": "one fine document"}\n'
BAD_INPUT = [
    Case("bands-rows-mismatch", ["c.jsonl", "--bands", "10", "--rows", "8"],
         "must equal --num-perm", files={"c.jsonl": DOC}),
    Case("threshold-above-1", ["c.jsonl", "--threshold", "1.5"], "--threshold: 1.5 must be <= 1",
         files={"c.jsonl": DOC}),
    Case("threshold-nan", ["c.jsonl", "--threshold", "nan"], "--threshold: 'nan' is not a finite",
         files={"c.jsonl": DOC}),
    Case("ngram-zero", ["c.jsonl", "--ngram", "0"], "--ngram: 0 must be >= 1",
         files={"c.jsonl": DOC}),
    # used to run for hours: a hundred million hash functions per shingle
    Case("num-perm-huge", ["c.jsonl", "--num-perm", "100000000"],
         "--num-perm: 100000000 must be <= 8192", files={"c.jsonl": DOC}),
    Case("show-negative", ["c.jsonl", "--show", "-1"], "--show: -1 must be >= 0",
         files={"c.jsonl": DOC}),
    Case("truth-key-missing", ["c.jsonl", "--truth-key", "no_such_field"],
         "--truth-key 'no_such_field': no record of c.jsonl has that field", files={"c.jsonl": DOC}),
    Case("text-key-missing", ["c.jsonl", "--text-key", "body"], "no string field 'body'",
         files={"c.jsonl": DOC}),
    Case("corpus-empty-string", [""], "corpus: must not be empty"),
    Case("corpus-missing", ["missing.jsonl"], "no such file"),
    Case("corpus-not-json", ["c.jsonl"], "c.jsonl:2: not valid JSON",
         files={"c.jsonl": DOC + "not json\n"}),
    Case("corpus-not-utf8", ["c.jsonl"], r"c.jsonl:2: not UTF-8 text",
         files={"c.jsonl": DOC.encode() + b"\xff\n"}),
    Case("json-is-input", ["c.jsonl", "--json", "c.jsonl"], "--json c.jsonl: is also an input",
         files={"c.jsonl": DOC}),
    # a .txt file in a corpus folder was read with its bad bytes replaced, silently
    Case("folder-txt-not-utf8", ["d"], r"d/b\.txt:2: not UTF-8 text \(byte 4 of the line\)",
         files={"d/a.txt": "fine text", "d/b.txt": b"first line\nabc\xff\n"}),
    Case("json-inside-corpus-folder", ["d", "--json", "d/r.json"], "--json d/r.json: is inside d, which this run reads",
         files={"d/a.txt": "some text here"}),
    Case("seed-not-an-integer", ["c.jsonl", "--seed", "1.5"], r"--seed: '1\.5' is not an integer",
         files={"c.jsonl": DOC}),
    # 2001 empty texts have one signature: 2,001,000 candidate pairs, and memory to match
    Case("too-many-candidate-pairs", ["c.jsonl"],
         r"c\.jsonl: more than 2000000 candidate pairs \(a group of 2001 documents",
         files={"c.jsonl": '{"text": ""}\n' * 2001}),
]


# Issue 30: corpora that are not files, and bad values inside one. Each is one line naming the
# file, the line and the field; the corpus is read in 1 MiB chunks, at most 1 GiB in all and
# 64 MiB a line, and a pipe silent for 10 s is given up.
CORPUS_CASES = [
    Case("corpus-dev-zero", ["/dev/zero"], r"^minhash_dedup\.py: error: /dev/zero: is not a regular file or a pipe$"),
    Case("corpus-deep-json", ["c.jsonl"], r"c\.jsonl:2: not valid JSON", files={"c.jsonl": DOC + "[" * 100_000 + "\n"}),
    Case("corpus-huge-number", ["c.jsonl"], r"c\.jsonl:2: not valid JSON \(Exceeds the limit",
         files={"c.jsonl": DOC + '{"text": "x", "n": ' + "1" * 5000 + "}\n"}),
    Case("record-without-text", ["c.jsonl"], r"c\.jsonl:2: no string field 'text'",
         files={"c.jsonl": DOC + '{"id": "b", "body": "two"}\n'}),
    Case("text-not-string", ["c.jsonl"], r"c\.jsonl:2: no string field 'text'",
         files={"c.jsonl": DOC + '{"id": "b", "text": 5}\n'}),
    Case("id-not-scalar", ["c.jsonl"], r"c\.jsonl:2: field 'id' must be a string or an integer .*, got list \[1\]",
         files={"c.jsonl": DOC + '{"id": [1], "text": "two"}\n'}),
    Case("id-infinity", ["c.jsonl"], r"c\.jsonl:2: field 'id' must be a string or an integer .*, got float Infinity",
         files={"c.jsonl": DOC + '{"id": Infinity, "text": "two"}\n'}),
    Case("truth-label-object", ["c.jsonl", "--truth-key", "group"],
         r"c\.jsonl:2: field 'group' must be a string, a number or true/false .*, got dict",
         files={"c.jsonl": DOC + '{"id": "b", "text": "two", "group": {"g": 1}}\n'}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT + CORPUS_CASES])
def test_bad_input(case, tmp_path):
    check_refused("training/minhash_dedup.py", case, tmp_path)


def test_corpus_size_bounds(tmp_path):
    """A corpus over 1 GiB is refused before it is read (a sparse file here), a line over 64 MiB
    as soon as it passes the bound, and a .txt link to /dev/zero in a corpus folder at once."""
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate((1 << 30) + 1)
    check_refused("training/minhash_dedup.py", Case("corpus-over-1-gib", ["big.jsonl"],
                                r"big\.jsonl: more than 1 GiB of corpus, the most this tool holds"), tmp_path)
    (tmp_path / "long.jsonl").write_bytes(DOC.encode() + b'{"text": "' + b"a" * (65 << 20))
    check_refused("training/minhash_dedup.py", Case("line-over-64-mib", ["long.jsonl"],
                                r"long\.jsonl:2: a line of more than 64 MiB"), tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("some text here")
    (tmp_path / "d" / "z.txt").symlink_to("/dev/zero")
    check_refused("training/minhash_dedup.py",
                  Case("folder-txt-dev-zero", ["d"], r"d/z\.txt: is not a regular file or a pipe"), tmp_path)



def test_help_runs(launch):
    res = launch.python(SCRIPT, ["--help"])
    assert res.returncode == 0 and "--num-perm" in res.stdout


def test_published_settings_table_matches_the_formula(launch, mh):
    """data/training/minhash_settings.yml lists b, r, k and t = (1/b)^(1/r) for public
    pipelines; k and t are derived numbers, so they must agree with b and r."""
    import yaml

    table = yaml.safe_load((launch.repo / "data/training/minhash_settings.yml").read_text())
    assert table["rows"]
    for row in table["rows"]:
        assert row["k"] == row["bands"] * row["rows"], row
        assert row["t"] == pytest.approx(mh.lsh_threshold(row["bands"], row["rows"]), abs=5e-4)


def test_a_silent_pipe_in_a_corpus_folder_is_given_up(mh, tmp_path, monkeypatch):
    """A FIFO without a writer among a folder's .txt files ends the read after PIPE_WAIT_S (10 s in
    a run, 0.5 s here), naming the file. The bounded-corpus block is the same in
    text_quality_filters.py (tests/training/test_text_quality_filters.py compares the two)."""
    import os
    import time

    monkeypatch.setattr(mh, "PIPE_WAIT_S", 0.5)
    (tmp_path / "a.txt").write_text("some text here")
    os.mkfifo(tmp_path / "b.txt")
    start = time.monotonic()
    with pytest.raises(mh.InputError, match=r"b\.txt: a pipe that gave no data for 0\.5 s"):
        mh.read_corpus(tmp_path, "text", "id")
    assert time.monotonic() - start < 5
