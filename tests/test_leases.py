"""One runner per job, with real processes: leases, epochs and the compare-and-swap
commit (serializers/_sql/_leases.py and _snapshots.py, runtime/_lease.py) seen
through `snaprun` and Job.

The agent tests/agents/lease_gate.py takes snapshot 1, then waits at a gate (a file the
test creates) before snapshot 2, so a runner holds its lease for as long as a test
needs; it announces that it reached the gate with a file naming its pid.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import AGENTS, SNAPRUN, snaprun
from stored import stored_state

from snapstate._errors import StaleWriter
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.runtime._lease import DEFAULT_TTL
from snapstate.serializers import _fs, _manifest
from snapstate.serializers._fs import pid_alive
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._store import Owner, SnapshotBody

HOST = socket.gethostname()
AGENT = AGENTS / "lease_gate.py"
ROUNDS = 8  # rounds of the resumers' race in the default run; 50 with --run-slow
SLOW_ROUNDS = 50


def wait_for(
    path: Path,
    timeout: float = 60,
    proc: subprocess.Popen | None = None,
    thread: threading.Thread | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{proc.args} exited {proc.returncode} before {path} appeared:"
                f" {proc.stderr.read() if proc.stderr else ''}"
            )
        assert thread is None or thread.is_alive(), f"the runner ended before {path} appeared"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.002)


def gate_env(gate: Path) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", LEASE_GATE=str(gate))
    env.pop("SNAPSTATE_FAULT", None)
    return env


def start(*args, cwd: Path, gate: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [SNAPRUN, *map(str, args)],
        cwd=cwd,
        env=gate_env(gate),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def catalog(store: Path):
    """A read of the catalog: (job, snapshots, events, lease) of every job, by id."""
    home = Home(str(store))
    try:
        c = home.catalog
        return {
            j.job_id: (j, c.snapshots(j.job_id), c.events(j.job_id), c.get_lease(j.job_id))
            for j in c.list_jobs()
        }
    finally:
        home.close()


def take_over(store: Path, job: str) -> int:
    """Take the job's lease the way a runner elsewhere does once the holder's heartbeat
    has stopped for longer than the ttl: through a store whose clock is DEFAULT_TTL + 1
    seconds ahead, without force. Returns the new epoch."""
    late = time.time() + DEFAULT_TTL + 1
    other = SqliteCatalog(str(store), clock=lambda: late)
    try:
        return other.acquire_lease(job, Owner("other-host", 4242), DEFAULT_TTL, resuming=True)
    finally:
        other.close()


def temp_files(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp")]


# ------------------------------------------------------------------ the race
def _fork_killed(home: Home, base: str, job: str, dead: Owner) -> None:
    """A copy of the killed job `base` (as `snaprun fork` makes one), left as a SIGKILLed
    runner leaves a job: running, with an unexpired lease held by a dead pid."""
    source = home.catalog.get_job(base)
    home.catalog.create_job(job, source.entry, source.argv, parent=base, fork_seq=1)
    r = home.catalog.snapshot(base, 1)
    copy = home.copy_row(r, job)  # verified; the same manifest over the same chunks
    data = home.catalog.manifest(base, 1)
    assert data is not None
    home.catalog.add_snapshot_unfenced(
        copy, SnapshotBody(data, frozenset(_manifest.chunk_ids(data)))
    )
    home.catalog.acquire_lease(job, dead, DEFAULT_TTL)


@pytest.mark.parametrize("rounds", [ROUNDS, pytest.param(SLOW_ROUNDS, marks=pytest.mark.slow)])
def test_two_resumers_race_exactly_one_wins(tmp_path, rounds):
    """Crash window: SIGKILL right after snapshot 1 (the job is running, its lease held
    by a dead pid). Two `snaprun resume` processes start at once, `rounds` rounds (round 0
    on the killed job itself, then on copies left in the same state): each round
    exactly one wins and runs the job to the end (exit 0, [1, 2, True]); the other
    exits 5 with one `snaprun: error:` line naming the winner's pid and epoch, prints
    nothing on stdout and leaves no trace (one resume counted, one lease taken, one
    `resumed` event, snapshot 2 written under the winner's epoch)."""
    store = tmp_path / "store"
    (tmp_path / "gate").mkdir()
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "r0",
        AGENT,
        cwd=tmp_path,
        fault="after-snapshot:1",
        env={"LEASE_GATE": str(tmp_path / "gate")},
    )
    assert killed.returncode == -9, killed.stderr
    home = Home(str(store))
    dead = home.catalog.get_lease("r0")
    assert dead.owner.host == HOST and not pid_alive(dead.owner.pid)
    assert dead.expires > time.time()  # stale only because the pid is gone
    firsts = []
    try:
        for r in range(rounds):
            job = f"r{r}"
            if r:
                _fork_killed(home, "r0", job, dead.owner)
            gate = tmp_path / f"gate-{r}"
            gate.mkdir()
            procs = [
                start("resume", "--store", store, job, cwd=tmp_path, gate=gate) for _ in range(2)
            ]
            try:
                deadline = time.monotonic() + 60
                while all(p.poll() is None for p in procs):
                    assert time.monotonic() < deadline, "neither resumer finished"
                    time.sleep(0.002)
                loser = next(p for p in procs if p.returncode is not None)
                winner = procs[1 - procs.index(loser)]
                firsts.append(procs.index(winner))
                out, err = loser.communicate()
                assert loser.returncode == 5, (r, err)
                assert out == "" and "Traceback" not in err
                assert err.startswith(
                    f"snaprun: error: job {job} is held by a live runner (pid "
                    f"{winner.pid} on {HOST}, lease epoch 2,"
                ), err
                assert winner.poll() is None
                wait_for(gate / f"waiting-{winner.pid}", proc=winner)
                (gate / "go").touch()
                out, err = winner.communicate(timeout=60)
                assert winner.returncode == 0, (r, err)
                assert "main() returned [1, 2, True]" in err
                assert sorted(os.listdir(gate)) == ["go", f"waiting-{winner.pid}"]
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                    p.communicate()
            row = home.catalog.get_job(job)
            assert (row.status, row.resume_count) == ("done", 1)
            assert [(s.seq, s.epoch) for s in home.catalog.snapshots(job)] == [
                (1, 0 if r else 1),
                (2, 2),
            ]
            events = home.catalog.events(job)
            assert [e.detail for e in events if e.kind == "lease"][
                -1
            ] == f"epoch 2 taken by pid {winner.pid} on {HOST}"
            assert len([e for e in events if e.kind == "lease"]) == 2
            assert [e.detail for e in events if e.kind == "resumed"] == ["from snapshot 1"]
            assert home.catalog.get_lease(job) is None
    finally:
        home.close()
    print("winner was the first started process in", firsts.count(0), "of", rounds, "rounds")


# ------------------------------------------------------------------ stale writers
def test_stale_worker_snapshot_is_rejected_in_process(tmp_path, monkeypatch):
    """Crash window: none; runner A (epoch 1) is paused at the gate, about to take
    snapshot 2, when its lease is taken over as epoch 2 (its heartbeat looked stale to
    another runner). A's snapshot 2 is rejected with StaleWriter: nothing of it is
    stored (a small snapshot writes no file: its manifest and chunks were in the
    refused transaction), and the catalog's snapshots, manifests, chunks, events, job
    row and lease are exactly as the takeover left them. A records no outcome: the job
    is epoch 2's."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("LEASE_GATE", str(gate))
    store = tmp_path / "store"

    class Renames(_fs.FileSystem):
        def __init__(self):
            self.done: list[str] = []

        def rename(self, src, dst):
            super().rename(src, dst)
            self.done.append(os.path.basename(dst))

    renames = Renames()
    home = Home(str(store), fs=renames)
    job = Job.create(home, EntryPoint("lease_gate", "main", str(AGENT)), [], "job")
    outcome: dict = {}

    def runner_a():
        try:
            outcome["result"] = job.run()
        except BaseException as exc:
            outcome["error"] = exc
        finally:
            home.catalog.close()  # this thread's connection

    thread = threading.Thread(target=runner_a)
    thread.start()
    try:
        wait_for(gate / f"waiting-{os.getpid()}", thread=thread)
        assert job.epoch == 1
        assert take_over(store, "job") == 2
        before = catalog(store)
        stored = stored_state(store, "job")
    finally:
        (gate / "go").touch()
        thread.join(60)
    try:
        error = outcome.get("error")
        assert isinstance(error, StaleWriter), outcome
        assert "epoch 1 is no longer current (current: 2)" in str(error)
        assert catalog(store) == before
        assert stored_state(store, "job") == stored
        assert [r[0] for r in stored[0]] == [1] and len(stored[1]) == 1
        assert renames.done == []  # no pack file: both snapshots were small
        job_row, rows, _, lease = before["job"]
        assert [r.seq for r in rows] == [1] and job_row.status == "running"
        assert (lease.owner, lease.epoch) == (Owner("other-host", 4242), 2)
    finally:
        home.close()


def test_cli_runner_whose_lease_was_taken_over_exits_5(tmp_path):
    """Crash window: none; a live `snaprun run` waits at the gate after snapshot 1 while
    its lease is taken over (epoch 2). Its snapshot 2 is refused: it exits 5 with one
    error naming both epochs, prints nothing on stdout, and the catalog is exactly as
    the takeover left it (no snapshot 2, no status written, no manifest or chunk of
    epoch 1 beyond snapshot 1's)."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    runner = start("run", "--store", store, "--job", "job", AGENT, cwd=tmp_path, gate=gate)
    try:
        wait_for(gate / f"waiting-{runner.pid}", proc=runner)
        assert take_over(store, "job") == 2
        before = catalog(store)
        stored = stored_state(store, "job")
    finally:
        (gate / "go").touch()
        out, err = runner.communicate(timeout=60)
    assert runner.returncode == 5, err
    assert out == "" and "Traceback" not in err
    assert (
        "snaprun: error: job job: this runner's lease epoch 1 is no longer current "
        "(current: 2)" in err
    )
    assert catalog(store) == before
    assert stored_state(store, "job") == stored
    assert [r[0] for r in stored[0]] == [1] and len(stored[1]) == 1
    assert [r.seq for r in before["job"][1]] == [1]


# ------------------------------------------------------------------ resume and --force
@pytest.mark.smoke
def test_resume_of_a_sigkilled_job_needs_no_force(tmp_path):
    """Crash window: SIGKILL right after snapshot 1. The job shows as interrupted
    although its lease has not expired (its pid is gone), and `snaprun resume JOB`
    without --force takes it over and finishes it: exit 0, [1, 2, True], one resume,
    snapshot 2 under epoch 2."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    (gate / "go").touch()
    env = {"LEASE_GATE": str(gate)}
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENT,
        cwd=tmp_path,
        fault="after-snapshot:1",
        env=env,
    )
    assert killed.returncode == -9
    _, rows, _, lease = catalog(store)["job"]
    assert [r.seq for r in rows] == [1]
    assert lease.owner.pid != os.getpid() and not pid_alive(lease.owner.pid)
    assert lease.expires > time.time()
    listed = snaprun("ls", "--store", store, "--json", cwd=tmp_path)
    assert [(j["job"], j["status"]) for j in json.loads(listed.stdout)] == [("job", "interrupted")]
    resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.result == "[1, 2, True]"
    job, rows, _, lease = catalog(store)["job"]
    assert (job.status, job.resume_count, lease) == ("done", 1, None)
    assert [(r.seq, r.epoch) for r in rows] == [(1, 1), (2, 2)]


def test_resume_of_a_live_runner_is_refused_even_with_force(tmp_path):
    """Crash window: none; a live, heartbeating `snaprun run` holds the job at the gate.
    `snaprun resume JOB` exits 5 naming it, and so does `snaprun resume --force JOB`, at
    once (force never takes over a heartbeating runner; it only waits out the lease of
    a silent one: tests/test_fencing.py); neither changes the catalog. The runner
    then finishes undisturbed: exit 0, [1, 2, False], both snapshots under epoch 1."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    runner = start("run", "--store", store, "--job", "job", AGENT, cwd=tmp_path, gate=gate)
    try:
        wait_for(gate / f"waiting-{runner.pid}", proc=runner)
        before = catalog(store)
        plain = snaprun(
            "resume", "--store", store, "job", cwd=tmp_path, env={"LEASE_GATE": str(gate)}
        )
        forced = snaprun(
            "resume",
            "--force",
            "--store",
            store,
            "job",
            cwd=tmp_path,
            env={"LEASE_GATE": str(gate)},
        )
        after = catalog(store)
    finally:
        (gate / "go").touch()
        out, err = runner.communicate(timeout=60)
    holder = f"held by a live runner (pid {runner.pid} on {HOST}, lease epoch 1,"
    for refused in (plain, forced):
        assert refused.returncode == 5, refused.stderr
        assert refused.stdout == "" and holder in refused.stderr
        assert refused.stderr.count("snaprun: error:") == 1
    assert "--force never takes over a runner that is heartbeating" in forced.stderr
    assert "waits until" not in forced.stderr
    assert after == before
    assert runner.returncode == 0, err
    assert "main() returned [1, 2, False]" in err
    job, rows, _, lease = catalog(store)["job"]
    assert (job.status, job.resume_count, lease) == ("done", 0, None)
    assert [(r.seq, r.epoch) for r in rows] == [(1, 1), (2, 1)]


@pytest.mark.slow
def test_force_is_refused_after_real_heartbeats(tmp_path):
    """Crash window: none; like test_resume_of_a_live_runner_is_refused_even_with_force,
    but only after the runner's heartbeat thread has really renewed its lease (one
    heartbeat every DEFAULT_TTL / 3 s): `snaprun resume --force` still exits 5."""
    store, gate = tmp_path / "store", tmp_path / "gate"
    gate.mkdir()
    runner = start("run", "--store", store, "--job", "job", AGENT, cwd=tmp_path, gate=gate)
    try:
        wait_for(gate / f"waiting-{runner.pid}", proc=runner)
        first = catalog(store)["job"][3]
        deadline = time.monotonic() + DEFAULT_TTL
        while catalog(store)["job"][3].heartbeat == first.heartbeat:
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.2)
        forced = snaprun(
            "resume",
            "--force",
            "--store",
            store,
            "job",
            cwd=tmp_path,
            env={"LEASE_GATE": str(gate)},
        )
    finally:
        (gate / "go").touch()
        out, err = runner.communicate(timeout=60)
    assert forced.returncode == 5, forced.stderr
    assert f"pid {runner.pid} on {HOST}" in forced.stderr
    assert runner.returncode == 0, err
