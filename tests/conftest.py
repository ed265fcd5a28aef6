"""Shared fixtures: the book built once per test session."""

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def require_tool(name: str) -> str:
    """Path of a command-line tool; in CI (which installs it) its absence fails, elsewhere it skips."""
    path = shutil.which(name)
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail(f"{name} is not installed, but .ci/run installs it")
    pytest.skip(f"{name} is not installed")


def require_module(name: str):
    """Import an optional test dependency; in CI (which installs it from the locks) its absence
    fails, elsewhere it skips."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed, but requirements/tests.in pins it")
        pytest.skip(f"{name} is not installed")


def _build(*args: str) -> Path:
    existing = os.environ.get("BOOK_TEST_SITE")
    if existing:
        return Path(existing).resolve()
    site = ROOT / "site"
    # Its own limit (pytest.ini sets timeout_func_only): a cold build takes minutes.
    result = subprocess.run([sys.executable, "build/build_book.py", "--site-dir", str(site), *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, f"book build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return site


@pytest.fixture(scope="session")
def built_site() -> Path:
    """The website in ``site/`` (no PDFs needed), as `make site` builds it: build/build_book.py
    rebuilds only when an input changed, so after `make book` this takes well under a second.

    Set BOOK_TEST_SITE=path/to/site to test another build instead.
    """
    return _build("--no-pdf")


@pytest.fixture(scope="session")
def built_book(built_site) -> Path:
    """The site and both PDFs in ``site/``, as `make book` builds them (the PDF stage alone when
    the site is already up to date). Only tests/build/ uses it."""
    return _build()


def pytest_configure(config):
    from tests import worker_groups
    worker_groups.name_the_run(config)


def pytest_collection_modifyitems(config, items):
    """The files of multi-rank and SLURM tests (tests.launchers.RANKS) are the slow ones: `make
    check`, which deselects ``slow``, leaves them out. A test there marked
    ``tests.launchers.ONE_PROCESS`` gets a group of its own file's name (the nearest mark wins), so
    it runs beside the other files' tests. Notebooks run in kernels forked from a preloaded server
    (tests/notebook_kernel.py) unless BOOK_TEST_FRESH_PROCESS is set."""
    from tests import notebook_kernel, preloaded, worker_groups

    if any(type(item).__name__ == "IPyNbCell" for item in items) and not preloaded.fresh_processes_only():
        notebook_kernel.use_preloaded_kernels(config)
    for item in items:
        if any((m.args[:1] or (m.kwargs.get("name"),))[0] == "ranks" for m in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("one_process"):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]), append=False)
    worker_groups.publish(config, items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item):
    """Let tests/launchers.py know which test (and its fixtures) starts a job."""
    from tests import launchers
    launchers.current_test = item
    try:
        return (yield)
    finally:
        launchers.current_test = None


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` still works
def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (`make test` runs ``-n 2``): send each file's tests to one worker, in
    order, so module-scoped fixtures (a training run, a benchmark sweep) run once and a notebook's
    cells share one kernel; and send every test marked ``tests.launchers.RANKS`` (two or more ranks,
    or a SLURM job) to one worker, so those jobs run one after another and the SLURM tests share
    one localhost cluster (tests/orchestration/conftest.py). See tests/worker_groups.py."""
    from tests import worker_groups
    return worker_groups.scheduler(config, log)
