"""Workers sharing a PostgreSQL store vs the embedded SQLite store (issue 21).

    python benchmarks/bench_postgres.py [--pg URL] [--jobs 60] [--effects 200]
                                        [--approvals 5] [--workers 1,2,4] [--rounds 1]
                                        [--json FILE]

Three measurements, each on a fresh store per round (a new database on the server for
PostgreSQL, a new directory for SQLite), printed as medians with their spread:

1. jobs resumed per second with 1, 2 and 4 workers (`snaprun worker --concurrency 2`
   each): `--jobs` jobs are started through the public API and hibernate at once on a
   0.2 s timer (growth_agents.worker_main); once due, the workers drain them (each job
   restored once, two snapshots, done). From the first worker's launch to the last job
   done.
2. effects per second with 1, 2 and 4 jobs running at once (`snaprun run` processes of
   growth_agents.effects_main, `--effects` recorded effects each, a snapshot every 50):
   every effect is a dispatch and an outcome in the ledger, so this is the catalog's
   write rate under concurrent writers.
3. an approval's decision to the job running again: a job waits on an approval, one
   worker runs (its default poll, 2 s), the driver approves through the public API and
   the job notes the moment it runs again. PostgreSQL wakes the worker with
   LISTEN/NOTIFY; SQLite's worker finds the decision at its next poll.

The PostgreSQL server: --pg (a superuser URL; databases are created and dropped), else
$SNAPSTATE_BENCH_PG or $SNAPSTATE_TEST_PG, else a private server started here with
Debian's initdb/pg_ctl (as the postgres user when run as root) and stopped at the end.
Keys: a key file in the round's folder (SNAPSTATE_KEY_FILE). Speed is printed, never
asserted; the machine's facts go with the figures into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import growth_agents as agents  # noqa: E402

from snapstate import JobStatus, Store  # noqa: E402

WAIT = 0.2


def snaprun() -> str:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("snaprun", path=path)
    if found is None:
        raise SystemExit("bench_postgres: no `snaprun` beside this Python or on PATH")
    return found


# ------------------------------------------------------------------ the server
class Server:
    """The PostgreSQL server of the run: given, or started here."""

    def __init__(self, url: str | None):
        self.url, self.data, self.directory = url, None, None
        if self.url:
            return
        initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb")]
        if not initdb[-1]:
            raise SystemExit("bench_postgres: no --pg URL and no PostgreSQL initdb installed")
        bin_dir = os.path.dirname(initdb[-1])
        self.pg_ctl = os.path.join(bin_dir, "pg_ctl")
        self.directory = tempfile.mkdtemp(prefix="bench-pg-")
        os.chmod(self.directory, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
        self.data = os.path.join(self.directory, "data")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self._run([initdb[-1], "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync"])
        options = f"-p {port} -k {self.directory} -c listen_addresses=127.0.0.1"
        log = os.path.join(self.directory, "log")
        self._run([self.pg_ctl, "-D", self.data, "-l", log, "-o", options, "-w", "start"])
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _run(self, cmd: list[str]) -> None:
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(
            cmd,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def database(self) -> str:
        import psycopg

        assert self.url
        name = "bench_" + uuid.uuid4().hex[:10]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def drop(self, url: str) -> None:
        import psycopg

        assert self.url
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def stop(self) -> None:
        if self.data:
            self._run([self.pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop"])
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


# ------------------------------------------------------------------ helpers
def _lines(path: str) -> list[str]:
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _env(base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SNAPSTATE_HIBERNATE_AFTER"}
    env["SNAPSTATE_KEY_FILE"] = os.path.join(base, "keys.json")
    return env


class _Keys:
    """SNAPSTATE_KEY_FILE for this process while the driver uses the public API."""

    def __init__(self, base: str):
        self.path, self.saved = os.path.join(base, "keys.json"), None

    def __enter__(self) -> None:
        self.saved = os.environ.get("SNAPSTATE_KEY_FILE")
        os.environ["SNAPSTATE_KEY_FILE"] = self.path

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            os.environ.pop("SNAPSTATE_KEY_FILE", None)
        else:
            os.environ["SNAPSTATE_KEY_FILE"] = self.saved


def _stop(workers: list[subprocess.Popen]) -> None:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(timeout=60)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


# ------------------------------------------------------------------ 1. jobs per second
def drain(location: str, base: str, jobs: int, workers: int) -> float:
    done = os.path.join(base, "done")
    with _Keys(base):
        store = Store(location)
        os.environ["SNAPSTATE_HIBERNATE_AFTER"] = "0"
        try:
            last_due = 0.0
            for n in range(jobs):
                result = store.start(agents.worker_main, str(WAIT), done, job_id=f"job{n:04d}")
                if result.status != JobStatus.WAITING or result.wait is None:
                    raise SystemExit(f"bench_postgres: job{n:04d} ended {result.status}")
                last_due = max(last_due, result.wait.due or 0.0)
        finally:
            del os.environ["SNAPSTATE_HIBERNATE_AFTER"]
    while time.time() < last_due + 0.05:
        time.sleep(0.05)
    command = [snaprun(), "worker", "--store", location, "--concurrency", "2", "--poll", "0.5"]
    env = _env(base)
    launched = time.time()
    procs = []
    for n in range(workers):
        with open(os.path.join(base, f"worker{n}.log"), "wb") as log:
            procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))
    deadline = time.monotonic() + max(120.0, 3.0 * jobs)
    try:
        while len(_lines(done)) < jobs:
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_postgres: {len(_lines(done))} of {jobs} jobs done")
            time.sleep(0.02)
        with _Keys(base):
            views = Store(location).jobs()
    finally:
        _stop(procs)
    last = max(v.updated for v in views)
    return jobs / (last - launched)


# ------------------------------------------------------------------ 2. effects per second
def effects(location: str, base: str, effects_per_job: int, jobs: int) -> float:
    done = os.path.join(base, "done")
    env = _env(base)
    agent = "growth_agents:effects_main"  # importable from HERE (PYTHONPATH)
    env["PYTHONPATH"] = HERE
    subprocess.run(
        [snaprun(), "init", "--store", location], env=env, check=True, capture_output=True
    )
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                snaprun(),
                "run",
                "--store",
                location,
                "--job",
                f"fx{n}",
                agent,
                str(effects_per_job),
                done,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in range(jobs)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"bench_postgres: an effects job failed: {err.decode()[-500:]}")
    return jobs * effects_per_job / (time.monotonic() - start)


# ------------------------------------------------------------------ 3. approval latency
def approval_latency(location: str, base: str, count: int) -> list[float]:
    done = os.path.join(base, "done")
    env = _env(base)
    with _Keys(base):
        store = Store(location)
        for n in range(count):
            result = store.start(agents.approval_main, done, job_id=f"ap{n}")
            if result.status != JobStatus.WAITING:
                raise SystemExit(f"bench_postgres: ap{n} ended {result.status}")
    log = open(os.path.join(base, "worker.log"), "wb")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen(
        [snaprun(), "worker", "--store", location], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    samples = []
    try:
        time.sleep(1.0)  # the worker is up and idle
        with _Keys(base):
            store = Store(location)
            for n in range(count):
                before = len(_lines(done))
                time.sleep(0.37 * (n % 3))  # decisions fall at various points of a poll
                pending = [a for a in store.approvals() if a.job_id == f"ap{n}"]
                decided = time.time()
                store.approve(f"ap{n}", pending[0].approval_id, by="bench")
                deadline = time.monotonic() + 30
                while len(_lines(done)) == before:
                    if time.monotonic() > deadline:
                        raise SystemExit("bench_postgres: an approved job did not run again")
                    time.sleep(0.005)
                samples.append(float(_lines(done)[-1]) - decided)
    finally:
        _stop([worker])
        log.close()
    return samples


# ------------------------------------------------------------------ driver
def _fmt(samples: list[float], unit: str) -> str:
    med = statistics.median(samples)
    return f"{med:8.2f} {unit} (min {min(samples):.2f}, max {max(samples):.2f}, n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default=None, help="a superuser postgresql:// URL")
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--effects", type=int, default=200)
    parser.add_argument("--approvals", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    url = args.pg or os.environ.get("SNAPSTATE_BENCH_PG") or os.environ.get("SNAPSTATE_TEST_PG")
    server = Server(url)
    print(
        f"bench_postgres: Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}; server {'given' if url else 'started here'}"
    )

    def each(kind: str, measure) -> list:  # type: ignore[no-untyped-def]
        out = []
        for _ in range(args.rounds):
            base = tempfile.mkdtemp(prefix="bench-pg-round-")
            location = server.database() if kind == "postgresql" else os.path.join(base, "store")
            try:
                out.append(measure(location, base))
            finally:
                if kind == "postgresql":
                    server.drop(location)
                shutil.rmtree(base, ignore_errors=True)
        return out

    results: dict = {"jobs": args.jobs, "effects": args.effects}
    try:
        for kind in ("sqlite", "postgresql"):
            found = results[kind] = {"jobs_per_s": {}, "effects_per_s": {}}
            for n in counts:
                rates = each(kind, lambda loc, base, n=n: drain(loc, base, args.jobs, n))
                found["jobs_per_s"][n] = rates
                print(f"{kind:10s} jobs/s, {n} worker(s) x2:  {_fmt(rates, 'jobs/s')}")
            for n in counts:
                rates = each(kind, lambda loc, base, n=n: effects(loc, base, args.effects, n))
                found["effects_per_s"][n] = rates
                print(f"{kind:10s} effects/s, {n} job(s) at once: {_fmt(rates, 'effects/s')}")
            lat = [
                s
                for r in each(kind, lambda loc, base: approval_latency(loc, base, args.approvals))
                for s in r
            ]
            found["approval_s"] = lat
            print(f"{kind:10s} approval -> running again:   {_fmt(lat, 's')}")
    finally:
        server.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
