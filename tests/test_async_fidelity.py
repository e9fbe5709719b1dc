"""Fidelity of async agents (issue 12): every async program, killed with SIGKILL right
after each of its snapshots and resumed in a fresh process, prints exactly what an
uninterrupted run prints, writes nothing else to stderr and returns the same result;
so does a chain killed at every point in turn. The sequential programs also print
under plain asyncio (asyncio.run, no snaprun, snapshot() a no-op) exactly what they
print under snaprun.

The programs are tests/agents/async_*.py; each one's docstring says what it covers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

PROGRAMS = [
    "async_nested",
    "async_gather",
    "async_contexts",
    "async_timeouts",
    "async_taskgroup",
    "async_tasks_misc",
    "async_exceptions",
    # Each of these showed an engine bug when it was written (fixed on main since).
    "async_task_names",
    "async_failed_tasks",
    "async_agen_body",
    "async_taskgroup_errors",
    "async_gather_errors",
    "async_cancel_restored",
    "async_wake_order",
    "async_loop_settings",
    "async_aexit_traceback",
    "async_task_reprs",
    "async_sleepers",
    "async_cancel_message",
]

# One task at a time (no two tasks reach a snapshot point together): under plain
# asyncio, where `await snapshot()` returns without suspending, they print the same.
SEQUENTIAL = [
    "async_nested",
    "async_exceptions",
    "async_contexts",
    "async_timeouts",
]


def _agent_stderr(run) -> str:
    """What the agent (and asyncio: "Task was destroyed", "never awaited"...) wrote to
    stderr, without snaprun's own lines."""
    return "".join(
        line + "\n" for line in run.stderr.splitlines() if not line.startswith("snaprun:")
    )


def _baseline(program, tmp_path):
    store = tmp_path / "baseline"
    run = snaprun("run", "--store", store, "--job", "job", AGENTS / f"{program}.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "SnapshotError" not in run.stdout + run.stderr
    assert _agent_stderr(run) == "", run.stderr
    assert run.result is not None
    count = len(snapshot_seqs(store, "job"))
    assert count >= 2, f"{program} must take several snapshots"
    return run, count


def _kill_points(count: int) -> tuple[list[int], list[int]]:
    """The snapshots k to kill after, as (default run, --run-slow): every one of a
    program with at most 6; of a longer one, the first three and the last three by
    default (a fresh loop's first freezes, and the ends of its loops and task groups)
    and those between with --run-slow."""
    every = list(range(1, count + 1))
    if count <= 6:
        return every, []
    chosen = every[:3] + every[-3:]
    return chosen, [k for k in every if k not in chosen]


def _kill_after(program: str, k: int, base, count: int, tmp_path) -> None:
    store = tmp_path / f"kill{k}"
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENTS / f"{program}.py",
        cwd=tmp_path,
        fault=f"after-snapshot:{k}",
    )
    assert killed.returncode == -9, killed.stderr
    assert snapshot_seqs(store, "job") == list(range(1, k + 1))
    resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from snapshot {k}" in resumed.stderr
    assert killed.stdout + resumed.stdout == base.stdout, f"diverged after snapshot {k}"
    assert _agent_stderr(killed) + _agent_stderr(resumed) == "", resumed.stderr
    assert resumed.result == base.result
    assert len(snapshot_seqs(store, "job")) == count, "the resumed run took the rest"


@pytest.mark.parametrize("program", PROGRAMS)
def test_kill_after_each_snapshot_then_resume(program, tmp_path):
    """Crash window: SIGKILL right after snapshot k of an async job is durably written
    (every task frozen at its await), for every k (of a program with more than 6
    snapshots: the first three and the last three; the others with --run-slow)."""
    base, count = _baseline(program, tmp_path)
    for k in _kill_points(count)[0]:
        _kill_after(program, k, base, count, tmp_path)


# The chain of a program with more than 6 snapshots is a long sweep, and so are its
# kills after the snapshots between its first three and last three (the default suite
# keeps those six kills, whose resumed runs freeze a restored loop again, and the chains
# of the shorter programs). Snapshots per program:
# nested 11, gather 13, contexts 14, tasks_misc 11, agen_body 11, taskgroup 8; the
# others 6 or fewer.
_LONG = {
    "async_nested",
    "async_gather",
    "async_contexts",
    "async_tasks_misc",
    "async_agen_body",
    "async_taskgroup",
}


def _chain_param(program):
    if not isinstance(program, str):  # an xfail param
        return program
    return pytest.param(program, marks=pytest.mark.slow) if program in _LONG else program


CHAINS = [_chain_param(p) for p in PROGRAMS]


@pytest.mark.slow
@pytest.mark.parametrize("program", sorted(_LONG))
def test_kill_after_each_middle_snapshot_then_resume(program, tmp_path):
    """Crash window: as test_kill_after_each_snapshot_then_resume, after each snapshot
    of a long program that the default run leaves out."""
    base, count = _baseline(program, tmp_path)
    rest = _kill_points(count)[1]
    assert rest, f"{program} takes {count} snapshots: no longer a long program"
    for k in rest:
        _kill_after(program, k, base, count, tmp_path)


@pytest.mark.parametrize("program", CHAINS)
def test_chain_killed_at_every_point(program, tmp_path):
    """Crash window: an async job killed after snapshot 1, resumed and killed after 2,
    ... each restore continuing from the previous restore's snapshot (a restored
    event loop, its tasks and their chains frozen again)."""
    base, count = _baseline(program, tmp_path)
    store = tmp_path / "chain"
    run = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENTS / f"{program}.py",
        cwd=tmp_path,
        fault="after-snapshot:1",
    )
    assert run.returncode == -9
    output = run.stdout
    for k in range(1, count + 1):
        assert snapshot_seqs(store, "job")[-1] == k
        run = snaprun(
            "resume", "--store", store, "job", cwd=tmp_path, fault=f"after-snapshot:{k + 1}"
        )
        assert f"resumed from snapshot {k}" in run.stderr, run.stderr
        output += run.stdout
        expected = -9 if k < count else 0
        assert run.returncode == expected, run.stderr
        assert _agent_stderr(run) == "", run.stderr
    assert output == base.stdout
    assert run.result == base.result


@pytest.mark.parametrize("program", SEQUENTIAL)
def test_same_output_as_plain_asyncio(program, tmp_path):
    """The uninterrupted snaprun run itself behaves as asyncio does: the program run by
    asyncio.run() in plain Python (snapshot() does nothing there) prints the same and
    returns the same value."""
    base, _ = _baseline(program, tmp_path)
    body, result, stderr = _plain_asyncio(program, tmp_path)
    assert stderr == ""
    assert body == base.stdout
    assert result == base.result


def _plain_asyncio(program, cwd):
    """The program run by asyncio.run() in plain Python: (stdout before the result,
    the result's repr, stderr)."""
    script = (
        "import asyncio, runpy, sys\n"
        "ns = runpy.run_path(sys.argv[1])\n"
        "print('RESULT', repr(asyncio.run(ns['main']())))\n"
    )
    plain = subprocess.run(
        [sys.executable, "-c", script, str(AGENTS / f"{program}.py")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, plain.stderr
    body, _, result = plain.stdout.rpartition("RESULT ")
    return body, result.strip(), plain.stderr


def test_unretrieved_task_errors_are_logged_as_by_asyncio(tmp_path):
    """A snapshot changes nothing the running agent can observe: a failed task whose
    exception nobody retrieves is logged by asyncio as under plain asyncio.run()."""
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "job",
        AGENTS / "async_unretrieved.py",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    body, result, stderr = _plain_asyncio("async_unretrieved", tmp_path)
    assert "Task exception was never retrieved" in stderr
    assert run.stdout == body and run.result == result
    assert "Task exception was never retrieved" in run.stderr
    assert "KeyError: 'dropped lost'" in run.stderr


def _uncaught_runs(tmp_path):
    """The async_uncaught agent uninterrupted, and killed after each snapshot then
    resumed: [(base, killed, resumed), ...]."""
    agent = AGENTS / "async_uncaught.py"
    base = snaprun("run", "--store", tmp_path / "base", "--job", "job", agent, cwd=tmp_path)
    assert base.returncode == 1, base.stderr
    assert "KeyError: 'missing'" in base.stderr and "ValueError: wrapped" in base.stderr
    assert "direct cause" in base.stderr
    count = len(snapshot_seqs(tmp_path / "base", "job"))
    assert count == 2
    runs = []
    for k in range(1, count + 1):
        store = tmp_path / f"kill{k}"
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            agent,
            cwd=tmp_path,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9
        assert snapshot_seqs(store, "job") == list(range(1, k + 1))
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path)
        runs.append((base, killed, resumed))
    return runs


def test_an_uncaught_error_after_a_restore(tmp_path):
    """Crash window: SIGKILL after each snapshot of an async agent whose restored
    coroutine raises (in a gather), caught and re-raised `from` it: the resumed run
    fails with exit 1 after printing what the uninterrupted run printed, naming the
    same error."""
    for base, killed, resumed in _uncaught_runs(tmp_path):
        assert resumed.returncode == 1, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout
        assert "snaprun: job job failed: ValueError: wrapped" in resumed.stderr
        assert "direct cause" in resumed.stderr


@pytest.mark.smoke
def test_tracebacks_survive_a_restore(tmp_path):
    """Crash window: as test_an_uncaught_error_after_a_restore; the uncaught traceback
    (cause chain included) is the uninterrupted run's, frame for frame."""
    for base, _killed, resumed in _uncaught_runs(tmp_path):
        assert _agent_stderr(resumed) == _agent_stderr(base)
