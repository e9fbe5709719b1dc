"""Workers on many machines share one PostgreSQL store: several `snaprun worker`
processes against one real server (a private one: it is restarted), jobs with effects against a counting provider on
127.0.0.1 (tests/agents/wk_agent.py: plain jobs, timers hibernated before the workers
start, approvals decided during the run), while workers and their children are
SIGKILLed at random and the PostgreSQL server is restarted (every connection cut,
fast shutdown). Then every job is done exactly once: each order delivered once, each
marker written once, no live lease left. The default run is short (3 workers, 16 jobs,
one restart); --run-slow runs the issue's full size (4 workers, 200 jobs, two
restarts)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pgserver
import pytest
from helpers import AGENTS, SNAPRUN, snaprun, worker_runners
from providers import Provider

from snapstate.runtime._agent import EntryPoint
from snapstate.serializers._keys import KeyRing
from snapstate.serializers._postgres import PostgresCatalog
from snapstate.serializers._sealing import Sealer

AGENT = AGENTS / "wk_agent.py"
LATER = "7200"  # a worker two hours later: the 1 h timers are due


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def chaos(tmp: Path, *, workers_n: int, jobs: int, kills: int, restarts: int, seed: int) -> None:
    print(f"postgres chaos seed {seed} (rerun with SNAPSTATE_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    with pgserver.private_server() as (url, data), Provider() as provider:
        (tmp / "wk").mkdir()
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PROVIDER_URL=provider.url,
            PROVIDER_MODE="keyed",
            WK_DIR=str(tmp / "wk"),
            SNAPSTATE_STORE=url,
            SNAPSTATE_KEY_FILE=str(tmp / "keys.json"),
        )
        env.pop("SNAPSTATE_FAULT", None)
        env.pop("SNAPSTATE_HOME", None)
        assert snaprun("init", cwd=tmp, env=env).returncode == 0
        kinds = ["plain", "timer", "approval", "plain"]
        names = [f"j{i:03d}-{kinds[i % len(kinds)]}" for i in range(jobs)]
        # The store's catalog with its key, as snaprun opens it: the rows it writes are
        # signed (a row written without the key is refused as forged).
        store = PostgresCatalog(url, create=False)
        keys = tmp / "keys.json"
        store.sealer = Sealer(KeyRing(str(tmp), create=False, path=str(keys)), False)
        try:
            for i, job in enumerate(names):
                kind = kinds[i % len(kinds)]
                if kind == "plain":  # started from main() by a worker
                    store.create_job(job, EntryPoint.parse(str(AGENT)).as_dict(), [kind, job])
                else:  # hibernated before the workers start
                    run = snaprun("run", "--job", job, AGENT, kind, job, cwd=tmp, env=env)
                    assert run.returncode == 3, run.stderr
        finally:
            store.close()
        wenv = dict(env, SNAPSTATE_CLOCK_OFFSET=LATER)
        args = ("--concurrency", "3", "--poll", "0.2", "--grace", "5", "--max-crashes", "1000")

        def start(n: int) -> subprocess.Popen:
            with open(tmp / f"w{n}.out", "ab") as out, open(tmp / f"w{n}.err", "ab") as err:
                return subprocess.Popen(
                    [SNAPRUN, "worker", *args], cwd=tmp, env=wenv, stdout=out, stderr=err
                )

        workers = [start(n) for n in range(workers_n)]
        approved: set[str] = set()
        done_kills: list[str] = []
        done_restarts = 0
        started = time.monotonic()
        budget = 120 + jobs * 2.5

        def pending(store: PostgresCatalog) -> list[str]:
            done = {j.job_id for j in store.list_jobs() if j.status == "done"}
            return [j for j in names if j not in done]

        store = None
        try:
            while True:
                try:
                    store = store or PostgresCatalog(url, create=False)
                    left = pending(store)
                except Exception:  # the server restarting: ask again
                    if store is not None:
                        store.close()
                    store = None
                    time.sleep(0.2)
                    continue
                if not left:
                    break
                assert time.monotonic() - started < budget, (
                    f"jobs left: {left}; server log: "
                    + _read(Path(data).parent / "log")[-3000:]
                    + " worker logs: "
                    + " | ".join(_read(tmp / f"w{n}.err")[-1500:] for n in range(workers_n))
                )
                # a few decisions per round, so kills keep coming while jobs wait
                waiting = [j for j in left if "approval" in j and j not in approved]
                for job in rng.sample(waiting, min(2, len(waiting))):
                    if rng.random() < 0.5:
                        continue
                    try:
                        ids = [a.approval_id for a in store.approvals(job) if a.state == "pending"]
                    except Exception:  # the server restarting
                        continue
                    for approval_id in ids:
                        decided = snaprun(
                            "approve", job, approval_id, "--by", "chaos", cwd=tmp, env=env
                        )
                        assert decided.returncode in (0, 1), decided.stderr  # 1: restarting
                        if decided.returncode == 0:
                            approved.add(job)
                time.sleep(rng.uniform(0.05, 0.3))
                if done_restarts < restarts and rng.random() < 0.1 and len(left) < jobs * 0.8:
                    pgserver.restart_server(data)
                    done_restarts += 1
                    store.close()
                    store = None
                    continue
                if len(done_kills) >= kills:
                    continue
                n = rng.randrange(len(workers))
                if rng.random() < 0.3:
                    workers[n].kill()
                    workers[n].wait()
                    workers[n] = start(n)
                    done_kills.append(f"worker {n}")
                    continue
                victims = worker_runners(workers[n].pid)
                if victims:
                    try:
                        os.kill(rng.choice(victims), signal.SIGKILL)
                        done_kills.append(f"child of worker {n}")
                    except ProcessLookupError:
                        pass
            while done_restarts < restarts:  # the restarts happen, even in a short run
                pgserver.restart_server(data)
                done_restarts += 1
        finally:
            time.sleep(0.5)  # a worker restarted a moment ago installs its handler
            for w in workers:
                w.send_signal(signal.SIGTERM)
            codes = [w.wait(timeout=60) for w in workers]
            if store is not None:
                store.close()
        took = time.monotonic() - started
        print(f"{jobs} jobs, {len(done_kills)} kills, {done_restarts} restarts: {took:.1f}s")
        logs = " ".join(_read(tmp / f"w{n}.err") for n in range(workers_n))
        assert set(codes) <= {143, -15}, (codes, logs[-3000:])
        store = PostgresCatalog(url, create=False)
        try:
            now = time.time()
            for job in names:
                row = store.get_job(job)
                assert row.status == "done", (job, row.status, row.error)
                assert provider.deliveries[f"{job}-a"] == 1, (job, provider.deliveries)
                assert provider.deliveries[f"{job}-b"] == 1, (job, provider.deliveries)
                marks = _read(tmp / "wk" / f"{job}.mark").splitlines()
                assert len(marks) == 1, (job, marks)
                lease = store.get_lease(job)
                assert lease is None or not lease.is_live(now), (job, lease)
        finally:
            store.close()
        assert done_restarts == restarts


def test_workers_on_one_postgresql_store_finish_every_job_once_through_kills_and_a_restart(
    tmp_path,
):
    seed = int(os.environ.get("SNAPSTATE_CHAOS_SEED") or random.randrange(2**32))
    chaos(tmp_path, workers_n=3, jobs=16, kills=5, restarts=1, seed=seed)


@pytest.mark.slow
def test_postgres_chaos_full(tmp_path):
    """The issue's size: 4 workers, 200 jobs, kills, two server restarts."""
    seed = int(os.environ.get("SNAPSTATE_CHAOS_SEED") or random.randrange(2**32))
    chaos(tmp_path, workers_n=4, jobs=200, kills=40, restarts=2, seed=seed)


def test_a_runner_cut_off_from_the_database_sends_nothing_more(tmp_path):
    """The runner pauses right before recording its second order's dispatch; the
    server stops meanwhile. Continued, the runner cannot record the dispatch, so it
    sends nothing: it stops as the store's failure (exit 1, no traceback). With the
    server back, a resume (once the dead runner's lease expired) places the second
    and third orders; each order is delivered exactly once."""
    with pgserver.private_server() as (url, data), Provider() as provider:
        url += "?connect_timeout=2"  # a store failure is reported 2 s into the outage
        env = {
            "SNAPSTATE_KEY_FILE": str(tmp_path / "keys.json"),
            "SNAPSTATE_HOME": "",
            "SNAPSTATE_LEASE_TTL": "3",
            "PROVIDER_URL": provider.url,
            "PROVIDER_MODE": "keyed",
            "ORDERS": "3",
        }
        full_env = dict(
            os.environ, PYTHONUNBUFFERED="1", **env, SNAPSTATE_FAULT="effect-before-prepare:4:stop"
        )
        runner = subprocess.Popen(
            [SNAPRUN, "--store", url, "run", "--job", "shop", str(AGENTS / "shop.py")],
            cwd=tmp_path,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while True:  # paused at the fault point: state T in /proc
            with open(f"/proc/{runner.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "T":
                    break
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.02)
        assert sum(provider.deliveries.values()) == 1
        pgserver.stop_server(data, "fast")
        os.kill(runner.pid, signal.SIGCONT)
        out, err = runner.communicate(timeout=120)
        assert runner.returncode == 1, err
        assert b"Traceback" not in err and b"the store failed" in err, err
        assert sum(provider.deliveries.values()) == 1  # nothing more was sent
        pgserver.restart_server(data)
        time.sleep(3.5)  # the dead runner's lease expires
        resumed = snaprun("--store", url, "resume", "shop", cwd=tmp_path, env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "all placed 3" in resumed.stdout
        assert sorted(provider.deliveries.values()) == [1, 1, 1], provider.deliveries


def test_after_a_server_restart_the_next_statements_succeed_at_once():
    """Every pooled connection's session ends with a restart: the next statement gets a
    new connection at once (the dead ones are drained without a round trip each), not a
    store failure after the connect timeout, and again after a second restart."""
    import threading

    with pgserver.private_server() as (url, data):
        catalog = PostgresCatalog(url)
        try:
            catalog.create_job("j", {"module": "m", "function": "main"}, [])

            def use() -> None:
                for _ in range(5):
                    catalog.list_jobs()

            for _ in range(2):
                threads = [threading.Thread(target=use) for _ in range(4)]  # 4 connections
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                pgserver.restart_server(data)
                started = time.monotonic()
                assert [j.job_id for j in catalog.list_jobs()] == ["j"]
                assert time.monotonic() - started < 2.0
                assert catalog.wait_for_change(0.1) is False  # the listener reconnects
        finally:
            catalog.close()
