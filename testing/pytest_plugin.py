"""The pytest plugin of snapstate's crash test: a `crashtest` fixture that runs
`snaprun crashtest` over a user's own agent (docs/crashtest.md) and returns its report.

Enable it in a conftest.py with `pytest_plugins = ["snapstate.testing.pytest_plugin"]`,
or for one run with `pytest -p snapstate.testing.pytest_plugin`; it is never loaded into
other pytest runs (no entry point).

    def test_agent_survives_kills(crashtest):
        report = crashtest("agents/orders.py", setup="python agents/stubs.py")
        report.assert_ok()

The fixture's function takes crashtest()'s arguments (snapstate.testing.crashtest): the
agent file, its arguments, then setup=, max_kills=, budget=, timeout=, jobs=,
approvals=, allow_parks=, record_http=, http_reads=, python=, keep=, workdir=. Its
scratch folders go under the test's temporary folder; progress goes to stderr (shown
with `pytest -s`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

from snapstate.runtime._crashtest import crashtest as _crashtest
from snapstate.runtime._crashtest_report import CrashReport, printable

__all__ = ["crashtest"]


def _progress(text: str) -> None:
    print(f"crashtest: {printable(text)}", file=sys.stderr)


@pytest.fixture
def crashtest(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., CrashReport]:
    """Crash-test an agent file: `crashtest("agent.py", *args, **options)` -> CrashReport
    (`.ok`, `.problems`, `.lines()`, `.assert_ok()`, `.to_json()`)."""
    scratch = tmp_path_factory.mktemp("crashtest")

    def run(agent: str | os.PathLike[str], *args: str, **options: Any) -> CrashReport:
        options.setdefault("scratch", scratch)
        options.setdefault("progress", _progress)
        return _crashtest(agent, args, **options)

    return run
