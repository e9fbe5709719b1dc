"""Adapters for standard-library objects agents hold: logging handlers and loggers,
sqlite3 cursors, csv writers (registered on import; resources._adapters imports this).

    logging.Handler            any handler: rebuilt with its attributes and a new lock,
                               registered for logging.shutdown() like a new one once
                               fully rebuilt (passwords of SMTP/HTTP handlers sealed).
    logging.StreamHandler      and its subclasses (FileHandler, the rotating handlers,
                               WatchedFileHandler): rebuilt with the same attributes
                               (level, formatter, filters, name, encoding, mode...). A
                               file handler's file is flushed and fsynced at the snapshot
                               and reopened in append mode after the restore, created
                               again if it is gone (rotated away), never cut back: a log
                               may be shared with other writers, whose lines must never
                               be destroyed (a line the re-executed code logs again may
                               appear twice). A handler writing to the process's own
                               stdout or stderr (sys.__stdout__/__stderr__) writes to the
                               resumed process's; a redirected sys.stdout is a file like
                               any other. Any other stream is saved as itself (an open()
                               file through the file adapter).
    logging.Logger             still by name (as logging.Logger.__reduce__), plus its
                               level, propagate, disabled, filters and handlers: handlers
                               the agent attached at run time come back on it (those the
                               fresh import attached instead are removed, and closed
                               unless another logger uses them).
    sqlite3.Cursor             a new cursor (of the same class) on the (reopened)
                               connection with the same row_factory, arraysize and
                               description (its last query's columns); refused while a
                               statement has rows left to fetch, and after a statement
                               that changed rows (its rowcount and lastrowid cannot come
                               back). lastrowid after a query mirrors the connection's
                               last insert id, which a reopened connection does not have.
    csv.writer                 a new writer over the same (reopened) file with the same
                               dialect parameters; csv.DictWriter is a Python object
                               around one and follows. csv.reader is refused.
    ThreadPoolExecutor         an idle or shut-down executor comes back as a new one with
                               the same configuration (shut down if it was: `with
                               ThreadPoolExecutor() as pool:` before a snapshot); one with
                               work queued or running is refused.
    concurrent.futures.Future  a done future is saved as is; a pending or running one is
                               refused (its work cannot continue in another process).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import contextlib
import csv
import gc
import logging
import os
import pickle
import sqlite3
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, cast

from .._abi import pinned
from .._errors import ResourceReopenError
from ..serializers._describe import register_kind
from ._adapters import Reduced, _TextArgs, register_adapter, scratch_path
from ._http import sealed

if TYPE_CHECKING:
    from _csv import Writer
    from sqlite3 import _RowFactoryOptions  # typeshed's own alias

__all__: list[str] = []


def _std_stream(stream: object) -> str | None:
    """ "stdout"/"stderr" when `stream` is this process's own one (sys.__stdout__ /
    sys.__stderr__), or the current sys.stdout/stderr when that is not a file opened by
    path: a file from open() that sys.stdout is redirected to (contextlib.redirect_stdout)
    is saved as that file, not as the terminal."""
    for name in ("stdout", "stderr"):
        if stream is getattr(sys, f"__{name}__"):
            return name
        if stream is getattr(sys, name):
            path = getattr(stream, "name", None)
            if not (isinstance(path, str) and not path.startswith("<")):
                return name
    return None


# ------------------------------------------------------------------------ logging handlers
def _stream_spec(handler: logging.StreamHandler[Any]) -> tuple[Any, ...]:
    """How a handler's stream comes back: ("none",), ("std", "stdout"|"stderr"),
    ("append", path, position, text) for a file handler's own file, ("delayed", path,
    size) for one not opened yet, ("object", stream)."""
    stream = handler.stream
    if stream is None:
        if (
            isinstance(handler, logging.FileHandler)
            and not getattr(handler, "_closed", False)
            and "a" in handler.mode
        ):
            # delay=True, not opened yet: opened on first use, in the replay's scratch copy.
            try:
                return ("delayed", handler.baseFilename, os.path.getsize(handler.baseFilename))
            except OSError:
                return ("delayed", handler.baseFilename, 0)
        return ("none",)
    if _std_stream(stream):
        return ("std", _std_stream(stream))
    if (
        isinstance(handler, logging.FileHandler)
        and not stream.closed
        and os.path.abspath(getattr(stream, "name", "")) == handler.baseFilename
    ):
        stream.flush()
        with contextlib.suppress(OSError):  # durability is best effort (e.g. /dev/...)
            os.fsync(stream.fileno())
        return (
            "append",
            handler.baseFilename,
            stream.tell(),
            {"encoding": stream.encoding, "errors": stream.errors},
        )
    return ("object", stream)


def _sealed_credentials(attrs: dict[str, Any]) -> dict[str, Any]:
    """SMTPHandler's password and HTTPHandler's credentials=(user, password) sealed (or
    saved as a reference to the environment variable holding them), never in clear."""
    if isinstance(attrs.get("password"), str):
        attrs["password"] = sealed(attrs["password"])
    creds = attrs.get("credentials")
    if isinstance(creds, tuple) and len(creds) == 2 and isinstance(creds[1], str):
        attrs["credentials"] = (creds[0], sealed(creds[1]))
    return attrs


def _reduce_handler(handler: logging.Handler) -> Reduced:
    if not isinstance(handler, logging.StreamHandler):
        # Any other handler: its attributes as they are (a MemoryHandler's buffer is not
        # flushed: that would change what its target gets), with a new lock; passwords
        # (SMTPHandler, HTTPHandler) sealed.
        attrs = _sealed_credentials({k: v for k, v in handler.__dict__.items() if k != "lock"})
        return (_new_handler, (type(handler),), (attrs, ("keep",)), None, None, _set_handler_state)
    handler.flush()
    attrs = {k: v for k, v in handler.__dict__.items() if k not in ("lock", "stream")}
    return (
        _new_handler,
        (type(handler),),
        (attrs, _stream_spec(handler)),
        None,
        None,
        _set_handler_state,
    )


@pinned("new_log_handler")
def _new_handler(cls: type[logging.Handler]) -> logging.Handler:
    """A bare handler with a new lock; registered for logging.shutdown() only at the end
    of _set_handler_state (a half-built one would make shutdown raise at exit)."""
    handler = cls.__new__(cls)
    # _name and _closed: what Handler.__init__ sets (private: not in typeshed)
    handler._name, handler.level, handler.formatter, handler._closed = None, 0, None, False  # type: ignore[attr-defined]
    handler.filters = []
    handler.createLock()
    return handler


def _reopen_log(path: str, text: _TextArgs) -> TextIO:
    """A log file reopened for appending: created again if it was rotated away, never cut
    back (other writers' lines stay; a line logged again after a restore may repeat)."""
    try:
        return open(path, "a", **text)
    except OSError as exc:
        raise ResourceReopenError(
            f"log file {path} could not be reopened: {exc.strerror}. "
            "The snapshot is intact: fix the cause and resume the job "
            "again."
        ) from None


@pinned("set_log_handler_state")
def _set_handler_state(
    handler: logging.Handler, state: tuple[dict[str, Any], tuple[Any, ...]]
) -> None:
    attrs, spec = state
    name = attrs.pop("_name", None)
    if spec[0] == "append":
        path, _position, text = spec[1:]
        # A replay writes a scratch copy, never the original log (as the file adapter).
        attrs["baseFilename"] = scratch_path(attrs.get("baseFilename", path))
        stream = _reopen_log(scratch_path(path), text)
    elif spec[0] == "delayed":
        attrs["baseFilename"] = scratch_path(spec[1])
        stream = None
    elif spec[0] == "std":
        stream = getattr(sys, spec[1])  # the resumed process's stdout/stderr
    else:
        stream = spec[1] if spec[0] == "object" else None
    handler.__dict__.update(attrs)
    if spec[0] != "keep":  # a StreamHandler ("keep": any other handler)
        handler.stream = stream  # type: ignore[attr-defined]
    if name is not None:
        handler.set_name(name)  # logging._handlers[name]: this handler now
    if stream is not None and hasattr(handler, "_statstream"):
        handler._statstream()  # WatchedFileHandler: the reopened file's inode
    logging._addHandlerRef(handler)  # type: ignore[attr-defined]  # flushed and closed by logging.shutdown()


# A refusal looks for the part that cannot be saved among what the adapter saves.
_reduce_handler.parts = lambda h: (  # type: ignore[attr-defined]  # read by the pickler
    [(f".{k}", v) for k, v in h.__dict__.items() if k not in ("lock", "stream")]
    + (
        [(".stream", h.stream)]
        if isinstance(h, logging.StreamHandler) and _stream_spec(h)[0] == "object"
        else []
    )
)
# Every handler is rebuilt through Handler.__init__, so it is registered for the flush
# and close logging.shutdown() does at exit (a MemoryHandler's buffer reaches its target).
register_adapter(logging.Handler, _reduce_handler, subclasses=True)
register_adapter(logging.StreamHandler, _reduce_handler, subclasses=True)


# ------------------------------------------------------------------------ loggers
def _reduce_logger(logger: logging.Logger) -> Reduced:
    name = None if isinstance(logger, logging.RootLogger) else logger.name
    if logging.getLogger(name) is not logger:
        raise pickle.PicklingError(
            f"logger {logger.name!r} is not the one logging.getLogger("
            f"{logger.name!r}) returns, so it cannot be found again"
        )
    return (
        logging.getLogger,
        (name,) if name is not None else (),
        (
            logger.level,
            logger.propagate,
            logger.disabled,
            list(logger.filters),
            list(logger.handlers),
        ),
        None,
        None,
        _set_logger_state,
    )


@pinned("set_logger_state")
def _set_logger_state(
    logger: logging.Logger, state: tuple[int, bool, bool, list[Any], list[logging.Handler]]
) -> None:
    level, propagate, disabled, filters, handlers = state
    replaced = [h for h in logger.handlers if not any(h is k for k in handlers)]
    logger.setLevel(level)
    logger.propagate, logger.disabled = propagate, disabled
    logger.filters[:] = filters
    logger.handlers[:] = handlers
    for handler in replaced:  # attached by the fresh import, now unused
        if not _used_elsewhere(handler):
            handler.close()


def _used_elsewhere(handler: logging.Handler) -> bool:
    """Whether any logger still holds `handler` (a replaced one is closed only if not;
    runtime/_rootlog.py applies the same rule to the root logger)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return any(handler in getattr(lg, "handlers", ()) for lg in loggers)


_reduce_logger.parts = lambda lg: [  # type: ignore[attr-defined]  # read by the pickler
    (".handlers", lg.handlers),
    (".filters", lg.filters),
]
register_adapter(logging.Logger, _reduce_logger, subclasses=True)


# ------------------------------------------------------------------------ sqlite3 cursors
def _pending_statement(cursor: sqlite3.Cursor) -> bool:
    """True while the cursor has a statement with rows left to fetch. CPython 3.11-3.13
    keep that statement (a sqlite3.Statement) on the cursor and drop it once the last
    row has been fetched; gc.get_referents shows it (no public attribute does). 3.11
    also keeps an executemany's statement, which has no rows (description None)."""
    if cursor.description is None:
        return False
    return any(
        type(r).__name__ == "Statement" and type(r).__module__ == "sqlite3"
        for r in gc.get_referents(cursor)
    )


def _reduce_cursor(cursor: sqlite3.Cursor) -> Reduced:
    if _pending_statement(cursor):
        raise pickle.PicklingError(
            "a sqlite3 cursor is in the middle of a result set (rows not fetched yet); fetch "
            "the rows (rows = cursor.fetchall()) before snapshot() and keep them: a result "
            "set cannot be resumed in another process"
        )
    if cursor.rowcount != -1:
        # Its last statement changed rows (INSERT/UPDATE/DELETE, executemany): rowcount
        # and lastrowid are that statement's results, which a new cursor cannot get back.
        raise pickle.PicklingError(
            f"a sqlite3 cursor holds the result of a statement that changed rows (rowcount "
            f"{cursor.rowcount}, lastrowid {cursor.lastrowid}), which cannot be restored; "
            "keep what you need before snapshot() (n = cursor.rowcount, new_id = "
            "cursor.lastrowid) and drop the cursor (del cursor, or use conn.execute(...) "
            "without keeping it), or run the next query on it before the snapshot"
        )
    conn = cursor.connection
    try:
        cursor.fetchone()  # no statement: only checks the cursor is open
        closed = False
    except sqlite3.ProgrammingError:  # a closed cursor or connection
        closed = True
    names = None if cursor.description is None else [d[0] for d in cursor.description]
    attrs = dict(getattr(cursor, "__dict__", {}))  # a subclass's own attributes
    return (
        _new_cursor,
        (type(cursor), conn, cursor.row_factory, cursor.arraysize, closed, names),
        attrs or None,
    )


@pinned("new_cursor")
def _new_cursor(
    cls: type[sqlite3.Cursor],
    conn: sqlite3.Connection,
    row_factory: _RowFactoryOptions,
    arraysize: int,
    closed: bool,
    names: list[str] | None = None,
) -> sqlite3.Cursor:
    cursor = cls.__new__(cls)
    usable = not closed
    try:
        sqlite3.Cursor.__init__(cursor, conn)
    except sqlite3.ProgrammingError:  # its connection was closed at the snapshot
        other = sqlite3.connect(":memory:")
        sqlite3.Cursor.__init__(cursor, other)
        other.close()
        usable = False
    if names and usable:
        # Its last query's description (column names; sqlite3 gives no types) comes back
        # by a query with the same columns and no rows: nothing is read or written.
        columns = ", ".join('NULL AS "' + n.replace('"', '""') + '"' for n in names)
        sqlite3.Cursor.execute(cursor, f"SELECT {columns} WHERE 0").fetchall()
    cursor.row_factory, cursor.arraysize = row_factory, arraysize
    if closed:
        cursor.close()
    return cursor


register_adapter(sqlite3.Cursor, _reduce_cursor, subclasses=True)


# ------------------------------------------------------------------------ csv
_CSV_WRITER = type(csv.writer(type("_Sink", (), {"write": lambda self, s: None})()))
_CSV_READER = type(csv.reader([]))
_DIALECT_FIELDS = (
    "delimiter",
    "quotechar",
    "escapechar",
    "doublequote",
    "skipinitialspace",
    "lineterminator",
    "quoting",
    "strict",
)


def _reduce_csv_writer(writer: Writer) -> Reduced:
    # The C writer keeps its file's bound `write` method but does not expose it: the
    # garbage collector's view of the writer does (CPython 3.11-3.13).
    target = next(
        (
            getattr(r, "__self__", None)
            for r in gc.get_referents(writer)
            if getattr(r, "__name__", None) == "write" and getattr(r, "__self__", None) is not None
        ),
        None,
    )
    if target is None:
        raise pickle.PicklingError(
            "a csv.writer writing through something other than a file object's write method "
            "(e.g. a NamedTemporaryFile wrapper) cannot be rebuilt; create the writer again "
            "after snapshot(), or write to a file from open()"
        )
    dialect = {field: getattr(writer.dialect, field) for field in _DIALECT_FIELDS}
    if _std_stream(target):  # writes on to the resumed process's stdout
        return (_new_csv_writer_on_std, (_std_stream(target), dialect))
    return (_new_csv_writer, (target, dialect))


@pinned("new_csv_writer_on_std")
def _new_csv_writer_on_std(name: str, dialect: dict[str, Any]) -> Writer:
    return csv.writer(getattr(sys, name), **dialect)


@pinned("new_csv_writer")
def _new_csv_writer(target: Any, dialect: dict[str, Any]) -> Writer:
    return csv.writer(target, **dialect)


def _refuse_csv_reader(reader: object) -> NoReturn:
    raise pickle.PicklingError(
        "a csv.reader cannot be saved (its position in the input and line_num cannot be "
        "restored); read the rows (rows = list(reader)) before snapshot(), or create the "
        "reader after it"
    )


register_adapter(_CSV_WRITER, _reduce_csv_writer)
register_adapter(_CSV_READER, _refuse_csv_reader)
register_kind("_csv.writer", "a csv.writer", None)
register_kind("_csv.reader", "a csv.reader", None)


# ------------------------------------------------------------------------ executors, futures
_WORKER_CODE = concurrent.futures.thread._worker.__code__


def _busy(pool: concurrent.futures.ThreadPoolExecutor) -> bool:
    """Work queued or running in the pool: an item in its queue, or a worker thread that
    is not waiting in its loop for the next item (a waiting worker's innermost Python
    frame is the pool's own _worker, blocked in the queue's C get; a running one is
    deeper, in the work). Sampled until it holds twice in a row, for up to 0.2 s: a
    worker that just took an item is for an instant still in _worker."""
    deadline = time.monotonic() + 0.2
    idle_before = False
    while True:
        alive = [t for t in pool._threads if t.is_alive()]
        if pool._shutdown:  # its queue holds the wake-up sentinel
            busy = bool(alive)
        else:
            frames = sys._current_frames()
            busy = not pool._work_queue.empty() or any(
                (frame := frames.get(t.ident)) is not None and frame.f_code is not _WORKER_CODE
                for t in alive
                if t.ident is not None
            )
        if not busy and idle_before:
            return False
        idle_before = not busy
        if busy and time.monotonic() > deadline:
            return True
        time.sleep(0.002)


def _reduce_thread_pool(pool: concurrent.futures.ThreadPoolExecutor) -> Reduced:
    if _busy(pool):
        raise pickle.PicklingError(
            "the ThreadPoolExecutor has work queued or running at the snapshot; wait for its "
            "futures (future.result(), or concurrent.futures.wait()) before snapshot(): "
            "work in its threads cannot continue in another process"
        )
    config = {
        "max_workers": pool._max_workers,
        "thread_name_prefix": pool._thread_name_prefix,
        "initializer": pool._initializer,
        "initargs": pool._initargs,
    }
    return (_new_thread_pool, (type(pool), config, pool._shutdown, pool._broken))


@pinned("new_thread_pool")
def _new_thread_pool(
    cls: type[concurrent.futures.ThreadPoolExecutor],
    config: dict[str, Any],
    shutdown: bool,
    broken: bool | str,
) -> concurrent.futures.ThreadPoolExecutor:
    """A new executor (threads start on the first submit, as in any new process)."""
    pool = cls(**config)
    pool._broken = broken  # type: ignore[assignment]  # False or a message (typeshed: bool)
    if shutdown:
        pool.shutdown()
    return pool


def _reduce_future(future: concurrent.futures.Future[Any]) -> Reduced:
    if not future.done():
        raise pickle.PicklingError(
            "a concurrent.futures Future is still pending or running at the snapshot; wait "
            "for it (result = future.result()) before snapshot() and keep the result: its "
            "work cannot continue in another process"
        )
    # object.__reduce_ex__: a tuple at protocol 2 and above (typeshed: str | tuple)
    return cast(Reduced, future.__reduce_ex__(pickle.DEFAULT_PROTOCOL))


register_adapter(concurrent.futures.ThreadPoolExecutor, _reduce_thread_pool)
register_adapter(concurrent.futures.Future, _reduce_future, subclasses=True)
