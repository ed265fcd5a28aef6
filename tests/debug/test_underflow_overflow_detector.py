"""Tests of scripts/debug/underflow_overflow_detector.py: the demo run as a process (the injected
overflow is reported at the injected module and step) and the OverflowDetector class used as a
library on models built here."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, import_script

SCRIPT = "underflow_overflow_detector.py"


def load_module():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


# 1e5 pushes the module's output past float16's max while its weights stay inside it; 1e7 pushes
# the weights themselves past it.
@pytest.mark.parametrize("module,step,scale,tensor", [("blocks.2.fc1", 3, "1e5", "output"),
                                                      ("blocks.0.fc2", 2, "1e7", "weight")])
def test_demo_reports_the_injected_module_and_step(launch, tmp_path, module, step, scale, tensor):
    out = tmp_path / "report.json"
    res = launch.python(SCRIPT, ["--inject-module", module, "--inject-step", str(step),
                                 "--inject-scale", scale, "--json", str(out)], timeout=60)
    assert res.returncode == 3, res.output            # 3 = the finding: something was detected
    first = json.loads(out.read_text())["first"]
    assert first["module"] == module
    assert first["step"] == step and first["batch"] == step   # one forward per step
    assert first["kind"] == "overflow" and first["tensor"] == tensor
    assert first["abs_max"] > torch.finfo(torch.float16).max
    assert f"DETECTED step {step} batch {step}: overflow in module '{module}'" in res.stdout


def test_demo_without_injection_detects_nothing(launch, tmp_path):
    out = tmp_path / "report.json"
    res = launch.python(SCRIPT, ["--json", str(out)], timeout=60)
    assert res.returncode == 0, res.output
    assert json.loads(out.read_text())["first"] is None
    assert "no Inf/NaN" in res.stdout


BAD_INPUT = [
    Case("module-unknown", ["--inject-module", "blocks.99.fc1"],
         "--inject-module: no module named 'blocks.99.fc1' \\(see --list-modules\\)"),
    Case("module-without-weight", ["--inject-module", "blocks.0.act"], "has no weight to scale"),
    # scheduled after the last step, the injection never happened and the run reported
    # "no Inf/NaN detected" with status 0
    Case("inject-after-last-step", ["--inject-module", "blocks.2.fc1", "--steps", "3",
                                    "--inject-step", "5"],
         r"--inject-step 5 is after the last step \(--steps 3\)"),
    Case("inject-step-zero", ["--inject-module", "blocks.2.fc1", "--inject-step", "0"],
         "--inject-step: 0 must be >= 1"),
    Case("inject-scale-inf", ["--inject-scale", "inf"], "--inject-scale: 'inf' is not a finite"),
    Case("steps-zero", ["--steps", "0"], "--steps: 0 must be >= 1"),
    Case("blocks-huge", ["--blocks", "1000000"], "--blocks: 1000000 must be <= 1000"),
    Case("dtype-unknown", ["--dtype", "float7"], "--dtype"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/underflow_overflow_detector.py", case, tmp_path)


def test_library_raises_at_first_nan_module_not_later_ones():
    mod = load_module()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 2))
    with torch.no_grad():
        model[2].weight[0, 0] = float("nan")          # NaN starts in the third module
    det = mod.OverflowDetector(model, raise_on_detect=True, check_weights=False)
    det.next_step()
    with pytest.raises(mod.OverflowDetected) as info:
        model(torch.randn(3, 4))
    assert info.value.report["module"] == "2"
    assert info.value.report["kind"] == "nan"
    det.remove()
    model(torch.randn(3, 4))                          # hooks removed: no raise


def test_library_flags_a_weight_and_bfloat16_range():
    mod = load_module()
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    with torch.no_grad():
        model[1].weight[1, 1] = 3.4e38                # finite in fp32, beyond bfloat16's max
    det = mod.OverflowDetector(model, range_dtype=torch.bfloat16)
    det.next_step()
    model(torch.zeros(1, 4))
    weight_hits = [d for d in det.detections if d["tensor"] == "weight"]
    assert weight_hits and weight_hits[0]["module"] == "1"
    assert weight_hits[0]["dtype_max"] == torch.finfo(torch.bfloat16).max


def test_library_underflow_fraction():
    mod = load_module()
    model = nn.Sequential(nn.Identity())
    det = mod.OverflowDetector(model, underflow_frac=0.5, check_weights=False)
    tiny = torch.finfo(torch.float16).tiny
    model(torch.tensor([tiny / 10, tiny / 10, 1.0]))   # 2 of 3 non-zeros below fp16's normal
    assert det.first and det.first["kind"] == "underflow"
    with pytest.raises(TypeError):
        mod.OverflowDetector(model, range_dtype=torch.int32)
