"""A store in PostgreSQL, end to end through `snaprun` in real processes against a real
server (tests/pgserver.py): the same promises as the embedded store.

* crash tests: the order agent (tests/agents/shop.py) SIGKILLed at named fault points in
  an effect's windows and a snapshot's, resumed in a new process: every order delivered
  exactly once, the same output as an uninterrupted run;
* export, verify, inspect, fork and `resume FILE` work unchanged; an approval is decided
  and the job continues;
* the keys stay with the operator: a store without a key given is refused, a wrong key
  is refused, settings edited in the database are refused;
* `snaprun db upgrade` sets a database up and refuses a newer schema; an encrypted
  store keeps no plaintext of the agent's in the database.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pgserver
import psycopg
import pytest
from helpers import AGENTS, SNAPRUN, child_pids, clean_refusal, cmdline_of, snaprun
from providers import Provider

from snapstate.serializers._postgres import SCHEMA_VERSION

SHOP = AGENTS / "shop.py"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def pg(tmp_path):
    """(store URL, env): a fresh database and a key file for it."""
    with pgserver.fresh_database() as url:
        env = {"SNAPSTATE_KEY_FILE": str(tmp_path / "store-keys.json"), "SNAPSTATE_HOME": ""}
        yield url, env


def _sql(url: str, statement: str, *params) -> list:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


@pytest.mark.parametrize(
    "fault",
    [
        "effect-after-prepare:2",
        "effect-after-send:2",
        "effect-after-confirm:4",
        "before-commit:2",
        "after-snapshot:1",
    ],
)
def test_a_killed_run_resumes_and_sends_each_order_once(pg, tmp_path, fault):
    url, env = pg
    with Provider() as provider:
        env = dict(env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", ORDERS="3")
        first = snaprun(
            "--store", url, "run", "--job", "shop", SHOP, cwd=tmp_path, env=env, fault=fault
        )
        assert first.returncode == -9, first.stderr
        # the store named by SNAPSTATE_STORE this time, as a worker's child would
        resumed = snaprun("resume", "shop", cwd=tmp_path, env=dict(env, SNAPSTATE_STORE=url))
        assert resumed.returncode == 0, resumed.stderr
        assert "all placed 3" in resumed.stdout
        assert sorted(provider.deliveries.values()) == [1, 1, 1], provider.deliveries
    effects = json.loads(
        snaprun("--store", url, "effects", "shop", "--json", cwd=tmp_path, env=env).stdout
    )
    confirmed = [e for e in effects if e.get("name", "").endswith("order_keyed")]
    assert [e["state"] for e in confirmed] == ["confirmed"] * 3, effects


def test_export_verify_inspect_fork_and_resume_a_file(pg, tmp_path):
    url, env = pg
    agent = EXAMPLES / "research_agent.py"
    run = snaprun(
        "--store", url, "run", "--job", "demo", agent, "durable agents", cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stderr
    assert snaprun("--store", url, "verify", "demo@2", cwd=tmp_path, env=env).returncode == 0
    out = tmp_path / "demo2.snap"
    exported = snaprun("--store", url, "export", "-o", out, "demo@2", cwd=tmp_path, env=env)
    assert exported.returncode == 0, exported.stderr
    inspected = snaprun("--store", url, "inspect", out, cwd=tmp_path, env=env)
    assert inspected.returncode == 0 and "step = 2" in inspected.stdout, inspected.stdout
    # the file comes back in as a job of its own: cut into chunks in the database
    again = snaprun("--store", url, "resume", out, "--as", "again", cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    # the same result, and the same output as the uninterrupted run from snapshot 2 on
    assert again.result == run.result, again.stderr
    resumed_note, _, rest = again.stdout.partition("\n")  # the agent says it resumed
    assert "resumed from snapshot 2" in resumed_note, again.stdout
    assert rest and run.stdout.endswith(rest), (again.stdout, run.stdout)
    forked = snaprun("--store", url, "fork", "demo@1", "--as", "other", cwd=tmp_path, env=env)
    assert forked.returncode == 0, forked.stderr
    resumed = snaprun("--store", url, "resume", "other", cwd=tmp_path, env=env)
    assert resumed.returncode == 0 and resumed.result == run.result, resumed.stderr
    files = _sql(url, "SELECT count(*) FROM snapshots WHERE file <> ''")
    assert files == [(0,)]  # every body is chunked in the database
    # nothing in the database lies outside it: no pack files
    assert _sql(url, "SELECT count(*) FROM chunks WHERE pack IS NOT NULL") == [(0,)]


def test_an_approval_decided_from_another_process_lets_the_job_continue(pg, tmp_path):
    url, env = pg
    agent = EXAMPLES / "purchase_agent.py"
    first = snaprun("--store", url, "run", "--job", "po", agent, cwd=tmp_path, env=env)
    assert first.returncode == 3, first.stderr  # waiting
    listed = snaprun("--store", url, "approvals", "--json", cwd=tmp_path, env=env)
    pending = json.loads(listed.stdout)
    assert [(a["job"], a["id"]) for a in pending] == [("po", "a1")], listed.stdout
    decided = snaprun("--store", url, "approve", "po", "a1", "--by", "ana", cwd=tmp_path, env=env)
    assert decided.returncode == 0, decided.stderr
    resumed = snaprun("--store", url, "resume", "po", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr


def test_without_a_key_the_store_is_refused(pg, tmp_path):
    url, _ = pg
    nokey = {"SNAPSTATE_KEY_FILE": "", "SNAPSTATE_KEY": ""}
    run = snaprun("--store", url, "run", EXAMPLES / "research_agent.py", cwd=tmp_path, env=nokey)
    clean_refusal(run, "SNAPSTATE_KEY_FILE", "never from the database")
    assert _sql(url, "SELECT count(*) FROM jobs") == [(0,)]
    assert _sql(url, "SELECT count(*) FROM store_meta") == [(0,)]


def test_a_wrong_key_and_edited_settings_are_refused(pg, tmp_path):
    url, env = pg
    assert snaprun("--store", url, "init", "--encrypt", cwd=tmp_path, env=env).returncode == 0
    other = {"SNAPSTATE_KEY_FILE": "", "SNAPSTATE_KEY": "ab" * 32}
    clean_refusal(snaprun("--store", url, "ls", cwd=tmp_path, env=other), "none of the keys")
    _sql(url, "UPDATE store_meta SET value = %s WHERE name = 'config'", '{"encrypt": false}')
    clean_refusal(snaprun("--store", url, "ls", cwd=tmp_path, env=env), "fail authentication")


def test_an_encrypted_store_keeps_no_plaintext_in_the_database(pg, tmp_path):
    url, env = pg
    assert snaprun("--store", url, "init", "--encrypt", cwd=tmp_path, env=env).returncode == 0
    run = snaprun(
        "--store",
        url,
        "run",
        "--job",
        "demo",
        EXAMPLES / "research_agent.py",
        "secret-topic-42",
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "secret-topic-42" in run.stdout
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("jobs", "snapshots", "events", "effects", "chunks", "manifests"):
            dump = conn.execute(f"SELECT {table}::text FROM {table}").fetchall()
            text = " ".join(r[0] for r in dump)
            assert "secret-topic" not in text, table
            assert b"secret-topic".hex() not in text, table


def test_db_upgrade_sets_up_a_database_and_refuses_a_newer_schema(pg, tmp_path):
    url, env = pg
    first = snaprun("--store", url, "db", "upgrade", cwd=tmp_path, env=env)
    set_up = f"was set up (schema {SCHEMA_VERSION})"
    assert first.returncode == 0 and set_up in first.stderr, first.stderr
    again = snaprun("db", "upgrade", "--store", url, cwd=tmp_path, env=env)
    assert again.returncode == 0 and "up to date" in again.stderr, again.stderr
    _sql(url, "INSERT INTO snapstate_schema VALUES (99, 0, 'future')")
    clean_refusal(snaprun("--store", url, "db", "upgrade", cwd=tmp_path, env=env), "99")
    clean_refusal(snaprun("--store", url, "ls", cwd=tmp_path, env=env), "schema version 99")


def test_a_database_of_another_application_is_not_taken_over(pg, tmp_path):
    url, env = pg
    _sql(url, "CREATE TABLE jobs (id int)")
    clean_refusal(snaprun("--store", url, "ls", cwd=tmp_path, env=env), "another application")


def test_an_unreachable_server_is_a_store_failure_not_a_traceback(tmp_path):
    env = {"SNAPSTATE_KEY_FILE": str(tmp_path / "k.json")}
    run = snaprun(
        "--store",
        "postgresql://nobody@127.0.0.1:1/none",
        "ls",
        cwd=tmp_path,
        env=dict(env, PGCONNECT_TIMEOUT="1"),
    )
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert "cannot connect to PostgreSQL at postgresql://nobody@127.0.0.1:1/none" in run.stderr


def test_an_older_schema_waits_for_db_upgrade(pg, tmp_path):
    """A database of schema 1 (before the workers' heartbeats): refused until `snaprun
    db upgrade`, which applies migration 2 alone; nothing is lost."""
    url, env = pg
    run = snaprun(
        "--store",
        url,
        "run",
        "--job",
        "demo",
        EXAMPLES / "research_agent.py",
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    _sql(url, "DROP TABLE workers")
    _sql(url, "DELETE FROM snapstate_schema WHERE version > 1")
    clean_refusal(
        snaprun("--store", url, "ls", cwd=tmp_path, env=env), "snaprun --store URL db upgrade"
    )
    upgraded = snaprun("--store", url, "db", "upgrade", cwd=tmp_path, env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "upgraded from schema 1 to 2" in upgraded.stderr, upgraded.stderr
    listed = snaprun("--store", url, "ls", cwd=tmp_path, env=env)
    assert listed.returncode == 0 and "demo" in listed.stdout and "done" in listed.stdout


def test_encryption_turned_on_over_existing_rows_seals_them(pg, tmp_path):
    """`init --encrypt` on a store with jobs rewrites every sealed value in its sealed
    form (as text in TEXT columns, never bytes turned into hex text); the rows read and
    decide as before."""
    url, env = pg
    agent = EXAMPLES / "purchase_agent.py"
    first = snaprun("--store", url, "run", "--job", "po", agent, cwd=tmp_path, env=env)
    assert first.returncode == 3, first.stderr
    assert snaprun("--store", url, "init", "--encrypt", cwd=tmp_path, env=env).returncode == 0
    argv, label = _sql(
        url,
        "SELECT j.argv, s.label FROM jobs j JOIN snapshots s "
        "ON s.job_id = j.job_id ORDER BY s.seq DESC LIMIT 1",
    )[0]
    assert argv.startswith("\x1bSS1:") and label.startswith("\x1bSS1:"), (argv, label)
    for command in (("ls",), ("log", "po"), ("approvals",), ("effects", "po")):
        run = snaprun("--store", url, *command, cwd=tmp_path, env=env)
        assert run.returncode == 0 and "Traceback" not in run.stderr, (command, run.stderr)
    approved = snaprun("--store", url, "approve", "po", "a1", cwd=tmp_path, env=env)
    assert approved.returncode == 0, approved.stderr
    # As in a directory store: a snapshot written before encryption was required is
    # refused by a store that now requires it.
    clean_refusal(snaprun("--store", url, "resume", "po", cwd=tmp_path, env=env), "not encrypted")


PACK_STEPS = AGENTS / "pack_steps.py"


@pytest.mark.parametrize("bodies", [False, True])
def test_large_bodies_in_the_database_or_in_a_shared_folder(pg, tmp_path, bodies):
    """pack_steps.py's snapshots add more than 64 KiB of new chunks each: without
    SNAPSTATE_BODIES they all go into the database; with it, into pack files of that
    folder (the database keeps where they lie). Killed after snapshot 4 and resumed by
    another process, the job returns what an uninterrupted run returns."""
    url, env = pg
    if bodies:
        env = dict(env, SNAPSTATE_BODIES=str(tmp_path / "shared"))
    whole = snaprun("--store", url, "run", "--job", "whole", PACK_STEPS, cwd=tmp_path, env=env)
    assert whole.returncode == 0, whole.stderr
    killed = snaprun(
        "--store",
        url,
        "run",
        "--job",
        "cut",
        PACK_STEPS,
        cwd=tmp_path,
        env=env,
        fault="after-snapshot:4",
    )
    assert killed.returncode == -9, killed.stderr
    resumed = snaprun("--store", url, "resume", "cut", cwd=tmp_path, env=env)
    assert resumed.returncode == 0 and resumed.result == whole.result, resumed.stderr
    packed = _sql(url, "SELECT count(*) FROM chunks WHERE pack IS NOT NULL")[0][0]
    packs = list((tmp_path / "shared" / "chunks").glob("*.pack")) if bodies else []
    if bodies:
        assert packed > 0 and packs, (packed, packs)
    else:
        assert packed == 0 and not (tmp_path / "shared").exists()
    assert snaprun("--store", url, "verify", "cut@4", cwd=tmp_path, env=env).returncode == 0


def test_an_edited_entry_point_is_refused_in_a_postgresql_store(pg, tmp_path):
    """The entry point is signed: an UPDATE of jobs.entry in the database makes resume
    refuse the job (exit 2, naming the row), and nothing of the other module runs."""
    url, env = pg
    (tmp_path / "evil.py").write_text(
        "import pathlib\npathlib.Path('ran').write_text('evil')\ndef main():\n    return 1\n"
    )
    first = snaprun(
        "--store", url, "run", "--job", "po", EXAMPLES / "purchase_agent.py", cwd=tmp_path, env=env
    )
    assert first.returncode == 3, first.stderr
    entry = json.loads(_sql(url, "SELECT entry FROM jobs WHERE job_id = 'po'")[0][0])
    entry.update(module="evil", path=str(tmp_path / "evil.py"))
    _sql(url, "UPDATE jobs SET entry = %s WHERE job_id = 'po'", json.dumps(entry))
    clean_refusal(snaprun("--store", url, "resume", "po", cwd=tmp_path, env=env), "jobs")
    assert not (tmp_path / "ran").exists()


def test_a_decided_approval_wakes_an_idle_worker_at_once(pg, tmp_path):
    """LISTEN/NOTIFY: a worker polling only every 60 s runs a job within seconds of
    its approval being decided from another process."""
    url, env = pg
    first = snaprun(
        "--store", url, "run", "--job", "po", EXAMPLES / "purchase_agent.py", cwd=tmp_path, env=env
    )
    assert first.returncode == 3, first.stderr
    wenv = dict(os.environ, **env, PYTHONUNBUFFERED="1")
    wenv.pop("SNAPSTATE_FAULT", None)
    with open(tmp_path / "w.err", "wb") as err:
        worker = subprocess.Popen(
            [SNAPRUN, "--store", url, "worker", "--poll", "60"],
            cwd=tmp_path,
            env=wenv,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 30
        while "polling every" not in (tmp_path / "w.err").read_text():
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.05)
        time.sleep(1.0)  # past its first scan: now it waits
        decided = snaprun("--store", url, "approve", "po", "a1", cwd=tmp_path, env=env)
        assert decided.returncode == 0, decided.stderr
        at = time.monotonic()
        while "job po: done" not in (tmp_path / "w.err").read_text():
            assert time.monotonic() - at < 20, (tmp_path / "w.err").read_text()
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_a_worker_never_puts_the_store_password_on_a_command_line(pg, tmp_path, start):
    """The store URL may hold a password: a worker's children get it in their
    environment, and no process's command line (which any user of the machine can
    read in /proc) shows it."""
    url, env = pg
    secret = "s3cret-not-on-argv"
    with_password = url.replace("postgres@", f"postgres:{secret}@", 1)  # trust: accepted
    with Provider() as provider:
        (tmp_path / "wk").mkdir()
        env = dict(
            env, PROVIDER_URL=provider.url, PROVIDER_MODE="keyed", WK_DIR=str(tmp_path / "wk")
        )
        gate = AGENTS / "wk_agent.py"
        first = snaprun(
            "--store", with_password, "run", "--job", "g", gate, "timer", "g", cwd=tmp_path, env=env
        )
        assert first.returncode == 3, first.stderr
        wenv = dict(
            os.environ,
            **env,
            SNAPSTATE_STORE=with_password,
            SNAPSTATE_CLOCK_OFFSET="7200",
            SNAPSTATE_WORKER_START=start,
        )
        wenv.pop("SNAPSTATE_FAULT", None)
        with open(tmp_path / "w.err", "wb") as err:
            worker = subprocess.Popen(
                [SNAPRUN, "worker", "--poll", "0.2"],
                cwd=tmp_path,
                env=wenv,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        seen: set[str] = set()
        runners: set[int] = set()
        try:
            deadline = time.monotonic() + 60
            while "job g: done" not in (tmp_path / "w.err").read_text():
                assert time.monotonic() < deadline, (tmp_path / "w.err").read_text()
                for child in child_pids(worker.pid):
                    seen.add(cmdline_of(child))
                    if start == "exec" and "resume" in cmdline_of(child):
                        runners.add(child)
                    for runner in child_pids(child):  # forked from the fork server
                        runners.add(runner)
                        seen.add(cmdline_of(runner))
                time.sleep(0.01)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        assert runners, seen  # the job's runner was seen
        assert not any(secret in line for line in seen), seen
        assert secret not in (tmp_path / "w.err").read_text()
