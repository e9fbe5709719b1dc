"""snapstate.resources: handles closed before a snapshot and reopened after a restore
(resource()), and the adapters that save open files, sqlite3 connections, HTTP
clients and temporary directories without wrapping."""

from . import _numpy  # noqa: F401  (registers the numpy adapter, loaded once numpy is imported)
