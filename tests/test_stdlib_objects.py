"""Standard-library objects an agent holds need no wrapping: logging handlers and
loggers, sqlite3 cursors and csv writers survive a SIGKILL right after any snapshot
(resources/_stdlib.py), and what cannot be saved is refused in the user's words with
the fix for that kind of object (serializers/_describe.py)."""

from __future__ import annotations

import csv
import logging
import logging.handlers
import re
import sqlite3
import sys

import pytest
from chunked import snapshot_seqs
from helpers import AGENTS, snaprun

from snapstate.serializers import _pickler

OBJECTS = AGENTS / "stdlib_objects.py"
KINDS = AGENTS / "refusal_kinds.py"
FILES = ("agent.log", "steps.csv", "named.csv")


def _outputs(directory) -> dict[str, str]:
    return {name: (directory / name).read_text() for name in FILES}


def test_handlers_cursor_and_csv_writers_survive_a_kill_after_each_snapshot(tmp_path):
    """Crash window: killed right after snapshot k (every k) and resumed, the agent's
    stdout (a StreamHandler and a csv.writer on sys.stdout, prints), its log file (a FileHandler
    attached at run time), and its two csv files (csv.writer, csv.DictWriter) are
    byte-identical to an uninterrupted run: no line lost or written twice; handlers stay
    on their logger with level, formatter, filter and encoding, the cursor keeps its
    connection, row_factory and arraysize, the writers their dialect."""
    (tmp_path / "base").mkdir()
    base = snaprun(
        "run", "--store", tmp_path / "s", "--job", "base", OBJECTS, tmp_path / "base", cwd=tmp_path
    )
    assert base.returncode == 0, base.stderr
    assert (
        "checks True 10 False 10 %(levelname)s:%(name)s:%(message)s True utf-8 True 20 "
        "True True 3 ; 2 ignore" in base.stdout
    )
    expected = _outputs(tmp_path / "base")
    assert expected["agent.log"].count("\n") == 12 and "secret" not in expected["agent.log"]
    count = len(snapshot_seqs(tmp_path / "s", "base"))
    assert count == 4 and "report|3|9\n" in base.stdout and "cube 27 agent-worker" in base.stdout
    assert "finished pool: cannot schedule new futures after shutdown" in base.stdout
    for k in range(1, count + 1):
        out = tmp_path / f"kill{k}"
        out.mkdir()
        killed = snaprun(
            "run",
            "--store",
            tmp_path / "s",
            "--job",
            f"k{k}",
            OBJECTS,
            out,
            cwd=tmp_path,
            fault=f"after-snapshot:{k}",
        )
        assert killed.returncode == -9, killed.stderr
        resumed = snaprun("resume", "--store", tmp_path / "s", f"k{k}", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
        assert killed.stdout + resumed.stdout == base.stdout, f"stdout diverged after {k}"
        assert _outputs(out) == expected, f"files diverged after snapshot {k}"
        assert resumed.result == base.result == "3"


def test_handlers_cursor_and_csv_writers_survive_a_chain_of_kills(tmp_path):
    """Crash window, chained: killed after snapshot 1, resumed and killed after 2, ...
    each restore saving objects that were themselves restored; stdout and files end
    identical to an uninterrupted run."""
    (tmp_path / "base").mkdir()
    base = snaprun(
        "run", "--store", tmp_path / "s", "--job", "base", OBJECTS, tmp_path / "base", cwd=tmp_path
    )
    assert base.returncode == 0, base.stderr
    (tmp_path / "chain").mkdir()
    run = snaprun(
        "run",
        "--store",
        tmp_path / "s",
        "--job",
        "chain",
        OBJECTS,
        tmp_path / "chain",
        cwd=tmp_path,
        fault="after-snapshot:1",
    )
    output = run.stdout
    for k in range(1, 5):
        assert run.returncode == -9, run.stderr
        run = snaprun(
            "resume",
            "--store",
            tmp_path / "s",
            "chain",
            cwd=tmp_path,
            fault=f"after-snapshot:{k + 1}",
        )
        output += run.stdout
    assert run.returncode == 0, run.stderr
    assert output == base.stdout
    assert _outputs(tmp_path / "chain") == _outputs(tmp_path / "base")


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kinds")
    run = snaprun("run", "--store", workdir / "store", "--job", "job", KINDS, workdir, cwd=workdir)
    assert run.returncode == 0, run.stderr
    return run, dict(re.findall(r"REFUSED ([\w-]+): (.*)", run.stdout))


@pytest.mark.parametrize(
    "case, names, fix",
    [
        (
            "cursor-mid-result-set",
            "local 'rows' is a sqlite3 cursor",
            "fetch the rows (rows = cursor.fetchall()) before snapshot()",
        ),
        (
            "event-loop",
            "local 'loop' is an asyncio event loop",
            "close it (loop.close()) before snapshot() and create a new one after it",
        ),
        (
            "thread-pool",
            "local 'pool' is a ThreadPoolExecutor",
            "has work queued or running at the snapshot; wait for its futures",
        ),
        (
            "pending-future",
            "local 'fut' is a concurrent.futures Future",
            "wait for it (result = future.result()) before snapshot()",
        ),
        (
            "socket-in-object",
            "local 'client' (a refusal_kinds.ApiClient) holds a socket at local 'client'.sock",
            "snapstate.resource(factory)",
        ),
        (
            "queue-handler",
            "local 'handler' is a logging handler (logging.handlers.QueueHandler)",
            "remove it from its logger before snapshot()",
        ),
        ("csv-reader", "local 'reader' is a csv.reader", "read the rows (rows = list(reader))"),
    ],
)
def test_refusal_names_the_users_object_and_the_fitting_fix(refusals, case, names, fix):
    """Each refusal starts with the local and what it is as the user wrote it, then the
    internal path, then the fix for that kind; resource() is offered only where it fits."""
    message = refusals[1][case]
    assert re.match(rf"snapshot \d+ \({case}\) failed: {re.escape(names)}", message), message
    assert f"frame main() at {KINDS}:" in message
    assert fix in message
    if case != "socket-in-object":
        assert "resource(" not in message, message


def test_refused_objects_leave_the_job_running(refusals):
    """Only the refusals above were refused; a fully fetched cursor, an idle event loop, an
    idle executor, a done future and an executor after its `with` block were saved."""
    run, messages = refusals
    assert sorted(messages) == sorted(
        [
            "cursor-mid-result-set",
            "event-loop",
            "thread-pool",
            "pending-future",
            "socket-in-object",
            "queue-handler",
            "csv-reader",
        ]
    )
    for saved in (
        "cursor-fetched",
        "event-loop-idle",
        "thread-pool-idle",
        "done-future",
        "after-with-pool",
        "good-after",
    ):
        assert f"TAKEN {saved}" in run.stdout
    assert run.result == "'carried on'"


# ------------------------------------------------------------------------ in-process details
def test_rotating_and_watched_handlers_keep_their_settings(tmp_path):
    """A RotatingFileHandler keeps maxBytes/backupCount and rotates after the restore; a
    WatchedFileHandler watches the reopened file; a handler on sys.stderr writes to the
    current sys.stderr; the handler's name registration follows the copy."""
    rotating = logging.handlers.RotatingFileHandler(
        tmp_path / "r.log", maxBytes=60, backupCount=2, encoding="utf-8"
    )
    watched = logging.handlers.WatchedFileHandler(tmp_path / "w.log", delay=True)
    errors = logging.StreamHandler(sys.stderr)
    errors.set_name("to-stderr")
    try:
        rotating.emit(logging.makeLogRecord({"msg": "first line"}))
        r, w, e = _pickler.loads(_pickler.dumps((rotating, watched, errors)))
    finally:
        rotating.close()
        watched.close()
    try:
        assert (r.maxBytes, r.backupCount, r.encoding, r.mode) == (60, 2, "utf-8", "a")
        assert w.stream is None and w.delay
        assert e.stream is sys.stderr and logging._handlers["to-stderr"] is e
        for i in range(5):
            r.emit(logging.makeLogRecord({"msg": f"line {i} after the restore"}))
        assert (tmp_path / "r.log.1").exists()
        assert (
            "first line" in (tmp_path / "r.log.1").read_text() + (tmp_path / "r.log.2").read_text()
        )
        w.emit(logging.makeLogRecord({"msg": "watched"}))
        assert (tmp_path / "w.log").read_text() == "watched\n" and w.ino is not None
    finally:
        r.close()
        w.close()


def test_logger_keeps_handlers_attached_at_run_time(tmp_path):
    """A logger pickles by name; its level and the handlers attached at run time come
    back on it, replacing (and closing) the ones a fresh import attached instead."""
    log = logging.getLogger("snapstate-test.runtime-handlers")
    handler = logging.FileHandler(tmp_path / "a.log")
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    data = _pickler.dumps({"log": log, "handler": handler})
    handler.close()
    log.removeHandler(handler)
    log.setLevel(logging.NOTSET)
    fresh = logging.FileHandler(tmp_path / "fresh.log")  # what a fresh import attached
    log.addHandler(fresh)
    copy = _pickler.loads(data)
    try:
        assert copy["log"] is log and log.handlers == [copy["handler"]]
        assert log.level == logging.WARNING and fresh.stream is None  # closed
    finally:
        copy["handler"].close()
        log.handlers.clear()
        fresh.close()


def test_cursor_states(tmp_path):
    """A fetched cursor is recreated on the same (reopened) connection; a closed one
    restores closed; one with rows left is refused until they are fetched (the last row
    fetched by fetchmany or fetchone ends the result set, no extra fetch needed)."""
    conn = sqlite3.connect(tmp_path / "db")
    try:
        conn.execute("CREATE TABLE t (n)")
        conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
        conn.commit()
        done, closed, pending = conn.cursor(), conn.cursor(), conn.cursor()
        done.execute("SELECT n FROM t").fetchmany(3)
        done.fetchone()
        closed.close()
        pending.execute("SELECT n FROM t").fetchmany(2)  # one row left
        copy = _pickler.loads(_pickler.dumps([conn, done, closed]))
        try:
            assert copy[1].connection is copy[0] and copy[1].execute("SELECT 7").fetchone() == (7,)
            with pytest.raises(sqlite3.ProgrammingError, match="closed cursor"):
                copy[2].execute("SELECT 1")
        finally:
            copy[0].close()
        with pytest.raises(_pickler.UnpicklableError, match="middle of a result set"):
            _pickler.dumps(pending)
        pending.fetchall()
        _pickler.dumps(pending)
    finally:
        conn.close()


def test_csv_writer_keeps_its_file_and_dialect(tmp_path):
    """A csv.writer over an open file is rebuilt over the reopened file with every
    dialect parameter; one over a StringIO keeps writing into the restored StringIO."""
    import io

    with open(tmp_path / "o.csv", "w", newline="") as f:
        writer = csv.writer(
            f,
            dialect="excel-tab",
            quoting=csv.QUOTE_MINIMAL,
            escapechar="\\",
            lineterminator="\n",
            doublequote=False,
        )
        writer.writerow(["a", 'say "hi"'])
        buffer = io.StringIO()
        other = csv.writer(buffer)
        other.writerow([1, 2])
        copy = _pickler.loads(_pickler.dumps({"w": writer, "f": f, "o": other, "b": buffer}))
    try:
        copy["w"].writerow(["b", "tab\tin"])
        copy["o"].writerow([3, 4])
        for field in (
            "delimiter",
            "quotechar",
            "escapechar",
            "doublequote",
            "lineterminator",
            "quoting",
            "skipinitialspace",
            "strict",
        ):
            assert getattr(copy["w"].dialect, field) == getattr(writer.dialect, field)
    finally:
        copy["f"].close()
    assert (tmp_path / "o.csv").read_text() == 'a\tsay \\"hi\\"\nb\t"tab\tin"\n'
    assert copy["b"].getvalue() == "1,2\r\n3,4\r\n"


def test_logger_with_a_handler_that_cannot_be_saved_is_refused_naming_both(tmp_path):
    """A logger is saved with its handlers, so one it cannot save refuses the snapshot
    (never a logger silently missing a handler): the refusal names the logger, the path
    to the bad part inside the handler, and says to remove that handler first."""
    import queue

    log = logging.getLogger("snapstate-test.queue-handler")
    handler = logging.handlers.QueueHandler(queue.SimpleQueue())
    log.addHandler(handler)
    try:
        with pytest.raises(_pickler.UnpicklableError) as info:
            _pickler.dumps(log, roots=lambda: [("module agent, global 'LOG'", log)])
    finally:
        log.removeHandler(handler)
    assert str(info.value).startswith(
        "global 'LOG' is the logger 'snapstate-test.queue-handler' (logging.Logger), which "
        "cannot be saved: module agent, global 'LOG'.handlers[0].queue -> _queue.SimpleQueue"
    )
    assert "remove that handler from the logger before snapshot()" in info.value.fix


def test_delayed_file_handler_and_cursor_subclass(tmp_path):
    """A FileHandler made with delay=True and not opened yet comes back unopened on the
    same log; lines written after the snapshot (by another writer, or before a crash) are
    never cut off (a log may be shared), and the handler appends after them. A cursor of a sqlite3.Cursor subclass comes
    back as that class with its own attributes."""
    log_path = tmp_path / "delayed.log"
    log_path.write_text("earlier run\n")
    handler = logging.FileHandler(log_path, delay=True)

    class Tagged(sqlite3.Cursor):
        pass

    conn = sqlite3.connect(tmp_path / "db")
    cursor = conn.cursor(Tagged)
    cursor.tag = "mine"
    try:
        data = _pickler.dumps({"handler": handler, "conn": conn, "cursor": cursor})
        with open(log_path, "a") as f:
            f.write("logged after the snapshot\n")
        copy = _pickler.loads(data)
    finally:
        handler.close()
        cursor.close()
        conn.close()
    try:
        assert log_path.read_text() == "earlier run\nlogged after the snapshot\n"
        copy["handler"].emit(logging.makeLogRecord({"msg": "again"}))
        assert log_path.read_text() == "earlier run\nlogged after the snapshot\nagain\n"
        assert type(copy["cursor"]) is Tagged and copy["cursor"].tag == "mine"
        assert copy["cursor"].connection is copy["conn"]
    finally:
        copy["handler"].close()
        copy["cursor"].close()
        copy["conn"].close()


def test_other_handlers_are_registered_for_shutdown(tmp_path):
    """A MemoryHandler is saved with its buffer unflushed (flushing at the snapshot would
    change what its target gets) and comes back registered for logging.shutdown(), which
    flushes its buffer into the restored target at exit."""
    target = logging.FileHandler(tmp_path / "target.log")
    memory = logging.handlers.MemoryHandler(capacity=10, target=target)
    memory.emit(logging.makeLogRecord({"msg": "buffered", "levelno": logging.INFO}))
    try:
        copy = _pickler.loads(_pickler.dumps(memory))
        assert (tmp_path / "target.log").read_text() == ""
        memory.buffer.clear()
    finally:
        memory.close()
        target.close()
    assert [r.getMessage() for r in copy.buffer] == ["buffered"] and copy.capacity == 10
    assert any(ref() is copy for ref in logging._handlerList)
    assert any(ref() is copy.target for ref in logging._handlerList)
    restored_target = copy.target
    logging.shutdown([ref for ref in logging._handlerList if ref() in (copy, restored_target)])
    restored_target.close()  # shutdown may close the target before the memory handler
    assert (tmp_path / "target.log").read_text() == "buffered\n"


def test_thread_pool_states():
    """An idle pool comes back with its settings and runs work; one with work running
    is refused, also after shutdown(wait=False); after shutdown() it comes back shut
    down (submit raises as before)."""
    import concurrent.futures
    import threading

    def setup(tag):
        threading.current_thread().tag = tag

    pool = concurrent.futures.ThreadPoolExecutor(
        3, thread_name_prefix="w", initializer=setup, initargs=("t",)
    )
    release = threading.Event()
    try:
        pool.submit(pow, 2, 2).result()
        copy = _pickler.loads(_pickler.dumps(pool))
        tag = copy.submit(lambda: threading.current_thread().tag).result()
        assert (copy._max_workers, copy._thread_name_prefix, tag) == (3, "w", "t")
        copy.shutdown()
        pool.submit(release.wait)
        with pytest.raises(_pickler.UnpicklableError, match="work queued or running"):
            _pickler.dumps(pool)
        pool.shutdown(wait=False)
        with pytest.raises(_pickler.UnpicklableError, match="work queued or running"):
            _pickler.dumps(pool)
    finally:
        release.set()
        pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        _pickler.loads(_pickler.dumps(pool)).submit(int)
