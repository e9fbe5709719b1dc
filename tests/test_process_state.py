"""Process state the job owns survives a restore: the global `random` state, numpy's
legacy global RandomState, the environment variables the agent set or removed, the
working directory, and numpy views sharing memory with their base (one agent program,
tests/agents/proc_state.py, covers them all; it prints them after every snapshot)."""

from __future__ import annotations

import os
import shutil

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, clean_refusal, snaprun

from snapstate.serializers._home import Home

PROGRAM = AGENTS / "proc_state.py"
ENV = {"PROC_REMOVE": "gone", "PROC_OUTER": "outer"}


def _run(store, cwd, fault=None, env=ENV):
    return snaprun("run", "--store", store, "--job", "job", PROGRAM, cwd=cwd, fault=fault, env=env)


def _resume(store, cwd, fault=None, env=ENV):
    return snaprun("resume", "--store", store, "job", cwd=cwd, fault=fault, env=env)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """An uninterrupted run: its stdout, result and snapshot count."""
    top = tmp_path_factory.mktemp("proc-base")
    run = _run(top / "store", top)
    assert run.returncode == 0, run.stderr
    count = len(snapshot_seqs(top / "store", "job"))
    assert count == 4
    # the program really exercises what is compared
    assert "1 cwd proc_work\n" in run.stdout and "2 env two None outer late\n" in run.stdout
    assert "3 numpy [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 11.0]" in run.stdout
    return run, count


def test_kill_after_each_snapshot_then_resume(baseline, tmp_path):
    """Crash window: SIGKILL right after snapshot k, for every k, resumed from the
    directory the job started in: the same random numbers (random and numpy), the same
    environment changes, the same working directory, and the view still writes into
    its base (np.shares_memory) as in the uninterrupted run."""
    base, count = baseline
    for k in range(1, count + 1):
        store = tmp_path / f"kill{k}"
        killed = _run(store, tmp_path, fault=f"after-snapshot:{k}")
        assert killed.returncode == -9, killed.stderr
        resumed = _resume(store, tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"diverged after snapshot {k}"
        assert resumed.result == base.result


def test_chain_of_restores_keeps_the_changes(baseline, tmp_path):
    """Crash window: killed after snapshot 1, resumed and killed after 2, ...: a change
    made before the first kill (PROC_SET, PROC_REMOVE removed, the cwd) is carried by
    every later snapshot, though each resuming process starts with the original
    environment and in the original directory."""
    base, count = baseline
    store = tmp_path / "chain"
    run = _run(store, tmp_path, fault="after-snapshot:1")
    assert run.returncode == -9
    output = run.stdout
    for k in range(1, count + 1):
        run = _resume(store, tmp_path, fault=f"after-snapshot:{k + 1}")
        output += run.stdout
        assert run.returncode == (-9 if k < count else 0), run.stderr
    assert output == base.stdout
    assert run.result == base.result


def test_resume_under_a_different_environment(tmp_path):
    """A resume in a process with another environment (PATH changed, PROC_OUTER changed,
    PROC_SET and PROC_REMOVE present, SNAPSTATE_PROBE set) and another directory: the
    agent's own changes win (PROC_SET is its value, PROC_REMOVE stays removed, the cwd
    is the job's), everything it did not touch is the resuming process's (PROC_OUTER,
    PATH), and snapstate's own SNAPSTATE_* variables are never saved (the agent set
    SNAPSTATE_PROBE), so a restore never changes them."""
    store = tmp_path / "store"
    env = dict(ENV, SNAPSTATE_PROBE="starter")
    killed = _run(store, tmp_path, fault="after-snapshot:3", env=env)
    assert killed.returncode == -9
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = os.pathsep.join([str(elsewhere), os.environ.get("PATH", "")])
    env = {
        "PROC_REMOVE": "back",
        "PROC_OUTER": "resumer",
        "PROC_SET": "resumer",
        "PATH": path,
        "SNAPSTATE_PROBE": "resumer",
    }
    resumed = _resume(store, elsewhere, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "2 env two None resumer late\n" in resumed.stdout
    assert "2 cwd proc_work/inner\n" in resumed.stdout
    assert "3 env two None resumer None\n" in resumed.stdout
    # snapshot 4, taken by the resuming process, holds the agent's changes only: not
    # the resumer's PATH or values, not snapstate's own variables
    assert snapshot_seqs(store, "job") == [1, 2, 3, 4]
    payload = _body(store, "job", 4)
    assert b"PROC_SET" in payload and b"PROC_REMOVE" in payload
    assert b"SNAPSTATE_PROBE" not in payload and b"resumer" not in payload
    assert str(elsewhere).encode() not in payload


def _body(store, job, seq) -> bytes:
    """The verified, decoded pickle of snapshot job@seq (plaintext store)."""
    home = Home(str(store))
    try:
        return bytes(home.read_row(home.catalog.snapshot(job, seq))[1])
    finally:
        home.close()


def test_removed_working_directory_is_refused_clearly(baseline, tmp_path):
    """A job whose working directory was removed before the resume is refused (exit 2,
    one line naming the directory, no traceback, nothing run); once the directory is
    back, the same snapshot resumes and finishes as the uninterrupted run."""
    base, _ = baseline
    store = tmp_path / "store"
    killed = _run(store, tmp_path, fault="after-snapshot:3")
    assert killed.returncode == -9
    shutil.rmtree(tmp_path / "proc_work")
    refused = _resume(store, tmp_path)
    clean_refusal(
        refused, str(tmp_path / "proc_work" / "inner"), "no longer exists", "resume the job again"
    )
    os.makedirs(tmp_path / "proc_work" / "inner")
    resumed = _resume(store, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert killed.stdout + resumed.stdout == base.stdout


def test_snapstate_random_leaves_the_global_random_sequence_alone():
    """snapstate.random() draws from its own generator: after a restore it is served
    from the ledger without drawing, so drawing from the global `random` state (which
    a snapshot saves) would make the agent's own random sequence differ from the
    uninterrupted run's. Here (plain Python) the global sequence is unaffected."""
    import random

    import snapstate

    random.seed(5)
    expected = [random.random() for _ in range(3)]
    random.seed(5)
    drawn = []
    for _ in range(3):
        snapstate.random()
        drawn.append(random.random())
    assert drawn == expected


@pytest.fixture
def sealing(tmp_path):
    """The store keys bound for sealing (as the runtime binds them at a snapshot), and
    a job-like object whose process state is tracked from here."""
    import types

    from snapstate.resources import _secrets
    from snapstate.runtime import _process
    from snapstate.serializers._keys import KeyRing

    before = _secrets._STATE["keys"]
    keys = KeyRing(str(tmp_path / "keys"))
    _secrets.bind(keys)
    job = types.SimpleNamespace()
    _process.begin(job)
    try:
        yield keys, job
    finally:
        _secrets.bind(before)


def test_unchanged_process_state_pickles_to_the_same_bytes(sealing, monkeypatch, tmp_path):
    """Two consecutive snapshots of a job that touched neither its environment, nor
    `random`, nor its working directory pickle the same process-state bytes (the sealed
    environment values are not sealed again with a fresh nonce), so a store that
    deduplicates identical byte runs keeps them once; each change makes them differ,
    and what is unpickled is the job's state at that moment."""
    import random

    from snapstate.runtime import _process
    from snapstate.serializers import _pickler

    _keys, job = sealing
    monkeypatch.setenv("PROC_DEDUP_VAR", "first value")  # a change the job made
    monkeypatch.chdir(tmp_path)

    def pickled():
        return _pickler.dumps(_process.capture(job))

    first = pickled()
    assert b"first value" not in first  # sealed, never in clear
    assert pickled() == first  # nothing changed

    random.random()
    drawn = pickled()
    assert drawn != first
    assert pickled() == drawn

    monkeypatch.setenv("PROC_DEDUP_VAR", "second value")
    changed = pickled()
    assert changed != drawn
    assert pickled() == changed

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    moved = pickled()
    assert moved != changed
    assert pickled() == moved

    # the reused bytes load as the job's state now (loading applies the job's
    # environment changes, here the values the process already has)
    loaded = _pickler.loads(pickled())
    assert loaded.env_set["PROC_DEDUP_VAR"] == "second value"
    assert loaded.random == random.getstate()
    assert loaded.cwd == str(tmp_path / "elsewhere")


def test_sealed_environment_is_sealed_again_after_a_key_rotation(sealing, monkeypatch):
    """The reused seal belongs to the key that made it: once the store's key is rotated,
    the next snapshot seals the values again (with the new key), and they still load."""
    from snapstate.runtime import _process
    from snapstate.serializers import _pickler

    keys, job = sealing
    monkeypatch.setenv("PROC_DEDUP_VAR", "kept value")
    before = _pickler.dumps(_process.capture(job))
    old = keys.current.key_id
    keys.rotate()
    assert keys.current.key_id != old
    after = _pickler.dumps(_process.capture(job))
    assert after != before
    assert keys.current.key_id.encode() in after and old.encode() not in after
    assert _pickler.dumps(_process.capture(job)) == after
    assert _pickler.loads(after).env_set["PROC_DEDUP_VAR"] == "kept value"
