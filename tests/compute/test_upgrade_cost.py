"""Tests of scripts/compute/upgrade_cost.py: cost per trained token across device options.

The expected numbers are worked out here from first principles (FLOPs of the whole run divided
by the achieved FLOPS, prices times hours), not by calling the function under test twice; the
MAMF figures are read from the committed results/compute/mamf_finder-{h100,cpu}.json by a
separate scan of their rows. The formula itself is checked against the one of
scripts/training/flops_mfu_calculator.py, so the book keeps one formula for FLOPs per token.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script
from tools.results import problems

SCRIPT = "upgrade_cost.py"
H100 = REPO / "results" / "compute" / "mamf_finder-h100.json"
CPU = REPO / "results" / "compute" / "mamf_finder-cpu.json"
BREAKDOWN = REPO / "results" / "compute" / "step_time_breakdown-cpu-gloo-2proc.json"


@pytest.fixture(scope="module")
def up():
    return import_script(REPO / "scripts" / "compute" / SCRIPT)


def best_max_tflops(path, dtype: str) -> float:
    """The largest max_tflops among the rows of ``dtype``, scanned independently of the script."""
    rows = json.loads(path.read_text())["results"]
    return sorted(r["max_tflops"] for r in rows if r["dtype"] == dtype)[-1]


# ---------------------------------------------------------------- hand-computed examples

def test_one_device_by_hand(up):
    # A 1e9-parameter model trained on 1.8e11 tokens needs 6 * 1e9 * 1.8e11 = 1.08e21 FLOPs.
    # At 300 TFLOPS x 0.5 = 1.5e14 FLOP/s per device that is 1.08e21 / 1.5e14 = 7.2e6
    # device-seconds = 2000 device-hours; at 2 USD per device-hour, 4000 USD, i.e.
    # 4000 / 1.8e5 million tokens = 0.0222... USD per million tokens; on 10 devices 200 hours.
    r = up.option_cost(tflops=300, efficiency=0.5, usd_per_device_hour=2.0,
                       flops_per_token=up.flops_per_token(1e9)["model"], tokens=1.8e11, devices=10)
    assert r["achieved_tflops"] == pytest.approx(150)
    assert r["device_hours"] == pytest.approx(2000)
    assert r["total_usd"] == pytest.approx(4000)
    assert r["compute_usd"] == pytest.approx(4000)
    assert r["electricity_usd"] == 0
    assert r["usd_per_mtoken"] == pytest.approx(4000 / 1.8e5)
    assert r["days"] == pytest.approx(200 / 24)
    # 1.5e14 FLOP/s over 6e9 FLOPs per token
    assert r["tokens_per_s_per_device"] == pytest.approx(25_000)


def test_electricity_is_added_and_labelled(up):
    # 700 W for an hour is 0.7 kWh; at 0.20 USD/kWh that is 0.14 USD per device-hour on top of
    # the 1 USD price. 1e12 FLOP/s on 6e12 FLOPs per token (N = 1e12) is 1/6 token per second,
    # 600 tokens per hour: (1 + 0.14) / 600 USD per token.
    r = up.option_cost(tflops=1, usd_per_device_hour=1.0, flops_per_token=6e12, power_w=700,
                       usd_per_kwh=0.20, tokens=6000)
    assert r["electricity_usd_per_device_hour"] == pytest.approx(0.14)
    assert r["usd_per_mtoken"] == pytest.approx(1.14 / 600 * 1e6)
    assert r["usd_per_mtoken_electricity"] == pytest.approx(0.14 / 600 * 1e6)
    assert r["device_hours"] == pytest.approx(10)
    assert r["electricity_usd"] == pytest.approx(1.4)
    assert r["total_usd"] == pytest.approx(11.4)


def test_attention_term_by_hand(up):
    # N = 1000: 6N = 6000. L = 2 layers, a = 64, T = 128: each layer's query meets 128 keys of
    # width 64 (2 * 128 * 64 FLOPs), values the same, times 3 for training: 2 * 3 * 4 * 128 * 64.
    f = up.flops_per_token(1000, layers=2, attn_width=64, seq_len=128)
    assert f["dense"] == 6000
    assert f["attention"] == 2 * 3 * 4 * 128 * 64
    assert f["model"] == 6000 + 196_608
    assert up.flops_per_token(1000) == {"dense": 6000, "attention": 0, "model": 6000}


@pytest.mark.parametrize("n,layers,width,seq", [(7e9, 32, 4096, 4096), (540.35e9, 118, 12288, 2048),
                                                 (1.3e8, 12, 768, 1024)])
def test_same_formula_as_the_mfu_calculator(up, n, layers, width, seq):
    # One formula in the book: this script and flops_mfu_calculator.py must agree.
    calc = import_script(REPO / "scripts" / "training" / "flops_mfu_calculator.py")
    theirs = calc.flops_per_token(matmul_params=n, layer_matmul_params=n, layers=layers,
                                  attn_width=width, seq_len=seq)
    ours = up.flops_per_token(n, layers=layers, attn_width=width, seq_len=seq)
    for key in ("dense", "attention", "model"):
        assert ours[key] == theirs[key]


def test_ratios_do_not_depend_on_the_model(up):
    # Per token, B / A costs (price_B / price_A) * (achieved_A / achieved_B), whatever the model.
    opts = [{"name": "old", "tflops": 312, "efficiency": 0.45, "usd_per_device_hour": 1.5},
            {"name": "new", "tflops": 989, "efficiency": 0.4, "usd_per_device_hour": 4.0}]
    expect = (4.0 / 1.5) * (312 * 0.45) / (989 * 0.4)
    for fpt in (6e9, 4.2e10, 3.3e12):
        rows = up.compare(opts, flops_per_token=fpt)
        assert rows[1]["cost_ratio_vs_first"] == pytest.approx(expect)
        assert rows[1]["speedup_vs_first"] == pytest.approx(989 * 0.4 / (312 * 0.45))
        assert rows[0]["cost_ratio_vs_first"] == rows[0]["speedup_vs_first"] == 1
        assert rows[0]["break_even_usd_per_device_hour"] == pytest.approx(1.5)
        # new is cheaper per token when its price is below old's price times the speed-up
        assert rows[1]["break_even_usd_per_device_hour"] == pytest.approx(1.5 * 989 * 0.4 / (312 * 0.45))


@pytest.mark.parametrize("power,kwh", [(None, None), (700, 0.12), (1200, 0.3)])
@pytest.mark.parametrize("speed", [0.5, 3.0, 17.0])
def test_break_even_price_equalises_cost_per_token(up, power, kwh, speed):
    # Priced at its break-even price, an option costs exactly what the first one does per token.
    first = {"name": "a", "tflops": 100.0, "usd_per_device_hour": 2.0,
             "power_w": None if power is None else 400}
    other = {"name": "b", "tflops": 100.0 * speed, "usd_per_device_hour": 9.0, "power_w": power}
    rows = up.compare([first, other], flops_per_token=5e10, usd_per_kwh=kwh)
    price = rows[1]["break_even_usd_per_device_hour"]
    again = up.compare([first, {**other, "usd_per_device_hour": price}], flops_per_token=5e10,
                       usd_per_kwh=kwh)
    assert again[1]["usd_per_mtoken"] == pytest.approx(again[0]["usd_per_mtoken"], rel=1e-12)
    assert again[1]["cost_ratio_vs_first"] == pytest.approx(1, rel=1e-12)
    # and a cent below it, the other option is the cheaper one
    cheaper = up.compare([first, {**other, "usd_per_device_hour": price - 0.01}],
                         flops_per_token=5e10, usd_per_kwh=kwh)
    assert cheaper[1]["cost_ratio_vs_first"] < 1


def test_break_even_can_be_negative_when_electricity_alone_costs_more(up):
    # 1 token/s is 3600 tokens/hour; at 1e-4 USD per million tokens the break-even price is
    # 3.6e-7 USD/hour before electricity, so 0.1 USD/hour of electricity makes it negative.
    assert up.break_even_usd_per_hour(1e-4, 1.0, 0.1) == pytest.approx(3.6e-7 - 0.1)


# ---------------------------------------------------------------- mamf_finder.py files

@pytest.mark.parametrize("path,dtype", [(H100, "bf16"), (H100, "fp8"), (CPU, "fp32"), (CPU, "bf16")])
def test_reads_the_committed_mamf_files(up, path, dtype):
    data = json.loads(path.read_text())
    found = up.mamf_tflops(data, dtype)
    assert found["tflops"] == best_max_tflops(path, dtype)
    assert found["tflops"] == data["best"][dtype]["max_tflops"]  # mamf_finder's own summary
    b = data["best"][dtype]
    assert found["shape"] == f"{b['m']}x{b['n']}x{b['k']}"
    assert found["device"] == data["device"]
    assert found["shapes"] == sum(r["dtype"] == dtype for r in data["results"])


def test_accepts_both_benchmark_names_and_refuses_others(up):
    data = json.loads(H100.read_text())
    for name in ("mamf", "mamf_finder"):
        assert up.mamf_tflops({**data, "benchmark": name}, "bf16")["tflops"] == \
            best_max_tflops(H100, "bf16")
    with pytest.raises(ValueError, match="not a mamf_finder.py result"):
        up.mamf_tflops({**data, "benchmark": "mem_bandwidth"}, "bf16")
    with pytest.raises(ValueError, match=r"has no fp16 measurement \(it has: bf16, fp8\)"):
        up.mamf_tflops(data, "fp16")
    # A table of published results has a device per row: its best row would mix devices.
    table = {**data, "device": "various", "results": [{**data["results"][0], "device": "A"},
                                                      {**data["results"][1], "device": "B"}]}
    with pytest.raises(ValueError, match=r"results\[0\] names its own device \('A'\)"):
        up.mamf_tflops(table, "bf16")
    bad = {**data, "results": [{**data["results"][0], "max_tflops": float("nan")}]}
    with pytest.raises(ValueError, match="max_tflops must be finite"):
        up.mamf_tflops(bad, "bf16")


def test_cli_with_mamf_files_and_json(tmp_path):
    # The worked example of the When to upgrade page, with its made-up prices.
    out = tmp_path / "cost.json"
    out.write_text("old content that must be replaced whole\n")
    args = ["--params", "124e6", "--tokens", "1e9",
            "--device", "h100", "--mamf-json", str(H100), "--usd-per-hour", "3",
            "--device", "cpu-1-thread::0.02", "--mamf-json", str(CPU),
            "--json", str(out)]
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "compute" / SCRIPT), *args],
                          cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    r = json.loads(out.read_text())
    assert [k for k in r if k in ("benchmark", "schema_version", "date_utc", "command",
                                  "versions", "device", "results")] == \
        ["benchmark", "schema_version", "date_utc", "command", "versions", "device", "results"]
    assert r["benchmark"] == "upgrade_cost" and r["schema_version"] == 1 and r["device"] is None
    assert problems(r, "--json") == []
    assert r["date_utc"].endswith("Z") and "--mamf-json" in r["command"]
    assert set(r["versions"]) == {"python"}
    h100, cpu = r["results"]
    assert h100["name"] == "h100" and cpu["name"] == "cpu-1-thread"
    assert h100["tflops"] == best_max_tflops(H100, "bf16") and h100["mamf_dtype"] == "bf16"
    assert cpu["tflops"] == best_max_tflops(CPU, "bf16")
    # flat rows: numbers, strings, booleans or null only
    for row in r["results"]:
        assert all(v is None or isinstance(v, (int, float, str, bool)) for v in row.values())
    # 744e6 FLOPs per token (6 x 124e6). Both run at their whole MAMF (efficiency 1), so the
    # CPU breaks even when its price is the H100's scaled by the ratio of their TFLOPS.
    assert r["flops_per_token"]["model"] == 6 * 124e6
    assert cpu["break_even_usd_per_device_hour"] == pytest.approx(3 * cpu["tflops"] / h100["tflops"])
    assert h100["device_hours"] == pytest.approx(1e9 * 744e6 / (h100["tflops"] * 1e12) / 3600)
    assert "break-even USD/device-hour" in proc.stdout
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


# ---------------------------------------------------------------- step_time_breakdown.py files

def test_step_speedup_by_hand(up):
    # Half the step is matmuls made 4x faster, 30% optimizer/other 2x, 20% all-reduce 1x (same
    # network): new step = 0.5/4 + 0.3/2 + 0.2/1 = 0.475 of the old, a 2.105x speed-up, far from 4.
    f = {"attention": 0.2, "mlp": 0.3, "communication": 0.2, "optimizer": 0.1, "other": 0.2}
    assert up.step_speedup(f, {"compute": 4, "memory": 2, "link": 1}) == pytest.approx(1 / 0.475)
    # all parts 3x faster: the step is 3x faster
    assert up.step_speedup(f, {"compute": 3, "memory": 3, "link": 3}) == pytest.approx(3)
    # no communication: no link ratio needed
    f1 = {**f, "communication": 0.0, "other": 0.4}
    assert up.step_speedup(f1, {"compute": 2, "memory": 2}) == pytest.approx(2)
    with pytest.raises(ValueError, match="link speed-up must be a number"):
        up.step_speedup(f, {"compute": 2, "memory": 2})


@pytest.mark.parametrize("doc,message", [
    ({"benchmark": "mamf_finder"}, "not a step_time_breakdown.py result"),
    ({"benchmark": "step_time_breakdown", "fractions": {"mlp": 1.0}}, "exactly the keys"),
    ({"benchmark": "step_time_breakdown", "fractions": {"attention": 0.5, "mlp": 0.5,
      "communication": 0.5, "optimizer": 0, "other": 0}}, "sum to 1.5"),
    ({"benchmark": "step_time_breakdown", "fractions": {"attention": -0.5, "mlp": 1.5,
      "communication": 0, "optimizer": 0, "other": 0}}, "fractions.attention must be >= 0"),
])
def test_breakdown_fractions_refuses_bad_files(up, doc, message):
    with pytest.raises(ValueError, match=message):
        up.breakdown_fractions(doc)


def test_cli_with_a_breakdown(up, tmp_path, capsys):
    # The page's example: the committed CPU breakdown as the first device's step; the second has
    # 2x the achieved TFLOPS, 2.5x the memory and the same link: its speed-up is Amdahl's over
    # the file's own fractions, and its cost per token follows from it at its price.
    out = tmp_path / "cost.json"
    fr = json.loads(BREAKDOWN.read_text())["fractions"]
    assert up.main(["--params", "7e9", "--breakdown", str(BREAKDOWN),
                    "--device", "old:400:2", "--mem-gbps", "2000", "--link-gbps", "50",
                    "--device", "new:800:5", "--mem-gbps", "5000", "--link-gbps", "50",
                    "--json", str(out)]) == 0
    expected = 1 / ((fr["attention"] + fr["mlp"]) / 2 + (fr["optimizer"] + fr["other"]) / 2.5
                    + fr["communication"])
    r = json.loads(out.read_text())
    assert problems(r, "--json") == []
    old, new = r["results"]
    assert new["step_speedup"] == pytest.approx(expected)
    assert new["speedup_vs_first"] == pytest.approx(expected)
    assert new["cost_ratio_vs_first"] == pytest.approx(5 / 2 / expected)
    assert old["tokens_per_s_per_device"] == pytest.approx(400e12 / 42e9)
    assert r["breakdown"]["fractions"] == pytest.approx(fr) and r["breakdown"]["interrupted"] is False
    assert "step speed-up (Amdahl)" in capsys.readouterr().out


def test_a_breakdown_from_an_interrupted_run_is_said_so(up, tmp_path, capsys):
    """A step_time_breakdown.py file written on Ctrl-C or SIGTERM holds fewer rounds: the cost
    comparison still uses it, and says so in its header and its JSON."""
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps({**json.loads(BREAKDOWN.read_text()), "interrupted": True, "iters_done": 2}))
    out = tmp_path / "cost.json"
    assert up.main(["--params", "7e9", "--breakdown", str(cut), "--device", "old:400:2", "--mem-gbps", "2000",
                    "--link-gbps", "50", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["breakdown"]["interrupted"] is True
    assert "run interrupted, fewer rounds)" in capsys.readouterr().out


def test_json_is_written_even_when_the_reader_closes_stdout(tmp_path):
    """`upgrade_cost.py ... --json f | head -1` must still leave the whole file: stdout here is a
    pipe whose reading end is already closed, so the first print fails."""
    out = tmp_path / "cost.json"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        subprocess.run([sys.executable, str(REPO / "scripts" / "compute" / SCRIPT), "--params", "7e9",
                        "--device", "a:100:1", "--device", "b:200:3", "--json", str(out)],
                       cwd=tmp_path, env=clean_env(), stdout=write_end, stderr=subprocess.PIPE,
                       timeout=60)
    finally:
        os.close(write_end)
    assert [r["name"] for r in json.loads(out.read_text())["results"]] == ["a", "b"]


def test_json_write_is_atomic(up, tmp_path, monkeypatch, capsys):
    out = tmp_path / "cost.json"
    out.write_text("previous result\n")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(up.os, "fsync", broken_fsync)
    with pytest.raises(up.ScriptError, match=rf"^{re.escape(str(out))}: cannot write it \(No space left on device\)"):
        up.main(["--params", "1e9", "--device", "a:100:1", "--json", str(out)])
    assert out.read_text() == "previous result\n"
    assert sorted(os.listdir(tmp_path)) == ["cost.json"]
    monkeypatch.undo()
    assert up.main(["--params", "1e9", "--device", "a:100:1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["results"][0]["usd_per_mtoken"] == \
        pytest.approx(1 / (100e12 / 6e9 * 3600) * 1e6)
    assert "# wrote" in capsys.readouterr().out


def test_import_has_no_side_effects_and_no_torch():
    # Issue 18 runs these functions in a browser (Pyodide): importing must not need torch,
    # print anything or touch files.
    code = ("import sys, importlib.util as u; s = u.spec_from_file_location('m', sys.argv[1]); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); "
            "assert 'torch' not in sys.modules; print(m.compare([{'name': 'x', 'tflops': 1, "
            "'usd_per_device_hour': 1}], flops_per_token=6)[0]['cost_ratio_vs_first'])")
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "scripts" / "compute" / SCRIPT)],
                          capture_output=True, text=True, timeout=30, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "1.0\n" and proc.stderr == ""


@pytest.mark.parametrize("call,message", [
    (lambda up: up.option_cost(tflops=0, usd_per_device_hour=1, flops_per_token=1), "tflops must be > 0"),
    (lambda up: up.option_cost(tflops=1, usd_per_device_hour=math.nan, flops_per_token=1),
     "usd_per_device_hour must be finite"),
    (lambda up: up.option_cost(tflops=1, usd_per_device_hour=-1, flops_per_token=1),
     "usd_per_device_hour must be > 0"),
    (lambda up: up.option_cost(tflops=1, usd_per_device_hour=1, flops_per_token=1, efficiency=1.5),
     "efficiency must be <= 1"),
    (lambda up: up.option_cost(tflops=1, usd_per_device_hour=1, flops_per_token=1, power_w=100),
     "both power_w and usd_per_kwh"),
    (lambda up: up.option_cost(tflops="9", usd_per_device_hour=1, flops_per_token=1), "must be a number"),
    (lambda up: up.flops_per_token(1e9, layers=32), "needs layers, attn_width and seq_len"),
    (lambda up: up.flops_per_token(math.inf), "params must be finite"),
    (lambda up: up.compare([], flops_per_token=1), "no device options"),
    (lambda up: up.compare([{"name": "a", "tflops": 1, "usd_per_device_hour": 1}] * 2,
                           flops_per_token=1), "appears twice"),
    (lambda up: up.compare([{"name": "a", "tflops": 1, "usd_per_device_hour": 1}],
                           flops_per_token=1, usd_per_kwh=0.1), "a: no power_w"),
])
def test_functions_raise_value_error_naming_the_input(up, call, message):
    with pytest.raises(ValueError, match=message):
        call(up)


# ---------------------------------------------------------------- careless input

MAMF_OTHER = json.dumps({"benchmark": "mem_bandwidth", "results": []})
MAMF_CPU = CPU.read_text()
BASE = ["--params", "7e9"]
BD_FILE = {"b.json": BREAKDOWN.read_text()}

BAD_INPUT = [
    Case("no-device", BASE, r"give at least one --device"),
    Case("no-params", ["--device", "a:1:1"], r"--params"),
    Case("price-zero", [*BASE, "--device", "a100:312:0"], r"--device: a100: USD_PER_HOUR 0 must be > 0"),
    Case("price-negative", [*BASE, "--device", "a100:312:-2"], r"a100: USD_PER_HOUR -2 must be > 0"),
    Case("tflops-nan", [*BASE, "--device", "a100:nan:1"], r"a100: TFLOPS 'nan' is not a finite number"),
    Case("tflops-inf", [*BASE, "--device", "a100:inf:1"], r"a100: TFLOPS 'inf' is not a finite number"),
    Case("tflops-text", [*BASE, "--device", "a100:fast:1"], r"a100: TFLOPS 'fast' is not a number"),
    Case("spec-four-fields", [*BASE, "--device", "a:1:2:3"], r"--device: 'a:1:2:3' has 4 fields"),
    Case("spec-no-name", [*BASE, "--device", ":312:1"], r"--device: .* has no NAME"),
    Case("no-tflops", [*BASE, "--device", "a100::1.5"], r"--device a100: no TFLOPS"),
    Case("no-price", [*BASE, "--device", "a100:312"], r"--device a100: no price"),
    Case("price-twice", [*BASE, "--device", "a100:312:1", "--usd-per-hour", "2"], r"a100: price given twice"),
    Case("tflops-twice", [*BASE, "--device", "cpu:1:1", "--mamf-json", "{tmp}/cpu.json"],
         r"--device cpu: TFLOPS given twice", files={"cpu.json": MAMF_CPU}),
    Case("setting-before-device", [*BASE, "--usd-per-hour", "2", "--device", "a:1:1"],
         r"--usd-per-hour: must follow the --device"),
    Case("setting-given-twice", [*BASE, "--device", "a:1:1", "--efficiency", "0.5", "--efficiency", "0.4"],
         r"--efficiency: given twice for --device a"),
    Case("duplicate-name", [*BASE, "--device", "a:1:1", "--device", "a:2:1"], r"'a' is given twice"),
    Case("efficiency-above-one", [*BASE, "--device", "a:1:1", "--efficiency", "45"],
         r"--efficiency: 45 must be <= 1"),
    Case("efficiency-zero", [*BASE, "--device", "a:1:1", "--efficiency", "0"], r"--efficiency: 0 must be > 0"),
    Case("dtype-without-mamf", [*BASE, "--device", "a:1:1", "--dtype", "fp8"],
         r"--dtype fp8 only goes with --mamf-json"),
    Case("dtype-unknown", [*BASE, "--device", "a", "--dtype", "fp4"], r"--dtype: invalid choice: 'fp4'"),
    Case("power-without-price", [*BASE, "--device", "a:1:1", "--power-w", "700"],
         r"--device a: --power-w 700 needs --usd-per-kwh"),
    Case("kwh-without-power", [*BASE, "--usd-per-kwh", "0.1", "--device", "a:1:1"], r"--device a: no --power-w"),
    Case("kwh-negative", [*BASE, "--usd-per-kwh", "-0.1", "--device", "a:1:1"], r"--usd-per-kwh: -0.1 must be > 0"),
    Case("partial-shape", [*BASE, "--layers", "32", "--device", "a:1:1"],
         r"--layers needs --hidden and --seq-len too"),
    Case("devices-zero", [*BASE, "--devices", "0", "--device", "a:1:1"], r"--devices: 0 must be >= 1"),
    Case("tokens-inf", [*BASE, "--tokens", "inf", "--device", "a:1:1"], r"--tokens: 'inf' is not a finite"),
    Case("mamf-missing", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}/none.json"],
         r"--device h --mamf-json .*none\.json: does not exist"),
    Case("mamf-folder", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}"], r"--mamf-json .*: is a folder"),
    Case("mamf-not-json", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}/x.json"],
         r"--mamf-json .*x\.json: not valid JSON", files={"x.json": "mamf 793 TFLOPS\n"}),
    Case("mamf-not-utf8", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}/x.json"],
         r"--mamf-json .*x\.json: not UTF-8", files={"x.json": b"\xff\xfe\x00"}),
    Case("mamf-other-benchmark", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}/x.json"],
         r"x\.json: not a mamf_finder\.py result \(benchmark 'mem_bandwidth'", files={"x.json": MAMF_OTHER}),
    Case("mamf-lacks-dtype", [*BASE, "--device", "c::3", "--mamf-json", "{tmp}/cpu.json", "--dtype", "fp8"],
         r"cpu\.json: has no fp8 measurement \(it has: fp32, bf16\)", files={"cpu.json": MAMF_CPU}),
    Case("mamf-list", [*BASE, "--device", "h::3", "--mamf-json", "{tmp}/x.json"],
         r"not a mamf_finder\.py result", files={"x.json": "[1, 2]"}),
    Case("json-is-the-mamf-input", [*BASE, "--device", "c::3", "--mamf-json", "{tmp}/cpu.json",
                                    "--json", "{tmp}/cpu.json"], r"--json .*: is also an input",
         files={"cpu.json": MAMF_CPU}),
    Case("params-nan", ["--params", "nan", "--device", "a:1:1"], r"--params: 'nan' is not a finite number"),
    Case("efficiency-nan", [*BASE, "--device", "a:1:1", "--efficiency", "nan"],
         r"--efficiency: 'nan' is not a finite number"),
    Case("mamf-empty", [*BASE, "--device", "h::3", "--mamf-json", ""], r"--mamf-json: must not be empty"),
    Case("breakdown-missing", [*BASE, "--breakdown", "{tmp}/none.json", "--device", "a:1:1", "--mem-gbps", "1",
                               "--link-gbps", "1"], r"--breakdown .*none\.json: does not exist"),
    Case("breakdown-is-mamf", [*BASE, "--breakdown", "{tmp}/cpu.json", "--device", "a:1:1", "--mem-gbps", "1",
                               "--link-gbps", "1"], r"not a step_time_breakdown\.py result",
         files={"cpu.json": MAMF_CPU}),
    Case("breakdown-without-mem", [*BASE, "--breakdown", "{tmp}/b.json", "--device", "a:1:1", "--link-gbps", "1"],
         r"--device a: --breakdown needs --mem-gbps", files=BD_FILE),
    Case("breakdown-without-link", [*BASE, "--breakdown", "{tmp}/b.json", "--device", "a:1:1", "--mem-gbps", "1"],
         r"--device a: --breakdown needs --link-gbps", files=BD_FILE),
    Case("mem-without-breakdown", [*BASE, "--device", "a:1:1", "--mem-gbps", "3350"],
         r"--device a: --mem-gbps and --link-gbps only go with --breakdown"),
    Case("mem-zero", [*BASE, "--device", "a:1:1", "--mem-gbps", "0"], r"--mem-gbps: 0 must be > 0"),
    Case("json-is-the-breakdown", [*BASE, "--breakdown", "{tmp}/b.json", "--device", "a:1:1", "--mem-gbps", "1",
                                   "--link-gbps", "1", "--json", "{tmp}/b.json"], r"--json .*: is also an input",
         files=BD_FILE),
    Case("abbreviated-option", [*BASE, "--device", "a:1:1", "--eff", "0.5"], r"unrecognized arguments: --eff"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_careless_input_is_refused(case, tmp_path):
    check_refused(f"compute/{SCRIPT}", case, tmp_path)
