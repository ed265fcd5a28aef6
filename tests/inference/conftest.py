"""The Inference chapters' script tests run the scripts in scripts/inference/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("inference")
