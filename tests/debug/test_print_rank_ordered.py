"""Tests of scripts/debug/print_rank_ordered.py, run with torchrun (2 CPU ranks, gloo)."""

from __future__ import annotations

import re

import pytest

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "print_rank_ordered.py"


def test_ordered_and_locked_output(launch):
    res = launch.torchrun(SCRIPT, ["--lines", "5"], timeout=60)
    assert res.returncode == 0, res.output
    lines = res.stdout.splitlines()
    # print_rank_ordered: the last block is "[rank 0]" + its 5 lines, then "[rank 1]" + its 5.
    ordered = lines[-12:]
    assert ordered[0] == "[rank 0]" and ordered[6] == "[rank 1]"
    for r, block in ((0, ordered[1:6]), (1, ordered[7:12])):
        assert [re.search(r"rank (\d+) of 2 .*line (\d+) of 5", b).groups() for b in block] == \
            [(str(r), str(i)) for i in range(1, 6)]
    # print_locked: each "[rank R, locked]" header is followed by that rank's 5 lines, unbroken.
    for r in (0, 1):
        i = lines.index(f"[rank {r}, locked]")
        assert all(f"rank {r} of 2" in line for line in lines[i + 1:i + 6])


BAD_INPUT = [
    Case("lines-zero", ["--lines", "0"], "--lines: 0 must be >= 1"),
    Case("lines-huge", ["--lines", "10000000"], "--lines: 10000000 must be <= 100000"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not a finite number"),
    Case("lock-file-missing", ["--lock-file", "/nonexistent/lock"], "cannot read lock file"),
    Case("lock-file-is-folder", ["--lock-file", "{tmp}"], "--lock-file: cannot read lock file"),
    Case("lock-file-empty", ["--lock-file", ""], "--lock-file: must not be empty"),
    Case("srun-without-master", [], "MASTER_ADDR and MASTER_PORT must be set",
         env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}),
    *launcher_cases([], ["--timeout-s", "1"], local_rank=False),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("debug/print_rank_ordered.py", case, tmp_path)
