"""data/training/float_formats.yml (the Tensor precision chapter's format table) checked against
torch.finfo and against real tensors: every number in the table must be what the dtype really
does. Sources of the table itself: IEEE 754-2019, Google's bfloat16 page, NVIDIA's TF32 note, the
OCP OFP8 specification and Micikevicius et al. 2022 (one URL per row in the file)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROWS = yaml.safe_load((ROOT / "data/training/float_formats.yml").read_text())["rows"]
TORCH_ROWS = [r for r in ROWS if "torch" in r]


def test_every_torch_format_is_in_the_table():
    assert {r["torch"] for r in TORCH_ROWS} == {"float32", "bfloat16", "float16",
                                                "float8_e4m3fn", "float8_e5m2"}


@pytest.mark.parametrize("row", TORCH_ROWS, ids=lambda r: r["format"])
def test_row_matches_torch_finfo(row):
    dtype = getattr(torch, row["torch"])
    fi = torch.finfo(dtype)
    sign, exp, man = (int(x) for x in row["bits"].split("/"))
    assert sign + exp + man == fi.bits
    assert float(row["max"]) == pytest.approx(fi.max, rel=5e-3)
    assert float(row["min_normal"]) == pytest.approx(fi.smallest_normal, rel=5e-3)
    assert float(row["eps"]) == pytest.approx(fi.eps, rel=5e-3)
    assert fi.eps == 2.0 ** -man
    assert fi.smallest_normal == 2.0 ** (1 - row["bias"])       # exponent field 1 -> 2^(1-bias)
    # the smallest subnormal is one unit in the last place below the smallest normal
    assert float(row["min_subnormal"]) == pytest.approx(fi.smallest_normal * fi.eps, rel=5e-3)


@pytest.mark.parametrize("row", TORCH_ROWS, ids=lambda r: r["format"])
def test_row_matches_real_tensors(row):
    dtype = getattr(torch, row["torch"])
    fi = torch.finfo(dtype)
    sub = fi.smallest_normal * fi.eps

    def as_float(x):
        return torch.tensor([x], dtype=torch.float64).to(dtype).to(torch.float64).item()

    assert as_float(fi.max) == fi.max
    assert as_float(sub) == sub                          # the smallest subnormal exists...
    assert as_float(sub * 0.4) == 0.0                    # ...and below half of it is zero
    assert as_float(1 + fi.eps) == 1 + fi.eps            # 1 + eps is representable,
    assert as_float(1 + fi.eps / 4) == 1.0               # 1 + eps/4 rounds back to 1
    overflow = as_float(fi.max * 4)
    if row["torch"] == "float8_e4m3fn":
        # no infinity in E4M3: an overflowing cast saturates to the max or gives NaN (OFP8 leaves
        # the choice to the implementation; torch 2.13 on CPU saturates)
        assert overflow == fi.max or overflow != overflow
    else:
        assert overflow == float("inf")
