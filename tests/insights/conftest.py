"""The Insights chapter's script tests run the scripts in scripts/insights/ (see tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("insights")
