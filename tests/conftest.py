"""Shared fixtures: the book built once per test session."""

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


def pytest_xdist_make_scheduler(config, log):
    """With pytest-xdist (`make test PYTEST_WORKERS="-n 2"`): send each file's tests to one worker, in
    order, so module-scoped fixtures (a training run, a benchmark sweep) run once and a notebook's
    cells share one kernel; and send every SLURM test to the same worker, which starts the one
    localhost cluster they share (tests/orchestration/conftest.py)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/orchestration" if path.startswith("tests/orchestration/") else path

    return ByFile(config, log)
