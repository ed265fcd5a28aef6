#!/usr/bin/env python
"""underflow_overflow_detector.py: find the first module whose numbers become Inf/NaN or leave a dtype's range.

What it does
------------
``OverflowDetector(model)`` registers a forward hook on every submodule. After each module runs, the
hook looks at the module's floating-point outputs (and, once per step, its own parameters) and
flags the first of:

* ``nan`` / ``inf``     - a non-finite element;
* ``overflow``          - a finite element whose magnitude exceeds the largest finite value of the
  *range dtype* (``--range-dtype``, default float16: 65504), i.e. a value that would become Inf if
  this tensor were cast to, or computed in, that dtype;
* ``underflow`` (only with ``underflow_frac``) - the fraction of non-zero elements whose magnitude
  is below the range dtype's smallest normal number exceeds ``underflow_frac`` (those values lose
  precision, and below the smallest subnormal become 0).

Modules run in forward order, so the first flag names the module where the trouble *starts*, not
the loss at the end where it is usually noticed. The report gives the module's qualified name
(as in ``model.named_modules()``), the tensor (``output``, ``output[1]``, ``weight``...), the
kind, the largest magnitude seen, and the training step and batch index (``detector.step`` counts
calls of ``detector.next_step()``; ``batch`` counts forward calls of the root model). It also keeps
the last ``trail`` modules' largest magnitudes, to show how values grew on the way there.

The dtype limits are torch.finfo's (float16: max 65504, smallest normal 2**-14 ~ 6.1e-05;
bfloat16: max ~3.39e38, smallest normal ~1.18e-38; IEEE 754 binary16 / bfloat16 formats).

Use as a library::

    from underflow_overflow_detector import OverflowDetector
    det = OverflowDetector(model, range_dtype=torch.float16, raise_on_detect=True)
    for step, batch in enumerate(loader):
        det.next_step()
        loss = model(batch).mean()   # raises OverflowDetected at the first bad module
        ...
    det.remove()

or run the demo, which trains a small MLP-in-blocks model and, at ``--inject-step``, multiplies the
weight of ``--inject-module`` by ``--inject-scale`` so that its output leaves the range::

    python underflow_overflow_detector.py --inject-module blocks.2.fc1 --inject-step 3
    python underflow_overflow_detector.py --list-modules
    python underflow_overflow_detector.py --dtype bfloat16 --range-dtype bfloat16 --inject-scale 1e38

Options: ``--dtype`` (the compute dtype of the demo model), ``--range-dtype``, ``--steps``,
``--inject-module``, ``--inject-step``, ``--inject-scale``, ``--json PATH`` (the report), ``--seed``.
Exit status: 0 when nothing was detected, 1 when a problem was detected, 2 on bad arguments.

Example output (2-core cloud VM, torch 2.13.0+cpu)::

    $ python scripts/debug/underflow_overflow_detector.py --inject-module blocks.2.fc1 --inject-step 3
    # underflow_overflow_detector.py: 4 blocks, compute dtype float32, range dtype float16 (max 6.55e+04), torch 2.13.0+cpu
    step 1: loss 1.131
    step 2: loss 0.3111
    step 3: scaled blocks.2.fc1.weight by 100000
    step 3: loss 8.068e+07
    DETECTED step 3 batch 3: overflow in module 'blocks.2.fc1' (Linear) output, max |x| = 1.916e+05 (range dtype float16, max 6.55e+04)
      modules run just before it (name, max |output|):
        blocks.1.act         1.749
        blocks.1.fc2         0.6196
        blocks.1             1.672
        blocks.2.norm        2.515
        blocks.2.fc1         1.916e+05
      later in the same forward: blocks.2.act, blocks.2.fc2, blocks.2, blocks.3
"""

from __future__ import annotations

import argparse
import json
import sys

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Demo of OverflowDetector: train a small model, inject an "
        "overflow into one module's weight, report the first module that leaves the range.")
    p.add_argument("--dtype", default="float32", choices=DTYPE_NAMES,
                   help="compute dtype of the demo model (default float32)")
    p.add_argument("--range-dtype", default="float16", choices=DTYPE_NAMES,
                   help="dtype whose finite range is checked (default float16, max 65504)")
    p.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    p.add_argument("--blocks", type=int, default=4, help="blocks in the demo model (default 4)")
    p.add_argument("--inject-module", default="",
                   help="qualified name of the module whose weight is scaled (default: none)")
    p.add_argument("--inject-step", type=int, default=3,
                   help="step at which the weight is scaled (default 3)")
    p.add_argument("--inject-scale", type=float, default=1e5,
                   help="factor applied to the weight (default 1e5)")
    p.add_argument("--list-modules", action="store_true", help="print module names and exit")
    p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    p.add_argument("--json", metavar="PATH", help="write the detections as JSON here")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        print(f"{PROG}: error: --steps must be at least 1, got {args.steps}", file=sys.stderr)
        return 2

    import torch
    import torch.nn as nn

    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)

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

    model = Model(32, args.blocks).to(dtype)
    modules = dict(model.named_modules())
    if args.list_modules:
        for name, m in modules.items():
            if name:
                print(f"{name:20s} {type(m).__name__}")
        return 0
    if args.inject_module and args.inject_module not in modules:
        print(f"{PROG}: error: no module named {args.inject_module!r} (see --list-modules)",
              file=sys.stderr)
        return 2
    if args.inject_module and not hasattr(modules[args.inject_module], "weight"):
        print(f"{PROG}: error: module {args.inject_module!r} has no weight to scale",
              file=sys.stderr)
        return 2

    det = OverflowDetector(model, range_dtype=getattr(torch, args.range_dtype))
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
    det.remove()
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
        with open(args.json, "w") as f:
            json.dump({"first": det.first, "detections": det.detections,
                       "range_dtype": args.range_dtype, "dtype": args.dtype}, f, indent=1)
            f.write("\n")
    return 1 if det.first else 0


if __name__ == "__main__":
    sys.exit(main())
