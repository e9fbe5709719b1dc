"""Fidelity: every agent program, killed with SIGKILL right after each of its
snapshots and resumed in a fresh process, prints exactly what an uninterrupted run
prints and returns the same result; so does a chain killed at every point in turn."""

from __future__ import annotations

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

PROGRAMS = [
    "nested",
    "loops",
    "contexts",
    "closures",
    "comprehensions",
    "generators",
    "exceptions",
    "recursion",
    "passthrough",
    "globals_state",
    "fallback",
    "fn_defaults",
    "fn_classes",
    "instance_call",
    "deep_graphs",
]


def _baseline(program, tmp_path):
    store = tmp_path / "baseline"
    run = snaprun("run", "--store", store, "--job", "job", AGENTS / f"{program}.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "SnapshotError" not in run.stdout + run.stderr
    count = len(snapshot_seqs(store, "job"))
    assert count >= 2, f"{program} must take several snapshots"
    return run, count


@pytest.mark.parametrize("program", PROGRAMS)
def test_kill_after_each_snapshot_then_resume(program, tmp_path):
    """Crash window: SIGKILL right after snapshot k is durably written, for every k."""
    base, count = _baseline(program, tmp_path)
    for k in range(1, count + 1):
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
        assert resumed.result == base.result


@pytest.mark.parametrize("program", PROGRAMS)
def test_chain_killed_at_every_point(program, tmp_path):
    """Crash window: a job killed after snapshot 1, resumed and killed after 2, ...
    each restore continuing from the previous restore's snapshot."""
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
    assert output == base.stdout
    assert run.result == base.result


def _agent_stderr(run) -> str:
    return "".join(
        line + "\n" for line in run.stderr.splitlines() if not line.startswith("snaprun:")
    )


@pytest.mark.smoke
def test_tracebacks_survive_a_restore(tmp_path):
    """Crash window: SIGKILL after each snapshot of an agent holding an exception and
    re-raising one from an except body; printed and uncaught tracebacks are identical."""
    store = tmp_path / "base"
    base = snaprun("run", "--store", store, "--job", "job", AGENTS / "uncaught.py", cwd=tmp_path)
    assert base.returncode == 1
    assert "KeyError: 'missing'" in base.stderr and "KeyError: 'other'" in base.stdout
    for k in (1, 2):
        store = tmp_path / f"kill{k}"
        killed = snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            AGENTS / "uncaught.py",
            cwd=tmp_path,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9
        assert snapshot_seqs(store, "job") == list(range(1, k + 1))
        resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path)
        assert resumed.returncode == 1
        assert killed.stdout + resumed.stdout == base.stdout
        assert _agent_stderr(resumed) == _agent_stderr(base)


def test_module_function_entry_point(tmp_path):
    """Crash window: SIGKILL after snapshot 2 of a `module:function` job started from
    the module's directory; resumed from another directory, it finishes identically."""
    base = snaprun("run", "--store", tmp_path / "base", "--job", "job", "loops:main", cwd=AGENTS)
    assert base.returncode == 0, base.stderr
    killed = snaprun(
        "run",
        "--store",
        tmp_path / "kill",
        "--job",
        "job",
        "loops:main",
        cwd=AGENTS,
        fault="after-snapshot:2",
    )
    assert killed.returncode == -9
    resumed = snaprun(
        "resume",
        "--store",
        tmp_path / "kill",
        "job",
        cwd=tmp_path,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert killed.stdout + resumed.stdout == base.stdout
    assert resumed.result == base.result == "13"
