"""Catalog rows are data, never code (issue 21, part 4). Someone who can write the
catalog but not the store's keys edits a job's entry point, transplants another job's
effect result, forges an approval's decision or moves a wait row to another job: each
is refused with exit 2 naming the row, in plaintext and encrypted stores; the job keeps
its status and nothing of the agent runs; the listings of the whole store go on, showing
the row as damaged. An old-schema store's rows are signed once on upgrade, and rolling
the catalog back to the old schema (to get forged rows signed) is refused."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import AGENTS, clean_refusal, snaprun

from snapstate.serializers._sqlite import SCHEMA_VERSION

EFFECT_AGENT = textwrap.dedent(
    """
    import os
    import pathlib

    from snapstate import effect, snapshot


    @effect(kind="read")
    def fetch(name):
        return {"owner": os.environ["OWNER"], "name": name}


    def main():
        snapshot("start")
        got = fetch("balance")
        pathlib.Path(os.environ["MARK"]).open("a").write("agent ran with " + got["owner"] + "\\n")
        snapshot("fetched")
        return got["owner"]
    """
)

APPROVAL_AGENT = textwrap.dedent(
    """
    import os
    import pathlib

    from snapstate import request_approval, snapshot


    def main():
        snapshot("start")
        request_approval("purchase", {"max_usd": 5}, expires_in=3600)
        pathlib.Path(os.environ["MARK"]).open("a").write("bought\\n")
        return "bought"
    """
)

EVIL = textwrap.dedent(
    """
    import os
    import pathlib


    def main():
        pathlib.Path(os.environ["MARK"]).open("a").write("evil code ran\\n")
        return "pwned"
    """
)


@contextlib.contextmanager
def _db(store: Path) -> Iterator[sqlite3.Connection]:
    """The catalog as an attacker with write access (not the key file) edits it."""
    db = sqlite3.connect(store / "catalog.db", isolation_level=None)
    try:
        yield db
    finally:
        db.close()


def _status(store: Path, job: str) -> tuple[str, str | None]:
    with _db(store) as db:
        status, error = db.execute(
            "SELECT status, error FROM jobs WHERE job_id = ?", (job,)
        ).fetchone()
    return status, error


def _ls(store: Path, cwd: Path) -> dict[str, dict]:
    listed = snaprun("ls", "--store", store, "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    return {job["job"]: job for job in json.loads(listed.stdout)}


def _store(tmp_path: Path, encrypted: bool) -> Path:
    store = tmp_path / "store"
    if encrypted:
        init = snaprun("init", "--store", store, "--encrypt", cwd=tmp_path)
        assert init.returncode == 0, init.stderr
    return store


# ------------------------------------------------------------------ entry point
def test_an_edited_entry_point_is_refused_and_set_entry_is_the_way_to_change_it(tmp_path):
    store, mark = tmp_path / "store", tmp_path / "mark"
    env = {"MARK": str(mark)}
    for job in ("victim", "other"):
        run = snaprun(
            "run", "--store", store, "--job", job, AGENTS / "loops.py", cwd=tmp_path,
            fault="after-snapshot:1",
        )  # fmt: skip
        assert run.returncode == -9, run.stderr
    (tmp_path / "evil.py").write_text(EVIL)
    forged = {"module": "evil", "function": "main", "path": str(tmp_path / "evil.py")}
    with _db(store) as db:
        db.execute("UPDATE jobs SET entry = ? WHERE job_id = 'victim'", (json.dumps(forged),))
    before = _status(store, "victim")
    refused = snaprun("resume", "--store", store, "victim", cwd=tmp_path, env=env)
    clean_refusal(refused, "catalog row jobs (job victim", "entry point", "signature")
    assert not mark.exists(), "the forged entry point ran"
    assert _status(store, "victim") == before
    jobs = _ls(store, tmp_path)
    assert "damaged" in jobs["victim"]["entry"]
    assert jobs["other"]["entry"] == str(AGENTS / "loops.py")
    # Signing it with set-entry is refused too: a row someone edited is restored, never
    # re-signed (that would launder a forged argv).
    resigned = snaprun("set-entry", "--store", store, "victim", "evil.py", cwd=tmp_path)
    clean_refusal(resigned, "catalog row jobs (job victim")
    # The explicit command on a sound row: the agent's file moved.
    moved = tmp_path / "moved" / "loops.py"
    moved.parent.mkdir()
    moved.write_text((AGENTS / "loops.py").read_text())
    changed = snaprun("set-entry", "--store", store, "other", moved, cwd=tmp_path)
    assert changed.returncode == 0, changed.stderr
    assert f"entry point set to {moved}" in changed.stderr
    assert _ls(store, tmp_path)["other"]["entry"] == str(moved)
    # The worker names the refused row and starts nothing for it; it runs the other job
    # from where its file is now.
    worked = snaprun("worker", "--store", store, "--once", cwd=tmp_path, env=env)
    assert "catalog row jobs (job victim" in worked.stderr, worked.stderr
    assert not mark.exists(), "the forged entry point ran"
    assert _status(store, "victim") == before
    assert _ls(store, tmp_path)["other"]["status"] == "done"


# ------------------------------------------------------------------ effect results
@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
@pytest.mark.parametrize("copied", ["result", "result-and-mac", "whole-row"])
def test_a_transplanted_effect_result_is_refused(tmp_path, encrypted, copied):
    store, mark = _store(tmp_path, encrypted), tmp_path / "mark"
    (tmp_path / "agent.py").write_text(EFFECT_AGENT)
    for job in ("victim", "donor"):
        # killed after the effect is recorded, before snapshot 2: the resume re-runs
        # fetch() and gets its recorded result from the ledger
        run = snaprun(
            "run", "--store", store, "--job", job, "agent.py", cwd=tmp_path,
            env={"OWNER": job, "MARK": str(mark)}, fault="before-commit:2",
        )  # fmt: skip
        assert run.returncode == -9, run.stderr
    mark.unlink()
    columns = {"result": "result", "result-and-mac": "result, mac"}.get(
        copied, "key, name, call_site, args_digest, args_repr, kind, state, result, "
        "external_id, attempts, created, updated, note, mac"
    )  # fmt: skip
    with _db(store) as db:
        db.execute(
            f"UPDATE effects SET ({columns}) = (SELECT {columns} FROM effects "
            "WHERE job_id = 'donor' AND ordinal = 1) WHERE job_id = 'victim' AND ordinal = 1"
        )
    before = _status(store, "victim")
    env = {"OWNER": "victim", "MARK": str(mark)}
    refused = snaprun("resume", "--store", store, "victim", cwd=tmp_path, env=env)
    if encrypted:  # the AEAD of the sealed values, bound to their place, refuses it first
        clean_refusal(refused, "effects.", "of job victim 1", "fails authentication")
    else:
        clean_refusal(refused, "catalog row effects (job victim, ordinal 1)", "nothing was run")
    assert not mark.exists(), "the agent ran on with another job's result"
    assert _status(store, "victim") == before  # the store's damage, not the agent's failure
    jobs = _ls(store, tmp_path)
    assert jobs["donor"]["status"] == "interrupted"
    refused_log = snaprun("effects", "--store", store, "victim", cwd=tmp_path)
    clean_refusal(refused_log, "effects", "job victim")
    stats = snaprun("stats", "--store", store, "--json", cwd=tmp_path)
    assert stats.returncode == 0, stats.stderr
    statuses = {r["job"]: r["status"] for r in json.loads(stats.stdout)}
    assert statuses == {"victim": "damaged", "donor": "interrupted"}
    # The worker starts no child for the victim (never looped, never counted as a
    # crash): it names the row; the donor is untouched and runs to its end with its own
    # result.
    worked = snaprun("worker", "--store", store, "--once", cwd=tmp_path, env=env)
    assert "job victim: not started" in worked.stderr, worked.stderr
    assert mark.read_text() == "agent ran with donor\n"
    assert _status(store, "victim") == before
    assert _ls(store, tmp_path)["donor"]["status"] == "done"


# ------------------------------------------------------------------ approvals
@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
def test_a_forged_approval_decision_is_refused_and_confined_to_its_job(tmp_path, encrypted):
    store, mark = _store(tmp_path, encrypted), tmp_path / "mark"
    (tmp_path / "buyer.py").write_text(APPROVAL_AGENT)
    env = {"MARK": str(mark)}
    for job in ("victim", "other"):
        run = snaprun("run", "--store", store, "--job", job, "buyer.py", cwd=tmp_path, env=env)
        assert run.returncode == 3, run.stderr
    with _db(store) as db:
        # the decision, flipped by hand (who and when filled in, as `approve` writes them)
        db.execute(
            "UPDATE approvals SET state = 'granted', decided_by = "
            "(SELECT decided_by FROM approvals WHERE job_id = 'other'), decided_at = requested "
            "WHERE job_id = 'victim'"
        )
    before = _status(store, "victim")
    assert before[0] == "waiting"
    for command in (["resume", "victim"], ["approve", "victim", "a1", "--by", "alice"]):
        refused = snaprun(command[0], "--store", store, *command[1:], cwd=tmp_path, env=env)
        clean_refusal(refused, "catalog row approvals (job victim, approval a1)")
    assert not mark.exists(), "a forged approval authorized the purchase"
    assert _status(store, "victim") == before
    # The listings of the whole store go on, the forged row shown as damaged.
    listed = snaprun("approvals", "--store", store, "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = {r["job"]: r for r in json.loads(listed.stdout)}
    assert rows["victim"]["altered"] and "approvals (job victim" in rows["victim"]["damaged"]
    assert not rows["other"]["altered"] and rows["other"]["damaged"] is None
    table = snaprun("approvals", "--store", store, "--all", cwd=tmp_path)
    assert table.returncode == 0 and "ALTERED" in table.stdout, table.stderr
    assert _ls(store, tmp_path)["victim"]["status"] == "waiting"
    # The worker (its approval looks decided) starts no child for it and names the row.
    worked = snaprun("worker", "--store", store, "--once", cwd=tmp_path, env=env)
    assert "catalog row approvals (job victim, approval a1)" in worked.stderr, worked.stderr
    assert not mark.exists() and _status(store, "victim") == before
    # The other job's approval is decided and runs as ever.
    granted = snaprun("approve", "--store", store, "other", "a1", "--by", "alice", cwd=tmp_path)
    assert granted.returncode == 0, granted.stderr
    done = snaprun("resume", "--store", store, "other", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert mark.read_text() == "bought\n"


def test_an_approval_row_copied_into_another_job_is_refused(tmp_path):
    store, mark = tmp_path / "store", tmp_path / "mark"
    (tmp_path / "buyer.py").write_text(APPROVAL_AGENT)
    env = {"MARK": str(mark)}
    for job in ("granted", "victim"):
        run = snaprun("run", "--store", store, "--job", job, "buyer.py", cwd=tmp_path, env=env)
        assert run.returncode == 3, run.stderr
    ok = snaprun("approve", "--store", store, "granted", "a1", "--by", "bob", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    with _db(store) as db:  # the decided row, with its signature, over the victim's
        db.execute("DELETE FROM approvals WHERE job_id = 'victim'")
        db.execute(
            "INSERT INTO approvals SELECT 'victim', approval_id, name, scope, digest, "
            "requested, expires, approvers, state, decided_by, decided_at, note, site, mac "
            "FROM approvals WHERE job_id = 'granted'"
        )
    refused = snaprun("resume", "--store", store, "victim", cwd=tmp_path, env=env)
    clean_refusal(refused, "catalog row approvals (job victim, approval a1)")
    assert not mark.exists()
    assert _status(store, "victim")[0] == "waiting"


# ------------------------------------------------------------------ waits
@pytest.mark.parametrize("encrypted", [False, True], ids=["plaintext", "encrypted"])
def test_a_wait_row_moved_to_another_job_is_refused(tmp_path, encrypted):
    store = _store(tmp_path, encrypted)
    for job, seconds in (("soon", "1"), ("later", "86400")):
        run = snaprun(
            "run", "--store", store, "--job", job, AGENTS / "timer_agent.py", cwd=tmp_path,
            env={"SLEEP": seconds, "SNAPSTATE_HIBERNATE_AFTER": "0"},
        )  # fmt: skip
        assert run.returncode == 3, run.stderr
    with _db(store) as db:  # the due-soon wait, moved onto the job that waits a day
        db.execute("DELETE FROM waits WHERE job_id = 'later'")
        db.execute("UPDATE waits SET job_id = 'later' WHERE job_id = 'soon'")
    before = _status(store, "later")
    refused = snaprun("resume", "--store", store, "later", cwd=tmp_path)
    if encrypted:  # the AEAD of its sealed reason, bound to the job, refuses it first
        clean_refusal(refused, "waits.reason of job later", "fails authentication")
    else:
        clean_refusal(refused, "catalog row waits (job later)", "signature")
    assert "step 2" not in refused.stdout
    assert _status(store, "later") == before == ("waiting", None)
    jobs = _ls(store, tmp_path)
    assert "damaged" in jobs["later"]["wait"]["reason"]


# ------------------------------------------------------------------ old stores
def _as_schema_4(store: Path, *, keep_mark: bool) -> None:
    """The catalog (and, unless keep_mark, the key file) as the previous release wrote
    them: no signature columns, schema 4, no rows-signed mark."""
    with _db(store) as db:
        for table in ("jobs", "effects", "waits", "approvals"):
            db.execute(f"ALTER TABLE {table} DROP COLUMN mac")
        db.execute("DROP TABLE IF EXISTS workers")  # schema 6's
        db.execute("PRAGMA user_version = 4")
    if not keep_mark:
        keys = store / "keys.json"
        doc = json.loads(keys.read_text())
        del doc["rows_signed"]
        keys.write_text(json.dumps(doc))
        os.chmod(keys, 0o600)


def test_an_old_schema_store_is_signed_on_upgrade_and_a_rollback_is_refused(tmp_path):
    store, mark = tmp_path / "store", tmp_path / "mark"
    (tmp_path / "agent.py").write_text(EFFECT_AGENT)
    env = {"OWNER": "me", "MARK": str(mark)}
    for job in ("a", "b"):
        run = snaprun(
            "run", "--store", store, "--job", job, "agent.py", cwd=tmp_path, env=env,
            fault="before-commit:2",
        )  # fmt: skip
        assert run.returncode == -9, run.stderr
    mark.unlink()
    assert json.loads((store / "keys.json").read_text())["rows_signed"] is True
    _as_schema_4(store, keep_mark=False)
    # Read-only commands read the old catalog as it is (nothing upgraded yet).
    assert set(_ls(store, tmp_path)) == {"a", "b"}
    with _db(store) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    # The first writable open upgrades it, signs its rows and marks the key file.
    resumed = snaprun("resume", "--store", store, "a", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert mark.read_text() == "agent ran with me\n"
    with _db(store) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        for table in ("jobs", "effects"):
            assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE mac IS NULL").fetchone() == (0,)
    assert json.loads((store / "keys.json").read_text())["rows_signed"] is True
    # A row whose signature is deleted is not signed again: refused.
    with _db(store) as db:
        db.execute("UPDATE effects SET mac = NULL WHERE job_id = 'b'")
    refused = snaprun("resume", "--store", store, "b", cwd=tmp_path, env=env)
    clean_refusal(refused, "catalog row effects (job b, ordinal 1)", "no signature")
    # Rolling the catalog back to schema 4 (to have forged rows signed by the upgrade)
    # is refused: the key file, which the catalog's writer cannot change, says signed.
    _as_schema_4(store, keep_mark=True)
    for command in (["ls"], ["resume", "b"]):
        refused = snaprun(command[0], "--store", store, *command[1:], cwd=tmp_path, env=env)
        clean_refusal(refused, "schema version 4", "rolled back")
    with _db(store) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4  # nothing upgraded
    assert mark.read_text() == "agent ran with me\n"
