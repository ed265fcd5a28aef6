#!/usr/bin/env python
"""upgrade_cost.py: cost per trained token on each accelerator you are choosing between.

Per device option: model FLOPs per token 6N + 12LaT (PaLM, Chowdhery et al. 2022, appendix B;
6N alone without --layers/--hidden/--seq-len); achieved TFLOPS = a TFLOPS figure (given, or the
MAMF from a mamf_finder.py --json) x --efficiency; tokens/s per device; USD per million tokens =
(price + electricity per device-hour) / tokens per device-hour x 1e6; with --tokens the
device-hours, cost and days on --devices devices; against the first option the speed and cost
ratios and the break-even price per device-hour. With --breakdown (a step_time_breakdown.py
--json of the first option's device) every other option's speed-up is per part of the step:
attention and MLP scale with achieved TFLOPS, optimizer and other with --mem-gbps, communication
with --link-gbps (Amdahl: step speed-up = 1 / sum(fraction / part speed-up)). Decimal units; every
price is yours (labelled USD). Standard library only. Formulas and a worked example: book/en/compute/when-to-upgrade.md.

Each ``--device NAME[:TFLOPS[:USD_PER_HOUR]]`` starts an option; ``--mamf-json``, ``--dtype``,
``--usd-per-hour``, ``--efficiency`` and ``--power-w`` after it belong to it::

    python upgrade_cost.py --params 7e9 --tokens 1e12 --devices 64 \\
        --device a100:312:1.50 --efficiency 0.45 \\
        --device h100 --mamf-json mamf-h100.json --dtype bf16 --usd-per-hour 3.00 --efficiency 0.55

Example output (rows cut; prices made up)::

    #                              a100  h100-bf16  h100-fp8
    achieved TFLOPS               140.4      436.6     787.3
    USD per million tokens       0.1438    0.09247   0.05128
    speed vs a100                     1      3.109     5.607
    break-even USD/device-hour      1.5      4.664     8.411

Exit status: 0 ok, 2 usage (bad input, checked before any arithmetic).
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

PROG = "upgrade_cost.py"
BENCHMARK = "upgrade_cost"
MAMF_BENCHMARKS = ("mamf", "mamf_finder")  # mamf_finder.py's "benchmark" value, old and new
MAMF_DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")

# Caps: far above any real value, low enough that the products below stay finite and exact enough.
MAX_TFLOPS = 1e5          # per device; the largest fp4 datasheet figures are ~1e4
MAX_USD_PER_HOUR = 1e6    # per device-hour
MAX_POWER_W = 1e5         # per device, all of a rack's share included
MAX_USD_PER_KWH = 1e3
MAX_PARAMS = 1e16
MAX_COUNT = 10**12        # layers, width, sequence length, devices
MAX_TOKENS = 1e18
MAX_OPTIONS = 32          # --device options in one comparison
MAX_MAMF_BYTES = 64 << 20  # a mamf_finder.py file of 10,000 shapes is ~3 MB
MAX_GBPS = 1e6            # memory or link bandwidth per device, GB/s
# What bounds each part of a step_time_breakdown.py step: which ratio between devices speeds it up.
BOUND_BY = {"attention": "compute", "mlp": "compute", "communication": "link",
            "optimizer": "memory", "other": "memory"}
NAME_FORBIDDEN = set(":,") | {chr(c) for c in range(32)} | {chr(127)}


# ----------------------------------------------------------------------------------------------
# The method: FLOPs per token, MAMF, cost per option (plain computations, no I/O)
# ----------------------------------------------------------------------------------------------

def _check(name: str, value, lo: float = 0.0, hi: float | None = None, lo_open: bool = True,
           integer: bool = False) -> float:
    """``value`` as a float if it is a finite number in range, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    if integer and (not isinstance(value, int) and not float(value).is_integer()):
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value!r}")
    if value < lo or (lo_open and value == lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, not {value:g}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi:g}, not {value:g}")
    return float(value)


def flops_per_token(params: float, layers: int | None = None, attn_width: int | None = None,
                    seq_len: int | None = None) -> dict:
    """Training FLOPs per token (forward + backward) of a dense transformer.

    Args:
        params: N, the parameters that take part in matrix multiplications (for a mixture of
            experts: those active per token), a count > 0.
        layers, attn_width, seq_len: L, a (heads x head dimension; the hidden size for standard
            multi-head attention) and T; all three or none.

    Returns ``{"dense": 6N, "attention": 12 L a T (0 without the shape), "model": their sum}``
    in FLOPs per token: 6N from Kaplan et al. 2020 (arXiv:2001.08361, section 2.1), 12LaT from
    PaLM (Chowdhery et al. 2022, arXiv:2204.02311, appendix B); the same formula as the book's
    Performance page and flops_mfu_calculator.py. Raises ValueError on a non-positive, non-finite
    or partial input.
    """
    n = _check("params", params, hi=MAX_PARAMS)
    shape = {"layers": layers, "attn_width": attn_width, "seq_len": seq_len}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < 3:
        missing = [k for k in shape if shape[k] is None]
        raise ValueError(f"the attention term needs layers, attn_width and seq_len; "
                         f"{', '.join(given)} given without {', '.join(missing)}")
    dense = 6.0 * n                                   # 2N forward + 4N backward
    attention = 0.0
    if given:
        lay, width, seq = (_check(k, v, lo=1, lo_open=False, hi=MAX_COUNT, integer=True)
                           for k, v in shape.items())
        attention = 12.0 * lay * width * seq          # PaLM: 12 L H Q T
    return {"dense": dense, "attention": attention, "model": dense + attention}


def mamf_tflops(data, dtype: str) -> dict:
    """The maximum achievable matmul TFLOPS of ``dtype`` in a mamf_finder.py ``--json`` result.

    Args:
        data: the parsed JSON object (a dict) of mamf_finder.py's ``--json`` (``benchmark``
            "mamf" or "mamf_finder", a ``results`` list of rows with ``dtype`` and
            ``max_tflops``).
        dtype: "bf16", "fp16", "fp32", "tf32" or "fp8".

    Returns ``{"tflops": the highest max_tflops among the dtype's rows, "shape": "MxNxK" of that
    row, "device": the file's device name, "interrupted": whether the sweep was cut short,
    "shapes": how many shapes of the dtype were measured}``. TFLOPS are decimal (1e12 FLOP/s).
    Raises ValueError when ``data`` is not a mamf_finder result of one device (a table of
    published results with a ``device`` per row is refused: the best row would mix devices) or
    has no valid row of ``dtype``.
    """
    if not isinstance(data, dict) or data.get("benchmark") not in MAMF_BENCHMARKS:
        found = data.get("benchmark") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a mamf_finder.py result (benchmark {found!r}, expected "
                         f"{' or '.join(map(repr, MAMF_BENCHMARKS))})")
    rows = data.get("results")
    if not isinstance(rows, list):
        raise ValueError("has no 'results' list")
    seen, best = [], None
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("dtype"), str):
            raise ValueError(f"results[{i}] has no 'dtype'")
        if "device" in row:  # a table of published results, one row per device
            raise ValueError(f"results[{i}] names its own device ({row['device']!r}): a table "
                             "of several devices, not one device's mamf_finder.py --json; "
                             "enter the figure you want as NAME:TFLOPS:USD_PER_HOUR")
        if row["dtype"] not in seen:
            seen.append(row["dtype"])
        if row["dtype"] != dtype:
            continue
        try:
            value = _check(f"results[{i}].max_tflops", row.get("max_tflops"), hi=MAX_TFLOPS)
        except ValueError as err:
            raise ValueError(str(err)) from None
        if best is None or value > best[0]:
            best = (value, row)
    if best is None:
        have = ", ".join(seen) if seen else "no rows"
        raise ValueError(f"has no {dtype} measurement (it has: {have})")
    value, row = best
    shape = "x".join(str(row.get(k, "?")) for k in ("m", "n", "k"))
    return {"tflops": value, "shape": shape, "device": str(data.get("device")),
            "interrupted": bool(data.get("interrupted", False)),
            "shapes": sum(1 for r in rows if r["dtype"] == dtype)}


def electricity_usd_per_hour(power_w: float | None, usd_per_kwh: float | None) -> float:
    """Electricity cost of one device-hour: power_w / 1000 kW x 1 h x usd_per_kwh; 0 when either
    is None. Raises ValueError on a non-positive or non-finite value."""
    if power_w is None or usd_per_kwh is None:
        return 0.0
    return (_check("power_w", power_w, hi=MAX_POWER_W) / 1000.0
            * _check("usd_per_kwh", usd_per_kwh, hi=MAX_USD_PER_KWH))


def option_cost(*, tflops: float, usd_per_device_hour: float, flops_per_token: float,
                efficiency: float = 1.0, power_w: float | None = None,
                usd_per_kwh: float | None = None, tokens: float | None = None,
                devices: int = 1) -> dict:
    """Throughput and cost of training on one kind of device.

    Args:
        tflops: the device's TFLOPS figure (peak, MAMF or measured), decimal, > 0.
        usd_per_device_hour: price of one device for one hour, > 0.
        flops_per_token: training FLOPs per token (``flops_per_token()["model"]``), > 0.
        efficiency: fraction of ``tflops`` the run achieves, in (0, 1].
        power_w, usd_per_kwh: average power per device (W) and electricity price; both or none.
        tokens: tokens of the whole run (optional); devices: devices it runs on (>= 1).

    Returns a flat dict: ``achieved_tflops``, ``tokens_per_s_per_device``,
    ``electricity_usd_per_device_hour``, ``usd_per_mtoken`` (USD per 1e6 tokens, electricity
    included), ``usd_per_mtoken_electricity`` (its electricity part), and, when ``tokens`` is
    given (else None): ``device_hours``, ``compute_usd``, ``electricity_usd``, ``total_usd``,
    ``days`` on ``devices`` devices at perfect scaling. Raises ValueError on bad input.
    """
    tflops = _check("tflops", tflops, hi=MAX_TFLOPS)
    price = _check("usd_per_device_hour", usd_per_device_hour, hi=MAX_USD_PER_HOUR)
    fpt = _check("flops_per_token", flops_per_token)
    efficiency = _check("efficiency", efficiency, hi=1.0)
    if (power_w is None) != (usd_per_kwh is None):
        raise ValueError("electricity needs both power_w and usd_per_kwh")
    devices = _check("devices", devices, lo=1, lo_open=False, hi=MAX_COUNT, integer=True)
    energy = electricity_usd_per_hour(power_w, usd_per_kwh)
    achieved = tflops * efficiency
    per_s = achieved * 1e12 / fpt
    per_hour = per_s * 3600.0
    out = {
        "achieved_tflops": achieved,
        "tokens_per_s_per_device": per_s,
        "electricity_usd_per_device_hour": energy,
        "usd_per_mtoken": (price + energy) / per_hour * 1e6,
        "usd_per_mtoken_electricity": energy / per_hour * 1e6,
        "device_hours": None, "compute_usd": None, "electricity_usd": None, "total_usd": None,
        "days": None,
    }
    if tokens is not None:
        tokens = _check("tokens", tokens, hi=MAX_TOKENS)
        hours = tokens / per_hour
        out.update(device_hours=hours, compute_usd=hours * price, electricity_usd=hours * energy,
                   total_usd=hours * (price + energy), days=hours / devices / 24.0)
    bad = [k for k, v in out.items() if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise ValueError(f"the inputs overflow double precision ({bad[0]} is not finite)")
    return out


def break_even_usd_per_hour(reference_usd_per_mtoken: float, tokens_per_s_per_device: float,
                            electricity_usd_per_device_hour: float = 0.0) -> float:
    """The price per device-hour at which a device that trains ``tokens_per_s_per_device``
    tokens/s (and pays ``electricity_usd_per_device_hour`` on top) costs exactly
    ``reference_usd_per_mtoken`` USD per million tokens: reference x tokens per hour / 1e6 -
    electricity. Negative when its electricity alone costs more per token than the reference.
    Raises ValueError on bad input."""
    ref = _check("reference_usd_per_mtoken", reference_usd_per_mtoken)
    rate = _check("tokens_per_s_per_device", tokens_per_s_per_device)
    energy = _check("electricity_usd_per_device_hour", electricity_usd_per_device_hour,
                    lo_open=False)
    return ref * rate * 3600.0 / 1e6 - energy


def breakdown_fractions(data) -> dict:
    """The ``fractions`` of a step_time_breakdown.py ``--json`` result (a parsed dict): each part's
    share of the measured step, keys of BOUND_BY, summing to 1. Raises ValueError otherwise."""
    if not isinstance(data, dict) or data.get("benchmark") != "step_time_breakdown":
        found = data.get("benchmark") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"not a step_time_breakdown.py result (benchmark {found!r})")
    fractions = data.get("fractions")
    if not isinstance(fractions, dict) or set(fractions) != set(BOUND_BY):
        raise ValueError(f"'fractions' must have exactly the keys {', '.join(BOUND_BY)}")
    out = {k: _check(f"fractions.{k}", fractions[k], lo_open=False, hi=1.0) for k in BOUND_BY}
    if abs(sum(out.values()) - 1.0) > 1e-3:
        raise ValueError(f"'fractions' sum to {sum(out.values()):.4g}, not 1")
    return out


def step_speedup(fractions: dict, speedups: dict) -> float:
    """Amdahl's law over the parts of a step: 1 / sum(fraction / speed-up of what bounds it).

    Args:
        fractions: ``breakdown_fractions()``, each part's share of the reference step.
        speedups: ``{"compute": ..., "memory": ..., "link": ...}``, the new device's ratio to the
            reference (achieved TFLOPS, memory GB/s, link GB/s), each > 0; "link" may be missing
            when the communication fraction is 0.

    Returns the new device's step speed-up over the reference. Raises ValueError on bad input.
    """
    new_time = 0.0
    for part, bound in BOUND_BY.items():
        if fractions[part] > 0:
            new_time += fractions[part] / _check(f"{bound} speed-up", speedups.get(bound))
    if new_time <= 0:
        raise ValueError("the breakdown has no time in any part")
    return 1.0 / new_time


def compare(options: list[dict], *, flops_per_token: float, tokens: float | None = None,
            devices: int = 1, usd_per_kwh: float | None = None) -> list[dict]:
    """Cost rows for several device options, the first one being the reference.

    Args:
        options: dicts with ``name`` (str), ``tflops``, ``usd_per_device_hour``, and optionally
            ``efficiency`` (default 1), ``power_w`` and ``step_speedup`` (from ``step_speedup()``:
            then this option trains at the first option's rate times it, whatever its TFLOPS);
            any other keys are copied to the row.
        flops_per_token, tokens, devices: as in ``option_cost``.
        usd_per_kwh: electricity price; when given, every option needs ``power_w``.

    Returns one flat dict per option: its inputs, ``option_cost``'s outputs, and
    ``speedup_vs_first`` (tokens/s ratio), ``cost_ratio_vs_first`` (USD per token ratio) and
    ``break_even_usd_per_device_hour`` (the price at which it matches the first option per
    token; for the first option, its own price). Raises ValueError on bad input (naming the
    option).
    """
    if not options:
        raise ValueError("no device options")
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"{len(options)} device options; at most {MAX_OPTIONS}")
    names = [o.get("name") for o in options]
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"option name {name!r} must be a non-empty string")
        if names.count(name) > 1:
            raise ValueError(f"option name {name!r} appears twice")
    rows = []
    for o in options:
        power = o.get("power_w")
        tflops, efficiency = o.get("tflops"), o.get("efficiency", 1.0)
        if o.get("step_speedup") is not None and rows:  # the first option's rate x the speed-up
            tflops, efficiency = rows[0]["achieved_tflops"] * o["step_speedup"], 1.0
        if usd_per_kwh is not None and power is None:
            raise ValueError(f"{o['name']}: no power_w, but usd_per_kwh is given (electricity "
                             "would be counted for some options only)")
        if usd_per_kwh is None and power is not None:
            raise ValueError(f"{o['name']}: power_w given without usd_per_kwh")
        try:
            cost = option_cost(tflops=tflops, usd_per_device_hour=o.get("usd_per_device_hour"),
                               efficiency=efficiency, power_w=power,
                               usd_per_kwh=usd_per_kwh, flops_per_token=flops_per_token,
                               tokens=tokens, devices=devices)
        except ValueError as err:
            raise ValueError(f"{o['name']}: {err}") from None
        rows.append({**o, "efficiency": float(o.get("efficiency", 1.0)), "power_w": power,
                     "flops_per_token": float(flops_per_token), **cost})
    first = rows[0]
    for row in rows:
        row["speedup_vs_first"] = row["tokens_per_s_per_device"] / first["tokens_per_s_per_device"]
        row["cost_ratio_vs_first"] = row["usd_per_mtoken"] / first["usd_per_mtoken"]
        row["break_even_usd_per_device_hour"] = break_even_usd_per_hour(
            first["usd_per_mtoken"], row["tokens_per_s_per_device"],
            row["electricity_usd_per_device_hour"])
    return rows


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def _num(x) -> str:
    """A number for the text report: 4 significant digits, thousands separated."""
    if x is None:
        return "-"
    if x != 0 and (abs(x) >= 1e9 or abs(x) < 1e-3):
        return f"{x:.4g}"
    if abs(x) >= 1e3:
        return f"{x:,.0f}"
    return f"{x:.4g}"


def report(rows: list[dict], flops: dict, args) -> str:
    """The text table: one line per quantity, one column per device option."""
    first = rows[0]["name"]
    shape = (f", L = {args.layers}, a = {args.hidden}, T = {args.seq_len}"
             if args.layers is not None else "")
    formula = "6N + 12LaT" if args.layers is not None else \
        "6N only; --layers, --hidden and --seq-len add 12LaT"
    lines = [
        f"# {PROG}: cost per trained token (decimal units; prices as given, labelled USD)",
        f"# model: N = {args.params:.4g}{shape}: {flops['model']:.4g} FLOPs per token ({formula})",
    ]
    run = []
    if args.tokens is not None:
        run.append(f"{args.tokens:.4g} tokens on {args.devices} device{'s' * (args.devices > 1)}")
    if args.usd_per_kwh is not None:
        run.append(f"electricity {args.usd_per_kwh:g} USD/kWh")
    if run:
        lines.append("# run: " + "; ".join(run))
    if args.breakdown is not None:
        b = args.breakdown_info
        shares = ", ".join(f"{k} {v:.1%}" for k, v in b["fractions"].items())
        lines.append(f"# breakdown of {rows[0]['name']}'s step from {os.path.basename(args.breakdown)} "
                     f"({b['device']}, {b['world_size']} rank{'s' * (b['world_size'] != 1)}"
                     f"{'; run interrupted, fewer rounds' * b['interrupted']}): {shares}")
    for r in rows:
        if r["tflops_source"] == "mamf_json":
            note = " (sweep interrupted)" if r["mamf_interrupted"] else ""
            lines.append(f"# {r['name']}: TFLOPS = {r['mamf_dtype']} MAMF from "
                         f"{os.path.basename(r['mamf_json'])}: {r['mamf_device']}, best of "
                         f"{r['mamf_shapes']} shapes at {r['mamf_shape']}{note}")
    table = [
        ("TFLOPS figure", "tflops"),
        ("efficiency", "efficiency"),
    ]
    if args.breakdown is not None:
        table += [("memory GB/s", "mem_gbps"), ("link GB/s", "link_gbps"),
                  ("compute speed-up", "speedup_compute"), ("memory speed-up", "speedup_memory"),
                  ("link speed-up", "speedup_link"), ("step speed-up (Amdahl)", "step_speedup")]
    table += [
        ("achieved TFLOPS", "achieved_tflops"),
        ("tokens/s per device", "tokens_per_s_per_device"),
        ("USD per device-hour", "usd_per_device_hour"),
    ]
    if args.usd_per_kwh is not None:
        table += [("power W", "power_w"),
                  ("+ electricity USD/device-hour", "electricity_usd_per_device_hour")]
    table.append(("USD per million tokens", "usd_per_mtoken"))
    if args.usd_per_kwh is not None:
        table.append(("  of which electricity", "usd_per_mtoken_electricity"))
    if args.tokens is not None:
        table += [("device-hours", "device_hours"), ("cost USD", "total_usd")]
        if args.usd_per_kwh is not None:
            table.append(("  of which electricity", "electricity_usd"))
        table.append((f"days on {args.devices} device{'s' * (args.devices > 1)}", "days"))
    table += [(f"speed vs {first}", "speedup_vs_first"),
              (f"cost per token vs {first}", "cost_ratio_vs_first"),
              ("break-even USD/device-hour", "break_even_usd_per_device_hour")]
    label_w = max(len(label) for label, _ in table)
    cells = [[_num(r[key]) for r in rows] for _, key in table]
    col_w = [max(len(r["name"]), *(len(c[i]) for c in cells)) for i, r in enumerate(rows)]
    lines.append("#" + " " * (label_w - 1) + "".join(f"  {r['name']:>{w}}"
                                                   for r, w in zip(rows, col_w, strict=True)))
    for (label, _), row in zip(table, cells, strict=True):
        lines.append(f"{label:<{label_w}}" + "".join(f"  {c:>{w}}" for c, w in zip(row, col_w, strict=True)))
    if len(rows) > 1:
        lines.append(f"# break-even: the price per device-hour at which an option costs what "
                     f"{first} costs per token")
    return "\n".join(lines)


def json_report(rows: list[dict], flops: dict, args, argv: list[str]) -> dict:
    """The --json document (keys: tools/schemas/upgrade_cost.schema.json)."""
    return {
        **envelope(BENCHMARK, None, argv=argv),
        "params": args.params, "layers": args.layers, "attn_width": args.hidden,
        "seq_len": args.seq_len, "flops_per_token": flops, "tokens": args.tokens,
        "devices": args.devices, "usd_per_kwh": args.usd_per_kwh, "breakdown": args.breakdown_info,
        "units": {"tflops": "1e12 FLOP/s per device", "usd": "the currency of the prices "
                  "given", "usd_per_mtoken": "per 1e6 trained tokens",
                  "days": "wall-clock on --devices devices at perfect scaling"},
        "results": rows,
    }


# ----------------------------------------------------------------------------------------------
# Command line: device options, their checks, main
# ----------------------------------------------------------------------------------------------

def device_spec(text: str) -> dict:
    """argparse type of ``--device``: ``NAME[:TFLOPS[:USD_PER_HOUR]]``, empty fields allowed
    (``NAME::2.5``: TFLOPS from --mamf-json)."""
    fields = text.split(":")
    if len(fields) > 3:
        raise argparse.ArgumentTypeError(f"{text!r} has {len(fields)} fields; expected "
                                         "NAME:TFLOPS:USD_PER_HOUR (names cannot contain ':')")
    name = fields[0].strip()
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r} has no NAME; expected NAME:TFLOPS:USD_PER_HOUR")
    if any(ch in NAME_FORBIDDEN for ch in name) or len(name) > 64:
        raise argparse.ArgumentTypeError(f"NAME {name[:64]!r} must be at most 64 printable "
                                         "characters without ':' or ','")
    spec = {"name": name, "tflops": None, "usd_per_device_hour": None}
    for key, what, field, hi in (("tflops", "TFLOPS", 1, MAX_TFLOPS),
                                 ("usd_per_device_hour", "USD_PER_HOUR", 2, MAX_USD_PER_HOUR)):
        if len(fields) > field and fields[field].strip():
            try:
                spec[key] = number(float, 0, hi, lo_open=True)(fields[field].strip())
            except argparse.ArgumentTypeError as err:
                raise argparse.ArgumentTypeError(f"{name}: {what} {err}") from None
    return spec


class NewDevice(argparse.Action):
    """``--device SPEC``: start a new device option."""

    def __call__(self, parser, namespace, values, option_string=None):
        options = getattr(namespace, self.dest) or []
        if len(options) >= MAX_OPTIONS:
            raise argparse.ArgumentError(self, f"at most {MAX_OPTIONS} device options")
        if any(o["name"] == values["name"] for o in options):
            raise argparse.ArgumentError(self, f"{values['name']!r} is given twice; names "
                                               "must be unique")
        setattr(namespace, self.dest, [*options, {**values, "set_by": {}}])


class DeviceSetting(argparse.Action):
    """An option that belongs to the ``--device`` before it."""

    def __call__(self, parser, namespace, values, option_string=None):
        options = namespace.device or []
        if not options:
            raise argparse.ArgumentError(self, "must follow the --device it belongs to")
        current = options[-1]
        if self.dest in current["set_by"]:
            raise argparse.ArgumentError(self, f"given twice for --device {current['name']}")
        current["set_by"][self.dest] = option_string
        current[self.dest] = values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Cost per trained token on each device option: tokens/s from TFLOPS "
                    "(given, or the MAMF of a mamf_finder.py --json) and model FLOPs per token "
                    "(6N + 12LaT), your price per device-hour, optional electricity; with the "
                    "break-even price against the first option. Decimal units.",
        epilog="Example: %(prog)s --params 7e9 --tokens 1e12 --devices 64 --device a100:312:1.5 "
               "--efficiency 0.45 --device h100 --mamf-json h100.json --usd-per-hour 3 "
               "--efficiency 0.55 (prices made up)")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    d = p.add_argument_group(
        "device options (repeat --device; the options after it belong to it; the first is the "
        "reference)")
    d.add_argument("--device", action=NewDevice, type=device_spec, metavar="NAME[:TFLOPS[:USD_PER_HOUR]]",
                   help="start a device option: a name, its TFLOPS figure and price per device-hour")
    d.add_argument("--mamf-json", action=DeviceSetting, type=nonempty, metavar="FILE",
                   help="take TFLOPS from this mamf_finder.py --json file (its best max_tflops "
                        "of --dtype)")
    d.add_argument("--dtype", action=DeviceSetting, choices=MAMF_DTYPES,
                   help="dtype to read from --mamf-json (default bf16)")
    d.add_argument("--usd-per-hour", action=DeviceSetting, metavar="USD",
                   type=number(float, 0, MAX_USD_PER_HOUR, lo_open=True),
                   help="price of one device for one hour (your price; any currency)")
    d.add_argument("--efficiency", action=DeviceSetting, metavar="FRACTION",
                   type=number(float, 0, 1, lo_open=True),
                   help="fraction of the TFLOPS figure the run achieves, (0, 1]: the MFU for a "
                        "peak, the share of MAMF for --mamf-json (default 1)")
    d.add_argument("--mem-gbps", action=DeviceSetting, metavar="GBPS",
                   type=number(float, 0, MAX_GBPS, lo_open=True),
                   help="memory bandwidth, GB/s (with --breakdown: speeds up optimizer and other)")
    d.add_argument("--link-gbps", action=DeviceSetting, metavar="GBPS",
                   type=number(float, 0, MAX_GBPS, lo_open=True),
                   help="all-reduce bandwidth, GB/s (with --breakdown: speeds up communication)")
    d.add_argument("--power-w", action=DeviceSetting, metavar="W",
                   type=number(float, 0, MAX_POWER_W, lo_open=True),
                   help="average power per device while training, W (needs --usd-per-kwh)")
    m = p.add_argument_group("model (6N, plus 12LaT when the shape is given)")
    m.add_argument("--params", required=True, type=number(float, 0, MAX_PARAMS, lo_open=True),
                   help="N, parameters used in matmuls (MoE: active per token)")
    m.add_argument("--layers", type=number(int, 1, MAX_COUNT), help="L, transformer layers")
    m.add_argument("--hidden", type=number(int, 1, MAX_COUNT),
                   help="a, attention width (heads x head dim; the hidden size for standard "
                        "attention)")
    m.add_argument("--seq-len", type=number(int, 1, MAX_COUNT), help="T, sequence length")
    r = p.add_argument_group("run")
    r.add_argument("--tokens", type=number(float, 0, MAX_TOKENS, lo_open=True),
                   help="tokens to train on: adds device-hours, cost and days")
    r.add_argument("--devices", type=number(int, 1, MAX_COUNT), default=1,
                   help="devices the run uses, for the days (default 1)")
    r.add_argument("--usd-per-kwh", type=number(float, 0, MAX_USD_PER_KWH, lo_open=True),
                   help="electricity price; every --device then needs --power-w")
    r.add_argument("--breakdown", metavar="FILE", type=nonempty,
                   help="a step_time_breakdown.py --json measured on the first option's device: "
                        "the other options' speed-up is taken part by part (needs --mem-gbps, "
                        "and --link-gbps when it has communication, after every --device)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the results as JSON")
    return p


def read_mamf_file(path: str, dtype: str, option: str) -> dict:
    """``mamf_tflops`` of the file at ``path``; ScriptError (usage, naming ``option`` and the
    file) when it is missing, unreadable, not JSON, not a mamf_finder.py result or lacks the
    dtype."""
    data = parse_json(read_input(path, option, limit=MAX_MAMF_BYTES), option, path)
    try:
        return mamf_tflops(data, dtype)
    except ValueError as err:
        raise ScriptError(f"{option} {path}: {err}", EXIT_USAGE) from None


def apply_breakdown(path: str, options: list[dict]) -> dict:
    """Read the step_time_breakdown.py file at ``path`` and give every option its part speed-ups
    over the first one and ``step_speedup``; returns the file's fractions, device and world size.
    ScriptError (usage) for a bad file or a missing
    bandwidth."""
    data = parse_json(read_input(path, "--breakdown", limit=MAX_MAMF_BYTES), "--breakdown", path)
    try:
        fractions = breakdown_fractions(data)
    except ValueError as err:
        raise ScriptError(f"--breakdown {path}: {err}", EXIT_USAGE) from None
    need = ["mem_gbps"] + ["link_gbps"] * (fractions["communication"] > 0)
    for o in options:
        for key in need:
            if o[key] is None:
                raise ScriptError(f"--device {o['name']}: --breakdown needs --{key.replace('_', '-')}"
                                  " after every --device", EXIT_USAGE)
    ref = options[0]
    info = {"file": path, "fractions": fractions, "device": data.get("device"),
            "world_size": data.get("world_size"), "interrupted": data.get("interrupted") is True}
    for o in options:
        sp = {"compute": o["tflops"] * o["efficiency"] / (ref["tflops"] * ref["efficiency"]),
              "memory": o["mem_gbps"] / ref["mem_gbps"],
              "link": o["link_gbps"] / ref["link_gbps"] if "link_gbps" in need else None}
        o.update(speedup_compute=sp["compute"], speedup_memory=sp["memory"],
                 speedup_link=sp["link"], step_speedup=step_speedup(fractions, sp))
    return info


def resolve(args) -> tuple[list[dict], dict]:
    """Check the parsed arguments and read the mamf files: (options for ``compare``, FLOPs per
    token). Raises ScriptError (usage) naming the option at fault."""
    if not args.device:
        raise ScriptError("give at least one --device (NAME:TFLOPS:USD_PER_HOUR, or NAME with "
                          "--mamf-json FILE and --usd-per-hour USD)", EXIT_USAGE)
    shape = {"--layers": args.layers, "--hidden": args.hidden, "--seq-len": args.seq_len}
    given = [k for k, v in shape.items() if v is not None]
    if given and len(given) < 3:
        missing = [k for k, v in shape.items() if v is None]
        raise ScriptError(f"{' '.join(given)} needs {' and '.join(missing)} too: the attention "
                          "term 12LaT needs all three", EXIT_USAGE)
    options = []
    for spec in args.device:
        name, set_by = spec["name"], spec["set_by"]
        where = f"--device {name}"
        if "mamf_json" in set_by:
            if spec["tflops"] is not None:
                raise ScriptError(f"{where}: TFLOPS given twice, in NAME:TFLOPS and --mamf-json; "
                                  "keep one", EXIT_USAGE)
        elif spec["tflops"] is None:
            raise ScriptError(f"{where}: no TFLOPS; write {name}:TFLOPS:USD_PER_HOUR or give "
                              "--mamf-json FILE after it", EXIT_USAGE)
        elif "dtype" in set_by:
            raise ScriptError(f"{where}: --dtype {spec['dtype']} only goes with --mamf-json",
                              EXIT_USAGE)
        if "usd_per_hour" in set_by:
            if spec["usd_per_device_hour"] is not None:
                raise ScriptError(f"{where}: price given twice, in NAME:TFLOPS:USD_PER_HOUR and "
                                  "--usd-per-hour; keep one", EXIT_USAGE)
            spec["usd_per_device_hour"] = spec["usd_per_hour"]
        elif spec["usd_per_device_hour"] is None:
            raise ScriptError(f"{where}: no price; write {name}:TFLOPS:USD_PER_HOUR or give "
                              "--usd-per-hour USD after it", EXIT_USAGE)
        if args.usd_per_kwh is not None and "power_w" not in set_by:
            raise ScriptError(f"{where}: no --power-w, but --usd-per-kwh is given (electricity "
                              "would be counted for some devices only)", EXIT_USAGE)
        if args.usd_per_kwh is None and "power_w" in set_by:
            raise ScriptError(f"{where}: --power-w {spec['power_w']:g} needs --usd-per-kwh",
                              EXIT_USAGE)
        option = {"name": name, "tflops": spec["tflops"],
                  "tflops_source": "given", "mamf_json": None, "mamf_dtype": None,
                  "mamf_device": None, "mamf_shape": None, "mamf_shapes": None,
                  "mamf_interrupted": None,
                  "usd_per_device_hour": spec["usd_per_device_hour"],
                  "efficiency": spec.get("efficiency", 1.0), "power_w": spec.get("power_w"),
                  "mem_gbps": spec.get("mem_gbps"), "link_gbps": spec.get("link_gbps")}
        if args.breakdown is None and (option["mem_gbps"] or option["link_gbps"]):
            raise ScriptError(f"{where}: --mem-gbps and --link-gbps only go with --breakdown",
                              EXIT_USAGE)
        if "mamf_json" in set_by:
            option["mamf_json"], option["mamf_dtype"] = spec["mamf_json"], spec.get("dtype", "bf16")
            options.append((option, spec["mamf_json"], set_by["mamf_json"]))
        else:
            options.append((option, None, None))
    if args.json:  # before reading anything else, and never over an input
        check_output(args.json, "--json", inputs=[path for _, path, _ in options if path]
                     + [args.breakdown] * (args.breakdown is not None))
    for option, path, flag in options:
        if path is not None:
            found = read_mamf_file(path, option["mamf_dtype"], f"--device {option['name']} {flag}")
            option.update(tflops=found["tflops"], tflops_source="mamf_json",
                          mamf_device=found["device"], mamf_shape=found["shape"],
                          mamf_shapes=found["shapes"],
                          mamf_interrupted=found["interrupted"])
    args.breakdown_info = None
    if args.breakdown is not None:
        args.breakdown_info = apply_breakdown(args.breakdown, [o for o, _, _ in options])
    try:
        flops = flops_per_token(args.params, args.layers, args.hidden, args.seq_len)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    return [o for o, _, _ in options], flops


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    options, flops = resolve(args)
    try:
        rows = compare(options, flops_per_token=flops["model"], tokens=args.tokens,
                       devices=args.devices, usd_per_kwh=args.usd_per_kwh)
    except ValueError as err:
        raise ScriptError(str(err), EXIT_USAGE) from None
    # The JSON file is written before the table is printed, so a closed pipe
    # (`| head`) cannot cost the reader the file.
    if args.json:
        write_atomic(args.json, json.dumps(json_report(rows, flops, args, argv), indent=2) + "\n")
    print(report(rows, flops, args))
    if args.json:
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


def envelope(benchmark: str, device: str | None, versions: dict | None = None,
             command: str | None = None, argv=None) -> dict:
    """The keys every results file starts with (tools/schemas/envelope.schema.json), in order:
    ``benchmark`` (the script's file stem), ``schema_version`` 1, ``date_utc`` (now),
    ``command`` (``command``, else ``command_line(argv)``), ``versions`` (Python's, and
    ``versions``: {"torch": ...}) and ``device`` (None where the result does not depend on the
    hardware). The script adds its own keys and ``results``."""
    import platform
    return {"benchmark": benchmark, "schema_version": 1, "date_utc": date_utc(),
            "command": command or command_line(argv, f"{benchmark}.py"),
            "versions": {"python": platform.python_version(), **(versions or {})}, "device": device}
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
