#!/usr/bin/env python
"""train_requeue.py: a small CPU training loop that survives time limits, preemption and node
failures by checkpointing and resuming. A stand-in for your training script.

What it does
------------
Fits a linear model y = X·w (``--dim`` features, plus noise) with SGD and momentum on batches
that are generated from ``(--seed, step)``, so the data a step sees does not depend on whether
the run was interrupted. It prints the loss every ``--log-every`` steps and, at the end, the final
loss and a SHA-256 of the weights: a run that was stopped and resumed any number of times ends
with the same weights hash as one that ran straight through (the checkpoint holds the model, the
optimizer state and the step).

Checkpoints
-----------
``--ckpt-dir/checkpoint.pt`` is written every ``--save-every`` steps, and after the current step
when one of these happens:

* SIGUSR1 (the signal an sbatch ``--signal=USR1@T`` asks SLURM to send before the time limit,
  or ``scancel --signal=USR1``): save, then, under SLURM (``SLURM_JOB_ID`` set) and unless
  ``--no-requeue``, run ``scontrol requeue $SLURM_JOB_ID`` so the job goes back to the queue
  and starts again from the top; exit 0.
* SIGTERM (SLURM's first step when it kills a job: time limit reached, ``scancel``, node set
  down): save and exit 143 (128 + SIGTERM).
* ``--run-steps N``: this run has done N steps: save and exit 0 (a self-imposed budget, for job
  chains where each job does a slice of the training).

The file is written to a temporary name and renamed, so a crash mid-write never leaves a torn
checkpoint. On start, an existing checkpoint is loaded and training resumes after its step (the
output says ``resumed from step N``); ``SLURM_RESTART_COUNT`` (how many times SLURM requeued the
job) is printed too. Only the process with ``SLURM_PROCID`` 0 (or no SLURM) requeues.

How to launch
-------------
::

    python train_requeue.py --ckpt-dir ckpt --steps 200                     # anywhere
    sbatch scripts/orchestration/train-requeue.sbatch --steps 5000          # see that template
    srun python train_requeue.py --ckpt-dir "$CKPT_DIR"                     # inside a job

``--json PATH`` writes ``{"final_step", "final_loss", "weights_sha256", "resumed_from", "lr",
"restart_count"}`` at the end. Units: steps; ``--step-time`` is seconds of simulated extra work
per step (sleep), to make a short run last long enough to interrupt.

Example output (a run of the train-requeue.sbatch template interrupted by
``scancel --signal=USR1 --batch`` on the book's test SLURM cluster, then requeued; the output
file is opened in append mode; step lines left out)::

    job 1 restart 0 on node1 at 2026-11-23T09:16:34Z
    train_requeue.py: start at step 0 of 120 (restart count 0), lr 0.05
    batch shell: SIGUSR1 received, forwarding it to the training step
    train_requeue.py: SIGUSR1: saved step 24 to /tmp/.../ckpt/checkpoint.pt; requeueing job 1
    srun: Job step aborted: Waiting up to 7 seconds for job step to finish.
    slurmstepd-node1: error: *** JOB 1 ON node1 CANCELLED AT 2026-11-23T09:16:43 DUE TO JOB REQUEUE ***
    job 1 restart 1 on node1 at 2026-11-23T09:16:52Z
    train_requeue.py: resumed from step 24 (restart count 1)
    train_requeue.py: finished step 120 loss 0.015463 weights_sha256 d6d113db38542d35b14f8506cb3de70e2ed1907fd088e464284150d195022a73

Errors (bad arguments, unreadable checkpoint) end with one line ``train_requeue.py: error: ...``
and a non-zero status.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PROG = "train_requeue.py"
CKPT_NAME = "checkpoint.pt"


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface (touches neither torch nor SLURM)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="CPU training loop that checkpoints on SIGUSR1/SIGTERM and every "
                    "--save-every steps, requeues itself under SLURM on SIGUSR1, and resumes "
                    "from its checkpoint.")
    p.add_argument("--ckpt-dir", required=True, type=Path,
                   help="directory for checkpoint.pt (created if missing)")
    p.add_argument("--steps", type=int, default=200, help="total training steps (default 200)")
    p.add_argument("--save-every", type=int, default=50,
                   help="periodic checkpoint interval in steps, >= 1 (default 50)")
    p.add_argument("--run-steps", type=int, default=None,
                   help="stop this run after N steps (save, exit 0); default: run to the end")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate, > 0 (default 0.05)")
    p.add_argument("--dim", type=int, default=16, help="number of features (default 16)")
    p.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data and init (default 0)")
    p.add_argument("--step-time", type=float, default=0.0,
                   help="extra seconds of sleep per step, to emulate work (default 0)")
    p.add_argument("--log-every", type=int, default=20, help="print every N steps (default 20)")
    p.add_argument("--no-requeue", action="store_true",
                   help="on SIGUSR1 only save and exit; do not call scontrol requeue")
    p.add_argument("--json", type=Path, default=None, help="write the final result to PATH")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate; any problem exits with status 2 and a one-line message."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("steps", "save_every", "dim", "batch", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.run_steps is not None and args.run_steps < 1:
        parser.error(f"--run-steps must be >= 1 (got {args.run_steps})")
    if not args.lr > 0:
        parser.error(f"--lr must be > 0 (got {args.lr:g})")
    if args.step_time < 0:
        parser.error(f"--step-time must be >= 0 (got {args.step_time:g})")
    return args


def die(message: str, status: int = 1) -> None:
    """Print ``train_requeue.py: error: message`` on stderr and exit with ``status``."""
    # One write, newline included: ranks share stderr, and print() writes the newline apart.
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    sys.exit(status)


class Stop:
    """Remembers the last stop request (a signal name) until the loop reaches a step boundary:
    saving a checkpoint from inside a signal handler, mid-step, would save a half-updated model."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def install(self) -> None:
        signal.signal(signal.SIGUSR1, self._handler)
        signal.signal(signal.SIGTERM, self._handler)

    def _handler(self, signum, frame) -> None:
        self.reason = signal.Signals(signum).name


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` with torch.save to ``path`` atomically (temporary file, fsync, rename)."""
    import torch

    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def weights_sha256(weights) -> str:
    """SHA-256 (hex) of a float32 tensor's bytes: equal hashes mean bit-identical weights."""
    return hashlib.sha256(weights.detach().contiguous().numpy().tobytes()).hexdigest()


def requeue(job_id: str) -> None:
    """``scontrol requeue JOB_ID`` (under a 60 s timeout); the job leaves the node and goes back
    to the queue. Raises subprocess.CalledProcessError / TimeoutExpired on failure."""
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=60)


def train(args: argparse.Namespace) -> int:
    """Run (or resume) the training; return the process exit status."""
    stop = Stop()
    stop.install()  # before importing torch: a signal during the import must not kill us
    import torch

    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = args.ckpt_dir / CKPT_NAME
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

    gen = torch.Generator().manual_seed(args.seed)
    true_w = torch.randn(args.dim, 1, generator=gen)
    model = torch.nn.Linear(args.dim, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.randn(1, args.dim, generator=gen) * 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step, resumed_from = 0, None
    if ckpt.exists():
        try:
            state = torch.load(ckpt, weights_only=True)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step = resumed_from = int(state["step"])
        except Exception as exc:  # a checkpoint we cannot use must stop the job, loudly
            die(f"cannot load checkpoint {ckpt}: {exc}")
        print(f"{PROG}: resumed from step {step} (restart count {restarts})", flush=True)
    else:
        print(f"{PROG}: start at step 0 of {args.steps} (restart count {restarts}), "
              f"lr {args.lr:g}", flush=True)

    def state_now() -> dict:
        return {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}

    loss = torch.tensor(float("nan"))
    run_start = step
    while step < args.steps:
        batch_gen = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        x = torch.randn(args.batch, args.dim, generator=batch_gen)
        y = x @ true_w + 0.1 * torch.randn(args.batch, 1, generator=batch_gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if args.step_time:
            time.sleep(args.step_time)
        if step % args.save_every == 0 and step < args.steps:
            save_checkpoint(ckpt, state_now())
        if step % args.log_every == 0:  # after the save: "step N" means N is on disk if due
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if stop.reason is not None and step < args.steps:
            save_checkpoint(ckpt, state_now())
            job_id = os.environ.get("SLURM_JOB_ID")
            leader = os.environ.get("SLURM_PROCID", "0") == "0"
            if stop.reason == "SIGTERM":
                print(f"{PROG}: SIGTERM: saved step {step} to {ckpt}; exiting", flush=True)
                return 128 + signal.SIGTERM
            if job_id and leader and not args.no_requeue:
                print(f"{PROG}: SIGUSR1: saved step {step} to {ckpt}; requeueing job {job_id}",
                      flush=True)
                try:
                    requeue(job_id)
                except (OSError, subprocess.SubprocessError) as exc:
                    die(f"scontrol requeue {job_id} failed: {exc}")
            else:
                print(f"{PROG}: SIGUSR1: saved step {step} to {ckpt}; exiting", flush=True)
            return 0
        if args.run_steps is not None and step - run_start >= args.run_steps and step < args.steps:
            save_checkpoint(ckpt, state_now())
            print(f"{PROG}: did {args.run_steps} steps in this run: saved step {step} to {ckpt}",
                  flush=True)
            return 0

    digest = weights_sha256(model.weight)
    if step == run_start:  # a job of a chain that starts after the training already ended
        print(f"{PROG}: already at step {step} of {args.steps}, nothing to do; "
              f"weights_sha256 {digest}", flush=True)
        return 0
    save_checkpoint(ckpt, state_now())
    print(f"{PROG}: finished step {step} loss {loss.item():.6f} weights_sha256 {digest}",
          flush=True)
    if args.json:
        args.json.write_text(json.dumps({
            "final_step": step, "final_loss": loss.item(), "weights_sha256": digest,
            "resumed_from": resumed_from, "lr": args.lr, "restart_count": restarts}) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return train(args)


if __name__ == "__main__":
    sys.exit(main())
