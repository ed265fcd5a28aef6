"""Tests of scripts/storage/checkpoint_interval.py: Young's and Daly's checkpoint intervals and the
first-order lost time, against values worked out by hand here and against the functions of
notebooks/storage/checkpoint_planning.py (the Storage chapter's model); the CLI's table and its
deterministic --json; the example output in the docstring and the chapter; and careless inputs. Everything runs
in-process except the CLI and bad-input cases."""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import threading

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO, clean_env, import_script

SCRIPT = "checkpoint_interval.py"
PATH = REPO / "scripts" / "storage" / SCRIPT
NOTEBOOK = REPO / "notebooks" / "storage" / "checkpoint_planning.py"
HOUR = 3600.0


@pytest.fixture(scope="module")
def ci():
    return import_script(PATH)


@pytest.fixture(scope="module")
def nb():
    """The notebook's own functions (their source, taken from the .py by name and run with
    math alone: the notebook itself needs matplotlib and reads the book's results)."""
    tree = ast.parse(NOTEBOOK.read_text(encoding="utf-8"))
    wanted = {"checkpoint_bytes", "save_seconds", "young_interval", "daly_interval", "lost_fraction"}
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    assert {node.name for node in found} == wanted
    namespace = {"math": math}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(NOTEBOOK), "exec"), namespace)
    return namespace


def run_cli(args, cwd=REPO, **kwargs):
    return subprocess.run([sys.executable, str(PATH), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=60, **kwargs)


# ---------------------------------------------------------------- hand-computed values

def test_young_and_daly_by_hand(ci):
    # delta = 1 s, M = 2 h = 7200 s: Young = sqrt(2 x 1 x 7200) = sqrt(14400) = 120 s.
    # Daly: delta / 2M = 1/14400, whose root is 1/120, and delta / 18M = 1/129600, so
    # 120 x (1 + 1/360 + 1/129600) - 1 = 120 + 1/3 + 1/1080 - 1 = 119.334259259... s.
    assert ci.young_interval(1.0, 7200.0) == pytest.approx(120.0, rel=1e-15)
    assert ci.daly_interval(1.0, 7200.0) == pytest.approx(119 + 1 / 3 + 1 / 1080, rel=1e-14)
    # delta = 50 s, M = 100 s: Young = sqrt(10000) = 100 s; delta/2M = 1/4, root 1/2, delta/18M =
    # 1/36: Daly = 100 x (1 + 1/6 + 1/36) - 50 = 100 x 43/36 - 50 = 625/9 = 69.44 s.
    assert ci.young_interval(50.0, 100.0) == pytest.approx(100.0, rel=1e-15)
    assert ci.daly_interval(50.0, 100.0) == pytest.approx(625 / 9, rel=1e-14)
    # delta >= 2M: Daly checkpoints once per MTBF
    assert ci.daly_interval(200.0, 100.0) == 100.0
    assert ci.daly_interval(1e6, 100.0) == 100.0


def test_lost_fraction_by_hand(ci):
    # tau = 120 s, delta = 1 s, M = 7200 s, R = 600 s:
    # 1/120 + 120/14400 + 600/7200 = 1/120 + 1/120 + 1/12 = 0.1 exactly.
    parts = ci.lost_fraction(120.0, 1.0, 7200.0, 600.0)
    assert parts["checkpoint"] == pytest.approx(1 / 120)
    assert parts["rework"] == pytest.approx(1 / 120)
    assert parts["restart"] == pytest.approx(1 / 12)
    assert parts["total"] == pytest.approx(0.1)
    assert ci.lost_fraction(120.0, 1.0, 7200.0)["restart"] == 0


def test_book_worked_example_by_hand(ci):
    # The Storage chapter's example: 70e9 parameters x 14 bytes = 980 GB; at 50 GBps, 19.6 s;
    # 6,335 node-hours / 128 nodes = 49.49 h = 178,171.875 s; Young = sqrt(2 x 19.6 x 178171.875)
    # = sqrt(6,984,337.5) = 2,642.8 s ("about 44 minutes"), Daly within a minute of it; the loss
    # 19.6/2642.8 + 2642.8/356343.75 = 0.742 % + 0.742 % ("about 1.5 %"), + 600/178171.875 =
    # 0.337 %.
    r = ci.plan(ci.checkpoint_bytes(70e9), 50.0, ci.job_mtbf_seconds(6335.0, 128), restart_s=600.0)
    assert r["checkpoint_bytes"] == pytest.approx(980e9)
    assert r["write_s"] == r["blocking_s"] == pytest.approx(19.6)
    assert r["job_mtbf_s"] == pytest.approx(178_171.875, rel=1e-15)
    assert r["young_interval_s"] == pytest.approx(math.sqrt(6_984_337.5), rel=1e-12)
    assert r["young_interval_s"] / 60 == pytest.approx(44, abs=0.1)
    assert abs(r["daly_interval_s"] - r["young_interval_s"]) < 60
    assert r["young_lost_fraction"] - r["lost_restart_fraction"] == pytest.approx(
        2 * 19.6 / math.sqrt(6_984_337.5), rel=1e-12)
    assert r["lost_restart_fraction"] == pytest.approx(600 / 178_171.875)
    assert r["async_write_fits"] is None and r["first_order_ok"] is True
    assert r["young_interval_steps"] is None and r["daly_interval_steps"] is None


def test_async_save_blocks_for_the_snapshot_only(ci):
    # 5.67 TB at 200 GBps is a 28.35 s write; asynchronously only the 5 s copy blocks, so the
    # intervals use delta = 5 s, and the write (28.35 s) fits in the interval.
    nbytes = ci.checkpoint_bytes(405e9)
    sync = ci.plan(nbytes, 200.0, 11_000.0)
    asyn = ci.plan(nbytes, 200.0, 11_000.0, snapshot_s=5.0)
    assert sync["blocking_s"] == sync["write_s"] == asyn["write_s"] == pytest.approx(28.35)
    assert asyn["blocking_s"] == 5.0
    assert asyn["young_interval_s"] == pytest.approx(math.sqrt(2 * 5 * 11_000))
    assert asyn["async_write_fits"] is True
    # a write longer than the interval is flagged
    slow = ci.plan(nbytes, 1.0, 11_000.0, snapshot_s=5.0)
    assert slow["write_s"] > slow["daly_interval_s"] and slow["async_write_fits"] is False


def test_daly_is_positive_and_below_young_for_small_delta(ci):
    # With s = sqrt(delta/2M) < 1, Daly's interval is 2Ms(1 - s/3)^2: positive, and (for the
    # small s of real jobs) a little shorter than Young's 2Ms.
    for delta, m in ((1.0, 1e6), (19.6, 178_200.0), (300.0, 11_000.0), (99.0, 50.0), (1e-6, 1e9)):
        s = math.sqrt(delta / (2 * m))
        daly = ci.daly_interval(delta, m)
        assert daly == pytest.approx(2 * m * s * (1 - s / 3) ** 2, rel=1e-9)
        assert 0 < daly <= ci.young_interval(delta, m)


def test_young_minimises_the_first_order_loss(ci):
    delta, m, restart = 19.6, 178_200.0, 600.0
    best = ci.young_interval(delta, m)
    at_best = ci.lost_fraction(best, delta, m, restart)["total"]
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert ci.lost_fraction(best * factor, delta, m, restart)["total"] > at_best
    # half or twice the optimum: 1.25 x the saves-and-rework loss (the book's "25 % more")
    for factor in (0.5, 2.0):
        loss = ci.lost_fraction(best * factor, delta, m)["total"]
        assert loss == pytest.approx(1.25 * ci.lost_fraction(best, delta, m)["total"], rel=1e-12)


def test_job_mtbf_adds_up_independent_failure_rates(ci):
    assert ci.job_mtbf_seconds(1000.0, 1) == 1000 * HOUR
    assert ci.job_mtbf_seconds(1000.0, 8) == pytest.approx(125 * HOUR)
    # the default: the Llama 3 rate, 16,384 GPUs x 54 days x 24 h / 419 interruptions per GPU,
    # for 8 GPUs a node, rounded to the hour
    assert ci.DEFAULT_NODE_MTBF_HOURS == round(16_384 * 54 * 24 / 419 / 8)
    assert ci.DEFAULT_NODE_MTBF_HOURS / ci.DEFAULT_NODES == pytest.approx(49.5, abs=0.05)


def test_steps_round_to_the_nearest_and_never_below_one(ci):
    r = ci.plan(100e9, 50.0, 7200.0, snapshot_s=1.0, step_time_s=7.0)  # Young = 120 s
    assert r["young_interval_steps"] == 17  # 120 / 7 = 17.1
    assert r["daly_interval_steps"] == round(r["daly_interval_s"] / 7.0)
    assert ci.plan(100e9, 50.0, 7200.0, snapshot_s=1.0, step_time_s=1e5)["daly_interval_steps"] == 1


@pytest.mark.parametrize("call,match", [
    (lambda ci: ci.young_interval(float("nan"), 1.0), "delta_s must be finite"),
    (lambda ci: ci.daly_interval(1.0, float("inf")), "mtbf_s must be finite"),
    (lambda ci: ci.daly_interval(0.0, 1.0), "delta_s must be positive"),
    (lambda ci: ci.lost_fraction(10.0, 1.0, 100.0, -1.0), "restart_s must be >= 0"),
    (lambda ci: ci.checkpoint_bytes(-7e9), "params must be positive"),
    (lambda ci: ci.checkpoint_bytes(7e9, "14"), "bytes_per_param must be a number"),
    (lambda ci: ci.write_seconds(1e9, 0), "write_GBps must be positive"),
    (lambda ci: ci.job_mtbf_seconds(100.0, 0), "nodes must be a whole number >= 1"),
    (lambda ci: ci.job_mtbf_seconds(100.0, 2.5), "nodes must be a whole number >= 1"),
    (lambda ci: ci.plan(1e9, 1.0, 100.0, snapshot_s=True), "snapshot_s must be a number"),
])
def test_functions_refuse_bad_values(ci, call, match):
    with pytest.raises(ValueError, match=match):
        call(ci)


# ---------------------------------------------------------------- the notebook's model

@pytest.mark.parametrize("delta,mtbf,restart", [
    (19.6, 178_200.0, 600.0), (2.0, 11_138.0, 0.0), (196.0, 3600.0, 1200.0), (150.0, 100.0, 60.0),
    (250.0, 100.0, 0.0), (1e-3, 1e8, 10.0)])
def test_same_formulas_as_the_notebook(ci, nb, delta, mtbf, restart):
    assert ci.young_interval(delta, mtbf) == pytest.approx(nb["young_interval"](delta, mtbf), rel=1e-13)
    assert ci.daly_interval(delta, mtbf) == pytest.approx(nb["daly_interval"](delta, mtbf), rel=1e-13)
    for tau in (ci.young_interval(delta, mtbf), ci.daly_interval(delta, mtbf), 1234.5):
        assert ci.lost_fraction(tau, delta, mtbf, restart)["total"] == pytest.approx(
            nb["lost_fraction"](tau, delta, mtbf, restart), rel=1e-13)


@pytest.mark.parametrize("params,bpp,gbps", [(70e9, 14, 50), (7e9, 12, 5), (405e9, 2, 100)])
def test_same_size_and_save_time_as_the_notebook(ci, nb, params, bpp, gbps):
    nbytes = ci.checkpoint_bytes(params, bpp)
    assert nbytes == nb["checkpoint_bytes"](params, bpp)
    assert ci.write_seconds(nbytes, gbps) == pytest.approx(nb["save_seconds"](nbytes, gbps), rel=1e-15)


def test_the_notebooks_worked_example(ci, nb):
    """The notebook's 70B example on 1,024 GPUs at the Llama 3 rate: the CLI, given the job's
    MTBF in hours, reproduces its delta, Young, Daly and lost fraction."""
    mtbf_h = 16_384 * 54 * 24 / 419 / 1024
    res = run_cli(["--job-mtbf-hours", repr(mtbf_h), "--restart-min", "0", "--json", "-"])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    delta = nb["save_seconds"](nb["checkpoint_bytes"](70e9, 14), 50)
    m = mtbf_h * HOUR
    assert doc["blocking_s"] == pytest.approx(delta, rel=1e-15)
    assert doc["young_interval_s"] == pytest.approx(nb["young_interval"](delta, m), rel=1e-13)
    assert doc["daly_interval_s"] == pytest.approx(nb["daly_interval"](delta, m), rel=1e-13)
    assert doc["lost_fraction"] == pytest.approx(
        nb["lost_fraction"](nb["daly_interval"](delta, m), delta, m), rel=1e-13)


# ---------------------------------------------------------------- the command line

def test_defaults_are_the_books_example_and_json_has_every_field(tmp_path):
    out = tmp_path / "plan.json"
    res = run_cli(["--json", str(out)])
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert list(doc)[:3] == ["tool", "schema_version", "inputs"]
    assert doc["tool"] == "checkpoint_interval" and doc["schema_version"] == 1
    assert doc["inputs"] == {
        "params": 70e9, "bytes_per_param": 14.0, "checkpoint_gb": None, "write_GBps": 50.0,
        "async_save": False, "snapshot_s": None, "node_mtbf_hours": 6335.0, "nodes": 128,
        "job_mtbf_hours": None, "restart_min": 10.0, "step_time_s": None}
    assert set(doc) - {"tool", "schema_version", "inputs"} == {
        "checkpoint_bytes", "write_s", "blocking_s", "job_mtbf_s", "restart_s",
        "young_interval_s", "daly_interval_s", "young_interval_steps", "daly_interval_steps",
        "young_lost_fraction", "lost_fraction", "lost_checkpoint_fraction",
        "lost_rework_fraction", "lost_restart_fraction", "lost_fraction_complete", "async_write_fits",
        "first_order_ok"}
    assert doc["checkpoint_bytes"] == 980e9 and doc["job_mtbf_s"] == 178_171.875
    assert doc["restart_s"] == 600.0
    # the table shows the same numbers, in the units a reader wants
    assert f"{doc['daly_interval_s'] / 60:.1f} min" in res.stdout
    assert f"{doc['daly_interval_s']:,.0f} s" in res.stdout
    assert f"{100 * doc['lost_fraction']:.2f} %" in res.stdout
    assert res.stdout.splitlines()[0].startswith("# checkpoint_interval.py")
    assert res.stdout.rstrip().endswith(f"# wrote {out}")


def test_json_is_deterministic_and_the_same_in_process(ci, tmp_path, capsys):
    """Nothing in the JSON varies between runs, folders or ways of running it (the calculator
    page compares it field by field with the command line)."""
    args = ["--params", "405e9", "--write-GBps", "200", "--nodes", "2048", "--async-save",
            "--snapshot-s", "5", "--step-time-s", "4"]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli([*args, "--json", str(first)]).returncode == 0
    assert run_cli([*args, "--json", str(second)], cwd=tmp_path).returncode == 0
    assert ci.main([*args, "--json", "-"]) == 0
    printed = capsys.readouterr().out
    assert first.read_bytes() == second.read_bytes() == printed.encode()
    doc = json.loads(printed)
    assert doc["inputs"]["snapshot_s"] == 5.0 and doc["inputs"]["nodes"] == 2048
    assert doc["blocking_s"] == 5.0 and doc["async_write_fits"] is True
    assert doc["daly_interval_steps"] == round(doc["daly_interval_s"] / 4)
    assert not {"date_utc", "command", "versions", "device", "host"} & set(doc)


def test_json_dash_prints_only_the_json():
    res = run_cli(["--checkpoint-gb", "100", "--job-mtbf-hours", "2", "--json", "-"])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["inputs"]["params"] is None and doc["inputs"]["nodes"] is None
    assert doc["checkpoint_bytes"] == 1e11 and doc["write_s"] == 2.0 and doc["job_mtbf_s"] == 7200.0
    # synchronous: delta = the 2 s write; Young = sqrt(2 x 2 x 7200) = sqrt(28800) = 169.7 s
    assert doc["blocking_s"] == 2.0 and doc["young_interval_s"] == pytest.approx(math.sqrt(28_800))


def test_interval_too_long_for_the_model_is_flagged():
    res = run_cli(["--job-mtbf-hours", "0.01"])
    assert res.returncode == 0, res.stderr
    assert "# warning: the interval and the save are not short against the MTBF" in res.stdout
    slow = run_cli(["--async-save", "--write-GBps", "0.1", "--job-mtbf-hours", "3"])
    assert "# warning: the background write (2.72 h) takes longer than the interval" in slow.stdout


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_chapter_example_output_is_real(lang):
    """Every ``$ python scripts/storage/checkpoint_interval.py ...`` line of the Storage chapter's
    text blocks is followed by exactly what that command prints (the docstring's short example
    is cut from the first)."""
    text = (REPO / "book" / lang / "storage" / "index.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^\$ python (scripts/storage/checkpoint_interval\.py[^\n]*)\n((?:[^$`][^\n]*\n)+)",
                        text, flags=re.M)
    assert len(blocks) == 2
    for command, expected in blocks:
        argv = command.split()[1:]
        res = run_cli(argv)
        assert res.returncode == 0, res.stderr
        assert res.stdout == expected, f"chapter example of {command!r} differs from the real output"


def test_docstring_example_lines_are_real(ci):
    """The docstring's short example is lines of the real output of the defaults, in order."""
    text = ci.__doc__
    shown = [line[4:] for line in text[text.index("Example output"):text.index("Exit status")].splitlines()
             if line.startswith("    ")]
    out = run_cli([]).stdout.splitlines()
    assert shown and all(line in out for line in shown)
    assert [out.index(line) for line in shown] == sorted(out.index(line) for line in shown)


def test_import_has_no_side_effects_and_only_the_standard_library():
    """The calculator page imports the module under Pyodide: it must not print, start threads
    or need anything outside the standard library."""
    before = threading.active_count()
    res = subprocess.run([sys.executable, "-c", "import importlib.util, sys, threading\n"
                          f"spec = importlib.util.spec_from_file_location('m', {str(PATH)!r})\n"
                          "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
                          "assert threading.active_count() == 1\n"],
                         capture_output=True, text=True, timeout=60, env=clean_env())
    assert res.returncode == 0 and res.stdout == res.stderr == "", res.stderr
    assert threading.active_count() == before
    tree = ast.parse(PATH.read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_json_is_written_even_when_the_reader_closes_stdout(tmp_path):
    out = tmp_path / "plan.json"
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is printed
    with os.fdopen(write_end, "w") as closed_pipe:
        res = subprocess.run([sys.executable, str(PATH), "--json", str(out)], cwd=tmp_path,
                             env=clean_env(), stdout=closed_pipe, stderr=subprocess.PIPE,
                             timeout=60)
    # The reader wanted nothing more (`| head -0`): no error, as `cat` would, and the JSON is whole.
    assert (res.returncode, res.stderr) == (0, b"")
    assert json.loads(out.read_text())["tool"] == "checkpoint_interval"


def test_json_is_written_atomically(ci, tmp_path, monkeypatch):
    """A failure while writing leaves the old file whole and no temporary file behind."""
    out = tmp_path / "plan.json"
    out.write_text("old\n")

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(ci.os, "replace", broken)
    with pytest.raises(ci.ScriptError, match=rf"^{re.escape(str(out))}: cannot write it \(disk full\)"):
        ci.main(["--json", str(out)])
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    monkeypatch.undo()
    assert ci.main(["--json", str(out)]) == 0
    assert json.loads(out.read_text())["inputs"]["nodes"] == 128


BAD_INPUT = [
    Case("params-nan", ["--params", "nan"], "--params: 'nan' is not a finite number"),
    Case("params-inf", ["--params", "inf"], "--params: 'inf' is not a finite number"),
    Case("params-zero", ["--params", "0"], "--params: 0 must be > 0"),
    Case("params-negative", ["--params=-7e9"], "--params: -7e9 must be > 0"),
    Case("params-text", ["--params", "70B"], "--params: '70B' is not a number"),
    Case("params-huge", ["--params", "1e30"], "--params: 1e30 must be <= 1e\\+16"),
    Case("bytes-per-param-zero", ["--bytes-per-param", "0"], "--bytes-per-param: 0 must be > 0"),
    Case("bytes-per-param-nan", ["--bytes-per-param", "nan"], "--bytes-per-param: 'nan' is not a finite"),
    Case("checkpoint-gb-negative", ["--checkpoint-gb=-1"], "--checkpoint-gb: -1 must be > 0"),
    Case("checkpoint-gb-inf", ["--checkpoint-gb", "inf"], "--checkpoint-gb: 'inf' is not a finite"),
    Case("checkpoint-gb-with-params", ["--checkpoint-gb", "980", "--params", "70e9"],
         "--checkpoint-gb and --params both give the checkpoint size"),
    Case("checkpoint-gb-with-bytes", ["--checkpoint-gb", "980", "--bytes-per-param", "12"],
         "--checkpoint-gb and --bytes-per-param both give the checkpoint size"),
    Case("write-nan", ["--write-GBps", "nan"], "--write-GBps: 'nan' is not a finite number"),
    Case("write-zero", ["--write-GBps", "0"], "--write-GBps: 0 must be > 0"),
    Case("write-negative", ["--write-GBps=-50"], "--write-GBps: -50 must be > 0"),
    Case("snapshot-zero", ["--async-save", "--snapshot-s", "0"], "--snapshot-s: 0 must be > 0"),
    Case("snapshot-inf", ["--async-save", "--snapshot-s", "inf"], "--snapshot-s: 'inf' is not a finite"),
    Case("snapshot-without-async", ["--snapshot-s", "2"], "--snapshot-s 2 only applies with --async-save"),
    Case("node-mtbf-nan", ["--node-mtbf-hours", "nan"], "--node-mtbf-hours: 'nan' is not a finite"),
    Case("node-mtbf-zero", ["--node-mtbf-hours", "0"], "--node-mtbf-hours: 0 must be > 0"),
    Case("nodes-zero", ["--nodes", "0"], "--nodes: 0 must be >= 1"),
    Case("nodes-negative", ["--nodes=-8"], "--nodes: -8 must be >= 1"),
    Case("nodes-float", ["--nodes", "2.5"], "--nodes: '2.5' is not an integer"),
    Case("nodes-huge", ["--nodes", "1" + "0" * 400], "--nodes: .* must be <= 1e\\+08"),
    Case("job-mtbf-inf", ["--job-mtbf-hours", "inf"], "--job-mtbf-hours: 'inf' is not a finite"),
    Case("job-mtbf-negative", ["--job-mtbf-hours=-3"], "--job-mtbf-hours: -3 must be > 0"),
    Case("both-mtbf", ["--job-mtbf-hours", "3", "--node-mtbf-hours", "6000"],
         "--job-mtbf-hours and --node-mtbf-hours are mutually exclusive"),
    Case("job-mtbf-with-nodes", ["--job-mtbf-hours", "3", "--nodes", "128"],
         "--job-mtbf-hours and --nodes are mutually exclusive"),
    Case("restart-negative", ["--restart-min=-1"], "--restart-min: -1 must be >= 0"),
    Case("restart-nan", ["--restart-min", "nan"], "--restart-min: 'nan' is not a finite number"),
    Case("step-time-zero", ["--step-time-s", "0"], "--step-time-s: 0 must be > 0"),
    Case("step-time-inf", ["--step-time-s", "inf"], "--step-time-s: 'inf' is not a finite number"),
    Case("json-over-the-script", ["--json", "{script}"], "is also an input; write the result elsewhere"),
    Case("unknown-option", ["--interval", "5"], "unrecognized arguments: --interval 5"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input_is_refused_in_one_line(case, tmp_path):
    check_refused(f"storage/{SCRIPT}", case, tmp_path)


def test_bad_input_is_refused_before_writing(tmp_path):
    """A usage error after a valid --json leaves no file behind."""
    out = tmp_path / "plan.json"
    res = run_cli(["--json", str(out), "--nodes", "0"])
    assert res.returncode == 2 and not out.exists() and "Traceback" not in res.stderr


def test_a_save_longer_than_the_mtbf_gets_no_recommendation_and_no_share_over_100_percent(ci, capsys):
    """One save of 3.15 h against a job MTBF of 1 h: the first-order shares pass 100 % (delta/tau
    alone is 315 %); the script shows Daly's complete model instead, recommends no interval and
    says why."""
    r = ci.plan(5.67e12, 0.5, 3600, restart_s=600)
    assert not r["first_order_ok"] and r["lost_checkpoint_fraction"] > 3
    # Daly 2006, complete model: 1 - tau / (M e^(R/M) (e^((tau + delta)/M) - 1))
    tau, delta, m, rr = r["daly_interval_s"], r["blocking_s"], 3600, 600
    expected = 1 - tau / (m * math.exp(rr / m) * math.expm1((tau + delta) / m))
    assert r["lost_fraction_complete"] == pytest.approx(expected)
    assert 0.9 < r["lost_fraction_complete"] < 1
    assert ci.main(["--params", "405e9", "--write-GBps", "0.5", "--job-mtbf-hours", "1"]) == 0
    out = capsys.readouterr().out
    assert "use this one" not in out and "no interval recommended" in out
    assert "# time lost, Daly's complete model" in out and "first order (Young 1974)" not in out
    assert all(float(p) <= 100 for p in re.findall(r"([\d.]+) %", out)), out


def test_where_the_first_order_model_holds_the_complete_model_agrees(ci):
    r = ci.plan(5.67e12, 200, 3600 * 3, restart_s=600)
    assert r["first_order_ok"]
    assert r["lost_fraction_complete"] == pytest.approx(r["lost_fraction"], rel=0.15)
