#!/usr/bin/env python
"""train_requeue.py: a small CPU training loop that survives time limits, preemption and node
failures by checkpointing and resuming. A stand-in for your training script.

Fits a linear model with SGD and momentum on batches generated from ``(--seed, step)``, so the
data a step sees does not depend on interruptions; a run stopped and resumed any number of times
ends with the same weights SHA-256 as one that ran straight through. ``--ckpt-dir/checkpoint.pt``
(model, optimizer, step; written to a temporary file and renamed) is saved every ``--save-every``
steps and after the current step on SIGUSR1 (then, under SLURM, ``scontrol requeue``), SIGTERM,
SIGINT, ``--run-steps`` or a switch file: ``--save-switch PATH`` (save, rename PATH to
PATH.done, go on) and ``--kill-switch PATH`` (save and stop without requeue; a later job will not
start while PATH exists), looked at every ``--switch-every`` steps by rank 0 only. On start an
existing checkpoint is resumed. Units: steps; ``--step-time`` adds seconds of sleep per step.
The contract and the tests on a SLURM cluster: book/en/orchestration/long-trainings.md.

Plain ``python``, or as a SLURM job through the template::

    python train_requeue.py --ckpt-dir ckpt --steps 200                     # anywhere
    python train_requeue.py --ckpt-dir ckpt --kill-switch ckpt/STOP --save-switch ckpt/SAVE
    sbatch scripts/orchestration/train-requeue.sbatch --steps 5000          # see that template

Example output (a run requeued by SIGUSR1 on the book's test cluster; step lines left out)::

    train_requeue.py: start at step 0 of 120 (restart count 0), lr 0.05
    train_requeue.py: SIGUSR1: saved step 24 to /tmp/.../ckpt/checkpoint.pt; requeueing job 1
    train_requeue.py: resumed from step 24 (restart count 1)
    train_requeue.py: finished step 120 loss 0.015463 weights_sha256 d6d113db38542d35b14f8506cb3de70e2ed1907fd088e464284150d195022a73

Exit status: 0 done or stopped after saving (SIGUSR1, --run-steps, the kill switch), 1 failure,
2 usage (checked before torch is imported), 130 Ctrl-C, 143 SIGTERM, each after saving.
"""  # noqa: E501 - the example quotes whole lines of the script's real output

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

PROG = "train_requeue.py"
CKPT_NAME = "checkpoint.pt"
MAX_STEPS = 100_000_000  # a demonstration loop: more steps than this is a typo
MAX_BATCH_FLOATS = 100_000_000  # --batch x --dim, float32


class Stop:
    """Remembers the last stop request (a signal name) until the loop reaches a step boundary:
    saving a checkpoint from inside a signal handler, mid-step, would save a half-updated model."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def install(self) -> None:
        signal.signal(signal.SIGUSR1, self._handler)
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)  # Ctrl-C: save too (set even if inherited ignored)

    def _handler(self, signum, frame) -> None:
        self.reason = signal.Signals(signum).name


def switch_pulled(args: argparse.Namespace) -> str | None:
    """Which switch file exists now: "kill" (it wins), "save" or None. One stat() per switch."""
    if args.kill_switch and os.path.exists(args.kill_switch):
        return "kill"
    if args.save_switch and os.path.exists(args.save_switch):
        return "save"
    return None


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` with torch.save to ``path`` atomically (temporary file, fsync, rename):
    a job killed mid-save leaves the previous checkpoint whole."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_atomic(str(path), buffer.getvalue())


def read_checkpoint(torch, path: Path) -> dict:
    """The dict ``save_checkpoint`` wrote to ``path``. Raises ScriptError, in one line, for a
    truncated or damaged file, a file holding arbitrary Python objects (it is not unpickled:
    weights_only), or another program's checkpoint, saying what was expected."""
    try:
        state = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        if not found:  # the unpickler met bytes that are no pickle at all
            raise ScriptError(f"checkpoint {path}: truncated or damaged (not a torch.save file); "
                              "delete it to start over, or restore a copy") from None
        raise ScriptError(f"checkpoint {path}: holds a {found[1]} object, which this script will "
                          "not unpickle (its checkpoints hold only tensors and plain "
                          "containers): another program's checkpoint?") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise ScriptError(f"checkpoint {path}: truncated or damaged ({type(exc).__name__}: "
                          f"{(str(exc).strip().splitlines() or [''])[0]}); delete it to start "
                          "over, or restore a copy") from None
    expected = {"step", "model", "optimizer"}
    if not isinstance(state, dict) or not expected <= set(state):
        found = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise ScriptError(f"checkpoint {path}: expected a dict with step, model and optimizer "
                          f"(a checkpoint of {PROG}); found {found}")
    if not isinstance(state["step"], int) or state["step"] < 0:
        raise ScriptError(f"checkpoint {path}: expected a step count (an int >= 0); found "
                          f"{type(state['step']).__name__} {state['step']!r:.40}")
    return state


def weights_sha256(weights) -> str:
    """SHA-256 (hex) of a float32 tensor's bytes: equal hashes mean bit-identical weights."""
    return hashlib.sha256(weights.detach().contiguous().numpy().tobytes()).hexdigest()


def requeue(job_id: str) -> None:
    """``scontrol requeue JOB_ID`` (under a 60 s timeout); the job leaves the node and goes back
    to the queue. Raises subprocess.CalledProcessError / TimeoutExpired on failure."""
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=60)


def build_model(torch, args: argparse.Namespace):
    """The true weights of the data, the model (initialised from ``--seed``) and its optimizer."""
    gen = torch.Generator().manual_seed(args.seed)
    true_w = torch.randn(args.dim, 1, generator=gen)
    model = torch.nn.Linear(args.dim, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, args.dim, generator=gen) * 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return true_w, model, opt


def resume(torch, ckpt: Path, model, opt, args: argparse.Namespace) -> tuple[int, int | None]:
    """Load ``ckpt`` into the model and the optimizer when it exists, and say where the run
    starts. Returns (the step to start from, the step resumed from or None)."""
    restarts = args.restarts
    if not ckpt.exists():
        print(f"{PROG}: start at step 0 of {args.steps} (restart count {restarts}), "
              f"lr {args.lr:g}", flush=True)
        return 0, None
    state = read_checkpoint(torch, ckpt)
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:  # a checkpoint we cannot use must
        first = (str(exc).strip().splitlines() or [""])[0]  # stop the job, loudly
        raise ScriptError(f"checkpoint {ckpt} does not fit this model (written with another "
                          f"--dim?): {first}") from None
    step = state["step"]
    print(f"{PROG}: resumed from step {step} (restart count {restarts})", flush=True)
    return step, step


def train_step(torch, model, opt, true_w, args: argparse.Namespace, step: int):
    """One SGD step on the batch of ``step`` (generated from ``--seed`` and the step alone);
    returns its loss."""
    batch_gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    x = torch.randn(args.batch, args.dim, generator=batch_gen)
    y = x @ true_w + 0.1 * torch.randn(args.batch, 1, generator=batch_gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def on_signal(args: argparse.Namespace, reason: str, step: int, ckpt: Path, state_now) -> int:
    """A stop signal arrived during the step: save, then exit (SIGTERM, SIGINT) or, on SIGUSR1
    under SLURM, requeue the job. Returns the exit status."""
    save_checkpoint(ckpt, state_now())
    job_id = os.environ.get("SLURM_JOB_ID")
    if reason in ("SIGTERM", "SIGINT"):
        print(f"{PROG}: {reason}: saved step {step} to {ckpt}; exiting", flush=True)
        return 128 + signal.Signals[reason]
    if job_id and args.leader and not args.no_requeue:
        print(f"{PROG}: SIGUSR1: saved step {step} to {ckpt}; requeueing job {job_id}",
              flush=True)
        try:
            requeue(job_id)
        except (OSError, subprocess.SubprocessError) as exc:
            raise ScriptError(f"scontrol requeue {job_id} failed: {exc}") from None
    else:
        print(f"{PROG}: SIGUSR1: saved step {step} to {ckpt}; exiting", flush=True)
    return 0


def on_switch(args: argparse.Namespace, step: int, ckpt: Path, state_now) -> int | None:
    """Look for the switch files (rank 0, every --switch-every steps). The kill switch saves and
    stops (returns 0); the save switch saves, is renamed to PATH.done and training goes on
    (returns None, as when no switch is there)."""
    pulled = None
    if args.leader and step % args.switch_every == 0:
        pulled = switch_pulled(args)
    if pulled == "kill":
        save_checkpoint(ckpt, state_now())
        print(f"{PROG}: kill switch {args.kill_switch}: saved step {step} to {ckpt}; "
              "stopping without requeue", flush=True)
        return 0
    if pulled == "save":
        save_checkpoint(ckpt, state_now())
        done = f"{args.save_switch}.done"
        try:
            os.replace(args.save_switch, done)
            handled = f"renamed the switch to {done}"
        except OSError as exc:  # it would fire at every check: ignore it from now on
            args.save_switch = None
            handled = f"cannot rename the switch ({exc.strerror}): save switch ignored from now on"
        print(f"{PROG}: save switch {done[:-5]}: saved step {step} to {ckpt}; {handled}",
              flush=True)
    return None


def finish(args: argparse.Namespace, model, ckpt: Path, state_now, step: int, run_start: int,
           loss, resumed_from: int | None) -> int:
    """The end of the training: save, print the final loss and the weights' hash, write --json."""
    digest = weights_sha256(model.weight)
    if step == run_start:  # a job of a chain that starts after the training already ended
        print(f"{PROG}: already at step {step} of {args.steps}, nothing to do; "
              f"weights_sha256 {digest}", flush=True)
        return 0
    save_checkpoint(ckpt, state_now())
    print(f"{PROG}: finished step {step} loss {loss.item():.6f} weights_sha256 {digest}",
          flush=True)
    if args.json:
        write_atomic(args.json, json.dumps({
            "final_step": step, "final_loss": loss.item(), "weights_sha256": digest,
            "resumed_from": resumed_from, "lr": args.lr, "restart_count": args.restarts}) + "\n")
    return 0


def train(args: argparse.Namespace) -> int:
    """Run (or resume) the training; return the process exit status."""
    stop = Stop()
    stop.install()  # before importing torch: a signal during the import must not kill us
    if args.leader and args.kill_switch and os.path.exists(args.kill_switch):
        print(f"{PROG}: kill switch {args.kill_switch} present: not starting (delete it to let "
              "the training continue)", flush=True)
        return 0

    import torch

    ckpt = args.ckpt_dir / CKPT_NAME
    true_w, model, opt = build_model(torch, args)
    step, resumed_from = resume(torch, ckpt, model, opt, args)

    def state_now() -> dict:
        return {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}

    loss = torch.tensor(float("nan"))
    run_start = step
    while step < args.steps:
        loss = train_step(torch, model, opt, true_w, args, step)
        step += 1
        if not math.isfinite(loss.item()):  # a nan checkpoint would poison every resumption
            raise ScriptError(f"loss is {loss.item()} at step {step}: the training diverged "
                              f"(--lr {args.lr:g} too high?); no checkpoint written for it")
        if args.step_time:
            time.sleep(args.step_time)
        if step % args.save_every == 0 and step < args.steps:
            save_checkpoint(ckpt, state_now())
        if step % args.log_every == 0:  # after the save: "step N" means N is on disk if due
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if step >= args.steps:  # the last step: nothing to stop, finish() saves it
            continue
        if stop.reason is not None:
            return on_signal(args, stop.reason, step, ckpt, state_now)
        status = on_switch(args, step, ckpt, state_now)
        if status is not None:
            return status
        if args.run_steps is not None and step - run_start >= args.run_steps:
            save_checkpoint(ckpt, state_now())
            print(f"{PROG}: did {args.run_steps} steps in this run: saved step {step} to {ckpt}",
                  flush=True)
            return 0
    return finish(args, model, ckpt, state_now, step, run_start, loss, resumed_from)


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface (touches neither torch nor SLURM)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="CPU training loop that checkpoints on SIGUSR1/SIGTERM and every "
                    "--save-every steps, requeues itself under SLURM on SIGUSR1, and resumes "
                    "from its checkpoint.")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--ckpt-dir", required=True, type=lambda t: Path(nonempty(t)),
                   help="directory for checkpoint.pt (created if missing)")
    p.add_argument("--steps", type=number(int, 1, MAX_STEPS), default=200,
                   help=f"total training steps, at most {MAX_STEPS:,} (default 200)")
    p.add_argument("--save-every", type=number(int, 1), default=50,
                   help="periodic checkpoint interval in steps, >= 1 (default 50)")
    p.add_argument("--run-steps", type=number(int, 1), default=None,
                   help="stop this run after N steps (save, exit 0); default: run to the end")
    p.add_argument("--lr", type=number(float, 0, 10, lo_open=True), default=0.05,
                   help="SGD learning rate, in (0, 10] (default 0.05)")
    p.add_argument("--dim", type=number(int, 1, 1_000_000), default=16, help="number of features (default 16)")
    p.add_argument("--batch", type=number(int, 1, 1_000_000), default=64, help="batch size (default 64)")
    p.add_argument("--seed", type=number(int, 0, 2**32 - 1), default=0,
                   help="seed of the data and init, 0 to 2**32-1 (default 0)")
    p.add_argument("--step-time", type=number(float, 0, 3600), default=0.0,
                   help="extra seconds of sleep per step, to emulate work, at most 3600 (default 0)")
    p.add_argument("--log-every", type=number(int, 1), default=20, help="print every N steps (default 20)")
    p.add_argument("--no-requeue", action="store_true",
                   help="on SIGUSR1 only save and exit; do not call scontrol requeue")
    p.add_argument("--save-switch", type=nonempty, default=None, metavar="PATH",
                   help="when PATH exists: save after the current step, rename PATH to "
                        "PATH.done, go on")
    p.add_argument("--kill-switch", type=nonempty, default=None, metavar="PATH",
                   help="when PATH exists: save after the current step and exit 0 without "
                        "requeue (PATH is kept: delete it to let the training continue)")
    p.add_argument("--switch-every", type=number(int, 1), default=10, metavar="N",
                   help="look for the switch files every N steps (default 10; each look is a "
                        "stat() on what may be a shared file system)")
    p.add_argument("--json", type=nonempty, default=None, help="write the final result to PATH")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate; any problem exits with status 2 and a one-line message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch * args.dim > MAX_BATCH_FLOATS:
        parser.error(f"--batch {args.batch} x --dim {args.dim} = {args.batch * args.dim:,} "
                     f"floats per batch, more than {MAX_BATCH_FLOATS:,} (400 MB): this is a "
                     "small CPU stand-in for a training")
    args.restarts = env_int("SLURM_RESTART_COUNT", 0)
    args.leader = env_int("SLURM_PROCID", 0) == 0
    check_output_dir(str(args.ckpt_dir), "--ckpt-dir")
    ckpt = args.ckpt_dir / CKPT_NAME
    if ckpt.exists() and not ckpt.is_file():
        raise ScriptError(f"--ckpt-dir {args.ckpt_dir}: {ckpt} is not a file (expected this "
                          f"script's torch.save checkpoint or nothing)", EXIT_USAGE)
    if args.json:
        check_output(args.json, "--json", inputs=[str(args.ckpt_dir / CKPT_NAME)])
    switches = [(o, p) for o, p in (("--save-switch", args.save_switch),
                                     ("--kill-switch", args.kill_switch)) if p]
    for option, path in switches:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ScriptError(f"{option} {path}: folder {folder} does not exist (the switch "
                              "could never be created there)", EXIT_USAGE)
        if os.path.isdir(path):
            raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
        if os.path.realpath(path) in (os.path.realpath(ckpt), os.path.realpath(args.json or ckpt)):
            raise ScriptError(f"{option} {path}: is the checkpoint or the --json file", EXIT_USAGE)
    if len(switches) == 2 and os.path.realpath(args.save_switch) == os.path.realpath(args.kill_switch):
        raise ScriptError(f"--save-switch and --kill-switch are the same file ({args.kill_switch})",
                          EXIT_USAGE)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return train(args)


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
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
