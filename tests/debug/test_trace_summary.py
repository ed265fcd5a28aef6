"""Tests of scripts/debug/trace_summary.py.

A real trace: the book's training example (scripts/training/train_example.py), DDP on two CPU
processes with gloo, profiles steps 2-4 (``--profile-steps``) and writes one Chrome trace per
rank. Its summary must add up: in each ProfilerStep#N range, the named ranges plus "other" and
compute-only + communication-only + overlap + idle are the step's length within 1 µs (the trace's
times are µs with three decimals; the script adds them as integer ns); the steps are the trace's
ProfilerStep#N events, read here independently; communication is non-zero on both ranks (gloo's
all-reduce of DDP's gradient bucket and of the logged statistics) and lies between the longest
single communication event and the sum of them all; overlap <= min(communication, compute); the
top operators are sorted by self time. The gzipped trace gives the same summary.

A hand-made CUDA trace (kernels on two streams, an NCCL kernel overlapping a GEMM) checks the GPU
timeline against numbers worked out by hand, and the interval arithmetic is checked against a
brute-force count on a grid. Careless inputs: not JSON, a pickle, an empty file, JSON without
traceEvents, a file over --max-mb, a gzip that is truncated or decompresses past --max-mb.
"""

from __future__ import annotations

import gzip
import json
import random

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import RANKS, REPO, import_script, run_torchrun

SCRIPT = "trace_summary.py"
SMALL = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--batch-size", "4",
         "--vocab", "256"]
US = 1e-3  # 1 µs in ms: the tolerance of every sum below


@pytest.fixture(scope="module")
def ts():
    return import_script(REPO / "scripts" / "debug" / SCRIPT)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Two ranks of train_example.py (DDP, gloo), 4 steps, steps 2-4 profiled."""
    out = tmp_path_factory.mktemp("prof")
    res = run_torchrun(REPO / "scripts" / "training", "train_example.py",
                       ["--strategy", "ddp", "--steps", "4", *SMALL, "--profile-steps", "2:4",
                        "--profile-dir", str(out)], timeout=120)
    assert res.returncode == 0, res.output
    return [out / f"trace_rank{rank}.json" for rank in (0, 1)]


def summary_of(ts, capsys, path, *args):
    assert ts.main([str(path), *args]) == 0
    return capsys.readouterr().out


@RANKS
def test_a_two_rank_ddp_trace_adds_up(launch, traces, tmp_path):
    res = launch.python(SCRIPT, [str(traces[0]), "--json", str(tmp_path / "s.json"), "--min-gap-ms", "0.5"])
    assert res.returncode == 0 and not res.stderr, res.output
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["schema"] == "trace_summary/1" and s["timeline"] == "cpu threads"
    assert (s["distributed"]["backend"], s["distributed"]["world_size"]) == ("gloo", 2)
    raw = json.loads(traces[0].read_text())["traceEvents"]
    marks = sorted((e["ts"], e["dur"]) for e in raw if e.get("name", "").startswith("ProfilerStep#"))
    assert len(s["steps"]) == len(marks) == 3
    for step, (_, dur) in zip(s["steps"], marks, strict=True):
        assert step["duration_ms"] == pytest.approx(dur / 1e3, abs=US)
        assert {"data", "forward", "backward", "grad_norm", "optimizer"} <= {r["name"] for r in step["ranges"]}
        assert len(step["inside"]) == 1 and step["inside"][0].startswith("train_step_")
        assert sum(r["ms"] for r in step["ranges"]) + step["other_ms"] == pytest.approx(step["duration_ms"], abs=US)
        assert step["other_ms"] >= -US
        parts = ("compute_only_ms", "communication_only_ms", "overlap_ms", "idle_ms")
        assert sum(step[k] for k in parts) == pytest.approx(step["duration_ms"], abs=US)
        assert all(step[k] >= -US for k in parts)
        assert step["overlap_ms"] <= min(step["communication_ms"], step["compute_ms"]) + US
    t = s["totals"]
    comm = [e["dur"] / 1e3 for e in raw if e.get("ph") == "X" and "gloo" in e.get("name", "")]
    assert comm and max(comm) - US <= t["communication_ms"]
    every_comm = [e["dur"] / 1e3 for e in raw if e.get("ph") == "X"
                  and any(w in e.get("name", "").lower() for w in ("gloo", "c10d", "allreduce", "all_reduce"))]
    assert t["communication_ms"] <= sum(every_comm) + US
    assert t["overlap_ms"] <= min(t["communication_ms"], t["compute_ms"]) + US
    assert sum(t[k] for k in ("compute_only_ms", "communication_only_ms", "overlap_ms", "idle_ms")) == \
        pytest.approx(t["window_ms"], abs=US)
    top = s["top_cpu_ops"]
    assert len(top) == 15 and top == sorted(top, key=lambda r: -r["self_ms"])
    assert sum(r["share"] for r in top) <= 1 + 1e-9 and "aten::mm" in [r["name"] for r in top]
    assert all(r["communication"] == ("c10d" in r["name"]) for r in top)
    assert not s["top_kernels"]
    # the main thread and gloo's threads, each busy for less than its span
    assert len(s["tracks"]) >= 2 and all(0 < r["busy_ms"] <= r["span_ms"] + US for r in s["tracks"])
    assert s["memory"][0]["device"] == "cpu" and s["memory"][0]["peak_allocated_mib"] > 0  # profile_memory=True
    for heading in ("## top CPU operators by self time", "## communication and compute", "## idle gaps",
                    "## steps (ms): the named ranges inside each step (inside train_step_2"):
        assert heading in res.stdout


@RANKS
def test_both_ranks_communicate_and_the_gzipped_trace_reads_the_same(ts, traces, tmp_path, capsys):
    for rank, trace in enumerate(traces):
        zipped = tmp_path / f"{trace.name}.gz"
        zipped.write_bytes(gzip.compress(trace.read_bytes()))
        plain, packed = tmp_path / f"{rank}.json", tmp_path / f"{rank}.gz.json"
        summary_of(ts, capsys, trace, "--json", str(plain))
        summary_of(ts, capsys, zipped, "--json", str(packed))
        a, b = json.loads(plain.read_text()), json.loads(packed.read_text())
        assert a.pop("trace") != b.pop("trace") and a == b
        assert a["distributed"]["rank"] == rank and a["totals"]["communication_ms"] > 0


def event(name, cat, pid, tid, ts, dur):
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur}


# A CUDA trace in Kineto's shapes: a CPU thread (pid 100) with the step and a GEMM's launch; GPU 0
# (pid 0) with two GEMMs on stream 7 and an NCCL all-reduce on stream 20 (a kernel, inside its
# nccl:all_reduce range, which counts too). By hand, in µs: communication [290, 610] = 320,
# compute [100, 400] + [500, 700] = 500, overlap [290, 400] + [500, 610] = 220, busy [100, 700];
# in the step [0, 1000]: idle 400, compute only 280, communication only 100.
GPU_TRACE = {"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    event("ProfilerStep#5", "user_annotation", 100, 100, 0, 1000),
    event("forward", "user_annotation", 100, 100, 5, 600),
    event("aten::mm", "cpu_op", 100, 100, 10, 40),
    event("cudaLaunchKernel", "cuda_runtime", 100, 100, 20, 10),
    event("ProfilerStep#5", "gpu_user_annotation", 0, 7, 100, 600),  # the GPU's copy: not a step, not work
    event("sm90_xmma_gemm_f32f32", "kernel", 0, 7, 100, 300),
    event("sm90_xmma_gemm_f32f32", "kernel", 0, 7, 500, 200),
    event("nccl:all_reduce", "gpu_user_annotation", 0, 20, 290, 320),
    event("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 0, 20, 300, 300),
    {"ph": "i", "name": "[memory]", "pid": 100, "tid": 100, "ts": 15,
     "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 2**30, "Bytes": 512}},
]}


def test_a_cuda_trace_is_summarized_on_the_gpu_streams(ts, tmp_path, capsys):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(GPU_TRACE))
    out = summary_of(ts, capsys, path, "--json", str(tmp_path / "s.json"), "--min-gap-ms", "0.05")
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["timeline"] == "gpu streams"
    ms = pytest.approx
    assert s["totals"] == {"window_ms": ms(0.6), "communication_ms": ms(0.32), "compute_ms": ms(0.5),
                           "overlap_ms": ms(0.22), "communication_only_ms": ms(0.1), "compute_only_ms": ms(0.28),
                           "idle_ms": ms(0)}
    (step,) = s["steps"]
    assert (step["step"], step["duration_ms"], step["idle_ms"]) == (5, ms(1.0), ms(0.4))
    assert (step["compute_only_ms"], step["communication_only_ms"], step["overlap_ms"]) == (ms(0.28), ms(0.1),
                                                                                          ms(0.22))
    assert step["ranges"] == [{"name": "forward", "ms": ms(0.6), "count": 1}] and step["other_ms"] == ms(0.4)
    assert [(k["name"][:20], k["calls"], k["communication"]) for k in s["top_kernels"]] == [
        ("sm90_xmma_gemm_f32f3", 2, False), ("ncclDevKernel_AllRed", 1, True)]
    assert s["top_cpu_ops"][0]["self_ms"] == ms(0.03)  # aten::mm less its launch
    stream7 = next(r for r in s["tracks"] if r["track"] == "GPU 0 / stream 7")
    assert (stream7["gaps"], stream7["gap_ms"], stream7["largest"]) == (1, ms(0.1), [{"at_ms": ms(0.4), "ms": ms(0.1)}])
    assert s["memory"] == [{"device": "cuda:0", "peak_allocated_mib": 1024.0, "events": 1}]
    assert "## top GPU kernels by time" in out and "[comm]" in out


def test_a_trace_without_steps_is_summarized_whole(ts, tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([e for e in GPU_TRACE["traceEvents"] if "ProfilerStep" not in e["name"]]))
    out = summary_of(ts, capsys, path, "--json", str(tmp_path / "s.json"))
    assert json.loads((tmp_path / "s.json").read_text())["steps"] == []
    assert "no ProfilerStep#N ranges" in out


def test_interval_arithmetic_matches_a_brute_force_count(ts):
    rng = random.Random(0)
    for _ in range(200):
        x, y = ([(a, a + rng.randint(0, 8)) for a in (rng.randint(0, 40) for _ in range(rng.randint(0, 6)))]
                for _ in range(2))
        ux, uy = ts.union(x), ts.union(y)
        cover = [{t for a, b in iv for t in range(a, b)} for iv in (x, y)]
        assert {t for a, b in ux for t in range(a, b)} == cover[0]
        assert all(b1 < a2 for (_, b1), (a2, _) in zip(ux, ux[1:], strict=False))  # disjoint, sorted
        assert ts.length(ts.intersect(ux, uy)) == len(cover[0] & cover[1])
        assert ts.length(ts.subtract(ux, uy)) == len(cover[0] - cover[1])
        assert ts.length(ux, 10, 30) == len({t for t in cover[0] if 10 <= t < 30})


TINY = json.dumps({"traceEvents": [event("aten::mm", "cpu_op", 1, 1, 0, 5)]})
PAYLOAD = json.dumps({"traceEvents": [event(f"op{i}", "cpu_op", 1, 1, i * 10, 5) for i in range(400)]}).encode()
BAD_INPUT = [
    Case("not-json", ["t.csv"], r"trace t\.csv: not JSON \(it starts with b'step,los'\)",
         files={"t.csv": "step,loss\n1,2.5\n"}),
    Case("a-pickle", ["t.pt"], r"trace t\.pt: not JSON \(it starts with b'\\x80\\x04",
         files={"t.pt": b"\x80\x04K\x01."}),
    Case("broken-json", ["t.json"], r"trace t\.json: not valid JSON", files={"t.json": '{"traceEvents": ['}),
    Case("empty-file", ["t.json"], r"trace t\.json: is empty", files={"t.json": ""}),
    Case("json-without-trace-events", ["t.json"], r"trace t\.json: JSON, but not a Chrome trace",
         files={"t.json": '{"benchmark": "mamf", "results": []}'}),
    Case("no-timed-events", ["t.json"], r"trace t\.json: no timed events",
         files={"t.json": '{"traceEvents": [{"ph": "M", "name": "process_name"}]}'}),
    Case("over-max-mb", ["t.json", "--max-mb", "1"], r"trace t\.json: 2 MiB, over --max-mb 1",
         files={"t.json": " " * (2 << 20) + TINY}),
    Case("gzip-truncated", ["t.json.gz"], r"trace t\.json\.gz: the gzip file is truncated",
         files={"t.json.gz": gzip.compress(PAYLOAD, mtime=0)[:1000]}),
    Case("gzip-over-max-mb", ["t.json.gz", "--max-mb", "1"], r"trace t\.json\.gz: decompresses to more than 1 MiB",
         files={"t.json.gz": gzip.compress(b" " * (3 << 20) + TINY.encode(), mtime=0)}),
    Case("gzip-damaged", ["t.json.gz"], r"trace t\.json\.gz: not a readable gzip file",
         files={"t.json.gz": b"\x1f\x8b\x08\x00" + b"\xff" * 64}),
    Case("missing", ["none.json"], r"trace none\.json: does not exist"),
    Case("folder", ["{tmp}"], r"trace .*: is a folder"),
    Case("empty-path", [""], r"argument trace: must not be empty"),
    Case("json-onto-the-trace", ["t.json", "--json", "t.json"], r"--json t\.json: is also an input",
         files={"t.json": TINY}),
    Case("top-zero", ["t.json", "--top", "0"], r"--top: 0 must be >= 1", files={"t.json": TINY}),
    Case("gap-nan", ["t.json", "--min-gap-ms", "nan"], r"--min-gap-ms: 'nan' is not a finite number"),
    Case("max-mb-zero", ["t.json", "--max-mb", "0"], r"--max-mb: 0 must be >= 1"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused(f"debug/{SCRIPT}", case, tmp_path)
