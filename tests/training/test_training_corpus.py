"""The shipped corpus data/training/corpus.jsonl is exactly what its committed generator,
data/training/make_corpus.py, writes, and its ground-truth labels are consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

GENERATOR = "data/training/make_corpus.py"
CORPUS = "data/training/corpus.jsonl"


def test_generator_reproduces_the_committed_corpus(launch, tmp_path):
    out = tmp_path / "corpus.jsonl"
    subprocess.run([sys.executable, str(launch.repo / GENERATOR), "--out", str(out)],
                   check=True, timeout=60, capture_output=True)
    assert out.read_bytes() == (launch.repo / CORPUS).read_bytes()


def test_labels_are_consistent(launch):
    docs = [json.loads(line) for line in (launch.repo / CORPUS).read_text().splitlines()]
    assert [d["id"] for d in docs] == [f"doc-{i:04d}" for i in range(1, len(docs) + 1)]
    groups = Counter(d["truth_dup_group"] for d in docs if d["truth_dup_group"])
    assert len(groups) == 20 and min(groups.values()) >= 2
    originals = Counter(d["truth_dup_group"] for d in docs if d["truth_edit"] == "original"
                        and d["truth_dup_group"])
    assert set(originals.values()) == {1} and set(originals) == set(groups)
    defects = Counter(d["truth_quality"] for d in docs if d["truth_quality"] != "good")
    assert len(defects) == 11 and set(defects.values()) == {4}
    # Planted duplicates are good text; planted low-quality documents belong to no group.
    assert all(d["truth_quality"] == "good" for d in docs if d["truth_dup_group"])
