#!/usr/bin/env python
"""numa_affinity.py: bind each local rank to the CPU cores nearest its GPU, then run a command.

It finds this process's local rank (LOCAL_RANK from torchrun, SLURM_LOCALID from srun, else
``--local-rank``), maps it to a GPU in PCI bus order (numeric CUDA_VISIBLE_DEVICES selects), reads
that GPU's NUMA node and local CPUs from sysfs, restricts itself to them (os.sched_setaffinity;
``--split``: this rank's equal share of them) and replaces itself with the command (os.execvp),
which inherits the binding and the environment. Linux's first-touch placement then keeps memory
local. No torch, no pynvml: sysfs only. Method and alternatives: book/en/compute/cpu.md.

As a wrapper, one process per GPU::

    torchrun --nproc-per-node 8 numa_affinity.py -- python train.py --config cfg.yaml
    srun --ntasks-per-node 8 python numa_affinity.py --split -- python train.py
    python numa_affinity.py --print --nranks 8          # the plan of every local rank, no command

Example output (``--print`` on a 2-vCPU cloud VM without GPUs)::

    $ python scripts/compute/numa_affinity.py --print --nranks 2
    # numa_affinity.py: no GPU found under /sys/bus/pci/devices
    # NUMA nodes: node0 cpus 0-1
    # would bind local rank R to the CPUs of the NUMA node of GPU R
    # (read from /sys/bus/pci/devices/<gpu>/local_cpulist); nothing to bind here

Exit status: that of the command (0 after --print), 2 usage (checked before binding), 126/127 a
command that cannot be executed / found.
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
from pathlib import Path

PROG = "numa_affinity.py"
GPU_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD"}
# Linux builds for at most 8192 CPUs (NR_CPUS); a cpulist naming more is corrupt, and expanding
# "0-4000000000" would exhaust memory.
MAX_CPU = 65535


# ----------------------------------------------------------------------------------------------
# The method: sysfs topology, the GPUs, one rank's plan
# ----------------------------------------------------------------------------------------------

class TopologyError(ValueError):
    """sysfs content that cannot be interpreted (message names the file)."""


def parse_cpulist(text: str) -> list[int]:
    """CPUs of a kernel cpulist such as ``0-3,8,10-11`` (sorted, no duplicates).

    Raises TopologyError for malformed text.
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
            else:
                lo = hi = int(part)
            if not 0 <= lo <= hi:
                raise ValueError
        except ValueError:
            raise TopologyError(f"malformed cpu list {text!r}") from None
        if hi > MAX_CPU:
            raise TopologyError(f"cpu list {text!r} names cpu {hi}; at most {MAX_CPU} (corrupt?)")
        cpus.update(range(lo, hi + 1))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """Inverse of parse_cpulist: ``[0, 1, 2, 3, 8]`` -> ``0-3,8``."""
    parts, cpus = [], sorted(set(cpus))
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as err:
        raise TopologyError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"{path}: not UTF-8 text") from None


def _read_int(path: Path) -> int:
    text = _read(path)
    try:
        return int(text)
    except ValueError:
        raise TopologyError(f"{path}: {text[:40]!r} is not an integer") from None


def numa_nodes(sysfs: Path) -> dict[int, list[int]]:
    """{node: cpus} from <sysfs>/devices/system/node/node*/cpulist ({} if the kernel has none)."""
    base = sysfs / "devices" / "system" / "node"
    nodes = {}
    for d in sorted(base.glob("node[0-9]*")):
        try:
            nodes[int(d.name[4:])] = parse_cpulist(_read(d / "cpulist"))
        except TopologyError as err:
            raise TopologyError(f"{d / 'cpulist'}: {err}") from None
    return nodes


def find_gpus(sysfs: Path) -> list[dict]:
    """GPUs on the PCI bus, in bus-address order: [{address, vendor, numa_node, cpus}].

    A GPU is a PCI display controller (class 0x03xxxx) from a vendor in GPU_VENDORS.
    ``numa_node`` is -1 when the platform does not report one (single-socket machines); ``cpus``
    is the device's local_cpulist (falling back to the node's cpulist, then to no CPUs).
    """
    nodes = numa_nodes(sysfs)
    gpus = []
    for dev in sorted((sysfs / "bus" / "pci" / "devices").glob("*")):
        try:
            cls = (dev / "class").read_text(encoding="ascii").strip()
            vendor = (dev / "vendor").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if not cls.startswith("0x03") or vendor not in GPU_VENDORS:
            continue
        node_file = dev / "numa_node"
        node = _read_int(node_file) if node_file.exists() else -1
        if (dev / "local_cpulist").exists():
            try:
                cpus = parse_cpulist(_read(dev / "local_cpulist"))
            except TopologyError as err:
                raise TopologyError(f"{dev / 'local_cpulist'}: {err}") from None
        else:
            cpus = nodes.get(node, [])
        gpus.append({"address": dev.name, "vendor": GPU_VENDORS[vendor], "numa_node": node,
                     "cpus": cpus})
    return gpus


def visible_gpus(gpus: list[dict], env: dict) -> list[dict]:
    """The GPUs this process may use, in CUDA index order: CUDA_VISIBLE_DEVICES (numeric
    indices) selects and reorders; unset means all. UUIDs and MIG names are not resolved
    (they need the driver): such values leave the list unchanged."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() == "":
        return gpus if value is None else []
    try:
        indices = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        return gpus
    return [gpus[i] for i in indices if 0 <= i < len(gpus)]


def local_rank_from_env(env: dict) -> int | None:
    """LOCAL_RANK (torchrun) or SLURM_LOCALID (srun), or None; ScriptError (status 2) naming the
    variable if it is not an integer >= 0."""
    for name in ("LOCAL_RANK", "SLURM_LOCALID"):
        if env.get(name, "").strip():
            return env_int(name)
    return None


def plan_for_rank(gpus: list[dict], local_rank: int, split: bool) -> dict:
    """The binding for ``local_rank``: its GPU, NUMA node and CPU list.

    With ``split`` the node's CPUs are divided evenly among the local ranks whose GPUs share
    that node (rank order), so ranks do not compete for the same cores.
    Raises TopologyError if local_rank >= number of GPUs.
    """
    if not 0 <= local_rank < len(gpus):
        raise TopologyError(f"local rank {local_rank} but {len(gpus)} GPU(s) visible")
    gpu = gpus[local_rank]
    cpus = list(gpu["cpus"])
    if split and cpus:
        peers = [i for i, g in enumerate(gpus) if g["cpus"] == gpu["cpus"]]
        share, pos = len(cpus) // len(peers), peers.index(local_rank)
        if share:
            cpus = cpus[pos * share:(pos + 1) * share]
    return {"local_rank": local_rank, "gpu": gpu["address"], "numa_node": gpu["numa_node"],
            "cpus": cpus, "cpulist": format_cpulist(cpus)}


def bind_and_exec(plans: list[dict], local_rank: int, command: list[str],
                  parser: argparse.ArgumentParser) -> None:
    """Restrict this process to its plan's CPUs (if any), then replace it with ``command``."""
    if plans and plans[0]["cpus"]:
        allowed = set(range(os.cpu_count() or 1))
        cpus = [c for c in plans[0]["cpus"] if c in allowed] or plans[0]["cpus"]
        try:
            os.sched_setaffinity(0, cpus)
        except OSError as err:
            parser.error(f"cannot bind to cpus {format_cpulist(cpus)}: {err.strerror}")
        print(f"# {PROG}: local rank {local_rank} -> GPU {plans[0]['gpu']} NUMA node "
              f"{plans[0]['numa_node']} cpus {format_cpulist(cpus)}", file=sys.stderr, flush=True)
    elif plans:
        print(f"# {PROG}: GPU {plans[0]['gpu']} reports no local CPUs; running unbound",
              file=sys.stderr, flush=True)
    try:
        os.execvp(command[0], command)
    except OSError as err:
        raise ScriptError(f"cannot run {command[0]!r}: {err.strerror}",
                          127 if isinstance(err, FileNotFoundError) else 126) from None


# ----------------------------------------------------------------------------------------------
# The report
# ----------------------------------------------------------------------------------------------

def print_plans(gpus: list[dict], plans: list[dict], pci: Path, node_text: str, show: bool) -> None:
    """Say that there is nothing to bind (no GPU), or with ``show`` print each rank's plan."""
    if not gpus:
        print(f"# {PROG}: no GPU found under {pci}")
        print(f"# NUMA nodes: {node_text}")
        print("# would bind local rank R to the CPUs of the NUMA node of GPU R")
        print(f"# (read from {pci}/<gpu>/local_cpulist); nothing to bind here", flush=True)
    elif show:
        print(f"# {PROG}: {len(gpus)} GPU(s); NUMA nodes: {node_text}")
        for p in plans:
            node = p["numa_node"]
            numactl = (f"numactl --cpunodebind={node} --membind={node}" if node >= 0
                       else "(no NUMA node reported)")
            print(f"local rank {p['local_rank']}: GPU {p['gpu']} NUMA node {node} -> cpus "
                  f"{p['cpulist'] or '(none)'}   [{numactl}]")


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Bind this local rank to the CPU cores of its GPU's NUMA node (from "
                    "/sys), then exec COMMAND. Local rank: LOCAL_RANK, SLURM_LOCALID or "
                    "--local-rank.",
        epilog="Examples: torchrun --nproc-per-node 8 numa_affinity.py -- python train.py ; "
               "srun --ntasks-per-node 8 python numa_affinity.py --split -- python train.py ; "
               "python numa_affinity.py --print --nranks 8")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--local-rank", type=number(int, 0), default=None,
                   help="local rank when neither LOCAL_RANK nor SLURM_LOCALID is set (default 0)")
    p.add_argument("--split", action="store_true",
                   help="give each rank an equal, disjoint share of its NUMA node's cores")
    p.add_argument("--print", dest="show", action="store_true",
                   help="print the plan (all local ranks with --nranks) and exit")
    p.add_argument("--nranks", type=number(int, 1, MAX_CPU + 1), default=None,
                   help="with --print: show ranks 0..N-1 (default: one per GPU)")
    p.add_argument("--json", metavar="PATH", type=nonempty, help="write the plan as JSON to PATH")
    p.add_argument("--sysfs-root", type=lambda text: Path(nonempty(text)), default=Path("/sys"),
                   help=argparse.SUPPRESS)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="command to exec after binding (put it after --)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command and not args.show:
        parser.error("nothing to do: give a command after -- or use --print")
    env = dict(os.environ)
    env_rank = local_rank_from_env(env)
    local_rank = env_rank if env_rank is not None else (args.local_rank or 0)
    if args.json:
        check_output(args.json, "--json", [str(args.sysfs_root)])
    if not args.sysfs_root.is_dir():
        raise ScriptError(f"--sysfs-root {args.sysfs_root}: not a folder", EXIT_USAGE)
    try:
        nodes = numa_nodes(args.sysfs_root)
        gpus = visible_gpus(find_gpus(args.sysfs_root), env)
    except TopologyError as err:
        parser.error(str(err))
    pci = args.sysfs_root / "bus" / "pci" / "devices"
    node_text = ", ".join(f"node{n} cpus {format_cpulist(c)}" for n, c in nodes.items()) or "none"

    plans = []
    if gpus:
        ranks = range(args.nranks or len(gpus)) if args.show else [local_rank]
        try:
            plans = [plan_for_rank(gpus, r, args.split) for r in ranks]
        except TopologyError as err:
            parser.error(str(err))
    print_plans(gpus, plans, pci, node_text, args.show)
    if args.json:
        write_atomic(args.json, json.dumps({"gpus": gpus, "numa_nodes": {str(k): v for k, v in nodes.items()},
                                            "ranks": plans}, indent=2) + "\n")
    if args.show:
        return 0
    bind_and_exec(plans, local_rank, command, parser)
    return 0  # unreachable: execvp replaced the process


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
