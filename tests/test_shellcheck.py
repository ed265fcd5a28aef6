"""Every shell script in the repository passes shellcheck."""

import subprocess
from pathlib import Path

from tests.conftest import ROOT, require_tool

SHELL_SUFFIXES = {".sh", ".sbatch", ".slurm", ".bash"}


def shell_scripts() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if not path.is_file():
            continue
        if path.suffix in SHELL_SUFFIXES:
            found.append(path)
        elif path.suffix == "":
            with open(path, "rb") as f:
                first = f.readline()
            if first.startswith(b"#!") and first.rstrip().endswith((b"/sh", b"bash")):
                found.append(path)
    return found


def test_shell_scripts_pass_shellcheck():
    shellcheck = require_tool("shellcheck")
    scripts = shell_scripts()
    assert ROOT / ".ci" / "run" in scripts
    result = subprocess.run([shellcheck, "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
