"""How `snaprun worker` starts its children (runtime/_worker.py): forked from a fork
server that imported snapstate once (not the worker itself, so no state of the
worker's reaches a job), or exec'd with SNAPSTATE_WORKER_START=exec; a fork server
killed while the worker runs is replaced. Real worker processes, a real provider on
127.0.0.1, every job finished exactly once."""

from __future__ import annotations

import os
import signal

import pytest
from helpers import child_pids, cmdline_of
from test_worker import (
    assert_finished_once,
    create_job,
    job_row,
    provider,
    run_job,
    start_worker,
    wait_until,
    worker_env,
)

__all__ = ["provider"]  # the fixture, shared with test_worker.py


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _drain(tmp_path, provider, jobs, *, env_extra=None, during=None):
    run = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert run.returncode == 3, run.stderr
    for job in jobs:
        create_job(tmp_path, "plain", job)
    env = worker_env(tmp_path, provider, **(env_extra or {}))
    worker = start_worker(tmp_path, env, "--concurrency", "2", "--poll", "0.2")
    try:
        if during is not None:
            during(worker)
        wait_until(
            "every job done",
            lambda: all(job_row(tmp_path, j).status == "done" for j in jobs),
            timeout=120,
        )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    for job in jobs:
        assert_finished_once(tmp_path, provider, job)
    return (tmp_path / "worker.err").read_text()


def test_children_are_forked_from_the_fork_server_not_the_worker(tmp_path, provider):
    """Each child's parent is the fork server (a child of the worker, started once),
    never the worker itself; its pid is the one the worker logs and the lease names."""
    seen: dict[int, int] = {}

    def watch(worker):
        def forked() -> bool:
            for server in child_pids(worker.pid):
                if "forkserver" in cmdline_of(server):
                    for child in child_pids(server):
                        seen[child] = server
            return len(seen) >= 1

        wait_until("a child forked from the fork server", forked, timeout=60)

    log = _drain(tmp_path, provider, [f"f{i}" for i in range(4)], during=watch)
    logged = {
        int(line.split("resuming in pid ")[1].split()[0])
        for line in log.splitlines()
        if "resuming in pid" in line
    }
    assert seen and set(seen) <= logged
    assert len(set(seen.values())) == 1  # one fork server


def test_exec_start_still_runs_every_job(tmp_path, provider):
    """SNAPSTATE_WORKER_START=exec: each child is a fresh interpreter, a child of the
    worker itself; every job is finished once."""
    direct: set[int] = set()

    def watch(worker):
        def started() -> bool:
            direct.update(
                c
                for c in child_pids(worker.pid)
                if "snapstate.runtime._cli resume" in cmdline_of(c)
            )
            return bool(direct)

        wait_until("an exec'd child", started, timeout=60)

    _drain(
        tmp_path, provider, ["e1", "e2"], env_extra={"SNAPSTATE_WORKER_START": "exec"}, during=watch
    )
    assert direct


@pytest.mark.parametrize("victim", ["fork server"])
def test_a_killed_fork_server_is_replaced(tmp_path, provider, victim):
    """SIGKILL of the fork server while jobs run: children already forked finish on
    their own, the worker starts a new server for the next ones, every job finishes
    once."""

    def kill_server(worker):
        def server() -> int | None:
            found = [c for c in child_pids(worker.pid) if "forkserver" in cmdline_of(c)]
            return found[0] if found else None

        wait_until("the fork server", lambda: server() is not None, timeout=60)
        os.kill(server(), signal.SIGKILL)

    _drain(tmp_path, provider, [f"k{i}" for i in range(6)], during=kill_server)
