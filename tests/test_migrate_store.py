"""`snaprun migrate-store SRC DST` in real processes against a real PostgreSQL server
(tests/pgserver.py) and a counting provider on 127.0.0.1 (tests/providers.py):

* a SQLite store holding a done job, one waiting on an approval, one on a timer, one
  SIGKILLed between an effect's dispatch and its outcome, and a fork, moves to
  PostgreSQL; there the jobs are approved, woken and resumed and finish as an
  uninterrupted run does, no order delivered twice; back to SQLite, the jobs' rows
  match; the sources are untouched (the SQLite files' bytes, the PostgreSQL tables'
  checksums); a second run is a no-op, and a job that moved on in the destination is
  refused, not overwritten;
* an encrypted store moves into a new store that encrypts too (no plaintext in the
  database), and is refused by an existing plaintext one unless --decrypt;
* a tampered ledger row and a tampered snapshot manifest are refused with exit 2 naming
  them, their jobs left out of the destination, the clean job copied;
* a job whose runner is alive is not copied (exit 5) until it stops.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pgserver
import psycopg
import pytest
from helpers import AGENTS, SNAPRUN, clean_refusal, snaprun
from providers import Provider

WK = AGENTS / "wk_agent.py"
SHOP = AGENTS / "shop.py"
LATER = "7200"  # SNAPSTATE_CLOCK_OFFSET two hours later: wk_agent's 1 h timer is due


@pytest.fixture
def pg(tmp_path):
    """(store URL, env): a fresh database and a key file for it."""
    with pgserver.fresh_database() as url:
        yield url, {"SNAPSTATE_KEY_FILE": str(tmp_path / "pg-keys.json"), "SNAPSTATE_HOME": ""}


def _files(store: Path) -> dict[str, bytes]:
    """Every file of a store directory, by path, as bytes (the lock file, SQLite's
    shared-memory index and an empty write-ahead log aside: none holds data; SQLite
    makes the last two for a reader of a WAL database)."""
    return {
        str(p.relative_to(store)): p.read_bytes()
        for p in sorted(store.rglob("*"))
        if p.is_file()
        and p.name != "store.lock"
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


_TABLES = ("jobs", "snapshots", "manifests", "chunks", "effects", "approvals", "waits")
_TABLES += ("events", "metrics", "leases", "store_meta", "claims", "workers")


def _checksums(url: str) -> dict[str, tuple[int, str | None]]:
    """Each table's row count and a checksum of its rows."""
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in _TABLES:
            out[table] = conn.execute(
                f"SELECT count(*), md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {table} t"
            ).fetchone()
    return out


def _migrate(src, dst, cwd, env, *extra):
    run = snaprun("migrate-store", src, dst, "--json", *extra, cwd=cwd, env=env)
    assert "Traceback" not in run.stderr, run.stderr
    return run, (json.loads(run.stdout) if run.stdout else None)


def _approval(store, cwd, env) -> str:
    """The id of the store's one pending approval."""
    run = snaprun("--store", store, "approvals", "--json", cwd=cwd, env=env)
    pending = json.loads(run.stdout)
    assert len(pending) == 1, run.stdout
    return str(pending[0]["id"])


def _effects(store, job, cwd, env):
    run = snaprun("--store", store, "effects", job, "--json", cwd=cwd, env=env)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_sqlite_store_moves_to_postgresql_and_back_and_its_jobs_finish_once(pg, tmp_path):
    url, env = pg
    src, back = tmp_path / "src", tmp_path / "back"
    with Provider() as provider:
        env = dict(env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", WK_DIR=str(tmp_path))
        s = ("--store", src)
        done = snaprun(*s, "run", "--job", "d", WK, "plain", "d", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        ap = snaprun(*s, "run", "--job", "ap", WK, "approval", "ap", cwd=tmp_path, env=env)
        assert ap.returncode == 3, ap.stderr
        tm = snaprun(*s, "run", "--job", "tm", WK, "timer", "tm", cwd=tmp_path, env=env)
        assert tm.returncode == 3, tm.stderr
        killed = snaprun(
            *s, "run", "--job", "k", SHOP, cwd=tmp_path, env=env, fault="effect-after-send:2"
        )
        assert killed.returncode == -9, killed.stderr
        fork = snaprun(*s, "fork", "d@2", "--as", "fk", cwd=tmp_path, env=env)
        assert fork.returncode == 0, fork.stderr
        before = _files(src)
        delivered = dict(provider.deliveries)

        run, report = _migrate(src, url, tmp_path, env)
        assert run.returncode == 0, run.stderr
        assert sorted(report["copied"]) == ["ap", "d", "fk", "k", "tm"], report
        assert report["created"] and report["skipped"] == [] and report["refused"] == []
        assert report["approvals"] == 1 and report["snapshots"] >= 8, report
        assert _files(src) == before  # the source is only read
        assert provider.deliveries == delivered  # nothing was sent by the move

        # Back to SQLite before anything ran in PostgreSQL: every job's ledger matches.
        pg_before = _checksums(url)
        run, report = _migrate(url, back, tmp_path, env)
        assert run.returncode == 0 and len(report["copied"]) == 5, run.stderr
        assert _checksums(url) == pg_before  # the PostgreSQL source is untouched
        for job in ("d", "ap", "tm", "k", "fk"):
            assert _effects(back, job, tmp_path, env) == _effects(src, job, tmp_path, env)

        # A second run is a no-op, reported as such.
        run, report = _migrate(src, url, tmp_path, env)
        assert run.returncode == 0, run.stderr
        assert (report["copied"], sorted(report["skipped"])) == ([], ["ap", "d", "fk", "k", "tm"])
        assert _checksums(url) == pg_before

        # The jobs go on in PostgreSQL, as they would have in SQLite.
        p = ("--store", url)
        approved = snaprun(
            *p, "approve", "ap", _approval(url, tmp_path, env), "--by", "ana", cwd=tmp_path, env=env
        )
        assert approved.returncode == 0, approved.stderr
        ap = snaprun(*p, "resume", "ap", cwd=tmp_path, env=env)
        assert ap.returncode == 0 and "granted ap" in ap.stdout and "b ap" in ap.stdout, ap.stderr
        early = snaprun(*p, "resume", "tm", cwd=tmp_path, env=env)
        assert early.returncode == 3, early.stderr  # its timer is not due yet
        later = dict(env, SNAPSTATE_CLOCK_OFFSET=LATER)
        tm = snaprun(*p, "resume", "tm", cwd=tmp_path, env=later)
        assert tm.returncode == 0 and "b tm" in tm.stdout, tm.stderr
        k = snaprun(*p, "resume", "k", cwd=tmp_path, env=env)
        assert k.returncode == 0 and "all placed 3" in k.stdout, k.stderr
        fk = snaprun(*p, "resume", "fk", cwd=tmp_path, env=env)
        assert fk.returncode == 0 and fk.result == done.result, fk.stderr
        finished = snaprun(*p, "resume", "d", cwd=tmp_path, env=env)
        assert finished.returncode == 2 and "done" in finished.stderr
        # Every order was carried out exactly once, across both stores.
        assert set(provider.deliveries.values()) == {1}, provider.deliveries
        assert len(provider.deliveries) == 2 + 2 + 2 + 3, provider.deliveries
        orders = [e for e in _effects(url, "k", tmp_path, env) if "order" in e["name"]]
        assert [e["state"] for e in orders] == ["confirmed"] * 3, orders

        # The jobs moved on in PostgreSQL: the SQLite originals now differ and are
        # refused by name, nothing overwritten; the untouched done job is skipped.
        moved = _checksums(url)
        run, report = _migrate(src, url, tmp_path, env)
        assert run.returncode == 2, run.stderr
        assert sorted(r["job"] for r in report["refused"]) == ["ap", "fk", "k", "tm"]
        assert report["skipped"] == ["d"] and report["copied"] == []
        assert "job ap was not copied" in run.stderr and "differs" in run.stderr
        assert _checksums(url) == moved


def test_an_encrypted_store_stays_encrypted_or_is_refused(pg, tmp_path):
    url, env = pg
    src, plain = tmp_path / "enc", tmp_path / "plain"
    with Provider() as provider:
        env = dict(env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", WK_DIR=str(tmp_path))
        assert snaprun("--store", src, "init", "--encrypt", cwd=tmp_path, env=env).returncode == 0
        secret = "topsecretjob"
        ap = snaprun(
            "--store", src, "run", "--job", "ap", WK, "approval", secret, cwd=tmp_path, env=env
        )
        assert ap.returncode == 3, ap.stderr
        # An existing plaintext store refuses it: nothing stored in clear by accident.
        assert snaprun("--store", plain, "init", cwd=tmp_path, env=env).returncode == 0
        refused = snaprun("migrate-store", src, plain, cwd=tmp_path, env=env)
        clean_refusal(refused, "is encrypted", "--decrypt")
        assert (
            json.loads(snaprun("--store", plain, "ls", "--json", cwd=tmp_path, env=env).stdout)
            == []
        )

        # A new PostgreSQL store is created encrypted like its source.
        run, report = _migrate(src, url, tmp_path, env)
        assert run.returncode == 0 and report["encrypted"] and report["copied"] == ["ap"]
        with psycopg.connect(url, autocommit=True) as conn:
            for table in ("jobs", "snapshots", "events", "effects", "approvals", "waits", "chunks"):
                text = " ".join(r[0] for r in conn.execute(f"SELECT {table}::text FROM {table}"))
                assert secret not in text and secret.encode().hex() not in text, table
        p = ("--store", url)
        approval = _approval(url, tmp_path, env)
        decided = snaprun(*p, "approve", "ap", approval, "--by", "bo", cwd=tmp_path, env=env)
        assert decided.returncode == 0, decided.stderr
        resumed = snaprun(*p, "resume", "ap", cwd=tmp_path, env=env)
        assert resumed.returncode == 0 and f"granted {secret}" in resumed.stdout, resumed.stderr

        # --decrypt: the operator's explicit choice of a plaintext copy.
        run, report = _migrate(src, plain, tmp_path, env, "--decrypt")
        assert run.returncode == 0 and report["copied"] == ["ap"] and not report["encrypted"]
        assert set(provider.deliveries.values()) == {1}, provider.deliveries


def test_tampered_rows_and_snapshots_are_refused_by_name(pg, tmp_path):
    url, env = pg
    src = tmp_path / "src"
    with Provider() as provider:
        env = dict(env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", WK_DIR=str(tmp_path))
        for job in ("ok", "row", "snap"):
            run = snaprun(
                "--store", src, "run", "--job", job, WK, "plain", job, cwd=tmp_path, env=env
            )
            assert run.returncode == 0, run.stderr
    with sqlite3.connect(src / "catalog.db") as db:  # someone without the key edits rows
        db.execute("UPDATE effects SET note = 'forged' WHERE job_id = 'row' AND ordinal = 1")
        data = bytearray(
            db.execute("SELECT data FROM manifests WHERE job_id = 'snap' AND seq = 2").fetchone()[0]
        )
        data[-1] ^= 1
        db.execute(
            "UPDATE manifests SET data = ? WHERE job_id = 'snap' AND seq = 2", (bytes(data),)
        )
    db.close()
    before = _files(src)
    run, report = _migrate(src, url, tmp_path, env)
    assert run.returncode == 2, run.stderr
    refused = {r["job"]: r["reason"] for r in report["refused"]}
    assert set(refused) == {"row", "snap"} and report["copied"] == ["ok"], report
    assert "effects (job row, ordinal 1)" in refused["row"]
    assert "snapshot 2 of job snap" in refused["snap"]
    for job in ("row", "snap"):
        assert f"error: job {job} was not copied" in run.stderr
    listed = json.loads(snaprun("--store", url, "ls", "--json", cwd=tmp_path, env=env).stdout)
    assert [j["job"] for j in listed] == ["ok"]
    assert _files(src) == before
    with psycopg.connect(url, autocommit=True) as conn:  # no part of a refused job
        for table in ("jobs", "snapshots", "manifests", "effects", "events", "metrics"):
            n = conn.execute(f"SELECT count(*) FROM {table} WHERE job_id <> 'ok'").fetchone()[0]
            assert n == 0, table


def test_a_running_job_is_not_copied_until_it_stops(pg, tmp_path):
    url, env = pg
    src = tmp_path / "src"
    (tmp_path / "wk").mkdir()
    with Provider() as provider:
        env = dict(
            env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", WK_DIR=str(tmp_path / "wk")
        )
        full = dict(os.environ, **env)
        full.pop("SNAPSTATE_FAULT", None)
        runner = subprocess.Popen(
            [SNAPRUN, "--store", str(src), "run", "--job", "g", str(WK), "gate", "g"],
            cwd=tmp_path,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "wk" / "g.ready").exists():
                assert time.monotonic() < deadline and runner.poll() is None, runner.stderr
                time.sleep(0.05)
            run, report = _migrate(src, url, tmp_path, env)
            assert run.returncode == 5, run.stderr
            assert report["running"] == ["g"] and report["copied"] == [], report
            assert "job g is running in the source" in run.stderr
        finally:
            (tmp_path / "wk" / "g.open").touch()
            out, err = runner.communicate(timeout=60)
        assert runner.returncode == 0, err
        run, report = _migrate(src, url, tmp_path, env)
        assert run.returncode == 0 and report["copied"] == ["g"], run.stderr
        done = snaprun("--store", url, "resume", "g", cwd=tmp_path, env=env)
        assert done.returncode == 2 and "done" in done.stderr


def test_a_tampered_postgresql_source_is_refused_by_name(pg, tmp_path):
    """PostgreSQL -> SQLite: an entry point edited in the database (someone without the
    key) and a chunk of a snapshot altered are refused naming them; the clean job is
    copied, the database left as it was."""
    url, env = pg
    dst = tmp_path / "dst"
    agent = AGENTS.parent.parent / "examples" / "research_agent.py"
    for job in ("ok", "entry", "body"):
        run = snaprun("--store", url, "run", "--job", job, agent, job, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET entry = %s WHERE job_id = 'entry'",
            (json.dumps({"path": "/tmp/evil.py", "function": "main"}),),
        )
        # a chunk only job "body"'s last snapshot lists (its argv differs from the others')
        manifest = conn.execute(
            "SELECT data FROM manifests WHERE job_id = 'body' ORDER BY seq DESC LIMIT 1"
        ).fetchone()[0]
        others = b"".join(
            r[0]
            for r in conn.execute("SELECT data FROM manifests WHERE job_id <> 'body'").fetchall()
        )
        ids = [i for i in _chunk_ids(bytes(manifest)) if i not in others]
        assert ids
        conn.execute(
            "UPDATE chunks SET data = set_byte(data, length(data) - 1, "
            "get_byte(data, length(data) - 1) # 1) WHERE id = %s",
            (ids[0],),
        )
    before = _checksums(url)
    run, report = _migrate(url, dst, tmp_path, env)
    assert run.returncode == 2, run.stderr
    refused = {r["job"]: r["reason"] for r in report["refused"]}
    assert set(refused) == {"entry", "body"} and report["copied"] == ["ok"], report
    assert "jobs (job entry: its entry point and argv)" in refused["entry"]
    assert re.search(r"snapshot \d+ of job body: a chunk", refused["body"]), refused["body"]
    assert _checksums(url) == before
    listed = json.loads(snaprun("--store", dst, "ls", "--json", cwd=tmp_path, env=env).stdout)
    assert [j["job"] for j in listed] == ["ok"]
    resumed = snaprun("--store", dst, "verify", "ok@1", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr


def _chunk_ids(manifest: bytes) -> list[bytes]:
    from snapstate.serializers._manifest import chunk_ids

    return sorted(chunk_ids(manifest))
