"""What a worker tells its operator (issue 21): `snaprun worker --log-format json`
writes each of its events (claim, start, outcome, release, back-off, give-up,
reconnect...) as one JSON object per line on stderr, with ts, event, job, pid and
detail; text stays the default. A running worker keeps a heartbeat in the store:
`snaprun worker --status` lists the live workers, `snaprun ls` sums them up. Real worker processes, a real provider on 127.0.0.1,
an agent that SIGKILLs itself (tests/agents/wk_crashloop.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pgserver
import pytest
from helpers import AGENTS, snaprun
from test_worker import (
    create_job,
    job_row,
    provider,
    run_job,
    start_worker,
    wait_until,
    worker_env,
    worker_once,
)

__all__ = ["provider"]  # the fixture, shared with test_worker.py


def _json_lines(stderr: str) -> list[dict]:
    """The worker's own lines (the children's messages pass through as text)."""
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def test_json_log_has_one_object_per_event(tmp_path, provider):
    """One pass over a job that finishes and one that crashes until given up: every
    worker line is a JSON object with ts, event, job, pid and detail; the finished job
    is claimed, started, ended (exit 0) and released; the crashing one is given up on;
    the text log is unchanged without the option."""
    first = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert first.returncode == 3, first.stderr
    create_job(tmp_path, "plain", "ok")
    loop = snaprun("run", "--job", "loop", AGENTS / "wk_crashloop.py", cwd=tmp_path)
    assert loop.returncode == -signal.SIGKILL, loop.stderr
    env = worker_env(tmp_path, provider)
    run = worker_once(tmp_path, env, "--log-format", "json", "--max-crashes", "1")
    assert run.returncode == 0, run.stderr
    records = _json_lines(run.stderr)
    assert records, run.stderr
    worker_lines = [
        line for line in run.stderr.splitlines() if line.startswith("snaprun: worker pid")
    ]
    assert worker_lines == []  # its own lines are JSON now
    for record in records:
        assert {"ts", "event", "job", "pid", "detail"} <= set(record), record
        assert isinstance(record["ts"], float) and isinstance(record["pid"], int)
    events = [(r["event"], r["job"]) for r in records]
    assert events[0] == ("worker-start", None)
    ok = [e for e, job in events if job == "ok"]
    assert ok == ["claim", "start", "outcome", "release"], events
    outcome = next(r for r in records if r["job"] == "ok" and r["event"] == "outcome")
    assert outcome["code"] == 0 and "done" in outcome["detail"]
    start = next(r for r in records if r["job"] == "ok" and r["event"] == "start")
    assert start["pid"] == outcome["pid"] != os.getpid()
    gave_up = [r for r in records if r["event"] == "give-up"]
    assert [r["job"] for r in gave_up] == ["loop"] and gave_up[0]["crashes"] == 1
    assert events[-1] == ("pass-over", None)

    text = worker_once(tmp_path, env)
    assert text.returncode == 0 and "snaprun: worker pid" in text.stderr
    assert _json_lines(text.stderr) == []


def test_a_bad_log_format_is_refused(tmp_path):
    run = snaprun("worker", "--once", "--log-format", "yaml", cwd=tmp_path)
    assert run.returncode == 2 and "--log-format" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def _status(tmp_path) -> list[dict]:
    out = snaprun("worker", "--status", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_status_lists_live_workers_from_their_heartbeats(tmp_path, provider):
    """A worker running a job (held at a gate) is listed by `snaprun worker --status`
    (host, pid, start, last beat, concurrency, the job it runs) and summed up on one
    line by `snaprun ls`; stopped by SIGTERM it withdraws its row; a second worker,
    SIGKILLed, drops out at once (its pid is gone on this host)."""
    first = run_job(tmp_path, provider, "timer", "warm")  # creates the store
    assert first.returncode == 3, first.stderr
    assert "no live workers" in snaprun("worker", "--status", cwd=tmp_path).stdout
    assert "live worker" not in snaprun("ls", cwd=tmp_path).stdout
    create_job(tmp_path, "gate", "g1")
    env = worker_env(tmp_path, provider)
    worker = start_worker(tmp_path, env, "--concurrency", "2", "--poll", "0.1")
    try:
        wait_until("the job at its gate", lambda: (tmp_path / "wk" / "g1.ready").exists())
        wait_until(
            "a heartbeat naming the job",
            lambda: [w["running"] for w in _status(tmp_path)] == [["g1"]],
        )
        (row,) = _status(tmp_path)
        assert row["pid"] == worker.pid and row["concurrency"] == 2
        assert row["host"] and row["beat"] >= row["started"] > 0
        text = snaprun("worker", "--status", cwd=tmp_path).stdout
        assert f"pid {worker.pid} on" in text and "1/2" in text and "g1" in text, text
        listed = snaprun("ls", cwd=tmp_path).stdout
        assert "1 live worker(s), running 1 of 2 job slot(s)" in listed, listed
        json.loads(snaprun("ls", "--json", cwd=tmp_path).stdout)  # --json unchanged: a list
        (tmp_path / "wk" / "g1.open").touch()
        wait_until("g1 done", lambda: job_row(tmp_path, "g1").status == "done")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert _status(tmp_path) == []
    killed = start_worker(tmp_path, env, "--poll", "0.1", log="killed")
    try:
        wait_until("its heartbeat", lambda: [w["pid"] for w in _status(tmp_path)] == [killed.pid])
    finally:
        killed.kill()
        killed.wait()
    assert _status(tmp_path) == []


def test_status_json_needs_status(tmp_path):
    run = snaprun("worker", "--json", cwd=tmp_path)
    assert run.returncode == 2 and "--json goes with --status" in run.stderr, run.stderr


def _pg_start(directory: str, data: str, port: int) -> None:
    """Start the stopped private server again, on its port (pgserver's own options)."""
    options = (
        f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c max_connections=300 "
        "-c shared_buffers=64MB"
    )
    command = [pgserver._binary("pg_ctl"), "-D", data, "-l", f"{directory}/log2", "-o", options]
    subprocess.run(
        pgserver._as_postgres([*command, "-w", "start"]),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_a_worker_on_postgresql_says_it_reconnects_and_goes_on(tmp_path):
    """Crash window: the store's PostgreSQL server stops while the worker waits for
    jobs. The worker's heartbeat is listed by --status (the workers table, PostgreSQL
    migration 2); with the server down its scan fails and it logs a `reconnect` JSON
    event (no traceback, it keeps running); once the server is back it beats again and
    runs a job created meanwhile to done. A private server, so no other test's
    connections are cut."""
    if not pgserver._binary("initdb"):
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    pytest.importorskip("psycopg")
    directory = tempfile.mkdtemp(prefix="snapstate-pg-")
    os.chmod(directory, 0o755)
    url, data = pgserver.start_server(directory)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    env = dict(os.environ, PYTHONUNBUFFERED="1", SNAPSTATE_KEY="ab" * 32, SNAPSTATE_STORE=url)
    worker = None
    try:
        init = snaprun("init", cwd=tmp_path, env=env)
        assert init.returncode == 0, init.stderr
        worker = start_worker(tmp_path, env, "--poll", "0.2", "--log-format", "json")

        def status() -> list[dict]:
            out = snaprun("worker", "--status", "--json", cwd=tmp_path, env=env)
            return json.loads(out.stdout) if out.returncode == 0 else []

        wait_until("its heartbeat", lambda: [w["pid"] for w in status()] == [worker.pid])
        pgserver.stop_server(data)
        wait_until(
            "a reconnect event",
            lambda: any(
                r["event"] == "reconnect"
                for r in _json_lines((tmp_path / "worker.err").read_text())
            ),
            timeout=90,
        )
        assert worker.poll() is None
        _pg_start(directory, data, port)
        pgserver.wait_until_up(url)
        loop = snaprun(
            "run", "--job", "pgjob", AGENTS / "wk_crashloop.py", "two", cwd=tmp_path, env=env
        )
        assert loop.returncode == -signal.SIGKILL, loop.stderr
        wait_until(
            "the worker runs the new job",
            lambda: (
                "pgjob" in [r["job"] for r in _json_lines((tmp_path / "worker.err").read_text())]
            ),
            timeout=90,
        )
        wait_until("its heartbeat again", lambda: [w["pid"] for w in status()] == [worker.pid])
        log = (tmp_path / "worker.err").read_text()
        assert "Traceback" not in log, log
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 143
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        pgserver.stop_server(data, "immediate")
        shutil.rmtree(directory, ignore_errors=True)
