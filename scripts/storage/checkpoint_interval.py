#!/usr/bin/env python
"""checkpoint_interval.py: how often a training job should checkpoint, and what it loses.

From the checkpoint size (``--checkpoint-gb``, or ``--params`` x ``--bytes-per-param``, default 14:
mixed-precision Adam), the write bandwidth the job gets, the time a save blocks training (the whole
write, or ``--snapshot-s`` with ``--async-save``) and the job's MTBF (``--job-mtbf-hours``, or
``--node-mtbf-hours`` / ``--nodes``), it computes Young's interval sqrt(2 delta M) (Young 1974),
Daly's higher-order interval (Daly 2006; the one to use) and the fraction of time lost to saves,
rework and restarts, delta/tau + tau/(2M) + R/M. Decimal units (1 GB = 1e9 bytes). Standard
library only; importing it has no side effects. Formulas, defaults and examples:
book/en/storage/index.md ("How often to checkpoint").

    python checkpoint_interval.py                  # the book's worked example: 70B, 50 GBps, 128 nodes
    python checkpoint_interval.py --params 405e9 --write-GBps 200 --nodes 2048 --async-save \\
        --snapshot-s 5 --step-time-s 4 --json plan.json

Example output (the defaults, rows cut)::

    # checkpoint: 70B parameters x 14 bytes = 980 GB
    # failures: node MTBF 6,335 h / 128 nodes = job MTBF 49.5 h (independent, exponential); restart R = 10 min
    training blocked per save (delta)   19.6 s
    Daly interval (use this one)        43.8 min    2,630 s
    time lost at Daly's interval        1.82 %

Exit status: 0 ok, 2 usage (bad input, one line naming the option, before any work).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import traceback

PROG = "checkpoint_interval.py"
TOOL = "checkpoint_interval"

# Defaults: the worked example of the book's Storage chapter ("How often to checkpoint").
DEFAULT_PARAMS = 70e9
DEFAULT_BYTES_PER_PARAM = 14.0  # 2 (16-bit weights) + 4 (fp32 master) + 4 + 4 (Adam moments)
DEFAULT_WRITE_GBPS = 50.0
DEFAULT_SNAPSHOT_S = 2.0
DEFAULT_NODE_MTBF_HOURS = 6335.0  # Llama 3: 16,384 x 54 x 24 / 419 GPU-hours, / 8 GPUs, rounded
DEFAULT_NODES = 128
DEFAULT_RESTART_MIN = 10.0

# Caps: far above any real job, low enough that every product below stays finite.
MAX_PARAMS = 1e16
MAX_BYTES_PER_PARAM = 1024.0
MAX_CHECKPOINT_GB = 1e9        # an exabyte
MAX_GBPS = 1e7                 # 10 PBps
MAX_SECONDS = 1e7              # snapshot and step times: about 116 days
MAX_HOURS = 1e9                # MTBF: 114,000 years
MAX_NODES = 10**8
MAX_RESTART_MIN = 1e6
FIRST_ORDER_LIMIT = 0.1        # the loss model wants tau + delta small against M: flag above this


# ----------------------------------------------------------------------------------------------
# The method: checkpoint size, blocking time, MTBF, Young's and Daly's intervals, time lost (no I/O)
# ----------------------------------------------------------------------------------------------

def _finite(name: str, value, zero_ok: bool = False) -> float:
    """``value`` as a float; ValueError naming ``name`` unless it is a finite number > 0 (>= 0
    when ``zero_ok``). Booleans and strings are refused, not converted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{name} must be {'>= 0' if zero_ok else 'positive'}, got {value:g}")
    return value


def checkpoint_bytes(params: float, bytes_per_param: float = DEFAULT_BYTES_PER_PARAM) -> float:
    """Bytes of one checkpoint: ``params`` x ``bytes_per_param`` (both > 0, finite).

    The default 14 bytes per parameter: 16-bit weights (2) and the mixed-precision Adam state of
    the ZeRO paper, K = 12 (fp32 master weights, momentum, variance; Rajbhandari et al. 2019,
    https://arxiv.org/abs/1910.02054, Section 3.1). ValueError on bad input."""
    return _finite("params", params) * _finite("bytes_per_param", bytes_per_param)


def write_seconds(nbytes: float, write_GBps: float) -> float:
    """Seconds to write ``nbytes`` bytes at ``write_GBps`` (1 GBps = 1e9 bytes/s, the aggregate
    bandwidth the job gets). ValueError unless both are finite and > 0."""
    return _finite("checkpoint bytes", nbytes) / (_finite("write_GBps", write_GBps) * 1e9)


def blocking_seconds(write_s: float, snapshot_s: float | None = None) -> float:
    """Seconds training stands still per checkpoint (delta): the whole ``write_s`` for a
    synchronous save (``snapshot_s`` None), else ``snapshot_s``, the copy to host memory of an
    asynchronous save, which then writes in the background. ValueError on a non-finite or
    non-positive time."""
    write_s = _finite("write_s", write_s)
    return write_s if snapshot_s is None else _finite("snapshot_s", snapshot_s)


def job_mtbf_seconds(node_mtbf_hours: float, nodes: int) -> float:
    """The job's mean time between failures, in seconds, when each of ``nodes`` nodes fails
    independently after an exponentially distributed time of mean ``node_mtbf_hours``: the
    failure rates add up, so M = node MTBF / nodes. ValueError on bad input (``nodes`` must be a
    whole number >= 1)."""
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"nodes must be a whole number >= 1, got {nodes!r}")
    return _finite("node_mtbf_hours", node_mtbf_hours) * 3600.0 / nodes


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974, https://doi.org/10.1145/361147.361115): the compute time between checkpoints
    that minimises the first-order loss, sqrt(2 delta M), in seconds. ``delta_s``: blocking time
    per checkpoint; ``mtbf_s``: the job's MTBF. ValueError unless both are finite and > 0."""
    product = 2.0 * _finite("delta_s", delta_s) * _finite("mtbf_s", mtbf_s)
    return math.sqrt(product)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006, https://doi.org/10.1016/j.future.2004.11.016, higher-order estimate): the
    optimal compute time between checkpoints, in seconds,

        sqrt(2 delta M) [1 + (1/3) sqrt(delta / (2M)) + delta / (18 M)] - delta   for delta < 2M,
        M                                                                         otherwise.

    Always > 0: with s = sqrt(delta / 2M) < 1 the first line equals 2 M s (1 - s/3)^2.
    ValueError unless both arguments are finite and > 0."""
    delta, m = _finite("delta_s", delta_s), _finite("mtbf_s", mtbf_s)
    if delta >= 2.0 * m:
        return m
    ratio = delta / (2.0 * m)
    correction = 1.0 + math.sqrt(ratio) / 3.0 + delta / (18.0 * m)
    return math.sqrt(2.0 * delta * m) * correction - delta


def lost_fraction(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0) -> dict:
    """The first-order fraction of wall-clock time lost when checkpointing every ``tau_s``
    seconds of compute (the model behind Young 1974, as in the book's Storage chapter):

        delta / tau (saving)  +  tau / (2M) (rework: half an interval per failure)  +  R / M

    Returns {"checkpoint", "rework", "restart", "total"} (fractions, not percent). Valid for
    tau much shorter than M. ValueError on non-finite or non-positive inputs (``restart_s`` may
    be 0)."""
    tau, delta = _finite("tau_s", tau_s), _finite("delta_s", delta_s)
    m, restart = _finite("mtbf_s", mtbf_s), _finite("restart_s", restart_s, zero_ok=True)
    parts = {"checkpoint": delta / tau, "rework": tau / (2.0 * m), "restart": restart / m}
    parts["total"] = parts["checkpoint"] + parts["rework"] + parts["restart"]
    return parts


def complete_lost_fraction(tau_s: float, delta_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """The fraction of wall-clock time lost under Daly's complete model for exponentially
    distributed failures (Daly 2006, https://doi.org/10.1016/j.future.2004.11.016): each
    ``tau_s`` of compute costs M e^(R/M) (e^((tau + delta)/M) - 1) seconds of wall clock, so

        lost = 1 - tau / (M e^(R/M) (e^((tau + delta)/M) - 1)),

    always in [0, 1], valid where the first-order model (``lost_fraction``) is not: an interval
    or a save that is not short against M. ValueError on non-finite or non-positive inputs."""
    tau, delta = _finite("tau_s", tau_s), _finite("delta_s", delta_s)
    m, restart = _finite("mtbf_s", mtbf_s), _finite("restart_s", restart_s, zero_ok=True)
    exponent = (tau + delta) / m + restart / m
    if exponent > 700:  # e^700 ~ 1e304: the job never finishes an interval
        return 1.0
    wall = m * math.exp(restart / m) * math.expm1((tau + delta) / m)
    return min(1.0, max(0.0, 1.0 - tau / wall))


def _steps(tau_s: float, step_time_s: float | None) -> int | None:
    """Whole training steps in ``tau_s`` (nearest, at least 1); None without a step time."""
    if step_time_s is None:
        return None
    return max(1, round(tau_s / _finite("step_time_s", step_time_s)))


def plan(nbytes: float, write_GBps: float, mtbf_s: float, restart_s: float = 0.0,
         snapshot_s: float | None = None, step_time_s: float | None = None) -> dict:
    """Everything the script reports, for a checkpoint of ``nbytes`` bytes written at
    ``write_GBps``, a job MTBF of ``mtbf_s`` seconds and a restart time of ``restart_s``;
    ``snapshot_s`` given = an asynchronous save that blocks for that long; ``step_time_s`` adds
    the intervals in steps. A flat dict of the JSON result fields (seconds, bytes, fractions).
    ValueError on bad input."""
    write_s = write_seconds(nbytes, write_GBps)
    delta = blocking_seconds(write_s, snapshot_s)
    restart_s = _finite("restart_s", restart_s, zero_ok=True)
    young = young_interval(delta, mtbf_s)
    daly = daly_interval(delta, mtbf_s)
    at_daly = lost_fraction(daly, delta, mtbf_s, restart_s)
    return {
        "checkpoint_bytes": float(nbytes), "write_s": write_s, "blocking_s": delta,
        "job_mtbf_s": float(mtbf_s), "restart_s": restart_s,
        "young_interval_s": young, "daly_interval_s": daly,
        "young_interval_steps": _steps(young, step_time_s),
        "daly_interval_steps": _steps(daly, step_time_s),
        "young_lost_fraction": lost_fraction(young, delta, mtbf_s, restart_s)["total"],
        "lost_fraction": at_daly["total"],
        "lost_checkpoint_fraction": at_daly["checkpoint"],
        "lost_rework_fraction": at_daly["rework"],
        "lost_restart_fraction": at_daly["restart"],
        # an asynchronous write must end before the next save starts, tau seconds later
        "async_write_fits": None if snapshot_s is None else write_s <= daly,
        "lost_fraction_complete": complete_lost_fraction(daly, delta, mtbf_s, restart_s),
        "first_order_ok": (daly + delta) <= FIRST_ORDER_LIMIT * mtbf_s,
    }


def compute(inputs: dict) -> dict:
    """``plan`` of the ``inputs`` dict that ``resolve`` returns (the JSON's "inputs")."""
    if inputs["checkpoint_gb"] is not None:
        nbytes = inputs["checkpoint_gb"] * 1e9
    else:
        nbytes = checkpoint_bytes(inputs["params"], inputs["bytes_per_param"])
    if inputs["job_mtbf_hours"] is not None:
        mtbf = _finite("job_mtbf_hours", inputs["job_mtbf_hours"]) * 3600.0
    else:
        mtbf = job_mtbf_seconds(inputs["node_mtbf_hours"], inputs["nodes"])
    return plan(nbytes, inputs["write_GBps"], mtbf, restart_s=inputs["restart_min"] * 60.0,
                snapshot_s=inputs["snapshot_s"], step_time_s=inputs["step_time_s"])


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _count(x: float) -> str:
    """About 3 significant digits, with a fixed number of decimals per decade (so that 44.0 stays
    44.0); whole numbers with thousands separators from 100 up."""
    for floor, fmt in ((100, ",.0f"), (10, ".1f"), (1, ".2f")):
        if abs(x) >= floor:
            return format(x, fmt)
    return format(x, ".3g")


def _params(n: float) -> str:
    """A parameter count as the model names write it: 70B, 1.3B, 125M."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.4g}"


def _size(nbytes: float) -> str:
    for unit, scale in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{_count(nbytes / scale)} {unit}"
    return f"{_count(nbytes)} bytes"


def _time(seconds: float) -> str:
    """A duration in the unit a reader wants: s below 2 minutes, min below 2 hours, else h."""
    if seconds < 120:
        return f"{_count(seconds)} s"
    if seconds < 7200:
        return f"{_count(seconds / 60)} min"
    return f"{_count(seconds / 3600)} h"


def _percent(fraction: float) -> str:
    return f"{_count(100 * fraction)} %"


def report(inputs: dict, r: dict) -> str:
    """The text table: ``#`` lines with the inputs, then one aligned row per quantity."""
    if inputs["checkpoint_gb"] is not None:
        size = f"{_size(r['checkpoint_bytes'])} (given)"
    else:
        size = (f"{_params(inputs['params'])} parameters x {inputs['bytes_per_param']:g} bytes = "
                f"{_size(r['checkpoint_bytes'])}")
    if inputs["async_save"]:
        save = (f"asynchronous: training waits {inputs['snapshot_s']:g} s for the copy to host "
                f"memory, the write runs in the background at {inputs['write_GBps']:g} GBps")
    else:
        save = f"synchronous: training waits for the whole write at {inputs['write_GBps']:g} GBps"
    if inputs["job_mtbf_hours"] is not None:
        mtbf = f"job MTBF {inputs['job_mtbf_hours']:g} h (given)"
    else:
        mtbf = (f"node MTBF {_count(inputs['node_mtbf_hours'])} h / {inputs['nodes']:,} nodes "
                f"= job MTBF {_count(r['job_mtbf_s'] / 3600)} h (independent, exponential)")
    lines = [
        f"# {PROG}: how often to checkpoint (decimal units: 1 GB = 1e9 bytes, 1 GBps = 1e9 bytes/s)",
        f"# checkpoint: {size}",
        f"# save: {save}",
        f"# failures: {mtbf}; restart R = {inputs['restart_min']:g} min",
        "# time lost, first order (Young 1974): delta/tau + tau/(2M) + R/M" if r["first_order_ok"] else
        "# time lost, Daly's complete model (2006): 1 - tau / (M e^(R/M) (e^((tau+delta)/M) - 1))",
    ]
    rows = [
        ("checkpoint size", _size(r["checkpoint_bytes"]), ""),
        ("write time", _time(r["write_s"]), ""),
        ("training blocked per save (delta)", _time(r["blocking_s"]), ""),
        ("job MTBF (M)", _time(r["job_mtbf_s"]), f"{_count(r['job_mtbf_s'])} s"),
        ("Young interval sqrt(2 delta M)", _time(r["young_interval_s"]),
         f"{_count(r['young_interval_s'])} s"),
        ("Daly interval" + (" (use this one)" if r["first_order_ok"] else ""), _time(r["daly_interval_s"]),
         f"{_count(r['daly_interval_s'])} s"),
    ]
    if inputs["step_time_s"] is not None:
        rows.append((f"  in steps of {inputs['step_time_s']:g} s", f"{r['daly_interval_steps']:,}",
                     f"Young: {r['young_interval_steps']:,}"))
    if r["first_order_ok"]:
        rows += [
            ("time lost at Daly's interval", _percent(r["lost_fraction"]), ""),
            ("  to saves, delta/tau", _percent(r["lost_checkpoint_fraction"]), ""),
            ("  to rework, tau/(2M)", _percent(r["lost_rework_fraction"]), ""),
            ("  to restarts, R/M", _percent(r["lost_restart_fraction"]), ""),
            ("time lost at Young's interval", _percent(r["young_lost_fraction"]), ""),
        ]
    else:  # the first-order shares can pass 100 %: only the complete model's total means anything
        rows.append(("time lost at Daly's interval (complete model)",
                     _percent(r["lost_fraction_complete"]), ""))
    label_w = max(len(label) for label, _, _ in rows)
    number_w = max(len(value.split(" ")[0]) for _, value, _ in rows)
    for label, value, note in rows:
        number, _, unit = value.partition(" ")
        text = f"{label:<{label_w}}  {number:>{number_w}} {unit:<5}"
        lines.append(f"{text}  {note}".rstrip() if note else text.rstrip())
    if r["async_write_fits"] is False:
        lines.append(f"# warning: the background write ({_time(r['write_s'])}) takes longer than "
                     "the interval: each save would wait for the previous write; get more write "
                     "bandwidth or save less often")
    if not r["first_order_ok"]:
        lines.append("# warning: the interval and the save are not short against the MTBF (tau + "
                     f"delta > {FIRST_ORDER_LIMIT:g} M): the first-order model does not hold, and "
                     "the time lost shown is Daly's complete model; no interval recommended: save "
                     "faster (asynchronous saves, more write bandwidth) or fail less often")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

class Given(argparse.Action):
    """Store the option's value and note its ``dest`` in ``namespace.given``: the defaults stay
    real argparse defaults (``--help`` and a form built from the parser show them), and the
    script can still tell an option typed on the command line from its default."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = namespace.given | {self.dest}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="How often to checkpoint a training job: Young's and Daly's optimal "
                    "intervals from the checkpoint size, the write bandwidth and the job's MTBF, "
                    "and the fraction of time lost to saves, rework and restarts. Decimal units "
                    "(1 GB = 1e9 bytes). Without options: the book's worked example.",
        epilog="Example: %(prog)s --params 405e9 --write-GBps 200 --nodes 2048 --async-save "
               "--snapshot-s 5 --step-time-s 4")
    p.set_defaults(given=frozenset())
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    size = p.add_argument_group("checkpoint size (--checkpoint-gb, or --params x --bytes-per-param)")
    size.add_argument("--checkpoint-gb", metavar="GB", action=Given,
                      type=number(float, 0, MAX_CHECKPOINT_GB, lo_open=True),
                      help="size of one whole checkpoint, GB (1e9 bytes), all ranks together "
                           "(instead of --params and --bytes-per-param)")
    size.add_argument("--params", metavar="N", action=Given, default=DEFAULT_PARAMS,
                      type=number(float, 0, MAX_PARAMS, lo_open=True),
                      help="parameters of the model (default 70e9)")
    size.add_argument("--bytes-per-param", metavar="BYTES", action=Given,
                      default=DEFAULT_BYTES_PER_PARAM,
                      type=number(float, 0, MAX_BYTES_PER_PARAM, lo_open=True),
                      help=f"checkpoint bytes per parameter (default {DEFAULT_BYTES_PER_PARAM:g}: "
                           "mixed-precision Adam, 2 of 16-bit weights + 4 of fp32 master weights "
                           "+ 4 + 4 of Adam moments; ZeRO paper, Section 3.1, K = 12 + 2)")
    save = p.add_argument_group("saving")
    save.add_argument("--write-GBps", metavar="GBPS", default=DEFAULT_WRITE_GBPS,
                      type=number(float, 0, MAX_GBPS, lo_open=True),
                      help="aggregate write bandwidth the job gets, GBps = 1e9 bytes/s "
                           f"(default {DEFAULT_WRITE_GBPS:g})")
    save.add_argument("--async-save", action="store_true",
                      help="asynchronous save: training waits only for the copy to host memory "
                           "(--snapshot-s), the write runs in the background")
    save.add_argument("--snapshot-s", metavar="S", action=Given, default=DEFAULT_SNAPSHOT_S,
                      type=number(float, 0, MAX_SECONDS, lo_open=True),
                      help="with --async-save: seconds training is blocked per save (default "
                           f"{DEFAULT_SNAPSHOT_S:g}; measure it with checkpoint_io_bench.py "
                           "--async-save)")
    fail = p.add_argument_group("failures (--job-mtbf-hours, or --node-mtbf-hours / --nodes)")
    fail.add_argument("--node-mtbf-hours", metavar="H", action=Given,
                      default=DEFAULT_NODE_MTBF_HOURS,
                      type=number(float, 0, MAX_HOURS, lo_open=True),
                      help="mean time between failures of one node, hours (default "
                           f"{DEFAULT_NODE_MTBF_HOURS:g}: the Llama 3 rate for 8 GPUs)")
    fail.add_argument("--nodes", action=Given, default=DEFAULT_NODES, type=number(int, 1, MAX_NODES),
                      help="nodes in the job, each failing independently after an exponentially "
                           f"distributed time (default {DEFAULT_NODES})")
    fail.add_argument("--job-mtbf-hours", metavar="H", action=Given,
                      type=number(float, 0, MAX_HOURS, lo_open=True),
                      help="the job's mean time between failures, hours (instead of the two above)")
    fail.add_argument("--restart-min", metavar="MIN", default=DEFAULT_RESTART_MIN,
                      type=number(float, 0, MAX_RESTART_MIN),
                      help="minutes from a failure to training again: detect, reschedule, load "
                           f"the checkpoint (default {DEFAULT_RESTART_MIN:g})")
    p.add_argument("--step-time-s", metavar="S", type=number(float, 0, MAX_SECONDS, lo_open=True),
                   help="seconds per training step: also give the intervals in steps")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the inputs and results as JSON ('-': print it instead of the table)")
    return p


def _self_path() -> str | None:
    """This file, when the module was loaded from one (not under Pyodide's exec)."""
    path = globals().get("__file__")
    return path if path and os.path.isfile(path) else None


def _clash(args: argparse.Namespace, first: str, others: tuple[str, ...]) -> list[str]:
    """The options of ``others`` typed on the command line along with ``first``, as --names."""
    if first not in args.given:
        return []
    return ["--" + o.replace("_", "-") for o in others if o in args.given]


def resolve(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """Check the combinations of options and the --json path, before any computation. Returns
    the ``inputs`` of the JSON (every option, None where unused); a usage error (one line, exit
    status 2) names the options at fault."""
    clash = _clash(args, "checkpoint_gb", ("params", "bytes_per_param"))
    if clash:
        parser.error(f"--checkpoint-gb and {' and '.join(clash)} both give the checkpoint size; "
                     "keep one")
    clash = _clash(args, "job_mtbf_hours", ("node_mtbf_hours", "nodes"))
    if clash:
        parser.error(f"--job-mtbf-hours and {' and '.join(clash)} are mutually exclusive: give the "
                     "job's MTBF, or a node's MTBF and the number of nodes")
    if "snapshot_s" in args.given and not args.async_save:
        parser.error(f"--snapshot-s {args.snapshot_s:g} only applies with --async-save (a "
                     "synchronous save blocks for the whole write)")
    if args.json is not None and args.json != "-":
        own = _self_path()
        check_output(args.json, "--json", inputs=[own] if own else [])
    by_size = args.checkpoint_gb is not None
    by_job = args.job_mtbf_hours is not None
    return {"params": None if by_size else args.params,
            "bytes_per_param": None if by_size else args.bytes_per_param,
            "checkpoint_gb": args.checkpoint_gb, "write_GBps": args.write_GBps,
            "async_save": args.async_save, "snapshot_s": args.snapshot_s if args.async_save else None,
            "node_mtbf_hours": None if by_job else args.node_mtbf_hours,
            "nodes": None if by_job else args.nodes, "job_mtbf_hours": args.job_mtbf_hours,
            "restart_min": args.restart_min, "step_time_s": args.step_time_s}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    inputs = resolve(parser, args)
    try:
        results = compute(inputs)
    except ValueError as err:  # the parser's ranges rule this out; kept as a one-line error
        raise ScriptError(str(err), EXIT_USAGE) from None
    # The JSON file is written before the table is printed, so a closed pipe (`| head`) cannot
    # cost the reader the file.
    if args.json is not None:
        doc = {"tool": TOOL, "schema_version": 1, "inputs": inputs, **results}
        text = json.dumps(doc, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
            return EXIT_OK
        write_atomic(args.json, text)
    print(report(inputs, results))
    if args.json is not None:
        print(f"# wrote {args.json}")
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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
