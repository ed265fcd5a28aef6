#!/usr/bin/env python
"""gpu_memory_monitor.py: log GPU memory from PyTorch's caching allocator inside a training loop.

What it reports
---------------
``nvidia-smi`` shows what the *process* holds on the device: the CUDA context plus everything
PyTorch's caching allocator has reserved, used or not. To see what the training step needs, ask
the allocator itself (``torch.cuda.memory_stats``, https://pytorch.org/docs/stable/generated/torch.cuda.memory_stats.html).
Per call, :class:`MemoryMonitor` returns and formats:

* ``allocated``      - bytes in live tensors now (``allocated_bytes.all.current``);
* ``active_peak``    - the most bytes in active blocks since the last reset (``active_bytes.all.peak``):
                       what the step really needed at its worst moment;
* ``reserved_peak``  - the most bytes the allocator held from the driver (``reserved_bytes.all.peak``);
                       reserved minus active is cached or fragmented memory;
* ``alloc_retries``  - ``num_alloc_retries``: times a cudaMalloc failed and the allocator freed its
                       cache and tried again. Each retry synchronizes the device; a count that keeps
                       growing means the job runs at the edge of memory and is slowed by it;
* ``ooms``           - ``num_ooms``: out-of-memory errors raised (caught or not);
* ``device_total``   - the device's memory (``torch.cuda.mem_get_info``), to print percentages.

Units: bytes in the dict and in ``--json``; the line printed uses GiB (2**30 bytes).
Peaks are since the previous ``reset_peaks()`` (call it once per step to get per-step peaks).

Without CUDA there is no device allocator to ask: the monitor says so once and falls back to the
process's resident memory (``rss`` now and ``rss_peak`` since the process started, from
/proc/self/status on Linux or ``resource.getrusage``), labelled as host memory, so a CPU run of
the same training loop still logs something meaningful.

Use it from a training loop::

    from gpu_memory_monitor import MemoryMonitor
    mon = MemoryMonitor()            # current CUDA device, or host RSS without CUDA
    for step in range(steps):
        ...forward, backward, optimizer.step()...
        print(f"step {step} | {mon.format(mon.snapshot())}")
        mon.reset_peaks()

How to launch the demo
----------------------
``python gpu_memory_monitor.py`` runs a small loop that allocates a growing list of tensors
(``--steps``, ``--mib`` per step), prints one line per step and, with ``--provoke-oom``, asks for
more memory than the device has, catches the error and shows ``ooms`` go up. ``--json PATH``
writes the per-step snapshots. Under torchrun every rank monitors its own GPU (LOCAL_RANK).

Example output (CPU-only machine, torch 2.13.0+cpu)::

    $ python scripts/training/gpu_memory_monitor.py --steps 3 --mib 64
    # gpu_memory_monitor.py: CUDA is not available; reporting host process memory (RSS) instead
    step 0 | host rss 0.28 GiB | rss peak 0.40 GiB
    step 1 | host rss 0.34 GiB | rss peak 0.47 GiB
    step 2 | host rss 0.40 GiB | rss peak 0.53 GiB

(RSS grows by the 64 MiB kept each step; the peak also saw the 128 MiB temporary, freed before
the snapshot. On a GPU the same loop prints the allocator's counters instead.)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

PROG = "gpu_memory_monitor.py"
GIB = 2**30


def _host_memory() -> dict[str, int]:
    """Resident set size of this process now and its peak, in bytes (Linux /proc, else
    getrusage; ``rss`` is then the peak too)."""
    rss = peak = None
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    if rss is None or peak is None:
        import resource  # Unix only; ru_maxrss is KiB on Linux, bytes on macOS
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = maxrss if sys.platform == "darwin" else maxrss * 1024
        rss = peak if rss is None else rss
    return {"rss": rss, "rss_peak": peak}


class MemoryMonitor:
    """Reads the CUDA caching allocator's counters for one device (or host RSS without CUDA).

    ``device``: a CUDA device index, ``torch.device`` or None for the current device. Raises
    ValueError if ``device`` is given but CUDA is not available or the index does not exist.
    """

    def __init__(self, device=None, warn=True):
        import torch  # imported here so that `--help` works without torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        if not self.cuda:
            if device is not None:
                raise ValueError(f"device {device} requested but CUDA is not available")
            self.device = None
            if warn:
                print(f"# {PROG}: CUDA is not available; reporting host process memory (RSS) "
                      "instead", file=sys.stderr)
            return
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device if not isinstance(device, int) else f"cuda:{device}")
        if self.device.index is not None and self.device.index >= torch.cuda.device_count():
            raise ValueError(f"CUDA device {self.device.index} does not exist "
                             f"({torch.cuda.device_count()} visible)")
        _free, self.device_total = torch.cuda.mem_get_info(self.device)

    def snapshot(self) -> dict:
        """Current counters as a dict of ints (bytes or counts); see the module docstring.
        Keys with CUDA: kind='cuda', allocated, active_peak, reserved, reserved_peak,
        alloc_retries, ooms, device_total. Without: kind='host', rss, rss_peak."""
        if not self.cuda:
            return {"kind": "host", **_host_memory()}
        st = self.torch.cuda.memory_stats(self.device)
        return {"kind": "cuda",
                "allocated": st.get("allocated_bytes.all.current", 0),
                "active_peak": st.get("active_bytes.all.peak", 0),
                "reserved": st.get("reserved_bytes.all.current", 0),
                "reserved_peak": st.get("reserved_bytes.all.peak", 0),
                "alloc_retries": st.get("num_alloc_retries", 0),
                "ooms": st.get("num_ooms", 0),
                "device_total": self.device_total}

    def reset_peaks(self) -> None:
        """Start a new peak window (``torch.cuda.reset_peak_memory_stats``); the retry and OOM
        counters are cumulative and are not reset. No-op without CUDA (RSS peaks cannot be
        reset)."""
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    @staticmethod
    def format(snap: dict) -> str:
        """One log-friendly line for a snapshot, sizes in GiB."""
        if snap["kind"] == "host":
            return f"host rss {snap['rss'] / GIB:.2f} GiB | rss peak {snap['rss_peak'] / GIB:.2f} GiB"
        total = snap["device_total"] or 1
        return (f"alloc {snap['allocated'] / GIB:.2f} GiB | active peak "
                f"{snap['active_peak'] / GIB:.2f} GiB ({100 * snap['active_peak'] / total:.0f}%) | "
                f"reserved peak {snap['reserved_peak'] / GIB:.2f} GiB "
                f"({100 * snap['reserved_peak'] / total:.0f}%) | retries {snap['alloc_retries']} | "
                f"OOMs {snap['ooms']}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="Demo of MemoryMonitor: allocate a growing "
                                "set of tensors and print the allocator's counters each step.")
    p.add_argument("--steps", type=_positive_int, default=5, help="demo steps (default 5)")
    p.add_argument("--mib", type=_positive_int, default=64,
                   help="MiB allocated and kept per step (default 64)")
    p.add_argument("--provoke-oom", action="store_true",
                   help="after the loop, request more than the device holds and catch the OOM "
                   "(CUDA only)")
    p.add_argument("--json", metavar="PATH", help="write the per-step snapshots to PATH")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            print(f"{PROG}: error: LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} "
                  "CUDA devices are visible", file=sys.stderr)
            return 1
        torch.cuda.set_device(local_rank)
    elif args.provoke_oom:
        print(f"{PROG}: error: --provoke-oom needs CUDA (no device allocator on CPU)",
              file=sys.stderr)
        return 2
    mon = MemoryMonitor()
    device = mon.device or torch.device("cpu")
    kept, steps = [], []
    for step in range(args.steps):
        mon.reset_peaks()
        kept.append(torch.ones(args.mib * 2**20 // 4, dtype=torch.float32, device=device))
        # a temporary twice as large, freed before the snapshot: it shows in the peak only
        tmp = torch.empty(2 * args.mib * 2**20 // 4, dtype=torch.float32, device=device)
        tmp.fill_(1.0)
        del tmp
        snap = mon.snapshot()
        steps.append({"step": step, **snap})
        print(f"step {step} | {mon.format(snap)}", flush=True)
    if args.provoke_oom:
        _free, total = torch.cuda.mem_get_info(device)
        try:
            torch.empty(2 * total, dtype=torch.uint8, device=device)
        except torch.OutOfMemoryError:
            snap = mon.snapshot()
            steps.append({"step": "oom", **snap})
            print(f"after OOM | {mon.format(snap)}", flush=True)
    if args.json:
        try:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump({"tool": "gpu_memory_monitor", "schema_version": 1, "units": "bytes",
                           "mib_per_step": args.mib, "steps": steps}, fh, indent=2)
        except OSError as err:
            print(f"{PROG}: error: cannot write --json {args.json}: {err.strerror}",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
