"""Tests of scripts/debug/stack_dumps.py on one host: a deliberately hung 4-rank torchrun job (gloo,
CPU) in which ranks 0-2 wait in a barrier and rank 3 is held in data loading; the script must
group ranks 0-2, name rank 3 as the odd one out (exit 3), with Python frames and with --native,
found from torchrun's pid and by --match; once the job ended, the same call says so in one line
(exit 1). Then the careless inputs. The SLURM side is tests/orchestration/test_slurm_stack_dumps.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import preloaded
from tests.bad_input import Case, check_refused
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, import_script, require_ranks

pytestmark = RANKS  # the job test starts 4 ranks

SCRIPT = REPO / "scripts" / "debug" / "stack_dumps.py"
FIXTURE = REPO / "tests" / "debug" / "fixtures" / "hung_ranks.py"


def wait_ready(folder, n: int, limit_s: float, alive) -> None:
    """Until ``n`` ranks touched their file in ``folder`` (then a moment, to enter their wait)."""
    end = time.monotonic() + limit_s
    while len(list(folder.glob("rank*"))) < n:
        assert alive(), "the job ended before its ranks were ready"
        assert time.monotonic() < end, f"only {len(list(folder.glob('rank*')))} of {n} ranks ready after {limit_s} s"
        time.sleep(0.1)
    time.sleep(0.3)


@pytest.mark.slow  # 4 ranks importing torch: ~4 CPU-s at least
def test_hung_job_on_one_host_names_the_odd_rank(launch, tmp_path):
    require_ranks("4 ranks under torchrun")
    ready, release, out = tmp_path / "ready", tmp_path / "release", tmp_path / "stacks.json"
    ready.mkdir()
    job = preloaded.start("-m torch.distributed.run", [
        "--standalone", "--nproc-per-node", "4", FIXTURE, "--ready-dir", ready, "--release", release,
        "--hold-s", "60"], REPO, clean_env())
    try:
        wait_ready(ready, 4, 60, job.process.is_alive)
        # From torchrun's pid: its children are the ranks (torchrun itself sets no RANK: left out).
        res = launch.python("stack_dumps.py", ["--pid", str(job.pid), "--json", str(out)], timeout=60)
        assert res.returncode == 3, res.output
        assert "4 ranks dumped (1 host): 2 different stacks" in res.stdout, res.output
        assert "3 ranks (ranks 0-2, host " in res.stdout and "1 rank (rank 3, host " in res.stdout, res.output
        finding = [line for line in res.stdout.splitlines() if line.startswith("stack_dumps.py: finding: ")]
        assert len(finding) == 1 and "rank 3 (host " in finding[0], res.output
        assert "is in load_next_batch (hung_ranks.py:" in finding[0], finding
        assert "the other 3 ranks are in barrier (torch/distributed/distributed_c10d.py:" in finding[0], finding
        doc = json.loads(out.read_text())
        assert [g["ranks"] for g in doc["groups"]] == [[0, 1, 2], [3]]
        assert doc["exit_status"] == 3 and doc["finding"] in finding[0] and doc["benchmark"] == "stack_dumps"
        main_frames = [t["frames"] for t in doc["groups"][0]["threads"] if t["name"] == "MainThread"][0]
        assert any(f.startswith("train_step (hung_ranks.py:") for f in main_frames), main_frames
        pids = {r["pid"] for r in doc["results"]}
        assert len(pids) == 4 and job.pid not in pids
        # By command line, with native frames: gloo's wait shows inside libtorch.
        res = launch.python("stack_dumps.py", ["--match", str(ready), "--native"], timeout=60)
        assert res.returncode == 3, res.output
        assert "3 ranks (ranks 0-2, host " in res.stdout and "(libtorch_cpu.so)" in res.stdout, res.output
        assert "rank 3 (host " in res.stdout.splitlines()[-1], res.output
    finally:
        release.touch()
        done = job.wait(60)
    assert done.returncode == 0, done.stderr[-2000:]
    # The job has ended: one clear line each way, exit 1.
    gone = launch.python("stack_dumps.py", ["--pid", str(job.pid)])
    assert gone.returncode == 1 and launch.error_lines(gone.stderr) == [
        f"stack_dumps.py: error: --pid {job.pid}: no such process (the job ended, or a typo)"], gone.output
    gone = launch.python("stack_dumps.py", ["--match", str(ready)])
    assert gone.returncode == 1 and "no Python process of a job found" in gone.stderr, gone.output


@ONE_PROCESS
def test_py_spy_looked_up_on_path_then_beside_python(tmp_path, monkeypatch):
    module = import_script(SCRIPT)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(module.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(module.ScriptError, match="py-spy not found on PATH nor beside this Python"):
        module.find_py_spy(None)
    spy = tmp_path / "py-spy"
    spy.write_text("#!/bin/sh\n")
    spy.chmod(0o755)
    assert module.find_py_spy(None) == str(spy)


@ONE_PROCESS
def test_grouping_without_rank_numbers_and_no_majority():
    module = import_script(SCRIPT)
    a = [{"name": "MainThread", "frames": ["wait (a.py:1)"]}]
    b = [{"name": "MainThread", "frames": ["0x? (libc.so.6)", "read (b.py:2)"]}]
    ranks = [{"rank": r, "host": "n1", "pid": 10 + r, "local_rank": None, "threads": t}
             for r, t in ((0, a), (1, b), (2, a), (3, b))]
    lines, doc, status = module.report(ranks, "")
    assert status == 3 and doc["finding"].startswith("no majority: the ranks are in 2 different places")
    assert "read (b.py:2)" in doc["finding"]  # the bare address is skipped
    lines, doc, status = module.report([{**ranks[0], "rank": None}, {**ranks[2], "rank": None}], "")
    assert status == 0 and doc["finding"] is None and lines[1] == "2 ranks (pid 10, pid 12, host n1):"


BAD_INPUT = [
    Case("no mode", [], r"one of the arguments --pid --match --slurm-job is required"),
    Case("two modes", ["--pid", "1", "--match", "x"], r"not allowed with argument"),
    Case("pid zero", ["--pid", "0"], r"--pid: .*must be >= 1"),
    Case("pid not a number", ["--pid", "12a"], r"'12a' is not an integer"),
    Case("pid gone", ["--pid", "99999999"], r"--pid 99999999: no such process", status=1),
    Case("match empty", ["--match", " "], r"--match: must not be empty"),
    Case("match nothing", ["--match", "{tmp}/no-such-job"], r"no Python process of a job found", status=1),
    Case("not a job id", ["--slurm-job", "train.sh"], r"--slurm-job 'train.sh': not a SLURM job id"),
    Case("job id and more", ["--slurm-job", "12;rm"], r"not a SLURM job id"),
    Case("no slurm here", ["--slurm-job", "12"], r"--slurm-job: squeue not found on PATH", status=1,
         env={"PATH": "{tmp}/empty"}),
    Case("py-spy missing", ["--pid", "1", "--py-spy", "{tmp}/no-py-spy"], r"--py-spy .*: not an executable file"),
    Case("py-spy not executable", ["--pid", "1", "--py-spy", "{tmp}/py-spy"], r"not an executable file",
         files={"py-spy": "#!/bin/sh\n"}),
    Case("json onto the script", ["--pid", "99999999", "--json", "{script}"], r"--json .*: is also an input"),
    Case("json onto py-spy", ["--pid", "99999999", "--py-spy", "{tmp}/spy", "--json", "{tmp}/spy"],
         r"--json .*: is also an input", files={"spy": "not run"}),
    Case("json a folder", ["--pid", "99999999", "--json", "{tmp}"], r"--json .*: is a folder"),
    Case("timeout zero", ["--pid", "1", "--timeout-s", "0"], r"--timeout-s: .*must be > 0"),
    Case("timeout nan", ["--pid", "1", "--timeout-s", "nan"], r"not a finite number"),
]


@ONE_PROCESS
@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("debug/stack_dumps.py", case, tmp_path)


@ONE_PROCESS
def test_node_answers_survive_srun_cutting_long_lines(capsys):
    # srun --label cut a 20,000-character line of a task into 1,024-character pieces here: the
    # answers travel as short numbered lines, interleaved between nodes, and a lost piece is named.
    module = import_script(SCRIPT)
    big = {"host": "n1", "ranks": [{"rank": r, "frames": [f"f{r}_{i} (x.py:{i})" for i in range(300)]}
                                   for r in range(8)]}
    module.send_answer(big)
    module.send_answer({"host": "n2", "ranks": []})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 2 and all(len(line) < 1000 for line in lines)
    labelled = [f"{i % 2}: {line}" for i, line in enumerate(reversed(lines))]
    assert sorted(module.read_answers("\n".join(labelled)), key=lambda a: a["host"]) == [big, {"host": "n2",
                                                                                           "ranks": []}]
    torn = module.read_answers("\n".join(labelled[:-1]))  # n1's first piece lost
    assert {"host": "n1", "ranks": [], "error": "its answer came back incomplete"} in torn


@ONE_PROCESS
def test_help_needs_neither_py_spy_nor_torch():
    res = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = [sys.argv[1], '--help']\n"
                          "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
                          "except SystemExit as exc:\n    print('EXIT', exc.code, 'torch' in sys.modules)",
                          str(SCRIPT)], env=clean_env({"PATH": "/nonexistent"}), capture_output=True, text=True,
                         timeout=30)
    assert "usage: stack_dumps.py" in res.stdout and res.stdout.strip().endswith("EXIT 0 False"), res


@ONE_PROCESS
def test_a_py_spy_that_hangs_is_killed_with_its_children(launch, tmp_path):
    spy = tmp_path / "py-spy"
    spy.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path}/child\nwait\n")
    spy.chmod(0o755)
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        start = time.monotonic()
        res = launch.python("stack_dumps.py", ["--pid", str(target.pid), "--py-spy", str(spy), "--timeout-s", "0.5"],
                            fresh=True)
        assert time.monotonic() - start < 10, res.output
    finally:
        target.kill()
        target.wait()
    assert res.returncode == 1 and launch.error_lines(res.stderr) == [
        "stack_dumps.py: error: none of the 1 ranks could be dumped: py-spy did not answer within --timeout-s 0.5 s"]
    child = int((tmp_path / "child").read_text())
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1].startswith("Z"), "py-spy's child outlived it"
