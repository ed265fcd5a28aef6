"""The Training chapters' script tests run the scripts in scripts/training/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("training")
