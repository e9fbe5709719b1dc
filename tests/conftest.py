"""pytest's hooks and shared fixtures; the shared helpers are in tests/helpers.py.

  --run-slow         run the long sweeps (tests marked slow); without it they are skipped
  @pytest.mark.fresh every snaprun() of the test execs a fresh interpreter instead of
                     forking from the fork server (helpers.EXEC_TESTS lists more)
  -m smoke           a representative fast test of each subsystem

The terminal summary counts the snaprun starts forked and exec'd (with -n 0).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import forkserver
import pytest
from helpers import EXEC_TESTS, set_fresh


def pytest_addoption(parser):
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="run long sweeps marked slow"
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "fresh: every snaprun() of the test execs a fresh interpreter (no fork server)"
    )


def _test_id(item) -> str:
    return f"{Path(str(item.path)).name}::{item.originalname}"


def pytest_collection_modifyitems(config, items):
    collected = {Path(str(item.path)).name for item in items}
    ids = {_test_id(item) for item in items}
    missing = [t for t in EXEC_TESTS if t.split("::")[0] in collected and t not in ids]
    if missing:
        raise pytest.UsageError(f"helpers.EXEC_TESTS names tests that do not exist: {missing}")
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
    set_fresh(item.get_closest_marker("fresh") is not None or _test_id(item) in EXEC_TESTS)


def pytest_sessionfinish(session):
    forkserver.shutdown()


def pytest_terminal_summary(terminalreporter, config):
    if config.getoption("numprocesses", None):  # pytest-xdist's workers started them
        terminalreporter.write_line("snaprun starts: counted by each worker (-n 0 shows them)")
        return
    terminalreporter.write_line(forkserver.summary())


@pytest.fixture
def short_tmp_path():
    """A temporary folder with a short path, for tests that compare renderings which cut
    long strings (pytest-xdist's worker folders make tmp_path longer)."""
    path = Path(tempfile.mkdtemp(prefix="snap-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workdir(tmp_path):
    """A working directory holding a copy-free view of the test agents."""
    return tmp_path
