#!/usr/bin/env python
"""trace_summary.py: what a torch.profiler trace says about a training step, in numbers: the
operators (or CUDA kernels) with the most self time, the time in communication and in compute and
how much of the two overlaps, the idle gaps of each thread or stream, and each profiler step
broken down into its named ranges.

It reads the Chrome trace JSON that ``prof.export_chrome_trace(path)`` writes (gzipped too, as
``.json.gz``; the gzip header is what counts, not the name), and only reads it: nothing is
unpickled or run. Times in the trace are microseconds; the tables print milliseconds.

The timeline is the GPU's streams when the trace holds CUDA kernels (``kernel``, ``gpu_memcpy``,
``gpu_memset`` events), else the CPU's threads. Work on it is an operator (a ``cpu_op`` on the
CPU, a kernel, copy or memset on the GPU) or any event whose name says communication; the
ranges of ``record_function`` and ``ProfilerStep#N`` label the work but are not work themselves.
The communication rule: a name is communication when, lower-cased, it contains one of nccl,
gloo, c10d, all_reduce, allreduce, all_gather, allgather, reduce_scatter, reducescatter,
all_to_all, alltoall, sendrecv or record_param_comms; an operator inside a communication event
of its own thread is communication too. Compute is the rest of the work. Communication and
compute are the lengths of the unions of their intervals over all threads (or streams), overlap
the length of their intersection, so overlap <= min(communication, compute); idle is the time in
no work at all (on the CPU, Python running between operators is idle). A step is a ``ProfilerStep#N`` range (the profiler makes one per ``prof.step()``
in its active window); its named ranges are the ``record_function`` ranges one level inside it
(through a single range that wraps the whole step, such as ``train_step_N``), and ``other`` is
the rest of the step. On a GPU the steps are the CPU's ranges, while kernels run later: a kernel
counts in the step during which it ran. Memory, when recorded (``profile_memory=True``): the
peak of the allocator's "Total Allocated" in the trace's ``[memory]`` events, per device (on
CUDA the caching allocator's allocated bytes; on the CPU the bytes allocated since profiling
started and not yet freed).

    python trace_summary.py prof/trace_rank0.json [--top 15] [--min-gap-ms 1] [--json summary.json]

Record a trace with the book's training example (2 CPU processes, gloo), then summarize it::

    torchrun --standalone --nproc-per-node 2 scripts/training/train_example.py --strategy ddp \\
        --steps 6 --profile-steps 4:6 --profile-dir prof
    python scripts/debug/trace_summary.py prof/trace_rank0.json

Example output (the trace of the commands above, 2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/debug/trace_summary.py prof/trace_rank0.json --top 5
    # trace_summary.py: prof/trace_rank0.json: 16,897 timed events, 3 ProfilerStep ranges, timeline: cpu threads (3), gloo rank 0 of 2
    ## top CPU operators by self time
        self ms  share   calls  name
        192.413  49.1%     153  aten::mm
         47.972  12.2%      12  aten::_scaled_dot_product_flash_attention_for_cpu_backward
         18.639   4.8%      12  aten::_scaled_dot_product_flash_attention_for_cpu
         14.102   3.6%      12  aten::gelu_backward
         12.020   3.1%      12  aten::gelu
    ## communication and compute on the cpu threads
      communication: name contains nccl, gloo, c10d, all_reduce, allreduce, all_gather, allgather, reduce_scatter, reducescatter, all_to_all, alltoall, sendrecv, record_param_comms (lower-cased)
      window 453.579 ms: compute 382.611 ms, communication 39.781 ms (3% of it under compute), overlap 1.182 ms, idle 32.368 ms
    ## idle gaps of 1 ms or more, per thread
      track                                      span ms   busy ms  gaps    gap ms  largest (at ms: ms)
      python / thread 29957 (python)             453.579   392.155     8    39.445  127.4: 11.241, 440.6: 7.598, 283.9: 5.019
      python / thread 29969 (pt_gloo_runloop)    311.094    28.656     2   282.439  290.9: 143.631, 138.6: 138.808
      python / thread 29970 (python)             307.486     9.056     2   298.430  140.8: 149.944, 292.2: 148.486
    ## steps (ms): the timeline within each ProfilerStep#N
      step       total   compute-only   comm-only   overlap      idle
      #3       150.155        126.712      11.632     0.000    11.811
      #4       151.309        125.306      15.272     1.165     9.566
      #5       152.426        129.412      11.696     0.017    11.302
    ## steps (ms): the named ranges inside each step (inside train_step_4, train_step_5, train_step_6)
      step            data      forward     backward    grad_norm    optimizer        other
      #3            2.197       42.342       88.009        1.458        8.716        7.434
      #4            2.122       47.268       84.292        2.526        8.706        6.394
      #5            2.206       42.523       86.663        9.240        4.851        6.943
    ## memory: peak allocated 36.1 MiB on cpu (6,634 allocator events)

Exit status: 0 ok, 1 failure, 2 usage error or a file that is not a readable Chrome trace.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
import traceback

PROG = "trace_summary.py"
SCHEMA = "trace_summary/1"
COMM_WORDS = ("nccl", "gloo", "c10d", "all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
              "reducescatter", "all_to_all", "alltoall", "sendrecv", "record_param_comms")
COMM_RULE = "name contains " + ", ".join(COMM_WORDS) + " (lower-cased)"
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_CATEGORIES = (*GPU_WORK, "gpu_user_annotation")
STEP = re.compile(r"ProfilerStep#(\d+)$")
DEVICE_TYPES = {0: "cpu", 1: "cuda"}  # c10::DeviceType of a [memory] event


def is_comm(name: str) -> bool:
    """The communication rule: the lower-cased name contains one of COMM_WORDS."""
    low = name.lower()
    return any(word in low for word in COMM_WORDS)


# --- reading the trace ---------------------------------------------------------------------------

def gunzip(data: bytes, limit: int, path: str) -> bytes:
    """The decompressed bytes of a gzip file (every member), at most ``limit`` bytes. Raises
    ScriptError (usage) on a damaged or truncated file, or one that decompresses to more."""
    import zlib
    out, size, rest = [], 0, data
    while rest:
        member = zlib.decompressobj(wbits=31)
        tail = rest
        while not member.eof:
            try:
                chunk = member.decompress(tail, limit + 1 - size)  # never 0: that means no limit
            except zlib.error as err:
                raise ScriptError(f"trace {path}: not a readable gzip file ({err})", EXIT_USAGE) from None
            out.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ScriptError(f"trace {path}: decompresses to more than {limit >> 20} MiB (--max-mb); "
                                  "raise --max-mb if this machine has the memory", EXIT_USAGE)
            tail = member.unconsumed_tail
            if not chunk and not tail:
                raise ScriptError(f"trace {path}: the gzip file is truncated (it ends before its "
                                  "last block); copy it again", EXIT_USAGE)
        rest = member.unused_data.lstrip(b"\0")  # padding after the last member is allowed
    return b"".join(out)


def load_trace(path: str, max_mb: int) -> tuple[list, dict]:
    """(the trace's events, its other top-level keys) from a Chrome trace JSON file, gzipped or
    not: an object with a ``traceEvents`` list, or a bare list of events. Raises ScriptError
    (usage) naming the file when it is missing, over ``max_mb`` MiB, empty, not JSON or not a
    Chrome trace."""
    limit = max_mb << 20
    with contextlib.suppress(OSError):
        if os.path.isfile(path) and os.path.getsize(path) > limit:
            raise ScriptError(f"trace {path}: {os.path.getsize(path) / 2**20:.0f} MiB, over --max-mb {max_mb}; "
                              "raise --max-mb if this machine has the memory (parsing takes several "
                              "times the file's size)", EXIT_USAGE)
    data = read_input(path, "trace", limit=limit)
    if data[:2] == b"\x1f\x8b":
        data = gunzip(data, limit, path)
    if not data.strip():
        raise ScriptError(f"trace {path}: is empty; expected the JSON file that "
                          "prof.export_chrome_trace() writes", EXIT_USAGE)
    if data.lstrip()[:1] not in b'{["-0123456789tfn':  # no JSON value starts otherwise (a pickle, a .nsys-rep)
        raise ScriptError(f"trace {path}: not JSON (it starts with {data.lstrip()[:8]!r}); expected the JSON "
                          "file that prof.export_chrome_trace() writes", EXIT_USAGE)
    doc = parse_json(data, "trace", path)
    if isinstance(doc, list):
        events, meta = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, meta = doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"}
    else:
        raise ScriptError(f"trace {path}: JSON, but not a Chrome trace (an object with a 'traceEvents' "
                          "list, as prof.export_chrome_trace() writes)", EXIT_USAGE)
    return events, meta


def _ns(value) -> int | None:
    """A trace time in microseconds as integer nanoseconds; None unless a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(value * 1000)


def _key(value):
    return value if isinstance(value, (int, str)) else str(value)


class Trace:
    """The events of a trace, sorted for the summaries: ``spans`` the complete events ("X") as
    dicts with name, cat, track (pid, tid), start and end in integer ns; ``memory`` the
    ``[memory]`` instant events; ``names`` a label per track; ``skipped`` the events that were
    not well-formed."""

    def __init__(self, events: list):
        self.spans, self.memory, self.names, self.skipped = [], [], {}, 0
        process = {}
        for e in events:
            if not isinstance(e, dict):
                self.skipped += 1
                continue
            ph = e.get("ph")
            track = (_key(e.get("pid")), _key(e.get("tid")))
            if ph == "X":
                start, dur = _ns(e.get("ts")), _ns(e.get("dur"))
                if start is None or dur is None or dur < 0:
                    self.skipped += 1
                    continue
                self.spans.append({"name": str(e.get("name", "")), "cat": str(e.get("cat", "")),
                                   "track": track, "start": start, "end": start + dur})
            elif ph in ("i", "I") and e.get("name") == "[memory]" and isinstance(e.get("args"), dict):
                self.memory.append(e["args"])
            elif ph == "M" and isinstance(e.get("args"), dict):
                if e.get("name") == "thread_name":
                    self.names[track] = str(e["args"].get("name", ""))
                elif e.get("name") == "process_name":
                    process[track[0]] = str(e["args"].get("name", ""))
        self.spans.sort(key=lambda s: (s["start"], -s["end"]))
        self.process = process
        self.gpu = any(s["cat"] in GPU_WORK for s in self.spans)
        self.origin = self.spans[0]["start"] if self.spans else 0

    def label(self, track) -> str:
        pid, tid = track
        thread = self.names.get(track, "").strip() or f"tid {tid}"
        return f"{self.process.get(pid, '').strip() or f'pid {pid}'} / {thread}"

    def on_timeline(self, s: dict) -> bool:
        """The span lies on the timeline summarized: GPU tracks on a CUDA trace, else the CPU's."""
        return (s["cat"] in GPU_CATEGORIES) == self.gpu and s["cat"] != "Trace"

    def is_work(self, s: dict) -> bool:
        if not self.on_timeline(s):
            return False
        return s["cat"] in (GPU_WORK if self.gpu else ("cpu_op",)) or is_comm(s["name"])


# --- interval arithmetic (integer ns) ------------------------------------------------------------

def union(intervals) -> list[tuple[int, int]]:
    """Sorted, disjoint intervals covering the same time as ``intervals``."""
    out: list[list[int]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect(x: list, y: list) -> list[tuple[int, int]]:
    """The intersection of two sorted, disjoint interval lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: list, y: list) -> list[tuple[int, int]]:
    """``x`` minus ``y``, both sorted and disjoint."""
    out, j = [], 0
    for a, b in x:
        while j < len(y) and y[j][1] <= a:
            j += 1
        k, cur = j, a
        while k < len(y) and y[k][0] < b:
            if y[k][0] > cur:
                out.append((cur, y[k][0]))
            cur = max(cur, y[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def length(intervals, lo: int | None = None, hi: int | None = None) -> int:
    """Total length of disjoint ``intervals``, clipped to [lo, hi] when given."""
    total = 0
    for a, b in intervals:
        a, b = a if lo is None else max(a, lo), b if hi is None else min(b, hi)
        total += max(0, b - a)
    return total


# --- the summaries -------------------------------------------------------------------------------

def by_track(spans) -> dict:
    tracks: dict = {}
    for s in spans:
        tracks.setdefault(s["track"], []).append(s)
    return tracks


def self_times(trace: Trace) -> None:
    """Set ``self`` on every span: its duration less the time of the spans nested directly in it
    on its own track (a child that runs past its parent counts up to the parent's end)."""
    for spans in by_track(trace.spans).values():
        stack: list[dict] = []
        for s in spans:  # sorted by start, longest first
            s["self"] = s["end"] - s["start"]
            while stack and stack[-1]["end"] <= s["start"]:
                stack.pop()
            if stack:
                parent = stack[-1]
                parent["self"] -= min(s["end"], parent["end"]) - s["start"]
            stack.append(s)
    for s in trace.spans:
        s["self"] = max(0, s["self"])


def top_table(spans, top: int, own: str) -> list[dict]:
    """The ``top`` names by total ``own`` time ("self" or duration) of ``spans``, largest first."""
    groups: dict[str, list[int]] = {}
    for s in spans:
        g = groups.setdefault(s["name"], [0, 0])
        g[0] += s["self"] if own == "self" else s["end"] - s["start"]
        g[1] += 1
    total = sum(g[0] for g in groups.values()) or 1
    rows = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
    return [{"name": name, "self_ms": t / 1e6, "share": t / total, "calls": n, "communication": is_comm(name)}
            for name, (t, n) in rows]


def timeline(trace: Trace) -> dict:
    """Per track, the union of its work, its communication and its compute (work outside
    communication); and the unions over all tracks."""
    tracks = {}
    for track, spans in by_track(s for s in trace.spans if trace.is_work(s)).items():
        comm = union((s["start"], s["end"]) for s in spans if is_comm(s["name"]))
        work = union((s["start"], s["end"]) for s in spans)
        tracks[track] = {"work": work, "comm": comm, "compute": subtract(work, comm)}
    comm = union(i for t in tracks.values() for i in t["comm"])
    compute = union(i for t in tracks.values() for i in t["compute"])
    return {"tracks": tracks, "comm": comm, "compute": compute, "overlap": intersect(comm, compute),
            "busy": union([*comm, *compute])}


def split(line: dict, lo: int, hi: int) -> dict:
    """The window [lo, hi] of the timeline in ms: communication, compute, their overlap, each
    alone, and idle; compute_only + communication_only + overlap + idle = window."""
    comm, compute, overlap = (length(line[k], lo, hi) for k in ("comm", "compute", "overlap"))
    busy = length(line["busy"], lo, hi)
    return {"window_ms": (hi - lo) / 1e6, "communication_ms": comm / 1e6, "compute_ms": compute / 1e6,
            "overlap_ms": overlap / 1e6, "communication_only_ms": (comm - overlap) / 1e6,
            "compute_only_ms": (compute - overlap) / 1e6, "idle_ms": (hi - lo - busy) / 1e6}


def gaps(trace: Trace, line: dict, min_gap_ns: int) -> list[dict]:
    """Per track of the timeline: its span from first to last work, the busy time, and the gaps
    between two pieces of work at least ``min_gap_ns`` long (count, total, the three largest)."""
    rows = []
    for track, t in sorted(line["tracks"].items(), key=lambda kv: str(kv[0])):
        work = t["work"]
        found = [(b, a2) for (_, b), (a2, _) in zip(work, work[1:], strict=False) if a2 - b >= min_gap_ns]
        largest = sorted(found, key=lambda g: g[0] - g[1])[:3]
        rows.append({"track": trace.label(track), "pid": track[0], "tid": track[1],
                     "span_ms": (work[-1][1] - work[0][0]) / 1e6, "busy_ms": length(work) / 1e6,
                     "gaps": len(found), "gap_ms": sum(b - a for a, b in found) / 1e6,
                     "largest": [{"at_ms": (a - trace.origin) / 1e6, "ms": (b - a) / 1e6} for a, b in largest]})
    return rows


def phases(step: dict, annotations: list[dict]) -> tuple[list[str], list[dict]]:
    """The named ranges one level inside ``step`` on its track: the outermost annotations within
    it, through any single range that wraps all the others (``train_step_N``). Returns (the
    wrappers passed through, the ranges)."""
    inside = [a for a in annotations if a is not step and step["start"] <= a["start"] < step["end"]]
    wrappers: list[str] = []
    while True:
        outer, end = [], -1
        for a in inside:  # sorted by start, longest first: a range starting before `end` is nested
            if a["start"] >= end:
                outer.append(a)
                end = a["end"]
        if len(outer) != 1 or len(inside) == 1:  # a lone range with nothing inside is a range
            return wrappers, outer
        wrappers.append(outer[0]["name"])
        inside = [a for a in inside if a is not outer[0]]


def steps(trace: Trace, line: dict) -> list[dict]:
    """Each ProfilerStep#N range (from the CPU side): its window on the timeline (split) and its
    named ranges, which with ``other`` add up to the step."""
    cpu = [s for s in trace.spans if s["cat"] not in GPU_CATEGORIES]
    annotations = by_track(a for a in cpu if a["cat"] == "user_annotation" and not STEP.match(a["name"]))
    seen, out = set(), []
    for s in cpu:
        m = STEP.match(s["name"])
        if not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        wrappers, ranges = phases(s, annotations.get(s["track"], []))
        named: dict[str, list] = {}
        for a in ranges:
            n = named.setdefault(a["name"], [0, 0])
            n[0] += min(a["end"], s["end"]) - a["start"]
            n[1] += 1
        lo, hi = s["start"], s["end"]
        other = hi - lo - sum(t for t, _ in named.values())
        out.append({"step": int(m.group(1)), "start_ms": (lo - trace.origin) / 1e6, "duration_ms": (hi - lo) / 1e6,
                    "inside": wrappers, "ranges": [{"name": k, "ms": t / 1e6, "count": c}
                                                   for k, (t, c) in named.items()],
                    "other_ms": other / 1e6, **split(line, lo, hi)})
    return out


def memory_peaks(trace: Trace) -> list[dict]:
    """The peak of "Total Allocated" in the [memory] events, per device."""
    peaks: dict[str, list] = {}
    for args in trace.memory:
        total = args.get("Total Allocated")
        if isinstance(total, bool) or not isinstance(total, (int, float)) or not math.isfinite(total):
            continue
        kind, index = args.get("Device Type"), args.get("Device Id")
        device = DEVICE_TYPES.get(kind, f"device type {kind}")
        if device != "cpu" and isinstance(index, int) and index >= 0:
            device += f":{index}"
        p = peaks.setdefault(device, [total, 0])
        p[0] = max(p[0], total)
        p[1] += 1
    return [{"device": d, "peak_allocated_mib": p / 2**20, "events": n} for d, (p, n) in peaks.items()]


def summarize(trace: Trace, top: int, min_gap_ms: float) -> dict:
    self_times(trace)
    line = timeline(trace)
    busy = line["busy"]
    lo, hi = (busy[0][0], busy[-1][1]) if busy else (0, 0)
    cpu_ops = [s for s in trace.spans if s["cat"] == "cpu_op"]
    kernels = [s for s in trace.spans if s["cat"] in GPU_WORK]
    return {"timeline": "gpu streams" if trace.gpu else "cpu threads", "communication_rule": COMM_RULE,
            "spans": len(trace.spans), "skipped_events": trace.skipped,
            "top_cpu_ops": top_table(cpu_ops, top, "self"), "top_kernels": top_table(kernels, top, "dur"),
            "totals": split(line, lo, hi), "tracks": gaps(trace, line, round(min_gap_ms * 1e6)),
            "min_gap_ms": min_gap_ms, "steps": steps(trace, line), "memory": memory_peaks(trace)}


# --- the report ----------------------------------------------------------------------------------

def short(name: str, width: int) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def ops_lines(title: str, rows: list[dict], what: str) -> list[str]:
    lines = [f"## {title}", f"  {what:>9}  share   calls  name"]
    for r in rows:
        mark = "  [comm]" if r["communication"] else ""
        lines.append(f"  {r['self_ms']:9.3f} {r['share']:6.1%} {r['calls']:7d}  {short(r['name'], 70)}{mark}")
    return lines


def steps_lines(rows: list[dict]) -> list[str]:
    lines = ["## steps (ms): the timeline within each ProfilerStep#N",
             "  step       total   compute-only   comm-only   overlap      idle"]
    for r in rows:
        lines.append(f"  #{r['step']:<5} {r['duration_ms']:9.3f} {r['compute_only_ms']:14.3f} "
                     f"{r['communication_only_ms']:11.3f} {r['overlap_ms']:9.3f} {r['idle_ms']:9.3f}")
    names = list(dict.fromkeys(n["name"] for r in rows for n in r["ranges"]))
    shown = names[:7]
    if not names:
        lines.append("  (no record_function ranges inside the steps)")
        return lines
    inside = sorted({w for r in rows for w in r["inside"]})
    lines.append("## steps (ms): the named ranges inside each step"
                 + (f" (inside {', '.join(inside)})" if inside else ""))
    lines.append("  step   " + "".join(f"{short(n, 12):>13}" for n in shown) + "        other")
    for r in rows:
        got = {n["name"]: n["ms"] for n in r["ranges"]}
        rest = r["other_ms"] + sum(got.get(n, 0) for n in names[7:])
        lines.append(f"  #{r['step']:<5}" + "".join(f"{got[n]:13.3f}" if n in got else f"{'-':>13}"
                                                    for n in shown) + f"{rest:13.3f}")
    return lines


def report(path: str, meta: dict, s: dict) -> str:
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    where = (f", {dist.get('backend')} rank {dist.get('rank')} of {dist.get('world_size')}"
             if dist.get("backend") else "")
    lines = [f"# {PROG}: {path}: {s['spans']:,} timed events, {len(s['steps'])} ProfilerStep ranges, "
             f"timeline: {s['timeline']} ({len(s['tracks'])}){where}"]
    if s["skipped_events"]:
        lines.append(f"# skipped {s['skipped_events']:,} malformed events")
    if s["top_kernels"]:
        lines += ops_lines("top GPU kernels by time", s["top_kernels"], "ms")
    if s["top_cpu_ops"]:
        lines += ops_lines("top CPU operators by self time", s["top_cpu_ops"], "self ms")
    t = s["totals"]
    hidden = f" ({t['overlap_ms'] / t['communication_ms']:.0%} of it under compute)" if t["communication_ms"] else ""
    lines += [f"## communication and compute on the {s['timeline']}", f"  communication: {COMM_RULE}",
              f"  window {t['window_ms']:.3f} ms: compute {t['compute_ms']:.3f} ms, communication "
              f"{t['communication_ms']:.3f} ms{hidden}, overlap {t['overlap_ms']:.3f} ms, idle {t['idle_ms']:.3f} ms"]
    lines += [f"## idle gaps of {s['min_gap_ms']:g} ms or more, per {s['timeline'][4:-1]}",
              f"  {'track':<40} {'span ms':>9} {'busy ms':>9} {'gaps':>5} {'gap ms':>9}  largest (at ms: ms)"]
    for r in s["tracks"]:
        largest = ", ".join(f"{g['at_ms']:.1f}: {g['ms']:.3f}" for g in r["largest"]) or "-"
        lines.append(f"  {short(r['track'], 40):<40} {r['span_ms']:9.3f} {r['busy_ms']:9.3f} {r['gaps']:5d} "
                     f"{r['gap_ms']:9.3f}  {largest}")
    if s["steps"]:
        lines += steps_lines(s["steps"])
    else:
        lines.append("## steps: no ProfilerStep#N ranges (the loop did not call prof.step() inside the "
                     "profiler's active window): the totals above are the whole trace")
    for m in s["memory"]:
        lines.append(f"## memory: peak allocated {m['peak_allocated_mib']:.1f} MiB on {m['device']} "
                     f"({m['events']:,} allocator events)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Summarize a torch.profiler Chrome trace: top operators or kernels, "
        "communication against compute and their overlap, idle gaps, a breakdown per profiler step.")
    p.add_argument("trace", type=nonempty, help="trace JSON from prof.export_chrome_trace() (.json or .json.gz)")
    p.add_argument("--top", type=number(int, 1, 1000), default=15, help="rows of the top tables (default 15)")
    p.add_argument("--min-gap-ms", type=number(float, 0, 3.6e6), default=1.0,
                   help="report idle gaps at least this long, per thread or stream (default 1 ms)")
    p.add_argument("--max-mb", type=number(int, 1, 65536), default=1024,
                   help="refuse a trace larger than this, compressed or not (default 1024 MiB)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the summary as JSON here")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.json:
        check_output(args.json, "--json", (args.trace,))
    events, meta = load_trace(args.trace, args.max_mb)
    trace = Trace(events)
    if not trace.spans:
        raise ScriptError(f"trace {args.trace}: no timed events (ph 'X'), nothing to summarize: was the "
                          "profiler's active window empty?", EXIT_USAGE)
    summary = summarize(trace, args.top, args.min_gap_ms)
    print(report(args.trace, meta, summary))
    if args.json:
        dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        write_atomic(args.json, json.dumps({"schema": SCHEMA, "trace": args.trace, "distributed": dist,
                                            **summary}, indent=1) + "\n")
    return EXIT_OK


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


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


def parse_json(data: bytes, option: str, path: str):
    """``data`` parsed as JSON; ScriptError (usage) naming the option and the path when it is not
    UTF-8, not JSON, nested too deep, or holds a number Python refuses (over 4300 digits)."""
    import json
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ScriptError(f"{option} {path}: not UTF-8 text", EXIT_USAGE) from None
    except RecursionError:
        raise ScriptError(f"{option} {path}: nested too deeply to be JSON data", EXIT_USAGE) from None
    except ValueError as err:  # json.JSONDecodeError, and int() of a 5,000-digit number
        raise ScriptError(f"{option} {path}: not valid JSON ({str(err).splitlines()[0]})", EXIT_USAGE) from None
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
