"""The Debugging chapter's script tests run the scripts in scripts/debug/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("debug")
