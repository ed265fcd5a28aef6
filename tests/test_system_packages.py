"""tools/system_packages.sh: one list of Debian packages (requirements/apt.txt) that the two
commands and CI install, and the one-line instruction when it cannot install them itself."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_tool

SCRIPT = ROOT / "tools" / "system_packages.sh"


def listed() -> list[str]:
    out = subprocess.run([SCRIPT, "--list"], capture_output=True, text=True, check=True).stdout
    return out.split()


def fake_bin(tmp_path: Path, **commands: str) -> dict:
    """An environment whose PATH starts with a folder of fake commands (name -> shell body)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in commands.items():
        path = folder / name.replace("_", "-")
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def dpkg_query_missing(missing: str) -> str:
    # prints "<pkg> installed" for every package asked for except `missing`
    return f'shift 2; for p in "$@"; do [ "$p" = {missing} ] && echo "$p not-installed" || echo "$p installed"; done'


def test_list_is_parsed_without_comments():
    packages = listed()
    assert {"fio", "slurmctld", "chromium", "fonts-noto-cjk", "poppler-utils", "shellcheck"} <= set(packages)
    assert not [p for p in packages if p.startswith("#") or not p.strip()]


def test_the_two_commands_ci_and_readme_use_the_one_list():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "tools/system_packages.sh" in makefile
    assert "tools/system_packages.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "requirements/apt.txt" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_all_present_is_silent(tmp_path):
    env = fake_bin(tmp_path, dpkg_query=dpkg_query_missing("none"), apt_get="echo apt-get called; exit 9")
    result = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_missing_without_root_or_sudo_prints_the_exact_command(tmp_path):
    env = fake_bin(tmp_path, dpkg_query=dpkg_query_missing("fio"), id="echo 1000", sudo="exit 1",
                   apt_get="echo apt-get called; exit 9")
    result = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "system_packages.sh: error: missing system packages; install them with: sudo apt-get install -y fio"]


def test_missing_as_root_installs_exactly_the_missing(tmp_path):
    log = tmp_path / "apt.log"
    env = fake_bin(tmp_path, dpkg_query=dpkg_query_missing("shellcheck"), id="echo 0",
                   apt_get=f'echo "$@" >> {log}')
    result = subprocess.run([SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq shellcheck"]


def test_require_tool_skips_outside_ci_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_tool("no-such-tool-anywhere")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no-such-tool-anywhere"):
        require_tool("no-such-tool-anywhere")
