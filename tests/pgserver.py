"""A real PostgreSQL server for the tests: the one `.ci/run` starts (SNAPSTATE_TEST_PG, a
postgresql:// URL of a superuser), or else a private one started here (Debian's
`initdb` and `pg_ctl` into a temporary directory, on a free port of 127.0.0.1; as root
it runs as the `postgres` user, as initdb requires), stopped at the end of the session.
Without either the PostgreSQL tests skip, saying why, unless SNAPSTATE_TEST_REQUIRE_PG=1
(.ci/run sets it), which makes them fail.

`fresh_database()` creates an empty database per test (dropped afterwards), so every
test sees a store of its own; `private_server()` starts a server of the test's own, for
the tests that restart or stop it (SNAPSTATE_TEST_KEEP_PG=1 keeps its folder and log).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

_SERVER: dict[str, object] = {}


def _binary(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def start_server(directory: str) -> tuple[str, str]:
    """initdb + pg_ctl start in `directory`: (superuser URL, data directory)."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if not initdb or not pg_ctl:
        raise RuntimeError("PostgreSQL's initdb/pg_ctl are not installed (Debian: postgresql)")
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres")
    data = os.path.join(directory, "data")
    subprocess.run(
        _as_postgres([initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]),
        check=True,
        capture_output=True,
    )
    port = _free_port()
    options = (
        f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 -c max_connections=300 "
        "-c shared_buffers=64MB"
    )
    subprocess.run(
        _as_postgres(
            [pg_ctl, "-D", data, "-l", os.path.join(directory, "log"), "-o", options, "-w", "start"]
        ),
        check=True,
        capture_output=True,
    )
    return f"postgresql://postgres@127.0.0.1:{port}/postgres", data


def stop_server(data: str, mode: str = "fast") -> None:
    pg_ctl = _binary("pg_ctl")
    assert pg_ctl
    subprocess.run(
        _as_postgres([pg_ctl, "-D", data, "-m", mode, "-w", "stop"]), capture_output=True
    )


def restart_server(data: str, mode: str = "fast") -> None:
    """Restart the server of `data` (the fault tests): every connection is cut."""
    pg_ctl = _binary("pg_ctl")
    assert pg_ctl
    # The server's output goes to its log file, never to a pipe of ours (which the new
    # server would hold open).
    log = os.path.join(os.path.dirname(data), "log")
    subprocess.run(
        _as_postgres([pg_ctl, "-D", data, "-m", mode, "-l", log, "-w", "restart"]),
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def server_url() -> str:
    """The superuser URL of the tests' server (started on first use)."""
    url = os.environ.get("SNAPSTATE_TEST_PG")
    if url:
        return url
    if "url" not in _SERVER:
        try:
            import psycopg  # noqa: F401 (the postgres extra)
        except ImportError:
            _unavailable("psycopg is not installed (pip install 'snapstate[postgres]')")
        if not _binary("initdb"):
            _unavailable("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        directory = tempfile.mkdtemp(prefix="snapstate-pg-")
        os.chmod(directory, 0o755)
        url, data = start_server(directory)
        _SERVER.update(url=url, data=data, directory=directory)

        def stop() -> None:
            stop_server(data, "immediate")
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(stop)
    return str(_SERVER["url"])


def _unavailable(why: str) -> None:
    if os.environ.get("SNAPSTATE_TEST_REQUIRE_PG") == "1":  # .ci/run sets it
        pytest.fail(f"{why}; SNAPSTATE_TEST_REQUIRE_PG=1 requires PostgreSQL")
    pytest.skip(why)


def database_url(name: str) -> str:
    base = server_url()
    return base.rsplit("/", 1)[0] + "/" + name


def create_database() -> str:
    """A new empty database: its URL."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return database_url(name)


def drop_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def private_server():
    """A server of the test's own, (superuser URL, data directory), stopped afterwards:
    for the tests that restart or stop the server, which must not cut the connections
    of other tests running beside them on the shared one."""
    server_url()  # skip (or fail) as the other PostgreSQL tests do without PostgreSQL
    if not _binary("initdb"):
        _unavailable("PostgreSQL's initdb is not installed (Debian: apt-get install postgresql)")
    directory = tempfile.mkdtemp(prefix="snapstate-pg-own-")
    os.chmod(directory, 0o755)
    url, data = start_server(directory)
    try:
        yield url, data
    finally:
        stop_server(data, "immediate")
        if not os.environ.get("SNAPSTATE_TEST_KEEP_PG"):  # kept to read its log
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def fresh_database():
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


def wait_until_up(url: str, timeout: float = 30.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
