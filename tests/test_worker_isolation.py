"""A worker's children cannot be hijacked from the directory the worker was started in
(issue 21): `python -m` and the fork server's `python -c` put that directory first on
sys.path, so a `zstandard.py` there ran in every child and a stray `snapstate/` folder
made every resume fail until the job was marked failed, blaming the agent. Now the fork
server and each child (forked or exec'd) start with an isolated sys.path: jobs run
normally and neither stray module is ever imported (each leaves a marker file when it
is, and raises). Real worker processes, a real provider on 127.0.0.1."""

from __future__ import annotations

import textwrap

import pytest
from test_worker import (
    assert_finished_once,
    create_job,
    provider,
    run_job,
    worker_env,
    worker_once,
)

__all__ = ["provider"]  # the fixture, shared with test_worker.py

STRAY = textwrap.dedent(
    """
    import os
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{marker}"), "a") as f:
        f.write(str(os.getpid()) + "\\n")
    raise RuntimeError("a stray module was imported: {marker}")
    """
)


def _plant(directory):
    (directory / "zstandard.py").write_text(STRAY.format(marker="zstandard.imported"))
    (directory / "snapstate").mkdir()
    (directory / "snapstate" / "__init__.py").write_text(STRAY.format(marker="snapstate.imported"))
    return [directory / "zstandard.imported", directory / "snapstate" / "snapstate.imported"]


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_stray_modules_in_the_workers_directory_are_never_imported(tmp_path, provider, start):
    """The worker runs in a directory holding `zstandard.py` and `snapstate/` (both
    write a marker and raise when imported); with each start mode its children resume
    every job to done, each effect delivered once, and no marker exists."""
    first = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert first.returncode == 3, first.stderr
    jobs = ["i1", "i2"]
    for job in jobs:
        create_job(tmp_path, "plain", job)
    markers = _plant(tmp_path)  # after the setup: only the worker's processes may see them
    env = worker_env(tmp_path, provider, SNAPSTATE_WORKER_START=start)
    env.pop("PYTHONSAFEPATH", None)
    env.pop("PYTHONPATH", None)
    done = worker_once(tmp_path, env, "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    for job in jobs:
        assert f"job {job}: done" in done.stderr, done.stderr
        assert_finished_once(tmp_path, provider, job)
    assert "a stray module" not in done.stderr, done.stderr
    assert [m for m in markers if m.exists()] == []
