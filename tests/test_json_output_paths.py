"""A careless ``--json PATH`` (issue 37), given to every script whose parser has ``--json``: an
empty path, a folder, a file in a folder that does not exist or under a file, a folder where no
file can be created (/proc), a FIFO and /dev/null. Each run must be refused before any work, in
the one line the script contract's check_output writes (tools/script_contract.py), with exit
status 2 (or the status its VALID entry names), leaving the FIFO a FIFO and creating no folder
(tests/bad_input.py, check_refused).

A script's own --json cases, those that involve its other options (--json onto one of its inputs,
into a checkpoint it resumes, onto a path another of its outputs writes), stay in its
BAD_INPUT table in tests/<part>/test_<script>.py.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import REPO

SCRIPTS = REPO / "scripts"


def _json_option(path: Path) -> tuple[bool, bool]:
    """(the script's parser has ``--json``: an ``add_argument("--json", ...)`` call; its code
    names the string "--json" at all)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    added = any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == "--json" for a in node.args)
                for node in ast.walk(tree))
    named = any(isinstance(node, ast.Constant) and node.value == "--json" for node in ast.walk(tree))
    return added, named


_FOUND = {p.relative_to(SCRIPTS).as_posix(): _json_option(p) for p in sorted(SCRIPTS.rglob("*.py"))}
JSON_SCRIPTS = [script for script, (added, _) in _FOUND.items() if added]


@dataclass(frozen=True)
class Valid:
    """A run of the script in which nothing but ``--json PATH`` is wrong: ``args`` before
    ``--json PATH``, ``tail`` after it (a command after ``--``), and the environment and files
    the run needs (Case's ``env`` and ``files``); ``status``, the exit status of a usage error
    where the script's callers need another than 2 (the judge of ``git bisect run``, for which 2
    would mean "bad commit")."""
    args: tuple[str, ...] = ()
    tail: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    status: int = 2


CORPUS = {"c.jsonl": '{"text": "a short document, long enough to count"}\n'}
# Every script whose parser has --json needs its entry here: the arguments of a run in which only
# the --json path is wrong. A script missing from it fails each of its cases (and
# test_every_script_with_json_has_a_valid_run) with a message saying so, so a new script with
# --json cannot be left out.
VALID: dict[str, Valid] = {
    "compute/mamf_finder.py": Valid(),
    "compute/mem_bandwidth.py": Valid(),
    "compute/numa_affinity.py": Valid(("--print",)),
    "compute/step_time_breakdown.py": Valid(("--device", "cpu")),
    "compute/upgrade_cost.py": Valid(("--params", "7e9", "--device", "a:1:1")),
    "debug/activation_diff.py": Valid(("demo",)),
    "debug/bisect_judge.py": Valid(("--better", "lower", "--threshold", "1", "--regex", "x"), tail=("--", "true"),
                                   status=128),
    "debug/crash_catcher.py": Valid(tail=("--", "true")),
    "debug/find_bad_rank.py": Valid(env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                         "MASTER_PORT": "{port}"}),
    "debug/make_tiny_model.py": Valid(),
    "debug/node_health_check.py": Valid(("--allow-no-gpu",)),
    "debug/stack_dumps.py": Valid(("--pid", "1")),
    "debug/shrink_model.py": Valid(("--from-model", "Llama 2 7B")),
    "debug/trace_summary.py": Valid(("t.json",), files={"t.json": '{"traceEvents": [{"ph": "X", "name": "mm", '
                                                                 '"cat": "cpu_op", "ts": 0, "dur": 5}]}'}),
    "debug/underflow_overflow_detector.py": Valid(),
    "inference/decode_bench.py": Valid(),
    "inference/kv_cache_calculator.py": Valid(("--model", "all")),
    "inference/quantize_weights.py": Valid(),
    "inference/serving_simulator.py": Valid(),
    "inference/speculative_decoding.py": Valid(),
    "insights/acceptance_suite.py": Valid(("--out", "{tmp}/run")),
    "instabilities/loss_spike_experiment.py": Valid(),
    "models/dpo_tiny.py": Valid(),
    "models/model_calculator.py": Valid(("--model", "all")),
    "network/all_reduce_bench.py": Valid(("--sizes", "1K")),
    "network/busbw_model.py": Valid(),
    "network/distributed_connectivity_check.py": Valid(),
    "orchestration/run_watchdog.py": Valid(("--fs", "/tmp")),
    "orchestration/train_requeue.py": Valid(("--ckpt-dir", "ck", "--steps", "5")),
    "storage/checkpoint_interval.py": Valid(),
    "storage/checkpoint_io_bench.py": Valid(("--size", "1M", "--timeout", "30")),
    "storage/dataloader_bench.py": Valid(),
    "storage/fio_scan.py": Valid(("{tmp}",)),
    "storage/prune_checkpoints.py": Valid(("ck", "--keep-last", "1"), files={"ck/step-1": "x"}),
    "storage/usage_by_owner.py": Valid(("sub",), files={"sub/f": "x"}),
    "training/capture_env.py": Valid(),
    "training/communication_volume.py": Valid(),
    "training/context_parallel.py": Valid(),
    "training/dcp_resume_example.py": Valid(),
    "training/flops_mfu_calculator.py": Valid(("--layers", "2", "--hidden", "64", "--vocab", "10", "--seq-len", "8",
                                                "--tokens-per-s", "5", "--device", "a100")),
    "training/gpu_memory_monitor.py": Valid(("--steps", "1")),
    "training/hsdp_example.py": Valid(),
    "training/layer_bench.py": Valid(("swiglu",)),
    "training/memory_estimator.py": Valid(("--params", "1e9")),
    "training/minhash_dedup.py": Valid(("c.jsonl",), files=CORPUS),
    "training/parallelism_planner.py": Valid(("--model", "Llama 3.1 8B", "--global-batch", "8", "--seq", "4096")),
    "training/mx_quantize.py": Valid(),
    "training/text_quality_filters.py": Valid(("c.jsonl",), files=CORPUS),
    "training/train_example.py": Valid(),
}


@dataclass(frozen=True)
class JsonCase:
    """One careless --json path: ``path`` (``{tmp}``: the run's folder), the error line's text
    after ``PROG: error: `` as a regular expression (``{tmp}``: that folder, escaped), the files
    and FIFOs the run's folder holds, its symbolic links (name: target), which must be left as they
    are, and a path that must not exist after the run."""
    id: str
    path: str
    message: str
    files: dict[str, str] = field(default_factory=dict)
    fifos: tuple[str, ...] = ()
    links: dict[str, str] = field(default_factory=dict)
    absent: str = ""


# The contract's wording (tools/script_contract.py: nonempty, check_output), exit status 2. A FIFO
# and /dev/null are refused because write_atomic renames over the output: on /dev/null (as
# root) it replaced the device. /dev/null is given through a link to it, so that a script that
# fails to refuse it replaces the link, not the device of the machine that runs the tests.
CASES = [
    JsonCase("json-empty", "", r"argument --json: must not be empty"),
    JsonCase("json-is-folder", "{tmp}", r"--json {tmp}: is a folder; give a file name"),
    JsonCase("json-folder-missing", "{tmp}/no/r.json", r"--json {tmp}/no/r\.json: {tmp}/no does not exist",
             absent="no"),
    JsonCase("json-parent-is-file", "{tmp}/f/r.json", r"--json {tmp}/f/r\.json: {tmp}/f is not a folder",
             files={"f": "x"}),
    JsonCase("json-unwritable", "/proc/r.json", r"--json /proc/r\.json: cannot write in /proc \([^()]+\)"),
    JsonCase("json-fifo", "pipe", r"--json pipe: is not a regular file; give a file name", fifos=("pipe",)),
    JsonCase("json-dev-null", "null", r"--json null: is not a regular file; give a file name",
             links={"null": "/dev/null"}),
]

# (script, case id): a generic case a script answers in its own way, on purpose; its own table
# (tests/<part>/test_<script>.py) keeps the case with the script's wording.
OWN_ANSWER = {
    # capture_env creates the folder of its --json (runs/$SLURM_JOB_ID/env.json) with
    # check_output_dir, whose wording differs: "{tmp}/f is a file, not a folder", "--json /proc:
    # cannot write there (...)"
    ("training/capture_env.py", "json-folder-missing"): "creates the missing folder",
    ("training/capture_env.py", "json-parent-is-file"): "check_output_dir's wording",
    ("training/capture_env.py", "json-unwritable"): "check_output_dir's wording",
}

PARAMS = [pytest.param(script, case, id=f"{script.split('/')[-1][:-3]}-{case.id}")
          for script in JSON_SCRIPTS for case in CASES if (script, case.id) not in OWN_ANSWER]


@pytest.mark.parametrize("script, case", PARAMS)
def test_a_careless_json_path_is_refused(script, case, tmp_path):
    if script not in VALID:
        pytest.fail(f"scripts/{script} has --json but no entry in VALID ({Path(__file__).name}): "
                    "add the arguments of a run in which only the --json path is wrong")
    valid = VALID[script]
    tmp = re.escape(str(tmp_path))
    run = Case(case.id, [*valid.args, "--json", case.path, *valid.tail],
               rf": error: {case.message.replace('{tmp}', tmp)}$",
               env=valid.env, files={**valid.files, **case.files}, fifos=case.fifos, status=valid.status)
    for name, target in case.links.items():
        (tmp_path / name).symlink_to(target)
    check_refused(script, run, tmp_path)
    for name, target in case.links.items():
        assert (tmp_path / name).is_symlink() and os.readlink(tmp_path / name) == target, f"{name} was replaced"
    if case.absent:
        assert not (tmp_path / case.absent).exists(), f"{case.absent} was created"


def test_every_script_with_json_is_found():
    """The parsers are read from the source: a script that names "--json" must be one found to
    add it (an option added in a loop would be missed), and there are some."""
    assert len(JSON_SCRIPTS) >= 30
    missed = [script for script, (added, named) in _FOUND.items() if named and not added]
    assert not missed, f"name --json but were not found to add it with add_argument: {missed}"


def test_every_script_with_json_has_a_valid_run():
    missing = sorted(set(JSON_SCRIPTS) - set(VALID))
    assert not missing, f"scripts with --json but no entry in VALID ({Path(__file__).name}): {missing}"
    stale = sorted(set(VALID) - set(JSON_SCRIPTS))
    assert not stale, f"entries of VALID for scripts without --json: {stale}"
    ids = {case.id for case in CASES}
    unknown = sorted(key for key in OWN_ANSWER if key[0] not in JSON_SCRIPTS or key[1] not in ids)
    assert not unknown, f"OWN_ANSWER names a script or case that does not exist: {unknown}"
