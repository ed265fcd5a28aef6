#!/usr/bin/env python
"""capture_env.py: record what a training run ran on, as one JSON file next to the run's outputs.

It records the versions (Python, PyTorch and, when torch has them, its CUDA, cuDNN and NCCL, plus
any distribution named with ``--packages``), the git state of the code (``--repo``: commit,
branch, dirty flag and dirty files), the hardware (host, OS, CPU, memory in bytes, CUDA GPUs), the
environment variables that change a run (``NCCL_*``, ``CUDA_*``, ``SLURM_*``, ``TORCH_*``... see
``ENV_PREFIXES``; a name that looks like a secret gets ``"<redacted>"``, and ``user:pass@`` is cut
out of URLs) and the command line, working directory and time (UTC). The Reproducibility chapter
lists the keys of the JSON file.

From a training script (rank 0 only; well under a second)::

    import capture_env
    capture_env.write(os.path.join(run_dir, "env.json"))

or from the shell, before the run, recording the command that follows ``--`` (it is not run)::

    python capture_env.py --json runs/42/env.json -- torchrun --nproc-per-node 8 train.py

torch is imported only if installed. Exit status: 0 ok, 1 failure, 2 usage (``--debug``: traceback).

Example output (a 2-core VM without GPU)::

    $ python scripts/training/capture_env.py --json /tmp/env.json -- python train.py --lr 3e-4
    # capture_env.py: wrote /tmp/env.json
    # python 3.11.7 | torch 2.13.0+cpu | CUDA None | cuDNN None | NCCL None
    # git f96930660341 (branch checkpoints, clean)
    # host vm | Intel(R) Xeon(R) Processor | 2 CPUs | 23.5 GiB | 0 GPUs
    # env: 1 variables recorded, 0 redacted
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

PROG = "capture_env.py"
SCHEMA_VERSION = 1
ENV_PREFIXES = ("NCCL_", "CUDA_", "CUDNN_", "CUBLAS_", "SLURM_", "TORCH_", "PYTORCH_", "OMP_",
                "MKL_", "HF_", "WANDB_", "TORCHELASTIC_", "FI_", "UCX_")
ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             "PYTHONHASHSEED", "LD_LIBRARY_PATH")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
MAX_DIRTY_FILES = 50


def _git(repo: Path, *args: str) -> str:
    """Run ``git -C repo args`` and return stdout without trailing whitespace (leading spaces are
    meaningful in ``git status --porcelain``); raise RuntimeError on failure."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"git failed: {e}") from None
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[0] if out.stderr.strip()
                           else f"git {' '.join(args)} exited with {out.returncode}")
    return out.stdout.rstrip()


def git_state(repo: str | os.PathLike = ".") -> dict:
    """Git state of the repository containing ``repo``.

    Returns ``{"commit": 40-hex str, "branch": str or None, "dirty": bool, "dirty_files":
    [str, ...], "root": str}``, or ``{"git": None, "git_error": str}`` when ``repo`` is not
    inside a git work tree or git is not installed. A repository without commits has commit None.
    """
    repo = Path(repo)
    try:
        root = _git(repo, "rev-parse", "--show-toplevel")
    except RuntimeError as e:
        return {"commit": None, "branch": None, "dirty": None, "dirty_files": [],
                "root": None, "git_error": str(e)}
    try:
        commit = _git(repo, "rev-parse", "--verify", "HEAD")
    except RuntimeError:
        commit = None
    try:
        branch = _git(repo, "symbolic-ref", "--short", "-q", "HEAD") or None
    except RuntimeError:
        branch = None   # detached HEAD
    status = _git(repo, "status", "--porcelain", "--untracked-files=all")
    files = [line[3:] for line in status.splitlines() if line.strip()]
    return {"commit": commit, "branch": branch, "dirty": bool(files),
            "dirty_files": files[:MAX_DIRTY_FILES], "root": root}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(packages: list[str] | tuple[str, ...] = ()) -> dict:
    """Versions of Python, torch (with its CUDA, cuDNN and NCCL when built with CUDA) and of the
    named distributions. Values are strings, or None for what is absent."""
    info = {"python": platform.python_version(), "python_implementation":
            platform.python_implementation(), "torch": None, "cuda": None, "cudnn": None,
            "nccl": None}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        if torch.backends.cudnn.is_available():
            info["cudnn"] = str(torch.backends.cudnn.version())
        try:
            if torch.cuda.is_available():
                nccl = torch.cuda.nccl.version()
                info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except (AttributeError, RuntimeError):
            pass
    info["packages"] = {name: _version(name) for name in packages}
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024   # the file says kB and means KiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def hardware() -> dict:
    """Host, OS, CPU, memory (bytes) and CUDA GPUs as torch sees them (empty list without)."""
    gpus = []
    try:
        import torch
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                gpus.append({"index": i, "name": p.name, "memory_bytes": p.total_memory,
                             "capability": f"{p.major}.{p.minor}",
                             "multiprocessors": p.multi_processor_count})
    except ImportError:
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(),
            "machine": platform.machine(), "cpu_model": _cpu_model(),
            "cpu_count": os.cpu_count(), "memory_bytes": _memory_bytes(), "gpus": gpus}


def redact(name: str, value: str) -> str:
    """``value`` with secrets removed: ``<redacted>`` if ``name`` looks like a secret, else the
    value with any ``user:password@`` part of URLs cut out."""
    if SECRET_NAME.search(name):
        return "<redacted>"
    return URL_CREDENTIALS.sub(r"\g<scheme><redacted>@", value)


def environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default os.environ) that matter for a training run (names
    in ENV_NAMES or starting with ENV_PREFIXES), sorted by name, secrets redacted."""
    environ = os.environ if environ is None else environ
    return {k: redact(k, v) for k, v in sorted(environ.items())
            if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def capture(command: list[str] | None = None, repo: str | os.PathLike = ".",
            packages: list[str] | tuple[str, ...] = ()) -> dict:
    """Everything above as one dict (``command`` defaults to ``sys.argv``)."""
    command = list(sys.argv if command is None else command)
    return {"schema_version": SCHEMA_VERSION, "tool": PROG,
            "date_utc": date_utc(),
            "command": {"argv": command, "line": shlex.join(command), "cwd": os.getcwd()},
            "versions": versions(packages), "git": git_state(repo), "hardware": hardware(),
            "env": environment()}


def write(path: str | os.PathLike, command: list[str] | None = None,
          repo: str | os.PathLike = ".", packages: list[str] | tuple[str, ...] = ()) -> dict:
    """``capture(...)`` written to ``path`` as indented JSON (parent directories created; the
    file is replaced whole, never left half-written); returns the dict. Raises OSError when the
    file cannot be written."""
    info = capture(command, repo, packages)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(path), json.dumps(info, indent=1, sort_keys=False) + "\n")
    return info


def summary(info: dict) -> list[str]:
    """A few human-readable lines about a ``capture()`` dict."""
    v, g, h = info["versions"], info["git"], info["hardware"]
    mem = f"{h['memory_bytes'] / 2**30:.1f} GiB" if h["memory_bytes"] else "? GiB"
    if g.get("commit"):
        dirty = f"dirty: {len(g['dirty_files'])} files" if g["dirty"] else "clean"
        git = f"git {g['commit'][:12]} (branch {g['branch']}, {dirty})"
    else:
        git = f"git: none ({g.get('git_error', 'no commit')})"
    redacted = sum(1 for val in info["env"].values() if val == "<redacted>")
    return [f"python {v['python']} | torch {v['torch']} | CUDA {v['cuda']} | cuDNN {v['cudnn']} "
            f"| NCCL {v['nccl']}", git,
            f"host {h['hostname']} | {h['cpu_model']} | {h['cpu_count']} CPUs | {mem} | "
            f"{len(h['gpus'])} GPUs",
            f"env: {len(info['env'])} variables recorded, {redacted} redacted"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Write versions, git state, hardware, relevant environment "
        "variables and the command line to a JSON file next to a run.",
        epilog="Anything after -- is recorded as the run's command line (it is not executed).")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--json", metavar="PATH", required=True, type=nonempty, help="output file")
    p.add_argument("--repo", default=".", type=nonempty, help="directory inside the code's git repository "
                   "(default: current directory)")
    p.add_argument("--packages", default="", help="comma-separated distributions whose "
                   "versions to record, e.g. numpy,transformers")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = None
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    p = build_parser()
    args = p.parse_args(argv)
    if not Path(args.repo).is_dir():
        p.error(f"--repo {args.repo}: not a directory")
    packages = [x.strip() for x in args.packages.split(",") if x.strip()]
    # Like write(), the CLI creates the run's folder (e.g. runs/$SLURM_JOB_ID/env.json).
    check_output_dir(os.path.dirname(os.path.abspath(args.json)), "--json")
    check_output(args.json, "--json")
    try:
        info = write(args.json, command if command is not None else [sys.executable, *sys.argv],
                     args.repo, packages)
    except OSError as e:
        p.error(f"--json {args.json}: cannot write it ({e.strerror or e})")
    if not args.quiet:
        print(f"# {PROG}: wrote {args.json}")
        for line in summary(info):
            print(f"# {line}")
    return 0


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


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


def date_utc() -> str:
    """Now, in UTC, as a results file's ``date_utc`` has it: YYYY-MM-DDTHH:MM:SSZ."""
    import time
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
