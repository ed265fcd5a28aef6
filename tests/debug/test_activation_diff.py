"""Tests of scripts/debug/activation_diff.py: ActivationRecorder and compare() used as a library on
models built here (an injected change is found at the module where it was made, a NaN and a
different call sequence are divergences, equal runs agree exactly), and the script run as a
process (the demo, compare on saved files, careless invocations)."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

SCRIPT = "activation_diff.py"


@pytest.fixture(scope="module")
def ad():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


def make_model(blocks: int = 4, width: int = 16) -> nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(width, 1))


def record(ad, model, x, backward=True):
    rec = ad.ActivationRecorder(model, backward=backward)
    out = model(x)
    if backward:
        out.sum().backward()
    rec.remove()
    return rec.records


@pytest.fixture
def x():
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("layer", ["0", "4", "8"])
def test_the_changed_module_is_the_first_forward_divergence(ad, x, layer):
    a = record(ad, make_model(), x)
    model = make_model()
    with torch.no_grad():
        model.get_submodule(layer).weight.mul_(1.01)
    result = ad.compare(a, record(ad, model, x), rtol=1e-3)
    first = result["first"]
    assert first["phase"] == "forward" and first["kind"] == "values"
    assert first["a"]["module"] == layer, ad.report(result)
    # every module before it computed exactly the same numbers
    rows = result["phases"]["forward"]["rows"]
    assert all(row["difference"] == 0 for row in rows[:first["index"]])


def test_equal_runs_agree_exactly(ad, x):
    result = ad.compare(record(ad, make_model(), x), record(ad, make_model(), x), rtol=1e-12)
    assert result["first"] is None
    for phase in ("forward", "backward"):
        rows = result["phases"][phase]["rows"]
        assert rows and all(row["difference"] == 0 for row in rows)
    assert "no divergence" in ad.report(result)


def test_records_follow_execution_order_and_gradients_are_recorded(ad, x):
    model = make_model(blocks=2)
    records = record(ad, model, x)
    forward = [r["module"] for r in records if r["phase"] == "forward"]
    assert forward == ["0", "1", "2", "3", "4", ""]      # children first, the root last
    backward = [r for r in records if r["phase"] == "backward"]
    # the root's output is the last layer's output tensor: its gradient is recorded under both
    assert [r["module"] for r in backward] == ["4", "", "3", "2", "1", "0"]
    root_grad = backward[1]                                # d(sum)/d(output): all ones
    assert root_grad["mean"] == 1 and root_grad["rms"] == 1 and root_grad["absmax"] == 1
    out = model(x)
    root = [r for r in records if r["phase"] == "forward" and r["module"] == ""][0]
    assert root["mean"] == pytest.approx(out.double().mean().item(), rel=1e-12)
    assert root["absmax"] == pytest.approx(out.abs().max().item(), rel=1e-12)


def test_a_nan_is_a_divergence_however_small_the_rest(ad, x):
    a = record(ad, make_model(), x, backward=False)
    model = make_model()
    with torch.no_grad():
        model.get_submodule("2").weight[0, 0] = float("nan")
    result = ad.compare(a, record(ad, model, x, backward=False), rtol=1e6)
    assert result["first"]["kind"] == "nonfinite" and result["first"]["a"]["module"] == "2"
    assert result["first"]["b"]["nonfinite"] == 8          # one output column, every row
    assert "NaN/Inf elements A 0, B 8" in ad.report(result)


def test_a_different_call_sequence_is_reported_where_it_starts(ad, x):
    a = record(ad, make_model(blocks=3), x, backward=False)
    b = record(ad, make_model(blocks=4), x, backward=False)
    first = ad.compare(a, b, rtol=1e-3)["first"]
    assert first["kind"] == "structure"
    # both models run "0".."5" identically; then A's head ("6", a Linear to 1 output) meets B's
    # fourth block ("6", a Linear to 16): same name, another shape
    assert first["index"] == 6 and first["a"]["shape"] == [8, 1] and first["b"]["shape"] == [8, 16]


def test_the_probe_sees_a_permutation_the_moments_miss(ad):
    t = torch.arange(1.0, 65.0)
    s1, s2 = ad.tensor_stats(t), ad.tensor_stats(t.flip(0))
    assert all(s1[k] == pytest.approx(s2[k]) for k in ("mean", "rms", "absmax"))
    assert ad.difference(s1, s2) > 1e-2


def test_outputs_in_tuples_and_dicts_are_labelled(ad):
    class Two(nn.Module):
        def forward(self, x):
            return x * 2, {"logits": x + 1, "ids": torch.ones(2, dtype=torch.long)}

    model = Two()
    rec = ad.ActivationRecorder(model, backward=False)
    model(torch.ones(3))
    assert [r["tensor"] for r in rec.records] == ["output[0]", "output[1]['logits']"]  # no int ids
    rec.remove()
    model(torch.ones(3))
    assert len(rec.records) == 2                           # hooks removed: nothing more recorded
    with pytest.raises(TypeError, match="torch.nn.Module"):
        ad.ActivationRecorder(lambda x: x)


def test_demo_names_the_injected_module(launch, tmp_path):
    out = tmp_path / "report.json"
    res = launch.python(SCRIPT, ["demo", "--inject-module", "blocks.2.fc2", "--save-dir",
                                 str(tmp_path), "--json", str(out)], timeout=60)
    assert res.returncode == 3, res.output                 # 3 = the finding: a divergence
    assert "FIRST DIVERGENCE (forward): module 'blocks.2.fc2' (Linear)" in res.stdout
    report = json.loads(out.read_text())
    assert report["first"]["a"]["module"] == "blocks.2.fc2"
    # compare on the saved files gives the same answer
    again = launch.python(SCRIPT, ["compare", str(tmp_path / "run_a.json"),
                                   str(tmp_path / "run_b.json")], timeout=60)
    assert again.returncode == 3, again.output
    assert again.stdout.splitlines()[-1] == res.stdout.splitlines()[-1]


def test_demo_without_a_change_finds_nothing(launch):
    res = launch.python(SCRIPT, ["demo", "--blocks", "2"], timeout=60)
    assert res.returncode == 0, res.output
    assert "no divergence" in res.stdout


def test_demo_in_bfloat16_parts_ways_at_the_first_module(launch):
    res = launch.python(SCRIPT, ["demo", "--blocks", "2", "--b-dtype", "bfloat16"], timeout=60)
    assert res.returncode == 3, res.output
    assert "FIRST DIVERGENCE (forward): module 'blocks.0.norm'" in res.stdout


def test_help_without_torch_work(launch):
    res = launch.python(SCRIPT, ["--help"], timeout=60)
    assert res.returncode == 0 and "compare" in res.stdout and "demo" in res.stdout


RECORDS = json.dumps({"schema": "activation_diff/1", "records": []})
NAN_RECORD = ('{"schema": "activation_diff/1", "records": [{"module": "fc", "type": "Linear", "call": 0, '
              '"tensor": "output", "shape": [2], "phase": "forward", "mean": NaN, "rms": 1.0, '
              '"absmax": 1.0, "probe": 0.0, "nonfinite": 0}]}')
BAD_INPUT = [
    # A NaN statistic would make every difference NaN, and "NaN > rtol" is false: no divergence.
    Case("nan-statistic", ["compare", "{tmp}/a.json", "{tmp}/a.json"],
         r"run_a: .*a\.json: record 0 has mean = nan, which no recording holds", files={"a.json": NAN_RECORD}),
    Case("json-is-a-recording", ["demo", "--save-dir", "{tmp}/d", "--json", "{tmp}/d/run_a.json"],
         r"--save-dir .*/d/run_a\.json: --json writes there too; give each output its own path",
         files={"d/run_b.json": "{}"}),
    Case("missing-file", ["compare", "{tmp}/none.json", "{tmp}/b.json"], r"run_a .*none\.json: does not exist",
         files={"b.json": RECORDS}),
    Case("folder", ["compare", "{tmp}/a.json", "{tmp}"], r"run_b .*: is a folder", files={"a.json": RECORDS}),
    Case("not-json", ["compare", "{tmp}/a.json", "{tmp}/b.json"], r"run_b .*b\.json: not valid JSON",
         files={"a.json": RECORDS, "b.json": "step,loss\n1,2.5\n"}),
    Case("other-json", ["compare", "{tmp}/a.json", "{tmp}/b.json"],
         r"run_a: .*a\.json is not an activation_diff record file",
         files={"a.json": '{"benchmark": "mamf", "results": []}', "b.json": RECORDS}),
    Case("record-without-stats", ["compare", "{tmp}/a.json", "{tmp}/b.json"], r"run_a: .*record 0 lacks",
         files={"a.json": json.dumps({"schema": "activation_diff/1", "records": [{"phase": "forward"}]}),
                "b.json": RECORDS}),
    Case("json-is-an-input", ["compare", "{tmp}/a.json", "{tmp}/b.json", "--json", "{tmp}/a.json"],
         r"--json", files={"a.json": RECORDS, "b.json": RECORDS}),
    Case("save-dir-unwritable", ["demo", "--save-dir", "/proc/runs"], r"--save-dir /proc/runs"),
    Case("run-b-empty-path", ["compare", "{tmp}/a.json", ""], r"run_b", files={"a.json": RECORDS}),
    Case("rtol-nan", ["demo", "--rtol", "nan"], r"--rtol: 'nan' is not a finite number"),
    Case("rtol-zero", ["demo", "--rtol", "0"], r"--rtol: 0 must be > 0"),
    Case("eps-minus-one", ["demo", "--inject-eps", "-1"], r"--inject-eps: -1 must be > -1"),
    Case("blocks-zero", ["demo", "--blocks", "0"], r"--blocks: 0 must be >= 1"),
    Case("unknown-module", ["demo", "--inject-module", "blocks.9.fc1"],
         r"--inject-module: 'blocks.9.fc1' is not a Linear of the demo model"),
    Case("save-dir-under-a-file", ["demo", "--save-dir", "{tmp}/a.json/runs"],
         r"--save-dir .*a\.json is a file, not a folder", files={"a.json": RECORDS}),
    Case("no-command", [], r"required: .*command|\{compare,demo\}"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused(f"debug/{SCRIPT}", case, tmp_path)


def test_a_nan_statistic_never_compares_as_agreement(ad):
    a = {"mean": float("nan"), "rms": 1.0, "absmax": 1.0, "probe": 0.0, "nonfinite": 0}
    assert ad.difference(a, dict(a)) == float("inf")
