#!/usr/bin/env python
"""activation_diff.py: find the first module where two runs of the same model part ways.

``ActivationRecorder(model)`` hooks every submodule and records, in execution order, statistics
of each floating-point output and of the gradient that reaches it in backward: mean, rms, absmax,
NaN/Inf count and a probe, sum(x_i * cos(0.7 i)) / sqrt(n), which moves when elements change
place. ``compare`` walks two recordings and names the first record whose difference,
max(|Δmean|, |Δrms|, |Δabsmax|, |Δprobe|) / max(rms_A, rms_B) (dimensionless), exceeds
``--rtol``: since modules run in order, that is where the runs part ways.

Record in each of the two runs (same model, same inputs, same step), then compare::

    rec = ActivationRecorder(model); loss_fn(model(x), y).backward(); rec.save("run_a.json")
    python activation_diff.py compare run_a.json run_b.json [--rtol 1e-3] [--json report.json]

or run the demo, which changes one weight by a factor of 1 + ``--inject-eps`` between two runs::

    python activation_diff.py demo --inject-module blocks.3.fc1 --inject-eps 1e-3

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/debug/activation_diff.py demo --inject-module blocks.3.fc1
    forward: 33 records in A, 33 in B; first divergence at record 16: module 'blocks.3.fc1' (Linear) output [16, 256]: difference 0.0037 (rms A 0.5849, B 0.5855; absmax A 2.103, B 2.105)
          15 blocks.3.norm          output              0
      >   16 blocks.3.fc1           output         0.0037
          17 blocks.3.act           output        0.00622
    FIRST DIVERGENCE (forward): module 'blocks.3.fc1' (Linear) output [16, 256]: difference 0.0037 (rms A 0.5849, B 0.5855; absmax A 2.103, B 2.105)

Exit status: 0 the runs agree, 3 a divergence, 1 failure, 2 usage or unreadable record files.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import traceback

PROG = "activation_diff.py"
SCHEMA = "activation_diff/1"
STATS = ("mean", "rms", "absmax", "probe")
DTYPE_NAMES = ("float32", "float64", "bfloat16", "float16")
SCALE_FLOOR = 1e-30  # a tensor of zeros in both runs: any difference is relative to this


def tensor_stats(t) -> dict:
    """Statistics of one floating-point tensor (any shape): mean, rms and absmax of its finite
    elements, the count of NaN/Inf elements, and probe = sum(x_i cos(0.7 i)) / sqrt(n) over the
    flattened finite elements (non-finite ones count as 0). Computed in float64 on CPU and float32
    on other devices; plain Python floats out."""
    import torch
    work = torch.float64 if t.device.type == "cpu" else torch.float32
    x = t.detach().reshape(-1).to(work)
    finite = torch.isfinite(x)
    n_bad = int((~finite).sum())
    x = torch.where(finite, x, torch.zeros((), dtype=work, device=x.device))
    n_ok = x.numel() - n_bad
    pattern = torch.cos(0.7 * torch.arange(x.numel(), dtype=work, device=x.device))
    stats = {
        "mean": float(x.sum()) / n_ok if n_ok else 0.0,
        "rms": math.sqrt(float((x * x).sum()) / n_ok) if n_ok else 0.0,
        "absmax": float(x.abs().max()) if x.numel() else 0.0,
        "probe": float((x * pattern).sum()) / math.sqrt(x.numel()) if x.numel() else 0.0,
        "nonfinite": n_bad,
    }
    return stats


def _float_tensors(value, where: str):
    """(label, tensor) for every floating-point tensor in a module's output, which may be a tensor,
    a tuple/list or a dict of them (labels: "output", "output[1]", "output['logits']")."""
    import torch
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield where, value
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _float_tensors(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _float_tensors(item, f"{where}[{key!r}]")


class ActivationRecorder:
    """Record statistics of every submodule's outputs (and, with ``backward=True``, of the
    gradients reaching them) in execution order.

    ``model``: any ``torch.nn.Module``; every module in ``model.named_modules()`` is hooked (the
    root is recorded under the name ""). Each record is a dict: phase ("forward" or "backward"),
    module (qualified name), type (class name), call (how many times this module ran before, in
    this recording), tensor ("output", "output[0]", ...), shape, dtype and the statistics of
    ``tensor_stats``. Gradients are recorded through hooks on the output tensors, so modules whose
    outputs do not require grad (under ``torch.no_grad()``, or frozen inputs) have none.
    ``records`` holds them; ``save(path)`` writes them (JSON, written atomically); ``remove()``
    takes the hooks off. Raises TypeError if ``model`` is not a module.
    """

    def __init__(self, model, backward: bool = True):
        import torch
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ActivationRecorder needs a torch.nn.Module, not {type(model).__name__}")
        self.records: list[dict] = []
        self.backward = backward
        self._calls: dict[str, int] = {}
        self._handles = [module.register_forward_hook(self._hook(name))
                         for name, module in model.named_modules()]

    def _hook(self, name: str):
        def hook(module, inputs, output):
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            for label, t in _float_tensors(output, "output"):
                where = {"module": name, "type": type(module).__name__, "call": call,
                         "tensor": label, "shape": list(t.shape),
                         "dtype": str(t.dtype).replace("torch.", "")}
                self.records.append({"phase": "forward", **where, **tensor_stats(t)})
                if self.backward and t.requires_grad:
                    t.register_hook(self._grad_hook(where))
        return hook

    def _grad_hook(self, where: dict):
        def hook(grad):
            self.records.append({"phase": "backward", **where, **tensor_stats(grad)})
        return hook

    def save(self, path: str) -> None:
        """Write the records to ``path`` as JSON (through a temporary file and a rename)."""
        save_records(path, self.records)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def save_records(path: str, records: list[dict]) -> None:
    """Write ``records`` as an activation_diff record file (JSON, written atomically)."""
    import torch
    write_atomic(path, json.dumps({"schema": SCHEMA, "torch": torch.__version__,
                                   "records": records}, indent=0) + "\n")


def load_records(path: str, option: str) -> list[dict]:
    """The records of an activation_diff JSON file. Raises ScriptError (usage, naming ``option``
    and the file) if it is missing, unreadable, not JSON or not an activation_diff record file."""
    data = parse_json(read_input(path, option, limit=1 << 30), option, path)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("records"), list):
        raise ScriptError(f"{option}: {path} is not an activation_diff record file (no "
                          f"'schema': '{SCHEMA}' with a 'records' list)", EXIT_USAGE)
    for i, r in enumerate(data["records"]):
        if not isinstance(r, dict) or any(not isinstance(r.get(k), (int, float)) for k in (*STATS, "nonfinite")) \
                or r.get("phase") not in ("forward", "backward"):
            raise ScriptError(f"{option}: {path}: record {i} lacks a phase or a statistic", EXIT_USAGE)
        bad = next((k for k in STATS if not math.isfinite(r[k])), None)
        if bad:  # the recorder counts NaN/Inf elements in "nonfinite" and keeps its statistics finite
            raise ScriptError(f"{option}: {path}: record {i} has {bad} = {r[bad]}, which no recording "
                              "holds (NaN/Inf elements are counted in 'nonfinite'); the file is "
                              "damaged or edited", EXIT_USAGE)
    return data["records"]


def _key(r: dict) -> tuple:
    return (r["module"], r["call"], r["tensor"])


def difference(a: dict, b: dict) -> float:
    """max |Δ| of mean, rms, absmax and probe, over the larger rms of the two (floored at 1e-30);
    infinite when the counts of non-finite elements differ."""
    if a["nonfinite"] != b["nonfinite"] or not all(math.isfinite(r[s]) for r in (a, b) for s in STATS):
        return math.inf  # a NaN difference would compare as "no divergence"
    scale = max(abs(a["rms"]), abs(b["rms"]), SCALE_FLOOR)
    return max(abs(a[s] - b[s]) for s in STATS) / scale


def compare(records_a: list[dict], records_b: list[dict], rtol: float) -> dict:
    """Compare two recordings, phase by phase (forward, then backward), record by record.

    Returns {"rtol", "phases": {phase: {"records", "first", "rows"}}, "first"}: for each phase the
    number of records, the first divergent one (None if none) and, for the report, every record
    with its difference; "first" is the first divergence of the forward phase, else of the
    backward phase, else None. A record is divergent when its difference exceeds ``rtol`` or its
    NaN/Inf count differs; when the two runs recorded different calls at some position (another
    module, another shape), that position is the divergence, with kind "structure".
    """
    out = {"rtol": rtol, "phases": {}, "first": None}
    for phase in ("forward", "backward"):
        a = [r for r in records_a if r["phase"] == phase]
        b = [r for r in records_b if r["phase"] == phase]
        rows, first = [], None
        for i in range(max(len(a), len(b))):
            ra, rb = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
            if ra is None or rb is None or _key(ra) != _key(rb) or ra["shape"] != rb["shape"]:
                row = {"index": i, "kind": "structure", "a": ra, "b": rb, "difference": math.inf}
            else:
                d = difference(ra, rb)
                kind = "nonfinite" if ra["nonfinite"] != rb["nonfinite"] else "values"
                row = {"index": i, "kind": kind, "a": ra, "b": rb, "difference": d}
            rows.append(row)
            if first is None and row["difference"] > rtol:
                first = row
            if row["kind"] == "structure":
                break  # past a different call the positions no longer correspond
        out["phases"][phase] = {"records": [len(a), len(b)], "first": first, "rows": rows}
        if out["first"] is None and first is not None:
            out["first"] = {**first, "phase": phase}
    return out


def demo_records(args) -> tuple[list[dict], list[dict], list[str]]:
    """Run the demo model twice (A as built; B with the injection or the other dtype) on the same
    input; returns (records A, records B, module names)."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.fc1 = nn.Linear(width, 4 * width)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class Model(nn.Module):
        def __init__(self, blocks, width):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(width) for _ in range(blocks)])
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            return self.head(self.blocks(x))

    def build():
        torch.manual_seed(args.seed)
        model = Model(args.blocks, args.width)
        x = torch.randn(args.batch, args.width)
        y = torch.randn(args.batch, 1)
        return model, x, y

    modules = dict(build()[0].named_modules())
    names = list(modules)
    if args.list_modules:
        return [], [], names
    if args.inject_module and not isinstance(modules.get(args.inject_module), nn.Linear):
        linears = [n for n, m in modules.items() if isinstance(m, nn.Linear)]
        raise ScriptError(f"--inject-module: '{args.inject_module}' is not a Linear of the demo model "
                          f"({linears[0]} ... {linears[-1]}; see --list-modules)", EXIT_USAGE)
    runs = []
    for run in ("A", "B"):
        model, x, y = build()
        if run == "B":
            if args.inject_module:
                with torch.no_grad():
                    dict(model.named_modules())[args.inject_module].weight.mul_(1 + args.inject_eps)
            dtype = getattr(torch, args.b_dtype)
            model, x, y = model.to(dtype), x.to(dtype), y.to(dtype)
        rec = ActivationRecorder(model)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        rec.remove()
        runs.append(rec.records)
    return runs[0], runs[1], names


def _name(r: dict | None) -> str:
    if r is None:
        return "(nothing)"
    call = f" call {r['call']}" if r["call"] else ""
    return f"'{r['module']}' ({r['type']}){call} {r['tensor']} {r['shape']}"


def describe(row: dict) -> str:
    """One line for a divergent row."""
    a, b = row["a"], row["b"]
    if row["kind"] == "structure":
        return f"the runs recorded different calls: A {_name(a)}, B {_name(b)}"
    if row["kind"] == "nonfinite":
        return f"module {_name(a)}: NaN/Inf elements A {a['nonfinite']}, B {b['nonfinite']}"
    return (f"module {_name(a)}: difference {row['difference']:.3g} (rms A {a['rms']:.4g}, "
            f"B {b['rms']:.4g}; absmax A {a['absmax']:.4g}, B {b['absmax']:.4g})")


def report(result: dict, context: int = 3, after: int = 4) -> str:
    """The text report: per phase, the first divergence with the ``context`` records before it
    and ``after`` records after it."""
    lines = []
    for phase, res in result["phases"].items():
        n_a, n_b = res["records"]
        first = res["first"]
        head = f"{phase}: {n_a} records in A, {n_b} in B"
        if first is None:
            lines.append(f"{head}; all agree within rtol {result['rtol']:g}")
            continue
        lines.append(f"{head}; first divergence at record {first['index']}: {describe(first)}")
        rows = res["rows"]
        lo, hi = max(0, first["index"] - context), min(len(rows), first["index"] + after + 1)
        for row in rows[lo:hi]:
            mark = ">" if row is first else " "
            shown = row["a"] or row["b"]
            d = "structure" if row["kind"] == "structure" else f"{row['difference']:.3g}"
            lines.append(f"  {mark} {row['index']:>4} {shown['module'] or '(root)':<22} "
                         f"{shown['tensor']:<10} {d:>10}")
    first = result["first"]
    lines.append(f"FIRST DIVERGENCE ({first['phase']}): {describe(first)}" if first
                 else f"no divergence: the two runs agree within rtol {result['rtol']:g}")
    return "\n".join(lines)


def _json_safe(value):
    """math.inf has no JSON spelling: write it as the string "inf"."""
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Find the first module where two runs of the same model part "
        "ways: compare two ActivationRecorder files, or run the demo.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    sub = p.add_subparsers(dest="command", required=True, metavar="{compare,demo}")

    # prog=PROG: an error in a subcommand's options still reads "activation_diff.py: error: ..."
    c = sub.add_parser("compare", prog=PROG, usage=f"{PROG} compare RUN_A RUN_B [options]",
                       help="compare two record files written by ActivationRecorder.save()")
    c.add_argument("run_a", type=nonempty, help="record file of the reference run (A)")
    c.add_argument("run_b", type=nonempty, help="record file of the other run (B)")

    d = sub.add_parser("demo", prog=PROG, usage=f"{PROG} demo [options]",
                       help="record a small model twice, with a change in between, and compare")
    d.add_argument("--blocks", type=number(int, 1, 64), default=6, help="residual MLP blocks (default 6)")
    d.add_argument("--width", type=number(int, 1, 4096), default=64, help="block width (default 64)")
    d.add_argument("--batch", type=number(int, 1, 4096), default=16, help="batch size (default 16)")
    d.add_argument("--inject-module", default="",
                   help="qualified name of the Linear whose weight run B scales (default: none)")
    d.add_argument("--inject-eps", type=number(float, -1, lo_open=True), default=1e-3,
                   help="run B multiplies that weight by 1 + EPS (default 1e-3)")
    d.add_argument("--b-dtype", choices=DTYPE_NAMES, default="float32",
                   help="dtype of run B's model and input (default float32, as run A)")
    d.add_argument("--list-modules", action="store_true", help="print the module names and exit")
    d.add_argument("--seed", type=number(int), default=0, help="seed (default 0)")
    d.add_argument("--save-dir", metavar="DIR", type=nonempty,
                   help="also write the two record files, run_a.json and run_b.json, here")
    for q in (c, d):
        q.add_argument("--rtol", type=number(float, 0, lo_open=True), default=1e-3,
                       help="largest difference counted as agreement (default 1e-3)")
        q.add_argument("--json", metavar="PATH", type=nonempty, help="write the comparison as JSON here")
        q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="on failure, print the traceback too")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    inputs = (args.run_a, args.run_b) if args.command == "compare" else ()
    if args.json:
        check_output(args.json, "--json", inputs)
    if args.command == "compare":
        records_a = load_records(args.run_a, "run_a")
        records_b = load_records(args.run_b, "run_b")
        print(f"# {PROG}: A = {args.run_a}, B = {args.run_b}, rtol {args.rtol:g}")
    else:
        if args.save_dir:
            check_output_dir(args.save_dir, "--save-dir")
            for name in ("run_a.json", "run_b.json"):
                check_output(os.path.join(args.save_dir, name), "--save-dir")
        import torch
        records_a, records_b, names = demo_records(args)
        if args.list_modules:
            print("\n".join(n or "(root)" for n in names))
            return EXIT_OK
        what = (f"B scales {args.inject_module}.weight by 1{args.inject_eps:+g}" if args.inject_module
                else "B is unchanged")
        print(f"# {PROG} demo: {args.blocks} blocks of width {args.width}, batch {args.batch}; "
              f"{what}; B in {args.b_dtype}; rtol {args.rtol:g}; torch {torch.__version__}")
        if args.save_dir:
            save_records(os.path.join(args.save_dir, "run_a.json"), records_a)
            save_records(os.path.join(args.save_dir, "run_b.json"), records_b)
    result = compare(records_a, records_b, args.rtol)
    print(report(result))
    if args.json:
        write_atomic(args.json, json.dumps(_json_safe(result), indent=1) + "\n")
    return EXIT_FINDING if result["first"] else EXIT_OK


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


def check_output_dir(path: str, option: str) -> str:
    """Check, before any work, that the folder ``path`` (given as ``option``) can receive results:
    creates it if missing and makes sure a file can be created in it. Returns the path; raises
    ScriptError naming the option and the offending path otherwise."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ScriptError(f"{option} {path}: {existing} is a file, not a folder", EXIT_USAGE)
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write there ({err.strerror})", EXIT_USAGE) from None
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
