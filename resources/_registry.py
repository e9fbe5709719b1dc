"""Resources: handles that cannot be pickled, closed before a snapshot and reopened
after a restore.

`resource(factory)` returns a Handle that proxies the object factory() returns. Before
every snapshot the runtime closes every open handle (a writable file is flushed and
fsynced first); the next use reopens it by calling the factory again, in this
process or in the one that resumes the job. A handle pickles as its factory, and one
handle shared by several frames or tasks is one object after a restore: reopened once.

Objects an agent opens without wrapping (files from open(), sqlite3 connections,
httpx and requests clients, tempfile directories) are taken care of by adapters the
pickler finds by type (see _adapters); users add their own with register_adapter().
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from .._abi import pinned
from .._errors import ResourceReopenError

__all__ = ["resource", "Handle", "ResourceReopenError", "close_all_for_snapshot"]


_LIVE: weakref.WeakSet[Handle] = weakref.WeakSet()
_LOCK = threading.Lock()

T = TypeVar("T")


def _describe(factory: object) -> str:
    name = getattr(factory, "__qualname__", None) or repr(factory)
    module = getattr(factory, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else name


@pinned("Handle")
class Handle:
    """A proxy to a live resource; see resource()."""

    __slots__ = ("_factory", "_close", "_name", "_obj", "__weakref__")

    # The object the factory returns is the user's, of any type.
    _factory: Callable[[], Any]
    _close: Callable[[Any], object] | None
    _name: str
    _obj: Any

    def __init__(
        self,
        factory: Callable[[], Any],
        close: Callable[[Any], object] | None = None,
        name: str | None = None,
    ) -> None:
        object.__setattr__(self, "_factory", factory)
        object.__setattr__(self, "_close", close)
        object.__setattr__(self, "_name", name or _describe(factory))
        object.__setattr__(self, "_obj", None)

    # ------------------------------------------------------------ life cycle
    def _open(self) -> Any:
        obj = self._obj
        if obj is None:
            try:
                obj = self._factory()
            except Exception as exc:
                raise ResourceReopenError(
                    f"resource {self._name!r} could not be (re)opened: its factory "
                    f"{_describe(self._factory)}() raised {type(exc).__name__}: {exc}. The "
                    "snapshot is intact: fix the cause and resume the job again."
                ) from exc
            object.__setattr__(self, "_obj", obj)
            with _LOCK:
                _LIVE.add(self)
        return obj

    def _release(self) -> None:
        """Close the live object (flushing and fsyncing a writable file first)."""
        obj = self._obj
        if obj is None:
            return
        object.__setattr__(self, "_obj", None)
        with _LOCK:
            _LIVE.discard(self)
        flush = getattr(obj, "flush", None)
        if callable(flush) and not getattr(obj, "closed", False):
            flush()
            fileno = getattr(obj, "fileno", None)
            if callable(fileno) and getattr(obj, "writable", lambda: False)():
                os.fsync(fileno())
        if self._close is not None:
            self._close(obj)
        else:
            closer = getattr(obj, "close", None)
            if callable(closer):
                closer()

    @property
    def resource_is_open(self) -> bool:
        return self._obj is not None

    # ------------------------------------------------------------ proxying
    def __getattr__(self, name: str) -> Any:
        return getattr(self._open(), name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(self._open(), name, value)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._open())

    def __enter__(self) -> Any:
        return self._open().__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self._open().__exit__(*exc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._open()(*args, **kwargs)

    def __repr__(self) -> str:
        state = "open" if self._obj is not None else "closed until used"
        return f"<resource {self._name!r} ({state})>"

    def __reduce__(
        self,
    ) -> tuple[type[Handle], tuple[Callable[[], Any], Callable[[Any], object] | None, str]]:
        return (Handle, (self._factory, self._close, self._name))


def resource(
    factory: Callable[[], T],
    *,
    close: Callable[[T], object] | None = None,
    name: str | None = None,
) -> T:
    """A handle to what factory() returns: closed before every snapshot, reopened on
    first use afterwards (after a restore: by calling factory() in the new process).

    close: how to close it (default: its close() method). name: for messages.

    Typed as the factory's result: the handle stands in for it (attribute access,
    iteration, `with` and calls reach the live object). It is a proxy, not an instance
    (isinstance() and operators such as `h[0]` see the Handle)."""
    if not callable(factory):
        raise TypeError("resource() takes a factory: a function that opens the resource")
    return cast(T, Handle(factory, close, name))  # a proxy typed as what it stands for


def close_all_for_snapshot() -> None:
    """Close every open handle before a snapshot; they reopen on next use."""
    with _LOCK:
        handles = list(_LIVE)
    for handle in handles:
        handle._release()
