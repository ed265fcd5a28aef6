"""Tests of scripts/storage/usage_by_owner.py, the one-walk ``du`` by owner and top-level folder.

Its totals are compared with GNU ``du -s --block-size=1`` (allocated) and ``du -s --apparent-size``
on a staged tree that holds what trips a careless walker: a sparse file, hard links across two
top-level folders, a symbolic link out of the tree to a large folder, a symbolic-link loop and a
file owned by another user; its owners with ``find -printf`` (each inode once). The limits,
Ctrl-C, the progress line's rate and the careless inputs each have a test. The script is standard
library only: each run is a real interpreter (about 0.05 s), no torch.
"""

from __future__ import annotations

import collections
import io
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env, import_script
from tools.results import problems

SCRIPT = REPO / "scripts" / "storage" / "usage_by_owner.py"
OTHER_UID = 65534  # nobody


def run(args, cwd=REPO, timeout=30, **kwargs):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def stage(root: Path) -> None:
    """The test tree: top-level folders data/ and logs/, a file at the top, nested folders."""
    (root / "data" / "shards" / "deep").mkdir(parents=True)
    (root / "logs").mkdir()
    (root / "empty").mkdir()
    (root / "data" / "a.bin").write_bytes(os.urandom(300_000))
    (root / "data" / "shards" / "s0").write_bytes(b"x" * 5000)
    (root / "data" / "shards" / "deep" / "tiny").write_bytes(b"y")
    with open(root / "data" / "sparse", "wb") as f:  # 8 MB apparent, next to nothing allocated
        f.truncate(8_000_000)
    os.link(root / "data" / "a.bin", root / "logs" / "same-inode")  # one inode, two top-level folders
    os.link(root / "data" / "shards" / "s0", root / "data" / "s0-again")
    os.symlink("/usr", root / "data" / "out-of-tree")                # must not be followed
    os.symlink("loop", root / "logs" / "loop")                       # a loop, counted as a link
    (root / "top.txt").write_text("at the top\n")
    theirs = root / "logs" / "theirs.log"
    theirs.write_bytes(b"z" * 70_000)
    if os.geteuid() == 0:
        os.chown(theirs, OTHER_UID, OTHER_UID)


def du(path: Path, *extra: str) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", *extra, str(path)], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return int(out.split()[0])


def by_owner_with_find(root: Path) -> dict[int, tuple[int, int]]:
    """Allocated and apparent bytes per uid, from find(1), each inode once."""
    out = subprocess.run(["find", str(root), "-printf", r"%U %i %b %s\n"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    seen, sums = set(), collections.defaultdict(lambda: [0, 0])
    for line in out.splitlines():
        uid, ino, blocks, size = map(int, line.split())
        if ino not in seen:
            seen.add(ino)
            sums[uid][0] += blocks * 512
            sums[uid][1] += size
    return {uid: tuple(v) for uid, v in sums.items()}


def test_totals_agree_with_du_and_owners_with_find(tmp_path):
    require_tool("du")
    root, out = tmp_path / "tree", tmp_path / "usage.json"
    root.mkdir()
    stage(root)
    res = run([root, "--threads", "3", "--json", out])
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(out.read_text())
    assert problems(report, "--json") == []  # tools/schemas/usage_by_owner.schema.json
    assert report["complete"] is True and report["stopped_by"] is None
    owners = {r["uid"]: (r["allocated_bytes"], r["apparent_bytes"]) for r in report["results"]
              if r["group"] == "owner"}
    folders = {r["name"]: r for r in report["results"] if r["group"] == "folder"}
    # the totals, both ways, are du's (which also counts each inode once, never follows a link)
    assert sum(a for a, _ in owners.values()) == du(root)
    assert sum(b for _, b in owners.values()) == du(root, "--apparent-size")
    assert sum(r["allocated_bytes"] for r in folders.values()) == du(root)
    assert owners == by_owner_with_find(root)
    if os.geteuid() == 0:
        assert OTHER_UID in owners and owners[OTHER_UID][1] == 70_000
    # the linked inode counts once, in whichever top-level folder reached it first
    assert folders["data"]["apparent_bytes"] + folders["logs"]["apparent_bytes"] < \
        du(root / "data", "--apparent-size") + du(root / "logs", "--apparent-size")
    # nothing under /usr came in through the link: far less than its target holds
    assert folders["data"]["apparent_bytes"] < 9_000_000
    assert set(folders) == {".", "data", "logs", "empty"}
    assert folders["empty"]["entries"] == 1
    # the table says the same in decimal units
    assert "complete" in res.stdout.splitlines()[0]
    assert f"# total: {import_script(SCRIPT).size(du(root))} allocated" in res.stdout


def test_a_limit_stops_the_walk_with_a_partial_table(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    stage(root)
    for args, why in ((["--max-files", "3"], "--max-files 3"), (["--timeout-s", "1e-9"], "--timeout-s")):
        out = tmp_path / "partial.json"
        res = run([root, "--json", out, *args])
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"PARTIAL (stopped: {why})" in res.stdout.splitlines()[0]
        assert res.stderr.strip().endswith("the table is partial") and "Traceback" not in res.stderr
        report = json.loads(out.read_text())
        assert report["complete"] is False and report["stopped_by"] == why
        assert report["entries"] < 17
        assert problems(report, "--json") == []


def test_ctrl_c_prints_and_writes_what_was_counted(tmp_path):
    """A walk of /usr (thousands of entries, seconds) stopped by SIGINT once its first progress
    line is out, started with SIGINT ignored as a background job is: exit 130, the partial
    table on stdout, the partial JSON written."""
    if sum(1 for _ in itertools.islice(Path("/usr").rglob("*"), 5000)) < 5000:
        pytest.skip("/usr is too small here to be interrupted in the middle of its walk")
    out = tmp_path / "usr.json"
    ignoring = ["sh", "-c", 'trap "" INT; exec "$0" "$@"']
    proc = subprocess.Popen([*ignoring, sys.executable, str(SCRIPT), "/usr", "--threads", "1", "--progress",
                             "always", "--progress-every-s", "0.05", "--json", str(out)], env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 20)
        assert ready, "no progress line within 20 s"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = (s.decode() for s in proc.communicate(timeout=20))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stdout + stderr
    assert "PARTIAL (stopped: interrupted" in stdout and stderr.rstrip().endswith("error: interrupted")
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["entries"] > 0
    assert report["results"] and problems(report, "--json") == []


def test_the_progress_line_is_rate_limited_and_only_on_a_terminal(monkeypatch):
    mod = import_script(SCRIPT)
    walk = mod.Walk(10, time.monotonic() + 60)
    for mode, window in (("always", 0.3), ("never", 0.0), ("auto", 0.0)):  # auto: stderr is no tty here
        err = io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        show = mod.progress_printer(walk, mode, 0.05)
        start, calls = time.monotonic(), 0
        while calls < 100 or time.monotonic() - start < window:
            show()
            calls += 1
        show(final=True)
        updates = err.getvalue().count("\r")
        if mode == "always":  # thousands of calls, one line per 0.05 s at most, and the last one
            assert calls > 1000 and 4 <= updates <= window / 0.05 + 2 and err.getvalue().endswith("s\n")
        else:
            assert updates == 0


def test_unreadable_folders_are_named_not_fatal(tmp_path):
    """As a user who cannot read a folder in the tree: the walk goes on, one warning names it,
    --json lists it; ROOT itself unreadable is a usage error. Root reads everything, so as root
    the runs are made as nobody, in a folder nobody can reach."""
    base = Path(tempfile.mkdtemp(prefix="usage-unreadable-"))
    try:
        os.chmod(base, 0o755)
        root = base / "tree"
        (root / "open").mkdir(parents=True)
        (root / "open" / "f").write_bytes(b"a" * 100)
        (root / "closed").mkdir()
        (root / "closed" / "hidden").write_bytes(b"b" * 100)
        os.chmod(root / "closed", 0o000)
        os.chmod(base, 0o777)
        as_other = {}
        if os.geteuid() == 0:
            python = "/usr/bin/python3"
            if not os.access(python, os.X_OK):
                pytest.skip("no /usr/bin/python3 to run the script as another user")
            as_other = {"user": OTHER_UID, "group": OTHER_UID, "extra_groups": []}
        else:
            python = sys.executable
        script = base / "usage_by_owner.py"
        script.write_bytes(SCRIPT.read_bytes())
        os.chmod(script, 0o644)

        def go(*args):
            return subprocess.run([python, str(script), *args], cwd=base, capture_output=True, text=True,
                                  timeout=30, env=clean_env(), **as_other)
        res = go(str(root), "--json", str(base / "u.json"))
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stderr.count("\n") == 1 and "warning: 1 folders could not be read" in res.stderr
        assert str(root / "closed") in res.stderr
        report = json.loads((base / "u.json").read_text())
        assert report["unreadable_folders"] == 1 and report["unreadable_first"][0]["path"] == str(root / "closed")
        res = go(str(root / "closed"))
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert res.stderr.strip() == f"usage_by_owner.py: error: ROOT {root / 'closed'}: cannot read it " \
                                     "(Permission denied)"
    finally:
        os.chmod(base / "tree" / "closed", 0o755)
        subprocess.run(["rm", "-rf", str(base)], check=True, timeout=30)


def refused(*args, **kwargs) -> Case:
    """A Case run in a real interpreter (the script is standard library only: quicker than a fork
    of the torch server) within 10 s."""
    return Case(*args, fresh_process=True, limit_s=10.0, **kwargs)


BAD_INPUT = [
    refused("root-missing", ["{tmp}/no-such-folder"], r"ROOT .*/no-such-folder: does not exist"),
    refused("root-is-file", ["f.txt"], r"ROOT f\.txt: is not a folder .*give the folder to walk",
         files={"f.txt": "a file, not a folder"}),
    refused("root-empty", [""], r"ROOT: must not be empty"),
    refused("root-is-symlink-loop", ["{tmp}/loop"], r"ROOT .*/loop: Too many levels of symbolic links"),
    refused("json-inside-root", ["{tmp}", "--json", "{tmp}/out.json"],
         r"--json .*out\.json: is inside .*, which this run reads; write the result elsewhere"),
    refused("json-is-root", ["{tmp}/sub", "--json", "{tmp}/sub"], r"--json .*/sub: is a folder; give a file name",
         files={"sub/x": "x"}),
    refused("json-is-a-file-in-root", ["sub", "--json", "sub/x"], r"--json sub/x: is inside sub, which this run reads",
         files={"sub/x": "keep me"}),
    refused("threads-zero", ["{tmp}", "--threads", "0"], r"--threads: 0 must be >= 1"),
    refused("threads-huge", ["{tmp}", "--threads", "100000"], r"--threads: 100000 must be <= 64"),
    refused("max-files-nan", ["{tmp}", "--max-files", "nan"], r"--max-files: 'nan' is not an integer"),
    refused("timeout-zero", ["{tmp}", "--timeout-s", "0"], r"--timeout-s: 0 must be > 0"),
    refused("timeout-inf", ["{tmp}", "--timeout-s", "inf"], r"--timeout-s: 'inf' is not a finite number"),
    refused("progress-every-zero", ["{tmp}", "--progress-every-s", "0"], r"--progress-every-s: 0 must be >= 0\.05"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    if case.id == "root-is-symlink-loop":
        os.symlink("loop", tmp_path / "loop")
    check_refused("storage/usage_by_owner.py", case, tmp_path)
