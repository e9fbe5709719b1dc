"""Adapters: how the pickler saves live objects an agent opened without resource().

    file objects from open()   path, mode, position, encoding; a writable file
                               is flushed and fsynced at the snapshot; on restore it is
                               reopened at its position without truncation (a "w" file is
                               not emptied); an append-mode file is cut back to its size
                               at the snapshot, since what followed is written again by
                               the re-executed code. A closed file restores closed.
    sqlite3.Connection         reopened by path; refused inside an open transaction
    httpx/httpx2 clients,      rebuilt from their whole configuration, subclasses too
    requests.Session           (resources/_requests.py; loaded only once the library is imported)
    tempfile.TemporaryDirectory  the same directory, recreated if missing
    tempfile.NamedTemporaryFile  the same path reopened at its position, still deleted
                               on close (ResourceReopenError if it is gone)
    logging handlers, loggers, sqlite3.Cursor, csv.writer: see resources._stdlib

In a replay (`scratch_copies(directory)`, used by Job.replay) the writable files,
sqlite3 databases and temp directories these adapters reopen are scratch copies made
in `directory`: the originals are never truncated or written (a file open only for
reading is read in place).

Handles that hold a live connection or thread (sockets, locks, threads, subprocesses,
streaming responses) are refused, naming the path to them and suggesting resource().
register_adapter(cls, reduce) adds an adapter: reduce(obj) returns a pickle reduce
tuple (callable, args) that reopens the object. A reduce function with a `parts`
attribute (obj -> [(".attr", value), ...], what it saves) lets a refusal point at the
part inside obj that cannot be saved; otherwise obj itself is named.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import pickle
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from types import NotImplementedType
from typing import IO, TYPE_CHECKING, Any, NoReturn, TextIO, TypedDict, TypeVar, cast

from .._abi import pinned
from ..serializers import _dispatch
from ._registry import ResourceReopenError

if TYPE_CHECKING:
    from sqlite3 import _IsolationLevel, _RowFactoryOptions  # typeshed's own aliases

__all__ = [
    "register_adapter",
    "register_optional",
    "reducer_for",
    "UNTRACKED",
    "scratch_copies",
    "scratch_opens",
    "scratch_path",
]

T = TypeVar("T")

# What an adapter returns: a pickle reduce tuple (callable, args[, state, listitems,
# dictitems, state_setter]); an internal adapter may also return NotImplemented (numpy:
# an array owning its data is left to the pickler's usual path).
Reduced = tuple[Any, ...]
# An adapter takes the object of its registered type (any type: Any).
Reducer = Callable[[Any], Reduced | NotImplementedType]

_ADAPTERS: dict[type, Reducer] = {}
_SUBCLASS_ADAPTERS: dict[type, Reducer] = {}  # adapters that also take subclasses
_RESOLVED: dict[type, Reducer | None] = {}  # type -> adapter found through its MRO

# Adapters for optional libraries, loaded only once the agent imported the library
# (snapstate never imports them itself): module name -> function registering them.
OPTIONAL_LOADERS: dict[str, Callable[[], None]] = {}
_OPTIONAL_LOADED: set[str] = set()

# Live handles no adapter can reopen faithfully: refused with a pointer to resource().
UNTRACKED: dict[type, str] = {
    socket.socket: "a socket",
    threading.Thread: "a thread",
    subprocess.Popen: "a subprocess",
}


def register_adapter(
    cls: type[T], reduce: Callable[[T], tuple[Any, ...]], *, subclasses: bool = False
) -> None:
    """Teach the pickler to save objects of type `cls`: reduce(obj) returns
    (callable, args); callable(*args) reopens the object after a restore.

    subclasses=True: the adapter also saves instances of subclasses of `cls` (the
    closest registered class in the MRO wins); reduce must then rebuild type(obj)."""
    _ADAPTERS[cls] = reduce
    if subclasses:
        _SUBCLASS_ADAPTERS[cls] = reduce
    else:
        _SUBCLASS_ADAPTERS.pop(cls, None)
    _RESOLVED.clear()
    _dispatch.adapters_changed()


def register_optional(module: str, loader: Callable[[], None]) -> None:
    """Call loader() (which registers adapters) once `module` has been imported."""
    OPTIONAL_LOADERS[module] = loader
    _OPTIONAL_LOADED.discard(module)


def _refuse(obj: object, what: str) -> NoReturn:
    raise pickle.PicklingError(f"{what} is a live handle that cannot be saved in a snapshot")


def _refuse_as(obj: object, what: str) -> NoReturn:
    _refuse(obj, what)


def _load_optional() -> None:
    """Register the adapters of optional libraries the agent has imported since."""
    for module, loader in list(OPTIONAL_LOADERS.items()):
        if module not in _OPTIONAL_LOADED and module in sys.modules:
            _OPTIONAL_LOADED.add(module)
            loader()
            _RESOLVED.clear()
            _dispatch.adapters_changed()


def reducer_for(t: type) -> Reducer | None:
    """The adapter for objects of type t (an exact registration, else the closest
    subclass-accepting registration in t's MRO), or None."""
    hit = _ADAPTERS.get(t)
    if hit is not None:
        return hit
    what = UNTRACKED.get(t)
    if what is not None:
        return lambda obj: _refuse(obj, what)
    try:
        return _RESOLVED[t]
    except KeyError:
        pass
    _load_optional()  # a type seen for the first time: its library may be new
    found = _ADAPTERS.get(t)
    if found is None:
        for base in t.__mro__[1:]:
            found = _SUBCLASS_ADAPTERS.get(base)
            if found is not None:
                break
            untracked = UNTRACKED.get(base)  # a subclass of a live handle (a library's Thread)
            if untracked is not None:
                found = partial(_refuse_as, what=untracked)
                break
    _RESOLVED[t] = found
    return found


# The pickler takes its adapters from reducer_for, and never saves an UNTRACKED handle
# by value in any fallback (serializers/_dispatch.py: it imports nothing from here).
_dispatch.register_adapters(reducer_for, tuple(UNTRACKED))


# ------------------------------------------------------------------------ scratch
_SCRATCH: dict[str, str] = {}  # "dir": the scratch directory of a replay; path -> its copy


@contextlib.contextmanager
def scratch_copies(directory: str) -> Iterator[None]:
    """While active, adapters reopen scratch copies (see scratch_path), never originals."""
    previous = dict(_SCRATCH)
    _SCRATCH.clear()
    _SCRATCH["dir"] = os.path.abspath(directory)
    try:
        yield
    finally:
        _SCRATCH.clear()
        _SCRATCH.update(previous)


def scratch_path(path: str, suffixes: tuple[str, ...] = ("",)) -> str:
    """`path` itself, or in a replay its scratch copy (the file or directory copied on
    first use, with `path + suffix` for each suffix, e.g. a database's -wal; a path
    that does not exist stays missing in the scratch directory too)."""
    root = _SCRATCH.get("dir")
    if root is None:
        return path
    path = os.path.abspath(path)
    copy = _SCRATCH.get(path)
    if copy is None:
        copy = os.path.join(root, path.lstrip(os.sep))
        os.makedirs(os.path.dirname(copy), exist_ok=True)
        for suffix in suffixes:
            if os.path.isdir(path + suffix):
                shutil.copytree(path + suffix, copy + suffix, symlinks=True)
            elif os.path.exists(path + suffix):
                shutil.copy2(path + suffix, copy + suffix)
        _SCRATCH[path] = copy
    return copy


def _under_scratch(path: str) -> bool:
    root = _SCRATCH.get("dir")
    return root is not None and (path == root or path.startswith(root + os.sep))


def _scratch_target(file: object, writes: bool, suffixes: tuple[str, ...] = ("",)) -> object:
    """`file` as scratch_opens() opens it: a path written (or already copied) outside
    the scratch directory -> its scratch copy; anything else (a descriptor, a read,
    a path in the scratch directory) as it is."""
    if _SCRATCH.get("dir") is None or not isinstance(file, (str, bytes, os.PathLike)):
        return file
    path = os.path.abspath(os.fsdecode(file))
    if _under_scratch(path) or not (writes or path in _SCRATCH):
        return file
    return scratch_path(path, suffixes)


_REAL_OPEN: Callable[..., Any] = io.open
_REAL_CONNECT: Callable[..., Any] = sqlite3.connect


def _open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    writes = isinstance(mode, str) and any(c in mode for c in "wax+")
    return _REAL_OPEN(_scratch_target(file, writes), mode, *args, **kwargs)


def _connect(database: Any, *args: Any, **kwargs: Any) -> Any:
    if database in (":memory:", "", b":memory:", b"") or kwargs.get("uri"):
        return _REAL_CONNECT(database, *args, **kwargs)
    target = _scratch_target(database, True, ("", "-wal", "-journal"))
    return _REAL_CONNECT(target, *args, **kwargs)


# Saved by reference as what they replace (a snapshot() in the sandbox pickles them as
# builtins.open and sqlite3.connect, which they are while they are in place).
_open.__module__, _open.__qualname__, _open.__name__ = "builtins", "open", "open"
_connect.__module__, _connect.__qualname__, _connect.__name__ = "sqlite3", "connect", "connect"


@contextlib.contextmanager
def scratch_opens() -> Iterator[None]:
    """While active (in a replay, within scratch_copies), the files the job's code opens
    itself for writing with open() (io.open, pathlib, codecs) and the databases it opens
    with sqlite3.connect (a resource() factory reopening a handle, or any later call)
    are scratch copies too: the originals are never written. What it writes through
    the os module (os.open, os.remove, os.rename...) or a subprocess is not redirected."""
    builtins.open = io.open = _open
    sqlite3.connect = _connect
    try:
        yield
    finally:
        builtins.open = io.open = _REAL_OPEN
        sqlite3.connect = _REAL_CONNECT


# ------------------------------------------------------------------------ locks
# A lock nobody holds is all its state: it comes back as a new unheld lock (one object
# for every reference, as any object). Condition variables, semaphores and events are
# plain Python objects around such locks and pickle with them. A held lock is refused:
# its holder (this task inside a `with lock:`, or another thread) does not come back.
_LOCK_TYPE, _RLOCK_TYPE = type(threading.Lock()), type(threading.RLock())


def _reduce_lock(lock: threading.Lock | threading.RLock) -> tuple[Callable[[], object], tuple[()]]:
    if isinstance(lock, _RLOCK_TYPE) and lock._is_owned():  # type: ignore[attr-defined]  # private
        raise pickle.PicklingError(
            "a lock (threading.RLock) is held by the agent at the snapshot; leave the "
            "`with lock:` block (release it) before snapshot()"
        )
    if not lock.acquire(blocking=False):
        raise pickle.PicklingError(
            "a lock is held at the snapshot (by the agent or by another thread); release it "
            "before snapshot(): a lock's holder cannot be restored"
        )
    lock.release()
    return (threading.RLock if isinstance(lock, _RLOCK_TYPE) else threading.Lock, ())


register_adapter(_LOCK_TYPE, _reduce_lock)
register_adapter(_RLOCK_TYPE, _reduce_lock)


# ------------------------------------------------------------------------ files
class _TextArgs(TypedDict, total=False):
    encoding: str
    errors: str | None


def _reduce_file(f: IO[Any]) -> Reduced:
    name, mode = getattr(f, "name", None), getattr(f, "mode", "r")
    if f.closed:
        return (_closed_file, (type(f), name, mode))
    if not isinstance(name, str):
        _refuse(f, f"a file opened from file descriptor {name!r}")
    binary = isinstance(f, (io.BufferedIOBase, io.RawIOBase))
    if f.writable():
        f.flush()
        os.fsync(f.fileno())
    position = f.tell()
    # A C TextIOWrapper does not expose its newline argument: text files reopen with
    # universal newlines (open a file through resource() to keep another setting).
    text: _TextArgs = (
        {} if binary else {"encoding": cast(TextIO, f).encoding, "errors": cast(TextIO, f).errors}
    )
    return (
        _reopen_file,
        (_open_path(f, name, mode), mode, position, binary, text, isinstance(f, io.FileIO)),
    )


def _open_path(f: IO[Any], name: str, mode: str) -> str:
    """The absolute path of the file `f` has open. A relative name is relative to the
    cwd at open(), which may have changed since (os.chdir): the candidate paths (the
    name against today's cwd, the descriptor's link in /proc) are kept only if they
    are the very file open (same device and inode), else the snapshot is refused:
    reopening another file would truncate and write it."""
    opened = os.fstat(f.fileno())
    candidates = [os.path.abspath(name)]
    with contextlib.suppress(OSError):
        candidates.append(os.readlink(f"/proc/self/fd/{f.fileno()}"))
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (opened.st_dev, opened.st_ino):
            return path
    raise pickle.PicklingError(
        f"file {name!r} (open with mode {mode!r}) is no longer reachable by its path: it was "
        f"deleted or renamed while open, or opened by a relative name before an os.chdir, so "
        f"{candidates[0]} is another file. Reopening it after a restore would read or write "
        "the wrong file; open the file by an absolute path that stays valid, or close it "
        "before snapshot()"
    )


@pinned("reopen_file")
def _reopen_file(
    path: str, mode: str, position: int, binary: bool, text: _TextArgs, raw: bool
) -> IO[Any]:
    plus = "+" in mode
    writable = plus or any(c in mode for c in "awx")
    original, path = path, scratch_path(path) if writable else path  # a reader reads it
    if "a" in mode:
        try:
            if os.path.getsize(path) > position:
                os.truncate(path, position)  # written after the snapshot: written again
        except FileNotFoundError:
            raise ResourceReopenError(_gone(original, mode)) from None
        reopen = mode
    elif "w" in mode or "x" in mode:
        reopen = "r+"  # never truncate: it is the same file
    else:
        reopen = "r+" if plus else "r"
    if binary and "b" not in reopen:
        reopen += "b"
    try:
        f = open(path, reopen, buffering=0 if raw else -1, **text)
    except FileNotFoundError:
        raise ResourceReopenError(_gone(original, mode)) from None
    except OSError as exc:
        raise ResourceReopenError(
            f"file {original} (mode {mode!r}) could not be reopened: "
            f"{exc.strerror}. The snapshot is intact: fix the cause and "
            "resume the job again."
        ) from None
    if "a" not in reopen:
        f.seek(position)
    return f


def _gone(path: str, mode: str) -> str:
    return (
        f"file {path} (open with mode {mode!r} at the snapshot) no longer exists, so it "
        "cannot be reopened. The snapshot is intact: put the file back and resume the job "
        "again."
    )


@pinned("closed_file")
def _closed_file(kind: type, name: object, mode: str) -> IO[Any]:
    """A closed file object of the same type, name and mode."""
    # Any: its class (and so its attributes) depends on mode and buffering.
    f: Any = open(os.devnull, mode.replace("x", "w"), buffering=0 if kind is io.FileIO else -1)
    raw = f if kind is io.FileIO else (f.buffer.raw if hasattr(f, "buffer") else f.raw)
    raw.name = name
    if isinstance(f, io.TextIOWrapper):
        f.mode = mode  # type: ignore[misc]  # settable (typeshed: read-only)
    f.close()
    return cast(IO[Any], f)


_kind: type[IO[Any]]
for _kind in (io.FileIO, io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper):
    register_adapter(_kind, _reduce_file)


# ------------------------------------------------------------------------ sqlite3
def _reduce_sqlite(conn: sqlite3.Connection) -> Reduced:
    try:
        path = conn.execute("PRAGMA database_list").fetchone()[2]
    except sqlite3.ProgrammingError:  # closed
        return (_closed_sqlite, ())
    if conn.in_transaction:
        raise pickle.PicklingError(
            f"the sqlite3 connection to {path or ':memory:'} is inside an open transaction; "
            "commit or roll back before snapshot() (a transaction cannot outlive its "
            "process)"
        )
    if not path:
        raise pickle.PicklingError(
            "an in-memory sqlite3 database cannot be reopened after a restore; use a database file"
        )
    return (_reopen_sqlite, (path, conn.isolation_level, conn.row_factory))


@pinned("reopen_sqlite")
def _reopen_sqlite(
    path: str, isolation_level: _IsolationLevel, row_factory: _RowFactoryOptions
) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise ResourceReopenError(
            f"sqlite3 database {path} no longer exists, so its "
            "connection cannot be reopened. The snapshot is intact: put "
            "it back and resume the job again."
        )
    conn = sqlite3.connect(
        scratch_path(path, ("", "-wal", "-journal")), isolation_level=isolation_level
    )
    conn.row_factory = row_factory
    return conn


@pinned("closed_sqlite")
def _closed_sqlite() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.close()
    return conn


register_adapter(sqlite3.Connection, _reduce_sqlite)


# ------------------------------------------------------------------------ tempfile
def _reduce_tempdir(
    td: tempfile.TemporaryDirectory[str],
) -> tuple[Callable[[str], tempfile.TemporaryDirectory[str]], tuple[str]]:
    return (_reopen_tempdir, (td.name,))


@pinned("reopen_tempdir")
def _reopen_tempdir(name: str) -> tempfile.TemporaryDirectory[str]:
    name = scratch_path(name)
    os.makedirs(name, exist_ok=True)
    td: tempfile.TemporaryDirectory[str] = object.__new__(tempfile.TemporaryDirectory)
    td.name = name
    # What TemporaryDirectory.__init__ sets (private: not in typeshed).
    td._ignore_cleanup_errors = False  # type: ignore[attr-defined]
    td._delete = True  # type: ignore[attr-defined]
    td._finalizer = weakref.finalize(td, shutil.rmtree, name, True)  # type: ignore[attr-defined]
    return td


register_adapter(tempfile.TemporaryDirectory, _reduce_tempdir)


# A NamedTemporaryFile is a wrapper around a file object: it reopens as the same path
# at its position, with its delete (and delete-on-close) behaviour kept, so the file
# is removed when the resumed agent closes it or ends, as it would have been.
def _reduce_named_temp(w: tempfile._TemporaryFileWrapper[Any]) -> Reduced:
    closer = getattr(w, "_closer", None)
    delete = getattr(closer, "delete", getattr(w, "delete", True))
    delete_on_close = getattr(closer, "delete_on_close", True)
    if w.file.closed:
        return (_closed_named_temp, (w.name, w.file.mode))
    reduced = _reduce_file(w.file)
    if reduced[0] is not _reopen_file:
        _refuse(w, "a temporary file without a path")
    return (_reopen_named_temp, (reduced[1], delete, delete_on_close))


def _named_temp_wrapper(
    f: IO[Any], name: str, delete: bool, delete_on_close: bool
) -> tempfile._TemporaryFileWrapper[Any]:
    if sys.version_info >= (3, 12):
        return tempfile._TemporaryFileWrapper(f, name, delete, delete_on_close)
    else:  # an else: mypy checks each version's branch on its own
        return tempfile._TemporaryFileWrapper(f, name, delete)


@pinned("reopen_named_temp")
def _reopen_named_temp(
    file_args: tuple[str, str, int, bool, _TextArgs, bool], delete: bool, delete_on_close: bool
) -> tempfile._TemporaryFileWrapper[Any]:
    path, mode = file_args[0], file_args[1]
    if not os.path.exists(path):
        raise ResourceReopenError(
            f"temporary file {path} (a NamedTemporaryFile open with mode {mode!r} at the "
            "snapshot) no longer exists, so it cannot be reopened. The snapshot is intact: "
            "put the file back and resume the job again."
        )
    f = _reopen_file(*file_args)
    # In a replay `f` is a scratch copy: the wrapper deletes that copy on close, never
    # the original.
    return _named_temp_wrapper(f, getattr(f, "name", path), delete, delete_on_close)


@pinned("closed_named_temp")
def _closed_named_temp(name: str, mode: str) -> tempfile._TemporaryFileWrapper[Any]:
    """A closed NamedTemporaryFile: its file is closed and already cleaned up."""
    f = _closed_file(io.BufferedRandom if "b" in mode else io.TextIOWrapper, name, mode)
    w = _named_temp_wrapper(f, name, False, False)
    w._closer.close_called = w._closer.cleanup_called = True
    return w


register_adapter(tempfile._TemporaryFileWrapper, _reduce_named_temp)


# ------------------------------------------------------------------------ HTTP clients
# httpx/httpx2 clients, their auths, responses and cookies: _http.py; requests: _requests.py
# (registered with register_optional, once the agent imported the library).
# Standard-library adapters (logging handlers and loggers, sqlite3 cursors, csv writers)
# live in their own module; importing it registers them.
from . import _frameworks, _http, _python, _requests, _stdlib  # noqa: E402,F401
