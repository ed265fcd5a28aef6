"""Bad-input cases for the book's scripts: run a script the way a careless user would and check
that it keeps the script contract (CONTRIBUTING.md, "Script contract").

Each part's ``tests/<part>/test_<script>.py`` lists its cases as :class:`Case` objects and runs them
with :func:`check_refused` through ``pytest.mark.parametrize``. A case's ``args`` and ``env``
values may contain ``{tmp}`` (the test's empty folder), ``{script}`` (the script's path) and
``{port}`` (a TCP port on 127.0.0.1 where nothing listened a moment before the run; ``message``
may name it too); the
``files`` it names are created there first, and must hold the same bytes afterwards; the
``fifos`` it names are created as named pipes, and must still be pipes afterwards (an output
written by a rename over one would replace it, as it once replaced /dev/null).

The runs fork from a server that imported torch once (tests/preloaded.py), which gives the script
what ``python SCRIPT`` would; ``Case(fresh_process=True)`` runs a real interpreter instead.

A careless ``--json PATH`` that means the same for every script (a folder, a FIFO, /dev/null, a
missing or unwritable folder, an empty path) is tried on each script with ``--json`` by
tests/test_json_output_paths.py; a table lists only the ``--json`` cases that involve its script's
other options (its inputs, its other outputs).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests import preloaded
from tests.launchers import REPO, clean_env, free_port


@dataclass
class Case:
    """One careless invocation and what the script must answer.

    ``message`` is a regular expression searched in the single error line; ``status`` the exit
    status (2 usage error, 1 runtime failure); ``limit_s`` the wall-clock time allowed.
    """
    id: str
    args: list[str]
    message: str
    status: int = 2
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str | bytes] = field(default_factory=dict)
    fifos: tuple[str, ...] = ()
    limit_s: float = 30.0
    fresh_process: bool = False   # run a real interpreter, not a fork of the torch-preloaded server
    # a known breach of the contract by the script, reported to its owner: the case is expected
    # to fail (strictly, so that it fails once the script is fixed and the mark can go)
    xfail: str = ""

    def param(self):
        import pytest
        marks = [pytest.mark.xfail(strict=True, reason=self.xfail)] if self.xfail else []
        return pytest.param(self, id=self.id, marks=marks)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prepare(script: str, case: Case, tmp: Path) -> tuple[Path, list[str], dict[str, str], dict[str, str]]:
    """Create the case's files and FIFOs in ``tmp``; return the script's path, its arguments, its
    environment and the values put into ``{tmp}``, ``{script}`` and ``{port}``."""
    path = REPO / "scripts" / script
    fill = {"tmp": str(tmp), "script": str(path), "port": str(free_port())}
    for name, content in case.files.items():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            target.write_text(content, encoding="utf-8")
        else:
            target.write_bytes(content)
    for name in case.fifos:
        os.mkfifo(tmp / name)
    env = clean_env({k: v.format(**fill) for k, v in case.env.items()})
    return path, [a.format(**fill) for a in case.args], env, fill


def run(path: Path, argv: list[str], env: dict[str, str], tmp: Path, case: Case,
        fresh_process: bool = False) -> subprocess.CompletedProcess:
    """The script run in ``tmp``: in a real interpreter with ``fresh_process`` (or
    ``case.fresh_process``), else forked from the torch-preloaded server (tests/preloaded.py)."""
    if fresh_process or case.fresh_process:
        return subprocess.run([sys.executable, str(path), *argv], cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=case.limit_s + 30, start_new_session=True, stdin=subprocess.DEVNULL)
    return preloaded.run(path, argv, tmp, env, timeout=case.limit_s + 30)


def check_refused(script: str, case: Case, tmp: Path) -> str:
    """Run ``scripts/<script>`` with ``case`` in ``tmp``; assert the contract and return the
    error line. Fails when the status differs, the output has a traceback or more than one
    ``error:`` line, the line does not match, the run takes longer than ``case.limit_s``, an
    input file changed, a FIFO was replaced, or a stray temporary file was left next to an
    output."""
    path, argv, env, fill = prepare(script, case, tmp)
    before = {name: _digest(tmp / name) for name in case.files if (tmp / name).is_file()}
    listing = sorted(os.listdir(tmp))
    start = time.monotonic()
    proc = run(path, argv, env, tmp, case)
    elapsed = time.monotonic() - start
    shown = f"\n$ {path.name} {' '.join(case.args)}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stdout + proc.stderr, "traceback printed" + shown
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, f"expected one error line, got {len(errors)}" + shown
    line = errors[0]
    assert line.startswith(f"{path.name}: error: "), "error line does not name the script" + shown
    message = case.message.replace("{port}", fill["port"])
    assert re.search(message, line), f"error line does not match {case.message!r}" + shown
    assert proc.returncode == case.status, f"exit status {proc.returncode}, not {case.status}" + shown
    assert elapsed <= case.limit_s, f"took {elapsed:.1f} s, limit {case.limit_s} s" + shown
    for name, digest in before.items():
        assert _digest(tmp / name) == digest, f"input {name} was modified" + shown
    for name in case.fifos:
        assert stat.S_ISFIFO(os.stat(tmp / name).st_mode), f"{name} is no longer a FIFO" + shown
    stray = [n for n in sorted(os.listdir(tmp)) if n not in listing and n.endswith(".tmp")]
    assert not stray, f"temporary files left behind: {stray}" + shown
    return line


def models_data_cases() -> list[Case]:
    """A careless ``--data`` for the scripts that read data/models/architectures.yml
    (kv_cache_calculator, model_calculator), in YAML or in the JSON the calculator pages give them
    (Pyodide has no PyYAML): no rows, a list, a row without a name, an empty file, a folder."""
    return [
        Case("data-json-no-rows", ["--list", "--data", "d.json"], "d.json: no 'rows' list",
             files={"d.json": '{"rows": []}'}),
        Case("data-json-list", ["--list", "--data", "d.json"], "d.json: no 'rows' list", files={"d.json": "[1, 2]"}),
        Case("data-json-row-without-name", ["--list", "--data", "d.json"], "d.json: row 1: needs a name",
             files={"d.json": '{"rows": [{"kind": "dense"}]}'}),
        Case("data-empty", ["--list", "--data", "d.yml"], "d.yml: no 'rows' list", files={"d.yml": ""}),
        Case("data-is-folder", ["--list", "--data", "{tmp}"], "--data .*: cannot read it"),
    ]


def launcher_cases(args: list[str], timeout_args: list[str],
                   unreachable_limit_s: float = 25.0, local_rank: bool = True) -> list[Case]:
    """The careless launches every distributed script must refuse: launcher variables that are
    not integers or out of range, and a rank whose MASTER_ADDR:MASTER_PORT (``port`` on
    127.0.0.1, where nothing listens) cannot be reached, which must end within the script's own
    timeout (``timeout_args``, e.g. ``["--timeout-s", "3"]``) plus start-up time.
    ``local_rank``: the script reads LOCAL_RANK (one that has no use for it may ignore it)."""
    two = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "{port}"}
    cases = [
        Case("env-rank-not-integer", args, r"environment variable RANK='abc' is not an integer",
             env={**two, "RANK": "abc"}),
        Case("env-world-size-not-integer", args,
             r"environment variable WORLD_SIZE='abc' is not an integer",
             env={**two, "RANK": "0", "WORLD_SIZE": "abc"}),
        Case("env-local-rank-not-integer", args,
             r"environment variable LOCAL_RANK='abc' is not an integer",
             env={**two, "RANK": "0", "LOCAL_RANK": "abc"}),
        Case("env-master-port-not-integer", args,
             r"environment variable MASTER_PORT='abc' is not an integer",
             env={**two, "RANK": "0", "MASTER_PORT": "abc"}),
        Case("env-rank-outside-world", args, r"rank 5 is outside world size 2",
             env={**two, "RANK": "5"}),
        # the deadline's message or the store's own ("... connect to (127.0.0.1, PORT)")
        Case("unreachable-master", [*args, *timeout_args], r"rank 1\b.*127\.0\.0\.1(:|, ){port}",
             status=1, env={**two, "RANK": "1"}, limit_s=unreachable_limit_s),
    ]
    return [c for c in cases if local_rank or "LOCAL_RANK" not in c.env]
