#!/usr/bin/env python
"""underflow_overflow_detector.py: find the first module whose numbers become Inf/NaN or leave a dtype's range.

``OverflowDetector(model)`` puts a forward hook on every submodule and flags the first module whose
floating-point output (or, once per step, parameter) holds a NaN, an Inf, or a finite value above
the largest finite value of a *range dtype* (``--range-dtype``, default float16: 65504), or, with
``underflow_frac``, too many values below its smallest normal number. Modules run in forward order,
so the first flag names the module where the trouble starts, with the step, the batch and the
largest magnitudes |x| of the modules run just before it.

Use it as a library::

    from underflow_overflow_detector import OverflowDetector
    det = OverflowDetector(model, range_dtype=torch.float16, raise_on_detect=True)
    det.next_step()                   # once per step; a bad forward raises OverflowDetected

or run the demo, which scales one module's weight at ``--inject-step``::

    python underflow_overflow_detector.py --inject-module blocks.2.fc1 --inject-step 3

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    step 3: scaled blocks.2.fc1.weight by 100000
    step 3: loss 8.068e+07
    DETECTED step 3 batch 3: overflow in module 'blocks.2.fc1' (Linear) output, max |x| = 1.916e+05 (range dtype float16, max 6.55e+04)
      modules run just before it (name, max |output|):
        blocks.2.norm        2.515
        blocks.2.fc1         1.916e+05

Exit status: 0 nothing detected, 3 a detection, 1 failure, 2 usage.
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

PROG = "underflow_overflow_detector.py"
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64")


class OverflowDetected(RuntimeError):
    """Raised by the hook when ``raise_on_detect`` is set; ``.report`` holds the details (dict)."""

    def __init__(self, report: dict):
        super().__init__(format_report(report))
        self.report = report


def format_report(report: dict) -> str:
    """One line describing a detection ``report`` (the dict OverflowDetector.first holds)."""
    return (f"step {report['step']} batch {report['batch']}: {report['kind']} in module "
            f"'{report['module']}' ({report['module_type']}) {report['tensor']}, "
            f"max |x| = {report['abs_max']:.4g} (range dtype {report['range_dtype']}, "
            f"max {report['dtype_max']:.4g})")


class OverflowDetector:
    """Forward hooks that report the first module producing Inf/NaN or out-of-range values.

    Args:
        model: the ``torch.nn.Module`` to watch (every submodule gets a forward hook; the root gets
            a pre-hook that counts batches).
        range_dtype: floating dtype whose finite range is checked (default torch.float16).
        check_weights: also check each module's own parameters, once per step.
        underflow_frac: if not None, flag ``underflow`` when more than this fraction (0..1) of a
            tensor's non-zero elements are below the range dtype's smallest normal number.
        raise_on_detect: raise OverflowDetected at the first detection (else record and go on).
        trail: how many recent (module, max |x|) pairs to keep for the report.

    Attributes: ``first`` (dict or None: the first detection), ``detections`` (list of dicts, one
    per module and kind, in order), ``step`` and ``batch`` counters.
    Raises TypeError if ``range_dtype`` is not a floating dtype.
    """

    def __init__(self, model, range_dtype=None, check_weights: bool = True,
                 underflow_frac: float | None = None, raise_on_detect: bool = False,
                 trail: int = 5):
        import torch
        self.torch = torch
        range_dtype = range_dtype or torch.float16
        if not range_dtype.is_floating_point:
            raise TypeError(f"range_dtype must be a floating dtype, got {range_dtype}")
        info = torch.finfo(range_dtype)
        self.range_dtype, self.max, self.tiny = range_dtype, float(info.max), float(info.tiny)
        self.check_weights, self.underflow_frac = check_weights, underflow_frac
        self.raise_on_detect, self.trail_len = raise_on_detect, trail
        self.step, self.batch = 0, 0
        self.first, self.detections, self.trail = None, [], []
        self._weights_checked: set[str] = set()
        self._seen: set[tuple[str, str]] = set()
        self.names = {m: n or "<root>" for n, m in model.named_modules()}
        self.handles = [model.register_forward_pre_hook(self._count_batch)]
        self.handles += [m.register_forward_hook(self._hook) for m in model.modules()]

    def next_step(self) -> None:
        """Advance the step counter (call once per optimizer step, before the forward)."""
        self.step += 1
        self._weights_checked.clear()

    def remove(self) -> None:
        """Remove all hooks."""
        for h in self.handles:
            h.remove()
        self.handles = []

    def _count_batch(self, module, inputs) -> None:
        self.batch += 1

    def _tensors(self, value, label: str):
        if isinstance(value, self.torch.Tensor):
            if value.is_floating_point():
                yield label, value
        elif isinstance(value, (tuple, list)):
            for i, v in enumerate(value):
                yield from self._tensors(v, f"{label}[{i}]")
        elif isinstance(value, dict):
            for k, v in value.items():
                yield from self._tensors(v, f"{label}[{k!r}]")

    def check(self, tensor) -> tuple[str | None, float]:
        """Classify one tensor: (kind or None, max |finite element|). Kinds as in the module doc."""
        torch = self.torch
        t = tensor.detach()
        if t.numel() == 0:
            return None, 0.0
        finite = torch.isfinite(t)
        abs_t = t.abs()
        abs_max = float(abs_t[finite].max()) if bool(finite.any()) else float("nan")
        if not bool(finite.all()):
            return ("nan" if bool(torch.isnan(t).any()) else "inf"), abs_max
        if abs_max > self.max:
            return "overflow", abs_max
        if self.underflow_frac is not None:
            nonzero = abs_t > 0
            n = int(nonzero.sum())
            if n and int((abs_t[nonzero] < self.tiny).sum()) / n > self.underflow_frac:
                return "underflow", abs_max
        return None, abs_max

    def _record(self, name: str, module, label: str, kind: str, abs_max: float) -> None:
        if (name, kind) in self._seen:
            return
        self._seen.add((name, kind))
        report = {"step": self.step, "batch": self.batch, "module": name,
                  "module_type": type(module).__name__, "tensor": label, "kind": kind,
                  "abs_max": abs_max, "range_dtype": str(self.range_dtype).replace("torch.", ""),
                  "dtype_max": self.max, "trail": list(self.trail)}
        self.detections.append(report)
        if self.first is None:
            self.first = report
            if self.raise_on_detect:
                raise OverflowDetected(report)

    def _hook(self, module, inputs, output) -> None:
        name = self.names.get(module, type(module).__name__)
        if self.check_weights and name not in self._weights_checked:
            self._weights_checked.add(name)
            for pname, p in module.named_parameters(recurse=False):
                kind, abs_max = self.check(p)
                if kind:
                    self._record(name, module, pname, kind, abs_max)
        for label, t in self._tensors(output, "output"):
            kind, abs_max = self.check(t)
            self.trail = (self.trail + [(name, abs_max)])[-self.trail_len:]
            if kind:
                self._record(name, module, label, kind, abs_max)


def demo_model(blocks: int, dtype):
    """The demo's model, 32 wide: an input layer, ``blocks`` pre-norm MLP blocks (LayerNorm, fc1,
    GELU, fc2, a residual) and a head."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, d: int):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class Model(nn.Module):
        def __init__(self, d: int, n: int):
            super().__init__()
            self.embed = nn.Linear(16, d)
            self.blocks = nn.ModuleList(Block(d) for _ in range(n))
            self.head = nn.Linear(d, 1)

        def forward(self, x):
            x = self.embed(x)
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Model(32, blocks).to(dtype)


def train_demo(args, model, modules: dict, det: OverflowDetector, dtype) -> None:
    """The demo's SGD steps on random data, scaling --inject-module's weight by --inject-scale at
    --inject-step; it stops after the step of the first detection."""
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(args.steps, 8, 16, dtype=dtype)
    target = torch.randn(args.steps, 8, 1, dtype=dtype)
    print(f"# {PROG}: {args.blocks} blocks, compute dtype {args.dtype}, range dtype "
          f"{args.range_dtype} (max {det.max:.4g}), torch {torch.__version__}")
    for step in range(args.steps):
        det.next_step()
        if args.inject_module and det.step == args.inject_step:
            with torch.no_grad():
                modules[args.inject_module].weight.mul_(args.inject_scale)
            print(f"step {det.step}: scaled {args.inject_module}.weight by {args.inject_scale:g}")
        loss = ((model(data[step]) - target[step]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {det.step}: loss {loss.item():.4g}")
        if det.first:
            break


def report(args, det: OverflowDetector) -> int:
    """The first detection and the trail before it on stdout, the detections in --json; the exit
    status."""
    if det.first:
        print("DETECTED " + format_report(det.first))
        print("  modules run just before it (name, max |output|):")
        for name, value in det.first["trail"]:
            print(f"    {name:20s} {value:.4g}")
        later = [d["module"] for d in det.detections[1:]]
        if later:
            print(f"  later in the same forward: {', '.join(later)}")
    else:
        print("no Inf/NaN or out-of-range values detected")
    if args.json:
        write_atomic(args.json, json.dumps({"first": det.first, "detections": det.detections,
                                            "range_dtype": args.range_dtype,
                                            "dtype": args.dtype}, indent=1) + "\n")
    return EXIT_FINDING if det.first else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Demo of OverflowDetector: train a small model, inject an "
        "overflow into one module's weight, report the first module that leaves the range.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="compute dtype of the demo model (default float32)")
    p.add_argument("--range-dtype", default="float16", choices=DTYPE_NAMES,
                   help="dtype whose finite range is checked (default float16, max 65504)")
    p.add_argument("--steps", type=number(int, 1, 100_000), default=6, help="training steps (default 6)")
    p.add_argument("--blocks", type=number(int, 1, 1000), default=4, help="blocks in the demo model (default 4)")
    p.add_argument("--inject-module", default="",
                   help="qualified name of the module whose weight is scaled (default: none)")
    p.add_argument("--inject-step", type=number(int, 1), default=3,
                   help="step at which the weight is scaled (default 3)")
    p.add_argument("--inject-scale", type=number(float), default=1e5,
                   help="factor applied to the weight (default 1e5)")
    p.add_argument("--list-modules", action="store_true", help="print module names and exit")
    p.add_argument("--seed", type=number(int), default=0, help="seed (default 0)")
    p.add_argument("--json", metavar="PATH", type=nonempty,
                   help="write the detections as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.inject_module and args.inject_step > args.steps:
        # it would never happen, and the run would report "nothing detected"
        parser.error(f"--inject-step {args.inject_step} is after the last step (--steps "
                     f"{args.steps})")
    if args.json:
        check_output(args.json, "--json")

    import torch

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    model = demo_model(args.blocks, dtype)
    modules = dict(model.named_modules())
    if args.list_modules:
        for name, m in modules.items():
            if name:
                print(f"{name:20s} {type(m).__name__}")
        return 0
    if args.inject_module and args.inject_module not in modules:
        parser.error(f"--inject-module: no module named {args.inject_module!r} (see "
                     "--list-modules)")
    if args.inject_module and not hasattr(modules[args.inject_module], "weight"):
        parser.error(f"--inject-module: module {args.inject_module!r} has no weight to scale")

    det = OverflowDetector(model, range_dtype=getattr(torch, args.range_dtype))
    train_demo(args, model, modules, det, dtype)
    det.remove()
    return report(args, det)


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
