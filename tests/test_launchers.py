"""The guard that keeps multi-rank tests on one pytest-xdist worker (tests/launchers.py)."""

import pytest

from tests.launchers import ONE_PROCESS, RANKS, free_port, require_ranks
from tests.worker_groups import group_of


def test_a_test_without_the_mark_may_not_start_ranks():
    with pytest.raises(pytest.fail.Exception, match="mark it .* with tests.launchers.RANKS"):
        require_ranks("2 ranks of demo.py")


@RANKS
def test_a_marked_test_may_start_ranks():
    require_ranks("2 ranks of demo.py")  # does not fail


@RANKS  # as a module's ``pytestmark`` would
@ONE_PROCESS
def test_a_one_process_test_in_a_ranks_file_leaves_the_queue_and_may_not_start_ranks(request):
    assert group_of(request.node) == "tests/test_launchers.py"
    assert request.node.get_closest_marker("slow"), "make check would run it"
    with pytest.raises(pytest.fail.Exception, match="mark it .* with tests.launchers.RANKS"):
        require_ranks("2 ranks of demo.py")


def test_free_port_is_below_the_ephemeral_range():
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert all(10000 <= free_port() < low for _ in range(20))
