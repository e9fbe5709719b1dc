"""Spec: the base capabilities under concurrency: threads and real processes racing
for one lease, for one sequence number, and to create one new catalog."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from snapstate._errors import StaleWriter
from snapstate.serializers._store import Owner

from ._support import (
    HOST,
    BackendMaker,
    Capability,
    CatalogBackend,
    Spec,
    lease,
    make_job,
    row,
)

__all__ = ["ConcurrencySpec"]

_RACE = r"""
import importlib, json, os, sys, time
from snapstate._errors import LeaseHeld, StaleWriter
from snapstate.serializers._store import Owner, SnapshotRow

factory, location, gate, mode, job = sys.argv[1:6]
module, _, name = factory.partition(":")
Factory = getattr(importlib.import_module(module), name)
if mode == "open":                      # open a fresh catalog per round, all at once
    print("ready", flush=True)
    for r, fresh in enumerate(sys.argv[6:]):
        while not os.path.exists(os.path.join(gate, f"go-{r}")):
            time.sleep(0.0002)
        try:
            Factory(fresh).close()
            print(json.dumps(["ok"]), flush=True)
        except Exception as exc:
            print(json.dumps([type(exc).__name__, str(exc)]), flush=True)
    sys.exit(0)
catalog = Factory(location)
print("ready", flush=True)
while not os.path.exists(os.path.join(gate, "go")):
    time.sleep(0.0005)
if mode == "lease":
    try:
        print(json.dumps(["won", catalog.acquire_lease(job, Owner.me(), 30)]), flush=True)
    except LeaseHeld as exc:
        print(json.dumps(["held", str(exc)]), flush=True)
    while not os.path.exists(os.path.join(gate, "done")):   # stay alive: a live holder
        time.sleep(0.0005)
else:
    epoch, count, label = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    wins = []
    for seq in range(1, count + 1):
        try:
            catalog.commit_snapshot(SnapshotRow(job, seq, label, f"snapshots/{job}/{seq}-{label}",
                                                0, time.time(), epoch))
            wins.append(seq)
        except StaleWriter:
            pass
    print(json.dumps(wins), flush=True)
catalog.close()
"""


def _racers(
    backend: CatalogBackend,
    gate: Path,
    mode: str,
    job: str,
    extra: list[list[str]],
    go: bool = True,
) -> list[subprocess.Popen[str]]:
    gate.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RACE,
                backend.factory,
                backend.location,
                str(gate),
                mode,
                job,
                *args,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for args in extra
    ]
    for p in procs:
        assert _line(p) == "ready\n"
    if go:
        (gate / "go").touch()
    return procs


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline()


def _finish(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()
        assert p.wait(timeout=60) == 0


class ConcurrencySpec(Spec):
    """The base capabilities raced by threads and processes."""

    capability = Capability.SNAPSHOTS  # and leases: both base capabilities

    def test_threads_committing_the_same_seq_exactly_one_wins(
        self, catalog_backend: CatalogBackend
    ) -> None:
        """Two threads, each with its own catalog connection, commit the same seq at the same
        moment, 30 rounds: exactly one wins each round, the other gets StaleWriter, and the
        catalog holds the winner's row."""
        catalog = catalog_backend.open()
        make_job(catalog)
        epoch = catalog.acquire_lease("job", Owner.me(), 300)
        rounds, barrier = 30, threading.Barrier(2, timeout=60)
        wins: dict[int, list[int]] = {0: [], 1: []}
        losses: dict[int, list[int]] = {0: [], 1: []}
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            mine = catalog_backend.open()
            try:
                for seq in range(1, rounds + 1):
                    barrier.wait()
                    try:
                        mine.commit_snapshot(row(seq, epoch, label=f"t{i}"))
                        wins[i].append(seq)
                    except StaleWriter:
                        losses[i].append(seq)
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)
                barrier.abort()
            finally:
                mine.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(wins[0] + wins[1]) == list(range(1, rounds + 1))
        assert sorted(losses[0] + losses[1]) == list(range(1, rounds + 1))
        labels = {r.seq: r.label for r in catalog.snapshots("job")}
        assert labels == {**{s: "t0" for s in wins[0]}, **{s: "t1" for s in wins[1]}}

    def test_processes_racing_for_a_free_lease_exactly_one_wins(
        self, catalog_backend: CatalogBackend, tmp_path: Path
    ) -> None:
        """Four processes acquire the same free lease at once: exactly one gets epoch 1,
        the three others get LeaseHeld naming the winner's pid, and the lease is the
        winner's."""
        catalog = catalog_backend.open()
        make_job(catalog)
        procs = _racers(catalog_backend, tmp_path / "gate", "lease", "job", [[]] * 4)
        try:
            results = [json.loads(_line(p)) for p in procs]
        finally:
            (tmp_path / "gate" / "done").touch()
            _finish(procs)
        winners = [p for p, r in zip(procs, results) if r[0] == "won"]
        assert len(winners) == 1, results
        assert [r for r in results if r[0] == "won"] == [["won", 1]]
        for r in results:
            if r[0] == "held":
                assert f"pid {winners[0].pid} on {HOST}" in r[1]
        found = lease(catalog)
        assert (found.owner.pid, found.epoch) == (winners[0].pid, 1)
        assert [e.kind for e in catalog.events("job")] == ["created", "lease"]

    def test_processes_racing_to_commit_each_seq_is_committed_once(
        self, catalog_backend: CatalogBackend, tmp_path: Path
    ) -> None:
        """Two processes both try to commit seqs 1..150 under the same epoch, at once: each
        seq is committed exactly once (by one of them; the other got StaleWriter), with no
        gap, and the catalog row is the reported winner's."""
        catalog = catalog_backend.open()
        make_job(catalog)
        epoch = catalog.acquire_lease("job", Owner.me(), 300)
        count = 150
        procs = _racers(
            catalog_backend,
            tmp_path / "gate",
            "commit",
            "job",
            [[str(epoch), str(count), f"p{i}"] for i in (0, 1)],
        )
        try:
            wins = [json.loads(_line(p)) for p in procs]
        finally:
            _finish(procs)
        assert sorted(wins[0] + wins[1]) == list(range(1, count + 1))
        labels = {r.seq: r.label for r in catalog.snapshots("job")}
        assert labels == {**{s: "p0" for s in wins[0]}, **{s: "p1" for s in wins[1]}}

    def test_processes_opening_a_new_catalog_at_once_all_succeed(
        self, make_catalog_backend: BackendMaker, tmp_path: Path
    ) -> None:
        """Catalogs are created on first use, so two runners may well create the same
        catalog at the same moment. Four processes open the same brand-new catalog at
        once, 8 rounds (a new catalog each round): every open succeeds, and the catalog
        then works."""
        fresh = [make_catalog_backend(tmp_path / f"fresh-{r}") for r in range(8)]
        try:
            procs = _racers(
                fresh[0], tmp_path / "gate", "open", "-", [[b.location for b in fresh]] * 4, False
            )
            try:
                results = []
                for r in range(len(fresh)):
                    (tmp_path / "gate" / f"go-{r}").touch()
                    results.append([json.loads(_line(p)) for p in procs])
            finally:
                _finish(procs)
            failed = [
                (r, res) for r, round_ in enumerate(results) for res in round_ if res != ["ok"]
            ]
            assert failed == []
            for b in fresh:
                catalog = b.open()
                make_job(catalog)
                assert catalog.acquire_lease("job", Owner.me(), 30) == 1
        finally:
            for b in fresh:
                b.close_all()
