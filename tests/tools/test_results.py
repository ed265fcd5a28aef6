"""tools/results.py: every committed results file validates against its schema (the CI check);
validation catches a missing key, a wrong type, an unknown benchmark and a published file without
sources; `add` names a reader's file and refuses to overwrite; `plot` writes an image, and
`plot_svg` the same figure for a page's results-plot marker."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from tools import results
from tools.results import ROOT

MAMF = json.loads((ROOT / "results" / "compute" / "mamf_finder-cpu.json").read_text())


def test_every_committed_results_file_validates():
    files = results.result_files()
    assert len(files) >= 16  # the files under results/ when the schemas were written
    assert results.validate(files) == []
    others = {p.relative_to(ROOT).as_posix() for p in (ROOT / "results").rglob("*")
              if p.is_file() and p.name != "README.md"} - {p.relative_to(ROOT).as_posix() for p in files}
    assert others == set(results.NOT_RESULTS)  # every skipped file is listed, with its reason


def test_every_schema_is_named_after_a_script_and_refers_to_the_envelope():
    for name in results.known_benchmarks():
        schema = json.loads((results.SCHEMAS / f"{name}.schema.json").read_text())
        assert schema["$ref"] == "envelope.schema.json" and schema["$id"].endswith(f"/{name}.schema.json")
        assert schema["properties"]["benchmark"] == {"const": name}
        results.part_of(name)  # scripts/<part>/<name>.py exists


def _problems(doc):
    return results.problems(doc, "f.json")


def test_a_missing_key_is_caught():
    doc = copy.deepcopy(MAMF)
    del doc["versions"]
    assert _problems(doc) == ["f.json: (top level): 'versions' is a required property"]
    doc = copy.deepcopy(MAMF)
    del doc["results"][1]["max_tflops"]
    assert _problems(doc) == ["f.json: results/1: 'max_tflops' is a required property"]


def test_a_wrong_type_is_caught():
    doc = copy.deepcopy(MAMF)
    doc["results"][0]["m"] = "256"
    doc["date_utc"] = "23 Nov 2026"
    found = _problems(doc)
    assert any(p.startswith("f.json: results/0/m: '256' is not of type 'integer'") for p in found)
    assert any(p.startswith("f.json: date_utc: '23 Nov 2026' does not match") for p in found)


def test_an_unknown_or_missing_benchmark_is_caught():
    assert "unknown benchmark 'mamf'" in _problems({**MAMF, "benchmark": "mamf"})[0]
    assert "unknown benchmark '../x'" in _problems({**MAMF, "benchmark": "../x"})[0]
    assert "no 'benchmark' key" in _problems({"tool": "kv_cache_calculator"})[0]


def test_published_rows_need_a_source_and_no_command():
    row = {"device": "GPU", "dtype": "bf16", "mean_tflops": 1.0}
    doc = {"benchmark": "mamf_finder", "schema_version": 1, "origin": "published", "device": "various",
           "date_utc": "2026-01-01T00:00:00Z", "versions": {}, "results": [row]}
    assert _problems(doc) == ["f.json: results/0: 'source' is a required property"]
    row["source"] = "https://example.org/table"
    assert _problems(doc) == []
    assert any("False schema" in p for p in _problems({**doc, "command": "python x.py"}))
    del row["mean_tflops"]
    assert _problems(doc)  # neither mean nor max TFLOPS


def test_validate_lists_files_it_cannot_read_or_that_are_not_json(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.txt").write_text("text")
    errors = results.validate([tmp_path / "a.json", tmp_path / "b.txt"])
    assert "cannot read JSON" in errors[0] and "not a results JSON" in errors[1]


def test_cli_validate_exit_status_and_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**MAMF, "benchmark": "nope"}))
    assert results.main(["validate", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("results.py: error: ") and "unknown benchmark 'nope'" in err[0]
    assert results.main(["validate", str(ROOT / "results" / "compute" / "mamf_finder-cpu.json")]) == 0


def test_add_names_the_file_copies_it_unchanged_and_refuses_to_overwrite(tmp_path, capsys):
    mine = tmp_path / "run.json"
    text = json.dumps({**MAMF, "device": "NVIDIA H100 80GB HBM3"}, indent=2)
    mine.write_text(text)
    target = results.add(mine, results_dir=tmp_path / "results")
    assert target == tmp_path / "results" / "compute" / "mamf_finder-nvidia-h100-80gb-hbm3-2026-11-23.json"
    assert target.read_text() == text
    with pytest.raises(results.ResultsError, match="exists; not overwriting"):
        results.add(mine, results_dir=tmp_path / "results")
    assert "python scripts/compute/mamf_finder.py" in results.readme_entry(target)


def test_add_refuses_an_invalid_file(tmp_path):
    mine = tmp_path / "run.json"
    mine.write_text(json.dumps({k: v for k, v in MAMF.items() if k != "command"}))
    with pytest.raises(results.ResultsError, match="'command' is a required property"):
        results.add(mine, results_dir=tmp_path / "results")
    assert not (tmp_path / "results").exists()


def test_device_slug():
    assert results.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert results.device_slug(None) == "any" and results.device_slug("../..") == "unknown"


@pytest.mark.parametrize("benchmark", ["mamf_finder", "all_reduce_bench"])
def test_plot_writes_an_image_of_every_file(benchmark, tmp_path):
    out = results.plot(benchmark, tmp_path / f"{benchmark}.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_plot_refuses_what_it_cannot_draw(tmp_path):
    with pytest.raises(results.ResultsError, match="no plot for 'fio_scan': its view file"):
        results.plot("fio_scan", tmp_path / "x.png")
    with pytest.raises(results.ResultsError, match="written as .png or .svg"):
        results.plot("mamf_finder", tmp_path / "x.pdf")
    with pytest.raises(results.ResultsError, match="is not a mem_bandwidth results file"):
        results.plot("mem_bandwidth", tmp_path / "x.svg",
                     [Path(ROOT / "results" / "compute" / "mamf_finder-cpu.json")])


def test_plot_svg_draws_the_files_and_is_the_same_each_time():
    svg, alt = results.plot_svg("layer_bench", "en")
    # No date and fixed ids: the same files give the same page, so the PDF and EPUB caches hold.
    assert svg == results.plot_svg("results/training/layer_bench-*.json", "en")[0]
    assert "<dc:date>" not in svg
    # Matplotlib writes each text it draws as paths, after a comment holding the text.
    texts = re.findall(r"<!-- (.*?) -->", svg)
    sweep = results.load(ROOT / "results/training/layer_bench-swiglu-cpu.json")
    assert sorted(t for t in texts if t.startswith("multiple_of ")) == \
        sorted(f"multiple_of {r['multiple_of']}" for r in sweep["results"] if r.get("multiple_of"))
    assert f"{sweep['device']}, {sweep['date_utc'][:10]}" in texts  # the file's line, in the legend
    view = yaml.safe_load((results.SCHEMAS / "layer_bench.view.yml").read_text())["plot"]["alt"]
    assert alt == " ".join(view["en"].split()) and results.plot_svg("layer_bench", "zh")[1] == view["zh"]


def test_plot_svg_refuses_a_spec_that_names_no_file():
    with pytest.raises(results.ResultsError, match="no results file matches results/training/nothing-"):
        results.plot_svg("results/training/nothing-*.json")
    with pytest.raises(results.ResultsError, match="no plot for 'fio_scan'"):
        results.plot_svg("fio_scan")
