"""The hyper-parameters chapter's tables, checked for internal consistency with the formulas the
chapter uses: data/training/chinchilla_optimal.yml (Hoffmann et al. 2022, Table 3) against
C = 6 N D and the ~20 tokens per parameter rule; data/training/gpt3_hparams.yml (Brown et al.
2020, Table 2.1) against the parameter count of memory_estimator.Model (Narayanan et al. 2021)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.launchers import import_script

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = {"M": 1e6, "B": 1e9, "T": 1e12}


def number(text) -> float:
    text = str(text)
    return float(text[:-1]) * SUFFIX[text[-1]] if text[-1] in SUFFIX else float(text)


def rows(name):
    return yaml.safe_load((ROOT / "data/training" / name).read_text())["rows"]


@pytest.mark.parametrize("row", rows("chinchilla_optimal.yml"), ids=lambda r: r["params"])
def test_chinchilla_rows_follow_6ND_and_20_tokens_per_param(row):
    n, d, c = number(row["params"]), number(row["tokens"]), float(row["flops"])
    # training compute C ~= 6 N D (the paper's Section 3 uses this approximation); the printed
    # token counts are rounded (1.5T for 67B), hence 5%
    assert 6 * n * d == pytest.approx(c, rel=0.05)
    assert 19.5 <= d / n <= 22.5                 # 22.4 for 67B because of that rounding


def test_gpt3_shapes_give_the_printed_parameter_counts():
    est = import_script(ROOT / "scripts/training/memory_estimator.py")
    table = rows("gpt3_hparams.yml")
    for r in table:
        h = int(r["d_model"])
        model = est.Model(int(r["layers"]), h, int(r["heads"]), 50257, 2048, 1, 4 * h)
        assert model.params() == pytest.approx(number(r["params"]), rel=0.04), r["model"]
    lrs = [float(r["lr"]) for r in table]
    batches = [number(r["batch_tokens"]) for r in table]
    assert lrs == sorted(lrs, reverse=True)        # larger models, smaller peak learning rate
    assert batches == sorted(batches)              # and larger batches
