"""The Storage chapter's script tests run the scripts in scripts/storage/ (see tests/launchers.py)."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.launchers import launch_fixture

launch = launch_fixture("storage")

READ_ONLY_DIR = Path("/sys")


@pytest.fixture
def read_only_dir() -> str:
    """A directory nobody can create files in, not even root; skips if this machine has none.

    chmod on a temporary directory would not do: root ignores permission bits, and the tests
    may run as root. /sys is mounted read-only, so creating a directory there fails for root
    too; this checks that it really does before a test relies on it.
    """
    probe = READ_ONLY_DIR / f"storage-test-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return str(READ_ONLY_DIR)
    probe.rmdir()
    pytest.skip(f"{READ_ONLY_DIR} is writable on this machine: no read-only directory to test")


def unprivileged(path: Path, mode: int) -> list[str]:
    """Give ``path`` the permission bits ``mode`` so that they hold for the script under test, and
    return the command prefix that runs it: none for a user other than root; for root (who ignores
    permission bits) the path is given to user 65534 and the script runs under ``unshare -r``, as
    root of a user namespace in which that owner is not mapped, so the bits hold for it too. Skips
    where root has no user namespace."""
    if os.geteuid() != 0:
        path.chmod(mode)
        return []
    if subprocess.run(["unshare", "-r", "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root without user namespaces: no way to make a file unreadable")
    os.lchown(path, 65534, 65534)
    path.chmod(mode)
    return ["unshare", "-r"]
