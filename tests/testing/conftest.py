"""The Testing chapter's script tests run the scripts in scripts/testing/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("testing")
