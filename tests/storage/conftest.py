"""The Storage chapter's script tests run the scripts in scripts/storage/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("storage")
