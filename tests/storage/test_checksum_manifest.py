"""Tests of scripts/storage/checksum_manifest.py on real files: the manifest GNU sha256sum accepts,
verify's one line per difference, links that are never followed out of the folder, a hostile
manifest, a file it cannot read, a disk that fills while the manifest is written, and the script
contract's careless-input table."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.conftest import require_tool
from tests.launchers import REPO, clean_env
from tests.storage.conftest import unprivileged

SCRIPT = REPO / "scripts" / "storage" / "checksum_manifest.py"
FILES = {"model/shard-1.bin": 5 << 20, "model/shard-2.bin": 1000, "config.json": 20, "odd name.txt": 3}


def cm(cwd: Path, *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), sys.executable, str(SCRIPT), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=30)


def make(folder: Path) -> None:
    for rel, size in FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(os.urandom(size))


def test_write_then_verify_and_sha256sum_agrees(tmp_path):
    make(tmp_path / "ck")
    done = cm(tmp_path, "write", "ck", "--out", "ck.sha256", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"wrote ck\.sha256: 4 files, 5\.2 MB in [\d.]+ s \(2 workers, [\d.,]+ [kMG]?B?ps\)\n",
                        done.stdout), done.stdout
    text = (tmp_path / "ck.sha256").read_text()
    for rel, size in FILES.items():
        digest = hashlib.sha256((tmp_path / "ck" / rel).read_bytes()).hexdigest()
        assert f"#size {size}\n{digest}  {rel}\n" in text
    require_tool("sha256sum")
    gnu = subprocess.run(["sha256sum", "--strict", "-c", "../ck.sha256"], cwd=tmp_path / "ck",
                         capture_output=True, text=True, timeout=30)
    assert gnu.returncode == 0 and gnu.stdout.count(": OK") == 4, gnu.stdout + gnu.stderr
    ok = cm(tmp_path, "verify", "ck", "ck.sha256")
    assert ok.returncode == 0 and ok.stdout == "OK: 4 files match ck.sha256\n", ok.stdout + ok.stderr
    # sha256sum's own output, with find's ./ prefixes, verifies too
    listing = subprocess.run(["sh", "-c", "find . -type f -exec sha256sum {} + > ../gnu.sha256"], cwd=tmp_path / "ck")
    assert listing.returncode == 0 and "./config.json" in (tmp_path / "gnu.sha256").read_text()
    assert cm(tmp_path, "verify", "ck", "gnu.sha256").returncode == 0


def test_verify_prints_one_line_per_difference_and_exits_3(tmp_path):
    make(tmp_path / "ck")
    assert cm(tmp_path, "write", "ck", "--out", "ck.sha256").returncode == 0
    shard = tmp_path / "ck" / "model" / "shard-1.bin"
    data = bytearray(shard.read_bytes())
    data[123456] ^= 1                                    # one bit flipped, same size
    shard.write_bytes(bytes(data))
    (tmp_path / "ck" / "config.json").write_text("{}")   # another size
    (tmp_path / "ck" / "odd name.txt").unlink()
    (tmp_path / "ck" / "model" / "extra.bin").write_bytes(b"x")
    done = cm(tmp_path, "verify", "ck", "ck.sha256", "--workers", "3")
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["changed     config.json: 2 bytes, the manifest says 20",
                                        "extra       model/extra.bin",
                                        "changed     model/shard-1.bin: different sha256",
                                        "missing     odd name.txt"]
    assert done.stderr == ("checksum_manifest.py: error: 4 of 5 files differ from ck.sha256 "
                           "(2 changed, 1 missing, 1 extra)\n")
    assert cm(tmp_path, "verify", "ck", "ck.sha256", "--exclude", "extra.bin", "--exclude", "model/shard-*",
              "--exclude", "*.txt", "--exclude", "config.json").returncode == 0


def test_links_out_of_the_folder_and_loops_are_never_followed(tmp_path):
    make(tmp_path / "ck")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text("s")
    ck = tmp_path / "ck"
    (ck / "out").symlink_to(tmp_path / "outside" / "secret")
    (ck / "outdir").symlink_to(tmp_path / "outside")
    (ck / "here").symlink_to("config.json")               # inside: hashed under its own name
    (ck / "loop").symlink_to(".")
    (ck / "a").symlink_to("b")
    (ck / "b").symlink_to("a")
    done = cm(tmp_path, "write", "ck", "--out", "ck.sha256")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stderr.splitlines()) == [
        "checksum_manifest.py: warning: skipped a: a link that leads nowhere (Too many levels of symbolic links)",
        "checksum_manifest.py: warning: skipped b: a link that leads nowhere (Too many levels of symbolic links)",
        "checksum_manifest.py: warning: skipped loop: a link to a folder, not followed (its files are listed "
        "under their own paths)",
        "checksum_manifest.py: warning: skipped out: a link to outside the folder, not followed",
        "checksum_manifest.py: warning: skipped outdir: a link to outside the folder, not followed"]
    text = (tmp_path / "ck.sha256").read_text()
    assert "  here\n" in text and "secret" not in text and "# skipped out: a link to outside" in text
    # a manifest that lists files behind the links: verify does not go there to read them
    digest = hashlib.sha256(b"s").hexdigest()
    (tmp_path / "ck.sha256").write_text(text + f"{digest}  out\n{digest}  outdir/secret\n")
    done = cm(tmp_path, "verify", "ck", "ck.sha256")
    assert done.returncode == 3
    assert done.stdout.splitlines() == ["changed     out: a link to outside the folder, not followed",
                                        "missing     outdir/secret"]


def test_a_hostile_manifest_is_refused_before_any_read(tmp_path):
    """Path traversal, an absolute path, a huge file: one line, exit 2; nothing is opened."""
    (tmp_path / "ck").mkdir()
    digest = "0" * 64
    for path in ("../../etc/passwd", "/etc/passwd", "a/../../x", "./../x"):
        (tmp_path / "m").write_text(f"{digest}  ok\n{digest}  {path}\n")
        done = cm(tmp_path, "verify", "ck", "m")
        assert done.returncode == 2 and done.stdout == "", done.stdout
        assert re.fullmatch(r"checksum_manifest\.py: error: m:2: the path \S+ is not a plain path inside the "
                            r"folder \(absolute, or with \. or \.\.\); refusing the whole manifest\n",
                            done.stderr), done.stderr
    with open(tmp_path / "huge", "wb") as f:
        f.truncate(65 << 20)                                # sparse: no disk used
    huge = Case("huge", ["verify", "ck", "huge"], r"MANIFEST huge: larger than 64 MiB", fresh_process=True)
    check_refused("storage/checksum_manifest.py", huge, tmp_path)


def test_an_unreadable_file_fails_write_and_is_reported_by_verify(tmp_path):
    make(tmp_path / "ck")
    assert cm(tmp_path, "write", "ck", "--out", "ck.sha256").returncode == 0
    before = (tmp_path / "ck.sha256").read_bytes()
    prefix = unprivileged(tmp_path / "ck" / "config.json", 0)
    try:
        write = cm(tmp_path, "write", "ck", "--out", "ck.sha256", prefix=prefix)
        verify = cm(tmp_path, "verify", "ck", "ck.sha256", prefix=prefix)
    finally:
        (tmp_path / "ck" / "config.json").chmod(0o644)
    assert write.returncode == 1 and write.stderr == ("checksum_manifest.py: error: ck: config.json: cannot read it "
                                                      "(Permission denied); no manifest written\n")
    assert (tmp_path / "ck.sha256").read_bytes() == before
    assert verify.returncode == 3 and verify.stdout == "unreadable  config.json: cannot read it (Permission denied)\n"


def test_a_disk_that_fills_during_the_write_keeps_the_old_manifest(tmp_path):
    """The manifest goes to a 16 KiB tmpfs (a mount namespace of its own: unshare -rm) that holds
    the previous, shorter manifest; the new one does not fit. Where user namespaces are not
    allowed, a file-size limit (RLIMIT_FSIZE) makes the write fail the same way, with EFBIG."""
    ck = tmp_path / "ck"
    for i in range(150):
        (ck / f"shard-{i:05d}-of-00150-{'x' * 80}.bin").parent.mkdir(exist_ok=True)
        (ck / f"shard-{i:05d}-of-00150-{'x' * 80}.bin").write_bytes(b"%d" % i)
    disk = tmp_path / "disk"
    disk.mkdir()
    old = "# an older manifest\n" + f"{'0' * 64}  shard-00000-of-00150-{'x' * 80}.bin\n"
    script = (f'mount -t tmpfs -o size=16k none "{disk}" && printf %s "$OLD" > "{disk}/m.sha256" && '
              f'"{sys.executable}" "{SCRIPT}" write "{ck}" --out "{disk}/m.sha256"; '
              f'status=$?; cat "{disk}/m.sha256"; ls -a "{disk}"; exit $status')
    env = clean_env({"OLD": old})
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    if "mount" in done.stderr or done.returncode not in (0, 1):   # no user namespaces here
        import resource
        (disk / "m.sha256").write_text(old)
        done = subprocess.run([sys.executable, str(SCRIPT), "write", str(ck), "--out", str(disk / "m.sha256")],
                              env=env, capture_output=True, text=True, timeout=30,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192)))
        done.stdout = (disk / "m.sha256").read_text() + "\n".join(os.listdir(disk))
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.fullmatch(r"checksum_manifest\.py: error: \S+/m\.sha256: cannot write it \((No space left on device|"
                        r"File too large)\); it keeps its previous content\n", done.stderr), done.stderr
    assert done.stdout.startswith(old)                         # the old manifest, whole
    assert ".tmp" not in done.stdout                           # no temporary file left


BAD_INPUT = [
    Case("dir-missing", ["write", "nope", "--out", "m"], r"nope: does not exist$"),
    Case("dir-is-a-file", ["verify", "f", "f"], r"f: is not a folder$", files={"f": "x"}),
    Case("no-command", [], r"the following arguments are required: \{write,verify\}"),
    Case("workers-zero", ["write", ".", "--out", "m", "--workers", "0"], r"--workers: 0 must be >= 1"),
    Case("out-inside-the-folder", ["write", "ck", "--out", "ck/m.sha256"],
         r"--out ck/m\.sha256: is inside ck, which this run hashes; write it elsewhere, or add --exclude 'm\.sha256'",
         files={"ck/a": "x"}),
    Case("out-over-an-input", ["write", "ck", "--out", "ck/a"], r"--out ck/a: is inside ck, which this run hashes",
         files={"ck/a": "x"}),
    Case("out-is-the-folder", ["write", "ck", "--out", "ck"], r"--out ck: is a folder", files={"ck/a": "x"}),
    Case("folder-being-written", ["write", "ck", "--out", "m"],
         r"ck: step-1/\.metadata\.tmp looks like it is still being written; wait for the writer to finish, or "
         r"--exclude it", status=1, files={"ck/step-1/__0_0.distcp": "x", "ck/step-1/.metadata.tmp": "m"}),
    Case("nothing-to-hash", ["write", "ck", "--out", "m", "--exclude", "*"], r"ck: no files to hash",
         files={"ck/a": "x"}),
    Case("manifest-missing", ["verify", ".", "nope"], r"MANIFEST nope: does not exist"),
    Case("manifest-dev-zero", ["verify", ".", "/dev/zero"], r"MANIFEST /dev/zero: is not a regular file or a pipe"),
    Case("manifest-empty", ["verify", "ck", "m"], r"m: no checksum lines in it",
         files={"m": "# nothing\n", "ck/a": ""}),
    Case("manifest-malformed", ["verify", "ck", "m"], r"m:2: not a checksum line \(64 hex digits, two spaces, a path\)",
         files={"m": f"{'a' * 64}  x\n{'a' * 63}  y\n", "ck/a": ""}),
    Case("manifest-not-utf8", ["verify", "ck", "m"], r"m:1: not a checksum line",
         files={"m": b"\xff\xfe\x00\x01\n", "ck/a": ""}),
    Case("manifest-listed-twice", ["verify", "ck", "m"], r"m:3: x is listed twice",
         files={"m": f"{'a' * 64}  x\n#size 1\n{'b' * 64} *x\n", "ck/a": ""}),
    Case("manifest-bad-escape", ["verify", "ck", "m"], r"m:1: an unknown escape in the path",
         files={"m": f"\\{'a' * 64}  x\\q\n", "ck/a": ""}),
    Case("manifest-traversal", ["verify", "ck", "m"], r"m:1: the path \.\./\.\./etc/passwd is not a plain path",
         files={"m": f"{'a' * 64}  ../../etc/passwd\n", "ck/a": ""}),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    # standard library only: a fresh interpreter starts in 50 ms, sooner than the torch-preloaded server
    check_refused("storage/checksum_manifest.py", dataclasses.replace(case, fresh_process=True), tmp_path)


def test_the_manifest_may_live_in_the_folder_when_excluded(tmp_path):
    make(tmp_path / "ck")
    done = cm(tmp_path, "write", "ck", "--out", "ck/MANIFEST.sha256", "--exclude", "MANIFEST.sha256")
    assert done.returncode == 0, done.stderr
    assert "MANIFEST" not in (tmp_path / "ck" / "MANIFEST.sha256").read_text().split("`")[-1]
    again = cm(tmp_path, "write", "ck", "--out", "ck/MANIFEST.sha256", "--exclude", "MANIFEST.sha256")
    assert again.returncode == 0, again.stderr                       # rewriting it is no overwrite of an input
    ok = cm(tmp_path, "verify", "ck", "ck/MANIFEST.sha256")            # it does not list itself
    assert ok.returncode == 0, ok.stdout + ok.stderr
