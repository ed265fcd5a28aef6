"""The Compute chapter's script tests run the scripts in scripts/compute/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("compute")
