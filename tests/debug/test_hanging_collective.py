"""Tests of scripts/debug/hanging_collective.py and scripts/debug/rank_line_tracer.py, run for real
with torchrun (2 CPU ranks, gloo).

The mismatch test is the chapter's diagnosis recipe, automated: while the job hangs, every rank's
stack is dumped with py-spy and the line tracer says which line each rank is on; then the job must
end by its own timeout, each rank naming the collective it was stuck in. The whole test is bounded
(the launch is killed if it outlives its limit).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, import_script, require_ranks

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPTS = REPO / "scripts" / "debug"
TIMEOUT_S = 8            # the job's process-group timeout
ENTER = re.compile(r"rank (\d+) pid (\d+): entering (\w+) #2")


def py_spy() -> str | None:
    """The py-spy next to this Python (the venv pins it), else on PATH; CI must have it."""
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found and os.environ.get("CI"):
        pytest.fail("py-spy is pinned in requirements.txt but not installed")
    return found


def start_job(args: list[str]) -> subprocess.Popen:
    require_ranks("2 ranks under torchrun")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *args]
    return subprocess.Popen(cmd, cwd=REPO, env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_ranks(proc: subprocess.Popen, n: int, limit: float) -> tuple[dict, list[str]]:
    """Read stdout until ``n`` ranks printed their 'entering <collective> #2' line."""
    seen, lines, end = {}, [], time.monotonic() + limit
    while len(seen) < n and time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = ENTER.search(line)
        if m:
            seen[int(m[1])] = (int(m[2]), m[3])
    return seen, lines


def finish(proc: subprocess.Popen, limit: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job outlived its own timeout (hang not ended)\n{out}\n{err}")


def test_mismatch_is_diagnosed_and_ends_by_timeout_naming_the_collective(tmp_path):
    traces, fr = tmp_path / "traces", tmp_path / "fr"
    start = time.monotonic()
    proc = start_job([str(SCRIPTS / "rank_line_tracer.py"), "--out", str(traces), "--",
                      str(SCRIPTS / "hanging_collective.py"), "--timeout-s", str(TIMEOUT_S),
                      "--fr-dump", str(fr)])
    seen, head = wait_for_ranks(proc, 2, limit=45)
    if len(seen) < 2:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"ranks never reached the second collective:\n{''.join(head)}{out}\n{err}")
    assert seen[0][1] == "all_reduce" and seen[1][1] == "broadcast"

    # 1. Which line is each rank on? The tracer's last line per rank is the collective's call.
    #    (Polled: the 'entering' line is printed just before the call.)
    rows, deadline = [], time.monotonic() + 15
    while time.monotonic() < deadline:
        show = subprocess.run([sys.executable, str(SCRIPTS / "rank_line_tracer.py"), "--show",
                               str(traces)], capture_output=True, text=True, timeout=30)
        rows = show.stdout.splitlines()
        if len(rows) == 2 and "dist.all_reduce(" in rows[0] and "dist.broadcast(" in rows[1]:
            break
    assert len(rows) == 2, show.stderr
    assert rows[0].startswith("rank 0: hanging_collective.py:") and "dist.all_reduce(" in rows[0]
    assert rows[1].startswith("rank 1: hanging_collective.py:") and "dist.broadcast(" in rows[1]

    # 2. py-spy dump of every rank shows the torch.distributed function it is blocked in.
    spy = py_spy()
    if spy:
        for pid, collective in seen.values():
            deadline = time.monotonic() + 15
            while True:       # until the rank is inside the torch.distributed call
                dump = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                                      text=True, timeout=30)
                if dump.returncode != 0 and re.search(r"ptrace|[Pp]ermission", dump.stderr) \
                        and not os.environ.get("CI"):
                    pytest.skip(f"py-spy cannot attach here (ptrace not permitted): "
                                f"{dump.stderr.strip()}")
                assert dump.returncode == 0, dump.stderr
                frames = dump.stdout.splitlines()
                inner = [i for i, f in enumerate(frames) if "distributed_c10d.py" in f]
                if inner or time.monotonic() > deadline:
                    break
            assert inner, dump.stdout
            assert frames[inner[0]].strip().startswith(collective + " ")
            assert any("main (hanging_collective.py:" in f for f in frames[inner[0]:])

    # 3. The job ends by its own timeout, each rank naming its collective.
    out, err = finish(proc, limit=TIMEOUT_S + 30)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    errors = [line for line in err.splitlines() if line.startswith("hanging_collective.py: error:")]
    # Both ranks wait with the same timeout: the first to give up ends, and the other may then see
    # it go (gloo: connection closed) just before its own deadline, or be ended by torchrun first
    # (it stops the other workers when one fails). So each rank names its collective unless torchrun
    # ended it, and at least one of them names the timeout.
    rank0 = [e for e in errors if f"rank 0 (pid {seen[0][0]}): all_reduce #2 (shape [4], float32) " in e]
    rank1 = [e for e in errors if f"rank 1 (pid {seen[1][0]}): broadcast #2 (shape [4], float32) " in e]
    for lines, (pid, _) in ((rank0, seen[0]), (rank1, seen[1])):
        assert len(lines) == 1 or (not lines and f"Sending process {pid} closing signal SIGTERM" in err), err
    assert len(rank0 + rank1) == len(errors) >= 1, err
    assert any(f"did not complete within {TIMEOUT_S} s" in e for e in rank0 + rank1), errors
    assert elapsed >= TIMEOUT_S                       # ended by the timeout, not before

    # 4. The flight recorder: each rank dumped its buffer when its collective failed, and the
    #    report names collective #2, each rank's operation and the line of code that issued it.
    assert sorted(f.name for f in fr.iterdir()) == ["rank_0.json", "rank_1.json"]
    report = subprocess.run([sys.executable, str(SCRIPTS / "hanging_collective.py"),
                             "--fr-report", str(fr)], capture_output=True, text=True, timeout=60)
    assert report.returncode == 3, report.stdout + report.stderr
    found = re.search(r"finding: collective #2: rank 0 runs all_reduce \[4\] "
                      r"\(hanging_collective\.py:(\d+)\), rank 1 runs broadcast \[4\] "
                      r"\(hanging_collective\.py:(\d+)\)$", report.stdout, re.M)
    assert found, report.stdout
    source = (SCRIPTS / "hanging_collective.py").read_text(encoding="utf-8").splitlines()
    assert source[int(found[1]) - 1].strip() == "dist.all_reduce(t)"
    assert source[int(found[2]) - 1].strip() == "dist.broadcast(t, src=1)"
    first = re.search(r"#1  rank 0 all_reduce \[4\] at hanging_collective\.py:(\d+)", report.stdout)
    assert first and first[1] != found[1], report.stdout   # the first all_reduce, another line


def fr_entry(seq: int, op: str, sizes: list, line: int) -> dict:
    return {"collective_seq_id": seq, "profiling_name": f"gloo:{op}", "input_sizes": sizes,
            "process_group": ["0", "default_pg"], "is_p2p": False,
            "frames": [{"filename": "/x/torch/distributed/distributed_c10d.py", "line": 1,
                        "name": op}, {"filename": "/job/train.py", "line": line, "name": "step"}]}


def fr_dump(*entries: dict, ranks: str = "[0, 1, 2]") -> dict:
    return {"pg_config": {"": {"name": "", "ranks": ranks}}, "entries": list(entries)}


def test_flight_recorder_report_names_the_first_difference():
    first_disagreement = import_script(SCRIPTS / "hanging_collective.py").first_disagreement
    same = {r: fr_dump(fr_entry(1, "all_reduce", [[4]], 10), fr_entry(2, "all_gather", [[2]], 11))
            for r in range(3)}
    assert first_disagreement(same)[1] is None
    # Rank 1's all_gather has 5 elements where the others have 2: the sizes differ, not the op.
    shape = {**same, 1: fr_dump(fr_entry(1, "all_reduce", [[4]], 10),
                                fr_entry(2, "all_gather", [[5]], 11))}
    assert first_disagreement(shape)[1] == ("collective #2: rank 0 runs all_gather [2] (train.py:11), "
                                            "rank 1 runs all_gather [5] (train.py:11), "
                                            "rank 2 runs all_gather [2] (train.py:11)")
    # Rank 2 stopped after #1, and rank 1 wrote no dump (it says nothing about rank 1's steps).
    dead = {0: same[0], 2: fr_dump(fr_entry(1, "all_reduce", [[4]], 10))}
    lines, finding = first_disagreement(dead)
    assert finding == "collective #2: rank 0 runs all_gather [2] (train.py:11), rank 2 has no collective #2"
    assert lines[0] == "flight recorder dumps of ranks 0, 2 (3 ranks in the group; no dump from rank 1)"
    # The dumps that exist agree: the silent rank is the finding.
    assert first_disagreement({0: same[0], 2: same[2]})[1].startswith("no dump from rank 1:")


def test_matching_collectives_finish(launch):
    res = launch.torchrun("hanging_collective.py", ["--mode", "ok", "--timeout-s", "30"],
                          timeout=60)
    assert res.returncode == 0, res.output
    # Each rank contributes rank+1; two all-reduces of [1, 2]: (1+2) -> 3, then 3+3 = 6.
    assert "all 2 ranks finished; value 6" in res.stdout
    assert "hanging_collective.py: error" not in res.stderr


@pytest.mark.parametrize("mode, rank0, rank1", [("mismatch", "ALLREDUCE [4]", "BROADCAST [4]"),
                                                ("shape", "ALLREDUCE [4]", "ALLREDUCE [5]")])
def test_detail_debug_fails_at_once_naming_both_sides(launch, mode, rank0, rank1):
    # TORCH_DISTRIBUTED_DEBUG=DETAIL compares every collective's fingerprint across ranks before it
    # runs: the job fails at the mismatched collective instead of waiting for its 120 s timeout (the
    # launch is limited to 60 s), and each rank's one line says what both ranks were running.
    res = launch.torchrun("hanging_collective.py", ["--mode", mode, "--timeout-s", "120"],
                          env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, timeout=60)
    assert res.returncode != 0, res.output
    errors = [line for line in res.stderr.splitlines() if line.startswith("hanging_collective.py: error:")]
    assert len(errors) == 2, res.stderr
    for line in errors:
        assert "all_reduce #2" in line or "broadcast #2" in line, line
        assert "TORCH_DISTRIBUTED_DEBUG=DETAIL found a mismatch" in line, line
        assert f"rank 0 runs {rank0}" in line and f"rank 1 runs {rank1}" in line, line


def test_a_plain_failure_keeps_its_first_line():
    describe_failure = import_script(SCRIPTS / "hanging_collective.py").describe_failure
    assert describe_failure("Connection reset by peer\nmore detail") == "Connection reset by peer"
    assert len(describe_failure("x" * 500)) == 200


BAD_INPUT = [
    Case("single-process", [], r"needs at least 2 ranks \(world size is 1\); launch with torchrun "
         "--nproc-per-node 2"),
    Case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: 0 must be > 0"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not a finite number"),
    Case("dump-margin-negative", ["--dump-margin-s", "-5"], "--dump-margin-s: -5 must be > 0"),
    Case("mode-unknown", ["--mode", "deadlock"], "--mode"),
    Case("master-missing", [], "MASTER_ADDR and MASTER_PORT are not set", env={"RANK": "0", "WORLD_SIZE": "2"}),
    *launcher_cases([], ["--timeout-s", "1"]),
    Case("fr-dump-is-a-file", ["--fr-dump", "{tmp}/fr"], r"--fr-dump .*/fr: .*/fr is a file, not a folder",
         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"},
         files={"fr": "not a folder"}),
    Case("fr-dump-unwritable", ["--fr-dump", "/proc/fr"], r"--fr-dump /proc/fr: cannot write there",
         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}),
    Case("fr-report-no-folder", ["--fr-report", "{tmp}/none"], r"--fr-report .*/none: no such folder"),
    Case("fr-report-no-dumps", ["--fr-report", "{tmp}"], r"no rank_<R>\.json files; write them with --fr-dump",
         files={"notes.txt": "x"}),
    Case("fr-report-not-a-dump", ["--fr-report", "{tmp}"],
         r"rank_0\.json: not a flight-recorder dump written by --fr-dump", status=1,
         files={"rank_0.json": "{\"entries\": 3}"}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("debug/hanging_collective.py", case, tmp_path)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_debug_chapter_cites_the_scripts_current_lines(lang):
    # The chapter's py-spy and tracer output names lines of hanging_collective.py; an edit to the
    # script shifts them, and the printed stacks would then point at the wrong code.
    page = (REPO / "book" / lang / "debug" / "index.md").read_text(encoding="utf-8")
    source = (SCRIPTS / "hanging_collective.py").read_text(encoding="utf-8").splitlines()
    cited = re.findall(r"hanging_collective\.py:(\d+)(?: in \w+: (.+))?\)?", page)
    assert cited, "the chapter no longer cites lines of hanging_collective.py"
    for number, code in cited:
        line = source[int(number) - 1].strip()
        assert line.startswith(("dist.", "status = main(argv)", "run_main(main)")), \
            f"line {number} is {line!r}"
        if code:
            assert line == code.strip(), f"line {number} is {line!r}, the chapter shows {code!r}"
    # In a py-spy stack, main's line must hold the collective named by the innermost torch frame.
    stacks = re.findall(r"^\s*(\w+) \(torch/distributed/distributed_c10d\.py:\d+\)\n"
                        r"(?:.*\n)*?\s*main \(hanging_collective\.py:(\d+)\)", page, re.M)
    assert len(stacks) == 2, "the chapter no longer shows the two ranks' py-spy stacks"
    for collective, number in stacks:
        assert f"dist.{collective}(" in source[int(number) - 1], f"line {number} is not {collective}"
