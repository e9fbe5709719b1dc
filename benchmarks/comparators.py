"""What the side-by-side benchmarks need of LangGraph and DBOS, the comparators.

Standard library only at import time: a comparator's child process imports this module
and never snapstate, so what it pays to start is its own.

bench_conversation.py, bench_recovery.py and bench_effect.py use it: which comparators
are installed (the `bench` extra), DBOS's configuration on a SQLite file (with the
`unixepoch('subsec')` shim an older SQLite needs), and the SQLite settings each system's
connections run with, read from the connections themselves (so a claim such as "DBOS
commits with synchronous=NORMAL" is checked, never assumed).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sqlite3
import subprocess
import sys
import time
from typing import Any

PACKAGES = {
    "snapstate": ("snapstate",),
    "langgraph": ("langgraph", "langgraph-checkpoint-sqlite"),
    "dbos": ("dbos",),
}
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def run_child(
    script: str, system: str, count: tuple[str, int], base: str, round_no: int
) -> tuple[str, dict[str, Any]]:
    """Run one system's measurement in a fresh process: `script --child SYSTEM
    --<count> N --child-folder F --child-out O` (bench_effect.py, bench_conversation.py),
    and return (F, what the child wrote to O: its timings file's path among it). A failed
    child stops the benchmark, showing the end of what it printed."""
    folder = os.path.join(base, f"{system}-{round_no}")
    out = folder + ".json"
    flag, n = count
    proc = subprocess.run(
        [sys.executable, os.path.abspath(script), "--child", system, flag, str(n),
         "--child-folder", folder, "--child-out", out],
        cwd=os.path.dirname(os.path.abspath(script)), capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        name = os.path.splitext(os.path.basename(script))[0]
        raise SystemExit(f"{name}: the {system} run failed (exit {proc.returncode})")
    with open(out) as f:
        info: dict[str, Any] = json.load(f)
    return folder, info


def versions(system: str) -> str | None:
    """The installed versions of a system's packages, or None when one is missing."""
    found = []
    for package in PACKAGES[system]:
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            return None
    return ", ".join(found)


def sqlite_settings(conn: Any) -> dict[str, str]:
    """journal_mode and synchronous of an open DB-API sqlite3 connection."""
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    return {
        "journal_mode": str(journal).lower(),
        "synchronous": SYNCHRONOUS.get(int(synchronous), str(synchronous)),
    }


def dbos_sqlite_settings() -> dict[str, str]:
    """The SQLite settings of a connection from the launched DBOS's system database."""
    from dbos._dbos import _get_dbos_instance

    engine = _get_dbos_instance()._sys_db.engine
    with engine.connect() as conn:
        return sqlite_settings(conn.connection.dbapi_connection)


def unixepoch_shim() -> bool:
    """DBOS's SQLite schema stamps rows with `unixepoch('subsec')`, which SQLite gained in
    3.42: an older SQLite returns NULL and DBOS's launch fails on a NOT NULL column. There,
    every SQLAlchemy connection gets a `unixepoch('subsec')` of its own (the same value:
    seconds since the epoch, with a fraction). Returns whether the shim was needed."""
    if sqlite3.sqlite_version_info >= (3, 42):
        return False
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def unixepoch(modifier: str) -> float:
        if modifier != "subsec":
            raise ValueError(f"the benchmark's unixepoch() shim knows 'subsec', not {modifier!r}")
        return time.time()

    def register(dbapi_conn: Any, _record: Any) -> None:
        if isinstance(dbapi_conn, sqlite3.Connection):
            dbapi_conn.create_function("unixepoch", 1, unixepoch, deterministic=False)

    event.listen(Engine, "connect", register)
    return True


def dbos_config(name: str, database: str) -> dict[str, Any]:
    """DBOS on the SQLite file `database`, logging warnings only."""
    return {
        "name": name,
        "system_database_url": f"sqlite:///{database}",
        "log_level": "WARNING",
    }
