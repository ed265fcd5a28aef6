"""The accelerator spec file data/compute/accelerators.yml: every row sourced from a vendor
document, units consistent, dense/sparse and dtype orderings sane, the rows the notebooks read
by name present, views renderable in both languages."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from tools.tables import render

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "compute" / "accelerators.yml"
MISSING = "—"
# column key -> (unit that the reader must see, plausible range for a value)
NUMERIC = {
    "tf32_dense": ("TFLOPS", (50, 5000)), "bf16_dense": ("TFLOPS", (100, 10000)),
    "bf16_sparse": ("TFLOPS", (100, 20000)), "fp8_dense": ("TFLOPS", (100, 20000)),
    "fp8_sparse": ("TFLOPS", (100, 40000)), "fp4_dense": ("TFLOPS", (1000, 40000)),
    "mem_GB": ("GB", (8, 1000)), "mem_TBps": ("TBps", (0.2, 30)),
    "scaleup_GBps": ("GBps", (50, 5000)), "power_W": ("W", (100, 3000)),
}
# Hosts of vendor documents (a source's host must be one of these or a subdomain of one).
# News sites, resellers, wikis and personal pages are not on it, by design.
VENDOR_DOMAINS = {
    "nvidia.com",                                # www., developer., resources., docs.
    "amd.com",                                   # www., rocm.docs.
    "cloud.google.com", "blog.google",           # docs.cloud.google.com too
    "aws.amazon.com", "awsdocs-neuron.readthedocs-hosted.com",
    "intel.com", "habana.ai",                    # Habana Labs is Intel's Gaudi unit
    "huawei.com", "hiascend.com",
    "tenstorrent.com", "cerebras.ai", "groq.com",
}
# Rows whose main memory is on-chip SRAM, not HBM or GDDR: their capacity and bandwidth columns
# hold the SRAM, which has ranges of its own (tens of MB to tens of GB, and up to PB/s).
SRAM_RANGES = {"mem_GB": (0.01, 100), "mem_TBps": (10, 100_000)}
MX_FORMATS = {"MXFP8", "MXFP6", "MXFP4", "NVFP4"}
# Rows other files read by name: notebooks/compute/roofline.py and
# notebooks/inference/decode_roofline.py (bf16_dense, mem_TBps, mem_GB).
READ_BY_NAME = ["NVIDIA A100 SXM 80GB", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200 (HGX)",
                "AMD MI300X", "AMD MI355X", "Intel Gaudi 3", "Google TPU v6e (Trillium)",
                "AWS Trainium2"]
VIEWS = ["compute", "lowprecision", "memory", "scaleup", "survey"]


@pytest.fixture(scope="module")
def data() -> dict:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))


def value(row: dict, key: str):
    v = row[key]
    return None if v == MISSING else v


def sources(row: dict) -> list:
    return row["source"] if isinstance(row["source"], list) else [row["source"]]


def is_sram(row: dict) -> bool:
    text = row["mem_type"]["en"] if isinstance(row["mem_type"], dict) else row["mem_type"]
    return "SRAM" in text


def is_vendor(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return any(host == d or host.endswith("." + d) for d in VENDOR_DOMAINS)


def test_is_vendor_accepts_vendor_hosts_only():
    assert is_vendor("https://docs.cloud.google.com/tpu/docs/tpu7x")
    assert is_vendor("https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html")
    for url in ("https://www.theregister.com/2025/06/12/amd_mi355x/",
                "https://servethehome.com/intel-gaudi-3-for-ai-training-and-inference",
                "https://glennklockwood.com/garden/processors/h100",
                "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html",
                "https://notnvidia.com/x", "https://nvidia.com.example.org/x"):
        assert not is_vendor(url), url


def test_catalogue_covers_the_vendors_and_generations(data):
    names = [row["name"] for row in data["rows"]]
    assert len(names) >= 28, len(names)
    assert len(names) == len(set(names)), "duplicate accelerator rows"
    vendors = {row["vendor"] for row in data["rows"]}
    assert {"NVIDIA", "AMD", "Google", "AWS", "Intel", "Huawei"} <= vendors, vendors
    for name in READ_BY_NAME:
        assert name in names, f"{name} is read by a notebook"
        row = next(r for r in data["rows"] if r["name"] == name)
        assert all(isinstance(row[k], (int, float)) for k in ("bf16_dense", "mem_TBps", "mem_GB")), name


def test_every_row_has_https_vendor_sources_and_all_columns(data):
    keys = [c["key"] for c in data["columns"]]
    for row in data["rows"]:
        urls = sources(row)
        assert urls and all(re.fullmatch(r"https://\S+", s) for s in urls), row["name"]
        assert all(is_vendor(s) for s in urls), (row["name"], [s for s in urls if not is_vendor(s)])
        assert len(urls) <= 2, f"{row['name']}: one vendor document per figure, two at most per row"
        assert set(keys) <= set(row), f"{row['name']} lacks {set(keys) - set(row)}"


def test_units_are_declared_shown_and_values_are_numbers_in_range(data):
    columns = {c["key"]: c for c in data["columns"]}
    assert {k for k, c in columns.items() if "unit" in c} == set(NUMERIC)
    for key, (unit, (lo, hi)) in NUMERIC.items():
        assert columns[key].get("unit") == unit, key
        # The reader sees the unit: in the column title, or in the caption of every view
        # that shows the column.
        if f"({unit})" not in columns[key]["title"]["en"]:
            views = [v for v in data["views"].values() if key in v["columns"]]
            assert views, key
            for view in views:
                assert unit in view["caption"]["en"] and unit in view["caption"]["zh"], key
        else:
            assert f"({unit})" in columns[key]["title"]["zh"], key
        for row in data["rows"]:
            v = value(row, key)
            if v is None:
                continue
            assert isinstance(v, (int, float)) and not isinstance(v, bool), (row["name"], key, v)
            low, high = SRAM_RANGES[key] if is_sram(row) and key in SRAM_RANGES else (lo, hi)
            assert low <= v <= high, f"{row['name']} {key}={v} outside [{low}, {high}] {unit}"


def test_sparse_is_at_most_twice_dense_and_never_below(data):
    for row in data["rows"]:
        for dense_key, sparse_key in (("bf16_dense", "bf16_sparse"), ("fp8_dense", "fp8_sparse")):
            dense, sparse = value(row, dense_key), value(row, sparse_key)
            if dense is not None and sparse is not None:
                assert dense <= sparse <= 2.05 * dense, (row["name"], dense_key, dense, sparse)


def test_lower_precision_is_never_slower(data):
    order = ("tf32_dense", "bf16_dense", "fp8_dense", "fp4_dense")
    for row in data["rows"]:
        for wide, narrow in pairwise(order):
            a, b = value(row, wide), value(row, narrow)
            if a is not None and b is not None:
                assert a <= b, (row["name"], wide, a, narrow, b)


def test_mx_column_names_known_formats_and_matches_fp4(data):
    for row in data["rows"]:
        mx = row["mx"]
        formats = set() if mx == MISSING else {f.strip() for f in mx.split(",")}
        assert formats <= MX_FORMATS, (row["name"], formats - MX_FORMATS)
        if value(row, "fp4_dense") is not None:
            assert formats & {"MXFP4", "NVFP4"}, f"{row['name']} has an FP4 rate but no 4-bit format"
        if formats:
            assert value(row, "fp8_dense") is not None, f"{row['name']}: MX formats but no FP8 rate"


def test_variants_that_share_silicon_share_compute(data):
    rows = {row["name"]: row for row in data["rows"]}
    compute = ("tf32_dense", "bf16_dense", "bf16_sparse", "fp8_dense", "fp8_sparse", "fp4_dense")
    for a, b in (("NVIDIA H100 SXM", "NVIDIA H200 SXM"), ("AMD MI300X", "AMD MI325X"),
                 ("NVIDIA A100 SXM 80GB", "NVIDIA A100 PCIe 80GB"),
                 ("NVIDIA H100 NVL", "NVIDIA H200 NVL")):
        assert [rows[a][k] for k in compute] == [rows[b][k] for k in compute], (a, b)


def test_superchip_rows_are_per_gpu(data):
    # A GB200/GB300 superchip holds two GPUs of about 180-290 GB each; a per-superchip row
    # (372 GB or more, 16 TBps) would double the per-device figures.
    for row in data["rows"]:
        if row["name"].startswith(("NVIDIA GB200", "NVIDIA GB300")):
            assert "per GPU" in row["name"]
            assert value(row, "mem_GB") <= 300 and value(row, "mem_TBps") <= 10, row["name"]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("view", [None, *VIEWS])
def test_views_render(data, lang, view):
    assert set(VIEWS) == set(data["views"]), "a view was added or removed: update VIEWS"
    target = f"{DATA}#{view}" if view else DATA
    table = render(target, lang)
    columns = data["views"][view]["columns"] if view else [c["key"] for c in data["columns"]]
    header = table.split("\n| ", 1)[0] if table.startswith("|") else table.split("\n\n", 1)[1]
    assert header.splitlines()[0].count("|") == len(columns) + 2  # + the source column
    assert table.count("\n| ") >= len(data["rows"]) + 1
    if view:
        caption = data["views"][view]["caption"][lang]
        assert f"**{caption}**" in table


def test_sram_rows_say_they_are_not_comparable(data):
    """On-wafer or on-chip SRAM in the memory columns is marked where a reader looks (the memory
    type and the note), and the memory view's note explains it."""
    sram = [row for row in data["rows"] if is_sram(row)]
    assert sram, "the Cerebras WSE-3 row holds SRAM"
    for row in sram:
        assert "HBM" in row["mem_type"]["en"] and "not comparable" in row["note"]["en"], row["name"]
        assert "不可比" in row["note"]["zh"], row["name"]
    assert "not comparable with HBM" in data["views"]["memory"]["notes"]["en"]


# The published MAMF table's own peaks (spec_tflops in results/compute/mamf_finder-published-*):
# the book shows the catalogue's figures only; where the source compared with another number,
# the catalogue row's note names it and the precision or clock that makes it right.
MAMF_ROW = {"Intel Gaudi 2": "Intel Gaudi 2", "Intel Gaudi 3": "Intel Gaudi 3",
            "NVIDIA A100 SXM": "NVIDIA A100 SXM 80GB", "NVIDIA A100 PCIe": "NVIDIA A100 PCIe 80GB",
            "NVIDIA H100 SXM": "NVIDIA H100 SXM", "NVIDIA H200 SXM": "NVIDIA H200 SXM",
            "NVIDIA GH200 SXM": "NVIDIA GH200 (144 GB HBM3e)", "NVIDIA B200 SXM": "NVIDIA B200 (HGX)",
            "NVIDIA B300 SXM": "NVIDIA B300 (HGX)", "NVIDIA GB200 SXM": "NVIDIA GB200 (per GPU)",
            "AMD MI355X": "AMD MI355X", "AMD MI325X": "AMD MI325X", "AMD MI300X": "AMD MI300X"}


def test_published_mamf_peaks_agree_with_the_catalogue_or_its_note_explains(data):
    rows = {row["name"]: row for row in data["rows"]}
    import json
    published = sorted((ROOT / "results" / "compute").glob("mamf_finder-published-*.json"))
    assert published
    explained = 0
    for path in published:
        for result in json.loads(path.read_text(encoding="utf-8"))["results"]:
            row = rows[MAMF_ROW[result["device"]]]
            spec = result["spec_tflops"]
            ours = value(row, f"{result['dtype']}_dense")
            if ours is not None and abs(spec - ours) <= 0.01 * ours:  # rounding (989 vs 989.4)
                continue
            assert f"{spec:,.0f}" in row["note"]["en"] and f"{spec:,.0f}" in row["note"]["zh"], (
                f"{path.name}: {result['device']} {result['dtype']} compares with {spec}, the "
                f"catalogue says {ours}: the row's note must name {spec:,.0f} and why")
            explained += 1
    assert explained >= 2  # Gaudi 3 (1,677) and MI355X (2,300) today


# --- a peak quoted in prose is the catalogue's (issue 34: one place for a device's figure) -------
# A number the prose calls a peak ("989 TFLOPS peak", "peak is 989.4 TFLOPS", "312 TFLOPS 稠密峰值")
# in a sentence that names a catalogue device must be one of that device's compute figures.
# Numbers the prose calls measured, achieved or MAMF are not peaks and are not checked.
BETWEEN_EN = r"(?:\s*(?:,|is|of|the|a|dense|sparse|bf16|fp8|fp4|tf32|matrix)\s*){0,4}"
PEAK_EN = [re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*([TP])FLOPS" + BETWEEN_EN + r"\s*peak\b"),
           re.compile(r"\bpeak" + BETWEEN_EN + r"\s*(\d[\d,]*(?:\.\d+)?)\s*([TP])FLOPS")]
PEAK_ZH = [re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*([TP])FLOPS\s*(?:的)?\s*(?:稠密|稀疏|bf16|fp8|BF16|FP8|\s)*峰值"),
           re.compile(r"峰值(?:为|是|\s)*(\d[\d,]*(?:\.\d+)?)\s*([TP])FLOPS")]
COMPUTE = ("tf32_dense", "bf16_dense", "bf16_sparse", "fp8_dense", "fp8_sparse", "fp4_dense")


def aliases(name: str) -> set[str]:
    model = name.split(" ", 1)[1].split(" (")[0]
    found = {model}
    first = model.split()[0]
    if any(ch.isdigit() for ch in first) and len(first) >= 3:
        found.add(first)                            # "H100" names every H100 row
    return found


def prose_peaks(text: str, patterns) -> list[tuple[str, float]]:
    """(sentence, TFLOPS) for every number the text calls a peak."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    found = []
    for sentence in re.split(r"(?<=[.。；;!?])\s+|\n\s*\n", text):
        for pattern in patterns:
            for match in pattern.finditer(sentence):
                number = float(match.group(1).replace(",", ""))
                found.append((sentence, number * (1000 if match.group(2) == "P" else 1)))
    return found


def peak_problems(text: str, patterns, rows: list[dict]) -> list[str]:
    problems = []
    for sentence, tflops in prose_peaks(text, patterns):
        named = [row for row in rows if any(a in sentence for a in aliases(row["name"]))]
        figures = [v for row in named for k in COMPUTE if (v := value(row, k)) is not None]
        if named and not any(abs(tflops - f) <= 0.01 * f for f in figures):
            problems.append(f"{tflops:g} TFLOPS called a peak next to "
                            f"{', '.join(r['name'] for r in named)}: {sentence.strip()[:160]}")
    return problems


def test_the_prose_checker_finds_a_wrong_peak_and_passes_a_right_one(data):
    rows = data["rows"]
    assert peak_problems("An H100 SXM's bf16 peak is 989.4 TFLOPS.", PEAK_EN, rows) == []
    assert peak_problems("It reached 794.5 TFLOPS on an H100 SXM.", PEAK_EN, rows) == []
    assert peak_problems("Gaudi 3 reaches 74% of its 1,677 TFLOPS peak.", PEAK_EN, rows)
    assert peak_problems("MI355X 的 bf16 峰值为 2.3 PFLOPS。", PEAK_ZH, rows)
    assert peak_problems("MI355X 的 2.5 PFLOPS 稠密峰值。", PEAK_ZH, rows) == []


def test_peaks_quoted_in_prose_are_the_catalogue_figures(data):
    problems, checked = [], 0
    for lang, patterns in (("en", PEAK_EN), ("zh", PEAK_ZH)):
        for page in sorted((ROOT / "book" / lang).rglob("*.md")):
            text = page.read_text(encoding="utf-8")
            checked += len(prose_peaks(text, patterns))
            problems += [f"{page.relative_to(ROOT)}: {p}" for p in peak_problems(text, patterns,
                                                                              data["rows"])]
    assert checked >= 3, "the patterns no longer find the peaks the book quotes"
    assert problems == []
