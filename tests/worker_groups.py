"""Which pytest-xdist worker runs which tests: each file's tests on one worker, in order, and every
test of one ``xdist_group`` (tests.launchers.RANKS: two or more ranks, or a SLURM job) on one
worker, one after another.

pytest-xdist's own ``--dist loadgroup`` passes a test's group to the scheduler by appending
``@group`` to its node id, and since pytest 9.2 (structured node ids) that append no longer takes:
the groups are silently ignored (pytest-dev/pytest-xdist#1386). So the groups travel here on their
own: each worker writes what it collected, node id to group, into a file named by the run's id,
and the scheduler (in the controller) reads it once every worker has collected.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path

import pytest

_MAX_BYTES = 16 << 20  # a collection's group map is a few hundred kB


def group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in: its nearest ``xdist_group`` mark's name, or None."""
    mark = item.get_closest_marker("xdist_group")
    return None if mark is None else str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _groups_file(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-groups-{run_id}.json"


def name_the_run(config: pytest.Config) -> None:
    """In the controller, before the workers start: give the run an id the workers inherit
    (pytest-xdist's ``--testrunuid``), so that both sides find the same groups file."""
    if not hasattr(config, "workerinput") and getattr(config.option, "testrunuid", "unset") is None:
        config.option.testrunuid = uuid.uuid4().hex


def publish(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: write its collection's node id -> group map (the first worker to finish
    writes it; all collect the same tests). Written to a new name, then renamed, so that a
    reader never sees half a file."""
    if not hasattr(config, "workerinput"):
        return
    path = _groups_file(config.workerinput["testrunuid"])
    groups = {item.nodeid: group for item in items if (group := group_of(item))}
    part = path.with_name(f"{path.name}.{config.workerinput['workerid']}.part")
    part.write_text(json.dumps(groups))
    os.replace(part, path)


def scheduler(config: pytest.Config, log):
    """A LoadScopeScheduling whose scope is a test's group, else its file."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFileAndGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # called once every worker has collected
                path = _groups_file(config.option.testrunuid)
                with open(path, "rb") as f:
                    self.groups = json.loads(f.read(_MAX_BYTES))
                path.unlink()
            return self.groups.get(nodeid) or nodeid.split("::", 1)[0]

    return ByFileAndGroup(config, log)
