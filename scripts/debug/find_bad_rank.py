#!/usr/bin/env python
"""find_bad_rank.py: which rank, host or link makes a distributed job slow, or does not answer?

Every rank (started by torchrun or srun) times a float32 matmul loop (``compute_ms``, ms per
matmul); then every pair of ranks (the ring neighbours, then, up to ``--pairwise-max-ranks``
ranks, every other pair, in rounds where no rank is in two pairs) plays ping-pong with
isend/irecv: the one-way latency of a small message (``lat_us``, microseconds) and the bandwidth
of a large one (``bw_GBps``, decimal GB/s, the algbw of one point-to-point transfer). Rank 0 names
a dead rank, a slow rank, a slow or failed link, or slow compute (``--slow-factor`` times worse
than the others). The ranks coordinate through the rendezvous store, not through collectives, so
a rank that stops answering is named within ``--timeout-s`` instead of hanging the test.

How to launch (GPUs and nccl; ``--device cpu`` for gloo; under srun, export MASTER_ADDR/PORT)::

    torchrun --standalone --nproc-per-node 8 find_bad_rank.py --json bad_rank.json
    srun --nodes 4 --ntasks-per-node 8 python find_bad_rank.py --timeout-s 60 --json bad_rank.json

Example output (4 CPU processes on a 2-core VM, rank 2 delayed by ``--inject-slow-rank 2``)::

    # 4 ranks on 1 host(s), gloo, 3 rounds (ring + pairwise)
    rank host             local    lat_us  bw_GBps compute_ms  verdict
       1 vm                   1      69.9    0.734       0.49  ok
       2 vm                   2   50377.3    0.001       0.45  slow rank
    FINDING: slow rank 2 (host vm, local rank 2): its links are 720.9x slower in latency and 575.9x in bandwidth than the links between the other ranks; its compute is normal: look at its network path (NIC, cable, switch port, PCIe)

Exit status (rank 0; the other ranks exit 0): 0 nothing found, 3 a finding, 1 failure, 2 usage,
130/143 interrupted.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import traceback

PROG = "find_bad_rank.py"
MAX_BANDWIDTH_BYTES = 2 * 1024**3


# --- the schedule --------------------------------------------------------------------------------

def tournament(n: int) -> list[list[tuple[int, int]]]:
    """Round-robin rounds (circle method) for ranks 0..n-1: each pair (i < j) appears in exactly
    one round, each rank at most once per round; n-1 rounds for an even n, n for an odd n (a
    rank sits out each round)."""
    players: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def ring_rounds(n: int) -> list[list[tuple[int, int]]]:
    """The ring links (r, r+1 mod n) in rounds where no rank appears twice: 2 rounds for an even
    n, 3 for an odd n (1 round for n = 2)."""
    links = sorted({(min(r, (r + 1) % n), max(r, (r + 1) % n)) for r in range(n)} - {(0, 0)})
    rounds: list[list[tuple[int, int]]] = []
    for a, b in links:
        for pairs in rounds:
            if all(a not in p and b not in p for p in pairs):
                pairs.append((a, b))
                break
        else:
            rounds.append([(a, b)])
    return rounds


def schedule(n: int, pairwise_max: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """All rounds: ('ring', pairs)... then ('pairwise', pairs)... (without the ring's pairs);
    the pairwise pass only when n <= pairwise_max."""
    ring = ring_rounds(n)
    done = {p for pairs in ring for p in pairs}
    out = [("ring", pairs) for pairs in ring]
    if n <= pairwise_max:
        for pairs in tournament(n):
            rest = [p for p in pairs if p not in done]
            if rest:
                out.append(("pairwise", rest))
    return out


# --- the verdict ---------------------------------------------------------------------------------

def median(values):
    return statistics.median(values) if values else None


def link_ratios(links: dict, subset, base, min_excess_ms: float, nbytes: int) -> tuple[float, float]:
    """(latency ratio, bandwidth ratio) of the medians of two sets of ``links`` ({(i, j): (latency
    us, bandwidth GBps)}); >1 is slower, and a ratio whose excess time is under min_excess_ms
    counts as 1."""
    # the lower median of a rank's links: with 2 links (the ring), one slow link is the
    # link's fault, not the rank's
    lat_s = statistics.median_low([links[k][0] for k in subset])
    bw_s = statistics.median_high([links[k][1] for k in subset])
    lat_b, bw_b = median([links[k][0] for k in base]), median([links[k][1] for k in base])
    lat, bw = lat_s / max(lat_b, 1e-9), bw_b / max(bw_s, 1e-12)
    if (lat_s - lat_b) / 1e3 < min_excess_ms:
        lat = min(lat, 1.0)
    if nbytes / 1e6 * (1 / max(bw_s, 1e-12) - 1 / max(bw_b, 1e-12)) < min_excess_ms:
        bw = min(bw, 1.0)
    return lat, bw


def slow_compute(ms: float, others_ms: float, factor: float, min_excess_ms: float) -> bool:
    """F times the others' median, and at least min_excess_ms more per matmul (a tiny matmul on a
    busy CPU varies by a factor of 3 with no fault at all)."""
    return ms > factor * others_ms and ms - others_ms >= min_excess_ms


def classify(n: int, latency, bandwidth, compute, dead=(), failed=(), factor: float = 3.0,
             where=None, min_excess_ms: float = 0.0, nbytes: int = 1) -> list[dict]:
    """Findings from the measured matrices (pure function, no torch).

    ``latency``/``bandwidth``: n x n lists, symmetric, None where not measured; ``compute``: list
    of n floats (ms) or None; ``dead``: {rank: reason}; ``failed``: [(i, j, reason)] for links
    that did not finish; ``where(r)``: text for a rank's place (host, local rank). Returns a list
    of {"kind", "ranks", "message"} in the order dead, slow rank, slow link, failed link, slow
    compute."""
    where = where or (lambda r: "")
    dead = dict(dead)
    findings = []
    for r in sorted(dead):
        findings.append({"kind": "dead_rank", "ranks": [r],
                         "message": f"dead rank {r}{where(r)}: {dead[r]}"})
    links = {}
    for i in range(n):
        for j in range(i + 1, n):
            if i in dead or j in dead or latency[i][j] is None:
                continue
            links[(i, j)] = (latency[i][j], bandwidth[i][j])

    slow_ranks = set()
    if n - len(dead) >= 3:
        for r in range(n):
            own = [k for k in links if r in k]
            rest = [k for k in links if r not in k]
            if not own or not rest:
                continue
            lat, bw = link_ratios(links, own, rest, min_excess_ms, nbytes)
            if max(lat, bw) > factor:
                slow_ranks.add(r)
                others = [c for i, c in enumerate(compute or []) if i != r and c is not None]
                slow_host = compute and compute[r] is not None and others and \
                    slow_compute(compute[r], median(others), factor, min_excess_ms)
                why = ("its compute is slow too: the host itself is slow (throttling, another job, "
                       "a bad GPU)" if slow_host else "its compute is normal: look at its network "
                       "path (NIC, cable, switch port, PCIe)")
                findings.append({"kind": "slow_rank", "ranks": [r], "message": (
                    f"slow rank {r}{where(r)}: its links are {lat:.1f}x slower in latency and "
                    f"{bw:.1f}x in bandwidth than the links between the other ranks; {why}")})
    healthy = [k for k in links if not (set(k) & slow_ranks)]
    if len(healthy) >= 3:
        for k in healthy:
            lat, bw = link_ratios(links, [k], healthy, min_excess_ms, nbytes)
            if max(lat, bw) > factor:
                i, j = k
                findings.append({"kind": "slow_link", "ranks": [i, j], "message": (
                    f"slow link {i}<->{j}{where(i)}{where(j).replace(' (', ' and (')}: "
                    f"{lat:.1f}x the median latency, {bw:.1f}x slower in bandwidth")})
    for i, j, reason in failed:
        if i not in dead and j not in dead:
            findings.append({"kind": "failed_link", "ranks": [i, j],
                             "message": f"failed link {i}<->{j}: {reason}"})
    if compute and n - len(dead) >= 2:
        for r in range(n):
            others = [c for i, c in enumerate(compute) if i != r and c is not None and i not in dead]
            if r in slow_ranks or r in dead or compute[r] is None or not others:
                continue
            if slow_compute(compute[r], median(others), factor, min_excess_ms):
                findings.append({"kind": "slow_compute", "ranks": [r], "message": (
                    f"slow compute on rank {r}{where(r)}: {compute[r]:.2f} ms per matmul, "
                    f"{compute[r] / median(others):.1f}x the other ranks' median")})
    return findings


# --- launch and store ----------------------------------------------------------------------------

def connect_store(dist, launch: Launch, timeout_s: float, host: bool | None = None):
    """A client (or, for rank 0 under srun, the server, unless ``host`` is False) of the
    rendezvous store, under one deadline: the client retries a refused connection on its own."""
    env = os.environ
    if host is None:  # torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT; srun's rank 0
        host = env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" and launch.rank == 0
    what = f"{launch.me()}: connecting to the store at MASTER_ADDR:MASTER_PORT {launch.master}"
    with deadline(timeout_s * 1.1 + 1, what):
        try:
            store = dist.TCPStore(launch.addr, launch.port, None, host,
                                  datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
        except (RuntimeError, OSError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ScriptError(f"{what} failed: {first}") from None
    attempt = f"{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return dist.PrefixStore(f"find_bad_rank/{attempt}/", store)


class Peers:
    """Liveness through the store: every rank bumps ``hb/<rank>`` four times a second from a
    thread (with a store client of its own); a rank whose counter stands still for ``timeout_s``
    is dead, and whoever sees it first writes ``dead/<rank>`` for everybody."""

    def __init__(self, store, hb_store, rank: int, timeout_s: float):
        self.store, self.rank, self.timeout_s = store, rank, timeout_s
        self.seen: dict[int, tuple[int, float]] = {}
        self.dead: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, args=(hb_store,), daemon=True)
        self.thread.start()

    def _beat(self, hb_store) -> None:
        while not self.stop.is_set():
            try:
                hb_store.add(f"hb/{self.rank}", 1)
            except Exception:  # noqa: BLE001 - a store slow to answer (a loaded host): beat on, or
                pass           # this live rank would look dead; a store gone: the main thread says so
            self.stop.wait(0.25)

    def has(self, key: str) -> bool:
        return self.store.check([key])

    def is_dead(self, peer: int) -> bool:
        """True once ``peer`` is known dead (marked by someone, or silent for timeout_s)."""
        if peer in self.dead:
            return True
        if self.has(f"dead/{peer}"):
            self.dead[peer] = self.store.get(f"dead/{peer}").decode()
            return True
        count, now = self.store.add(f"hb/{peer}", 0), time.monotonic()
        last = self.seen.get(peer)
        if last is None or last[0] != count:
            self.seen[peer] = (count, now)
        elif now - last[1] > self.timeout_s:
            reason = (f"no sign of life for {self.timeout_s:g} s (seen by rank {self.rank})"
                      if count else f"never started its heartbeat within {self.timeout_s:g} s")
            self.dead[peer] = reason
            self.store.set(f"dead/{peer}", reason)
            return True
        return False

    def wait_key(self, key: str, peer: int, poll: float = 0.005) -> bool:
        """Wait until ``key`` is in the store (True) or ``peer`` is dead (False)."""
        while not self.has(key):
            if self.is_dead(peer):
                return False
            time.sleep(poll)
            poll = min(poll * 1.5, 0.05)
        return True


# --- measuring -----------------------------------------------------------------------------------

class PeerTimeout(Exception):
    pass


class Exchanger:
    """Ping-pong between two ranks with isend/irecv, every wait bounded by the timeout."""

    def __init__(self, torch, dist, device, args, rank: int):
        self.torch, self.dist, self.device, self.args, self.rank = torch, dist, device, args, rank
        self.timeout = datetime.timedelta(seconds=args.timeout_s)
        self.small = torch.zeros(args.latency_bytes, dtype=torch.uint8, device=device)
        self.large = torch.zeros(args.bandwidth_bytes, dtype=torch.uint8, device=device)

    def delay(self, peer: int) -> None:
        a = self.args
        slow = a.inject_slow_rank == self.rank or (a.inject_slow_link is not None and {
            self.rank, peer} == set(a.inject_slow_link))
        if slow:
            time.sleep(a.inject_delay_ms / 1000)

    def _op(self, send: bool, buf, peer: int, tag: int) -> None:
        self.delay(peer)
        work = (self.dist.isend if send else self.dist.irecv)(buf, peer, tag=tag)
        try:
            done = work.wait(self.timeout)
        except RuntimeError as exc:
            raise PeerTimeout(f"{'send to' if send else 'receive from'} rank {peer} failed or "
                              f"timed out after {self.args.timeout_s:g} s: "
                              f"{(str(exc).strip().splitlines() or [''])[0][:120]}") from None
        if done is False:
            raise PeerTimeout(f"{'send to' if send else 'receive from'} rank {peer} did not finish "
                              f"within {self.args.timeout_s:g} s")

    def pingpong(self, buf, peer: int, first: bool, tag: int) -> float:
        """Fastest round trip in seconds (measured on the first side). The minimum, not the
        median: a bad link or rank is slow on every trip, while a trip that waited for the
        operating system to schedule a process is slow once, so the minimum keeps the signal
        and drops that noise."""
        sync = self.torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        times = []
        for i in range(self.args.warmup + self.args.iters):
            start = time.perf_counter()
            if first:
                self._op(True, buf, peer, tag)
                self._op(False, buf, peer, tag)
            else:
                self._op(False, buf, peer, tag)
                self._op(True, buf, peer, tag)
            sync()
            if i >= self.args.warmup:
                times.append(time.perf_counter() - start)
        return min(times)


def compute_ms(torch, device, n: int, iters: int) -> float:
    """Median time of one n x n float32 matmul in ms (after one untimed)."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(iters + 1):
        sync()
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        if i:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def sleep_dead(peers: Peers | None, seconds: float) -> None:
    """The injected dead rank stops answering: no heartbeat, no transfer, only sleep."""
    if peers:
        peers.stop.set()
    time.sleep(seconds)


def measure(args, launch: Launch, torch, dist, device, peers: Peers, stage: list[str]) -> dict:
    """This rank's part of the passes; returns its row for rank 0.

    The schedule runs twice: first every pair's small-message (latency) trips, then, after every
    rank living has finished those, the large-message (bandwidth) trips. Pairs of a round run at
    the same time, and a latency trip that shared a NIC, a PCIe switch or a CPU core with another
    pair's bulk transfer would measure that transfer's queue, not the link."""
    rank, n = launch.rank, launch.world
    ex = Exchanger(torch, dist, device, args, rank)
    stage[0] = "the compute test"
    row = {"rank": rank, "compute_ms": compute_ms(torch, device, args.matmul_n, args.matmul_iters),
           "links": [], "failed": []}
    plan = schedule(n, args.pairwise_max_ranks)
    latency: dict[int, float] = {}
    failed: set[int] = set()
    for kind, buf in (("latency", ex.small), ("bandwidth", ex.large)):
        if kind == "bandwidth":
            stage[0] = "waiting for every rank to finish the latency trips"
            peers.store.set(f"latency-done/{rank}", "1")
            for other in range(n):
                if other != rank:
                    peers.wait_key(f"latency-done/{other}", other)
        for g, (phase, pairs) in enumerate(plan):
            pair = next((p for p in pairs if rank in p), None)
            if pair is None:
                continue
            peer = pair[1] if pair[0] == rank else pair[0]
            first = pair[0] == rank
            stage[0] = f"the {phase} pass ({kind}), round {g}, with rank {peer}"
            if args.inject_dead_rank == rank:
                if args.inject_dead_how == "exit":
                    # a rank that dies once every rank is in the measurement; one that died while
                    # gloo still builds its mesh would fail the others' init_process_group instead
                    end = time.monotonic() + args.timeout_s
                    while peers.store.add("initialized", 0) < n and time.monotonic() < end:
                        time.sleep(0.01)
                    say(f"{PROG}: rank {rank}: injected dead rank: exiting before the first "
                        "transfer", sys.stderr)
                    os._exit(EXIT_FAILURE)
                sleep_dead(peers, 10 * args.timeout_s * (len(plan) + n) + 600)
            link = f"failed/{min(rank, peer)}-{max(rank, peer)}"
            peers.store.set(f"ready/{kind}/{g}/{rank}", "1")
            if not peers.wait_key(f"ready/{kind}/{g}/{peer}", peer):
                continue                        # dead: rank 0 hears it from the store
            if peer in failed or peers.has(link):
                continue                        # failed in the latency pass (on either side)
            try:
                rtt = ex.pingpong(buf, peer, first, tag=2 * g + (kind == "bandwidth"))
            except PeerTimeout as exc:
                failed.add(peer)
                peers.store.set(link, "1")
                if first:
                    row["failed"].append([peer, str(exc)])
                continue
            if first and kind == "latency":
                latency[peer] = rtt / 2 * 1e6
            elif first:
                row["links"].append([peer, latency[peer], args.bandwidth_bytes / (rtt / 2) / 1e9])
    return row


# --- rank 0: collect and report ------------------------------------------------------------------

def collect(launch: Launch, peers: Peers, joined: dict, stage: list[str]) -> tuple[dict, dict]:
    """Rows of every rank that answers (from the store), and the dead ones with a reason."""
    rows = {}
    pending = set(range(launch.world))
    while pending:
        for r in sorted(pending):
            stage[0] = f"collecting the results of rank {r}"
            if peers.has(f"row/{r}"):
                rows[r] = json.loads(peers.store.get(f"row/{r}"))
                pending.discard(r)
            elif peers.is_dead(r):
                pending.discard(r)
        time.sleep(0.02)
    dead = {}
    for r in range(launch.world):
        if r not in rows:
            dead[r] = peers.dead.get(r, "sent no results")
    return rows, dead


def where_text(joined: dict):
    def where(r: int) -> str:
        info = joined.get(r)
        return f" (host {info['host']}, local rank {info['local_rank']})" if info else ""
    return where


def fmt(value, spec: str) -> str:
    """``value`` formatted by ``spec``, or "-" right-aligned to the same width when missing."""
    if value is None:
        return "-".rjust(int(re.match(r"\d*", spec)[0] or 1))
    return format(value, spec)


def report(args, launch: Launch, joined: dict, rows: dict, dead: dict, backend: str,
           torch_version: str) -> int:
    n = launch.world
    lat = [[None] * n for _ in range(n)]
    bw = [[None] * n for _ in range(n)]
    failed = []
    for r, row in rows.items():
        for peer, lat_us, bw_gbps in row["links"]:
            lat[r][peer] = lat[peer][r] = lat_us
            bw[r][peer] = bw[peer][r] = bw_gbps
        failed += [(r, peer, why) for peer, why in row["failed"]]
    compute = [rows[r]["compute_ms"] if r in rows else None for r in range(n)]
    where = where_text(joined)
    findings = classify(n, lat, bw, compute, dead, failed, args.slow_factor, where,
                        args.min_excess_ms, args.bandwidth_bytes)
    named = {}
    for f in findings:
        for r in f["ranks"]:
            named.setdefault(r, f["kind"].replace("_", " "))
    say(f"{'rank':>4} {'host':<16} {'local':>5} {'lat_us':>9} {'bw_GBps':>8} {'compute_ms':>10}  "
        "verdict")
    for r in range(n):
        info = joined.get(r, {})
        lats = [v for v in lat[r] if v is not None]
        bws = [v for v in bw[r] if v is not None]
        say(f"{r:>4} {str(info.get('host', '?'))[:16]:<16} {str(info.get('local_rank', '?')):>5} "
            f"{fmt(median(lats), '9.1f')} {fmt(median(bws), '8.3f')} "
            f"{fmt(compute[r], '10.2f')}  {named.get(r, 'ok')}")
    say("(lat_us, bw_GBps: median over the rank's links; one-way latency of "
        f"{args.latency_bytes} B, algbw of {args.bandwidth_bytes} B point-to-point)")
    for f in findings:
        say(f"FINDING: {f['message']}")
    if not findings:
        say(f"OK: no slow, dead or failed rank or link among {n} ranks "
            f"(slow factor {args.slow_factor:g})")
    if args.json:
        hosts = sorted({i["host"] for i in joined.values()})
        result = {
            "benchmark": "find_bad_rank", "schema_version": 1, "world_size": n,
            "hosts": hosts,
            "ranks": [{"rank": r, **joined.get(r, {})} for r in range(n)],
            "backend": backend, "torch_version": torch_version,
            "date_utc": date_utc(),
            "latency_bytes": args.latency_bytes, "bandwidth_bytes": args.bandwidth_bytes,
            "iters": args.iters, "warmup": args.warmup, "matmul_n": args.matmul_n,
            "slow_factor": args.slow_factor, "min_excess_ms": args.min_excess_ms,
            "timeout_s": args.timeout_s,
            "passes": ["ring"] + (["pairwise"] if n <= args.pairwise_max_ranks else []),
            "latency_us": lat, "bandwidth_GBps": bw, "compute_ms": compute,
            "findings": findings,
            "injected": {k: v for k, v in vars(args).items() if k.startswith("inject_") and
                         v is not None and (k != "inject_dead_how" or args.inject_dead_rank
                                            is not None)
                         and (k != "inject_delay_ms" or args.inject_slow_rank is not None
                              or args.inject_slow_link is not None)},
        }
        write_atomic(args.json, json.dumps(result, indent=1) + "\n")
        say(f"# wrote {args.json}")
    return EXIT_FINDING if findings else EXIT_OK


# --- the job: join, measure, collect -------------------------------------------------------------

def run(args, launch: Launch, stage: list[str]) -> int:
    import torch
    import torch.distributed as dist

    rank, n = launch.rank, launch.world
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if not torch.cuda.is_available():
            raise ScriptError("--device cuda: no GPU is visible (use --device cpu)", EXIT_USAGE)
        if launch.local_rank >= torch.cuda.device_count():
            raise ScriptError(f"{launch.me()}: LOCAL_RANK {launch.local_rank} but only "
                              f"{torch.cuda.device_count()} GPU(s) are visible", EXIT_USAGE)
        device = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = "nccl" if use_cuda else "gloo"
    dead_how = args.inject_dead_how if args.inject_dead_rank == rank else None
    if dead_how == "no-join":              # sleep past rank 0's verdict, then leave
        sleep_dead(None, args.join_timeout_s + args.timeout_s + 1)
        raise ScriptError(f"{launch.me()}: injected dead rank: never joined (--inject-dead-how "
                          "no-join)")

    stage[0] = f"connecting to the store at MASTER_ADDR:MASTER_PORT {launch.master}"
    store = connect_store(dist, launch, args.timeout_s)
    hb_store = connect_store(dist, launch, args.timeout_s, False)
    me = {"host": launch.host, "local_rank": launch.local_rank, "pid": os.getpid()}
    store.set(f"joined/{rank}", json.dumps(me))
    peers = Peers(store, hb_store, rank, args.timeout_s)
    wait = datetime.timedelta(seconds=args.join_timeout_s + args.timeout_s + 10)

    joined = {}
    if rank == 0:
        stage[0] = f"waiting up to {args.join_timeout_s:g} s for all {n} ranks to join"
        end = time.monotonic() + args.join_timeout_s
        while len(joined) < n and time.monotonic() < end:
            for r in range(n):
                if r not in joined and peers.has(f"joined/{r}"):
                    joined[r] = json.loads(store.get(f"joined/{r}"))
            time.sleep(0.02)
        missing = [r for r in range(n) if r not in joined]
        if missing:
            dead = {r: f"did not join within {args.join_timeout_s:g} s (--join-timeout-s)"
                    for r in missing}
            status = report(args, launch, joined, {}, dead, backend, torch.__version__)
            store.set("go", "abort: " + ", ".join(f"rank {r}" for r in missing) + " did not join")
            end = time.monotonic() + args.timeout_s   # under srun the store leaves with rank 0:
            while store.add("go_seen", 0) < len(joined) - 1 and time.monotonic() < end:
                time.sleep(0.02)                      # let the others read the verdict first
            return status
        say(f"# {n} ranks on {len({j['host'] for j in joined.values()})} host(s), {backend}, "
            f"{len(schedule(n, args.pairwise_max_ranks))} rounds "
            f"({'ring + pairwise' if n <= args.pairwise_max_ranks else 'ring only: more than '}"
            f"{'' if n <= args.pairwise_max_ranks else str(args.pairwise_max_ranks) + ' ranks'})")
        store.set("go", "go")
    else:
        stage[0] = "waiting for rank 0 to see every rank join"
        store.wait(["go"], wait)
        verdict = store.get("go").decode()
        store.add("go_seen", 1)
        if verdict != "go":
            say(f"{PROG}: {launch.me()}: stopping: rank 0 reports that {verdict[7:]}", sys.stderr)
            return EXIT_OK

    stage[0] = "init_process_group"
    rounds = len(schedule(n, args.pairwise_max_ranks))
    overall = args.timeout_s * (2 * rounds + 4) + 30     # two passes over the rounds
    with deadline(overall, f"{launch.me()}: the measurement ({rounds} rounds)"):
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=rank,
                                world_size=n, timeout=datetime.timedelta(
                                    seconds=args.timeout_s * (4 if backend == "nccl" else 1)))
        store.add("initialized", 1)
        row = measure(args, launch, torch, dist, device, peers, stage)
        stage[0] = "sending the results to the store"
        store.set(f"row/{rank}", json.dumps(row))
        if rank != 0:
            return EXIT_OK
        rows, dead = collect(launch, peers, joined, stage)
    return report(args, launch, joined, rows, dead, backend, torch.__version__)


# --- command line --------------------------------------------------------------------------------

def size_arg(text: str) -> int:
    """argparse type for a byte count: ``4096``, ``64K``, ``16M``, ``1G`` (K = 1024)."""
    match = re.fullmatch(r"(\d+)([KMG]?)(I?B)?", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (e.g. 8, 64K, 16M)")
    return int(match[1]) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match[2]]


def pair_arg(text: str) -> tuple[int, int]:
    """argparse type for ``R,S``: two different ranks."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not two ranks R,S (e.g. 1,2)")
    a, b = (int(p) for p in parts)
    if a == b:
        raise argparse.ArgumentTypeError(f"{text!r} names the same rank twice")
    return (min(a, b), max(a, b))


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface; building it touches neither torch nor any device."""
    p = argparse.ArgumentParser(
        prog=PROG, description="Find the slow or dead rank, or the slow link, of a distributed "
        "job: every pair of ranks measures latency and bandwidth by ping-pong, every rank times a "
        "matmul loop, and rank 0 names the outlier. Exit 3 when it finds one. Launch with "
        "torchrun or srun.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="cuda: one GPU per rank (LOCAL_RANK), nccl; cpu: gloo; auto: cuda when "
                   "available (default auto)")
    p.add_argument("--timeout-s", type=number(float, 0, 3600, lo_open=True), default=30.0,
                   help="seconds without a sign of life before a partner is declared dead, and "
                   "the limit of each transfer (default 30)")
    p.add_argument("--join-timeout-s", type=number(float, 0, 3600, lo_open=True), default=60.0,
                   help="seconds rank 0 waits for every rank to join (default 60)")
    p.add_argument("--latency-bytes", type=size_arg, default=8, metavar="SIZE",
                   help="message size of the latency test (default 8; 1 to 1M)")
    p.add_argument("--bandwidth-bytes", type=size_arg, default=16 * 1024**2, metavar="SIZE",
                   help="message size of the bandwidth test (default 16M; K=1024; at most 2G)")
    p.add_argument("--iters", type=number(int, 1, 1000), default=10,
                   help="timed round trips per pair and size (default 10)")
    p.add_argument("--warmup", type=number(int, 1, 100), default=2,
                   help="untimed round trips first (default 2)")
    p.add_argument("--matmul-n", type=number(int, 16, 16384), default=1024,
                   help="size of the square float32 matrices of the compute test (default 1024)")
    p.add_argument("--matmul-iters", type=number(int, 1, 1000), default=10,
                   help="matmuls timed per rank (default 10)")
    p.add_argument("--slow-factor", type=number(float, 1, 1000, lo_open=True), default=3.0,
                   help="how many times slower than its peers a rank, link or host must be to be "
                   "named (default 3)")
    p.add_argument("--min-excess-ms", type=number(float, 0, 60000), default=0.0,
                   help="a slow rank or link must also take this many ms more per transfer, and "
                   "slow compute this many ms more per matmul, than the others (default 0; raise "
                   "it on a noisy, oversubscribed machine)")
    p.add_argument("--pairwise-max-ranks", type=number(int, 2, 1024), default=64,
                   help="largest world size that gets the pairwise pass; above it, the ring pass "
                   "only (default 64)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="rank 0 writes the matrices and findings to PATH")
    demo = p.add_argument_group("demo and self-test (fault injection)")
    demo.add_argument("--inject-slow-rank", type=number(int, 0), metavar="R",
                      help="rank R sleeps --inject-delay-ms before each send and receive")
    demo.add_argument("--inject-slow-link", type=pair_arg, metavar="R,S",
                      help="ranks R and S sleep --inject-delay-ms before each transfer between "
                      "them")
    demo.add_argument("--inject-delay-ms", type=number(float, 0, 60000, lo_open=True),
                      default=50.0, help="delay of the injections above (default 50)")
    demo.add_argument("--inject-dead-rank", type=number(int, 0), metavar="R",
                      help="rank R stops answering (see --inject-dead-how)")
    demo.add_argument("--inject-dead-how", choices=("hang", "exit", "no-join"), default="hang",
                      help="hang: join, then sleep instead of answering; exit: join, then exit 1 "
                      "before the first transfer; no-join: sleep instead of joining (default hang)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 1 <= args.latency_bytes <= 1024**2:
        parser.error(f"argument --latency-bytes: {args.latency_bytes} must be 1 to 1M bytes")
    if not 1 <= args.bandwidth_bytes <= MAX_BANDWIDTH_BYTES:
        parser.error(f"argument --bandwidth-bytes: {args.bandwidth_bytes} must be 1 byte to 2G "
                     "(a larger message measures nothing more)")
    return args


# --- main ----------------------------------------------------------------------------------------

def main(argv=None) -> int:
    args = parse_args(argv)
    launch = Launch(min_world=2)
    for option in ("inject_slow_rank", "inject_dead_rank"):
        value = getattr(args, option)
        if value is not None and value >= launch.world:
            raise ScriptError(f"--{option.replace('_', '-')} {value} is outside world size "
                              f"{launch.world} (ranks 0-{launch.world - 1})", EXIT_USAGE)
    if args.inject_slow_link and args.inject_slow_link[1] >= launch.world:
        raise ScriptError(f"--inject-slow-link {args.inject_slow_link[0]},"
                          f"{args.inject_slow_link[1]} is outside world size {launch.world}",
                          EXIT_USAGE)
    if launch.rank == 0 and args.json:
        check_output(args.json, "--json")
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    on_stop_signals()
    stage = ["starting"]
    # Every end is a hard exit (die): after a timed-out transfer, process-group teardown can wait
    # for a peer that is gone, and a checker that hangs on its way out is what it exists to prevent.
    try:
        status = run(args, launch, stage)
    except Interrupted as stop:
        die(f"{launch.me()}: interrupted during {stage[0]}", stop.status)
    except ScriptError as exc:
        die(str(exc), exc.status, args.debug)
    except Exception as exc:  # noqa: BLE001 - every failure must end this rank, not hang it
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        die(f"{launch.me()}: {stage[0]} failed: {type(exc).__name__}: {first}", debug=args.debug)
    die(None, status)


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def env_int(name: str, default: int | None = None, lo: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty, an error when
    there is no default); a non-integer or a value below ``lo`` raises ScriptError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        if default is None:
            raise ScriptError(f"environment variable {name} is not set", EXIT_USAGE)
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScriptError(f"environment variable {name}={text!r} is not an integer", EXIT_USAGE) from None
    if value < lo:
        raise ScriptError(f"environment variable {name}={value} must be >= {lo}", EXIT_USAGE)
    return value


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


def write_atomic(path: str, data) -> None:
    """Write ``data`` (str or bytes) to ``path`` through a temporary file in the same folder and
    a rename, so ``path`` holds either its old content or all of the new, never half. An OSError
    (a full disk) becomes a ScriptError naming ``path``."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if isinstance(exc, OSError):  # a full disk, a quota, a file-size limit: name the file
            raise ScriptError(f"{path}: cannot write it ({exc.strerror or exc}); it keeps its "
                              "previous content") from None
        raise


class deadline:
    """``with deadline(seconds, "what"):`` bounds a wait that has no timeout of its own (or one
    that retries): after ``seconds`` it prints ``PROG: error: WHAT did not finish within S s``
    and ends the process at once (os._exit, since the stuck call cannot be unwound)."""

    def __init__(self, seconds: float, what: str):
        self.timer = threading.Timer(seconds, self._expire, (seconds, what))
        self.timer.daemon = True

    @staticmethod
    def _expire(seconds: float, what: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {what} did not finish within {seconds:g} s\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) or SIGTERM (scancel, a job's time limit), raised where the main thread is
    by the handler ``on_stop_signals`` installs. ``signum`` is the signal, ``name`` its name and
    ``status`` the exit status of a run it stops, 128 + signum (130, 143). A KeyboardInterrupt,
    so what catches Ctrl-C catches both; run_main exits with ``status``."""

    def __init__(self, signum: int = 2):  # SIGINT
        import signal
        self.signum, self.status, self.name = signum, 128 + signum, signal.Signals(signum).name
        super().__init__(self.name)


def on_stop_signals() -> list[int]:
    """From now on Ctrl-C and SIGTERM raise Interrupted, so that a run writes what it has before
    it exits with 128 + the signal; Ctrl-C too where a shell started the job with SIGINT ignored
    (a background job). Returns the list that receives each signal as it comes, for the code that
    sees the exception only wrapped (DCP wraps what a save raises)."""
    import signal
    stopped_by: list[int] = []

    def stop(signum, frame):
        stopped_by.append(signum)
        raise Interrupted(signum)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    return stopped_by


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline to ``stream`` (stdout) in one write, and flush: the ranks of
    a job share the launcher's stdout and stderr, and print() writes the newline apart, so two
    ranks' lines could run together. A reader of stdout that left (``| head -1``) ends no rank,
    since the others would fail in their next collective without it: the rank goes on."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout or not reader_left():
            raise


def die(message: str | None, status: int = EXIT_FAILURE, debug: bool = False) -> None:
    """End a rank of a distributed script at once: ``PROG: error: MESSAGE`` (its first line) on
    stderr, after the traceback of the exception being handled when ``debug``, then
    os._exit(status); no line when ``message`` is None. Not sys.exit: after a failed collective,
    process-group teardown can wait for peers that are gone, and a rank that hangs on its way out
    is what these scripts exist to prevent. Called while handling the BrokenPipeError of a reader
    that closed stdout (``| head -1``), it exits quietly with EXIT_OK, as run_main does; output
    that a reader gone meanwhile can no longer take is dropped."""
    if reader_left():
        message, status = None, EXIT_OK
    elif debug and sys.exc_info()[1] is not None:
        traceback.print_exc()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone meanwhile, a closed stdout: the exit drops it
        pass
    if message is not None:
        first = " ".join(str(message).strip().splitlines()[:1]) or "unknown error"
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {first}\n")
        sys.stderr.flush()
    os._exit(status)


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


class Launch:
    """This process's place in a distributed run, from the environment: torchrun's (or any
    env:// launch's) RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE when RANK or WORLD_SIZE is
    set; else plain srun's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID when it started more than
    one task; else a lone process, rank 0 of 1. ``launcher`` says which: "torchrun", "env", "srun"
    or "python". Each variable is read with env_int, so one that is not an integer is a usage
    error naming it; so are fewer ranks than ``min_world``, a rank outside the world and, for more
    than one rank, a missing MASTER_ADDR or MASTER_PORT or a port outside 1-65535. ``addr`` and
    ``port`` are where rank 0 (or torchrun's agent) hosts the rendezvous; ``master`` is
    "ADDR:PORT", None for a lone process (it makes a group of one without a network port)."""

    def __init__(self, min_world: int = 1):
        import socket
        env = os.environ
        self.host = socket.gethostname()
        if "RANK" in env or "WORLD_SIZE" in env:
            self.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
            names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        elif "SLURM_PROCID" in env and env_int("SLURM_NTASKS", 1, lo=1) > 1:
            self.launcher, names = "srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
        else:
            self.launcher, names = "python", None
        self.rank, self.world = (env_int(names[0]), env_int(names[1], lo=1)) if names else (0, 1)
        self.local_rank = env_int(names[2], 0) if names else 0
        self.local_world = env_int("LOCAL_WORLD_SIZE", 1, lo=1)
        if self.world < min_world:
            raise ScriptError(f"needs at least {min_world} ranks (world size is {self.world}); launch "
                              f"with torchrun --nproc-per-node {min_world} (or more), or srun", EXIT_USAGE)
        if self.rank >= self.world:
            raise ScriptError(f"rank {self.rank} is outside world size {self.world} (check "
                              f"{names[0]} and {names[1]})", EXIT_USAGE)
        self.addr, self.port, self.master = None, None, None
        if self.launcher != "python":
            self._read_master()

    def _read_master(self) -> None:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
        if missing and self.world > 1:
            both = len(missing) > 1
            raise ScriptError(
                f"MASTER_ADDR and MASTER_PORT must be set for rank {self.rank} of {self.world} "
                f"(launched by {self.launcher}): environment variable{'s' * both} "
                f"{' and '.join(missing)} {'are' if both else 'is'} not set; export "
                f"{'them' if both else 'it'} (the first node's address and a free port) or launch "
                "with torchrun", EXIT_USAGE)
        if not missing:
            self.addr, self.port = os.environ["MASTER_ADDR"].strip(), env_int("MASTER_PORT")
            if not 1 <= self.port <= 65535:
                raise ScriptError(f"environment variable MASTER_PORT={self.port} is not a TCP port "
                                  "(1-65535)", EXIT_USAGE)
            self.master = f"{self.addr}:{self.port}"

    def me(self) -> str:
        return f"rank {self.rank} on {self.host}"

    def command(self, argv=None) -> str:
        """The command line of the run, for a results file: ``command_line()`` with the launcher's
        own in front of it (``torchrun --nnodes N --nproc-per-node M``, ``srun --ntasks N``)."""
        line = command_line(argv)
        if self.launcher == "torchrun":
            nnodes = os.environ.get("GROUP_WORLD_SIZE", "1")
            return f"torchrun --nnodes {nnodes} --nproc-per-node {self.local_world} {line.removeprefix('python ')}"
        return f"srun --ntasks {self.world} {line}" if self.launcher == "srun" else line


def command_line(argv=None, script: str | None = None) -> str:
    """``python SCRIPT ARGS``, how this script was run, for a results file's ``command``: SCRIPT
    is sys.argv[0] relative to the current folder, ARGS sys.argv[1:]; where main was called with
    ``argv`` (a test, a calculator page) ARGS are ``argv``, and SCRIPT is ``script`` (the file's
    name) when sys.argv[0] names another program."""
    import shlex
    path = sys.argv[0]
    if argv is not None and script and os.path.basename(path) != script:
        path = script
    path = os.path.relpath(path) if os.path.exists(path) else path
    return shlex.join(["python", path, *(sys.argv[1:] if argv is None else argv)])


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
