"""Command-line behaviour shared by the debugging and instabilities scripts: ``--help`` works
without a GPU and without importing torch (so it is instant on a login node), and the GPU path of
the hanging example (NCCL) ends by its timeout too."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.bad_input import Case, check_refused
from tests.launchers import RANKS, REPO, clean_env

SCRIPTS = ["scripts/debug/underflow_overflow_detector.py", "scripts/debug/hanging_collective.py",
           "scripts/debug/print_rank_ordered.py", "scripts/debug/rank_line_tracer.py",
           "scripts/debug/make_tiny_model.py", "scripts/debug/shrink_model.py",
           "scripts/debug/trace_summary.py", "scripts/debug/bisect_judge.py",
           "scripts/debug/strace_summary.py",
           "scripts/instabilities/loss_spike_experiment.py"]

# Runs the script's main(["--help"]) in a fresh interpreter, then reports whether torch got imported.
PROBE = """
import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("EXIT", code, "TORCH", "torch" in sys.modules)
"""


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_without_gpu_or_torch(script):
    res = subprocess.run([sys.executable, "-c", PROBE, str(REPO / script)], cwd=REPO,
                         env=clean_env({"CUDA_VISIBLE_DEVICES": ""}), capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout
    assert res.stdout.strip().endswith("EXIT 0 TORCH False")


@RANKS
@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_nccl_mismatch_ends_by_timeout(launch):
    # With NCCL, PyTorch's watchdog enforces the timeout (it may tear the process down before the
    # Python exception reaches our message); either way the job must end, non-zero, and the
    # output must name the collective each rank entered.
    res = launch.torchrun("hanging_collective.py", ["--backend", "nccl", "--timeout-s", "10",
                                                    "--dump-margin-s", "20"], timeout=120)
    assert res.returncode != 0
    assert "entering all_reduce #2" in res.stdout and "entering broadcast #2" in res.stdout


TRACER_BAD_INPUT = [
    Case("no-out", ["x.py"], "give --out DIR and a script to run", files={"x.py": ""}),
    Case("match-empty", ["--out", "tr", "--match", "", "x.py"], "--match: must not be empty",
         files={"x.py": ""}),
    Case("out-empty", ["--out", "", "x.py"], "--out: must not be empty", files={"x.py": ""}),
    Case("out-is-file", ["--out", "x.py", "x.py"], "x.py is a file, not a folder",
         files={"x.py": ""}),
    Case("out-unwritable", ["--out", "/proc/tr", "x.py"], "--out /proc/tr: cannot write there",
         files={"x.py": ""}),
    Case("script-missing", ["--out", "tr", "nope.py"], "no such script 'nope.py'"),
    Case("every-negative", ["--out", "tr", "--every", "-1", "x.py"], "--every: -1 must be >= 0",
         files={"x.py": ""}),
    Case("every-nan", ["--out", "tr", "--every", "nan", "x.py"], "--every: 'nan' is not a finite",
         files={"x.py": ""}),
    Case("show-missing", ["--show", "nowhere"], "--show: no such directory 'nowhere'"),
    # a trace file this tracer did not write: name it instead of "ValueError: invalid literal"
    Case("show-foreign-trace", ["--show", "d"], r"d/rank0.trace: last line 'hello world' is not "
         "'file:line function'", status=1, files={"d/rank0.trace": "hello world\n"}),
    # the traced script's own failure: one line naming it, its traceback only with --debug
    Case("script-raises", ["--out", "tr", "--", "x.py"],
         r"x.py failed: ZeroDivisionError: division by zero \(--debug", status=1,
         files={"x.py": "1 / 0\n"}),
    Case("show-empty-folder", ["--show", "d"], "no rank<R>.trace files", status=1,
         files={"d/other.txt": ""}),
    Case("env-rank-text", ["--out", "tr", "x.py"], "RANK='abc' is not an integer",
         env={"RANK": "abc"}, files={"x.py": ""}),
]


@pytest.mark.parametrize("case", [c.param() for c in TRACER_BAD_INPUT])
def test_rank_line_tracer_bad_input(case, tmp_path):
    check_refused("debug/rank_line_tracer.py", case, tmp_path)


def test_rank_line_tracer_keeps_the_script_status_and_traces_its_lines(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import sys\nx = 1\nsys.exit(7)\n")
    res = subprocess.run([sys.executable, str(REPO / "scripts/debug/rank_line_tracer.py"), "--out",
                          str(tmp_path / "tr"), "--", str(script)], env=clean_env({"RANK": "3"}),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 7, res.stderr
    assert "error:" not in res.stderr
    lines = (tmp_path / "tr" / "rank3.trace").read_text().splitlines()
    assert [line.rsplit(":", 1)[1] for line in lines] == ["1 <module>", "2 <module>", "3 <module>"]
