"""Tests of scripts/debug/find_bad_rank.py: the round-robin schedule and the verdict on synthetic
matrices (imported), then the script run for real on CPU/gloo with 4 ranks under torchrun or as
srun-like processes: healthy, an injected slow rank, slow link and dead rank, the JSON file, and
careless invocations. Small messages and few iterations keep each launch to a few seconds; the
2-core sandbox is noisy at the millisecond scale, so the launches ask for a 20 ms excess as well
as the slow factor (--min-excess-ms) and inject 50 ms delays."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS, REPO, import_script

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "find_bad_rank.py"
# --timeout-s: how long a live rank's heartbeat (4 a second) may stand still before it is named dead.
# 3 s named a live rank dead once, with three pytest workers on 2 cores; 5 s leaves a margin.
FAST = ["--device", "cpu", "--timeout-s", "5", "--bandwidth-bytes", "64K", "--iters", "3",
        "--warmup", "1", "--matmul-n", "64", "--min-excess-ms", "20", "--inject-delay-ms", "50"]


@pytest.fixture(scope="module")
def fbr():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64])
def test_tournament_meets_every_pair_once_and_no_rank_twice_per_round(fbr, n):
    rounds = fbr.tournament(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = [p for pairs in rounds for p in pairs]
    assert sorted(seen) == list(itertools.combinations(range(n), 2))
    for pairs in rounds:
        ranks = [r for p in pairs for r in p]
        assert len(ranks) == len(set(ranks))


@pytest.mark.parametrize("n", [2, 3, 4, 7, 65])
def test_schedule_is_ring_then_the_other_pairs_and_ring_only_above_the_cap(fbr, n):
    rounds = fbr.schedule(n, pairwise_max=64)
    ring = {(min(r, (r + 1) % n), max(r, (r + 1) % n)) for r in range(n)}
    got = [p for _, pairs in rounds for p in pairs]
    assert len(got) == len(set(got))
    want = ring if n > 64 else set(itertools.combinations(range(n), 2))
    assert set(got) == want
    assert {p for phase, pairs in rounds if phase == "ring" for p in pairs} == ring
    for _, pairs in rounds:
        ranks = [r for p in pairs for r in p]
        assert len(ranks) == len(set(ranks))


def matrices(n, lat=100.0, bw=10.0, slow=(), factor=10.0):
    """n x n symmetric matrices, every link lat us / bw GBps, links in ``slow`` factor worse."""
    L = [[None if i == j else lat for j in range(n)] for i in range(n)]
    B = [[None if i == j else bw for j in range(n)] for i in range(n)]
    for i, j in slow:
        L[i][j] = L[j][i] = lat * factor
        B[i][j] = B[j][i] = bw / factor
    return L, B


def kinds(findings):
    return sorted((f["kind"], tuple(f["ranks"])) for f in findings)


def test_classify_healthy_slow_rank_slow_link_dead_and_slow_host(fbr):
    n = 6
    assert fbr.classify(n, *matrices(n), [1.0] * n) == []
    slow2 = [(min(2, r), max(2, r)) for r in range(n) if r != 2]
    out = fbr.classify(n, *matrices(n, slow=slow2), [1.0] * n)
    assert kinds(out) == [("slow_rank", (2,))] and "compute is normal" in out[0]["message"]
    out = fbr.classify(n, *matrices(n, slow=slow2), [1.0, 1, 5, 1, 1, 1])
    assert kinds(out) == [("slow_rank", (2,))] and "host itself is slow" in out[0]["message"]
    assert kinds(fbr.classify(n, *matrices(n, slow=[(1, 4)]), [1.0] * n)) == [("slow_link", (1, 4))]
    assert kinds(fbr.classify(n, *matrices(n), [1.0, 1, 1, 9, 1, 1])) == [("slow_compute", (3,))]
    out = fbr.classify(n, *matrices(n), [1.0] * n, dead={5: "no sign of life"},
                       failed=[(0, 5, "timeout"), (1, 2, "timeout")],
                       where=lambda r: f" (host h{r})")
    assert kinds(out) == [("dead_rank", (5,)), ("failed_link", (1, 2))]
    assert out[0]["message"] == "dead rank 5 (host h5): no sign of life"
    # a 2x slower link is not named with factor 3; a large ratio of a tiny time is not with a floor
    assert fbr.classify(n, *matrices(n, slow=[(1, 4)], factor=2), [1.0] * n) == []
    assert fbr.classify(n, *matrices(n, slow=slow2), [1.0] * n, min_excess_ms=5, nbytes=8) == []
    # A matmul 9x slower but only 8 ms slower stays under a 10 ms floor; at 20 ms it is named.
    assert fbr.classify(n, *matrices(n), [1.0, 1, 1, 9, 1, 1], min_excess_ms=10) == []
    assert kinds(fbr.classify(n, *matrices(n), [1.0, 1, 1, 21, 1, 1], min_excess_ms=10)) == \
        [("slow_compute", (3,))]


def test_classify_works_on_the_ring_only_matrix_of_a_large_job(fbr):
    n = 80
    L, B = matrices(n)
    for i in range(n):
        for j in range(n):
            if (j - i) % n not in (1, n - 1):
                L[i][j] = B[i][j] = None
    L[10][11] = L[11][10] = L[9][10] = L[10][9] = 5000.0
    assert kinds(fbr.classify(n, L, B, [1.0] * n)) == [("slow_rank", (10,))]


def finding_lines(text):
    return [line for line in text.splitlines() if line.startswith("FINDING: ")]


def test_healthy_4_ranks_exit_0_and_write_the_json(launch, tmp_path):
    out = tmp_path / "bad_rank.json"
    res = launch.torchrun(SCRIPT, [*FAST, "--json", str(out)], nproc=4, timeout=60)
    assert res.returncode == 0, res.output
    assert "OK: no slow, dead or failed rank or link among 4 ranks" in res.stdout
    assert not finding_lines(res.stdout) and not launch.error_lines(res.stderr)
    data = json.loads(out.read_text())
    assert data["benchmark"] == "find_bad_rank" and data["world_size"] == 4
    assert data["findings"] == [] and len(data["hosts"]) == 1 and len(data["compute_ms"]) == 4
    for key in ("latency_us", "bandwidth_GBps"):
        m = data[key]
        assert all(m[i][i] is None for i in range(4))
        assert all(m[i][j] == m[j][i] and m[i][j] > 0 for i in range(4) for j in range(4) if i != j)


def test_injected_slow_rank_2_is_named_and_no_other(launch, tmp_path):
    out = tmp_path / "bad_rank.json"
    res = launch.torchrun(SCRIPT, [*FAST, "--inject-slow-rank", "2", "--json", str(out)],
                          nproc=4, timeout=60)
    # rank 0 exits 3; torchrun then exits 1 and reports rank 0's exit code
    assert res.returncode != 0 and "exitcode  : 3" in res.stderr, res.output
    assert "rank      : 0" in res.stderr
    lines = finding_lines(res.stdout)
    assert len(lines) == 1 and lines[0].startswith("FINDING: slow rank 2 (host "), res.stdout
    data = json.loads(out.read_text())
    assert [(f["kind"], f["ranks"]) for f in data["findings"]] == [("slow_rank", [2])]
    assert data["injected"] == {"inject_slow_rank": 2, "inject_delay_ms": 50.0}
    lat = data["latency_us"]
    # rank 2's links carry the 50 ms sleeps; the others' do not
    assert min(lat[2][r] for r in (0, 1, 3)) > 20_000 + max(lat[0][1], lat[0][3], lat[1][3])


def test_injected_slow_link_with_srun_variables(launch):
    results = launch.srun_like(SCRIPT, [*FAST, "--inject-slow-link", "1,2"], ntasks=4, timeout=60)
    assert [r.returncode for r in results] == [3, 0, 0, 0], [r.output for r in results]
    lines = finding_lines(results[0].stdout)
    assert len(lines) == 1 and lines[0].startswith("FINDING: slow link 1<->2"), results[0].stdout


def test_injected_dead_rank_3_is_named_within_the_timeout(launch):
    res = launch.torchrun(SCRIPT, [*FAST, "--inject-dead-rank", "3"], nproc=4, timeout=40)
    assert "exitcode  : 3" in res.stderr and "rank      : 0" in res.stderr, res.output
    lines = finding_lines(res.stdout)
    assert len(lines) == 1 and lines[0].startswith("FINDING: dead rank 3 (host "), res.stdout
    assert "no sign of life for 5 s" in lines[0]


def test_a_rank_that_exits_is_named(launch):
    results = launch.srun_like(SCRIPT, [*FAST, "--inject-dead-rank", "1", "--inject-dead-how",
                                        "exit"], ntasks=3, timeout=40)
    assert results[0].returncode == 3, results[0].output
    lines = finding_lines(results[0].stdout)
    assert len(lines) == 1 and lines[0].startswith("FINDING: dead rank 1 (host "), [r.output for r in results]


def test_a_rank_that_never_joins_is_named(launch):
    results = launch.srun_like(SCRIPT, [*FAST, "--inject-dead-rank", "2", "--inject-dead-how",
                                        "no-join", "--join-timeout-s", "2"], ntasks=3, timeout=40)
    assert results[0].returncode == 3, results[0].output
    assert "FINDING: dead rank 2: did not join within 2 s" in results[0].stdout
    assert results[1].returncode == 0 and "rank 0 reports that rank 2 did not join" in \
        results[1].stderr
    assert results[2].returncode == 1 and "injected dead rank: never joined" in results[2].stderr


TWO = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}
BAD_INPUT = [
    Case("single-process", [], r"needs at least 2 ranks \(world size is 1\)"),
    Case("master-missing", [], "MASTER_ADDR and MASTER_PORT are not set",
         env={"RANK": "0", "WORLD_SIZE": "2"}),
    Case("timeout-zero", ["--timeout-s", "0"], "--timeout-s: 0 must be > 0"),
    Case("timeout-nan", ["--timeout-s", "nan"], "--timeout-s: 'nan' is not a finite number"),
    Case("slow-factor-inf", ["--slow-factor", "inf"], "--slow-factor: 'inf' is not a finite"),
    Case("slow-factor-one", ["--slow-factor", "1"], "--slow-factor: 1 must be > 1"),
    Case("iters-text", ["--iters", "ten"], "--iters: 'ten' is not an integer"),
    Case("iters-huge", ["--iters", "100000"], "--iters: 100000 must be <= 1000"),
    Case("bandwidth-too-large", ["--bandwidth-bytes", "64G"], "--bandwidth-bytes: .* at most|"
         "--bandwidth-bytes: .*must be 1 byte to 2G"),
    Case("bandwidth-garbage", ["--bandwidth-bytes", "lots"], "--bandwidth-bytes: 'lots' is not a "
         "byte count"),
    Case("delay-negative", ["--inject-delay-ms", "-5"], "--inject-delay-ms: -5 must be > 0"),
    Case("slow-link-same-rank", ["--inject-slow-link", "2,2"], "names the same rank twice"),
    Case("slow-link-garbage", ["--inject-slow-link", "1-2"], "is not two ranks R,S"),
    Case("slow-rank-outside-world", ["--inject-slow-rank", "5"],
         r"--inject-slow-rank 5 is outside world size 2", env=TWO),
    Case("dead-rank-outside-world", ["--inject-dead-rank", "2"],
         r"--inject-dead-rank 2 is outside world size 2", env=TWO),
    Case("slow-link-outside-world", ["--inject-slow-link", "0,7"],
         r"--inject-slow-link 0,7 is outside world size 2", env=TWO),
    *launcher_cases([], ["--timeout-s", "3"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused(f"debug/{SCRIPT}", case, tmp_path)
