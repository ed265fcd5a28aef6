"""The Instabilities chapter's script tests run the scripts in scripts/instabilities/ (see
tests/launchers.py)."""

from tests.launchers import launch_fixture

launch = launch_fixture("instabilities")
