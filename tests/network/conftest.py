"""The Network chapter's script tests run the scripts in scripts/network/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("network")
