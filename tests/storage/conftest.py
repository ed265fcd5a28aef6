"""The Storage chapter's script tests run the scripts in scripts/storage/ (see tests/launchers.py)."""

import os
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
