#!/usr/bin/env python
"""hsdp_example.py: FSDP2 and HSDP (shard in a node, replicate across nodes) against one process.

A small MLP (``--layers`` Linear layers of ``--width``) is wrapped with FSDP2's ``fully_shard``,
one unit per layer, over a device mesh: ``fsdp`` shards every parameter over all W ranks (a 1-D
mesh), ``hsdp`` shards it over groups of S ranks and replicates it across the W/S groups (a 2-D
mesh, replicate x shard: S is ``--shard``, by default the ranks of one node). Each rank trains
on its own slice of a global batch with AdamW for ``--steps`` steps; every rank also trains an
unsharded copy on the whole batch, and the script compares the two (largest absolute
difference of any parameter). It counts what each rank hands to the collectives FSDP2 issues,
as the bytes a ring algorithm sends (all-gather (n-1)/n, reduce-scatter (n-1)/n, all-reduce
2(n-1)/n of the full tensor), and the parameter elements each rank holds.

How to launch (CPU/gloo; nccl where CUDA is available, one GPU per rank)::

    torchrun --standalone --nproc-per-node 4 hsdp_example.py --shard 2
    torchrun --nnodes 2 --nproc-per-node 8 ... hsdp_example.py --json hsdp.json

Example output (2-core cloud VM, torch 2.13.0+cpu, gloo, 4 ranks as 2 "nodes" of 2)::

    $ torchrun --standalone --nproc-per-node 4 scripts/training/hsdp_example.py --shard 2
    layout mesh rank     params held  max err  AG bytes  RS bytes  AR bytes
    fsdp   4    0        1,056/4,224  6.0e-08    25,344    12,672         0
    ...
    hsdp   2x2  0        2,112/4,224  6.3e-08    16,896     8,448     8,448
    ...
    8 of 8 ranks within 1e-05 of the unsharded model after 3 AdamW steps (largest 6.3e-08)

AG, RS, AR: bytes one rank sends per optimizer step in all-gathers, reduce-scatters and
all-reduces. Exit status: 0 done and within the tolerance, 1 a rank
or a collective failed, 2 usage (an option, a size the world size does not divide, a launcher
variable), 3 a rank's parameters differ from the unsharded model by more than ``--tolerance``,
130/143 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import math
import os
import sys
import tempfile
import threading
import traceback

PROG = "hsdp_example.py"
COLLECTIVES = ("all_gather_single", "reduce_scatter_single", "all_reduce")


# --- counting what FSDP2 hands to the collectives -----------------------------------------------

@contextlib.contextmanager
def counted_collectives(sent: dict):
    """Inside the block, every ``torch.distributed`` all_gather_single, reduce_scatter_single and
    all_reduce call (what FSDP2 issues) adds the bytes this rank sends in a ring algorithm to
    ``sent[name]``: all-gather (n-1) x its input, reduce-scatter (n-1) x its output, all-reduce
    2(n-1)/n x its tensor, n the size of the group it ran on."""
    import inspect

    import torch.distributed as dist
    originals = {name: getattr(dist, name) for name in COLLECTIVES}
    counted = {"all_gather_single": "input_tensor", "reduce_scatter_single": "output",
               "all_reduce": "tensor"}                # the tensor whose size sets the bytes

    def counting(name):
        signature = inspect.signature(originals[name])

        def call(*args, **kwargs):
            given = signature.bind(*args, **kwargs).arguments
            n = dist.get_world_size(given.get("group"))
            t = given[counted[name]]
            share = 2 / n if name == "all_reduce" else 1     # ring: 2(n-1)/n of it, or (n-1) x
            sent[name] += (n - 1) * t.numel() * t.element_size() * share
            return originals[name](*args, **kwargs)
        return call
    for name in COLLECTIVES:
        setattr(dist, name, counting(name))
    try:
        yield sent
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


# --- one layout: shard, train, compare with the unsharded model ----------------------------------

def make_model(width: int, layers: int, seed: int, device):
    import torch
    torch.manual_seed(seed)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*blocks).to(device)


def run_layout(layout: str, args, rank: int, world: int, device) -> dict:
    """Train the FSDP2-wrapped model and an unsharded copy on the same data; the row of results.
    ``hsdp``: a (W/S, S) mesh named ("replicate", "shard"); ``fsdp``: a (W,) mesh."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    if layout == "hsdp":
        shape, names = (world // args.shard, args.shard), ("replicate", "shard")
    else:
        shape, names = (world,), ("shard",)
    mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
    model = make_model(args.width, args.layers, args.seed, device)
    reference = copy.deepcopy(model)                 # the same start, never sharded
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)            # one unit per layer: gathered when it runs
    fully_shard(model, mesh=mesh)                    # the root: holds no parameters of its own
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(args.seed + 1)
    sent = dict.fromkeys(COLLECTIVES, 0.0)
    for _ in range(args.steps):
        x = torch.randn(world * args.batch, args.width, generator=g).to(device)
        y = torch.randn(world * args.batch, args.width, generator=g).to(device)
        mine = slice(rank * args.batch, (rank + 1) * args.batch)   # each rank: its own rows
        with counted_collectives(sent):
            loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
            loss.backward()                          # gradients averaged over all W ranks
        opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()   # the whole batch, one process
        ref_opt.step()
        ref_opt.zero_grad()
    err = max((p.full_tensor() - q).abs().max().item()
              for p, q in zip(model.parameters(), reference.parameters(), strict=True))
    return {"layout": layout, "mesh": "x".join(map(str, shape)), "rank": rank,
            "params_total": sum(p.numel() for p in reference.parameters()),
            "params_held": sum(p.to_local().numel() for p in model.parameters()),
            "max_abs_err": err,
            "all_gather_bytes_per_step": sent["all_gather_single"] / args.steps,
            "reduce_scatter_bytes_per_step": sent["reduce_scatter_single"] / args.steps,
            "all_reduce_bytes_per_step": sent["all_reduce"] / args.steps}


# --- the command line ---------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="FSDP2 over a 1-D mesh and HSDP over a 2-D "
                                "(replicate x shard) mesh, trained a few steps and compared with "
                                "an unsharded model; bytes each rank sends per step.")
    p.add_argument("--layout", nargs="+", choices=("fsdp", "hsdp"), default=["fsdp", "hsdp"],
                   help="layouts to run (default both)")
    p.add_argument("--shard", type=number(int, 1, 1_000_000),
                   help="HSDP: ranks in a shard group (default LOCAL_WORLD_SIZE, one node); it "
                        "must divide the world size")
    p.add_argument("--width", type=number(int, 1, 8192), default=32,
                   help="layer width (default 32)")
    p.add_argument("--layers", type=number(int, 1, 256), default=4,
                   help="Linear layers (default 4)")
    p.add_argument("--batch", type=number(int, 1, 65536), default=4,
                   help="rows per rank (default 4)")
    p.add_argument("--steps", type=number(int, 1, 1000), default=3, help="AdamW steps (default 3)")
    p.add_argument("--lr", type=number(float, 0, 1, lo_open=True), default=1e-2,
                   help="learning rate (default 0.01)")
    p.add_argument("--seed", type=number(int, 0, 2**31 - 1), default=0,
                   help="random seed (default 0)")
    p.add_argument("--tolerance", type=number(float, 0, lo_open=True), default=1e-5,
                   help="largest difference from the unsharded model accepted (default 1e-5, fp32)")
    p.add_argument("--json", type=nonempty, metavar="PATH",
                   help="write the results as JSON (rank 0)")
    p.add_argument("--timeout-s", type=number(float, 0, 3600, lo_open=True), default=60.0,
                   help="deadline of the rendezvous and of each collective, seconds (default 60)")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    return p


def check_sizes(args, launch) -> None:
    """Refuse, before any work, a shard group or a width the world size does not divide."""
    world = launch.world
    if args.shard is None:
        args.shard = launch.local_world if world % launch.local_world == 0 else world
    if world % args.shard:
        raise ScriptError(f"--shard {args.shard} does not divide the world size {world}: HSDP "
                          f"replicates whole shard groups; use a divisor of {world}", EXIT_USAGE)
    if args.width % world:
        raise ScriptError(f"--width {args.width} is not divisible by the world size {world}: FSDP2 "
                          "pads uneven shards, and the byte counts would include the padding; use "
                          f"a multiple of {world}", EXIT_USAGE)


def show(rows: list[dict]) -> None:
    say(f"{'layout':<7}{'mesh':<5}{'rank':<5}{'params held':>15}{'max err':>9}{'AG bytes':>10}"
        f"{'RS bytes':>10}{'AR bytes':>10}")
    for r in rows:
        held = f"{r['params_held']:,}/{r['params_total']:,}"
        say(f"{r['layout']:<7}{r['mesh']:<5}{r['rank']:<5}{held:>15}{r['max_abs_err']:>9.1e}"
            f"{r['all_gather_bytes_per_step']:>10,.0f}{r['reduce_scatter_bytes_per_step']:>10,.0f}"
            f"{r['all_reduce_bytes_per_step']:>10,.0f}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    launch = Launch()
    rank, world = launch.rank, launch.world
    check_sizes(args, launch)
    if args.json:
        check_output(args.json, "--json", inputs=[os.path.abspath(__file__)])
    if not args.debug:  # an unreachable peer is an expected failure: no C++ frames for it
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch
    import torch.distributed as dist
    backend = "nccl" if torch.cuda.is_available() else "gloo"     # one GPU per rank, or CPUs
    device = torch.device("cuda", launch.local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False   # fp32 means fp32 for the comparison
    init = {"store": dist.HashStore()} if world == 1 else {}   # one rank needs no network port
    with deadline(args.timeout_s * 1.1 + 1, f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {launch.master}"):
        try:
            dist.init_process_group(backend, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=args.timeout_s), **init)
        except (RuntimeError, ValueError) as exc:
            raise ScriptError(f"rank {rank}: rendezvous with MASTER_ADDR:MASTER_PORT {launch.master} "
                              f"failed: {(str(exc).strip().splitlines() or [''])[0]}") from None
    try:
        rows = [run_layout(layout, args, rank, world, device) for layout in args.layout]
        gathered = [None] * world
        dist.all_gather_object(gathered, rows)
    except Exception as exc:  # noqa: BLE001 - a peer gone, a timeout: one line, and no hang on the way out
        die(f"rank {rank}: {type(exc).__name__}: {exc}", debug=args.debug)
    bad = []
    if rank == 0:
        rows = sorted((r for part in gathered for r in part),
                      key=lambda r: (args.layout.index(r["layout"]), r["rank"]))
        show(rows)
        bad = [r for r in rows if not r["max_abs_err"] <= args.tolerance]
        say(f"{len(rows) - len(bad)} of {len(rows)} ranks within {args.tolerance:g} of the unsharded "
            f"model after {args.steps} AdamW steps (largest {max(r['max_abs_err'] for r in rows):.1e})")
        if args.json:
            report = envelope("hsdp_example", f"{world} x {device.type} ({backend})",
                              {"torch": torch.__version__}, command=launch.command(argv))
            report["settings"] = {k: getattr(args, k) for k in ("shard", "width", "layers", "batch",
                                                                 "steps", "lr", "seed", "tolerance")}
            report["settings"].update(world_size=world, backend=backend)
            report["results"] = rows
            write_atomic(args.json, json.dumps(report, indent=1) + "\n")
    dist.destroy_process_group()
    return EXIT_FINDING if rank == 0 and bad else EXIT_OK


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
